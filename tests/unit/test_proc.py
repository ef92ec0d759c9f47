"""The one subprocess helper, stop signals that are never lost, and the local executor."""

import os
import signal
import sys
import time

import pytest

from bloatlab import interrupts, proc
from bloatlab.errors import MachineError, SpecError
from bloatlab.lab.executors import Job, LocalExecutor, RunResult, executor


def test_run_returns_output_and_a_failure_names_the_command_and_its_last_line():
    assert proc.output([sys.executable, "-c", "print('hi')"]) == "hi\n"
    with pytest.raises(proc.CommandError) as error:
        proc.run([sys.executable, "-c", "import sys; sys.stderr.write('first\\nthe reason\\n'); sys.exit(3)"])
    assert error.value.returncode == 3
    assert str(error.value).endswith("failed: the reason") and sys.executable in str(error.value)
    unchecked = proc.run([sys.executable, "-c", "import sys; sys.exit(4)"], check=False)
    assert unchecked.returncode == 4


def test_a_missing_program_is_a_machine_error_not_a_traceback():
    with pytest.raises(MachineError, match="`bloatlab-no-such-tool` is not installed"):
        proc.run(["bloatlab-no-such-tool"])
    with pytest.raises(MachineError, match="is not installed"):
        proc.spawn(["bloatlab-no-such-tool"])


def test_a_command_that_outlives_its_timeout_is_killed_and_reaped():
    started = time.monotonic()
    with pytest.raises(proc.CommandError, match="timed out after 0.3 s"):
        proc.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.3)
    assert time.monotonic() - started < 5


def test_stop_signals_then_kills_and_reaps():
    polite = proc.spawn([sys.executable, "-c", "import time; time.sleep(30)"])
    assert proc.stop(polite, signal.SIGTERM, timeout_s=5) == -signal.SIGTERM
    stubborn = proc.spawn([sys.executable, "-c",
                           "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); "
                           "time.sleep(30)"], stdout=proc.subprocess.PIPE)
    stubborn.stdout.readline()  # its handler is in place
    assert proc.stop(stubborn, signal.SIGTERM, timeout_s=0.3) == -signal.SIGKILL
    assert not proc.alive(stubborn.pid, None)


def test_a_stop_signal_whose_exception_was_lost_is_raised_at_the_next_check():
    with interrupts.Interrupts() as stop:
        interrupts.check()  # nothing came
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler raises here
        except KeyboardInterrupt:
            pass  # what a finaliser or an at-fork hook would do: swallow it
        assert stop.received == signal.SIGTERM
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
        stop.cleaning = True
        interrupts.check()  # while cleaning up, signals are only noted
    interrupts.check()  # and nothing once it is over


def test_a_stop_lost_in_a_finaliser_is_not_reported_as_ignored_but_other_errors_there_are(monkeypatch):
    seen = []
    hook = lambda u: seen.append(u.exc_type)  # noqa: E731
    monkeypatch.setattr(sys, "unraisablehook", hook)

    class Finaliser:
        def __init__(self, error):
            self.error = error

        def __del__(self):
            if self.error is KeyboardInterrupt:
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(10_000):  # the handler raises at one of these steps
                    pass
            else:
                raise self.error

    with interrupts.Interrupts() as stop:
        Finaliser(KeyboardInterrupt)  # made and dropped: its __del__ runs here
        assert stop.received == signal.SIGTERM and seen == []
        Finaliser(ValueError)
        assert seen == [ValueError]  # not ours: reported as before
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
    assert sys.unraisablehook is hook  # given back


def test_a_stop_signal_while_a_command_starts_is_raised_once_the_command_has_finished(tmp_path, monkeypatch):
    # Raised inside subprocess.Popen, the interrupt would orphan the child: it would go on to
    # make what it makes (a namespace) after the interrupted caller had removed what it made.
    real_popen = proc.subprocess.Popen

    def popen_interrupted_midway(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)  # the handler runs here, as it would while Popen waits for the exec
        child = real_popen(*args, **kwargs)
        started.append(child)
        return child

    started = []
    monkeypatch.setattr(proc.subprocess, "Popen", popen_interrupted_midway)
    made = tmp_path / "made"
    with interrupts.Interrupts() as stop:
        with pytest.raises(KeyboardInterrupt):
            proc.run([sys.executable, "-c", f"import time, pathlib; time.sleep(0.3); pathlib.Path({str(made)!r}).touch()"])
        assert stop.received == signal.SIGINT
    # The command was let finish, and reaped, before the interrupt reached the caller.
    assert made.exists() and started[0].returncode == 0


def test_the_local_executor_runs_jobs_in_order_and_reports_failures(tmp_path):
    calls = []

    def run_one(values, rep, run_dir, tick):
        calls.append((values["q"], rep))
        tick(1.0)
        if values["q"] == 2:
            raise RuntimeError("broke")
        return RunResult(True, {"q": values["q"]})

    jobs = [Job({"q": q}, 1, tmp_path / str(q), f"q={q}") for q in (1, 2, 3)]
    ticks = []
    done = list(LocalExecutor().run(run_one, jobs, lambda i, job: lambda s: ticks.append((i, s))))
    assert calls == [(1, 1), (2, 1), (3, 1)] and ticks == [(1, 1.0), (2, 1.0), (3, 1.0)]
    assert [d.result.complete for d in done] == [True, False, True]
    assert isinstance(done[1].error, RuntimeError) and done[1].result.reason == "failed: broke"
    assert isinstance(executor("local"), LocalExecutor)
    with pytest.raises(SpecError, match="'ray' is not an executor; choose one of: local"):
        executor("ray")

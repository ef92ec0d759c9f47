"""The command line's conventions, on every subcommand: -v, -q, --json, the exit statuses in
--help, one JSON document on stdout, completion. Nothing here needs root."""

import argparse
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bloatlab.cli.common import EXIT_STATUSES
from bloatlab.cli.main import build_parser, main
from bloatlab.progress import Progress
from bloatlab.version import __version__

SRC = Path(__file__).resolve().parents[2] / "src"


def leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """Every runnable subcommand: (its words, its parser)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    for name, sub in subs[0].choices.items():
        yield from leaves(sub, (*path, name))


COMMANDS = list(leaves(build_parser()))


def test_the_commands_are_all_there():
    names = {" ".join(words) for words, _ in COMMANDS}
    assert names == {"up", "exec", "ls", "down", "clean", "doctor", "run", "sweep", "view", "presets", "plot", "compare", "report", "export", "calibrate",
                     "queues", "replay", "nic sweep", "nic restore", "nic serve", "bench link", "bench replay", "bench sim", "bench machine", "bench calibrate", "bench live", "bench soak",
                     "completion"}


@pytest.mark.parametrize("words, parser", COMMANDS, ids=[" ".join(w) for w, _ in COMMANDS])
def test_every_command_takes_v_q_json_and_states_its_exit_statuses(words, parser):
    options = {s for action in parser._actions for s in action.option_strings}
    assert {"-v", "--verbose", "-q", "--quiet", "--json"} <= options
    text = parser.format_help()
    assert EXIT_STATUSES in text and "examples:" in text
    for status in ("0 done", "1 the work ran but a check failed", "2 bad input", "3 this machine lacks",
                   "130 interrupted"):
        assert status in text, status


def run(argv, capsys):
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("argv", [["queues"], ["queues", "taildrop"], ["presets"], ["presets", "cs244"],
                                  ["completion", "bash"]])
def test_json_is_one_document_on_stdout(argv, capsys):
    status, out, err = run([*argv, "--json"], capsys)
    assert status == 0 and err == ""
    json.loads(out)  # the whole of stdout


def test_json_of_the_catalogue_and_a_preset(capsys):
    doc = json.loads(run(["queues", "--json"], capsys)[1])
    codel = next(d for d in doc["disciplines"] if d["name"] == "codel")
    assert {p["key"]: p["default"] for p in codel["params"]}["target"] == 5_000_000
    assert json.loads(run(["queues", "taildrop", "--json"], capsys)[1])["name"] == "droptail"  # by its alias
    preset = json.loads(run(["presets", "cs244", "--json"], capsys)[1])
    assert {p["name"] for p in preset["params"]} >= {"maxq", "duration"}


def test_bad_input_is_status_2_with_a_json_error_document(capsys):
    status, out, err = run(["queues", "nosuch", "--json"], capsys)
    assert status == 2 and err.startswith("bloatlab: error: NAME: no discipline 'nosuch'")
    assert json.loads(out) == {"error": {"message": err.strip().removeprefix("bloatlab: error: NAME: "),
                                         "field": "NAME", "exit_status": 2}}
    status, out, err = run(["frobnicate", "--json"], capsys)  # before any command's parser: still a document
    assert status == 2 and json.loads(out)["error"]["exit_status"] == 2
    status, out, err = run(["queues", "nosuch"], capsys)  # without --json: stdout stays empty
    assert status == 2 and out == "" and err.count("\n") == 1


def test_a_missing_capability_is_status_3(monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    status, out, err = run(["clean", "--json"], capsys)
    assert status == 3 and "needs root" in err and json.loads(out)["error"]["exit_status"] == 3


def test_interrupted_is_status_130(monkeypatch, capsys):
    import bloatlab.cli.queues as queues

    def interrupted(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(queues, "render", lambda name: interrupted(None))
    status, out, err = run(["queues"], capsys)
    assert status == 130 and err == "bloatlab: interrupted\n"


def test_version_names_every_binary(capsys):
    status, out, _ = run(["--version"], capsys)
    lines = out.splitlines()
    assert status == 0 and lines[0] == f"bloatlab {__version__}"
    assert [line.split()[0] for line in lines[1:]] == ["bloatlab-link", "bloatlab-replay"]


def test_a_binary_of_another_version_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    old = tmp_path / "bloatlab-link"
    old.write_text("#!/bin/sh\necho bloatlab-link 0.1.9\n")
    old.chmod(0o755)
    monkeypatch.setenv("BLOATLAB_LINK", str(old))
    status, out, err = run(["--version"], capsys)
    assert status == 3 and err.count("\n") == 1
    assert f"{old} is bloatlab-link 0.1.9, but this bloatlab is {__version__}" in err


def complete(script: str, words: list[str]) -> list[str]:
    """What bash completes the last of `words` to, with the generated script loaded."""
    line = " ".join(words)
    probe = (f'{script}\nCOMP_WORDS=({" ".join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}; '
             f'COMP_LINE={line!r}; COMP_POINT={len(line)}; _shtab_bloatlab; printf "%s\\n" "${{COMPREPLY[@]}}"')
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_bash_completion_completes_commands_options_and_choices(capsys):
    status, script, _ = run(["completion", "bash"], capsys)
    assert status == 0
    assert complete(script, ["bloatlab", "ru"]) == ["run"]
    assert complete(script, ["bloatlab", "run", "--pre"]) == ["--preset"]
    assert complete(script, ["bloatlab", "nic", "sweep", "--js"]) == ["--json"]
    assert complete(script, ["bloatlab", "completion", ""]) == ["bash", "zsh"]
    assert set(complete(script, ["bloatlab", "bench", ""])) == {"calibrate", "link", "live", "machine", "replay", "sim", "soak"}


def test_zsh_completion_is_a_compdef(capsys):
    status, script, _ = run(["completion", "zsh"], capsys)
    assert status == 0 and script.startswith("#compdef bloatlab")
    assert "--preset" in script and "replay" in script


def test_verbose_logs_each_command_and_other_libraries_stay_quiet(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-m", "bloatlab", "replay", "-v", "--queue", "discipline=droptail",
                           "--rate", "10mbit", "--synthetic", "poisson", "--pps", "100", "--packets", "10",
                           "--out", str(tmp_path / "r")], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "bloatlab.proc: spawn: " in done.stderr and "bloatlab-replay --config" in done.stderr
    assert "matplotlib" not in done.stderr
    quiet = subprocess.run([sys.executable, "-m", "bloatlab", "replay", "-q", "--queue", "discipline=droptail",
                            "--rate", "10mbit", "--synthetic", "poisson", "--pps", "100", "--packets", "10",
                            "--out", str(tmp_path / "q")], capture_output=True, text=True, env=env, timeout=120)
    assert quiet.returncode == 0 and quiet.stderr == ""


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_draws_a_bar_on_a_terminal_and_plain_lines_elsewhere(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr("bloatlab.progress.time.monotonic", lambda: now[0])
    tty = Terminal()
    bar = Progress(100.0, "sweep", stream=tty)
    now[0] += 30
    bar.update(25.0, "run 1/4")
    assert "\rsweep [#######-----------------------] 30 s elapsed, about 1:15 left run 1/4" in tty.getvalue()
    bar.finish()
    assert tty.getvalue().endswith("\r")

    log = io.StringIO()
    bar = Progress(100.0, "replay", stream=log, every_s=10)
    now[0] += 5
    bar.update(5.0)
    assert log.getvalue() == ""  # short work says nothing
    now[0] += 6
    bar.update(11.0)
    now[0] += 1
    bar.update(12.0)  # within every_s of the last line: none
    assert log.getvalue() == "replay: 11 s elapsed, about 1:29 left\n"
    bar.update_fraction(0.5)  # half done after 12 s: 12 s left
    assert bar.total_s == pytest.approx(24.0)


def test_the_command_line_starts_without_the_analysis_libraries():
    """Every command pays for what the CLI imports before it starts: pandas and matplotlib
    (half a second or more) come with the commands that read or draw, and Ray never unasked."""
    code = ("import sys; import bloatlab.cli.main as m; m.build_parser(); "
            "print(sorted({'pandas', 'matplotlib', 'numpy', 'ray'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(SRC)})
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("argv, says", [
    (["run", "--preset", "cs244", "--parallel", "2"], "add --sweep"),
    (["run", "--preset", "cs244", "--sweep", "maxq=20,100", "--parallel", "0"], "from 1 to 16"),
    (["run", "--preset", "cs244", "--sweep", "maxq=20,100", "--parallel", "2", "--cluster", "h:1"], "give one of them"),
])
def test_parallel_runs_are_a_sweeps_and_not_beside_a_cluster(argv, says, capsys):
    status, out, err = run(argv, capsys)
    assert status == 2 and says in err and err.count("\n") == 1, err

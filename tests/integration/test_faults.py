"""Faults during a run, as they come on a real machine: the run killed outright, a workload's
tool or the datapath dying under it. After each, the run directory says what happened and
`bloatlab clean` leaves nothing (tests/conftest.py checks the namespaces after every test)."""

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from bloatlab.results.reader import load_sweep
from bloatlab.testbed import netns
from bloatlab.testbed.network import leftovers

pytestmark = pytest.mark.netns


@contextlib.contextmanager
def started_run(out: Path, *sets: str) -> Iterator[subprocess.Popen]:
    """`bloatlab run --preset cs244` (30 s unless `sets` say otherwise) into `out`; whatever the
    test does with it, it is killed and reaped at the end if it still runs."""
    proc = subprocess.Popen([sys.executable, "-m", "bloatlab", "run", "--preset", "cs244", "--set", "duration=30s",
                             *(arg for s in sets for arg in ("--set", s)), "--out", str(out), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def ends(proc: subprocess.Popen, timeout_s: float = 90) -> str:
    """Wait for the run to end by itself; its stderr."""
    return proc.communicate(timeout=timeout_s)[1]


def wait_for_pings(proc: subprocess.Popen, out: Path, count: int = 20) -> None:
    """Until the run's ping has `count` replies: its network is up and its load running."""
    ping = out / "raw" / "ping.ping.txt"
    deadline = time.monotonic() + 60
    while not ping.exists() or ping.read_text().count("time=") < count:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run's pings never came"
        time.sleep(0.2)


def pids_of(network: str, command: str) -> list[int]:
    """The processes named `command` in the namespaces of `network`."""
    found = []
    for ns in netns.list_namespaces():
        if ns.startswith(f"bloatlab.{network}."):
            for pid in netns.pids(ns):
                try:
                    if Path(f"/proc/{pid}/comm").read_text().strip() == command:
                        found.append(pid)
                except FileNotFoundError:
                    pass
    return found


def kill_one(pids: list[int]) -> bool:
    """SIGKILL the first of `pids` still there; whether one was."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            return True
        except ProcessLookupError:
            pass
    return False


def clean() -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "bloatlab", "clean"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done


def test_a_run_killed_outright_still_says_what_it_was_and_keeps_what_it_measured(tmp_path):
    out = tmp_path / "killed"
    with started_run(out) as proc:
        wait_for_pings(proc, out, count=50)
        # Written at the start, before anything was measured: spec, seeds, machine, tools; and
        # again at t0 with the clock the tools' stamps are read on.
        run = json.loads((out / "run.json").read_text())
        assert run["complete"] is False and run["incomplete_reason"].startswith("unfinished: started ")
        assert f"by process {proc.pid}" in run["incomplete_reason"] and run["owner"]["pid"] == proc.pid
        assert run["params"]["duration"] == "30s" and run["links"][0]["forward"]["seed"] is not None
        assert run["machine"]["kernel"] == os.uname().release and run["tools"]["iperf3"]
        assert run["t0_monotonic_s"] < time.monotonic() and run["probes"]["queue"] == {"s0->h2": "datapath"}
        proc.kill()  # SIGKILL: no handler runs, nothing is torn down
        proc.wait()
    network = json.loads((out / "run.json").read_text())["network"]
    assert network and leftovers(network)  # the dead run's network is still there ...
    done = clean()
    assert f"removed namespace bloatlab.{network}.h1" in done.stdout
    assert leftovers(network) == []  # ... until clean: an orphan, since its owner is gone
    assert not list(Path("/sys/kernel/tracing/instances").glob(f"bloatlab-{network}*"))
    assert not (out / "summary.json").exists()
    # What the tools wrote as they ran is kept, and the report makes the run's files of it.
    report = subprocess.run([sys.executable, "-m", "bloatlab", "report", str(out)], capture_output=True, text=True,
                            timeout=120)
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr
    assert report.stdout.startswith("recovered a run that ended without its results (ended at about "), report.stdout
    run = json.loads((out / "run.json").read_text())
    assert run["complete"] is False and run["incomplete_reason"].startswith("ended at about ")
    killed_at = float(run["incomplete_reason"].split()[3])
    assert 4.5 <= killed_at <= 20, run["incomplete_reason"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and abs(summary["duration_s"] - killed_at) < 0.05
    assert summary["rtt_ms"]["count"] >= 45 and summary["rtt_ms"]["median"] > 20  # 4 x 5 ms, and a queue
    assert summary["queue"]["s0->h2"]["max_pkts"] > 0 and summary["fetch_s"]["count"] >= 1
    rows = {name: (out / "series" / f"{name}.csv").read_text().splitlines()[1:]
            for name in ("ping", "queue", "cwnd", "throughput", "fetch")}
    assert all(rows.values()), {name: len(r) for name, r in rows.items()}
    assert max(float(r.split(",")[0]) for r in rows["ping"]) <= killed_at + 0.5
    assert list((out / "plots").glob("*.png")) and "ended at about" in (out / "report.html").read_text()
    # Recovered once: the second report only redraws.
    again = subprocess.run([sys.executable, "-m", "bloatlab", "report", str(out)], capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0 and not again.stdout.startswith("recovered"), again.stdout


@pytest.mark.parametrize("tool,argv_has", [("iperf3", "-c"), ("iperf3", "-s"), ("ping", "-D")],
                         ids=["iperf3-client", "iperf3-server", "ping"])
def test_a_workload_tool_that_dies_makes_the_run_incomplete(tmp_path, tool, argv_has):
    out = tmp_path / tool
    with started_run(out, "duration=12s") as proc:
        wait_for_pings(proc, out)
        network = json.loads((out / "run.json").read_text())["network"]
        victims = [pid for pid in pids_of(network, tool)
                   if argv_has.encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
        assert victims, f"no {tool} {argv_has} in the run"
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        stderr = ends(proc)
    assert "Traceback" not in stderr
    run = json.loads((out / "run.json").read_text())
    assert proc.returncode == 1 and run["complete"] is False, (proc.returncode, stderr)
    assert tool in run["incomplete_reason"] or any(tool in e for e in run["errors"]), run["incomplete_reason"]
    assert leftovers(network) == []


def test_a_datapath_that_dies_makes_the_run_incomplete(tmp_path):
    out = tmp_path / "datapath"
    with started_run(out, "duration=12s") as proc:
        wait_for_pings(proc, out)
        network = json.loads((out / "run.json").read_text())["network"]
        [datapath] = pids_of(network, "bloatlab-link")
        os.kill(datapath, signal.SIGKILL)
        stderr = ends(proc)
    assert "Traceback" not in stderr
    run = json.loads((out / "run.json").read_text())
    assert proc.returncode == 1 and run["complete"] is False, (proc.returncode, stderr)
    assert "datapath" in run["incomplete_reason"] or "bloatlab-link" in run["incomplete_reason"], run
    assert leftovers(network) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_ends_a_run_as_ctrl_c_does(tmp_path, sig):
    out = tmp_path / "stopped"
    with started_run(out) as proc:
        wait_for_pings(proc, out)
        proc.send_signal(sig)
        stderr = ends(proc)
    run = json.loads((out / "run.json").read_text())
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    assert run["complete"] is False and "interrupted at" in run["incomplete_reason"]
    assert leftovers(run["network"]) == [] and (out / "summary.json").exists()


def test_a_run_killed_while_its_network_is_built_leaves_only_what_clean_removes(tmp_path):
    out = tmp_path / "early"
    with started_run(out) as proc:
        wait_for(out / "run.json", proc)  # written before anything is built, with the network's name
        network = json.loads((out / "run.json").read_text())["network"]
        # Its own namespaces: another run's (a developer's, beside the tests) would not do. Not
        # its state directory alone: killed between making it and writing the state file in it,
        # the run leaves a directory `clean` cannot yet tell from a claim under way (it waits a
        # minute, UNREGISTERED_AGE_S).
        deadline = time.monotonic() + 30
        while not any(ns.startswith(f"bloatlab.{network}.") for ns in netns.list_namespaces()):
            assert time.monotonic() < deadline and proc.poll() is None, "the run built nothing"
            time.sleep(0.005)
        proc.kill()
        proc.wait()
    run = json.loads((out / "run.json").read_text())
    assert run["complete"] is False and run["network"] == network and network.startswith("run-")
    clean()
    assert leftovers(network) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_while_the_network_is_built_removes_it_at_once(tmp_path, sig):
    out = tmp_path / "early"
    with started_run(out) as proc:
        wait_for(out / "run.json", proc)  # written before anything is built, with the network's name
        network = json.loads((out / "run.json").read_text())["network"]
        deadline = time.monotonic() + 30
        while not leftovers(network):
            assert time.monotonic() < deadline and proc.poll() is None, "the run built nothing"
            time.sleep(0.005)
        proc.send_signal(sig)
        stderr = ends(proc)
    run = json.loads((out / "run.json").read_text())
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    assert run["complete"] is False and run["incomplete_reason"] == "interrupted at 0.0 s of 30 s"
    assert leftovers(network) == []


def wait_for(path: Path, proc: subprocess.Popen, timeout_s: float = 30) -> None:
    """Until the run writes `path` (whole: it writes a file then renames it)."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline and proc.poll() is None, f"{path} never came"
        time.sleep(0.005)


def until_its_results_are_written(proc: subprocess.Popen, out: Path) -> None:
    """Until the run's network is gone: its schedule is over, and it writes its results."""
    wait_for_pings(proc, out, count=5)
    network = json.loads((out / "run.json").read_text())["network"]
    deadline = time.monotonic() + 60
    while any(ns.startswith(f"bloatlab.{network}.") for ns in netns.list_namespaces()):
        assert time.monotonic() < deadline and proc.poll() is None, "the run never ended its schedule"
        time.sleep(0.005)


def test_ctrl_c_while_the_results_are_written_keeps_the_run_whole(tmp_path):
    out = tmp_path / "writing"
    with started_run(out, "duration=4s") as proc:
        until_its_results_are_written(proc, out)
        proc.send_signal(signal.SIGINT)  # the measurement is over: nothing is lost by finishing
        stderr = ends(proc)
    assert proc.returncode == 0 and "Traceback" not in stderr, stderr
    run = json.loads((out / "run.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert run["complete"] is True and summary["complete"] is True and summary["rtt_ms"]["count"] >= 30
    assert (out / "report.html").exists()


def test_a_run_killed_while_its_results_are_written_is_whole_or_recovered_never_half(tmp_path):
    out = tmp_path / "writing"
    with started_run(out, "duration=4s") as proc:
        until_its_results_are_written(proc, out)
        proc.kill()
        proc.wait()
    report = subprocess.run([sys.executable, "-m", "bloatlab", "report", str(out)], capture_output=True, text=True,
                            timeout=120)
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr
    run = json.loads((out / "run.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    # run.json is written last: complete means every other file is whole; otherwise the
    # report recovered the run from raw/, and it says so.
    assert run["complete"] is summary["complete"]
    assert run["complete"] or run["incomplete_reason"].startswith("ended at about "), run["incomplete_reason"]
    assert summary["rtt_ms"]["count"] >= 30 and (out / "series" / "queue.csv").stat().st_size > 100


def test_two_runs_into_one_out_the_second_is_refused_at_once(tmp_path):
    out = tmp_path / "one"
    with started_run(out, "duration=6s") as first:
        wait_for_pings(first, out, count=5)
        second = subprocess.run([sys.executable, "-m", "bloatlab", "run", "--preset", "cs244", "--set", "duration=6s",
                                 "--out", str(out), "--quiet"], capture_output=True, text=True, timeout=60)
        assert second.returncode == 2 and second.stderr.count("\n") == 1, second.stderr
        assert "--out" in second.stderr and "already holds a run" in second.stderr
        stderr = ends(first)
    assert first.returncode == 0, stderr
    assert json.loads((out / "run.json").read_text())["complete"] is True


@pytest.mark.parametrize("missing", ["iperf3", "curl"])
def test_a_missing_tool_is_named_before_anything_is_built(tmp_path, missing):
    bin_dir = tmp_path / "bin"  # every tool a run needs but one
    bin_dir.mkdir()
    for tool in {"ip", "tc", "ping", "curl", "iperf3", "ethtool", "ss", "sysctl", "nsenter"} - {missing}:
        for d in os.environ["PATH"].split(os.pathsep) + ["/usr/sbin", "/sbin"]:
            if (Path(d) / tool).exists():
                (bin_dir / tool).symlink_to(Path(d) / tool)
                break
    before = set(netns.list_namespaces())
    done = subprocess.run([sys.executable, "-m", "bloatlab", "run", "--preset", "cs244", "--out", str(tmp_path / "o"),
                           "--quiet"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": str(bin_dir)})
    assert done.returncode == 3 and done.stderr.count("\n") == 1 and missing in done.stderr, done.stderr
    assert set(netns.list_namespaces()) == before and not (tmp_path / "o").exists()


def test_a_full_disk_under_out_is_one_line_and_a_clean_machine(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "bloatlab-full", str(disk)], check=True)
    try:
        done = subprocess.run([sys.executable, "-m", "bloatlab", "run", "--preset", "cs244", "--set", "duration=8s",
                               "--out", str(disk / "run"), "--quiet"], capture_output=True, text=True, timeout=120)
        assert "Traceback" not in done.stderr, done.stderr
        assert done.returncode in (1, 3), done
        lines = done.stderr.strip().splitlines()
        assert lines and "No space left on device" in lines[-1], done.stderr
        run = json.loads((disk / "run" / "run.json").read_text())
        assert leftovers(run["network"]) == [] if run.get("network") else True
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_disk_that_fills_during_the_run_is_one_line_and_a_clean_machine(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    # Room for run.json and the first seconds: the tracepoint's raw lines fill the rest.
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "bloatlab-full", str(disk)], check=True)
    try:
        with started_run(disk / "run", "duration=6s") as proc:
            wait_for_pings(proc, disk / "run", count=5)  # the run is under way when the disk fills
            stderr = ends(proc)
        assert "Traceback" not in stderr, stderr
        lines = stderr.strip().splitlines()
        assert proc.returncode in (1, 3) and lines and "No space left on device" in lines[-1], stderr
        run = json.loads((disk / "run" / "run.json").read_text())
        assert run["complete"] is False and leftovers(run["network"]) == []
        # With room again, the report writes the run's results from what its tools wrote.
        subprocess.run(["mount", "-o", "remount,size=16m", str(disk)], check=True)
        report = subprocess.run([sys.executable, "-m", "bloatlab", "report", str(disk / "run")], capture_output=True,
                                text=True, timeout=120)
        assert report.returncode == 0 and report.stdout.startswith("recovered a run"), report
        summary = json.loads((disk / "run" / "summary.json").read_text())
        assert summary["complete"] is False and summary["rtt_ms"]["count"] >= 5
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_the_web_server_killed_makes_the_run_incomplete_and_a_killed_fetch_is_a_failed_fetch(tmp_path):
    out = tmp_path / "web"
    with started_run(out, "duration=14s") as proc:
        wait_for_pings(proc, out)
        network = json.loads((out / "run.json").read_text())["network"]
        # A fetch in flight: its curl killed is that fetch failed, and the run goes on.
        deadline = time.monotonic() + 20
        while not kill_one(pids_of(network, "curl")):  # a fetch may end between finding and killing it
            assert time.monotonic() < deadline, "no fetch was ever in flight"
            time.sleep(0.002)
        time.sleep(1.0)
        assert proc.poll() is None
        # The server killed: nothing more can be fetched, so the run stops, incomplete.
        [server] = [pid for pid in pids_of(network, "python3") + pids_of(network, "python")
                    if b"bloatlab.experiment.httpd" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        os.kill(server, signal.SIGKILL)
        stderr = ends(proc)
    assert "Traceback" not in stderr
    run = json.loads((out / "run.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert proc.returncode == 1 and run["complete"] is False
    assert "workload web" in run["incomplete_reason"] and "killed by signal 9" in run["incomplete_reason"]
    assert summary["fetch_s"]["failed"] >= 1
    assert leftovers(network) == []


def test_a_sweep_killed_outright_is_cleaned_and_resumed(tmp_path):
    out = tmp_path / "s"
    argv = [sys.executable, "-m", "bloatlab", "run", "--preset", "cs244", "--sweep", "maxq=20,100",
            "--set", "duration=4s", "--out", str(out), "--quiet"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    second = out / "maxq=100" / "rep1"
    try:
        deadline = time.monotonic() + 120
        while not (second / "raw" / "ping.ping.txt").exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the second run never started"
            time.sleep(0.2)
    finally:
        proc.kill()  # SIGKILL, mid-run: no handler, no teardown
        proc.wait()
    killed = json.loads((second / "run.json").read_text())
    assert killed["complete"] is False and killed["incomplete_reason"].startswith("unfinished")
    assert load_sweep(out).status == "stopped"  # sweep.json still says running: its process says otherwise
    report = subprocess.run([sys.executable, "-m", "bloatlab", "report", str(out)], capture_output=True, text=True,
                            timeout=120)
    assert report.returncode == 0 and "stopped before it finished" in (out / "report.html").read_text(), report
    done = clean()
    assert f"removed namespace bloatlab.{killed['network']}.h1" in done.stdout
    resumed = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    assert "1 of 2 runs already complete, 1 to run" in resumed.stdout
    assert json.loads((second / "run.json").read_text())["complete"] is True
    assert json.loads((out / "sweep.json").read_text())["status"] == "complete"


def _follow(url: str, seen: list) -> None:
    """A page's side of a live view's stream: each update's sweep table (its runs' states) and
    the run it follows, until the view stops."""
    where = urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=300)
    try:
        conn.request("GET", "/events")
        response = conn.getresponse()
        while line := response.readline():
            if line.startswith(b"data: "):
                doc = json.loads(line[6:])
                if "sweep" in doc:
                    current = doc.get("current") or {}
                    seen.append((tuple(r["status"] for r in doc["sweep"]["runs"]), current.get("dir"),
                                 bool(current.get("fresh")), doc["sweep"]["status"], doc["sweep"]["report"], doc))
    except (OSError, http.client.HTTPException):
        pass
    finally:
        conn.close()


def test_a_stopped_sweep_resumes_with_only_what_is_missing_and_a_live_view_follows_it(tmp_path):
    """SIGTERM (Ctrl-C's SIGINT takes the same way: interrupts.py; test_calibrate sends it to a
    sweep of trials) stops the sweep in its second run; --resume runs only that one again. A
    `bloatlab view` follows it all: its table fills in, it follows each run going on, and the run
    made anew by --resume starts the page over."""
    out = tmp_path / "s"
    argv = [sys.executable, "-m", "bloatlab", "run", "--preset", "cs244", "--sweep", "maxq=20,100",
            "--set", "duration=4s", "--out", str(out), "--quiet"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    view = None
    seen: list = []
    try:
        deadline = time.monotonic() + 120
        while not (out / "sweep.json").exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the sweep never started"
            time.sleep(0.05)
        view = subprocess.Popen([sys.executable, "-m", "bloatlab", "view", str(out)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        url = view.stdout.readline().removeprefix("bloatlab view: ").strip()
        reader = threading.Thread(target=_follow, args=(url, seen), daemon=True)
        reader.start()
        while not (out / "maxq=100" / "rep1" / "raw" / "ping.ping.txt").exists():  # the second run under way
            assert time.monotonic() < deadline and proc.poll() is None, "the second run never started"
            time.sleep(0.2)
        time.sleep(1.0)  # a second of it for the view
        proc.send_signal(signal.SIGTERM)
        stderr = proc.communicate(timeout=120)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    try:
        assert proc.returncode == 130 and "Traceback" not in stderr and "--resume" in stderr, stderr
        sweep = json.loads((out / "sweep.json").read_text())
        assert [r["status"] for p in sweep["points"] for r in p["runs"]] == ["complete", "incomplete"]
        stopped = json.loads((out / "maxq=100" / "rep1" / "run.json").read_text())
        assert stopped["incomplete_reason"].startswith("interrupted at ") and leftovers(stopped["network"]) == []
        kept = (out / "maxq=20" / "rep1" / "summary.json").stat().st_mtime_ns
        stopped_at = len(seen)

        result = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=180)
        assert result.returncode == 0, result.stderr
        assert "1 of 2 runs already complete, 1 to run" in result.stdout
        assert "[2/2] maxq=100 rep 1" in result.stdout and "[1/2]" not in result.stdout
        assert (out / "maxq=20" / "rep1" / "summary.json").stat().st_mtime_ns == kept
        assert json.loads((out / "sweep.json").read_text())["status"] == "complete"
        assert json.loads((out / "maxq=100" / "rep1" / "run.json").read_text())["complete"]
        deadline = time.monotonic() + 30
        while not (seen and seen[-1][4]) and time.monotonic() < deadline:  # the sweep's report, linked
            time.sleep(0.2)
    finally:
        if view is not None:
            view.send_signal(signal.SIGINT)
            view.wait(timeout=30)
    assert view.returncode == 0, view.stderr.read()
    # What the view showed: the first run going on while the second waited, then the second going
    # on; stopped; then, resumed, the second run followed from its start again; at the end both
    # complete, each with its headline, the smaller queue the shorter RTT.
    states = [s[0] for s in seen]
    assert ("running", "waiting") in states[:stopped_at] and ("complete", "running") in states[:stopped_at], states
    assert ("complete", "incomplete") in states, states
    followed = {s[1] for s in seen if s[1]}
    assert followed == {"maxq=20/rep1", "maxq=100/rep1"}, followed
    assert any(s[1] == "maxq=100/rep1" and s[2] for s in seen[stopped_at:]), "the resumed run did not start over"
    last = seen[-1][5]["sweep"]
    assert [r["status"] for r in last["runs"]] == ["complete", "complete"] and last["report"] == "report.html"
    assert all(r["headline"] and r["report"] for r in last["runs"])
    assert last["runs"][0]["figures"]["RTT p95 (ms)"] < last["runs"][1]["figures"]["RTT p95 (ms)"]

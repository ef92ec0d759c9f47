"""Sweeps on a real Ray cluster (lab/cluster.py, docs/cluster.md), started by these tests on this
machine: two nodes that offer bloatlab_testbed, as two lab machines would, and a third whose
bloatlab-link cannot run, which its check must leave out. Every node is a `ray start --block`
process of ours, stopped by its pid at the end, with whatever it started."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from bloatlab.results.reader import load_sweep

ray = pytest.importorskip("ray", reason="the cluster extra (make test installs it)")

pytestmark = pytest.mark.netns
RAY = Path(sys.executable).parent / "ray"
NODES = ("bloatlab-test-a", "bloatlab-test-b", "bloatlab-test-bad")
# A run short enough for tests: 5 s of cs244.
SWEEP = ["--preset", "cs244", "--set", "duration=5s"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ours(temp: Path) -> list[int]:
    """The pids of processes whose command line names this cluster's temp dir, or that started
    from the `ray start` processes of this cluster (workers name neither)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(temp) in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


class Cluster:
    def __init__(self):
        self.temp = Path(tempfile.mkdtemp(prefix="bloatlab-ray-"))
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: dict[str, subprocess.Popen] = {}

    def start(self, name: str, env: dict[str, str] | None = None) -> None:
        """A node; it has joined once `ray start` says the runtime started."""
        argv = [str(RAY), "start", "--block", f"--node-name={name}", "--num-cpus=1", "--disable-usage-stats",
                "--object-store-memory=100000000", '--resources={"bloatlab_testbed": 1}']
        if not self.nodes:
            argv += ["--head", f"--port={self.port}", "--include-dashboard=false", f"--temp-dir={self.temp}"]
        else:
            argv += [f"--address={self.address}"]
        log = self.temp / f"{name}.log"
        with open(log, "w") as out:
            self.nodes[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                                env={**os.environ, **(env or {})})
        deadline = time.monotonic() + 90
        while "Ray runtime started" not in log.read_text():
            assert self.nodes[name].poll() is None, f"ray start of {name} failed:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"ray start of {name} is slow:\n{log.read_text()[-3000:]}"
            time.sleep(0.5)

    def ray_stop(self, name: str) -> None:
        """As `ray stop` ends a node: SIGTERM to each of its processes (its `ray start`, and what
        that started: the raylet, the workers, ...), found by parentage from our pid."""
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(entry.name))
        tree, todo = [], [self.nodes[name].pid]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo += children.get(pid, [])
        for pid in tree:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def stop(self, grace_s: float = 45) -> None:
        """Every node by its pid (SIGTERM: it drains and ends what it started), in reverse."""
        for name, node in reversed(self.nodes.items()):
            if node.poll() is None:
                node.send_signal(signal.SIGTERM)
                try:
                    node.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    os.killpg(node.pid, signal.SIGKILL)
                    node.wait(timeout=10)
        for pid in _ours(self.temp):  # a straggler of ours, found by our temp dir: none expected
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    try:
        c.start(NODES[0])
        c.start(NODES[1])
        c.start(NODES[2], env={"BLOATLAB_LINK": "/nonexistent/bloatlab-link"})
        yield c
    finally:
        c.stop()
        left = _ours(c.temp)
        subprocess.run(["rm", "-rf", str(c.temp)], check=False)
        assert not left, f"Ray processes left behind: {left}"


def bloatlab(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bloatlab", *argv], capture_output=True, text=True, timeout=timeout)


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    return {line.split()[0] for line in out.splitlines() if line.startswith("bloatlab")}


def test_doctor_names_the_node_that_fails_its_check(cluster):
    shown = bloatlab("doctor", "--cluster", cluster.address, "--json", timeout=180)
    assert shown.returncode == 1, shown.stderr  # one node would be left out of a sweep
    doc = json.loads(shown.stdout)
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert set(nodes) == set(NODES)
    # A test cluster on loopback, started as `ray start` starts one: nothing guards it.
    assert doc["trust"] == {"tls": False, "token": False, "exposed": []}
    assert nodes["bloatlab-test-a"]["ok"] and nodes["bloatlab-test-b"]["ok"]
    bad = nodes["bloatlab-test-bad"]
    assert not bad["ok"] and "bloatlab-link unusable" in bad["problems"][0] and "/nonexistent" in bad["problems"][0]
    assert nodes["bloatlab-test-a"]["root"] and nodes["bloatlab-test-a"]["hostname"] == os.uname().nodename


@pytest.fixture(scope="module")
def cluster_sweep(cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("cluster") / "sweep"
    done = bloatlab("run", *SWEEP, "--sweep", "maxq=20,100", "--repeat", "2", "--cluster", cluster.address,
                    "--out", str(out))
    return out, done


def test_a_sweep_comes_back_as_a_local_sweep_with_each_run_naming_its_node(cluster_sweep):
    out, done = cluster_sweep
    assert done.returncode == 0, done.stdout + done.stderr
    assert "left out bloatlab-test-bad: bloatlab-link unusable" in done.stdout
    assert "warning: trust: no TLS and no token: anyone who reaches its ports runs code as root" in done.stderr
    assert "4 of 4 runs complete" in done.stdout
    sweep = load_sweep(out)
    assert sorted((p.label, r.rep) for p in sweep.points for r in p.runs) == [
        ("maxq=100", 1), ("maxq=100", 2), ("maxq=20", 1), ("maxq=20", 2)]
    ran_on = set()
    for point, sweep_run, run in sweep.runs():
        node = run.meta["cluster"]
        assert node["node"] in NODES[:2] and node["attempts"] == []
        assert sweep_run.node == node["node"] and sweep_run.attempts == ()
        assert node["hostname"] == os.uname().nodename and node["kernel"] == os.uname().release
        assert node["bloatlab_version"] == run.meta["bloatlab_version"] and node["cpu"]
        assert run.complete and run.summary.flows["bulk"].goodput_mbps > 5
        ran_on.add(node["node"])
    assert ran_on == set(NODES[:2])  # both good nodes took runs; the bad one none
    aggregate = json.loads((out / "aggregate.json").read_text())
    assert sorted(p["n"] for p in aggregate["points"]) == [2, 2]
    assert (out / "report.html").exists() and (out / "aggregate.csv").exists()
    assert not _namespaces()


def test_a_killed_worker_is_retried_and_nothing_is_counted_twice(cluster, tmp_path):
    out = tmp_path / "sweep"
    sweep = subprocess.Popen([sys.executable, "-m", "bloatlab", "sweep", *SWEEP, "--sweep", "maxq=20,100",
                              "--cluster", cluster.address, "--out", str(out), "-q"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        victim = None
        deadline = time.monotonic() + 120
        while victim is None and time.monotonic() < deadline:
            workers = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _title(p) == "ray::bloatlab-run"]
            if workers and _namespaces():  # a run has built its network
                time.sleep(2)
                victim = workers[0]
            time.sleep(0.2)
        assert victim is not None, "no run started on the cluster"
        os.kill(victim, signal.SIGKILL)
        output, _ = sweep.communicate(timeout=300)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    assert sweep.returncode == 0, output
    assert "its worker died" in output and "trying again (attempt 2 of 3)" in output
    assert "cleaned bloatlab-test-" in output  # the killed run's network, removed on its node
    doc = json.loads((out / "sweep.json").read_text())
    runs = [r for p in doc["points"] for r in p["runs"]]
    assert len(runs) == 2 and all(r["status"] == "complete" for r in runs)
    retried = [r for r in runs if r["attempts"]]
    assert len(retried) == 1 and retried[0]["attempts"][0]["reason"] == "its worker died"
    meta = json.loads((out / retried[0]["dir"] / "run.json").read_text())
    assert meta["cluster"]["attempts"] == retried[0]["attempts"]
    aggregate = json.loads((out / "aggregate.json").read_text())
    assert sorted(p["n"] for p in aggregate["points"]) == [1, 1]  # the killed attempt counts nowhere
    assert not _namespaces()
    assert not list(Path(tempfile.gettempdir()).glob("bloatlab-cluster-*"))


def _title(proc_dir: Path) -> str:
    try:
        return (proc_dir / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace").strip()
    except OSError:
        return ""


def test_a_run_that_outlives_its_time_is_stopped_and_retried_on_another_node(cluster, tmp_path):
    from bloatlab.lab import cluster as clusters
    from bloatlab.lab.executors import Job, RunResult
    from bloatlab.results.summary import RunSummary

    def sleepy(values, rep, run_dir, tick):  # nested: Ray sends it by value, not by this module's name
        """Outlives its time on its first attempt (a marker file says which attempt it is)."""
        marker = Path(values["marker"])
        if not marker.exists():
            marker.write_text("first")
            try:
                for _ in range(1200):  # a run's main thread sleeps in slices, as its schedule does
                    time.sleep(0.1)
            except KeyboardInterrupt:  # stopped as Ctrl-C stops a run: it could take its network down
                marker.write_text("stopped")
                raise
        run_dir.mkdir(parents=True)
        (run_dir / "run.json").write_text("{}")
        return RunResult(True, RunSummary(complete=True, duration_s=2.0))

    ray_module = clusters.connect(cluster.address)
    try:
        checks = clusters.check_nodes(ray_module)
        said: list[str] = []
        executor = clusters.ClusterExecutor(cluster.address, checks, run_timeout_s=8, say=said.append)
        job = Job({"marker": str(tmp_path / "marker")}, 1, tmp_path / "out" / "rep1", "slow")
        (done,) = list(executor.run(sleepy, [job], lambda i, j: lambda s: None))
    finally:
        clusters.disconnect()
    assert done.result.complete and done.result.summary == RunSummary(complete=True, duration_s=2.0)  # as it left
    assert (tmp_path / "marker").read_text() == "stopped"  # cancelled gracefully, not killed
    (failed,) = done.attempts
    assert failed["reason"] == "did not end within 8 s"
    assert failed["node"] != done.node and {failed["node"], done.node} == set(NODES[:2])
    assert any("did not end within 8 s" in line and "trying again" in line for line in said)
    assert json.loads((job.run_dir / "run.json").read_text())["cluster"]["attempts"][0]["reason"] == failed["reason"]


def test_a_calibration_runs_its_trials_on_the_nodes_and_gives_the_path_back(cluster, cluster_sweep, tmp_path):
    """A run of the sweep above, made on a known path (cs244: 10 Mbit/s, 20 ms base RTT, a
    20-packet tail drop), fed back as the measurement; the calibration's emulated runs go to the
    cluster's good nodes."""
    sweep, _ = cluster_sweep
    done = bloatlab("calibrate", str(sweep / "maxq=20" / "rep1"), "--discipline", "taildrop", "--trials", "2",
                    "--confirm", "1", "--short", "5s", "--cluster", cluster.address, "--out", str(tmp_path / "cal"),
                    "--json")
    assert done.returncode == 0, done.stderr
    assert "left out bloatlab-test-bad" in done.stderr
    doc = json.loads(done.stdout)
    fitted = doc["fitted"]
    assert fitted["rate_up_bps"] == pytest.approx(10e6, rel=0.03), doc["fitted_text"]
    assert fitted["rtt_ms"] == pytest.approx(20.0, abs=1.0), doc["fitted_text"]
    assert fitted["limit_pkts"] == pytest.approx(20, rel=0.15), doc["fitted_text"]
    assert [t["stage"] for t in doc["trials"]] == ["screen", "refine", "confirm"]
    for trial in doc["trials"]:
        assert json.loads((Path(trial["run_dir"]) / "run.json").read_text())["cluster"]["node"] in NODES[:2]
    assert not _namespaces()


def _leftovers() -> dict[str, list[str]]:
    """What a run on a node may leave: its namespaces, its processes (the run's own, its
    datapath), its temporary directory. A zombie is dead (init here reaps orphans late)."""
    procs = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, IndexError):
                continue
            if state != "Z" and ("bloatlab.lab.cluster" in line or "bloatlab-link" in line):
                procs.append(f"{entry.name} {line.strip()}")
    return {"namespaces": sorted(_namespaces()), "processes": procs,
            "dirs": [str(p) for p in Path(tempfile.gettempdir()).glob("bloatlab-cluster-*")]}


def _start_long_sweep(address: str, out: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A sweep of one 60 s run, returned once its run has built its network on a node."""
    sweep = subprocess.Popen([sys.executable, "-m", "bloatlab", "run", "--preset", "cs244", "--set", "duration=60s",
                              "--sweep", "maxq=20", "--cluster", address, "--out", str(out), "-q"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **(env or {})})
    deadline = time.monotonic() + 120
    while not (_namespaces() and _leftovers()["processes"]):
        assert sweep.poll() is None, sweep.communicate()[0]
        assert time.monotonic() < deadline, "no run started on the cluster"
        time.sleep(0.2)
    time.sleep(1)
    return sweep


def _gone_within(seconds: float) -> float:
    """How long it took for a run's leftovers to go; fails with what is left after `seconds`."""
    started = time.monotonic()
    while (left := _leftovers()) != {"namespaces": [], "processes": [], "dirs": []}:
        assert time.monotonic() - started < seconds, f"left after {seconds:g} s: {left}"
        time.sleep(0.2)
    return time.monotonic() - started


def test_a_run_whose_sweep_is_killed_stops_within_seconds_and_leaves_nothing(cluster, tmp_path):
    """Ray kills a task's worker, and the worker's children, with SIGKILL when the sweep that
    owns the task dies: the run's process, not the worker's child, sees the worker gone and
    takes the network down."""
    sweep = _start_long_sweep(cluster.address, tmp_path / "sweep")
    sweep.kill()
    sweep.communicate()
    assert _gone_within(10) < 10


def _tls_files(where: Path) -> dict[str, str]:
    """A CA and a certificate it signed for this machine's loopback, with openssl: Ray's TLS
    settings (docs/cluster.md, Trust), as every node and the sweep's machine would have them."""
    def openssl(*argv: str) -> None:
        subprocess.run(["openssl", *argv], check=True, capture_output=True, timeout=60)

    ca_key, ca, key, csr, cert = (str(where / n) for n in ("ca.key", "ca.crt", "node.key", "node.csr", "node.crt"))
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=bloatlab-test-ca",
            "-keyout", ca_key, "-out", ca)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", csr)
    # Ray's processes reach one another at the address it picks for the node (not loopback)
    (where / "san.ext").write_text(f"subjectAltName=IP:127.0.0.1,IP:{ray.util.get_node_ip_address()},DNS:localhost\n")
    openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", "1",
            "-extfile", str(where / "san.ext"), "-out", cert)
    return {"RAY_USE_TLS": "1", "RAY_TLS_SERVER_CERT": cert, "RAY_TLS_SERVER_KEY": key, "RAY_TLS_CA_CERT": ca}


def test_a_tls_cluster_is_reported_guarded_runs_a_sweep_and_nothing_outlives_its_ray_stop(tmp_path):
    """A cluster of its own (the module's keeps its nodes), with Ray's TLS: doctor checks its
    node through it and says so; a sweep runs on it; `ray stop` (SIGTERM to each of the node's
    processes) during the run: the run stops and takes its network down."""
    tls = _tls_files(tmp_path)
    own = Cluster()
    try:
        own.start("bloatlab-test-tls", env=tls)
        shown = subprocess.run([sys.executable, "-m", "bloatlab", "doctor", "--cluster", own.address, "--json"],
                               capture_output=True, text=True, timeout=180, env={**os.environ, **tls})
        assert shown.returncode == 0, shown.stdout + shown.stderr
        doc = json.loads(shown.stdout)
        assert doc["trust"] == {"tls": True, "token": False, "exposed": []}
        assert [n["name"] for n in doc["nodes"] if n["ok"]] == ["bloatlab-test-tls"]

        sweep = _start_long_sweep(own.address, tmp_path / "sweep", env=tls)
        try:
            own.ray_stop("bloatlab-test-tls")
            assert _gone_within(10) < 10
        finally:
            sweep.kill()
            sweep.communicate()
    finally:
        own.stop(grace_s=5)  # its raylet is gone: `ray start` only waits out its drain
        subprocess.run(["rm", "-rf", str(own.temp)], check=False)
        assert not _ours(own.temp)

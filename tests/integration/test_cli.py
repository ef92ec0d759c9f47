"""The `bloatlab` command as a user runs it: one process per command, real namespaces."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bloatlab import binaries
from bloatlab.cli.main import main
from bloatlab.errors import MachineError
from bloatlab.proc import identify, alive as process_alive
from bloatlab.testbed import netns
from bloatlab.testbed.network import ETC_NETNS, NETNS_PREFIXES, remove_network
from bloatlab.testbed.state import RUN_DIR, load

SRC = Path(__file__).resolve().parents[2] / "src"


def bloatlab(*args: str, input: str | None = None, timeout: float = 30):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "bloatlab", *args], input=input, capture_output=True,
                          text=True, env=env, timeout=timeout)


def one_line_error(result, status: int = 2) -> str:
    assert result.returncode == status, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bloatlab: error: "), result.stderr
    return lines[0]


def traces(name: str) -> list[str]:
    found = [ns for ns in netns.list_namespaces() if ns.startswith(f"bloatlab.{name}.")]
    found += [str(p) for p in ETC_NETNS.glob(f"bloatlab.{name}.*")]
    return found + [str(p) for p in [RUN_DIR / name] if p.exists()]


def foreign_namespaces() -> list[str]:
    return [ns for ns in netns.list_namespaces() if ns.startswith(NETNS_PREFIXES)]


@pytest.fixture
def names():
    used = []
    yield lambda name: used.append(name) or name
    for name in used:
        if traces(name):
            remove_network(name)


def write_topology(path: Path, hosts: int = 2, backend: str = "kernel", delay: str = "0ms") -> Path:
    text = "".join(f"[hosts.h{i}]\n" for i in range(1, hosts + 1)) + "[switches.s0]\n"
    for i in range(1, hosts + 1):
        text += (f'[[links]]\nends = ["h{i}", "s0"]\nrate = "10mbit"\ndelay = "{delay}"\n'
                 f'queue = {{ packets = 100 }}\nbackend = "{backend}"\n')
    path.write_text(text)
    return path


# Bad input: one line, status 2, never a traceback --------------------------------------------

def test_usage_errors_are_one_line():
    assert "required" in one_line_error(bloatlab("up"))
    assert "invalid choice" in one_line_error(bloatlab("frobnicate"))
    assert "give a command after --" in one_line_error(bloatlab("exec", "t1", "h1", "--"))


def test_help_shows_an_example():
    for command in ("up", "exec", "ls", "down", "clean", "doctor"):
        result = bloatlab(command, "--help")
        assert result.returncode == 0 and "examples:" in result.stdout, command
    assert "--rates" in bloatlab("bench", "link", "--help").stdout


def test_commands_that_need_root_say_so(monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # an ordinary user (python may be root-only here)
    for argv in (["up", "t.toml", "--name", "t1"], ["exec", "t1", "h1", "--", "true"], ["down", "t1"], ["clean"]):
        assert main(argv) == 3  # the machine (here: the user) lacks what the command needs
        assert capsys.readouterr().err == f"bloatlab: error: bloatlab {argv[0]} needs root (it works with " \
                                          "network namespaces); run it with sudo\n"


@pytest.mark.netns
def test_unknown_networks_and_bad_names(tmp_path):
    assert one_line_error(bloatlab("down", "nosuchnet")) == \
        "bloatlab: error: name: no network named 'nosuchnet' (bloatlab ls lists them)"
    assert "no network named 'nosuchnet'" in one_line_error(bloatlab("exec", "nosuchnet", "h1", "--", "true"))
    for bad in ("Bad", "1abc", "a.b", "x" * 17, "t_1"):
        assert "is not a valid network name" in one_line_error(bloatlab("up", "x.toml", "--name", bad)), bad
    assert "no such file" in one_line_error(bloatlab("up", str(tmp_path / "none.toml"), "--name", "t1"))


@pytest.mark.netns
def test_a_kernel_link_this_kernel_cannot_serve_is_refused_up_front(tmp_path, names):
    from bloatlab.testbed.capabilities import kernel_qdiscs as available_qdiscs

    if available_qdiscs().get("netem"):
        pytest.skip("this kernel has netem")
    topo = write_topology(tmp_path / "t.toml", delay="5ms")
    line = one_line_error(bloatlab("up", str(topo), "--name", names("tc0")), status=3)
    assert line.startswith("bloatlab: error: links[0].backend: the kernel backend needs the netem qdisc")
    assert traces("tc0") == []


# A whole session ------------------------------------------------------------------------------

@pytest.mark.netns
def test_up_exec_ls_down(tmp_path, names):
    topo = write_topology(tmp_path / "t.toml")
    up = bloatlab("up", str(topo), "--name", names("tc1"))
    assert up.returncode == 0, up.stderr
    assert re.search(r"h2 +10\.0\.0\.2 +\w+ \(this machine.s default", up.stdout) and "link h1-s0 (kernel backend)" in up.stdout
    assert "tc1" in bloatlab("ls").stdout

    ping = bloatlab("exec", "tc1", "h1", "--", "ping", "-c", "2", "-i", "0.1", "h2")
    assert ping.returncode == 0 and "2 received" in ping.stdout
    assert bloatlab("exec", "tc1", "h2", "--", "sh", "-c", "exit 7").returncode == 7
    assert bloatlab("exec", "tc1", "h2", "--", "cat", input="through\n").stdout == "through\n"
    assert "no host 'h9'" in one_line_error(bloatlab("exec", "tc1", "h9", "--", "true"))
    assert "exists already" in one_line_error(bloatlab("up", str(topo), "--name", "tc1"))
    # A daemon started with exec has left exec's process tree; down must still end it.
    pidfile = tmp_path / "iperf3.pid"
    assert bloatlab("exec", "tc1", "h2", "--", "iperf3", "-s", "-D", "-I", str(pidfile)).returncode == 0
    daemon = identify(int(wait_for_text(pidfile)))
    assert process_alive(*daemon)

    down = bloatlab("down", "tc1")
    assert down.returncode == 0 and down.stdout == "network tc1 is down\n"
    assert traces("tc1") == []
    assert not process_alive(*daemon)


@pytest.mark.netns
def test_a_session_in_json_and_the_hosts_congestion_controls(tmp_path, names):
    from bloatlab.testbed.capabilities import congestion_controls

    machine = congestion_controls().default
    other = next(cc for cc in ("reno", "bbr", "cubic") if cc != machine and cc in congestion_controls().allowed)
    topo = write_topology(tmp_path / "t.toml", hosts=3)
    topo.write_text(f'cc = "{other}"\n' + topo.read_text().replace("[hosts.h3]\n", f'[hosts.h3]\ncc = "{machine}"\n'))
    up = bloatlab("up", str(topo), "--name", names("tc7"), "--json")
    assert up.returncode == 0, up.stderr
    doc = json.loads(up.stdout)  # stdout is the document alone
    assert {h["name"]: h["cc"] for h in doc["hosts"]} == {"h1": other, "h2": other, "h3": machine}
    assert doc["name"] == "tc7" and doc["status"] == "up" and {link["backend"] for link in doc["links"]} == {"kernel"}

    # The hosts keep it: what a socket that names none gets.
    ran = bloatlab("exec", "tc7", "h1", "--json", "--", "sysctl", "-n", "net.ipv4.tcp_congestion_control")
    assert ran.returncode == 0 and json.loads(ran.stdout)["stdout"] == f"{other}\n"
    ran = bloatlab("exec", "tc7", "h3", "--json", "--", "sh", "-c", "echo out; echo err >&2; exit 4")
    assert ran.returncode == 4
    assert {k: v for k, v in json.loads(ran.stdout).items() if k != "argv"} == {
        "network": "tc7", "host": "h3", "status": 4, "stdout": "out\n", "stderr": "err\n"}

    text = bloatlab("up", str(write_topology(tmp_path / "m.toml")), "--name", names("tc8"))
    assert re.search(rf"h1 +10\.0\.0\.1 +{machine} \(this machine's default; set cc to change it\)", text.stdout)
    listed = {net["name"]: net for net in json.loads(bloatlab("ls", "--json").stdout)["networks"]}
    assert [h["cc"] for h in listed["tc7"]["hosts"]] == [other, other, machine]
    assert [h["cc"] for h in listed["tc8"]["hosts"]] == [machine, machine]
    table = bloatlab("ls").stdout.splitlines()
    assert table[0].split()[:4] == ["NAME", "STATUS", "HOSTS", "CC"]
    assert f"{','.join(sorted({machine, other}))} " in next(line for line in table if line.startswith("tc7 "))

    down = bloatlab("down", "tc7", "--json")
    assert down.returncode == 0 and json.loads(down.stdout)["network"] == "tc7"
    assert bloatlab("down", "tc8", "-q").stdout == "network tc8 is down\n"


@pytest.mark.netns
def test_a_run_whose_workload_fails_is_status_1_and_keeps_what_it_measured(tmp_path):
    spec = tmp_path / "lossy.toml"  # nothing crosses: iperf3 cannot connect
    spec.write_text('name = "lossy"\nduration = "2s"\n[topology.hosts.h1]\n[topology.hosts.h2]\n'
                    '[[topology.links]]\nends = ["h1", "h2"]\nrate = "10mbit"\nloss = "99.99%"\n'
                    '[[workloads]]\nkind = "bulk"\nfrom = "h1"\nto = "h2"\n')
    result = bloatlab("run", str(spec), "--out", str(tmp_path / "out"), "--json", "-q", timeout=120)
    assert result.returncode == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["complete"] is False and doc["reason"].startswith("a workload failed: bulk: iperf3")
    assert "the run is incomplete" in result.stderr
    assert json.loads((tmp_path / "out" / "run.json").read_text())["complete"] is False


def wait_for_text(path: Path, timeout_s: float = 5.0) -> str:
    deadline = time.monotonic() + timeout_s
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} was never written"
        time.sleep(0.05)
    return path.read_text().strip()


@pytest.mark.netns
def test_the_datapath_outlives_up_and_down_stops_it(tmp_path, names):
    try:
        binaries.find("bloatlab-link")
    except MachineError:
        pytest.skip("bloatlab-link is not built (make setup)")
    topo = write_topology(tmp_path / "t.toml", backend="userspace", delay="1ms")
    assert bloatlab("up", str(topo), "--name", names("tc2")).returncode == 0
    dp = load("tc2").datapath
    assert process_alive(dp["pid"], dp["starttime"])
    assert bloatlab("exec", "tc2", "h1", "--", "ping", "-c", "1", "h2").returncode == 0
    assert bloatlab("down", "tc2").returncode == 0
    assert not process_alive(dp["pid"], dp["starttime"])
    assert traces("tc2") == []


# A killed `up` ----------------------------------------------------------------------------------

def signal_up_midway(topo: Path, name: str, sig: int = signal.SIGKILL) -> subprocess.Popen:
    """Start `bloatlab up`, send it `sig` as soon as its first namespace exists, wait for it."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    up = subprocess.Popen([sys.executable, "-m", "bloatlab", "up", str(topo), "--name", name],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 15
    while not any(ns.startswith(f"bloatlab.{name}.") for ns in
                  (os.listdir(netns.NETNS_DIR) if os.path.isdir(netns.NETNS_DIR) else [])):
        assert up.poll() is None and time.monotonic() < deadline, "up ended before its first namespace"
        time.sleep(0.001)
    assert up.poll() is None, "up finished before the signal"
    up.send_signal(sig)
    up.wait(timeout=15)
    return up


@pytest.mark.netns
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_up_removes_what_it_built(tmp_path, names, sig):
    up = signal_up_midway(write_topology(tmp_path / "t.toml", hosts=12), names("tc5"), sig)
    assert up.returncode == 130 and up.stderr.read() == "bloatlab: interrupted\n"
    assert traces("tc5") == []


@pytest.mark.netns
def test_down_removes_what_a_killed_up_left(tmp_path, names):
    signal_up_midway(write_topology(tmp_path / "t.toml", hosts=12), names("tc3"))
    assert traces("tc3"), "the kill left nothing to clean"
    assert bloatlab("down", "tc3").returncode == 0
    assert traces("tc3") == []


ISOLATED = "BLOATLAB_TEST_ISOLATED"


def run_isolated(test: str) -> subprocess.CompletedProcess:
    """Run one test of this file in a private mount namespace with its own /run and /etc/netns:
    there `bloatlab clean` sees only the namespaces that test made, never anyone else's."""
    made_etc_netns = not ETC_NETNS.exists()
    ETC_NETNS.mkdir(exist_ok=True)  # something to mount on
    script = (f"mount -t tmpfs bloatlab-test /run && mount -t tmpfs bloatlab-test {ETC_NETNS} && "
              f'exec "$0" -m pytest -q -p no:cacheprovider "$1"')
    try:
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                               sys.executable, f"{__file__}::{test}"],
                              capture_output=True, text=True, timeout=60, env={**os.environ, ISOLATED: "1"})
    finally:
        if made_etc_netns:
            try:
                ETC_NETNS.rmdir()
            except OSError:
                pass  # someone else's network has put files there meanwhile


@pytest.mark.netns
def test_clean_removes_what_a_killed_up_left_and_spares_a_live_one(tmp_path, names):
    if not os.environ.get(ISOLATED):
        inner = run_isolated("test_clean_removes_what_a_killed_up_left_and_spares_a_live_one")
        assert inner.returncode == 0 and "1 passed" in inner.stdout, inner.stdout + inner.stderr
        return
    datapath = None
    try:
        binaries.find("bloatlab-link")
        up = bloatlab("up", str(write_topology(tmp_path / "u.toml", backend="userspace")), "--name", names("tc6"))
        assert up.returncode == 0, up.stderr
        datapath = load("tc6").datapath
    except MachineError:
        up = bloatlab("up", str(write_topology(tmp_path / "u.toml")), "--name", names("tc6"))
        assert up.returncode == 0, up.stderr
    signal_up_midway(write_topology(tmp_path / "t.toml", hosts=12), names("tc4"))
    clean = bloatlab("clean")
    # The killed build is an orphan; the finished `up` is a live network, named and left.
    assert clean.returncode == 0 and "removed namespace bloatlab.tc4.h1" in clean.stdout
    assert "left 1 live network: tc6 (bloatlab up, up) (bloatlab down NAME, or clean --all)" in clean.stdout
    assert traces("tc4") == [] and traces("tc6") and all(ns.startswith("bloatlab.tc6.") for ns in foreign_namespaces())
    assert json.loads(bloatlab("clean", "--json").stdout) == {"removed": [], "failed": [], "spared": ["tc6"]}
    every = bloatlab("clean", "--all")
    assert every.returncode == 0 and "taking down live networks too: tc6 (bloatlab up, up)" in every.stderr
    assert traces("tc6") == [] and foreign_namespaces() == []
    if datapath:
        assert f"removed process {datapath['pid']} (bloatlab-link of tc6)" in every.stdout
        assert not process_alive(datapath["pid"], datapath["starttime"])
    assert bloatlab("clean").stdout == "nothing to clean\n"
    assert json.loads(bloatlab("clean", "--all", "--json").stdout) == {"removed": [], "failed": [], "spared": []}


@pytest.mark.netns
def test_clean_takes_an_old_state_directory_with_no_state_file_and_spares_a_young_one():
    """What a cut-short removal left: files in /run/bloatlab/NAME, no state.json. A directory
    younger than a claim could take to write its state file may be a network being built."""
    if not os.environ.get(ISOLATED):
        inner = run_isolated("test_clean_takes_an_old_state_directory_with_no_state_file_and_spares_a_young_one")
        assert inner.returncode == 0 and "1 passed" in inner.stdout, inner.stdout + inner.stderr
        return
    old, young, nic = RUN_DIR / "ghost", RUN_DIR / "building", RUN_DIR / "nic"
    for d in (old, young, nic):
        d.mkdir(parents=True)
    (old / "datapath-stats.json").write_text("{}")
    (nic / "eth9.json").write_text("{}")
    an_hour_ago = time.time() - 3600
    for d in (old, nic):
        os.utime(d, (an_hour_ago, an_hour_ago))
    clean = bloatlab("clean")
    assert clean.returncode == 0 and f"removed {old}" in clean.stdout, clean.stdout + clean.stderr
    assert not old.exists() and young.exists() and (nic / "eth9.json").exists()
    assert bloatlab("clean", "--all").returncode == 0
    assert not young.exists() and (nic / "eth9.json").exists()  # nic's journals are never cleaned


# A run's network as a run holds it: built by a live process, not detached, gone with it.
OWNER = """
import sys
from bloatlab.specs.topology import load_topology
from bloatlab.testbed.network import Network
net = Network(load_topology(sys.argv[1]), sys.argv[2]).up()
print("up", flush=True)
sys.stdin.read()
net.down()
"""


@pytest.mark.netns
def test_a_run_that_lives_keeps_its_network_and_one_killed_loses_it(tmp_path, names):
    if not os.environ.get(ISOLATED):
        inner = run_isolated("test_a_run_that_lives_keeps_its_network_and_one_killed_loses_it")
        assert inner.returncode == 0 and "1 passed" in inner.stdout, inner.stdout + inner.stderr
        return
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    topo = write_topology(tmp_path / "t.toml")
    owners = []
    try:
        for name in (names("tl1"), names("tl2")):
            owner = subprocess.Popen([sys.executable, "-c", OWNER, str(topo), name], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)
            owners.append(owner)
            assert owner.stdout.readline() == "up\n"
        # Another shell's clean: both runs live, so nothing of theirs goes.
        clean = bloatlab("clean", "--json")
        assert clean.returncode == 0 and json.loads(clean.stdout)["spared"] == ["tl1", "tl2"]
        assert traces("tl1") and traces("tl2") and not json.loads(clean.stdout)["removed"]
        owners[0].kill()  # SIGKILL: no teardown
        owners[0].wait()
        clean = bloatlab("clean")
        assert clean.returncode == 0 and "removed namespace bloatlab.tl1.h1" in clean.stdout
        assert traces("tl1") == [] and traces("tl2")
        assert f"left 1 live network: tl2 (the run of process {owners[1].pid}, up)" in clean.stdout
        every = bloatlab("clean", "--all")
        assert every.returncode == 0 and traces("tl2") == [] and foreign_namespaces() == []
    finally:
        for owner in owners:
            if owner.poll() is None:
                owner.communicate("", timeout=30)  # its down finds the network gone

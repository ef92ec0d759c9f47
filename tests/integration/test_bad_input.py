"""Bad input, as a user gives it: each gives one line on stderr that names the field at fault,
exit status 2, no traceback, and nothing left on the machine.

Two ways in: a topology file for `bloatlab up` (one thing wrong in a small valid topology), and
a config file for `bloatlab-link` (the only place where a user names an interface).
"""

import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bloatlab import binaries
from bloatlab.errors import MachineError
from bloatlab.testbed import netns
from bloatlab.testbed.network import ETC_NETNS, remove_network
from bloatlab.testbed.state import RUN_DIR

REPO = Path(__file__).resolve().parents[2]
BLOATLAB = Path(sys.executable).with_name("bloatlab")  # the venv's entry point, as a user runs it

_serial = itertools.count()


def new_name() -> str:
    """A network name no other test (nor another engineer's concurrent run) uses."""
    return f"bi{os.getpid() % 100000}-{next(_serial)}"


def traces(name: str) -> list[str]:
    """Everything of network `name` on the machine: namespaces, /etc/netns dirs, state, processes."""
    found = [ns for ns in netns.list_namespaces() if ns.startswith(f"bloatlab.{name}.")]
    found += [str(p) for p in ETC_NETNS.glob(f"bloatlab.{name}.*")]
    found += [str(p) for p in [RUN_DIR / name] if p.exists()]
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue  # it ended meanwhile
        if any(f"{RUN_DIR}/{name}/".encode() in arg for arg in argv):
            found.append(f"process {cmdline.parent.name}: {b' '.join(argv).decode(errors='replace')}")
    return found


@pytest.fixture
def name():
    """A fresh network name; whatever a failing test built under it is removed afterwards."""
    name = new_name()
    yield name
    if traces(name):
        remove_network(name)


def one_error_line(result: subprocess.CompletedProcess, program: str, status: int = 2) -> str:
    """The single stderr line of a run that failed as bad input must (status 2), or for want of
    something on this machine (status 3): nothing else."""
    output = result.stdout + result.stderr
    assert "Traceback" not in output and "panicked" not in output, output
    assert result.returncode == status, output
    assert result.stdout == "", output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), result.stderr
    assert lines[0].startswith(f"{program}: error: "), lines[0]
    return lines[0]


# `bloatlab up` of a bad topology ----------------------------------------------------------------

def link(**keys: str | None) -> str:
    """A valid [[links]] table h1 - s0 with `keys` (TOML value text) changed; None leaves a key out."""
    fields = {"ends": '["h1", "s0"]', "rate": '"10mbit"', "delay": '"1ms"',
              "queue": "{ discipline = \"droptail\", packets = 100 }", **keys}
    return "[[links]]\n" + "".join(f"{key} = {value}\n" for key, value in fields.items() if value is not None)


NODES = "[hosts.h1]\n[hosts.h2]\n[switches.s0]\n"
SECOND = link(ends='["s0", "h2"]')


def topology(first: str = link(), second: str = SECOND, nodes: str = NODES) -> str:
    """h1 - s0 - h2: links[0] is `first`, links[1] `second`."""
    return nodes + first + second


def case(id: str, text: str, field: str, says: str, files: dict[str, str] | None = None, **marks):
    return pytest.param(text, field, says, files or {}, id=id, **marks)


TOPOLOGY_CASES = [
    case("rate-zero", topology(link(rate='"0mbit"')), "links[0].rate", '"0mbit" is zero'),
    case("rate-negative", topology(link(rate='"-5mbit"')), "links[0].rate", '"-5mbit" is negative'),
    case("rate-unparsable", topology(link(rate='"fast"')), "links[0].rate", '"fast" is not a rate'),
    case("rate-bare-number", topology(link(rate="10")), "links[0].rate", "10 has no unit"),
    case("delay-negative", topology(link(delay='"-5ms"')), "links[0].delay", '"-5ms" is negative'),
    case("delay-no-unit", topology(link(delay='"5"')), "links[0].delay", '"5" has no unit'),
    case("queue-zero", topology(link(queue="{ packets = 0 }")), "links[0].queue.packets",
         "0 is not a queue length"),
    case("queue-absurd", topology(link(queue=f"{{ packets = {10**9} }}")), "links[0].queue.packets",
         f"{10**9} is not a queue length"),
    case("queue-bytes-below-a-frame", topology(link(queue="{ bytes = 100 }")), "links[0].queue.bytes",
         "100 is smaller than one full 1514-byte frame"),
    case("queue-in-an-override", topology(link(forward="{ queue = { packets = 0 } }")),
         "links[0].forward.queue.packets", "0 is not a queue length"),
    case("trace-missing", topology(link(rate=None, trace='"nosuch.trace"')), "links[0].trace", "not found"),
    case("trace-empty", topology(link(rate=None, trace='"empty.trace"')), "links[0].trace", "is empty",
         files={"empty.trace": ""}),
    case("trace-not-monotonic", topology(link(rate=None, trace='"down.trace"')), "links[0].trace",
         "line 2: 3 is less than the previous 5", files={"down.trace": "5\n3\n"}),
    case("trace-not-monotonic-in-an-override", topology(link(reverse='{ trace = "down.trace" }')),
         "links[0].reverse.trace", "line 2: 3 is less than the previous 5", files={"down.trace": "5\n3\n"}),
    case("ends-unknown-node", topology(link(ends='["h1", "s9"]')), "links[0].ends[1]", 'unknown node "s9"'),
    case("node-both-host-and-switch", topology(nodes=NODES + "[switches.h1]\n"), "switches.h1",
         '"h1" is already a host'),
    case("link-name-twice", topology(link(name='"up"'), link(name='"up"', ends='["s0", "h2"]')),
         "links[1].name", '"up" is already the name of links[0]'),
    case("unknown-link-key", topology(link(delya='"5ms"')), "links[0].delya",
         'unknown key "delya" in a link; did you mean "delay"?'),
    case("loss-over-100", topology(link(loss='"150%"')), "links[0].loss", '"150%" is out of range'),
    case("jitter-over-delay", topology(link(jitter='"5ms"')), "links[0].jitter",
         "the jitter (5 ms) is larger than the delay (1 ms)"),
    case("backend-unknown", topology(link(backend='"fpga"')), "links[0].backend", '"fpga" is not a backend'),
    case("cc-not-a-name", 'cc = "TCP Reno"\n' + topology(), "cc", '"TCP Reno" is not a congestion control name'),
    case("host-cc-unknown-key", topology(nodes=NODES.replace("[hosts.h2]\n", "[hosts.h2]\ncca = 'reno'\n")),
         "hosts.h2.cca", 'unknown key "cca" in a host; did you mean "cc"?'),
]


def run_up(tmp_path: Path, text: str, files: dict[str, str], name: str) -> subprocess.CompletedProcess:
    for file, content in files.items():
        (tmp_path / file).write_text(content)
    path = tmp_path / "topology.toml"
    path.write_text(text)
    return subprocess.run([str(BLOATLAB), "up", str(path), "--name", name], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.netns
@pytest.mark.parametrize("text, field, says, files", TOPOLOGY_CASES)
def test_up_of_a_bad_topology(tmp_path, name, text, field, says, files):
    line = one_error_line(run_up(tmp_path, text, files, name), "bloatlab")
    assert line.startswith(f"bloatlab: error: {field}: "), line
    assert says in line, line
    assert traces(name) == []


@pytest.mark.netns
def test_up_of_a_kernel_link_with_delay_on_a_kernel_without_netem(tmp_path, name):
    from bloatlab.testbed.capabilities import kernel_qdiscs as available_qdiscs

    if available_qdiscs().get("netem"):
        pytest.skip("this kernel has netem")
    line = one_error_line(run_up(tmp_path, topology(link(backend='"kernel"')), {}, name), "bloatlab", status=3)
    assert line.startswith("bloatlab: error: links[0].backend: the kernel backend needs the netem qdisc for delay")
    assert traces(name) == []


@pytest.mark.netns
def test_up_with_a_congestion_control_this_kernel_lacks_or_restricts(tmp_path, name):
    from bloatlab.testbed.capabilities import congestion_controls

    nodes = NODES.replace("[hosts.h2]\n", "[hosts.h2]\ncc = 'nosuchcc'\n")
    line = one_error_line(run_up(tmp_path, topology(nodes=nodes), {}, name), "bloatlab", status=3)
    assert line.startswith("bloatlab: error: hosts.h2.cc: congestion control 'nosuchcc' is not available")
    assert "modprobe tcp_nosuchcc" in line and traces(name) == []
    have = congestion_controls()
    restricted = sorted(have.available - have.allowed)
    if not restricted:
        pytest.skip("every congestion control of this kernel may be a namespace's default")
    line = one_error_line(run_up(tmp_path, f'cc = "{restricted[0]}"\n' + topology(), {}, name), "bloatlab", status=3)
    assert line.startswith(f"bloatlab: error: cc: {restricted[0]} is restricted here")
    assert "net.ipv4.tcp_allowed_congestion_control" in line and traces(name) == []


@pytest.mark.netns
@pytest.mark.parametrize("text, says", [
    pytest.param(None, "no such file", id="missing-file"),
    pytest.param(NODES + "[[links]\n", "line 4, column 8: invalid TOML", id="toml-syntax"),
    pytest.param(NODES + "[hosts.h1]\n" + link() + SECOND, "line 4, column 10: invalid TOML: cannot declare",
                 id="host-declared-twice"),
])
def test_up_of_a_file_that_is_not_a_topology(tmp_path, name, text, says):
    path = tmp_path / "topology.toml"
    if text is not None:
        path.write_text(text)
    result = subprocess.run([str(BLOATLAB), "up", str(path), "--name", name], capture_output=True, text=True,
                            timeout=60)
    line = one_error_line(result, "bloatlab")
    assert line.startswith(f"bloatlab: error: {path}: {says}"), line  # the field is the file
    assert traces(name) == []


# `exec` and `down` of an unknown network, and `exec` of an unknown host, are in test_cli.py.


# bloatlab-link with a bad config ----------------------------------------------------------------

@pytest.fixture(scope="module")
def datapath_binary() -> Path:
    try:
        return binaries.find("bloatlab-link")
    except MachineError:
        pytest.skip("bloatlab-link is not built (make setup)")


@pytest.fixture(scope="module")
def link_namespace(datapath_binary):
    """A namespace of ours with interfaces va, vb, vc, vd (each a veth whose peer is idle), where
    a bad config must not get as far as opening sockets; were it to start anyway, it would run
    here and nowhere else. (va and vb are not each other's peers: a datapath between two ends of
    one veth pair would loop every frame.)"""
    ns = f"bloatlab-test-{os.getpid()}"
    netns.add(ns)
    try:
        netns.sysctl(ns, "net.ipv6.conf.all.disable_ipv6", 1)
        netns.sysctl(ns, "net.ipv6.conf.default.disable_ipv6", 1)
        for iface in ("va", "vb", "vc", "vd"):
            netns.ip(ns, "link", "add", iface, "type", "veth", "peer", "name", f"p{iface}")
            netns.ip(ns, "link", "set", iface, "up")
            netns.ip(ns, "link", "set", f"p{iface}", "up")
        yield ns
    finally:
        for pid in netns.pids(ns):  # a datapath that should have refused to start
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        netns.delete(ns)


def direction() -> dict:
    return {"rate_bps": 10_000_000, "trace_path": None, "delay_ns": 2_000_000, "jitter_ns": 0, "loss": 0.0,
            "queue": {"discipline": "droptail", "packets": 100, "bytes": None}, "seed": 7}


def _set(which: str, key: str, value):
    def change(config: dict, tmp_path: Path) -> None:
        target = config["links"][0][which]
        *path, last = key.split(".")
        for part in path:
            target = target[part]
        target[last] = value(tmp_path) if callable(value) else value
    return change


def _trace(text: str):
    def write(tmp_path: Path) -> str:
        path = tmp_path / "bad.trace"
        path.write_text(text)
        return str(path)
    return write


def _both(*changes):
    def change(config: dict, tmp_path: Path) -> None:
        for c in changes:
            c(config, tmp_path)
    return change


def _link_key(key: str, value):
    def change(config: dict, tmp_path: Path) -> None:
        config["links"][0][key] = value
    return change


def _second_link(name: str):
    def change(config: dict, tmp_path: Path) -> None:
        config["links"].append({**config["links"][0], "name": name, "a_iface": "vc", "b_iface": "vd"})
    return change


def _stats_path(config: dict, tmp_path: Path) -> None:
    config["stats_path"] = str(tmp_path / "no-such-dir" / "stats.json")


CONFIG_CASES = [
    pytest.param(_link_key("a_iface", "nosuch0"), "links[0].a_iface", "interface nosuch0 does not exist",
                 id="a-iface-missing"),
    pytest.param(_link_key("b_iface", "nosuch1"), "links[0].b_iface", "interface nosuch1 does not exist",
                 id="b-iface-missing"),
    pytest.param(_set("forward", "queue.packets", 0), "links[0].forward.queue", "a limit of 0",
                 id="queue-zero"),
    pytest.param(_set("forward", "queue.packets", -1), "links[0].forward.queue.packets", "invalid value",
                 id="queue-negative"),
    pytest.param(_set("reverse", "delay_ns", -5_000_000), "links[0].reverse.delay_ns", "invalid value",
                 id="delay-negative"),
    pytest.param(_set("forward", "queue.discipline", "blue"), "links[0].forward.queue.discipline",
                 'unknown discipline "blue"', id="discipline-unknown"),
    pytest.param(_set("forward", "queue", {"discipline": "codel", "packets": 100, "target_ns": 200_000_000}),
                 "links[0].forward.queue.target", "must be below interval", id="codel-target-above-interval"),
    pytest.param(_set("forward", "queue", {"discipline": "red", "packets": 100, "min": 50, "max": 20}),
                 "links[0].forward.queue.min", "must be below max", id="red-min-above-max"),
    pytest.param(_set("forward", "queue", {"discipline": "pie", "packets": 100, "alpha": -1.0}),
                 "links[0].forward.queue.alpha", "must be a number >= 0", id="pie-negative-alpha"),
    pytest.param(_set("forward", "jitter_ns", 3_000_000), "links[0].forward.jitter_ns",
                 "must not exceed delay_ns", id="jitter-over-delay"),
    pytest.param(_set("forward", "loss", 1.5), "links[0].forward.loss", "1.5 is not a probability",
                 id="loss-over-1"),
    pytest.param(_set("reverse", "loss", 1.5), "links[0].reverse.loss", "1.5 is not a probability",
                 id="reverse-loss-over-1"),
    pytest.param(_set("forward", "rate_bps", 0), "links[0].forward.rate_bps", "must be positive",
                 id="rate-zero"),
    pytest.param(_both(_set("forward", "rate_bps", None), _set("forward", "trace_path", _trace(""))),
                 "links[0].forward.trace_path", "empty", id="trace-empty"),
    pytest.param(_both(_set("forward", "rate_bps", None), _set("forward", "trace_path", _trace("5\n3\n"))),
                 "links[0].forward.trace_path", "line 2", id="trace-not-monotonic"),
    pytest.param(_set("forward", "rate_bps", 10**19), "links[0].forward.rate_bps",
                 "10000000000000000000 is not from 10000 to 400000000000", id="rate-1e19"),
    pytest.param(_set("forward", "rate_bps", 9_999), "links[0].forward.rate_bps", "9999 is not from 10000",
                 id="rate-below-10kbit"),
    pytest.param(_set("reverse", "delay_ns", 10**10 + 1), "links[0].reverse.delay_ns", "is above 10000000000",
                 id="delay-over-10s"),
    pytest.param(_set("forward", "queue.packets", 10**6 + 1), "links[0].forward.queue.packets",
                 "1000001 is above 1000000", id="queue-over-a-million"),
    pytest.param(_set("forward", "max_frame_bytes", 10), "links[0].forward.max_frame_bytes", "10 is not from 15",
                 id="frame-size-too-small"),
    pytest.param(_second_link("l0"), "links[1].name", "names must be unique", id="link-name-twice"),
    pytest.param(_stats_path, "stats_path", "No such file or directory", id="stats-path-in-no-directory"),
]


def run_link(binary: Path, config: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    path = tmp_path / "datapath.json"
    path.write_text(json.dumps(config, indent=2) + "\n")
    proc = subprocess.Popen([str(binary), "--config", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        stdout, stderr = proc.communicate(timeout=2)
    except subprocess.TimeoutExpired:
        proc.kill()  # it accepted the config and is running: fail, and leave nothing behind
        stdout, stderr = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.netns
@pytest.mark.parametrize("change, field, says", CONFIG_CASES)
def test_bloatlab_link_refuses_a_bad_config(tmp_path, datapath_binary, link_namespace, change, field, says):
    stats_path = tmp_path / "stats.json"
    config = {"netns": link_namespace, "stats_path": str(stats_path), "log_dir": None,
              "links": [{"name": "l0", "a_iface": "va", "b_iface": "vb",
                         "forward": direction(), "reverse": direction()}]}
    change(config, tmp_path)
    line = one_error_line(run_link(datapath_binary, config, tmp_path), "bloatlab-link")
    assert line.startswith(f"bloatlab-link: error: {field}"), line
    assert says in line, line
    assert not Path(config["stats_path"]).exists()  # it never got as far as "ready"


@pytest.mark.netns
def test_bloatlab_link_refuses_a_namespace_that_does_not_exist(tmp_path, datapath_binary):
    stats_path = tmp_path / "stats.json"
    config = {"netns": f"bloatlab-test-{os.getpid()}-none", "stats_path": str(stats_path),
              "links": [{"name": "l0", "a_iface": "va", "b_iface": "vb",
                         "forward": direction(), "reverse": direction()}]}
    line = one_error_line(run_link(datapath_binary, config, tmp_path), "bloatlab-link")
    assert line.startswith(f"bloatlab-link: error: netns: cannot enter {config['netns']}"), line
    assert not stats_path.exists()


# bloatlab-replay's own flags and files, as a script might give them --------------------------

REPLAY_CSV = "t_ns,size_bytes,flow,ecn\n"
SYNTHETIC = ["--synthetic", "poisson", "--arrival-bps", "12000000", "--size", "1500", "--packets", "1000"]
REPLAY_CASES = [
    pytest.param({"rate_bps": 10**19}, SYNTHETIC, "--config", "rate_bps: 10000000000000000000 is not from",
                 id="replay-rate-1e19"),
    pytest.param({"delay_ns": 10**11}, SYNTHETIC, "--config", "delay_ns: 100000000000 is above", id="replay-delay"),
    pytest.param({"loss": -0.1}, SYNTHETIC, "--config", "loss: -0.1 is not a probability", id="replay-loss"),
    pytest.param({}, ["--arrivals", REPLAY_CSV], "--arrivals", "the header is all there is", id="replay-csv-header-only"),
    pytest.param({}, ["--arrivals", ""], "--arrivals", "the file is empty", id="replay-csv-empty"),
    pytest.param({}, ["--arrivals", REPLAY_CSV + "200,100,1,0\n100,100,1,0\n"], "--arrivals",
                 "line 3, column t_ns: 100 comes before", id="replay-csv-unsorted"),
    pytest.param({}, ["--arrivals", REPLAY_CSV + "1,100,x,0\n"], "--arrivals", 'column flow: "x" is not a whole number',
                 id="replay-csv-malformed"),
    pytest.param({}, [*SYNTHETIC[:2], "--arrival-bps", str(10**19), *SYNTHETIC[4:]], "--arrival-bps",
                 "is not from 1 to 400000000000000", id="replay-arrival-rate-1e19"),
    pytest.param({}, [*SYNTHETIC[:2], "--arrival-pps", str(2 * 10**9), *SYNTHETIC[4:]], "--arrival-pps",
                 "is not from 1 to 1000000000", id="replay-arrival-pps"),
    pytest.param({}, [*SYNTHETIC[:-1], "0"], "--packets", "0 replays nothing", id="replay-zero-packets"),
    pytest.param({}, [*SYNTHETIC[:-2], "--duration-ns", "-5"], "--duration-ns", "is not a whole number",
                 id="replay-negative-duration"),
    pytest.param({}, [*SYNTHETIC[:5], "70000", *SYNTHETIC[6:]], "--size", "70000 is not from 42 to 65535",
                 id="replay-size"),
]


@pytest.mark.parametrize("direction_change, flags, field, says", REPLAY_CASES)
def test_bloatlab_replay_refuses_bad_flags_and_files(tmp_path, direction_change, flags, field, says):
    try:
        binary = binaries.find("bloatlab-replay")
    except MachineError as e:
        pytest.skip(str(e))
    config = tmp_path / "direction.json"
    config.write_text(json.dumps({**direction(), **direction_change}))
    flags = list(flags)
    if flags[0] == "--arrivals":  # the CSV's text, into a file
        (tmp_path / "arrivals.csv").write_text(flags[1])
        flags[1] = str(tmp_path / "arrivals.csv")
    out = tmp_path / "out"
    result = subprocess.run([str(binary), "--config", str(config), "--out", str(out), *flags], capture_output=True,
                            text=True, timeout=30)
    line = one_error_line(result, "bloatlab-replay")
    assert line.startswith(f"bloatlab-replay: error: {field}") or f"error: {field.lstrip('-')}" in line, line
    assert says in line, line
    assert not out.exists() or not any(out.iterdir())  # nothing written for a refused replay


# `bloatlab run` of a bad spec or flag, and `bloatlab replay` of bad flags -------------------------

GOOD_SPEC = """duration = "5s"
[topology.hosts.h1]
[topology.hosts.h2]
[[topology.links]]
ends = ["h1", "h2"]
rate = "10mbit"
delay = "5ms"
queue = { discipline = "droptail", packets = 100 }
[[workloads]]
kind = "bulk"
from = "h1"
to = "h2"
[[workloads]]
kind = "ping"
from = "h1"
to = "h2"
interval = "100ms"
"""

RUN_CASES = [
    pytest.param(GOOD_SPEC.replace('duration = "5s"', 'duration = "-5s"'), [], "duration", id="spec-negative-duration"),
    pytest.param(GOOD_SPEC.replace('duration = "5s"', 'duration = "25h"'), [], "duration", id="spec-duration-25h"),
    pytest.param(GOOD_SPEC.replace('"10mbit"', '"10mbps"'), [], "links[0].rate", id="spec-rate-in-bytes"),
    pytest.param(GOOD_SPEC.replace('"10mbit"', '"1e19bit"'), [], "links[0].rate", id="spec-rate-1e19"),
    pytest.param(GOOD_SPEC.replace('packets = 100', 'packets = 0'), [], "links[0].queue", id="spec-queue-zero"),
    pytest.param(GOOD_SPEC.replace('"droptail"', '"blue"'), [], "links[0].queue", id="spec-unknown-discipline"),
    pytest.param(GOOD_SPEC.replace('to = "h2"\n[[workloads]]', 'to = "h9"\n[[workloads]]'), [], "workloads[0]",
                 id="spec-unknown-host"),
    pytest.param(GOOD_SPEC.replace('kind = "bulk"', 'kind = "torrent"'), [], "workloads[0].kind",
                 id="spec-unknown-workload"),
    pytest.param(GOOD_SPEC.replace('interval = "100ms"', 'interval = "1ms"'), [], "workloads[1].interval",
                 id="spec-ping-too-often"),
    pytest.param(GOOD_SPEC + "[probes]\nqueue = [\"h1->h9\"]\n", [], "probes.queue", id="spec-probe-unknown-link"),
    pytest.param(GOOD_SPEC + "nonsense = 1\n", [], "nonsense", id="spec-unknown-key"),
    pytest.param(GOOD_SPEC.replace("[[workloads]]", "[[workloads", 1), [], "spec.toml: line 9", id="spec-not-toml"),
    pytest.param(GOOD_SPEC, ["--set", "nosuch=1"], "--set", id="flag-set-unknown-param"),
    pytest.param(GOOD_SPEC, ["--repeat", "0"], "--repeat", id="flag-repeat-zero"),
    pytest.param(GOOD_SPEC, ["--pcap", "h1->h9"], "--pcap", id="flag-pcap-unknown-direction"),
    pytest.param(GOOD_SPEC, ["--backend", "ns4"], None, id="flag-backend-unknown"),
    pytest.param(GOOD_SPEC, ["--live=localhost:80"], "--live", id="flag-live-not-an-address"),
    pytest.param(GOOD_SPEC, ["--live=0.0.0.0:0"], "--live", id="flag-live-beyond-loopback-without-allow-remote"),
    pytest.param(GOOD_SPEC, ["--live=127.0.0.1:70000"], "--live", id="flag-live-port-out-of-range"),
]


@pytest.mark.parametrize("spec, flags, field", RUN_CASES)
def test_run_of_a_bad_spec_or_flag_builds_nothing(tmp_path, spec, flags, field):
    path = tmp_path / "spec.toml"
    path.write_text(spec)
    out = tmp_path / "out"
    before = set(netns.list_namespaces())
    result = subprocess.run([str(BLOATLAB), "run", str(path), "--out", str(out), *flags], capture_output=True,
                            text=True, timeout=60)
    line = one_error_line(result, "bloatlab")
    if field is not None:
        assert field in line, line
    assert set(netns.list_namespaces()) == before and not out.exists()


REPLAY_CLI_CASES = [
    pytest.param(["--queue", "discipline=droptail,packets=100", "--rate", "10mbps", "--synthetic", "poisson", "--load", "1.2", "--size", "1500", "--packets", "100"],
                 "--rate", id="cli-replay-rate-in-bytes"),
    pytest.param(["--queue", "discipline=droptail,packets=100", "--rate", "10mbit", "--synthetic", "poisson", "--load", "0", "--size", "1500", "--packets", "100"],
                 "--load", id="cli-replay-load-zero"),
    pytest.param(["--queue", "discipline=droptail,packets=100", "--rate", "10mbit", "--synthetic", "poisson", "--load", "1.2", "--size", "20", "--packets", "100"],
                 "--size", id="cli-replay-size-below-headers"),
    pytest.param(["--queue", "discipline=droptail,packets=100", "--rate", "10mbit", "--synthetic", "bursty", "--load", "1.2", "--size", "1500", "--packets", "100"],
                 "--synthetic", id="cli-replay-unknown-process"),
    pytest.param(["--rate", "10mbit", "--queue", "discipline=codel,target=-5ms", "--synthetic", "poisson", "--load",
                  "1.2", "--size", "1500", "--packets", "100"], "--queue", id="cli-replay-negative-target"),
]


@pytest.mark.parametrize("flags, field", REPLAY_CLI_CASES)
def test_replay_of_bad_flags_writes_nothing(tmp_path, flags, field):
    out = tmp_path / "out"
    result = subprocess.run([str(BLOATLAB), "replay", *flags, "--out", str(out)], capture_output=True, text=True,
                            timeout=60)
    line = one_error_line(result, "bloatlab")
    assert field in line, line
    assert not out.exists() or not any(out.iterdir())

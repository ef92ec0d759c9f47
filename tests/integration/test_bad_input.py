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

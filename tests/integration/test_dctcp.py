"""bloatlab's BPF DCTCP (bpf/bloatlab_dctcp.bpf.c) on a kernel without tcp_dctcp: registered
while a network holds it and gone afterwards, and its physics through a bloatlab link whose queue
CE-marks: RFC 8257's alpha from the echoed marks, the receiver's accurate CE echo, a queue held
at the marking threshold, and RFC 9332's scalable steady state (W = 2/p).

Where the kernel has its own dctcp, or takes no BPF congestion control, the tests skip and say
why (bloatlab doctor says the same); where it takes one, a missing object fails them.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bloatlab import binaries
from bloatlab.errors import MachineError
from bloatlab.experiment.running import route_congestion_control
from bloatlab.lab.run import run_experiment
from bloatlab.results.reader import load_run
from bloatlab.specs.disciplines import RedParams
from bloatlab.specs.experiment import load_experiment
from bloatlab.specs.model import DirectionSpec, HostSpec, LinkSpec, QueueSpec, Topology
from bloatlab.testbed import congestion, state
from bloatlab.testbed.network import Network, release_congestion

pytestmark = pytest.mark.netns

MBIT = 1_000_000
MS = 1_000_000  # ns
FRAME_BYTES = 1514
MSS = 1448  # with TCP timestamps, per full frame
BPF = congestion.BPF_CCS["dctcp"]
CC_LIST = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")


def cc_list() -> list[str]:
    return CC_LIST.read_text().split()


def ours_left() -> list[str]:
    """bloatlab's struct_ops maps and stats maps on the machine: registered, or freed while the
    last sockets that used them close."""
    maps = json.loads(subprocess.run(["bpftool", "-j", "map", "show"], capture_output=True, text=True,
                                     timeout=30).stdout or "[]")
    return [f"{m['type']} {m['name']} (id {m['id']})" for m in maps if m.get("name") in (BPF.kernel_name, BPF.stats_map)]


EARLIER: set[str] = set()  # what runs before these tests left draining, not theirs


def wait_until_none_left(timeout_s: float = 10.0) -> None:
    """A struct_ops map outlives its unregistering until the sockets that used it are freed; a
    network that used one destroys its closing sockets as it goes (ss -K), so that takes moments."""
    deadline = time.monotonic() + timeout_s
    while set(ours_left()) - EARLIER and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not set(ours_left()) - EARLIER, f"left after unregistering: {sorted(set(ours_left()) - EARLIER)}"


def registrations() -> list[int]:
    """Our struct_ops maps made since the test began."""
    return [i for i in congestion.struct_ops_ids(BPF.kernel_name)
            if f"struct_ops {BPF.kernel_name} (id {i})" not in EARLIER]


@pytest.fixture(autouse=True)
def bpf_dctcp():
    """bloatlab's BPF DCTCP can be registered here, and is not yet; afterwards the kernel's list
    of congestion controls is as it was."""
    try:
        binaries.find("bloatlab-link")
    except MachineError:
        pytest.skip("bloatlab-link is not built (make setup)")
    support = congestion.dctcp_support()
    if support.provider == "kernel" or not support.struct_ops:
        pytest.skip(f"dctcp here cannot be bloatlab's BPF DCTCP: {support.summary()}")
    # A kernel that takes it and a make test that built it: anything missing is a defect, not a skip.
    assert support.provider == "bpf", support.summary()
    assert BPF.kernel_name not in cc_list(), f"{BPF.kernel_name} is registered already (bloatlab clean removes it)"
    before = cc_list()
    EARLIER.clear()
    EARLIER.update(ours_left())  # unregistered already: freed as the sockets that used them close
    yield
    assert cc_list() == before


def two_hosts(rate_bps: int | None = None, delay_ns: int = 0, queue: QueueSpec | None = None, cc: str | None = None
              ) -> Topology:
    """h1 - h2 on one userspace link, the same both ways; `cc` every host's default."""
    d = DirectionSpec(rate_bps=rate_bps, delay_ns=delay_ns, queue=queue or QueueSpec(packets=100))
    link = LinkSpec(name="h1-h2", ends=("h1", "h2"), forward=d, reverse=d, backend="userspace")
    return Topology(hosts={"h1": HostSpec("h1"), "h2": HostSpec("h2")}, switches={}, links=[link], seed=1, cc=cc)


# Registering and unregistering ------------------------------------------------------------------

def test_registered_while_a_network_holds_it_shared_and_gone_after(names):
    with Network(two_hosts(), names("dc-a"), congestion_controls=["dctcp"]) as a:
        assert a.congestion_control("dctcp") == BPF.kernel_name
        assert BPF.kernel_name in cc_list()
        assert state.load(a.name).congestion == {"dctcp": BPF.kernel_name}
        (registered,) = registrations()
        # A second network shares the registration; its hosts' default (the topology's cc) is ours,
        # which a namespace may take (the object says it is not restricted).
        with Network(two_hosts(cc="dctcp"), names("dc-b")) as b:
            assert registrations() == [registered]
            assert b.host_cc == {"h1": BPF.kernel_name, "h2": BPF.kernel_name}
            assert b.exec("h1", ["sysctl", "-n", "net.ipv4.tcp_congestion_control"]).stdout.strip() == BPF.kernel_name
        assert BPF.kernel_name in cc_list()  # a holds it still
    assert BPF.kernel_name not in cc_list()
    wait_until_none_left()


def test_release_unregisters_what_no_network_holds_as_clean_does():
    # As a killed run leaves it: registered, and no state file names it.
    assert congestion.provide(["dctcp", "cubic"]) == {"dctcp": BPF.kernel_name, "cubic": "cubic"}
    assert BPF.kernel_name in cc_list()
    errors: list = []
    assert release_congestion(errors) == [f"congestion control {BPF.kernel_name} ({BPF.what})"]
    assert errors == [] and BPF.kernel_name not in cc_list()
    assert release_congestion(errors) == []  # nothing registered: bpftool is not even asked
    wait_until_none_left()


def test_dctcp_that_cannot_be_had_is_one_line_naming_the_field_before_anything_is_built(tmp_path):
    spec = tmp_path / "dctcp.toml"
    spec.write_text(STEP_SPEC)
    env = {"BLOATLAB_DCTCP_BPF": str(tmp_path / "not-built.bpf.o"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    result = subprocess.run([sys.executable, "-m", "bloatlab", "run", str(spec), "--out", str(tmp_path / "out"),
                             "--quiet"], capture_output=True, text=True, timeout=60, env=env)
    lines = result.stderr.splitlines()
    assert result.returncode == 3 and len(lines) == 1, result.stderr
    assert "workloads[0].cc" in lines[0] and "BLOATLAB_DCTCP_BPF" in lines[0], lines[0]
    assert not (tmp_path / "out").exists() and BPF.kernel_name not in cc_list()


# Physics ----------------------------------------------------------------------------------------

RATE_BPS = 20 * MBIT
DELAY_MS = 10  # each way: a 20 ms base RTT
K_PKTS = 20  # the marking threshold
LIMIT_PKTS = 500  # the tail-drop limit behind it: 303 ms of queue, were it full
BASE_RTT_MS = 2 * DELAY_MS


def queue_ms(pkts: float) -> float:
    return pkts * FRAME_BYTES * 8 / RATE_BPS * 1e3


# RED as DCTCP's step marker (RFC 8257 3.1): the average follows the queue at weight 1/2
# (burst = min), and from min to max (one packet) the probability climbs to 1.
STEP_SPEC = f"""
name = "dctcp-step"
duration = "12s"
[topology.hosts.h1]
[topology.hosts.h2]
[[topology.links]]
ends = ["h1", "h2"]
rate = "{RATE_BPS // MBIT}mbit"
delay = "{DELAY_MS}ms"
backend = "userspace"
queue = {{ discipline = "red", packets = {LIMIT_PKTS}, min = {K_PKTS}, max = {K_PKTS + 1}, burst = {K_PKTS}, probability = 1.0, ecn = true }}
[[workloads]]
kind = "bulk"
from = "h1"
to = "h2"
cc = "dctcp"
[probes]
queue = ["h1->h2"]
"""


def flow_ends(port: int) -> tuple[congestion.BpfFlow, congestion.BpfFlow]:
    """The data connection to `port` as its sender and its receiver recorded it."""
    flows = congestion.read_flows()
    sender = [f for f in flows if f.local.startswith("10.0.0.1:") and f.remote == f"10.0.0.2:{port}"]
    receiver = [f for f in flows if f.local == f"10.0.0.2:{port}"]
    # iperf3's control connection carries little: the data connection acknowledged the most.
    send = max(sender, key=lambda f: f.bytes_acked)
    return send, next(f for f in receiver if f.remote == send.local)


def test_a_dctcp_run_echoes_ce_marks_and_holds_the_queue_at_the_threshold(names, tmp_path):
    spec = tmp_path / "step.toml"
    spec.write_text(STEP_SPEC)
    # A network that holds dctcp keeps the registration, and with it the BPF DCTCP's records,
    # past the run's own teardown.
    with Network(two_hosts(), names("dc-hold"), congestion_controls=["dctcp"]):
        outcome = run_experiment(load_experiment(spec), tmp_path / "run", progress=False)
        assert outcome.complete, outcome.reason
        run = load_run(outcome.run_dir)
        port = json.loads((outcome.run_dir / "run.json").read_text())["flows"]["bulk"]["port"]
        sender, receiver = flow_ends(port)
    summary = outcome.summary.to_dict()
    meta = json.loads((outcome.run_dir / "run.json").read_text())

    # ECN was negotiated at both ends, by the routes' congestion control: not by tcp_ecn, which
    # stays as a new namespace has it (2: accept, do not ask), nor by the hosts' defaults.
    assert not sender.fallback and not receiver.fallback
    assert {host: snap["sysctls"]["net.ipv4.tcp_ecn"] for host, snap in meta["snapshots"].items() if host != "_dp"} \
        == {"h1": "2", "h2": "2"}
    assert BPF.kernel_name not in [host["cc"] for host in meta["hosts"]]
    assert meta["flows"]["bulk"]["cc"] == "dctcp"

    # The sender learnt alpha from the echoed marks and cut once a window for them, never for loss.
    assert sender.bytes_marked > 0 and 0 < sender.alpha < 1 and sender.reductions > 0
    assert sender.losses == 0 and summary["flows"]["bulk"]["retransmits"] == 0
    # The receiver echoed each CE segment, not RFC 3168's latch until CWR: the bytes the sender saw
    # acknowledged with ECE are the CE-marked segments' (a latch would echo a whole window per
    # mark). The delayed ACKs it flushed on a change of CE state kept the two states apart.
    assert receiver.ce_segments > 100 and receiver.ce_changes > 0
    assert sender.bytes_marked / MSS == pytest.approx(receiver.ce_segments, rel=0.25)
    marked_share = sender.bytes_marked / sender.bytes_acked

    # The queue stays at the threshold, not at the tail-drop limit: its mean within K + 50%, its
    # RTT within base + K's delay + 10 ms (a window's sawtooth above K, and this machine's wake-ups).
    queue = summary["queue"]["h1->h2"]
    srtt = run.cwnd[run.cwnd.flow == "bulk"].srtt_ms.dropna()
    steady = srtt[len(srtt) // 4:]
    assert queue["mean_pkts"] <= 1.5 * K_PKTS and queue["max_pkts"] < LIMIT_PKTS / 5, queue
    assert statistics.median(steady) <= BASE_RTT_MS + queue_ms(K_PKTS) + 10, statistics.median(steady)
    # The link stays full: 90% of the rate's payload over the run, its slow start included.
    assert summary["flows"]["bulk"]["goodput_mbps"] >= 0.9 * RATE_BPS / MBIT * MSS / FRAME_BYTES
    print(f"\nstep marking at {K_PKTS} packets: alpha {sender.alpha:.3f}, marked {marked_share:.3f} of bytes, "
          f"mean cwnd {sender.cwnd_sum_pkts / sender.windows:.1f} pkts over {sender.windows} windows, "
          f"{sender.reductions} reductions; receiver: {receiver.ce_segments} CE segments, {receiver.ce_changes} "
          f"changes, {receiver.delayed_acks_flushed} delayed ACKs flushed; queue mean {queue['mean_pkts']:.1f} max "
          f"{queue['max_pkts']} pkts; srtt median {statistics.median(steady):.1f} ms (base {BASE_RTT_MS}, "
          f"+K {queue_ms(K_PKTS):.1f}); goodput {summary['flows']['bulk']['goodput_mbps']:.2f} Mbit/s")
    wait_until_none_left()


def test_the_steady_state_is_scalable_w_about_2_over_p(names):
    # RED's ramp marks arrivals at random with a probability that moves slowly with its average
    # queue: DCTCP settles where its window W and the share of marks p meet W p ~ 2 (RFC 9332,
    # section 1: a scalable congestion control, W = 2/p, against Reno's W = 1.22 / sqrt(p)).
    # Linux's loop lowers the constant: the cwnd does not grow in the CWR state that each
    # reduction opens (a window long), and about two windows in three start one here. So W p is
    # held to 2 within -50%/+50%; what it measured is printed.
    red = QueueSpec(discipline="red", packets=1000, params=RedParams(min=10, max=150, probability=0.3, ecn=True))
    with Network(two_hosts(RATE_BPS, DELAY_MS * MS, red), names("dc-ss"), congestion_controls=["dctcp"]) as net:
        cc = net.congestion_control("dctcp")
        route_congestion_control(net, "h1", "h2", cc)
        route_congestion_control(net, "h2", "h1", cc)
        server = net.popen("h2", ["iperf3", "-s", "-1", "-p", "5301"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        client = None
        try:
            time.sleep(0.3)
            client = net.popen("h1", ["iperf3", "-c", "10.0.0.2", "-p", "5301", "-t", "20", "-C", cc, "--json"],
                               stdout=subprocess.PIPE, text=True)
            time.sleep(6)  # past slow start and RED's average settling
            start, _ = flow_ends(5301)
            time.sleep(12)
            end, _ = flow_ends(5301)
            result = json.loads(client.communicate(timeout=30)[0])
            server.wait(timeout=10)
        finally:
            for proc in (server, client):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()
    windows = end.windows - start.windows
    w = (end.cwnd_sum_pkts - start.cwnd_sum_pkts) / windows
    p = (end.bytes_marked - start.bytes_marked) / (end.bytes_acked - start.bytes_acked)
    print(f"\nRED ramp: W {w:.1f} pkts, p {p:.4f}, W p {w * p:.2f} (2/p = {2 / p:.0f}), over {windows} windows, "
          f"{(end.marked_windows - start.marked_windows) / windows:.2f} of them marked and "
          f"{(end.reductions - start.reductions) / windows:.2f} reduced; alpha {end.alpha:.3f}; losses {end.losses}")
    assert end.losses == 0 and result["end"]["sum_sent"]["retransmits"] == 0
    assert windows > 300
    assert 1.0 <= w * p <= 3.0
    wait_until_none_left()


def test_loss_halves_the_window_as_reno_whatever_alpha_says(names):
    # A tail-drop queue marks nothing: alpha decays towards 0, and were loss answered by
    # ssthresh()'s cwnd * (1 - alpha / 2), the window would hardly fall. RFC 8257 3.5: loss halves
    # it, as Reno. Reno's sawtooth tops out at BDP + queue = 33 + 30 packets, so each halving
    # leaves ssthresh near 31.
    queue_pkts = 30
    top = RATE_BPS * BASE_RTT_MS / 1e3 / (FRAME_BYTES * 8) + queue_pkts
    with Network(two_hosts(RATE_BPS, DELAY_MS * MS, QueueSpec(packets=queue_pkts)), names("dc-loss"),
                 congestion_controls=["dctcp"]) as net:
        cc = net.congestion_control("dctcp")
        route_congestion_control(net, "h1", "h2", cc)
        route_congestion_control(net, "h2", "h1", cc)
        server = net.popen("h2", ["iperf3", "-s", "-1", "-p", "5302"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.3)
            out = net.exec("h1", ["iperf3", "-c", "10.0.0.2", "-p", "5302", "-t", "8", "-C", cc, "--json"],
                           timeout_s=60).stdout
            server.wait(timeout=10)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        sender, receiver = flow_ends(5302)
    result = json.loads(out)
    print(f"\ntail drop at {queue_pkts} packets: {sender.losses} halvings, {result['end']['sum_sent']['retransmits']} "
          f"retransmits, ssthresh {sender.ssthresh_pkts} pkts after the last (top {top:.0f}), alpha {sender.alpha:.3f}, "
          f"mean cwnd {sender.cwnd_sum_pkts / sender.windows:.1f}")
    assert not sender.fallback and sender.bytes_marked == 0 and receiver.ce_segments == 0
    assert sender.losses > 0 and result["end"]["sum_sent"]["retransmits"] > 0
    assert sender.alpha < 0.05  # decayed: no marks since the start's alpha = 1
    assert 0.35 * top <= sender.ssthresh_pkts <= 0.6 * top
    wait_until_none_left()

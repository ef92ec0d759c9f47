"""`bloatlab nic` on a host built in bloatlab's own namespaces: h1's veth is "the NIC"; its far
end is a switch and a 50 Mbit/s userspace link (5 ms each way) to h2, where `bloatlab nic
serve` runs iperf3. The sweep, a SIGKILL in the middle then `nic restore`, SIGTERM, bad input.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bloatlab.nic import journal as journals
from bloatlab.nic import knobs
from bloatlab.specs.model import DirectionSpec, HostSpec, LinkSpec, QueueSpec, SwitchSpec, Topology
from bloatlab.testbed import netns
from bloatlab.testbed.network import Network

pytestmark = pytest.mark.netns

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}
MBIT = 1_000_000
MS = 1_000_000  # ns
BOTTLENECK_BPS = 50 * MBIT
ONE_WAY_NS = 5 * MS
IFACE = "h1-eth0"


def bloatlab(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bloatlab", *argv], env=ENV, capture_output=True, text=True,
                          timeout=120, **kwargs)


def start_bloatlab(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bloatlab", *argv], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def lab(datapath_binary_module):
    near = DirectionSpec()  # unshaped: the bottleneck is the far link
    far = DirectionSpec(rate_bps=BOTTLENECK_BPS, delay_ns=ONE_WAY_NS, queue=QueueSpec(packets=100))
    topo = Topology(hosts={"h1": HostSpec("h1"), "h2": HostSpec("h2")}, switches={"s0": SwitchSpec("s0")},
                    links=[LinkSpec("h1-s0", ("h1", "s0"), near, near, backend="kernel"),
                           LinkSpec("s0-h2", ("s0", "h2"), far, far, backend="userspace")])
    net = Network(topo, f"nic{os.getpid() % 100000}").up()
    server = None
    try:
        # A veth as it comes: the kernel link's qdiscs are in the middle, h1's root is noqueue.
        assert "noqueue" in net.exec("h1", ["tc", "qdisc", "show", "dev", IFACE]).stdout
        server = start_bloatlab("nic", "serve", "--netns", net.namespace("h2"))
        deadline = time.monotonic() + 5
        while not net.exec("h2", ["ss", "-Hltn", "sport = :5201"]).stdout.strip():
            assert time.monotonic() < deadline and server.poll() is None, "nic serve did not listen"
            time.sleep(0.05)
        yield net, knobs.Iface(IFACE, net.namespace("h1"))
    finally:
        if server is not None:
            server.terminate()  # ours, by its PID
            server.wait(timeout=10)
        net.down()


@pytest.fixture(scope="module")
def datapath_binary_module():
    from bloatlab import binaries
    from bloatlab.errors import MachineError

    try:
        return binaries.find("bloatlab-link")
    except MachineError:
        pytest.skip("bloatlab-link is not built (make setup)")


def client_args(net: Network, *extra: str) -> list[str]:
    return ["nic", "sweep", "--iface", IFACE, "--netns", net.namespace("h1"), "--server", net.address("h2"),
            "--repeat", "1", "--udp-rate", "20mbit", "--ping-interval", "100ms", "--quiet", *extra]


def wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def no_journal(iface: knobs.Iface) -> bool:
    return not journals.journal_path(iface).exists()


def test_sweep_of_three_txqueuelens_and_two_offload_settings_is_complete_and_restores(lab, tmp_path):
    net, iface = lab
    before = knobs.snapshot(iface)
    out = tmp_path / "sweep"
    result = bloatlab(*client_args(net, "--txqueuelen", "10,100,1000", "--offloads", "on,off",
                                   "--duration", "1s", "--out", str(out)))
    assert result.returncode == 0, result.stderr
    assert knobs.snapshot(iface) == before and no_journal(iface)  # every field, active offloads too
    assert "txqueuelen has no effect: the root qdisc of h1-eth0 is noqueue" in result.stderr
    labels = [f"offloads={o},txqueuelen={q}" for o in ("on", "off") for q in (10, 100, 1000)]
    for label in labels:
        assert label in result.stdout  # the table has a column per point
        run = out / label / "rep1"
        summary = json.loads((run / "summary.json").read_text())
        doc = json.loads((run / "run.json").read_text())
        assert summary["complete"] is True and doc["complete"] is True and doc["kind"] == "nic"
        assert doc["params"] == {"offloads": label.split(",")[0][9:], "txqueuelen": int(label.split("=")[-1])}
        assert doc["settings_applied"]["txqueuelen"] == doc["params"]["txqueuelen"]
        assert any("noqueue" in note for note in doc["notes"]) and doc["original"] == json.loads(json.dumps(before))
        # Physics: TCP never beats the 50 Mbit/s bottleneck; UDP at 20 Mbit/s, well under it, gets
        # through (the tolerances are a machine shared with other labs: the userspace link's
        # process may be descheduled for a while); no ping is faster than the 10 ms path.
        assert 0.2 * 50 < summary["tcp"]["receiver_mbps"] < 1.03 * 50, summary
        assert summary["udp"]["sender_mbps"] == pytest.approx(20, rel=0.05), summary
        assert 0.7 * 20 < summary["udp"]["receiver_mbps"] <= 1.01 * summary["udp"]["sender_mbps"], summary
        assert summary["ping"]["min_ms"] >= 2 * ONE_WAY_NS / MS and summary["ping"]["count"] >= 10, summary
        assert {"cwnd_kb_mean", "rtt_ms_mean", "retransmits", "sender_mbps"} <= set(summary["tcp"])
        assert {p.name for p in (run / "raw").iterdir()} == {"tcp.json", "udp.json", "ping.txt"}
        throughput = (run / "series" / "throughput.csv").read_text().splitlines()
        assert throughput[0] == "t_s,flow,mbps" and {row.split(",")[1] for row in throughput[1:]} == {"tcp", "udp"}
        assert (run / "series" / "ping.csv").read_text().startswith("t_s,probe,rtt_ms\n")
        assert (run / "report.html").exists()
    offloaded = json.loads((out / labels[0] / "rep1" / "run.json").read_text())["settings_applied"]
    assert offloaded["offloads_active"]["generic-segmentation-offload"] == "on"
    plain = json.loads((out / labels[3] / "rep1" / "run.json").read_text())["settings_applied"]
    assert plain["offloads_active"]["generic-segmentation-offload"] == "off"
    sweep = json.loads((out / "sweep.json").read_text())
    assert (sweep["kind"], sweep["status"], sweep["fixed"]["iface"]) == ("nic", "complete", IFACE)
    assert sweep["axes"] == [{"name": "offloads", "values": ["on", "off"]},
                             {"name": "txqueuelen", "values": [10, 100, 1000]}]
    aggregate = json.loads((out / "aggregate.json").read_text())
    assert "tcp.receiver_mbps" in aggregate["points"][0]["metrics"] and (out / "report.html").exists()


def test_after_kill_9_nic_restore_brings_back_every_original_setting(lab, tmp_path):
    net, iface = lab
    before = knobs.snapshot(iface)
    sweep = start_bloatlab(*client_args(net, "--txqueuelen", "3,30", "--qdisc", "pfifo", "--offloads", "on",
                                        "--bql-limit-max", "0", "--duration", "5s", "--out", str(tmp_path / "k")))
    try:
        wait_until(lambda: not no_journal(iface) and knobs.differences(before, knobs.snapshot(iface)), 30,
                   "the sweep to change the interface")
        time.sleep(1)  # in the middle of the measurement
    finally:
        sweep.send_signal(signal.SIGKILL)  # ours, by its PID
        sweep.communicate(timeout=10)
    changed = knobs.differences(before, knobs.snapshot(iface))
    assert any(c.startswith("txqueuelen 3,") for c in changed) and any("root qdisc pfifo" in c for c in changed)
    assert any(c.startswith("offload ") for c in changed)
    wait_until(lambda: not netns.pids(net.namespace("h1")), 5, "iperf3 and ping to die with the sweep")

    result = bloatlab("nic", "restore")
    assert result.returncode == 0, result.stderr
    assert f"restored {iface}: txqueuelen 3, was 1000" in result.stdout
    after = knobs.snapshot(iface)
    for key in before:  # field by field, for a message that says which
        assert after[key] == before[key], key
    assert no_journal(iface)
    assert bloatlab("nic", "restore").stdout == "no journal: nothing to restore\n"


def test_sigterm_restores_and_keeps_the_interrupted_run(lab, tmp_path):
    net, iface = lab
    before = knobs.snapshot(iface)
    sweep = start_bloatlab(*client_args(net, "--txqueuelen", "5", "--qdisc", "pfifo", "--duration", "5s",
                                        "--tests", "tcp", "--out", str(tmp_path / "t")))
    wait_until(lambda: knobs.differences(before, knobs.snapshot(iface)), 30, "the sweep to change the interface")
    sweep.send_signal(signal.SIGTERM)
    _, stderr = sweep.communicate(timeout=30)
    assert sweep.returncode == 130, stderr
    assert knobs.snapshot(iface) == before and no_journal(iface)
    doc = json.loads((tmp_path / "t" / "all" / "rep1" / "run.json").read_text())
    assert doc["complete"] is False and doc["incomplete_reason"].startswith("interrupted")


@pytest.mark.parametrize("flags, field", [
    (["--iface", "h1-eth9"], "--iface"),
    (["--iface", IFACE, "--txqueuelen", "-1"], "--txqueuelen"),
    (["--iface", IFACE, "--server", "10.0.0.99"], "--server"),  # nobody has that address
    (["--iface", IFACE, "--port", "5999"], "--server"),  # nothing listens there
    ([], "--iface"),
])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(lab, tmp_path, flags, field):
    net, iface = lab
    before = knobs.snapshot(iface)
    argv = ["nic", "sweep", "--netns", net.namespace("h1"), "--server", net.address("h2"), "--txqueuelen", "5",
            "--duration", "1s", "--out", str(tmp_path / "bad"), *flags]
    result = bloatlab(*argv)
    lines = result.stderr.splitlines()
    assert result.returncode == 2 and result.stdout == "" and len(lines) == 1, result.stderr
    assert lines[0].startswith(f"bloatlab: error: {field}: ") and "Traceback" not in result.stderr
    assert knobs.snapshot(iface) == before and no_journal(iface) and not (tmp_path / "bad").exists()

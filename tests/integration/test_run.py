"""Experiments end to end in real namespaces with real iperf3, ping and curl: the CS244
physics at maxq 20 and 100, the kernel backend agreeing with the userspace one, Ctrl-C."""

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bloatlab.analysis.plots import build_figures
from bloatlab.lab.run import run_experiment
from bloatlab.specs.experiment import load_experiment, load_preset
from bloatlab.testbed.machine import BATCHING_WARN, CPU_PRESSURE_WARN, PSI_CPU
from bloatlab.testbed.network import leftovers
import bloatlab

pytestmark = pytest.mark.netns

FRAME_BITS = 1514 * 8
BASE_RTT_MS = 20.0  # cs244: 4 crossings of 5 ms


def peak_rtt_ms(maxq: int, rate_bps: float = 10e6, base_ms: float = BASE_RTT_MS) -> float:
    return base_ms + maxq * FRAME_BITS / rate_bps * 1e3


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return list(csv.DictReader(f))


def loss_episodes(run_dir: Path, flow: str = "bulk", after_s: float = 2.0) -> int:
    """Congestion events of a Reno flow: cwnd only falls on a loss, and one recovery's
    decreases come within a few RTTs, so decreases closer than 0.2 s are one event."""
    rows = [r for r in read_csv(run_dir / "series" / "cwnd.csv") if r["flow"] == flow]
    t = np.array([float(r["t_s"]) for r in rows])
    cwnd = np.array([int(r["cwnd_pkts"]) for r in rows])
    falls = t[1:][(np.diff(cwnd) < 0) & (t[1:] > after_s)]
    return int(len(falls) and 1 + np.count_nonzero(np.diff(falls) > 0.2))


@pytest.fixture(scope="module")
def cs244(tmp_path_factory, at_once):
    """Two 15 s runs of the preset, at maxq 20 and 100, side by side (10 Mbit/s each)."""
    jobs = {f"q{maxq}": {"preset": "cs244", "sets": [f"maxq={maxq}", "duration=15s"]} for maxq in (20, 100)}
    runs = at_once(jobs, tmp_path_factory.mktemp("cs244"))
    return {maxq: runs[f"q{maxq}"] for maxq in (20, 100)}


@pytest.mark.parametrize("maxq", [20, 100])
def test_the_queue_fills_and_the_rtt_peaks_at_base_plus_queue(cs244, maxq, summary_reads_back):
    outcome = cs244[maxq]
    summary = outcome.summary
    assert outcome.complete and summary.complete
    assert summary.to_dict() == summary_reads_back(outcome.run_dir)
    assert summary.queue["s0->h2"].max_pkts == maxq
    assert summary.queue["s0->h2"].drops > 0
    rtt = summary.rtt_ms
    assert rtt.count >= 140  # 10 a second for 15 s
    assert rtt.min >= BASE_RTT_MS  # nothing is faster than light
    # The queue's top, from the second-highest ping or so (p99 of ~150): the max alone carries
    # whatever a stall of this shared machine adds (54.8 ms against 44.2 in one CI run), and the
    # p95 depends on where 15 s cut Reno's slow sawtooth at maxq 100 (126.7 against 141.1 in
    # another, whose p99 was 139.5). Machine-noise tolerances, not chance bounds.
    assert rtt.p99 == pytest.approx(peak_rtt_ms(maxq), rel=0.08)
    assert rtt.max >= 0.92 * peak_rtt_ms(maxq)
    # The bulk flow keeps the bottleneck busy: goodput near its payload capacity.
    payload_mbps = 10 * 1448 / 1514
    assert 0.8 * payload_mbps < summary.flows["bulk"].goodput_mbps < 1.01 * payload_mbps
    assert summary.fetch_s.count >= 6 and summary.fetch_s.failed == 0


def test_fetches_take_longer_behind_a_longer_queue(cs244):
    # Medians: a short queue drops SYNs now and then, and a fetch that waits out the 1 s SYN
    # timeout (1.58 s among eight of 0.2-0.5 s in one run) moves a mean of nine by 0.15 s.
    short, long = (cs244[q].summary.fetch_s.median for q in (20, 100))
    assert long > 1.4 * short


def test_the_reno_sawtooth_slows_down_with_a_longer_queue(cs244):
    # Each cycle refills maxq more packets at one per RTT: fewer losses in the same time.
    assert loss_episodes(cs244[20].run_dir) > 2 * loss_episodes(cs244[100].run_dir) > 0


def test_results_describe_themselves_and_plots_have_data(cs244):
    run_dir = cs244[100].run_dir
    run = json.loads((run_dir / "run.json").read_text())
    assert run["params"]["maxq"] == 100 and run["preset"] == "cs244"
    assert [link["backend"] for link in run["links"]] == ["userspace", "userspace"]
    assert run["probes"]["tcp"] in ("tracepoint", "ss") and run["probes"]["queue"] == {"s0->h2": "datapath"}
    assert run["machine"]["kernel"] == os.uname().release and run["tools"]["iperf3"]
    server_log = (run_dir / "raw" / "web.server.log").read_text()
    assert "congestion control reno" in server_log  # as the socket says
    assert "Traceback" not in server_log, "the web server's end left a traceback in its log"
    flows = {r["flow"] for r in read_csv(run_dir / "series" / "cwnd.csv")}
    assert "bulk" in flows and any(f.startswith("web#") for f in flows)
    mbps = [float(r["mbps"]) for r in read_csv(run_dir / "series" / "throughput.csv")]
    # 100 ms intervals; the receiver reads in bursts only when a repaired loss releases the
    # data queued behind it, so most intervals stay under the link rate and the mean is the goodput.
    assert len(mbps) >= 140 and np.percentile(mbps, 90) < 10.5
    assert np.mean(mbps) == pytest.approx(cs244[100].summary.flows["bulk"].goodput_mbps, rel=0.1)
    # A stall of this shared machine is reported (and judged against its timer), not a fault.
    assert not [w for w in cs244[100].warnings
                if "the datapath fell behind" not in w and not w.startswith("this machine was short of CPU")]
    if Path(PSI_CPU).exists():  # how short of CPU the machine was while it played
        cpu = cs244[100].summary.cpu
        assert 0 <= cpu.pressure <= 1 and 0 <= cpu.links_batching <= 1
    figures, warnings = build_figures(run_dir)
    assert not warnings
    for name, figure in figures.items():
        points = sum(len(line.get_xdata()) for ax in figure.axes for line in ax.get_lines())
        points += sum(len(c.get_offsets()) for ax in figure.axes for c in ax.collections)
        assert points >= 6, f"{name} has no data"
    assert all((run_dir / "plots" / f"{name}.png").stat().st_size > 10_000 for name in figures)


KERNEL_SPEC = """
duration = "8s"
[params]
backend = { default = "kernel", type = "string" }
[topology.hosts.h1]
[topology.hosts.h2]
[topology.switches.s0]
[[topology.links]]
ends = ["h1", "s0"]
backend = "{backend}"
[[topology.links]]
ends = ["s0", "h2"]
rate = "10mbit"
queue = { packets = 50 }
backend = "{backend}"
[[workloads]]
kind = "bulk"
from = "h1"
to = "h2"
cc = "reno"
[[workloads]]
kind = "ping"
from = "h1"
to = "h2"
interval = "50ms"
[probes]
queue = ["s0->h2"]
"""


def test_the_kernel_backend_runs_and_agrees_with_the_userspace_one(tmp_path, summary_reads_back):
    # The bottleneck is a switch's egress, as in a real network: a qdisc on the sender's own
    # interface would be held short by TCP Small Queues (its packets still belong to the socket).
    spec = tmp_path / "kernel.toml"
    spec.write_text(KERNEL_SPEC)
    results = {}
    for backend in ("kernel", "userspace"):
        outcome = run_experiment(load_experiment(spec, [f"backend={backend}"]), tmp_path / backend, progress=False)
        run = json.loads((outcome.run_dir / "run.json").read_text())
        assert [link["backend"] for link in run["links"]] == [backend, backend]
        assert run["probes"]["queue"] == {"s0->h2": "tc" if backend == "kernel" else "datapath"}
        results[backend] = summary_reads_back(outcome.run_dir)
    for summary in results.values():
        assert summary["queue"]["s0->h2"]["max_pkts"] >= 45  # sampled every 5 ms on the kernel
        # The queue's top from the p95 of 160 pings: Reno's sawtooth keeps the queue above 45 of its
        # 50 packets a fifth of the time (p95 near 58.5 ms), and a stall of this shared machine
        # must hold up eight pings to move it. The p99, two pings, moved: 66.9 ms on the kernel
        # backend in one CI run, 67.6 in another, against 60.6 of physics.
        assert summary["rtt_ms"]["p95"] == pytest.approx(peak_rtt_ms(50, base_ms=0.0), rel=0.1)
        assert summary["rtt_ms"]["max"] >= 0.9 * peak_rtt_ms(50, base_ms=0.0)
    kernel, user = results["kernel"], results["userspace"]
    assert user["flows"]["bulk"]["goodput_mbps"] == pytest.approx(kernel["flows"]["bulk"]["goodput_mbps"], rel=0.05)
    assert user["rtt_ms"]["median"] == pytest.approx(kernel["rtt_ms"]["median"], rel=0.2)
    assert user["queue"]["s0->h2"]["mean_pkts"] == pytest.approx(kernel["queue"]["s0->h2"]["mean_pkts"], rel=0.2)


PING_SPEC = """
duration = "3s"
[topology.hosts.h1]
[topology.hosts.h2]
[[topology.links]]
ends = ["h1", "h2"]
rate = "100mbit"
delay = "1ms"
[[workloads]]
kind = "ping"
from = "h1"
to = "h2"
interval = "10ms"
"""


@pytest.mark.skipif(not Path(PSI_CPU).exists(), reason="this kernel has no CPU pressure (PSI)")
def test_a_run_on_a_machine_short_of_cpu_says_so(tmp_path):
    # Two busy tasks per CPU keep the kernel's CPU pressure near 1 while the run plays: its
    # summary gives the share, the links batch (the datapath reads the same pressure), and a
    # warning says the hosts' figures may be the machine's. The same run alone says nothing.
    spec = tmp_path / "ping.toml"
    spec.write_text(PING_SPEC)
    busy = []
    try:
        for _ in range(2 * (os.cpu_count() or 1)):
            busy.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        loaded = run_experiment(load_experiment(spec), tmp_path / "loaded", progress=False)
    finally:
        for b in busy:
            b.kill()
            b.wait()
    assert loaded.complete, loaded.reason
    assert loaded.summary.cpu.pressure >= CPU_PRESSURE_WARN and loaded.summary.cpu.links_batching > 0
    assert [w for w in loaded.warnings if w.startswith("this machine was short of CPU")], loaded.warnings
    assert loaded.summary.rtt_ms.count > 100  # the pings crossed all the same
    # Alone, the run warns only if it was short of CPU all the same (a neighbour on this machine).
    quiet = run_experiment(load_experiment(spec), tmp_path / "quiet", progress=False)
    cpu = quiet.summary.cpu
    warned = [w for w in quiet.warnings if w.startswith("this machine was short of CPU")]
    assert bool(warned) == (cpu.pressure >= CPU_PRESSURE_WARN or cpu.links_batching >= BATCHING_WARN), cpu
    assert cpu.pressure < loaded.summary.cpu.pressure


def test_ctrl_c_keeps_a_partial_result_and_leaves_nothing(tmp_path):
    out = tmp_path / "partial"
    proc = subprocess.Popen([sys.executable, "-m", "bloatlab", "run", "--preset", "cs244", "--set", "duration=30s",
                             "--out", str(out), "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ping = out / "raw" / "ping.ping.txt"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not ping.exists() or ping.read_text().count("time=") < 20):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert "incomplete" in stderr and "Traceback" not in stderr
    run = json.loads((out / "run.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert run["complete"] is False and "interrupted" in run["incomplete_reason"]
    assert summary["complete"] is False and summary["rtt_ms"]["count"] >= 15
    assert 1.5 < summary["duration_s"] < 30
    # What ran of the schedule, up to the Ctrl-C: not the teardown after it.
    stopped_s = float(re.search(r"interrupted at ([\d.]+) s", run["incomplete_reason"])[1])
    assert summary["duration_s"] == pytest.approx(stopped_s, abs=0.06)
    assert leftovers(run["network"]) == []
    assert not list(Path("/sys/kernel/tracing/instances").glob(f"bloatlab-{run['network']}*"))
    assert (out / "plots" / "rtt.png").exists()


MIXED_SPEC = """
duration = "6s"
[topology.hosts.h1]
[topology.hosts.h2]
[topology.switches.s0]
[[topology.links]]
ends = ["h1", "s0"]
rate = "100mbit"
[[topology.links]]
ends = ["s0", "h2"]
rate = "10mbit"
delay = "5ms"
queue = { packets = 60 }
[[workloads]]
kind = "udp"
from = "h1"
to = "h2"
rate = "3mbit"
[[workloads]]
kind = "bulk"
from = "h1"
to = "h2"
cc = "cubic"
buffer = "512kib"
[[workloads]]
kind = "ping"
from = "h2"
to = "h1"
interval = "50ms"
[probes]
tcp = "ss"
"""


def test_two_runs_at_once_with_udp_and_the_ss_probe(tmp_path, summary_reads_back):
    spec = tmp_path / "mixed.toml"
    spec.write_text(MIXED_SPEC)
    outs = [tmp_path / "a", tmp_path / "b"]
    procs = [subprocess.Popen([sys.executable, "-m", "bloatlab", "run", str(spec), "--out", str(out), "--quiet"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for out in outs]
    results = [proc.communicate(timeout=120) for proc in procs]
    for proc, (stdout, stderr) in zip(procs, results):
        assert proc.returncode == 0, stderr
    runs = [json.loads((out / "run.json").read_text()) for out in outs]
    assert runs[0]["network"] != runs[1]["network"]
    assert {f["port"] for f in runs[0]["flows"].values()}.isdisjoint(f["port"] for f in runs[1]["flows"].values())
    for out, run in zip(outs, runs):
        summary = summary_reads_back(out)  # UDP beside TCP
        assert run["probes"]["tcp"] == "ss"
        assert run["probes"]["queue"] == {"s0->h2": "datapath", "h2->s0": "datapath"}  # the default: the slowest
        assert summary["flows"]["udp"]["goodput_mbps"] == pytest.approx(3.0, rel=0.05)
        assert summary["flows"]["bulk"]["goodput_mbps"] > 4.5  # most of what UDP leaves
        assert summary["queue"]["s0->h2"]["max_pkts"] == 60
        flows = {r["flow"] for r in read_csv(out / "series" / "cwnd.csv")}
        assert flows == {"bulk"}  # one flow per run: the other run's flows are not seen
        cwnd = [int(r["cwnd_pkts"]) for r in read_csv(out / "series" / "cwnd.csv")]
        assert len(cwnd) >= 30 and max(cwnd) > 10  # polled at 10 Hz; the window opened
        assert leftovers(run["network"]) == []

    proc = subprocess.run([sys.executable, "-m", "bloatlab", "compare", *map(str, outs)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "udp goodput" in proc.stdout and proc.stdout.count("Mbit/s") >= 4

    # The plots come back from the files alone.
    plots = outs[0] / "plots"
    for png in plots.glob("*.png"):
        png.unlink()
    proc = subprocess.run([sys.executable, "-m", "bloatlab", "plot", str(outs[0])], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in plots.glob("*.png")) == ["cwnd.png", "fetch.png", "queue.png", "rtt.png",
                                                          "rtt_box.png", "rtt_cdf.png", "throughput.png"]


def test_ns3_simulates_the_same_run_within_3_and_10_percent(cs244, tmp_path):
    exp = load_preset("cs244", ["maxq=100", "duration=15s"], backend="ns3")
    simulated = run_experiment(exp, tmp_path / "sim", progress=False)
    assert simulated.complete, simulated.reason
    # bloatlab compare holds the simulated run (B) against the emulated one (A).
    result = subprocess.run([sys.executable, "-m", "bloatlab", "compare", str(cs244[100].run_dir),
                             str(simulated.run_dir), "--out", str(tmp_path / "cmp"), "--json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [r["label"] for r in doc["runs"]] == ["emulation", "ns3"]
    diff = {d["metric"]: d["relative"] for d in doc["differences"]}
    assert abs(diff["goodput bulk (Mbit/s)"]) <= 0.03 and abs(diff["RTT median (ms)"]) <= 0.10, diff
    assert (tmp_path / "cmp" / "report.html").stat().st_size > 50_000


def test_flent_opens_the_export_of_a_cs244_run(cs244, flent_summary):
    shown = flent_summary(cs244[100].run_dir)  # one upload with a ping beside it: Flent's tcp_nup
    assert "Summary of tcp_nup test run" in shown and "TCP upload::1" in shown and "Ping (ms) ICMP" in shown


def test_load_run_reads_a_real_run_into_dataframes(cs244):
    outcome = cs244[100]
    run = bloatlab.load_run(outcome.run_dir)
    assert run.complete and run.summary == outcome.summary and run.params["maxq"] == 100
    assert run.spec["topology"]["links"][1]["forward"]["queue"]["packets"] == 100
    assert len(run.ping) == run.summary.rtt_ms.count
    assert run.ping["rtt_ms"].max() == pytest.approx(run.summary.rtt_ms.max, abs=0.001)
    bulk = run.cwnd[run.cwnd["flow"] == "bulk"]
    assert len(bulk) > 100 and bulk["t_s"].is_monotonic_increasing
    queue = run.queue[run.queue["link"] == "s0->h2"]
    assert queue["backlog_pkts"].max() == run.summary.queue["s0->h2"].max_pkts == 100
    fetch = run.summary.fetch_s
    assert len(run.fetches) == fetch.count + fetch.failed
    assert run.fetches.loc[run.fetches["ok"] == 1, "seconds"].median() == pytest.approx(fetch.median)
    goodput = run.goodput[run.goodput["flow"] == "bulk"]["mbps"].mean()
    assert goodput == pytest.approx(run.summary.flows["bulk"].goodput_mbps, rel=0.1)
    # The queue ran with every parameter its discipline has, as the catalogue resolves them.
    assert run.meta["links"][1]["forward"]["queue"] == {"discipline": "droptail", "packets": 100, "bytes": None}

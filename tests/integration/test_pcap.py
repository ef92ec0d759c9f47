"""Packet captures of link directions, read back by tshark (Debian's): each captured direction's
file holds exactly the packets the datapath counted leaving, and its drops file exactly the
packets it dropped, each with its reason. One run drops for three reasons: random loss and CoDel
on the way to h2, a five-packet tail-drop queue on the way back, where a second flow loads it."""

import json
import shutil
import subprocess
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from bloatlab.errors import SpecError
from bloatlab.lab.run import run_experiment
from bloatlab.specs.experiment import load_experiment, parse_experiment

pytestmark = pytest.mark.netns

SPEC = """
duration = "6s"
[topology.hosts.h1]
[topology.hosts.h2]
[topology.switches.s0]
[[topology.links]]
ends = ["h1", "s0"]
rate = "1gbit"
delay = "2ms"
[[topology.links]]
ends = ["s0", "h2"]
delay = "2ms"
forward = { rate = "10mbit", loss = "1%", queue = { discipline = "codel", packets = 1000 } }
reverse = { rate = "5mbit", queue = { discipline = "droptail", packets = 5 } }
[[workloads]]
kind = "bulk"
from = "h1"
to = "h2"
[[workloads]]
kind = "bulk"
from = "h2"
to = "h1"
[[workloads]]
kind = "ping"
from = "h1"
to = "h2"
interval = "100ms"
[probes]
tcp = "off"
pcap = ["s0->h2", "h2->s0"]
"""


def tshark(path: Path, *fields: str) -> list[list[str]]:
    """One row per packet of the file, tshark's own reading of it (fields, or its summary line)."""
    args = ["-T", "fields", *(a for f in fields for a in ("-e", f))] if fields else []
    out = subprocess.run(["tshark", "-n", "-r", str(path), *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [line.split("\t") for line in out.stdout.splitlines()]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if shutil.which("tshark") is None:
        pytest.fail("tshark is missing: make test installs it (Debian's tshark)")
    spec = tmp_path_factory.mktemp("spec") / "drops.toml"
    spec.write_text(SPEC)
    outcome = run_experiment(load_experiment(spec), tmp_path_factory.mktemp("pcap") / "run", progress=False)
    assert outcome.complete, outcome.reason
    return outcome


def test_each_capture_holds_exactly_the_departures(run, summary_reads_back):
    stats = json.loads((run.run_dir / "run.json").read_text())["datapath_stats"]
    for direction, name in (("s0->h2", "s0_to_h2"), ("h2->s0", "h2_to_s0")):
        rows = tshark(run.run_dir / "pcap" / f"{name}.pcapng", "frame.time_epoch", "frame.len", "frame.cap_len")
        assert len(rows) == stats[direction]["departures"] > 1000, direction
        assert sum(int(length) for _, length, _ in rows) == stats[direction]["bytes_out"]
        assert max(int(kept) for *_, kept in rows) == 128, "the default snap length keeps the headers"
        times = [float(t) for t, *_ in rows]
        assert times == sorted(times), "departures in the order they left"
        assert summary_reads_back(run.run_dir)["pcap"][direction]["departures"] == {
            "file": f"pcap/{name}.pcapng", "packets": len(rows), "cut": 0, "lost": 0,
            "bytes": (run.run_dir / "pcap" / f"{name}.pcapng").stat().st_size}
    # tshark decodes TCP in the cut frames: the forward data flow's segments and the other's ACKs,
    # all but the pings and ARP.
    tcp = [p for (p,) in tshark(run.run_dir / "pcap" / "s0_to_h2.pcapng", "tcp.dstport") if p]
    assert len(tcp) > 0.95 * stats["s0->h2"]["departures"] and len(set(tcp)) >= 2


def test_each_drops_file_holds_the_drop_counters_per_reason(run):
    stats = json.loads((run.run_dir / "run.json").read_text())["datapath_stats"]
    seen = set()
    for direction, name in (("s0->h2", "s0_to_h2"), ("h2->s0", "h2_to_s0")):
        rows = tshark(run.run_dir / "pcap" / f"{name}.drops.pcapng", "frame.comment", "frame.len")
        reasons = Counter(comment.removeprefix("drop reason: ") for comment, _ in rows)
        counters = {r: n for r, n in stats[direction]["drops"].items() if n and r not in ("rx_overrun", "tx_error")}
        assert reasons == counters, direction
        seen |= set(reasons)
    # 1% loss over > 1000 departures: no loss drop at all has odds below 0.99^1000 = 4e-5 (the
    # run sends about 5000: 1e-22). codel and queue_full come from the flows themselves.
    assert {"loss", "codel", "queue_full"} <= seen, seen


def test_a_capture_stops_whole_at_its_limit_and_says_so(tmp_path):
    data = SPEC.replace('duration = "6s"', 'duration = "3s"').replace(
        'pcap = ["s0->h2", "h2->s0"]', 'pcap = ["s0->h2"]\npcap_limit = "64kib"\npcap_snaplen = 1514')
    spec = tmp_path / "limited.toml"
    spec.write_text(data)
    outcome = run_experiment(load_experiment(spec), tmp_path / "run", progress=False)
    capture = outcome.summary.pcap["s0->h2"].departures
    path = outcome.run_dir / "pcap" / "s0_to_h2.pcapng"
    assert path.stat().st_size == capture.bytes <= 64 * 1024
    rows = tshark(path, "frame.cap_len")
    assert len(rows) == capture.packets and capture.cut > 0
    assert max(int(n) for (n,) in rows) == 1514, "whole frames with a snap length of 1514"
    assert any("reached probes.pcap_limit" in w for w in outcome.warnings), outcome.warnings
    stats = json.loads((outcome.run_dir / "run.json").read_text())["datapath_stats"]["s0->h2"]
    assert capture.packets + capture.cut == stats["departures"]


def test_the_kernel_backend_cannot_capture(tmp_path):
    data = SPEC.replace('ends = ["s0", "h2"]', 'ends = ["s0", "h2"]\nbackend = "kernel"').replace(
        'forward = { rate = "10mbit", loss = "1%", queue = { discipline = "codel", packets = 1000 } }',
        'forward = { rate = "10mbit", queue = { discipline = "droptail", packets = 100 } }')
    exp = parse_experiment(tomllib.loads(data), [], base_dir=tmp_path)
    with pytest.raises(SpecError) as e:
        run_experiment(exp, tmp_path / "run", progress=False)
    assert e.value.field == "links[1].backend" and "cannot capture s0->h2" in e.value.message

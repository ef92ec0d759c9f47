"""A measurement of a path, as calibration compares it (lab/calibration): what test ran (its
flows, each up or down, with congestion control, mark and ECN; its latency probes) and what it
measured (each flow's throughput over time, each probe's round trips), read from either

    a Flent data file   rrul, rrul_be, tcp_nup, tcp_ndown, tcp_1up, tcp_1down, ping: made on a
                        real testbed by Flent, or by `bloatlab export --flent`
    a bloatlab run      its flows and probes from run.json's resolved spec, its series/
    a nic sweep's run   its TCP test (an upload from the interface's host) and the ping through
                        it; the UDP test after it is left out (a fixed rate says nothing of TCP)

"Up" is from the host that probes (Flent's local host) to the far one. `figures` gives the
numbers calibration fits, the same way for a measurement and for an emulated run of its test:
per flow its mean throughput, per direction the 10th/50th/90th percentiles of the total over
1 s steps, and per probe the 10th..99th percentiles of the round trips under load and idle, and
their 95th and 99th in the load's first seconds (its slow start's burst: a FIFO caps it at its
limit, an AQM lets it in and then drains it, so these tell the two apart where the steady state
does not; the lower percentiles there follow when the burst's losses come and how the flows
recover, which changes from run to run, and are left out).
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bloatlab.errors import BloatlabError
from bloatlab.results.reader import dig, is_run, is_sweep, load_run
from bloatlab.specs import dscp
from bloatlab.testbed.datapath_stats import finite_number

PERCENTILES = (10, 50, 90, 95, 99)  # of each probe's round trips, under load and idle
START_PERCENTILES = (95, 99)  # ... and in the load's first seconds: the slow start burst's peak
TOTAL_PERCENTILES = (10, 50, 90)  # of each direction's total throughput per step
STEP_S = 1.0  # the total's step
START_S = 2.0  # a load's first seconds: its slow start, a phase of its own
MIN_LOAD_S = 5.0  # the shortest load compared: START_S of slow start, then 3 s of steady state
MIN_SAMPLES = {"load": 10, "idle": 10, "start": 5}  # fewer round trips in a phase: no percentiles for it
FLENT_TESTS = ("rrul", "rrul_be", "tcp_nup", "tcp_ndown", "tcp_1up", "tcp_1down", "ping")
_FLENT_FLOW = re.compile(r"TCP (upload|download)(?:::\d+| (\S+))?$")  # tcp_nup's "TCP upload::1"; rrul's "TCP upload EF"
_FLENT_PROBE = re.compile(r"Ping \(ms\) (ICMP|UDP (\S+))$")


@dataclass(frozen=True)
class Flow:
    name: str  # the measurement's own (a Flent series, a workload)
    direction: str  # "up" or "down"
    cc: str | None  # None: not recorded (the emulation then uses the machine's default)
    dscp: int
    ecn: str | None
    start_s: float
    stop_s: float


@dataclass(frozen=True)
class Probe:
    name: str
    kind: str  # "ping" (ICMP) or "irtt" (UDP round trips)
    dscp: int
    interval_s: float


@dataclass
class Measurement:
    source: str  # the file or directory it was read from
    test: str  # Flent's test name, or "bloatlab:NAME"
    duration_s: float
    flows: list[Flow]
    probes: list[Probe]
    throughput: pd.DataFrame  # t_s, flow, mbps (flow: a Flow's name)
    latency: pd.DataFrame  # t_s, probe, rtt_ms (probe: a Probe's name)
    notes: list[str] = field(default_factory=list)  # what was assumed in reading it

    def directions(self) -> list[str]:
        return [d for d in ("up", "down") if any(f.direction == d for f in self.flows)]

    def load_window(self) -> tuple[float, float] | None:
        """From the first flow's start to the last's stop; None for pings alone."""
        if not self.flows:
            return None
        return min(f.start_s for f in self.flows), max(f.stop_s for f in self.flows)

    def steady_window(self) -> tuple[float, float] | None:
        """The load without its first START_S (slow start; half of a load shorter than twice
        that). The same seconds in a short emulated run as in a long measurement, so that both
        are cut alike: calibrate's short runs have at least MIN_LOAD_S of load."""
        window = self.load_window()
        if window is None:
            return None
        start, stop = window
        return start + min(START_S, 0.5 * (stop - start)), stop

    def figures(self) -> dict[str, float]:
        """The figures calibration fits, by name: "up.total.p50" (Mbit/s), "flow.NAME.mean",
        "probe.NAME.load.p95", "probe.NAME.start.p99" and "probe.NAME.idle.p10" (ms)."""
        out: dict[str, float] = {}
        steady = self.steady_window()
        if steady is not None:
            start, stop = steady
            tp = self.throughput[(self.throughput["t_s"] > start) & (self.throughput["t_s"] <= stop)]
            for f in self.flows:
                rows = tp[tp["flow"] == f.name]
                if not rows.empty:
                    out[f"flow.{f.name}.mean"] = float(rows["mbps"].mean())
            for direction in self.directions():
                totals = direction_totals(tp, [f.name for f in self.flows if f.direction == direction], start, stop)
                for q in TOTAL_PERCENTILES if len(totals) else ():
                    out[f"{direction}.total.p{q}"] = float(np.percentile(totals, q))
        window = self.load_window()
        for p in self.probes:
            rows = self.latency[self.latency["probe"] == p.name]
            rtt = rows["rtt_ms"].to_numpy(dtype=float)
            t = rows["t_s"].to_numpy(dtype=float)
            ok = np.isfinite(rtt)
            rtt, t = rtt[ok], t[ok]
            if window is None or steady is None:
                phases = {"idle": np.ones(len(t), dtype=bool)}
            else:
                phases = {"load": (t > steady[0]) & (t <= steady[1]), "start": (t > window[0]) & (t <= steady[0]),
                          "idle": (t < window[0]) | (t > window[1] + 1.0)}
            for phase, chosen in phases.items():
                if chosen.sum() >= MIN_SAMPLES[phase]:
                    for q in START_PERCENTILES if phase == "start" else PERCENTILES:
                        out[f"probe.{p.name}.{phase}.p{q}"] = float(np.percentile(rtt[chosen], q))
        return out

    def base_rtt_ms(self) -> float | None:
        """The least round trip of any probe: the path's base RTT, queues empty."""
        rtt = self.latency["rtt_ms"].to_numpy(dtype=float) if not self.latency.empty else np.array([])
        rtt = rtt[np.isfinite(rtt)]
        return float(rtt.min()) if len(rtt) else None


def direction_totals(tp: pd.DataFrame, flows: list[str], start: float, stop: float) -> np.ndarray:
    """Each STEP_S step's total over `flows`: the mean of each flow's samples in the step, summed."""
    rows = tp[tp["flow"].isin(flows)]
    if rows.empty:
        return np.array([])
    steps = np.floor((rows["t_s"].to_numpy(dtype=float) - start) / STEP_S).astype(int)
    n = int(math.floor((stop - start) / STEP_S))
    frame = pd.DataFrame({"step": steps, "flow": rows["flow"].to_numpy(), "mbps": rows["mbps"].to_numpy(dtype=float)})
    frame = frame[(frame["step"] >= 0) & (frame["step"] < n)]
    per_flow = frame.groupby(["step", "flow"])["mbps"].mean().unstack(fill_value=0.0)
    return per_flow.sum(axis=1).to_numpy()


# Reading ---------------------------------------------------------------------------------------

def read_measurement(path: str | Path) -> Measurement:
    """A Flent data file (.flent.gz, .flent, or its JSON) or a bloatlab run directory."""
    path = Path(path)
    if path.is_dir():
        if is_sweep(path):
            raise BloatlabError(f"{path} is a sweep; give one of its runs (a POINT/repN directory)",
                                field="MEASUREMENT")
        if not is_run(path):
            raise BloatlabError(f"{path} is neither a run directory (run.json) nor a Flent data file",
                                field="MEASUREMENT")
        return from_run(path)
    if not path.is_file():
        raise BloatlabError(f"{path} does not exist; give a Flent data file or a run directory",
                            field="MEASUREMENT")
    return from_flent(path)


def from_run(path: Path) -> Measurement:
    run = load_run(path)
    if not run.complete:
        raise BloatlabError(f"{path} is not a complete run ({run.incomplete_reason or 'run.json says so'}); "
                            "calibrate to a complete one", field="MEASUREMENT")
    if run.meta.get("kind") == "nic":
        return _from_nic_run(path, run)
    workloads = run.workloads()
    probes_w = [w for w in workloads if w.get("kind") in ("ping", "irtt")]
    bulks = [w for w in workloads if w.get("kind") == "bulk"]
    client = probes_w[0].get("src") if probes_w else bulks[0].get("src") if bulks else None
    flows, notes = [], []
    for w in bulks:
        direction = "up" if w.get("src") == client else "down" if w.get("dst") == client else None
        if direction is None:
            notes.append(f"flow {w['name']} ({w.get('src')} to {w.get('dst')}) neither leaves nor reaches "
                         f"{client}, the probing host: left out")
            continue
        flows.append(Flow(w["name"], direction, w.get("cc"), int(w.get("dscp") or 0), w.get("ecn"),
                          w["start_ns"] / 1e9, w["stop_ns"] / 1e9))
    probes = [Probe(w["name"], w["kind"], int(w.get("dscp") or 0), (w.get("interval_ns") or 10**8) / 1e9)
              for w in probes_w if w.get("src") == client]
    others = sorted({w.get("kind") for w in workloads} - {"bulk", "ping", "irtt"})
    if others:
        notes.append(f"the run's {', '.join(others)} workloads are not fitted")
    if not flows and not probes:
        raise BloatlabError(f"{path} has no bulk flow and no ping or irtt probe to fit", field="MEASUREMENT")
    names = {f.name for f in flows}
    goodput = run.goodput
    tp = goodput[goodput["flow"].isin(names)][["t_s", "flow", "mbps"]] if not goodput.empty else _empty_tp()
    ping = run.ping
    wanted = {p.name for p in probes}
    lat = ping[ping["probe"].isin(wanted)][["t_s", "probe", "rtt_ms"]] if not ping.empty else _empty_lat()
    return Measurement(str(path), f"bloatlab:{run.name}", run.duration_s, flows, probes,
                       _finite(tp, "mbps"), _finite(lat, "rtt_ms"), notes)


def _finite(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """The rows whose time and value are finite (a series cell of "inf" is no sample), renumbered."""
    keep = np.isfinite(frame["t_s"].to_numpy(dtype=float)) & np.isfinite(frame[column].to_numpy(dtype=float))
    return frame[keep].reset_index(drop=True)


def _from_nic_run(path: Path, run: Any) -> Measurement:
    """A nic sweep's run: its TCP test as one upload (iperf3 -c from the interface's host), with
    the ping that ran through it; what came after it (the UDP test) is cut off."""
    goodput, ping = run.goodput, run.ping
    tcp = goodput[goodput["flow"] == "tcp"] if not goodput.empty else _empty_tp()
    if tcp.empty:
        raise BloatlabError(f"{path} is a nic run without a TCP test to fit (run it with --tests tcp)",
                            field="MEASUREMENT")
    t = np.sort(tcp["t_s"].to_numpy(dtype=float))
    t = t[np.isfinite(t)]  # a cell of "inf" is no time
    if not len(t):
        raise BloatlabError(f"{path} is a nic run whose TCP test has no interval at a time", field="MEASUREMENT")
    stop = float(t[-1])
    start = max(0.0, float(t[0] - (np.median(np.diff(t)) if len(t) > 1 else 0.0)))  # the first interval's start
    interval = finite_number(run.meta.get("ping_interval_s")) or 0.2
    lat = ping[ping["t_s"] <= stop][["t_s", "probe", "rtt_ms"]] if not ping.empty else _empty_lat()
    lat = lat.assign(probe="ping")
    probes = [Probe("ping", "ping", 0, float(interval))] if not lat.empty else []
    notes = ["a nic run records no congestion control: the emulation uses cubic"]
    if "udp" in (tests if isinstance(tests := run.meta.get("tests"), list) else []):
        notes.append("its UDP test, after the TCP one, is left out")
    return Measurement(str(path), f"bloatlab:nic-{run.meta.get('iface', '')}", stop,
                       [Flow("tcp", "up", None, 0, None, start, stop)], probes,
                       _finite(tcp[["t_s", "flow", "mbps"]], "mbps"), _finite(lat, "rtt_ms"), notes)


def _empty_tp() -> pd.DataFrame:
    return pd.DataFrame({"t_s": pd.Series(dtype=float), "flow": pd.Series(dtype=str), "mbps": pd.Series(dtype=float)})


def _empty_lat() -> pd.DataFrame:
    return pd.DataFrame({"t_s": pd.Series(dtype=float), "probe": pd.Series(dtype=str),
                         "rtt_ms": pd.Series(dtype=float)})


def _load_flent(path: Path) -> dict[str, Any]:
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt") as f:
            doc = json.load(f)
    # ValueError: not JSON, not UTF-8, or a number of over 4300 digits; zlib.error: a damaged stream
    except (OSError, EOFError, ValueError, RecursionError, zlib.error) as e:
        reason = "nested too deeply" if isinstance(e, RecursionError) else " ".join(str(e).split())
        raise BloatlabError(f"{path} is not a Flent data file ({reason}); give a .flent.gz file or a run directory",
                            field="MEASUREMENT") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict) or not isinstance(doc.get("results"), dict):
        raise BloatlabError(f"{path} is JSON but not a Flent data file (no metadata and results)", field="MEASUREMENT")
    return doc


def _number(value: Any, what: str, path: Path) -> float:
    if (number := finite_number(value)) is not None and number >= 0:
        return number
    raise BloatlabError(f"{path}: metadata {what} is {value!r}, not a length in seconds", field="MEASUREMENT")


def from_flent(path: Path) -> Measurement:
    doc = _load_flent(path)
    meta = doc["metadata"]
    test = meta.get("NAME")
    if test not in FLENT_TESTS:
        raise BloatlabError(f"{path} holds Flent's {test!r} test; calibrate reads {', '.join(FLENT_TESTS)}",
                            field="MEASUREMENT")
    total = _number(meta.get("TOTAL_LENGTH"), "TOTAL_LENGTH", path)
    length = _number(meta.get("LENGTH", total), "LENGTH", path)
    step = _number(meta.get("STEP_SIZE", 0.2), "STEP_SIZE", path) or 0.2
    start = max(0.0, (total - length) / 2)  # Flent's flows wait its --delay, idle runs as long after
    series_meta = meta.get("SERIES_META") if isinstance(meta.get("SERIES_META"), dict) else {}
    t0 = _flent_t0(meta)
    flows, probes, notes = [], [], []
    tp_parts, lat_parts = [], []
    for name in doc["results"]:
        flow, probe = _FLENT_FLOW.match(name), _FLENT_PROBE.match(name)
        if flow and flow.group(2) not in ("sum", "avg"):
            info = series_meta.get(name) if isinstance(series_meta.get(name), dict) else {}
            flows.append(Flow(name, "up" if flow.group(1) == "upload" else "down", _flent_cc(info),
                              _flent_mark(info, flow.group(2)), None, start, start + length))
            tp_parts.append(_flent_samples(doc, name, t0, "flow", "mbps"))
        elif probe:
            kind = "ping" if probe.group(1) == "ICMP" else "irtt"
            info = series_meta.get(name) if isinstance(series_meta.get(name), dict) else {}
            mark = _flent_mark(info, re.sub(r"\d+$", "", probe.group(2)) if probe.group(2) else None)
            samples = _flent_samples(doc, name, t0, "probe", "rtt_ms")
            probes.append(Probe(name, kind, mark, _probe_interval(samples, step)))
            lat_parts.append(samples)
    if not flows and not probes:
        raise BloatlabError(f"{path} has no TCP flow and no ping series to fit", field="MEASUREMENT")
    if dig(meta, "SYSCTLS", "net.ipv4.tcp_ecn") in (1, "1"):
        notes.append("the file's host asked for ECN (net.ipv4.tcp_ecn = 1); the emulated flows do not "
                     "(a classic flow's ECN is its kernel's default here)")
    if flows and all(f.cc is None for f in flows):
        notes.append("the file names no congestion control (SERIES_META CONG_CONTROL): the emulation uses cubic")
    tp = pd.concat(tp_parts, ignore_index=True) if tp_parts else _empty_tp()
    lat = pd.concat(lat_parts, ignore_index=True) if lat_parts else _empty_lat()
    return Measurement(str(path), test, total, flows, probes, tp, lat, notes)


def _flent_t0(meta: dict[str, Any]) -> float | None:
    from datetime import datetime

    value = meta.get("T0")
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except (ValueError, OverflowError):  # not ISO 8601, or beyond the calendar
            return None
    return None


def _flent_samples(doc: dict[str, Any], name: str, t0: float | None, key: str, column: str) -> pd.DataFrame:
    """A series' raw samples (time since T0) where the file has them, else its values on the grid."""
    raw = dig(doc, "raw_values", name)
    rows: list[tuple[float, float]] = []
    if t0 is not None and isinstance(raw, list):
        for sample in raw:
            t, v = finite_number(dig(sample, "t")), finite_number(dig(sample, "val"))
            if t is not None and v is not None:
                rows.append((t - t0, v))
    if not rows:
        xs, values = doc.get("x_values"), doc["results"].get(name)
        pairs = zip(xs, values) if isinstance(xs, list) and isinstance(values, list) else ()
        numbers = ((finite_number(x), finite_number(v)) for x, v in pairs)
        rows = [(x, v) for x, v in numbers if x is not None and v is not None]
    return pd.DataFrame({"t_s": [r[0] for r in rows], key: name, column: [r[1] for r in rows]})


def _probe_interval(samples: pd.DataFrame, step: float) -> float:
    """A probe's interval: its raw samples' usual spacing where the file has them (a probe can be
    faster than the grid), else STEP_SIZE (Flent pings at it)."""
    gaps = np.diff(np.sort(samples["t_s"].to_numpy(dtype=float)))
    gaps = gaps[gaps > 0]
    if len(gaps) < 10:
        return step
    usual = float(np.median(gaps))
    steady = gaps[(gaps > usual / 2) & (gaps < usual * 1.5)]  # not a lost probe's double gap
    return round(float(steady.mean()) if len(steady) else usual, 3) or step


def _flent_cc(info: dict[str, Any]) -> str | None:
    cc = info.get("CONG_CONTROL")
    return cc if isinstance(cc, str) and re.fullmatch(r"[a-z0-9_]+", cc) else None


def _flent_mark(info: dict[str, Any], from_name: str | None) -> int:
    """The DSCP: Flent's DATA_TOS (netperf's), else MARKING ("CS1,CS1" or "EF"), else the series' name."""
    tos = info.get("DATA_TOS")
    if isinstance(tos, int) and not isinstance(tos, bool) and 0 <= tos < 256:
        return tos >> 2
    for text in (info.get("MARKING"), from_name):
        if isinstance(text, str) and text.strip():
            try:
                return dscp.parse_dscp(text.split(",")[0].strip(), "marking")
            except BloatlabError:
                continue
    return 0

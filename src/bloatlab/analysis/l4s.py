"""L4S runs (RFC 9330): scalable flows beside classic ones through one bottleneck, as the l4s
preset makes them, and what their figures, tables and the sweep's comparison are computed from.

Read from the run's files alone (results.reader): which bulk flows are scalable (their congestion
control), each latency probe's queueing delay (its RTT less the least RTT it measured: the
path's base, which the preset's probes meet alone before the flows start) and each flow's (its
sender's smoothed RTT less the base of the probe from its host), their percentiles under load,
the scalable flows' goodput against the classic ones', and dualpi2's marking probability p' over
time where series/queue.csv has it (a `prob` column).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bloatlab.results.reader import Point, Run, Sweep, dig

# Congestion controls that answer CE marks in proportion to their share (RFC 9330's scalable);
# every other one is classic (a Reno-friendly response to loss or a mark).
SCALABLE_CCS = frozenset({"dctcp", "prague"})
# After both kinds of flow run, before the delays count as under load (the bufferbloat grade's).
SETTLE_S = 1.0
# The goodput ratio over time: each flow's 100 ms intervals averaged over bins this long.
RATIO_BIN_S = 1.0
# The codepoints a latency probe's `ecn` names, as RFC 3168 writes them.
ECN_NAMES = {"not-ect": "Not-ECT", "ect0": "ECT(0)", "ect1": "ECT(1)", "ce": "CE"}
LATENCY_KINDS = ("ping", "irtt")
# Where the figures' log axes of delay start: ping prints RTTs of 10-100 ms to 0.1 ms.
DELAY_FLOOR_MS = 0.1


@dataclass(frozen=True)
class L4sRun:
    """What makes a run an L4S one: its scalable and classic bulk flows, in the spec's order."""

    scalable: tuple[str, ...]
    classic: tuple[str, ...]
    load_s: tuple[float, float]  # both kinds run, from SETTLE_S after the last starts to the first stop
    ecn: dict[str, str]  # each latency probe's codepoint as RFC 3168 names it; "" where the spec does not say
    senders: dict[str, str]  # each bulk flow's and latency probe's sending host


@dataclass(frozen=True)
class Delay:
    """A probe's or a flow's queueing delay: every sample's, its base, its percentiles under load."""

    t_s: np.ndarray
    delay_ms: np.ndarray  # RTT - base_ms
    base_ms: float
    p50_ms: float | None  # under load (L4sRun.load_s); None without a reply there
    p99_ms: float | None
    loaded: int  # samples under load

    @classmethod
    def of(cls, t_s: np.ndarray, rtt_ms: np.ndarray, base_ms: float, load_s: tuple[float, float]) -> Delay:
        delay = rtt_ms - base_ms
        under = delay[(t_s >= load_s[0]) & (t_s <= load_s[1])]
        p50, p99 = np.percentile(under, [50, 99]).tolist() if under.size else (None, None)
        return cls(t_s, delay, base_ms, p50, p99, int(under.size))


def l4s_of(run: Run) -> L4sRun | None:
    """The run's L4S roles; None unless it has both a scalable and a classic bulk flow."""
    workloads = [w for w in dig(run.meta, "spec", "workloads") or [] if isinstance(w, dict)]
    bulk = [w for w in workloads if w.get("kind") == "bulk" and isinstance(w.get("name"), str)]
    scalable = tuple(w["name"] for w in bulk if w.get("cc") in SCALABLE_CCS)
    classic = tuple(w["name"] for w in bulk if w.get("cc") not in SCALABLE_CCS)
    if not scalable or not classic:
        return None
    starts = [w.get("start_ns") for w in bulk]
    stops = [w.get("stop_ns") for w in bulk]
    start_s = max(s for s in starts if isinstance(s, int)) / 1e9 if any(isinstance(s, int) for s in starts) else 0.0
    stop_s = min(s for s in stops if isinstance(s, int)) / 1e9 if any(isinstance(s, int) for s in stops) \
        else run.duration_s
    ecn = {w["name"]: ECN_NAMES.get(w.get("ecn"), str(w.get("ecn") or "")) for w in workloads
           if w.get("kind") in LATENCY_KINDS and isinstance(w.get("name"), str)}
    senders = {w["name"]: str(w.get("src")) for w in workloads
               if (w.get("kind") == "bulk" or w.get("kind") in LATENCY_KINDS) and isinstance(w.get("name"), str)}
    return L4sRun(scalable, classic, (start_s + SETTLE_S, stop_s), ecn, senders)


def queueing_delays(run: Run, roles: L4sRun) -> tuple[dict[str, Delay], str | None]:
    """Each latency probe's queueing delay, in the spec's order; or none and why."""
    series = run.read_series("ping", ("t_s", "rtt_ms"))
    if series.problem:
        return {}, series.problem
    out = {}
    for probe, rows in series.frame.groupby("probe", sort=False):
        t_s, rtt = rows["t_s"].to_numpy(dtype=float), rows["rtt_ms"].to_numpy(dtype=float)
        kept = np.isfinite(t_s) & np.isfinite(rtt)
        if not kept.any():
            continue
        out[str(probe)] = Delay.of(t_s[kept], rtt[kept], float(rtt[kept].min()), roles.load_s)
    order = [*roles.ecn, *out]  # a responsiveness test's probes are not in the spec by their names
    out = {name: out[name] for name in dict.fromkeys(order) if name in out}
    return out, None if out else "series/ping.csv has no round trips"


def flow_delays(run: Run, roles: L4sRun, probes: dict[str, Delay]) -> tuple[dict[str, Delay], str | None]:
    """Each bulk flow's own queueing delay as its sender's TCP saw it: its smoothed RTT
    (series/cwnd.csv) less the base RTT of a latency probe from the same host (the path the
    l4s preset gives both), else less its own least. Where each flow has a queue of its own
    (fq_codel, cake), a probe is a flow of its own too and meets none of theirs: this is their
    delay. Or none and why."""
    series = run.read_series("cwnd", ("t_s", "srtt_ms"))
    if series.problem:
        return {}, series.problem
    out = {}
    for name in (*roles.classic, *roles.scalable):
        rows = series.frame[series.frame["flow"] == name]
        t_s, srtt = rows["t_s"].to_numpy(dtype=float), rows["srtt_ms"].to_numpy(dtype=float)
        kept = np.isfinite(t_s) & np.isfinite(srtt)
        if not kept.any():
            continue
        probe = next((p for p in probes if roles.senders.get(p) == roles.senders.get(name)), None)
        base = probes[probe].base_ms if probe is not None else float(srtt[kept].min())
        out[name] = Delay.of(t_s[kept], srtt[kept], base, roles.load_s)
    return out, None if out else "series/cwnd.csv has no smoothed RTT of a bulk flow"


def goodput_ratio(run: Run, roles: L4sRun) -> float | None:
    """The scalable flows' goodput over the classic flows' under load (L4sRun.load_s: slow
    start left out, where DCTCP leaves it at dualpi2's first step marks), from their receivers'
    intervals; None where a flow has none there or the classic flows carried nothing."""
    ends, goodput, reason = binned_goodput(run, roles)
    inside = (ends > roles.load_s[0] + 1e-9) & (ends <= roles.load_s[1] + 1e-9)
    if reason or not inside.any():
        return None
    with np.errstate(invalid="ignore"):
        means = {name: float(np.nanmean(mbps[inside])) if np.isfinite(mbps[inside]).any() else math.nan
                 for name, mbps in goodput.items()}
    scalable, classic = sum(means[n] for n in roles.scalable), sum(means[n] for n in roles.classic)
    return scalable / classic if math.isfinite(scalable) and math.isfinite(classic) and classic > 0 else None


def whole_run_ratio(run: Run, roles: L4sRun) -> float | None:
    """The scalable flows' goodput over the classic flows' as summary.json has them (each over
    its active time); None where one is missing or the classic flows carried nothing."""
    metrics = run.metrics()
    goodput = {name: metrics.get(f"flows.{name}.goodput_mbps") for name in (*roles.scalable, *roles.classic)}
    if any(g is None for g in goodput.values()):
        return None
    classic = sum(goodput[n] or 0.0 for n in roles.classic)
    return sum(goodput[n] or 0.0 for n in roles.scalable) / classic if classic > 0 else None


def binned_goodput(run: Run, roles: L4sRun) -> tuple[np.ndarray, dict[str, np.ndarray], str | None]:
    """Each bulk flow's goodput per RATIO_BIN_S bin (the mean of its 100 ms intervals that end
    in the bin; NaN where none does): bin ends, per flow; or why there is none."""
    series = run.read_series("throughput", ("t_s", "mbps"))
    if series.problem:
        return np.zeros(0), {}, series.problem
    frame = series.frame
    ends = np.arange(1, math.ceil(run.duration_s / RATIO_BIN_S) + 1) * RATIO_BIN_S
    out = {}
    for name in (*roles.scalable, *roles.classic):
        rows = frame[frame["flow"] == name]
        t_s, mbps = rows["t_s"].to_numpy(dtype=float), rows["mbps"].to_numpy(dtype=float)
        index = np.ceil(t_s / RATIO_BIN_S - 1e-9).astype(int) - 1  # an interval ending at 1.0 s is in bin 0
        inside = (index >= 0) & (index < len(ends)) & np.isfinite(mbps)
        sums = np.bincount(index[inside], mbps[inside], minlength=len(ends))
        counts = np.bincount(index[inside], minlength=len(ends))
        out[name] = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    lacking = [name for name in out if np.isnan(out[name]).all()]
    if lacking:
        return ends, out, f"no rows for flow {', '.join(lacking)} in series/throughput.csv"
    return ends, out, None


def ratio_over_time(ends: np.ndarray, goodput: dict[str, np.ndarray], roles: L4sRun) -> np.ndarray:
    """Scalable over classic goodput per bin; NaN where the classic flows carried nothing or a flow
    has no interval in the bin (before the flows start, after they stop)."""
    scalable = np.sum([goodput[n] for n in roles.scalable], axis=0)
    classic = np.sum([goodput[n] for n in roles.classic], axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(classic > 0, scalable / classic, np.nan)


@dataclass(frozen=True)
class DualPi2Queue:
    """A probed dualpi2 direction's parameters that the figures draw against."""

    coupling_factor: int  # k
    target_ms: float  # the classic queue's delay target
    step_ms: float | None  # the L queue's step threshold (None: a threshold in packets)
    ecn_mask: str  # which codepoints go to the L queue

    def queue_of(self, ecn: str) -> str:
        """The queue a probe's packets go to, by its codepoint's name: "L" or "C"."""
        l4s = ("ECT(1)", "CE", "ECT(0)") if self.ecn_mask == "any_ect" else ("ECT(1)", "CE")
        return "L" if ecn in l4s else "C"


def dualpi2_directions(run: Run) -> dict[str, DualPi2Queue]:
    """Each probed link direction whose queue is dualpi2, with what its figures draw against."""
    probed = set(run.probed_queues())
    out = {}
    # run.json's links have every queue parameter as it ran; the resolved spec's only those set.
    links = run.meta.get("links") if isinstance(run.meta.get("links"), list) else dig(run.meta, "spec", "topology", "links")
    for link in links if isinstance(links, list) else []:
        for which in ("forward", "reverse"):
            direction, queue = dig(link, which, "direction"), dig(link, which, "queue")
            if direction in probed and dig(queue, "discipline") == "dualpi2":
                # run.json's queue has every parameter as it ran; else RFC 9332's and Linux's defaults.
                k, target, step = (dig(queue, key) for key in ("coupling_factor", "target_ns", "step_thresh_ns"))
                out[direction] = DualPi2Queue(
                    k if isinstance(k, int) else 2, target / 1e6 if isinstance(target, int) else 15.0,
                    step / 1e6 if isinstance(step, int) else None if dig(queue, "step_packets") else 1.0,
                    str(dig(queue, "ecn_mask") or "l4s_ect"))
    return out


def base_probability(run: Run, directions: dict[str, DualPi2Queue]) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], str | None]:
    """p' over time per dualpi2 direction (t_s, prob), from series/queue.csv's `prob` column; or
    none and why."""
    if not directions:
        return {}, "no probed dualpi2 queue"
    series = run.read_series("queue", ("t_s", "prob"))
    if series.problem:
        if series.problem.endswith("has no column prob"):
            return {}, "p' over time is not recorded (series/queue.csv has no prob column)"
        return {}, series.problem
    out = {}
    for link, rows in series.frame.groupby("link", sort=False):
        if link in directions:
            t_s, prob = rows["t_s"].to_numpy(dtype=float), rows["prob"].to_numpy(dtype=float)
            kept = np.isfinite(prob)
            if kept.any():
                out[str(link)] = (t_s[kept], prob[kept])
    if not out:
        return {}, f"series/queue.csv has no p' for {', '.join(directions)}"
    return out, None


# A sweep --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PointL4s:
    """One sweep point's L4S figures: each probe's and each flow's queueing delay under load,
    pooled over its complete runs, and the goodput ratio of each of them."""

    point: Point
    runs: int
    delays: dict[str, tuple[float, float, int]]  # probe -> p50 ms, p99 ms, replies under load
    flow_delays: dict[str, tuple[float, float, int]]  # bulk flow -> the same of its smoothed RTT's delay
    ratios: list[float]  # each run's goodput ratio under load

    @property
    def ratio_mean(self) -> float | None:
        return float(np.mean(self.ratios)) if self.ratios else None

    @property
    def ratio_sd(self) -> float | None:
        return float(np.std(self.ratios, ddof=1)) if len(self.ratios) > 1 else None


def sweep_l4s(sweep: Sweep) -> list[PointL4s]:
    """Per point with complete L4S runs, in the sweep's order; empty for a sweep of other runs."""
    out = []
    for point in sweep.points:
        pooled: dict[str, list[np.ndarray]] = {}
        pooled_flows: dict[str, list[np.ndarray]] = {}
        ratios: list[float] = []
        counted = 0
        for sweep_run in point.complete_runs():
            run = sweep.run(sweep_run)
            roles = l4s_of(run) if run is not None else None
            if run is None or roles is None:
                continue
            counted += 1
            delays, _ = queueing_delays(run, roles)
            for into, found in ((pooled, delays), (pooled_flows, flow_delays(run, roles, delays)[0])):
                for name, d in found.items():
                    into.setdefault(name, []).append(d.delay_ms[(d.t_s >= roles.load_s[0]) & (d.t_s <= roles.load_s[1])])
            if (ratio := goodput_ratio(run, roles)) is not None:
                ratios.append(ratio)
        if counted:
            out.append(PointL4s(point, counted, _percentiles(pooled), _percentiles(pooled_flows), ratios))
    return out


def _percentiles(pooled: dict[str, list[np.ndarray]]) -> dict[str, tuple[float, float, int]]:
    """Per name: p50 and p99 of its samples of every run together, and how many there are."""
    out = {}
    for name, parts in pooled.items():
        values = np.concatenate(parts)
        if values.size:
            p50, p99 = np.percentile(values, [50, 99]).tolist()
            out[name] = (p50, p99, int(values.size))
    return out


def probes_of(points: list[PointL4s]) -> list[str]:
    """Every probe any point has, in the order first met."""
    return list(dict.fromkeys(probe for p in points for probe in p.delays))


def flows_of(points: list[PointL4s]) -> list[str]:
    """Every bulk flow with a smoothed RTT at any point, in the order first met."""
    return list(dict.fromkeys(flow for p in points for flow in p.flow_delays))

"""Queue occupancy of a link direction over a run, from the datapath's queue log (every
enqueue, dequeue and drop, and the discipline's probability as its controller changes it) or
from a kernel qdisc's sampled statistics, as series rows and the summary's queue.LINK numbers.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bloatlab.experiment.record import QueueSummary
from bloatlab.testbed.datapath import (DROP_REASONS, KIND_DROP, KIND_MARK, KIND_PROB, MARK_REASONS, PRE_QUEUE_DROP_REASONS,
                                       PROB_ONE, read_qlog)

# The queue's own drops are every reason but those before it (loss, oversize, runt).
MAX_ROWS = 200_000  # per direction in queue.csv; beyond it, one row per millisecond


@dataclass
class QueueTrace:
    """Backlog after each change: times (s since t0), packets, bytes, cumulative queue drops."""

    t_s: np.ndarray
    pkts: np.ndarray
    nbytes: np.ndarray
    drops: np.ndarray
    # The queue's own drops and its CE marks, each at its time with its reason code; only the
    # datapath's log has them (a kernel qdisc's counters do not say why).
    drop_t: np.ndarray = field(default_factory=lambda: np.zeros(0))
    drop_reason: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint8))
    mark_t: np.ndarray = field(default_factory=lambda: np.zeros(0))
    mark_reason: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint8))
    # The discipline's probability (dualpi2's p', pie's) from each time on, in time order: when
    # its controller started and at each update that changed it. Empty for a discipline without
    # one, and for a kernel qdisc.
    prob_t: np.ndarray = field(default_factory=lambda: np.zeros(0))
    prob: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def summary(self, duration_s: float) -> QueueSummary:
        """Time-weighted means over [0, duration_s], maxima and drops within it."""
        if len(self.t_s) == 0:
            return QueueSummary(mean_pkts=0.0, max_pkts=0, mean_bytes=0.0, max_bytes=0, drops=0)
        # The state at t0 is the last one before it (empty if none); then every change in the run.
        before = int(np.searchsorted(self.t_s, 0.0, side="right")) - 1
        inside = (self.t_s > 0.0) & (self.t_s <= duration_s)

        def steps(values: np.ndarray) -> np.ndarray:
            return np.concatenate([[values[before] if before >= 0 else 0], values[inside]])

        pkts, nbytes, drops = steps(self.pkts), steps(self.nbytes), steps(self.drops)
        widths = np.diff(np.concatenate([[0.0], self.t_s[inside], [duration_s]]))
        span = float(widths.sum())
        def by_reason(t: np.ndarray, codes: np.ndarray, names: dict[int, str]) -> dict[str, int]:
            inside = (t > 0.0) & (t <= duration_s)
            found, counts = np.unique(codes[inside], return_counts=True)
            return {names.get(int(c), str(int(c))): int(n) for c, n in zip(found, counts)}

        # Only the datapath's log says why: a kernel qdisc's queue has neither.
        reasons = bool(len(self.drop_t) or len(self.mark_t))
        return QueueSummary(
            mean_pkts=float(np.dot(pkts, widths) / span) if span > 0 else float(pkts[0]),
            max_pkts=int(pkts.max()),
            mean_bytes=float(np.dot(nbytes, widths) / span) if span > 0 else float(nbytes[0]),
            max_bytes=int(nbytes.max()),
            drops=int(drops[-1] - drops[0]),
            drops_by_reason=by_reason(self.drop_t, self.drop_reason, DROP_REASONS) if reasons else None,
            marks=by_reason(self.mark_t, self.mark_reason, MARK_REASONS) if reasons else None)

    def rows(self, link: str, duration_s: float) -> list[tuple[float, str, int, int, int, float | None]]:
        """queue.csv rows within the run; one per change, or the last per millisecond when there
        are more than MAX_ROWS. The last column is the probability at the row's time (the last
        value set at or before it); None where there is none (yet)."""
        keep = (self.t_s >= 0.0) & (self.t_s <= duration_s)
        before = int(np.searchsorted(self.t_s, 0.0, side="left")) - 1
        since_t0 = self.drops - (self.drops[before] if before >= 0 else 0)
        t, p, b, d = self.t_s[keep], self.pkts[keep], self.nbytes[keep], since_t0[keep]
        if len(t) > MAX_ROWS:
            ms = np.floor(t * 1000).astype(np.int64)
            last = np.flatnonzero(np.diff(ms, append=ms[-1] + 1))
            t, p, b, d = t[last], p[last], b[last], d[last]
        # tolist(): Python floats and ints at once, five times faster than converting each.
        return list(zip(t.astype(float).tolist(), [link] * len(t), p.astype(np.int64).tolist(),
                        b.astype(np.int64).tolist(), d.astype(np.int64).tolist(), self.prob_at(t)))

    def prob_at(self, t: np.ndarray) -> list[float | None]:
        """The probability at each of the times `t`: the last one set at or before it, or None."""
        if len(self.prob) == 0:
            return [None] * len(t)
        last = np.searchsorted(self.prob_t, t, side="right") - 1
        values = self.prob[np.maximum(last, 0)].astype(float).tolist()
        return [v if i >= 0 else None for v, i in zip(values, last.tolist())]


def from_qlog(path: Path, t0_mono: float) -> QueueTrace:
    everything = read_qlog(path)
    # Probability records are no change of the backlog (and come at their update's time, which
    # can be before records written ahead of them): a series of their own.
    is_prob = everything["kind"] == KIND_PROB
    probs, records = everything[is_prob], everything[~is_prob]
    t_s = records["t_ns"].astype(np.float64) / 1e9 - t0_mono
    own_drop = (records["kind"] == KIND_DROP) & ~np.isin(records["reason"], PRE_QUEUE_DROP_REASONS)
    mark = records["kind"] == KIND_MARK
    return QueueTrace(t_s, records["backlog_pkts"].astype(np.int64), records["backlog_bytes"].astype(np.int64),
                      np.cumsum(own_drop).astype(np.int64), t_s[own_drop], records["reason"][own_drop],
                      t_s[mark], records["reason"][mark],
                      probs["t_ns"].astype(np.float64) / 1e9 - t0_mono, probs["value"].astype(np.float64) / PROB_ONE)


def from_qdisc_csv(path: Path, t0_mono: float) -> QueueTrace:
    """From a kernel qdisc's samples (probes/qdisc.py: t_s,iface,kind,qlen_pkts,backlog_bytes,
    drops; drops cumulative since the qdisc was made)."""
    with warnings.catch_warnings():  # a line cut short (a run killed mid-write) is skipped, not a warning
        warnings.simplefilter("ignore")
        cols = np.genfromtxt(path, delimiter=",", skip_header=1, usecols=(0, 3, 4, 5), ndmin=2, invalid_raise=False,
                             encoding="latin-1")  # a byte that is no UTF-8 is no number either
    if cols.size:  # and one whose cells are not numbers, or counts beyond 64 bits
        cols = cols[np.isfinite(cols).all(axis=1) & (np.abs(cols[:, 1:]) < 2**63).all(axis=1)]
    if cols.size == 0:
        return QueueTrace(*(np.zeros(0) for _ in range(4)))
    t_mono, pkts, nbytes, drops = cols.T
    return QueueTrace(t_mono - t0_mono, pkts.astype(np.int64), nbytes.astype(np.int64), drops.astype(np.int64))

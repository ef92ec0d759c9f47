"""The arithmetic of the responsiveness test, draft-ietf-ippm-responsiveness-08 (20 October
2025), with no I/O: its parameters, the trimmed mean, the RPM formula, the saturation test
and the confidence. The client (client.py) feeds it what it measured.

The draft's parameters keep its names: MAD (moving average distance, intervals), ID (interval
duration), TMP (trimmed mean percentage: the best 95 % of probes count), SDT (standard
deviation tolerance), INP/INC (connections at the start, added per interval), MNP (most
connections), MPS (most probe pairs per second), PTC (share of capacity probes may use).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

DRAFT = "draft-ietf-ippm-responsiveness-08"
MAD = 4
ID_S = 1.0
TMP = 0.95
SDT = 0.05
INP = 1
INC = 1
MNP = 16
MPS = 100
PTC = 0.05
# Bytes a probe pair costs on the wire, for PTC: a foreign probe's TCP and TLS handshakes and
# its request (the draft budgets about 5000 bytes), a self probe's request and response (1000).
PROBE_PAIR_BYTES = 6000

# The draft's bands of RPM (section "Interpreting"): below 300 poor, then fair, good, excellent.
RPM_BANDS = ((6000, "excellent"), (1000, "good"), (300, "fair"), (0, "poor"))


def trimmed_mean(values: Sequence[float], keep: float = TMP) -> float | None:
    """The mean of the lowest `keep` share of the values (a one-sided trim: the worst 5 % of
    probes are dropped); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    count = max(1, math.ceil(len(ordered) * keep))
    return sum(ordered[:count]) / count


def rpm(tcp_f: float | None, tls_f: float | None, http_f: float | None, http_l: float | None) -> dict[str, float | None]:
    """Round trips per minute from the trimmed means (ms) of the foreign probes' TCP, TLS and
    HTTP times and the self probes' HTTP time: the mean of the foreign and the loaded
    responsiveness. Without TLS the foreign figure averages TCP and HTTP only (a zero would
    flatter it)."""
    foreign_parts = [x for x in (tcp_f, tls_f, http_f) if x is not None]
    foreign = (60000 / (sum(foreign_parts) / len(foreign_parts))
               if tcp_f is not None and http_f is not None and all(x > 0 for x in foreign_parts) else None)
    loaded = 60000 / http_l if http_l is not None and http_l > 0 else None
    both = (foreign + loaded) / 2 if foreign is not None and loaded is not None else None
    return {"rpm": both, "foreign_rpm": foreign, "loaded_rpm": loaded}


def stable(values: Sequence[float], sdt: float = SDT, mad: int = MAD) -> bool:
    """The draft's test for saturation and for stability alike: the standard deviation of the
    last MAD moving averages is below SDT of the latest."""
    if len(values) < mad:
        return False
    last = list(values[-mad:])
    return last[-1] > 0 and statistics.pstdev(last) < sdt * last[-1]


def moving_average(per_interval: Sequence[float], mad: int = MAD) -> float:
    """The mean of the last MAD intervals' values (fewer at the start)."""
    last = list(per_interval[-mad:])
    return sum(last) / len(last) if last else 0.0


def confidence(intervals_probed: int, reached_stability: bool, mad: int = MAD) -> str:
    """high: stable; medium: at least MAD intervals probed, not stable; low: fewer."""
    if reached_stability:
        return "high"
    return "medium" if intervals_probed >= mad else "low"


def band(value: float | None) -> str | None:
    """The draft's word for an RPM: poor, fair, good or excellent."""
    if value is None:
        return None
    return next(word for floor, word in RPM_BANDS if value >= floor)


def probe_rate(goodput_bps: float, mps: int = MPS, ptc: float = PTC) -> float:
    """Probe pairs per second: at most MPS, and no more than PTC of the goodput; at least one."""
    return max(1.0, min(float(mps), ptc * goodput_bps / 8 / PROBE_PAIR_BYTES))

"""Statistics: of a run's samples, as summary.json states them (describe), and of a sweep
point's repetitions, as aggregate.json states them (describe_sample, with a Student-t 95%
confidence interval of the mean).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence

CONFIDENCE = 0.95
STATS = ("mean", "sd", "median", "min", "max", "ci95_low", "ci95_high")


def describe(values: Sequence[float], keys: Sequence[str]) -> dict[str, float | int | None]:
    """The named statistics of `values`: count, min, mean, median, pNN, max, stddev (sample,
    n - 1). With no values every statistic but count is null; stddev needs two."""
    import numpy as np  # here: a run writes its first run.json before numpy has loaded

    data = np.asarray(values, dtype=float)
    out: dict[str, float | int | None] = {}
    for key in keys:
        if key == "count":
            out[key] = int(len(data))
        elif len(data) == 0 or (key == "stddev" and len(data) < 2):
            out[key] = None
        elif key == "stddev":
            out[key] = float(np.std(data, ddof=1))
        elif key in ("min", "max", "mean", "median"):
            out[key] = float(getattr(np, key)(data))
        elif m := re.fullmatch(r"p(\d+)", key):
            out[key] = float(np.percentile(data, int(m[1])))
        else:
            raise ValueError(f"unknown statistic {key}")
    return out


RTT_STATS = ("count", "min", "mean", "median", "p95", "p99", "max")
FETCH_STATS = ("count", "mean", "stddev", "median", "p95", "max")


# Student's t -----------------------------------------------------------------------------

def t_two_sided_cdf(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with a whole number of degrees of freedom, by the finite
    trigonometric series of Abramowitz and Stegun 26.7.3-4 (exact, no special functions)."""
    if df < 1:
        raise ValueError("df must be at least 1")
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df == 1:
        return 2 * theta / math.pi
    if df % 2:  # odd: (2/pi)(theta + sin cos (1 + 2/3 cos^2 + 2.4/3.5 cos^4 + ...))
        term = total = 1.0
        for k in range(1, (df - 3) // 2 + 1):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        return 2 / math.pi * (theta + s * math.cos(theta) * total)
    term = total = 1.0  # even: sin (1 + 1/2 cos^2 + 1.3/2.4 cos^4 + ...)
    for k in range(1, (df - 2) // 2 + 1):
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return s * total


def t_quantile(p: float, df: int) -> float:
    """The t with P(T <= t) = p (p > 0.5), by bisection on the exact distribution."""
    target = 2 * p - 1  # the two-sided mass inside [-t, t]
    lo, hi = 0.0, 1.0
    while t_two_sided_cdf(hi, df) < target:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_two_sided_cdf(mid, df) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * hi:
            break
    return (lo + hi) / 2


def describe_sample(values: Sequence[float]) -> dict[str, float | int | None]:
    """n, mean, sd (n - 1), median, min, max and the 95% CI of the mean; sd and the CI are
    null below two values, everything but n is null with none."""
    n = len(values)
    out: dict[str, float | int | None] = {"n": n, **dict.fromkeys(STATS)}
    if n == 0:
        return out
    mean = statistics.fmean(values)
    out.update(mean=mean, median=statistics.median(values), min=min(values), max=max(values))
    if n >= 2:
        sd = statistics.stdev(values)
        half = t_quantile((1 + CONFIDENCE) / 2, n - 1) * sd / math.sqrt(n)
        out.update(sd=sd, ci95_low=mean - half, ci95_high=mean + half)
    return out


# Bufferbloat grade -------------------------------------------------------------------------

# DSLReports' speed test grades (FAQ 17930; Waveform's test uses the same): the rise of the
# mean RTT under load over the idle mean, in ms, below each bound. No "E".
GRADES = ((5.0, "A+"), (30.0, "A"), (60.0, "B"), (200.0, "C"), (400.0, "D"))
GRADE_CONVENTION = "DSLReports: latency increase under load < 5 ms A+, < 30 A, < 60 B, < 200 C, < 400 D, else F"


def grade(increase_ms: float | None) -> str | None:
    """The letter for a latency increase under load (ms); None when it is unknown."""
    if increase_ms is None or not math.isfinite(increase_ms):
        return None
    return next((letter for bound, letter in GRADES if increase_ms < bound), "F")

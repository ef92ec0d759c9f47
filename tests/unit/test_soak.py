"""bench soak's judgement (bench/soak.py), on samples made to leak and not to: it must tell a
leak of two descriptors or 5 MB a run, or a datapath growing, from Python's memory rising and
falling (tests/integration/test_soak.py soaks for real)."""

import pytest

from bloatlab.bench import soak

BASE = {"rss_mb": 140.0, "fds": 13, "threads": 4, "children": 6, "namespaces": 3, "run_entries": 1, "tracefs": 1,
        "tmp_entries": 4}
MACHINE = {"namespaces": 0, "run_entries": 0, "tracefs": 0, "tmp_entries": 4}


def _sweep(runs: int, per_run: dict[str, float] | None = None) -> list[dict]:
    """Three samples a run; memory rises 10 MB a run and falls back every fourth, as measured."""
    samples = []
    for k in range(runs + 1):  # the last: the sweep's own end, which the judgement leaves out
        for i in range(3):
            s = {"phase": "sweep", "t_s": 3.0 * k + i, "runs_done": k, **BASE}
            s["rss_mb"] += 10 * (k % 4) + (40 if k == runs else 0)
            for figure, step in (per_run or {}).items():
                s[figure] += step * k
            samples.append(s)
    return samples


def _long(seconds: int, growth_per_s: dict[str, float] | None = None) -> list[dict]:
    samples = []
    for t in range(seconds):
        s = {"phase": "long", "t_s": 100.0 + t, "runs_done": 0, "rss_mb": 110.0, "fds": 11, "threads": 6,
             "datapath_rss_mb": 22.5, "datapath_fds": 20, "datapath_threads": 5}
        for figure, step in (growth_per_s or {}).items():
            s[figure] += step * t
        samples.append(s)
    return samples


def _verdicts(samples, runs=12, sizes=None, after=None):
    return soak.judge(samples, runs, sizes or [1.1] * runs, MACHINE, after or MACHINE)


def test_a_clean_soak_passes_though_memory_rises_and_falls():
    verdicts = _verdicts(_sweep(12) + _long(40))
    assert all(v["ok"] for v in verdicts.values()), {k: v for k, v in verdicts.items() if not v["ok"]}


@pytest.mark.parametrize("figure, step", [("fds", 2), ("rss_mb", 5), ("threads", 1), ("children", 1),
                                          ("namespaces", 1)])
def test_a_leak_in_the_sweep_is_told(figure, step):
    verdicts = _verdicts(_sweep(12, {figure: step}) + _long(40))
    assert not verdicts[f"sweep {figure}"]["ok"]
    assert [k for k, v in verdicts.items() if not v["ok"]] == [f"sweep {figure}"]


@pytest.mark.parametrize("figure, step", [("datapath_rss_mb", 0.5), ("rss_mb", 1.0), ("fds", 0.25),
                                          ("datapath_threads", 0.25)])
def test_a_long_run_that_grows_is_told(figure, step):
    verdicts = _verdicts(_sweep(12) + _long(40, {figure: step}))
    assert [k for k, v in verdicts.items() if not v["ok"]] == [f"long {figure}"]


def test_a_long_runs_memory_is_judged_by_its_slope_once_long_enough():
    slow = _verdicts(_sweep(12) + _long(600, {"datapath_rss_mb": 1 / 3600}))  # 1 MB an hour
    assert slow["long datapath_rss_mb"]["ok"] and slow["long datapath_rss_mb"]["slope_mb_per_hour"] == pytest.approx(1)
    fast = _verdicts(_sweep(12) + _long(600, {"datapath_rss_mb": 20 / 3600}))
    assert not fast["long datapath_rss_mb"]["ok"]


def test_growing_runs_leftovers_and_too_few_runs_are_told():
    sizes = [1.0] * 6 + [1.5] * 6
    assert not _verdicts(_sweep(12) + _long(40), sizes=sizes)["disk per run"]["ok"]
    left = _verdicts(_sweep(12) + _long(40), after={**MACHINE, "namespaces": 3})["nothing left"]
    assert not left["ok"] and left["why"] == "namespaces +3"
    few = _verdicts(_sweep(3) + _long(40), runs=3, sizes=[1.0] * 3)
    assert not few["sweep fds"]["ok"] and "too few runs" in few["sweep fds"]["why"]
    assert not _verdicts(_sweep(12) + _long(5))["long fds"]["ok"]


def test_slope_is_least_squares_per_hour():
    assert soak.slope_per_hour([(0, 1.0), (1800, 2.0), (3600, 3.0)]) == pytest.approx(2.0)
    assert soak.slope_per_hour([(0, 1.0), (1, 2.0)]) is None

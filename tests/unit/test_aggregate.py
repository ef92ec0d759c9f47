"""Aggregation math against hand-computed values, and the files pandas reads."""

import csv
import gzip
import json
import math

import pytest

from bloatlab.analysis.aggregate import write_aggregate, write_series_export
from bloatlab.results.reader import flatten
from bloatlab.results.stats import describe_sample, t_quantile, t_two_sided_cdf


@pytest.mark.parametrize("df, table", [(1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (9, 2.2622),
                                       (29, 2.0452), (100, 1.9840)])
def test_t_quantile_matches_the_printed_tables(df, table):
    assert t_quantile(0.975, df) == pytest.approx(table, abs=5e-5)


def test_t_distribution_closed_forms():
    # df 1 is Cauchy: P(|T| <= 1) = 1/2; df 2: P(|T| <= t) = t / sqrt(2 + t^2).
    assert t_two_sided_cdf(1.0, 1) == pytest.approx(0.5)
    assert t_two_sided_cdf(3.0, 2) == pytest.approx(3 / math.sqrt(11))
    assert t_two_sided_cdf(0.0, 7) == 0.0


def test_describe_sample_by_hand():
    # 2, 4, 4, 4, 5, 5, 7, 9: mean 5, squared deviations sum to 32, sd = sqrt(32 / 7).
    got = describe_sample([2, 4, 4, 4, 5, 5, 7, 9])
    sd = math.sqrt(32 / 7)
    half = 2.3646 * sd / math.sqrt(8)  # t(0.975, 7) = 2.3646
    assert got["n"] == 8 and got["mean"] == 5 and got["median"] == 4.5
    assert got["min"] == 2 and got["max"] == 9
    assert got["sd"] == pytest.approx(sd)
    assert got["ci95_low"] == pytest.approx(5 - half, abs=1e-3)
    assert got["ci95_high"] == pytest.approx(5 + half, abs=1e-3)


def test_describe_sample_with_too_few_values():
    one = describe_sample([3.5])
    assert one["mean"] == 3.5 and one["median"] == 3.5 and one["sd"] is None and one["ci95_low"] is None
    none = describe_sample([])
    assert none["n"] == 0 and all(none[k] is None for k in ("mean", "sd", "median", "ci95_high"))


def test_flatten_keeps_numeric_leaves_only():
    summary = {"complete": True, "duration_s": 60.0, "flows": {"bulk": {"kind": "bulk", "goodput_mbps": 9.5,
               "retransmits": 3}}, "rtt_ms": {"median": 31.0, "p95": None}, "queue": {"s0->h2": {"drops": 0}}}
    assert flatten(summary) == {"flows.bulk.goodput_mbps": 9.5, "flows.bulk.retransmits": 3.0,
                                "rtt_ms.median": 31.0, "queue.s0->h2.drops": 0.0}


def _sweep(tmp_path, summaries):
    """A sweep document over run dirs holding the given summaries (None: an incomplete run)."""
    points = []
    for q, reps in summaries.items():
        runs = []
        for k, summary in enumerate(reps, 1):
            d = tmp_path / f"maxq={q}" / f"rep{k}"
            (d / "series").mkdir(parents=True)
            (d / "series" / "ping.csv").write_text(f"t_s,rtt_ms\n0.1,{q}.5\n0.2,\n")
            (d / "series" / "throughput.csv").write_text("t_s,flow,mbps\n0.1,bulk,9.1\n")
            if summary is not None:
                (d / "summary.json").write_text(json.dumps(summary))
            runs.append({"rep": k, "dir": f"maxq={q}/rep{k}", "status": "complete" if summary else "incomplete"})
        points.append({"label": f"maxq={q}", "values": {"maxq": q}, "runs": runs})
    return {"axes": [{"name": "maxq", "values": list(summaries)}], "points": points}


def test_aggregate_files_per_point(tmp_path):
    pd = pytest.importorskip("pandas")
    sweep = _sweep(tmp_path, {
        20: [{"rtt_ms": {"median": 30.0}, "flows": {"bulk": {"goodput_mbps": 9.0}}},
             {"rtt_ms": {"median": 34.0}, "flows": {"bulk": {"goodput_mbps": 8.0}}},
             None],  # incomplete: not counted
        100: [{"rtt_ms": {"median": 90.0}, "flows": {"bulk": {"goodput_mbps": 9.5}}},
              {"rtt_ms": {"median": None}, "flows": {"bulk": {"goodput_mbps": 9.3}}}],
    })
    doc = write_aggregate(sweep, tmp_path)
    p20, p100 = doc["points"]
    assert p20["n"] == 2 and p20["runs"] == ["maxq=20/rep1", "maxq=20/rep2"]
    rtt = p20["metrics"]["rtt_ms.median"]
    half = 12.7062 * math.sqrt(8) / math.sqrt(2)  # sd of 30, 34 is sqrt(8)
    assert rtt["mean"] == 32 and rtt["sd"] == pytest.approx(math.sqrt(8))
    assert rtt["ci95_low"] == pytest.approx(32 - half, abs=1e-3)
    assert p100["metrics"]["rtt_ms.median"]["n"] == 1  # a null does not count
    assert p100["metrics"]["rtt_ms.median"]["sd"] is None
    assert json.loads((tmp_path / "aggregate.json").read_text()) == doc

    table = pd.read_csv(tmp_path / "aggregate.csv")
    assert list(table["maxq"]) == [20, 100] and list(table["n"]) == [2, 2]
    assert table["flows.bulk.goodput_mbps.mean"].tolist() == pytest.approx([8.5, 9.4])
    assert math.isnan(table.loc[1, "rtt_ms.median.sd"])
    assert table["rtt_ms.median.n"].tolist() == [2, 1]  # the point's n is 2; this metric's, 1

    write_series_export(sweep, tmp_path)
    series = pd.read_csv(tmp_path / "series.csv.gz")
    assert list(series.columns) == ["label", "maxq", "rep", "series", "key", "t_s", "field", "value"]
    # 4 complete runs, each one ping value (the empty cell is skipped) and one throughput value.
    assert len(series) == 8
    bulk = series[series["series"] == "throughput"]
    assert set(bulk["key"]) == {"bulk"} and set(bulk["field"]) == {"mbps"}
    with gzip.open(tmp_path / "series.csv.gz", "rt") as f:
        assert next(csv.reader(f))[0] == "label"

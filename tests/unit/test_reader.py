"""The one reader of results: a run's and a sweep's files (tests/conftest.py writes them as
docs/results.md says) as objects with their metadata, summaries and every series as a DataFrame."""

import json

import numpy as np
import pandas as pd
import pytest

from bloatlab.errors import BloatlabError
from bloatlab.results.files import SERIES_COLUMNS, RunDir
from bloatlab.results.reader import load_run, load_sweep
import bloatlab


def test_load_run_gives_meta_summary_and_every_series_as_a_dataframe(make_run):
    path = make_run()
    run = bloatlab.load_run(path)  # the package's own door to the reader
    assert repr(run) == f"<bloatlab run {run.name} at {path}>" and run.name.startswith("cs244 ")
    assert run.path == path and run.complete and run.params["maxq"] == 100
    assert run.spec["duration_s"] == 10
    assert run.summary.flows["bulk"].kind == "bulk"
    assert run.metrics()["rtt_ms.median"] == run.summary.rtt_ms.median == run.summary.to_dict()["rtt_ms"]["median"]
    assert run.flows("bulk") == ["bulk"] and run.probed_queues() == ["s0->h2"]
    assert run.queue_limits_pkts() == {"s0->h2": 100, "h2->s0": 100}
    for name, frame in (("ping", run.ping), ("cwnd", run.cwnd), ("queue", run.queue), ("fetch", run.fetches),
                        ("throughput", run.goodput)):
        assert isinstance(frame, pd.DataFrame)
        assert list(frame.columns) == list(SERIES_COLUMNS[name]), name
        assert len(frame) > 0, name
    assert run.ping["rtt_ms"].dtype == float and pd.api.types.is_string_dtype(run.cwnd["flow"])
    # Every cell as written: the first ping row of the file is the first row of the frame.
    first = (path / "series" / "ping.csv").read_text().splitlines()[1].split(",")
    assert run.ping.iloc[0].tolist() == [float(first[0]), first[1], float(first[2])]
    # An unset ssthresh is an empty cell, NaN in the frame.
    assert run.cwnd["ssthresh_pkts"].isna().sum() == 11 and (run.cwnd["ssthresh_pkts"] == 30).sum() == 90
    assert set(run.cwnd["flow"]) == {"bulk", "web#1"}


def test_a_series_that_is_missing_or_damaged_is_an_empty_frame_with_the_reason(make_run):
    path = make_run()
    (path / "series" / "fetch.csv").unlink()
    (path / "series" / "ping.csv").write_text("t_s,rtt_ms\n0.1,20.5\n0.2,slow\n0.3\n0.4,\n")
    run = load_run(path)
    assert run.fetches.empty and run.read_series("fetch").problem == "series/fetch.csv is missing"
    ping = run.read_series("ping")
    assert ping.problem is None and ping.skipped == 2 and ping.rows == 4
    assert ping.warning == "series/ping.csv: skipped 2 of 4 rows whose cells are not numbers"
    assert ping.frame["t_s"].tolist() == [0.1, 0.4] and np.isnan(ping.frame["rtt_ms"][1])
    (path / "series" / "queue.csv").write_text("t_s,link,backlog\n")
    assert run.read_series("queue").problem == "series/queue.csv has no column backlog_pkts, backlog_bytes, drops"


@pytest.mark.parametrize("make", [lambda d: d.mkdir(), lambda d: None], ids=["empty directory", "no directory"])
def test_a_directory_without_run_json_is_a_one_line_error(tmp_path, make):
    make(tmp_path / "x")
    with pytest.raises(BloatlabError) as error:
        load_run(tmp_path / "x")
    assert str(error.value) == f"DIR: {tmp_path / 'x'} is not a bloatlab run directory (no run.json)"


def test_load_sweep_gives_its_points_runs_metrics_and_series(make_sweep):
    out = make_sweep(axes=(("maxq", (20, 100)),), repeat=2, failed=("maxq=100/rep2",))
    sweep = bloatlab.load_sweep(out)
    assert repr(sweep) == f"<bloatlab sweep cs244 at {out}: 2 points, 3 of 4 runs complete>"
    assert sweep.name == "cs244" and sweep.axes == [("maxq", [20, 100])]
    assert [p.label for p in sweep.points] == ["maxq=20", "maxq=100"]
    assert [len(p.complete_runs()) for p in sweep.points] == [2, 1]
    metrics = sweep.metrics()
    assert metrics[["label", "maxq", "rep"]].values.tolist() == [["maxq=20", 20, 1], ["maxq=20", 20, 2],
                                                                 ["maxq=100", 100, 1]]
    agg = json.loads((out / "aggregate.json").read_text())
    mean = agg["points"][0]["metrics"]["rtt_ms.median"]["mean"]
    assert metrics[metrics.maxq == 20]["rtt_ms.median"].mean() == pytest.approx(mean)
    assert sweep.metric(sweep.points[0], "rtt_ms.median")["mean"] == mean
    pings = sweep.series("ping")
    assert list(pings.columns) == ["label", "maxq", "rep", "t_s", "probe", "rtt_ms"]
    assert len(pings) == 3 * 100 and set(pings["rep"]) == {1, 2}
    runs = list(sweep.runs())
    assert len(runs) == 3 and runs[0][2].ping.equals(load_run(out / "maxq=20" / "rep1").ping)


def test_a_sweep_without_its_aggregate_still_reads(make_sweep):
    out = make_sweep(aggregate=False)
    sweep = load_sweep(out)
    assert sweep.aggregate is None and sweep.aggregate_problem == "aggregate.json is missing"
    assert len(sweep.metrics()) == 4


CELLS = ["1", "-2.5", " 3", "4 ", "", " ", "1e3", "inf", "-Infinity", "nan", "true", "FALSE", "0x10", "slow",
         "1_0", "+7", ".5", "1.", '"8"', "9,9"]
KEYS = ["s0->h2", "h2->s0", "", " web#1", "nano", '"a,b"']


@pytest.mark.parametrize("seed", range(60))
def test_the_fast_reading_gives_what_the_cell_by_cell_reading_gives(tmp_path, seed):
    """read_series takes pandas' C parser for a plain file and reads cell by cell otherwise:
    on any file, plain or hostile, the two give the same frame, counts and reason."""
    from bloatlab.results.reader import read_cells, read_series

    rng = np.random.default_rng(seed)
    lines = ["t_s,link,backlog_pkts,backlog_bytes,drops" if seed % 7 else "t_s, link,backlog_pkts,backlog_bytes,drops"]
    plain = seed % 2 == 0  # half the files hold only what the writer writes
    for _ in range(int(rng.integers(0, 40))):
        width = 5 if plain or rng.random() < 0.9 else int(rng.integers(0, 7))
        cells = [str(rng.choice(KEYS[:2] if plain else KEYS)) if i == 1 else
                 (f"{rng.random() * 100:.6f}" if plain else str(rng.choice(CELLS))) for i in range(width)]
        lines.append(",".join(cells))
    end = "\r\n" if seed % 3 else "\n"
    (tmp_path / "series").mkdir()
    (tmp_path / "series" / "queue.csv").write_text(end.join(lines) + (end if seed % 5 else ""), newline="")
    for columns in (None, ("t_s", "backlog_pkts")):
        fast, cells = read_series(tmp_path, "queue", columns), read_cells(tmp_path, "queue", columns)
        assert (fast.problem, fast.skipped, fast.rows) == (cells.problem, cells.skipped, cells.rows)
        pd.testing.assert_frame_equal(fast.frame, cells.frame)


def test_a_queue_series_with_the_probability_reads_it_and_one_without_reads_as_before(make_run):
    path = make_run()
    run = load_run(path)
    assert list(run.queue.columns) == list(SERIES_COLUMNS["queue"])  # an older run's file: no prob
    # As the writer writes it now: prob after the rest, empty where the discipline has none,
    # with six significant digits (PIE's p below 1e-6).
    RunDir(path).write_series("queue", [(0.1, "s0->h2", 3, 4542, 0, 2.5e-07), (0.2, "s0->h2", 2, 3028, 0, None)])
    assert "2.5e-07" in (path / "series" / "queue.csv").read_text()
    queue = load_run(path).queue
    assert list(queue.columns) == [*SERIES_COLUMNS["queue"], "prob"]
    assert queue["prob"].iloc[0] == 2.5e-07 and np.isnan(queue["prob"].iloc[1])

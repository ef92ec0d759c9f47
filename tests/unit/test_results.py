"""Summary statistics and queue summaries against hand-computed values; the series files
have the documented columns; summaries print side by side."""

import csv
import json
import struct

import numpy as np
import pytest

from bloatlab.analysis.summary import summary_table
from bloatlab.experiment.probes.queue import QueueTrace, from_qlog
from bloatlab.results.files import SERIES_COLUMNS, RunDir
from bloatlab.results.stats import describe
from bloatlab.results.summary import RunSummary


def test_describe_by_hand():
    stats = describe([1.0, 2.0, 3.0, 4.0, 10.0], ("count", "min", "mean", "median", "p95", "max", "stddev"))
    assert stats["count"] == 5 and stats["min"] == 1.0 and stats["max"] == 10.0
    assert stats["mean"] == pytest.approx(4.0) and stats["median"] == 3.0
    assert stats["p95"] == pytest.approx(4.0 + 0.8 * 6.0)  # linear between the 4th and 5th values
    assert stats["stddev"] == pytest.approx((sum((x - 4.0) ** 2 for x in [1, 2, 3, 4, 10]) / 4) ** 0.5)


def test_describe_empty_is_null_not_zero():
    stats = describe([], ("count", "mean", "stddev", "p99"))
    assert stats == {"count": 0, "mean": None, "stddev": None, "p99": None}
    assert describe([2.0], ("stddev",))["stddev"] is None  # a deviation needs two samples


def test_queue_summary_is_time_weighted():
    # Backlog 2 from t=-1 (before t0), 4 from t=1, 0 from t=3; the run lasts 4 s.
    trace = QueueTrace(t_s=np.array([-1.0, 1.0, 3.0]), pkts=np.array([2, 4, 0]),
                       nbytes=np.array([3000, 6000, 0]), drops=np.array([5, 7, 7]))
    summary = trace.summary(4.0)
    assert summary.mean_pkts == pytest.approx((2 * 1 + 4 * 2 + 0 * 1) / 4)
    assert summary.mean_bytes == pytest.approx((3000 * 1 + 6000 * 2) / 4)
    assert summary.max_pkts == 4 and summary.max_bytes == 6000
    assert summary.drops == 2  # the 5 before t0 are not the run's
    assert summary.drops_by_reason is None and "marks" not in summary.to_dict()  # a qdisc's counters say no reason


def test_queue_from_qlog_counts_only_the_queues_own_drops(tmp_path):
    record = struct.Struct("<QQIIBB6x")
    t0 = 100.0
    events = [  # t_ns, value, backlog_bytes, backlog_pkts, kind, reason
        (int(100.5e9), 1514, 1514, 1, 1, 0),   # enqueue
        (int(100.6e9), 1514, 1514, 1, 3, 2),   # drop: queue full
        (int(100.7e9), 1514, 1514, 1, 3, 1),   # drop: random loss, before the queue
        (int(100.75e9), 1514, 1514, 1, 4, 3),  # CE mark by CoDel: the packet stays
        (int(100.8e9), 300_000, 0, 0, 2, 0),   # dequeue
        (int(101.5e9), 1514, 0, 0, 3, 8),      # a CoDel drop after the run's end
    ]
    path = tmp_path / "l.forward.qlog"
    path.write_bytes(b"".join(record.pack(*e) for e in events))
    trace = from_qlog(path, t0)
    assert list(trace.drops) == [0, 1, 1, 1, 1, 2]
    assert trace.t_s[0] == pytest.approx(0.5)
    summary = trace.summary(1.0)
    assert summary.drops == 1 and summary.max_pkts == 1
    assert summary.drops_by_reason == {"queue_full": 1}
    assert summary.marks == {"codel": 1}
    assert summary.mean_pkts == pytest.approx(0.3)  # one packet from 0.5 s to 0.8 s
    assert list(summary.to_dict())[:2] == ["drops_by_reason", "marks"]  # first, as summary.json has them


def test_queue_csv_has_the_probability_at_each_rows_time(tmp_path):
    # A dualpi2 direction's log as the datapath writes it: p' starts at 0 with the first packet,
    # the update at 16 ms goes out with the dequeue after it, the one at 32 ms with an arrival
    # at 40 ms, behind a loss drop logged at 35 ms (an update is run late, at its own time).
    record = struct.Struct("<QQIIBB6x")
    t0, ms = 100.0, 1_000_000
    start = int(t0 * 1e9)
    events = [  # t_ns, value, backlog_bytes, backlog_pkts, kind, reason
        (start - 2 * ms, 1514, 1514, 1, 1, 0),    # before t0
        (start - 2 * ms, 0, 1514, 1, 5, 0),       # p' = 0 from the first packet, before t0
        (start + 5 * ms, 1514, 3028, 2, 1, 0),
        (start + 16 * ms, 1 << 30, 3028, 2, 5, 0),  # p' = 0.25 at 16 ms
        (start + 17 * ms, 2_000_000, 1514, 1, 2, 0),
        (start + 35 * ms, 1514, 1514, 1, 3, 1),   # a loss, before the queue
        (start + 32 * ms, 3 << 29, 1514, 1, 5, 0),  # p' = 0.375 at 32 ms, written after it
        (start + 40 * ms, 1514, 3028, 2, 1, 0),
    ]
    path = tmp_path / "bloatlab-s0-h2.forward.qlog"
    path.write_bytes(b"".join(record.pack(*e) for e in events))
    trace = from_qlog(path, t0)
    assert trace.prob_t.tolist() == pytest.approx([-0.002, 0.016, 0.032])
    assert trace.prob.tolist() == [0.0, 0.25, 0.375]
    rows = trace.rows("s0->h2", 1.0)
    # The backlog's rows as without the probability's records, each with p' at its time.
    assert [r[:5] for r in rows] == [(pytest.approx(0.005), "s0->h2", 2, 3028, 0), (pytest.approx(0.017), "s0->h2", 1, 1514, 0),
                                     (pytest.approx(0.035), "s0->h2", 1, 1514, 0), (pytest.approx(0.040), "s0->h2", 2, 3028, 0)]
    assert [r[5] for r in rows] == [0.0, 0.25, 0.375, 0.375]
    assert trace.summary(1.0).max_pkts == 2
    run = RunDir(tmp_path / "run").create()
    run.write_series("queue", rows)
    with open(run.series / "queue.csv") as f:
        written = list(csv.reader(f))
    assert written[0] == [*SERIES_COLUMNS["queue"], "prob"]
    assert [r[5] for r in written[1:]] == ["0", "0.25", "0.375", "0.375"]  # six significant digits
    # A discipline without a probability, or a kernel qdisc's samples: the cells are empty.
    (tmp_path / "bloatlab-fifo.qlog").write_bytes(b"".join(record.pack(*e) for e in events if e[4] != 5))
    assert [r[5] for r in from_qlog(tmp_path / "bloatlab-fifo.qlog", t0).rows("s0->h2", 1.0)] == [None] * 4
    run.write_series("queue", from_qlog(tmp_path / "bloatlab-fifo.qlog", t0).rows("s0->h2", 1.0))
    assert {line.split(",")[5] for line in (run.series / "queue.csv").read_text().splitlines()[1:]} == {""}


def test_queue_csv_keeps_the_probability_when_thinned(tmp_path, monkeypatch):
    from bloatlab.experiment.probes import queue as queue_probe
    monkeypatch.setattr(queue_probe, "MAX_ROWS", 4)
    t_s = np.arange(10) * 0.0004  # 10 changes in 4 ms: thinned to the last of each millisecond
    trace = QueueTrace(t_s, np.arange(10), np.arange(10) * 1514, np.zeros(10, dtype=np.int64),
                       prob_t=np.array([0.0011, 0.0025]), prob=np.array([0.5, 0.75]))
    rows = trace.rows("s0->h2", 1.0)
    assert [(round(r[0], 4), r[2], r[5]) for r in rows] == [(0.0008, 2, None), (0.0016, 4, 0.5), (0.0028, 7, 0.75),
                                                           (0.0036, 9, 0.75)]


def test_series_files_have_the_documented_columns(tmp_path):
    run = RunDir(tmp_path / "run").create()
    run.write_series("ping", [(0.1, 20.5), (0.2, None)])
    run.write_series("queue", [(0.5, "s0->h2", 3, 4542, 0)])
    with open(run.series / "ping.csv") as f:
        rows = list(csv.reader(f))
    assert rows == [list(SERIES_COLUMNS["ping"]), ["0.100000", "20.500000"], ["0.200000", ""]]
    run.write_json("summary.json", {"x": np.int64(3)})
    assert json.loads((run.path / "summary.json").read_text()) == {"x": 3}


def test_summary_table_puts_runs_side_by_side():
    a = {"flows": {"bulk": {"goodput_mbps": 9.5, "retransmits": 10}},
         "rtt_ms": {"count": 10, "min": 20.1, "median": 80.0, "p95": 140.0, "max": 141.0, "lost": 0},
         "fetch_s": {"count": 0, "failed": 0}, "queue": {"s0->h2": {"mean_pkts": 60.0, "max_pkts": 100, "drops": 3}}}
    b = json.loads(json.dumps(a))
    b["queue"]["s0->h2"]["max_pkts"] = 20
    lines = summary_table([("maxq=100", RunSummary.from_json(a)), ("maxq=20", RunSummary.from_json(b))]).splitlines()
    assert "maxq=100" in lines[0] and "maxq=20" in lines[0]
    row = next(line for line in lines if line.startswith("queue s0->h2 mean/max"))
    assert "60.0/100 packets" in row and "60.0/20 packets" in row
    assert not any("web fetch" in line for line in lines)  # no fetches: no fetch lines

"""Fuzz targets: the readers of results and of what the datapath and Flent write. A real run
(tests/data/run-cs244.tar.xz, a recorded cs244 run) with its run.json, summary.json and series
mutated for the one reader (results/reader.py: load_run, load_sweep, read_summary), for the Flent
export (results/flent.py) and for calibration's reading of a measurement (results/measurement.py);
a Flent data file written by bloatlab's own export, mutated, for the Flent reader and what
`bloatlab calibrate` makes of it (lab/calibration/path.py: the first guess and the test spec);
the datapath's stats file (testbed/datapath_stats.py); the live view following a run and a sweep
(live/follow.py); a nic sweep's journal (nic/journal.py); the ns-3 driver's outputs
(sim/outputs.py).

Each gives a valid object or a one-line BloatlabError; what a reader documents as "None when
damaged" (read_summary, read_stats_if_any) is None; the live view never raises."""

import gzip
import json
import math
import shutil
import tarfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloatlab.analysis.aggregate import write_aggregate
from bloatlab.errors import BloatlabError, MachineError
from bloatlab.experiment.record import RunRecord
from bloatlab.lab.calibration import path as calibration
from bloatlab.live.follow import Follower, SweepFollower
from bloatlab.nic import journal
from bloatlab.nic.knobs import Iface
from bloatlab.results.flent import document, export
from bloatlab.results.measurement import read_measurement
from bloatlab.results.reader import flatten, load_run, load_sweep, read_summary, read_sweep_document
from bloatlab.sim.outputs import collect
from bloatlab.specs.experiment import load_preset, parse_experiment
from bloatlab.testbed.datapath_stats import read_stats_if_any

from fuzzkit import DATA, budget, contract, json_bytes, mutated_bytes, mutated_text, one_line, string_pool

ARCHIVE = DATA / "run-cs244.tar.xz"
SERIES_ROWS = 300  # of each recorded series and raw file kept: the reader's paths, at a fuzzing pace


def _archive(name: str) -> bytes:
    with tarfile.open(ARCHIVE) as tar:
        return tar.extractfile(name).read()


RUN_META = json.loads(_archive("run.json"))
SUMMARY = json.loads(_archive("summary.json"))
SUMMARIES = [json.loads(p.read_text()) for p in sorted((DATA / "summaries").glob("*.json"))] + [SUMMARY]
POOL = string_pool(RUN_META, SUMMARIES) + ["nic", "complete", "running", "pending", "failed", "unfinished: x"]
STATS = json.loads((DATA / "datapath-stats.json").read_text())
NIC_META = {**{k: RUN_META[k] for k in ("name", "started_at", "ended_at", "t0_realtime_s", "complete", "machine")},
            "kind": "nic", "iface": "eth0", "tests": ["tcp", "udp"], "ping_interval_s": 0.2}
JOURNAL = {"format": journal.FORMAT, "iface": "eth0", "netns": None, "owner": {"pid": 1, "starttime": 1},
           "created": "2026-11-21T10:00:00+00:00", "command": ["bloatlab", "nic", "sweep"],
           "original": {"txqueuelen": 1000, "qdisc": {"kind": "fq_codel", "handle": "0:", "default": True,
                                                      "options": {}}, "bql": {}, "offloads": {"gso": "on"}}}


def _short(data: bytes) -> bytes:
    return b"".join(data.splitlines(keepends=True)[:SERIES_ROWS])


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """The recorded run, its series and raw files cut to SERIES_ROWS lines (the queue log to as
    many records)."""
    where = tmp_path_factory.mktemp("recorded")
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(where, filter="data")
    for path in [*(where / "series").glob("*.csv"), *(where / "raw").glob("*.txt")]:
        path.write_bytes(_short(path.read_bytes()))
    qlog = where / "raw" / "qlog" / "s0-h2.forward.qlog"
    qlog.write_bytes(qlog.read_bytes()[:32 * SERIES_ROWS])
    return where


@pytest.fixture(scope="module")
def run_dir(recorded, tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("run") / "cs244"
    shutil.copytree(recorded, where)
    return where


SERIES = ["ping", "throughput", "queue", "cwnd", "fetch"]


def write_run(where: Path, recorded: Path, meta: bytes, summary: bytes, series: str | None, text: str) -> None:
    (where / "run.json").write_bytes(meta)
    (where / "summary.json").write_bytes(summary)
    for name in SERIES:  # one series mutated, the others as recorded
        data = text.encode("utf-8", "surrogatepass") if name == series else (recorded / "series" / f"{name}.csv").read_bytes()
        (where / "series" / f"{name}.csv").write_bytes(data)


def series_texts() -> st.SearchStrategy[tuple[str | None, str]]:
    """One of the run's series, mutated as text (or none of them)."""
    seeds = {name: _short(_archive(f"series/{name}.csv")).decode() for name in SERIES}
    return st.one_of(st.just((None, "")), st.sampled_from(SERIES).flatmap(
        lambda name: st.tuples(st.just(name), mutated_text(seeds[name]))))


def check_run(run) -> None:
    """Everything a plot, a report or a notebook asks of a run: no exception, and sane numbers."""
    repr(run)
    assert isinstance(run.name, str) and isinstance(run.spec, dict) and isinstance(run.params, dict)
    assert isinstance(run.complete, bool) and isinstance(run.duration_s, float)
    run.incomplete_reason, run.flows("bulk", "udp"), run.has_workload("web"), run.probed_queues()
    assert all(isinstance(v, int) for v in run.queue_limits_pkts().values())
    assert all(isinstance(v, float) and math.isfinite(v) for v in run.metrics().values())
    for name in {*SERIES, *run.series_names()}:
        series = run.read_series(name)
        assert series.problem is None or "\n" not in series.problem
        series.warning


@budget(30)
@given(meta=json_bytes(RUN_META, POOL), summary=json_bytes(SUMMARY, POOL), series=series_texts())
def test_run_reader(recorded, run_dir, meta, summary, series):
    write_run(run_dir, recorded, meta, summary, *series)
    run = contract(lambda: load_run(run_dir))
    if run is not None:
        check_run(run)


@budget(80)
@given(data=st.data(), seed=st.integers(0, len(SUMMARIES) - 1), kind=st.sampled_from([None, "nic", "experiment"]))
def test_summary_reader(tmp_path, data, seed, kind):
    (tmp_path / "summary.json").write_bytes(data.draw(json_bytes(SUMMARIES[seed], POOL)))
    summary = read_summary(tmp_path, kind)  # None when damaged, by its contract
    if summary is not None:
        doc = summary.to_dict()
        assert all(math.isfinite(v) for v in flatten(doc).values())


def _sweep_doc() -> dict:
    runs = [{"rep": 1, "dir": f"maxq={q}/rep1", "status": "complete", "reason": None, "elapsed_s": 12.5}
            for q in (20, 100)]
    return {"format": "bloatlab-sweep/1", "kind": "experiment", "name": "cs244", "source": "preset cs244",
            "axes": [{"name": "maxq", "values": [20, 100]}], "repeat": 1, "fixed": {"duration": "4s"},
            "created": "2026-11-21T10:00:00+00:00", "updated": "2026-11-21T10:05:00+00:00", "status": "complete",
            "machine": RUN_META.get("machine"), "command": ["bloatlab", "run", "--preset", "cs244"],
            "axis_labels": {"maxq": "queue size, packets"},
            "points": [{"label": f"maxq={q}", "values": {"maxq": q}, "runs": [run]} for q, run in zip((20, 100), runs)]}


SWEEP = _sweep_doc()


@pytest.fixture(scope="module")
def sweep_dir(recorded, tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("sweep")
    for q in (20, 100):
        shutil.copytree(recorded, where / f"maxq={q}" / "rep1")
    (where / "sweep.json").write_text(json.dumps(SWEEP))
    write_aggregate(SWEEP, where)
    shutil.copy(where / "aggregate.json", where / "aggregate.orig")  # what each example mutates afresh
    return where


@budget(30)
@given(data=st.data())
def test_sweep_reader(sweep_dir, data):
    aggregate = json.loads((sweep_dir / "aggregate.orig").read_text())
    (sweep_dir / "sweep.json").write_bytes(data.draw(json_bytes(SWEEP, POOL)))
    (sweep_dir / "aggregate.json").write_bytes(data.draw(st.one_of(st.just(json.dumps(aggregate).encode()),
                                                                   json_bytes(aggregate, POOL))))
    contract(lambda: read_sweep_document(sweep_dir))
    sweep = contract(lambda: load_sweep(sweep_dir))
    if sweep is None:
        return
    repr(sweep)
    assert isinstance(sweep.status, str) and isinstance(sweep.kind, str) and isinstance(sweep.name, str)
    for name, values in sweep.axes:
        assert isinstance(sweep.axis_label(name), str) and isinstance(values, list)
    for point in sweep.points:
        for metric in sweep.metric_names()[:5]:
            sweep.metric(point, metric)
    sweep.metrics()
    sweep.series("ping")
    sweep.first_run()


@pytest.fixture(scope="module")
def flent_doc(recorded, tmp_path_factory) -> dict:
    """The recorded run as bloatlab's own Flent export writes it."""
    where = tmp_path_factory.mktemp("flent")
    path = export(load_run(recorded), where / "cs244.flent.gz")
    with gzip.open(path, "rt") as f:
        return json.load(f)


FLENT_POOL = POOL + ["TCP upload", "TCP upload::1", "TCP download BE", "Ping (ms) ICMP", "Ping (ms) UDP EF",
                     "rrul", "rrul_be", "tcp_nup", "tcp_ndown", "ping", "T0", "TOTAL_LENGTH", "LENGTH",
                     "SERIES_META", "raw_values", "results", "x_values", "metadata"]


def check_measurement(m, spec_dir: Path) -> None:
    """A measurement as calibrate uses it: its figures, its base RTT, the first guess of a path and
    the test spec on it, which the spec reader must take or refuse in one line."""
    figures = m.figures()
    assert all(isinstance(v, float) and math.isfinite(v) for v in figures.values()), figures
    base = m.base_rtt_ms()
    assert base is None or math.isfinite(base)
    for discipline in ("taildrop", "codel"):
        path = contract(lambda: calibration.guess([m], discipline))
        if path is None:
            continue
        spec = calibration.test_spec(m, path, load_s=8.0)
        contract(lambda: parse_experiment(spec, [], base_dir=spec_dir, source="calibration"))


@budget(40)
@given(data=st.data(), how=st.sampled_from(["gz", "plain", "bytes"]))
def test_flent_file_reader(flent_doc, tmp_path, data, how):
    doc = data.draw(json_bytes(flent_doc, FLENT_POOL))
    path = tmp_path / ("m.flent.gz" if how != "plain" else "m.flent")
    if how == "gz":
        path.write_bytes(gzip.compress(doc, mtime=0))
    elif how == "plain":
        path.write_bytes(doc)
    else:  # the compressed file itself damaged: cut, bytes flipped
        path.write_bytes(data.draw(mutated_bytes(gzip.compress(json.dumps(flent_doc).encode(), mtime=0))))
    m = contract(lambda: read_measurement(path))
    if m is not None:
        check_measurement(m, tmp_path)


@budget(30)
@given(meta=st.one_of(json_bytes(RUN_META, POOL), json_bytes(NIC_META, POOL)), series=series_texts())
def test_run_as_measurement_and_flent_export(recorded, run_dir, tmp_path, meta, series):
    """A run directory read as calibrate reads a measurement, and exported as bloatlab export does."""
    write_run(run_dir, recorded, meta, json.dumps(SUMMARY).encode(), *series)
    m = contract(lambda: read_measurement(run_dir))
    if m is not None:
        check_measurement(m, tmp_path)
    run = contract(lambda: load_run(run_dir))
    if run is not None:
        doc = contract(lambda: document(run))
        if doc is not None:
            json.dumps(doc)


@budget(60)
@given(data=json_bytes(STATS, string_pool(STATS)))
def test_datapath_stats_reader(tmp_path, data):
    path = tmp_path / "datapath-stats.json"
    path.write_bytes(data)
    try:
        stats = read_stats_if_any(path)
    except MachineError as e:
        one_line(e, field=False)
        return
    if stats is not None:
        json.dumps(stats.to_dict())
        stats.figures


def _follow_dir(where: Path, recorded: Path, meta: bytes, raws: dict[str, bytes]) -> None:
    if not (where / "raw").exists():
        shutil.copytree(recorded / "raw", where / "raw")
    (where / "run.json").write_bytes(meta)
    for name, data in raws.items():
        (where / "raw" / name).write_bytes(data)


RAW = ["ping.ping.txt", "bulk.server.txt", "web.fetches.txt", "tcp_probe.txt"]
UNFINISHED = {**RUN_META, "complete": False, "incomplete_reason": "unfinished: the run goes on", "ended_at": None}


@st.composite
def raw_files(draw) -> dict[str, bytes]:
    """The tools' raw files as a run leaves them, one or two mutated (the queue log as bytes)."""
    out = {}
    for name in draw(st.lists(st.sampled_from([*RAW, "qlog/s0-h2.forward.qlog"]), max_size=2, unique=True)):
        data = _archive(f"raw/{name}")
        if name.endswith(".qlog"):
            out[name] = draw(mutated_bytes(data[:32 * SERIES_ROWS]))
        else:
            out[name] = draw(mutated_text(_short(data).decode())).encode("utf-8", "surrogatepass")
    return out


@budget(20)
@given(meta=st.one_of(json_bytes(RUN_META, POOL), json_bytes(UNFINISHED, POOL)), raws=raw_files())
def test_follower(recorded, tmp_path_factory, meta, raws):
    where = tmp_path_factory.mktemp("follow")
    _follow_dir(where, recorded, meta, raws)
    now = RUN_META["t0_realtime_s"] + 2.0
    follower = Follower(where, clock=lambda: now)
    json.dumps(follower.poll(), default=str)
    json.dumps(follower.snapshot(), default=str)
    shutil.rmtree(where)


@budget(20)
@given(data=st.data())
def test_sweep_follower(sweep_dir, data):
    (sweep_dir / "sweep.json").write_bytes(data.draw(json_bytes({**SWEEP, "status": "running"}, POOL)))
    summary = data.draw(json_bytes(SUMMARY, POOL))
    (sweep_dir / "maxq=20" / "rep1" / "summary.json").write_bytes(summary)
    follower = SweepFollower(sweep_dir, clock=lambda: RUN_META["t0_realtime_s"] + 2.0)
    json.dumps(follower.poll(), default=str)
    json.dumps(follower.snapshot(), default=str)
    (sweep_dir / "maxq=20" / "rep1" / "summary.json").write_text(json.dumps(SUMMARY))


@budget(60)
@given(data=json_bytes(JOURNAL, string_pool(JOURNAL)))
def test_nic_journal(tmp_path, data):
    path = tmp_path / "eth0.json"
    path.write_bytes(data)
    found = contract(lambda: journal.load(path))
    if found is not None:
        assert isinstance(found.iface, Iface)
        found.owner_alive()
        json.dumps(found.to_dict())


# The ns-3 driver's outputs (sim/cxx/bloatlab_ns3.cc), as it writes them for the l4s preset.
SIM_OUT = {
    "ping.csv": "".join(f"{0.1 * i:.3f},ping,{20 + i % 5}.5\n" for i in range(1, 30)),
    "pings.csv": "name,sent,received\nping,30,29\n",
    "flows.csv": "name,bytes_received,first_s,last_s,bytes_sent,retransmits\n"
                 "classic,12000000,0.1,14.9,12500000,31\nl4s,11000000,0.1,14.9,11200000,2\n",
    "throughput.csv": "".join(f"{0.1 * i:.3f},classic,{9 + i % 3}.1\n" for i in range(1, 30)),
    "fetch.csv": "1.000,0.512,web,1\n6.000,0.733,web,0\n",
    "cwnd.csv": "".join(f"{0.1 * i:.3f},classic,{10 + i},{'' if i < 5 else 30},{20 + i / 10}\n" for i in range(1, 30)),
    "directions.csv": "direction,departures,bytes_out,queue_drops,queue_packets\n"
                      "c->s0,30000,45000000,0,0\ns0->r,50000,75000000,40,3\n",
    "dualpi2.csv": "direction,prob,delay_c_us,delay_l_us,pkts_in_c,pkts_in_l,maxq,ecn_mark,step_mark,credit,"
                   "memory_used_bytes,max_memory_used_bytes,memory_limit_bytes\n"
                   "s0->r,0.0123,14000,300,20000,30000,90,2000,700,-15140,30280,200000,30280000\n",
}


@pytest.fixture(scope="module")
def sim_experiment():
    return load_preset("l4s", ["aqm=dualpi2", "duration=15s"], backend="ns3")


@budget(50)
@given(data=st.data(), which=st.sampled_from(sorted(SIM_OUT)))
def test_sim_outputs(sim_experiment, tmp_path, data, which):
    out = tmp_path / "ns3"
    out.mkdir(exist_ok=True)
    for name, text in SIM_OUT.items():
        (out / name).write_text(data.draw(mutated_text(text)) if name == which else text, errors="surrogatepass")
    record = RunRecord(sim_experiment)
    record.duration_s = 15.0
    contract(lambda: collect(out, record), field=False)  # a run written incomplete with its reason, or read


def test_the_seeds_read_cleanly(recorded, run_dir, sweep_dir, flent_doc, tmp_path):
    """Unmutated, every seed is what its reader takes: the targets start from valid inputs."""
    write_run(run_dir, recorded, json.dumps(RUN_META).encode(), json.dumps(SUMMARY).encode(), None, "")
    check_run(load_run(run_dir))
    (sweep_dir / "sweep.json").write_text(json.dumps(SWEEP))
    shutil.copy(sweep_dir / "aggregate.orig", sweep_dir / "aggregate.json")
    assert load_sweep(sweep_dir).metrics().shape[0] == 2
    path = tmp_path / "m.flent.gz"
    path.write_bytes(gzip.compress(json.dumps(flent_doc).encode(), mtime=0))
    check_measurement(read_measurement(path), tmp_path)
    assert read_stats_if_any(DATA / "datapath-stats.json") is not None
    (tmp_path / "j.json").write_text(json.dumps(JOURNAL))
    assert journal.load(tmp_path / "j.json").iface.name == "eth0"
    for name, text in SIM_OUT.items():
        (tmp_path / name).write_text(text)
    record = RunRecord(load_preset("l4s", ["aqm=dualpi2", "duration=15s"], backend="ns3"))
    collect(tmp_path, record)
    assert record.simulated_stats["s0->r"].dualpi2.prob == 0.0123
    with pytest.raises(BloatlabError):
        load_run(tmp_path / "nowhere")


# Found by fuzzing: each defect's smallest input, as a plain test ------------------------------

DEEP = "[" * 100_000 + "]" * 100_000  # deeper than json's decoder recurses


def _damaged(run_dir: Path, recorded: Path, **change) -> None:
    meta = json.loads(json.dumps(RUN_META))
    for key, value in change.items():
        meta["spec" if key == "workloads" else key] = {**meta["spec"], "workloads": value} if key == "workloads" \
            else value
    write_run(run_dir, recorded, json.dumps(meta).encode(), json.dumps(SUMMARY).encode(), None, "")


def test_json_nested_too_deeply_is_a_damaged_file(recorded, run_dir):
    # json.loads raised RecursionError out of load_run and read_summary.
    write_run(run_dir, recorded, DEEP.encode(), json.dumps(SUMMARY).encode(), None, "")
    with pytest.raises(BloatlabError) as caught:
        load_run(run_dir)
    one_line(caught.value)
    write_run(run_dir, recorded, json.dumps(RUN_META).encode(), DEEP.encode(), None, "")
    assert load_run(run_dir).summary is None


def test_numbers_beyond_a_float_are_no_figures(recorded, run_dir):
    # math.isfinite(10**400) and float(10**400) raised OverflowError (metrics, duration_s).
    summary = json.loads(json.dumps(SUMMARY))
    summary["rtt_ms"]["max"] = 10**400
    meta = {**RUN_META, "spec": {**RUN_META["spec"], "duration_s": 10**400}}
    write_run(run_dir, recorded, json.dumps(meta).encode(), json.dumps(summary).encode(), None, "")
    run = load_run(run_dir)
    assert "rtt_ms.max" not in run.metrics() and run.duration_s == 0.0


def test_summary_values_not_of_their_type_read_as_none(tmp_path):
    # A dict where a number is due reached headline's format(): TypeError; a count beyond 64 bits
    # reached numpy: TypeError.
    from bloatlab.analysis.compare import headline_numbers
    from bloatlab.analysis.summary import headline

    doc = json.loads(json.dumps(SUMMARY))
    doc["flows"]["bulk"]["goodput_mbps"] = {"x": 1}
    doc["queue"]["s0->h2"]["drops"] = 18 * 10**21
    doc["rtt_ms"]["median"] = "85.8"
    (tmp_path / "summary.json").write_text(json.dumps(doc))
    summary = read_summary(tmp_path)
    assert summary.flows["bulk"].goodput_mbps is None and summary.queue["s0->h2"].drops is None
    assert summary.rtt_ms.median is None and summary.rtt_ms.p95 == SUMMARY["rtt_ms"]["p95"]
    headline(summary), headline_numbers(summary)


@pytest.mark.parametrize("change", [{"points": [{"label": "x", "runs": 5}]},
                                    {"points": [{**SWEEP["points"][0], "values": {"maxq": []}}]},
                                    {"points": [{"label": "x", "runs": [{"rep": "x"}]}]},
                                    {"points": [], "axes": [{"name": "maxq", "values": 5}]}])
def test_a_damaged_sweep_json_reads_what_it_can(recorded, tmp_path, change):
    # TypeError ('int' object is not iterable), ValueError (int("x"); pandas' assign(maxq=[])).
    (tmp_path / "sweep.json").write_text(json.dumps({**SWEEP, **change}))
    (tmp_path / "aggregate.json").write_text(json.dumps({"points": 5}))
    shutil.copytree(recorded, tmp_path / "maxq=20" / "rep1")
    sweep = load_sweep(tmp_path)
    sweep.axes, sweep.metric_names(), sweep.metrics(), sweep.series("ping"), repr(sweep)


def test_a_sweep_run_dir_whose_name_is_too_long_is_no_run(tmp_path):
    # Path.is_file() raised OSError (ENAMETOOLONG) from complete_runs(), and so from repr().
    runs = [{"rep": 1, "dir": "9" * 300 + "/rep1", "status": "complete"}]
    (tmp_path / "sweep.json").write_text(json.dumps({**SWEEP, "points": [{"label": "x", "runs": runs}]}))
    sweep = load_sweep(tmp_path)
    assert sweep.points[0].complete_runs() == [] and "0 of 1 runs complete" in repr(sweep)


@pytest.mark.parametrize("workloads", [[{"kind": "bulk"}], [{"name": "bulk", "kind": "bulk", "start_ns": "0", "stop_ns": 1}],
                                       [{"name": "b", "kind": "bulk", "start_ns": 0, "stop_ns": 10**400}], 5])
def test_a_run_whose_workloads_are_damaged_is_a_one_line_error(recorded, run_dir, workloads):
    # flent's document() and calibrate's from_run raised KeyError, TypeError or OverflowError.
    _damaged(run_dir, recorded, workloads=workloads)
    for call in (lambda: document(load_run(run_dir)), lambda: read_measurement(run_dir)):
        with pytest.raises(BloatlabError) as caught:
            call()
        one_line(caught.value)


@pytest.mark.parametrize("change", [{"t0_realtime_s": math.nan}, {"t0_realtime_s": 1e300},
                                    {"hosts": [{"name": ["h1"]}]}, {"started_at": "yesterday"}])
def test_a_flent_export_of_a_damaged_run_json_is_written_or_refused(recorded, run_dir, change):
    # _iso(NaN) ValueError, _iso(1e300) OverflowError, a host named by a list TypeError,
    # fromisoformat("yesterday") ValueError.
    _damaged(run_dir, recorded, **change)
    doc = contract(lambda: document(load_run(run_dir)))
    assert doc is None or json.dumps(doc)


def test_a_flent_export_of_a_run_of_absurd_length_is_refused_at_once(recorded, run_dir):
    # A grid of duration / 0.2 points: 1e300 s allocated without end.
    _damaged(run_dir, recorded, spec={**RUN_META["spec"], "duration_s": 1e300})
    with pytest.raises(BloatlabError, match="duration"):
        document(load_run(run_dir))


def test_a_series_cell_of_inf_is_no_sample(recorded, run_dir, tmp_path):
    # math.ceil(inf) raised OverflowError in the export; calibrate's figures came out inf and NaN.
    text = _archive("series/throughput.csv").decode().splitlines(True)
    text[30] = text[30].rsplit(",", 1)[0] + ",inf\n"  # a value, in the load's steady part (3 s)
    text[31] = "inf," + text[31].split(",", 1)[1]  # a time
    write_run(run_dir, recorded, json.dumps(RUN_META).encode(), json.dumps(SUMMARY).encode(), "throughput",
              "".join(text))
    json.dumps(document(load_run(run_dir)), allow_nan=False)
    check_measurement(read_measurement(run_dir), tmp_path)


def test_a_nic_run_json_with_fields_not_of_their_type_reads(recorded, run_dir, tmp_path):
    # float("x") and `"udp" in 5` raised ValueError and TypeError.
    meta = {**NIC_META, "ping_interval_s": "x", "tests": 5}
    throughput = "t_s,flow,mbps\n" + "".join(f"{i / 10},tcp,9.5\n" for i in range(1, 40))
    write_run(run_dir, recorded, json.dumps(meta).encode(), json.dumps({"complete": True}).encode(), "throughput",
              throughput)
    assert read_measurement(run_dir).probes[0].interval_s == 0.2


@pytest.mark.parametrize("data", [b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xff\xff\xff\xff", None, "deep", "long"])
def test_a_flent_file_that_does_not_read_is_a_one_line_error(flent_doc, tmp_path, data):
    # zlib.error, float(10**400) OverflowError, RecursionError and ValueError (5000 digits) escaped.
    path = tmp_path / "m.flent.gz"
    if data is None:
        doc = {**flent_doc, "metadata": {**flent_doc["metadata"], "TOTAL_LENGTH": 10**400}}
        data = gzip.compress(json.dumps(doc).encode(), mtime=0)
    elif data == "deep":
        data = gzip.compress(DEEP.encode(), mtime=0)
    elif data == "long":
        data = gzip.compress(b'{"metadata": ' + b"1" * 5000 + b"}", mtime=0)
    path.write_bytes(data)
    with pytest.raises(BloatlabError) as caught:
        read_measurement(path)
    one_line(caught.value)


def test_flent_series_that_are_not_lists_are_read_as_empty(flent_doc, tmp_path):
    # zip(x_values, 5) raised TypeError.
    doc = {**flent_doc, "raw_values": {}, "results": {**flent_doc["results"], "TCP upload::1": 5}}
    path = tmp_path / "m.flent.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), mtime=0))
    assert read_measurement(path).throughput.empty


@pytest.mark.parametrize("data", [b"\xff", json.dumps({**STATS, "links": []}).encode(),
                                  json.dumps({**STATS, "batching": {**STATS["batching"], "periods": "5"}}).encode(),
                                  DEEP.encode()])
def test_a_datapath_stats_file_that_is_not_the_binarys_is_refused_or_absent(tmp_path, data):
    # UnicodeDecodeError, AttributeError (links as a list) and RecursionError escaped; a figure of
    # the wrong type was handed on.
    path = tmp_path / "datapath-stats.json"
    path.write_bytes(data)
    try:
        assert read_stats_if_any(path) is None
    except MachineError as e:
        one_line(e, field=False)


def test_the_live_view_follows_a_damaged_run_without_raising(recorded, tmp_path):
    # RecursionError out of run.json's reading; a direction named by a list (unhashable).
    for meta in (DEEP, json.dumps({**UNFINISHED, "links": [{"forward": {"direction": ["s0->h2"]}}],
                                   "probes": {"queue": {"s0->h2": "datapath"}}})):
        where = tmp_path / f"run{len(meta)}"
        _follow_dir(where, recorded, meta.encode(), {})
        Follower(where, clock=lambda: RUN_META["t0_realtime_s"] + 2.0).snapshot()


def test_the_live_view_follows_a_damaged_sweep_without_raising(sweep_dir):
    # Path.exists() raised OSError (name too long) for a run dir sweep.json named.
    doc = {**SWEEP, "status": "running",
           "points": [{"label": "x", "runs": [{"rep": 1, "dir": "x" * 300, "status": "complete"}]}]}
    (sweep_dir / "sweep.json").write_text(json.dumps(doc))
    SweepFollower(sweep_dir).poll()
    (sweep_dir / "sweep.json").write_text(json.dumps(SWEEP))


@pytest.mark.parametrize("doc", [[], {**JOURNAL, "owner": {"pid": 1}}, {**JOURNAL, "iface": 5}, DEEP])
def test_a_damaged_nic_journal_is_a_one_line_error(tmp_path, doc):
    # AttributeError ([].get), and a journal taken that owner_alive() then failed on (KeyError).
    path = tmp_path / "eth0.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(BloatlabError) as caught:
        journal.load(path)
    one_line(caught.value)


@pytest.mark.parametrize("name, text", [("directions.csv", "direction,departures\ns0->r,1\n"),
                                        ("flows.csv", "name,bytes_received\nclassic,12\n"),
                                        ("ping.csv", "0.1,ping\n"), ("dualpi2.csv", "direction,prob\ns0->r,x\n"),
                                        ("flows.csv", "name,bytes_received,first_s,last_s,bytes_sent,retransmits\n"
                                                      f"classic,{10**400},0.1,14.9,1,0\n")])
def test_ns3_outputs_not_as_the_driver_writes_them_are_a_one_line_error(sim_experiment, tmp_path, name, text):
    # KeyError, ValueError and TypeError escaped: a simulated run ended in a traceback; and
    # OverflowError, from a byte count no float holds (the long campaign's find).
    for other, seed in SIM_OUT.items():
        (tmp_path / other).write_text(text if other == name else seed)
    with pytest.raises(BloatlabError) as caught:
        collect(tmp_path, RunRecord(sim_experiment))
    one_line(caught.value)


def test_the_live_view_skips_samples_without_a_finite_time(recorded, tmp_path):
    # A tcp_probe stamp of 308 digits, a bin number past a float's range, raised OverflowError in math.floor.
    raw = _short(_archive("raw/tcp_probe.txt")).decode()
    port = RUN_META["flows"]["bulk"]["port"]  # an event of the bulk flow's sender, which the view draws
    stamp = next(line for line in raw.splitlines() if f"dest=10.0.0.2:{port} " in line).split("tcp_probe:")[0].split()[-1]
    _follow_dir(tmp_path, recorded, json.dumps(UNFINISHED).encode(),
                {"tcp_probe.txt": raw.replace(stamp, "9" * 308 + ".5:", 1).encode()})
    Follower(tmp_path, clock=lambda: RUN_META["t0_realtime_s"] + 2.0).snapshot()

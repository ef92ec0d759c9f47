"""dualpi2 end to end on the Python side: its record in the catalogue and what a spec may set,
the datapath's "queue" object, the kernel backend's tc argv and refusals (this kernel has no
sch_dualpi2), and its figures from the stats file into summary.json and report.html."""

import json
from pathlib import Path

import pytest

from bloatlab.analysis.report import write_report
from bloatlab.errors import MachineError, SpecError
from bloatlab.experiment.record import RunRecord
from bloatlab.results.summary import DualPi2Summary, RunSummary
from bloatlab.results.writer import summary
from bloatlab.specs.disciplines import CATALOGUE, DisciplineName, DualPi2Params
from bloatlab.specs.experiment import load_preset
from bloatlab.specs.model import DirectionSpec, LinkSpec, QueueSpec
from bloatlab.specs.topology import parse_topology
from bloatlab.testbed import capabilities
from bloatlab.testbed.datapath import MARK_REASONS, direction_config
from bloatlab.testbed.datapath_stats import DatapathStats, DirectionStats
from bloatlab.testbed.links.kernel import kernel_needs, kernel_tc_commands
from bloatlab.testbed.network import choose_backend

DATA = Path(__file__).parents[1] / "data"
STATS = json.loads((DATA / "datapath-stats.json").read_text())
RATE = 20_000_000
# A dualpi2 direction's figures as bloatlab-link writes them (main.rs, dualpi2_json).
FIGURES = {"prob": 0.0703125, "delay_c_us": 14250, "delay_l_us": 0, "pkts_in_c": 41_000, "pkts_in_l": 12,
           "maxq": 38, "ecn_mark": 5, "step_mark": 2, "credit": -121_120, "memory_used_bytes": 15_140,
           "max_memory_used_bytes": 57_532, "memory_limit_bytes": 30_280_000}


def queue_of(queue: object) -> QueueSpec:
    link = {"ends": ["h1", "h2"], "rate": "20mbit", "queue": queue}
    return parse_topology({"hosts": {"h1": {}, "h2": {}}, "links": [link]}, where="topology").links[0].forward.queue


def rejects(queue: object, key: str, *fragments: str) -> SpecError:
    with pytest.raises(SpecError) as caught:
        queue_of(queue)
    assert caught.value.field == f"topology.links[0].queue.{key}", str(caught.value)
    assert "\n" not in str(caught.value)
    for fragment in fragments:
        assert fragment in caught.value.message, str(caught.value)
    return caught.value


# ---------------------------------------------------------------- the record and a spec's values


def test_the_catalogue_declares_linuxs_defaults():
    d = CATALOGUE[DisciplineName.DUALPI2]
    assert d.packets == 10000 and d.record is DualPi2Params
    assert d.defaults() == {
        "target_ns": 15_000_000, "tupdate_ns": 16_000_000, "alpha": 41 / 256, "beta": 819 / 256,
        "step_thresh_ns": 1_000_000, "step_packets": None, "min_qlen_step": 0, "coupling_factor": 2,
        "classic_protection_percent": 10, "ecn_mask": "l4s_ect", "drop_on_overload": True, "drop_early": False,
        "memory_limit_bytes": None, "mtu_bytes": 1514}
    assert (d.param("alpha").default, d.param("beta").default) == (0.16015625, 3.19921875)  # RFC 9332's 0.16, 3.2
    assert d.param("mtu").settable is False


def test_a_spec_sets_each_parameter_in_its_unit():
    q = queue_of({"discipline": "dualpi2", "packets": 500, "target": "20ms", "tupdate": "8ms", "alpha": 0.3125,
                  "beta": 4, "step_thresh": "500us", "min_qlen_step": 3, "coupling_factor": 3,
                  "classic_protection": 25, "ecn_mask": "any_ect", "drop_on_overload": False, "drop_early": True,
                  "memory_limit": "1mib"})
    assert q == QueueSpec("dualpi2", 500, None, DualPi2Params(
        target_ns=20_000_000, tupdate_ns=8_000_000, alpha=0.3125, beta=4.0, step_thresh_ns=500_000, min_qlen_step=3,
        coupling_factor=3, classic_protection_percent=25, ecn_mask="any_ect", drop_on_overload=False,
        drop_early=True, memory_limit_bytes=2**20))
    assert isinstance(q.params.beta, float)
    assert queue_of({"discipline": "dualpi2", "step_packets": 5}).params == DualPi2Params(step_packets=5)
    assert queue_of({"discipline": "dualpi2"}) == QueueSpec("dualpi2", 10000, None)


def test_the_datapath_gets_every_parameter_resolved():
    config = direction_config(DirectionSpec(rate_bps=RATE, queue=queue_of({"discipline": "dualpi2",
                                                                           "classic_protection": 30})), seed=1)
    assert config["queue"] == {
        "discipline": "dualpi2", "packets": 10000, "bytes": None, "target_ns": 15_000_000, "tupdate_ns": 16_000_000,
        "alpha": 0.16015625, "beta": 3.19921875, "step_thresh_ns": 1_000_000, "step_packets": None,
        "min_qlen_step": 0, "coupling_factor": 2, "classic_protection_percent": 30, "ecn_mask": "l4s_ect",
        "drop_on_overload": True, "drop_early": False, "memory_limit_bytes": None, "mtu_bytes": 1514}
    # A spec's dict holds what it set, and reads back as the same queue.
    q = queue_of({"discipline": "dualpi2", "step_packets": 4, "ecn_mask": "any_ect"})
    assert q.to_dict() == {"discipline": "dualpi2", "packets": 10000, "bytes": None, "step_packets": 4,
                           "ecn_mask": "any_ect"}
    assert QueueSpec.from_dict(q.to_dict()) == q


@pytest.mark.parametrize(("queue", "key", "fragment"), [
    ({"coupling_factor": 0}, "coupling_factor", "from 1 to 255"),
    ({"coupling_factor": 256}, "coupling_factor", "from 1 to 255"),
    ({"coupling_factor": 1.5}, "coupling_factor", "whole number"),
    ({"classic_protection": 101}, "classic_protection", "from 0 to 100"),
    ({"classic_protection": "10%"}, "classic_protection", "whole number from 0 to 100"),
    ({"ecn_mask": "ect1"}, "ecn_mask", "choose one of: l4s_ect, any_ect"),
    ({"ecn_mask": "l4s-ect"}, "ecn_mask", 'did you mean "l4s_ect"'),
    ({"step_packets": 0}, "step_packets", "from 1 to 1000000"),
    ({"min_qlen_step": -1}, "min_qlen_step", "from 0 to 1000000"),
    ({"step_thresh": "0ms"}, "step_thresh", "longer than zero"),
    ({"tupdate": 16}, "tupdate", "has no unit"),
    ({"alpha": -0.16}, "alpha", ">= 0"),
    ({"beta": "3.2"}, "beta", ">= 0"),
    ({"drop_on_overload": "overflow"}, "drop_on_overload", "true or false"),
    ({"memory_limit": "2gib"}, "memory_limit", "1 GiB"),
])
def test_bad_values_are_one_line_errors_on_their_key(queue, key, fragment):
    rejects({"discipline": "dualpi2", **queue}, key, fragment)


def test_the_step_threshold_is_a_time_or_a_length_not_both():
    rejects({"discipline": "dualpi2", "step_thresh": "2ms", "step_packets": 4}, "step_packets",
            "set step_thresh (a sojourn time) or step_packets (an L-queue length), not both")


def test_another_disciplines_key_is_named_as_such():
    rejects({"discipline": "dualpi2", "ecn": True}, "ecn", "dualpi2 has no ecn", "belongs to codel, fq_codel")
    rejects({"discipline": "pie", "coupling_factor": 2}, "coupling_factor", "pie has no coupling_factor",
            "belongs to dualpi2")


# ---------------------------------------------------------------- the kernel backend


def direction(queue: QueueSpec) -> DirectionSpec:
    return DirectionSpec(rate_bps=RATE, queue=queue)


def link(queue: QueueSpec, backend: str = "auto") -> LinkSpec:
    return LinkSpec(name="h1-h2", ends=("h1", "h2"), forward=direction(queue), reverse=direction(queue),
                    backend=backend)


ALL = {"htb": True, "netem": True, "pfifo": True, "bfifo": True, "dualpi2": True}


def test_tc_gets_every_parameter():
    leaf = kernel_tc_commands("h1-eth0", direction(QueueSpec("dualpi2", 10000)))[-1]
    assert leaf[leaf.index("handle") + 2:] == [
        "dualpi2", "limit", "10000", "target", "15000us", "tupdate", "16000us", "alpha", "0.16015625",
        "beta", "3.19921875", "step_thresh", "1000us", "min_qlen_step", "0", "coupling_factor", "2",
        "drop_on_overload", "drop_dequeue", "classic_protection", "10%", "l4s_ect"]
    tuned = QueueSpec("dualpi2", 300, None, DualPi2Params(step_packets=5, drop_on_overload=False, drop_early=True,
                                                          ecn_mask="any_ect", memory_limit_bytes=500_000))
    leaf = kernel_tc_commands("h1-eth0", direction(tuned))[-1]
    assert leaf[leaf.index("handle") + 2:] == [
        "dualpi2", "limit", "300", "target", "15000us", "tupdate", "16000us", "alpha", "0.16015625",
        "beta", "3.19921875", "step_thresh", "5p", "min_qlen_step", "0", "coupling_factor", "2",
        "overflow", "drop_enqueue", "classic_protection", "10%", "any_ect", "memlimit", "500000"]


def test_without_sch_dualpi2_the_kernel_backend_is_a_one_line_error():
    q = QueueSpec("dualpi2", 10000)
    assert [n.qdisc for n in kernel_needs(direction(q), "forward")] == ["htb", "dualpi2"]
    assert choose_backend(link(q), ALL) == "kernel"
    assert choose_backend(link(q), {**ALL, "dualpi2": False}) == "userspace"
    with pytest.raises(MachineError) as error:
        choose_backend(link(q, "kernel"), {**ALL, "dualpi2": False}, index=0)
    assert str(error.value) == (
        "links[0].backend: the kernel backend needs the dualpi2 qdisc for a dualpi2 queue, and this kernel has "
        'none (see bloatlab doctor); use backend = "userspace" or "auto"')
    # doctor probes it with the others, and a run asks for it only when a link could use it.
    assert capabilities.QDISC_PROBES["dualpi2"] == []


@pytest.mark.parametrize(("queue", "field", "fragment"), [
    (QueueSpec("dualpi2", None, 150_000), "", "Linux dualpi2 limits packets, not bytes"),
    (QueueSpec("dualpi2", 1000, None, DualPi2Params(alpha=0.16)), ".alpha",
     "steps of 1/256 above 0, and 0.16 is not one; write a multiple of 0.00390625 (e.g. 0.16015625)"),
    (QueueSpec("dualpi2", 1000, None, DualPi2Params(beta=0.0)), ".beta", "0 is not one"),
    (QueueSpec("dualpi2", 1000, None, DualPi2Params(target_ns=15_000_500)), ".target", "whole microseconds"),
])
def test_the_kernel_backend_refuses_what_tc_cannot_hand_linux(queue, field, fragment):
    assert choose_backend(link(queue), ALL) == "userspace"
    with pytest.raises(SpecError) as caught:
        choose_backend(link(queue, "kernel"), ALL, index=1)
    assert f"(forward.queue{field})" in caught.value.message and fragment in caught.value.message
    assert "\n" not in str(caught.value)


# ---------------------------------------------------------------- its figures, file to report


def dualpi2_direction() -> dict:
    return {**STATS["links"]["s0-h2"]["forward"], "dualpi2": FIGURES}


def test_the_stats_file_figures_read_into_a_record_that_gives_them_back(tmp_path):
    doc = json.loads(json.dumps(STATS))
    doc["links"]["s0-h2"]["reverse"]["dualpi2"] = FIGURES
    doc = json.loads(json.dumps(doc, sort_keys=True))  # as serde_json writes it: keys sorted
    stats = DatapathStats.from_json(doc)
    figures = stats.links["s0-h2"].reverse.dualpi2
    assert (figures.prob, figures.pkts_in_c, figures.credit) == (0.0703125, 41_000, -121_120)
    assert stats.links["s0-h2"].forward.dualpi2 is None
    assert json.dumps(stats.to_dict()) == json.dumps(doc)  # key for key, in the file's order
    assert MARK_REASONS[8] == "dualpi2_step"


def test_the_summary_holds_each_dualpi2_direction_and_reads_back_equal():
    experiment = load_preset("cs244", ["duration=10s"])
    record = RunRecord(experiment, datapath_stats={
        "s0->h2": DirectionStats.from_json(dualpi2_direction()),
        "h2->s0": DirectionStats.from_json(STATS["links"]["s0-h2"]["reverse"])})
    written = summary(record)
    doc = json.loads(json.dumps(written.to_dict()))
    assert doc["dualpi2"] == {"s0->h2": {
        "prob": 0.0703125, "delay_c_ms": 14.25, "delay_l_ms": 0.0, "pkts_in_c": 41_000, "pkts_in_l": 12, "maxq": 38,
        "ecn_mark": 5, "step_mark": 2, "credit": -121_120, "memory_used_bytes": 15_140,
        "max_memory_used_bytes": 57_532, "memory_limit_bytes": 30_280_000}}
    assert list(doc)[-1] == "dualpi2"
    back = RunSummary.from_json(doc)
    assert back == written and isinstance(back.dualpi2["s0->h2"], DualPi2Summary)
    assert back.dualpi2["s0->h2"].delay_c_ms == 14.25
    assert summary(RunRecord(experiment)).dualpi2 is None and "dualpi2" not in summary(RunRecord(experiment)).to_dict()


def test_the_report_shows_them_as_tc_does_a_column_per_direction(make_run):
    run = make_run()
    doc = json.loads((run / "summary.json").read_text())
    one = DualPi2Summary.of(DirectionStats.from_json(dualpi2_direction()).dualpi2).to_dict()
    doc["dualpi2"] = {"s0->h2": one, "h2->s0": {**one, "prob": 0.5, "step_mark": 0}}
    (run / "summary.json").write_text(json.dumps(doc))
    table = write_report(run).read_text().split("<h3>DualPI2</h3>")[1].split("</table>")[0]
    assert "<th></th><th>s0-&gt;h2</th><th>h2-&gt;s0</th>" in table
    assert "<td>p&#x27; (base probability)</td><td class=\"num\">0.070</td><td class=\"num\">0.500</td>" in table
    assert '<td>step marks</td><td class="num">2</td><td class="num">0</td>' in table
    assert '<td>C head delay ms</td><td class="num">14.2</td>' in table
    for row in ("packets into C", "packets into L", "most queued (maxq)", "CE marks", "credit bytes"):
        assert f"<td>{row}</td>" in table, row

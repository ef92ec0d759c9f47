"""ECN per flow (docs/experiments.md, "ECN and L4S on this kernel"): a bulk flow's `ecn = "ect1"`
and the probes' `ecn`, checked with one-line errors on their field; where a scalable flow's
ECT(1) is set (its sender's first hop, on the datapath), what run.json and summary.json say of
it, and the datapath's counts per codepoint read back key for key. No network here: the
integration test (tests/integration/test_ecn.py) checks the wire."""

import dataclasses
import json
from pathlib import Path

import pytest

from bloatlab.analysis.summary import summary_lines
from bloatlab.errors import SpecError
from bloatlab.experiment.record import RunRecord
from bloatlab.experiment.workloads import ecn_origins, ect1_flows
from bloatlab.lab.run import one_backend_per_link
from bloatlab.results.writer import record_from_document, run_document, summary
from bloatlab.sim.scenario import check as check_simulated, scenario
from bloatlab.specs import dscp
from bloatlab.specs.experiment import Source, load_experiment, plan_sweep
from bloatlab.specs.model import Bulk, Irtt, Ping
from bloatlab.testbed.capabilities import QDISC_PROBES
from bloatlab.testbed.datapath_stats import DirectionStats, EcnCounts
from bloatlab.testbed.links.base import Ect1Flow
from bloatlab.testbed.network import choose_backend, ect1_directions

STATS = json.loads((Path(__file__).parents[1] / "data" / "datapath-stats.json").read_text())
EVERY_QDISC = {kind: True for kind in QDISC_PROBES}

# A dumbbell: h1 and h3 send through s0 to h2; the bottleneck s0->h2 is a dualpi2 queue the
# kernel could serve, and so could h1's and h3's own links (no delay, a plain rate).
SPEC = """
name = "ecn"
duration = "10s"
backend = "{backend}"
[params]
backend = "emulation"
l4s = "ect1"
[topology.hosts.h1]
[topology.hosts.h2]
[topology.hosts.h3]
[topology.switches.s0]
[[topology.links]]
ends = ["h1", "s0"]
rate = "100mbit"
[[topology.links]]
ends = ["s0", "h2"]
rate = "20mbit"
delay = "10ms"
queue = { discipline = "dualpi2" }
[[topology.links]]
ends = ["h3", "s0"]
rate = "100mbit"
[[workloads]]
kind = "bulk"
name = "scalable"
from = "h1"
to = "h2"
cc = "dctcp"
ecn = "{l4s}"
[[workloads]]
kind = "bulk"
name = "classic"
from = "h3"
to = "h2"
cc = "cubic"
[[workloads]]
kind = "ping"
name = "ping_l"
from = "h1"
to = "h2"
ecn = "ect1"
[[workloads]]
kind = "irtt"
name = "probe"
from = "h3"
to = "h2"
dscp = "EF"
ecn = "ce"
"""


def load(tmp_path, text: str = SPEC, sets=()):
    path = tmp_path / "ecn.toml"
    path.write_text(text)
    return load_experiment(path, list(sets))


def error(tmp_path, text: str, sets=()) -> SpecError:
    with pytest.raises(SpecError) as info:
        load(tmp_path, text, sets)
    assert "\n" not in str(info.value)
    return info.value


# The spec ------------------------------------------------------------------------------------

def test_a_scalable_bulk_flow_asks_for_ect1_and_probes_for_any_codepoint(tmp_path):
    exp = load(tmp_path)
    by_name = {w.name: w for w in exp.workloads}
    assert isinstance(by_name["scalable"], Bulk) and by_name["scalable"].ecn == "ect1"
    assert by_name["classic"].ecn is None  # its congestion control's own
    assert isinstance(by_name["ping_l"], Ping) and by_name["ping_l"].ecn == "ect1"
    assert isinstance(by_name["probe"], Irtt) and (by_name["probe"].dscp, by_name["probe"].ecn) == (46, "ce")
    # Unsaid, a probe is Not-ECT, as ping and irtt send by default.
    assert load(tmp_path, SPEC.replace('ecn = "ect1"\n[[workloads]]\nkind = "irtt"', '[[workloads]]\nkind = "irtt"')
                ).workloads[2].ecn == "not-ect"
    # The spec's record gives it back.
    assert [w.get("ecn") for w in exp.to_dict()["workloads"]] == ["ect1", None, "ect1", "ce"]


@pytest.mark.parametrize("change, field, needle", [
    # Only a scalable congestion control's flow may carry the L4S identifier.
    (('cc = "dctcp"', 'cc = "cubic"'), "workloads[0].ecn", 'use cc = "dctcp"'),
    # A TCP flow's codepoint is its congestion control's: only ECT(1) can be asked for.
    (('ecn = "{l4s}"', 'ecn = "ect0"'), "workloads[0].ecn", 'write ecn = "ect1" (with cc = "dctcp")'),
    (('ecn = "{l4s}"', "ecn = 1"), "workloads[0].ecn", "leave ecn out"),
    (('ecn = "ce"', 'ecn = "ect2"'), "workloads[3].ecn", "not-ect, ect1, ect0, ce"),
    (('kind = "bulk"\nname = "classic"', 'kind = "udp"\nname = "classic"\nrate = "1mbit"\necn = "ect1"'),
     "workloads[1].ecn", "unknown key"),
])
def test_bad_ecn_options_name_their_field_and_the_fix(tmp_path, change, field, needle):
    e = error(tmp_path, SPEC.replace(*change))
    assert e.field == field and needle in e.message, e


def test_another_bulk_flow_on_a_marked_path_must_ask_for_ect1_too(tmp_path):
    # The datapath marks every TCP packet from h1 to h2: a second flow there would be marked
    # whatever its spec said.
    second = '\n[[workloads]]\nkind = "bulk"\nname = "second"\nfrom = "h1"\nto = "h2"\ncc = "dctcp"\n'
    e = error(tmp_path, SPEC + second)
    assert e.field == "workloads[4].ecn" and 'scalable has ecn = "ect1"' in e.message and "h1 to h2" in e.message
    assert load(tmp_path, SPEC + second + 'ecn = "ect1"\n').workloads[4].ecn == "ect1"
    # The other way (h2 to h1, the ACKs' way) is another path.
    assert load(tmp_path, SPEC + second.replace('from = "h1"\nto = "h2"', 'from = "h2"\nto = "h1"'))


def test_the_tos_byte_carries_the_dscp_and_the_ecn_bits():
    assert dscp.tos(0) == 0 and dscp.tos(46) == 0xB8
    assert [dscp.tos(0, name) for name in ("not-ect", "ect1", "ect0", "ce")] == [0, 1, 2, 3]
    assert dscp.tos(46, "ect1") == 0xB9


# Where ECT(1) is set -----------------------------------------------------------------------------

def test_a_flow_is_marked_on_the_direction_leaving_its_sender(tmp_path):
    exp = load(tmp_path)
    (flow,) = ect1_flows(list(exp.workloads))
    assert flow == Ect1Flow("h1", "h2", "workloads[0].ecn")
    assert exp.topology.first_hop("h1") == (0, "forward") and exp.topology.first_hop("h2") == (1, "reverse")
    assert ect1_directions(exp.topology, [flow]) == {"h1->s0": [flow]}
    # Sent by the host at a link's far end, it enters on the link's reverse direction.
    assert ect1_directions(exp.topology, [Ect1Flow("h2", "h1", "f")]) == {"h2->s0": [Ect1Flow("h2", "h1", "f")]}
    assert ect1_flows(list(load(tmp_path, sets=["l4s=ect1"]).workloads)) == [flow]


def test_the_first_hop_of_a_marked_flow_is_the_datapaths_and_a_kernel_link_there_is_refused(tmp_path):
    exp = load(tmp_path)
    first = exp.topology.links[0]
    flow = Ect1Flow("h1", "h2", "workloads[0].ecn")
    assert choose_backend(first, EVERY_QDISC) == "kernel"  # alone, the kernel would serve it
    assert choose_backend(first, EVERY_QDISC, 0, ect1=flow) == "userspace"
    with pytest.raises(SpecError) as info:
        choose_backend(dataclasses.replace(first, backend="kernel"), EVERY_QDISC, 0, ect1=flow)
    assert info.value.field == "workloads[0].ecn" and "\n" not in str(info.value)
    assert "kernel-backend link" in info.value.message and 'backend = "userspace"' in info.value.message


def test_a_sweep_gives_a_marked_flows_first_hop_to_the_datapath_at_every_point(tmp_path):
    path = tmp_path / "ecn.toml"
    path.write_text(SPEC.replace('delay = "10ms"\n', ""))  # no delay: the kernel could serve every link
    plan = plan_sweep(Source(path=path), [], [("l4s", ["ect1"])])
    _, chosen = one_backend_per_link(plan, EVERY_QDISC)
    assert chosen == {"h1-s0": "userspace", "s0-h2": "kernel", "h3-s0": "kernel"}


# What the run says ---------------------------------------------------------------------------------

def test_run_json_says_how_each_flow_gets_its_codepoint(tmp_path):
    exp = load(tmp_path)
    assert ecn_origins(exp) == {
        "scalable": "ect1 (set where it enters the datapath, on h1->s0; the kernel sends ect0)",
        "classic": "not-ect", "ping_l": "ect1 (ping -Q)", "probe": "ce (irtt --dscp)"}
    text = SPEC.replace('ecn = "{l4s}"\n', "")
    assert ecn_origins(load(tmp_path, text))["scalable"] == "ect0 (the kernel's)"
    record = RunRecord(exp, backends=["userspace"] * 3)
    doc = json.loads(json.dumps(run_document(record)))
    assert {name: flow["ecn"] for name, flow in doc["flows"].items()} == {
        "scalable": "ect1 (set where it enters the datapath, on h1->s0; the kernel sends ect0)",
        "classic": "not-ect", "probe": "ce (irtt --dscp)"}
    assert record_from_document(doc).experiment == exp  # the spec's ecn comes back


def test_ns3_sends_ect1_for_dctcp_itself_and_a_pings_codepoint_in_its_tos(tmp_path):
    text = SPEC.replace('[[workloads]]\nkind = "irtt"', '[[workloads]]\nenabled = false\nkind = "irtt"')
    exp = load(tmp_path, text, ["backend=ns3"])
    check_simulated(exp)  # ecn = "ect1" on the dctcp flow: what ns-3's TcpDctcp sends anyway
    assert ecn_origins(exp)["scalable"] == "ect1 (ns-3's TcpDctcp)"
    lines = scenario(exp, Path("/R"), {w.name: 5201 for w in exp.workloads}).splitlines()
    ping = next(line for line in lines if line.startswith("ping ping_l"))
    assert ping.endswith(f" tos={dscp.tos(0, 'ect1')}"), ping  # the L queue's: ECT(1)


def test_the_summary_gives_each_probed_queue_its_departures_by_codepoint(tmp_path):
    exp = load(tmp_path)
    direction = STATS["links"]["s0-h2"]["forward"]
    counts = {"not_ect": 120, "ect1": 9000, "ect0": 0, "ce": 700}
    stats = DirectionStats.from_json({**direction, "departures_by_ecn": counts})
    record = RunRecord(exp, backends=["userspace"] * 3, datapath_stats={"s0->h2": stats})
    queue = summary(record).to_dict()["queue"]
    assert list(queue) == ["s0->h2", "h2->s0"]  # the lowest rate's directions
    assert queue["s0->h2"]["departures_by_ecn"] == counts  # in the order of the bits
    assert list(queue["s0->h2"]["departures_by_ecn"]) == ["not_ect", "ect1", "ect0", "ce"]
    # A queue the datapath did not count (here h2->s0: a kernel link's) has no such counts.
    assert "departures_by_ecn" not in queue["h2->s0"]
    # The terminal's summary says it per queue.
    lines = dict(summary_lines(summary(record)))
    assert lines["queue s0->h2 sent, by ECN"] == "not-ect 120, ect1 9000, ect0 0, ce 700"
    assert "queue h2->s0 sent, by ECN" not in lines


def test_the_datapaths_counts_per_codepoint_are_read_back_as_written():
    for link in STATS["links"].values():
        for doc in link.values():
            stats = DirectionStats.from_json(doc)
            assert stats.to_dict() == doc
            assert stats.departures_by_ecn.total == sum(doc["departures_by_dscp"].values())  # IP frames, both
            assert stats.ect1_rewritten == 0
    assert EcnCounts(1, 2, 3, 4).by_codepoint() == {"not_ect": 1, "ect1": 2, "ect0": 3, "ce": 4}

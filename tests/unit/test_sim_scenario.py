"""The ns-3 scenario: what a spec becomes for the driver, and what ns-3 cannot model is refused
with the spec's field."""

from pathlib import Path

import pytest

from bloatlab.errors import SpecError
from bloatlab.sim.scenario import CONGESTION_CONTROLS, QUEUE_DISCS, check, ewma_weight, queue_attributes, scenario
from bloatlab.specs.disciplines import DualPi2Params
from bloatlab.specs.experiment import load_experiment, load_preset
from bloatlab.specs.model import DirectionSpec, QueueSpec


def ports(exp):
    return {w.name: 5201 + i for i, w in enumerate(exp.workloads)}


def test_cs244_becomes_nodes_links_and_its_three_workloads():
    exp = load_preset("cs244", ["maxq=100"], backend="ns3")
    assert exp.backend == "ns3" and exp.to_dict()["backend"] == "ns3"
    text = scenario(exp, Path("/R/raw"), ports(exp)).splitlines()
    assert text[1] == "run duration_ns=60000000000 seed=1 run=1"
    assert [line for line in text if line.startswith("node")] == ["node h1", "node h2", "node s0"]
    bottleneck = next(line for line in text if line.startswith("link s0-h2"))
    assert "f.rate_bps=10000000" in bottleneck and "f.q.MaxSize=100p" in bottleneck
    assert "f.delay_ns=5000000" in bottleneck.split() and "r.delay_ns=5000000" in bottleneck.split()
    assert "f.qlog=/R/raw/qlog/s0-h2.forward.qlog" in bottleneck and "r.qlog" not in bottleneck
    assert "bulk bulk h1 h2 start_ns=0 stop_ns=60000000000 cc=reno port=5201" in text
    assert "ping ping h1 h2 start_ns=0 stop_ns=60000000000 interval_ns=100000000 tos=0" in text
    web = next(line for line in text if line.startswith("web"))
    assert "every_ns=5000000000 count=3" in web and "size=180000" in web and "cc=reno" in web


@pytest.mark.parametrize("aqm, expected", [
    ("codel", {"MaxSize": "1000p", "Target": "5000000ns", "Interval": "100000000ns", "UseEcn": "false",
               "MinBytes": "1514"}),
    ("fq_codel", {"Flows": "1024", "DropBatchSize": "64", "UseEcn": "true"}),
    ("red", {"MinTh": "15", "MaxTh": "45", "LInterm": "10.0", "MeanPktSize": "1000", "LinkBandwidth": "10000000bps",
             "Gentle": "false", "UseHardDrop": "false"}),
    ("pie", {"QueueDelayReference": "15000000ns", "Tupdate": "15000000ns", "A": "0.125", "B": "1.25",
             "MaxBurstAllowance": "150000000ns"}),
])
def test_each_discipline_maps_to_its_queue_disc_attributes(aqm, expected):
    link = load_preset("aqm", [f"aqm={aqm}"]).topology.links[1]
    attrs = queue_attributes(link.forward, "x")
    assert {k: attrs[k] for k in expected} == expected


def test_red_takes_the_weight_tc_would_choose():
    # tc's rule: burst 13 over a minimum of 8 packets gives wlog 3 (datapath/core red.rs agrees).
    assert ewma_weight(8, 13) == 0.125
    attrs = queue_attributes(DirectionSpec(rate_bps=10**7, queue=QueueSpec("red", packets=100)), "x")
    assert float(attrs["QW"]) == ewma_weight(8, 13)


def test_dualpi2_maps_to_the_drivers_own_queue_disc():
    attrs = queue_attributes(DirectionSpec(rate_bps=50 * 10**6, queue=QueueSpec("dualpi2", packets=10000)), "x")
    # Linux's defaults, the gains in its 1/256 Hz steps; the memory limit left to the disc to
    # derive (10000 x 2 x 1514), as the core derives it.
    assert attrs == {"MaxSize": "10000p", "Target": "15000000ns", "Tupdate": "16000000ns", "Alpha": "0.16015625",
                     "Beta": "3.19921875", "StepThreshold": "1000000ns", "StepPackets": "0", "MinQlenStep": "0",
                     "CouplingFactor": "2", "ClassicProtection": "10", "EcnMask": "l4s_ect",
                     "DropOnOverload": "true", "DropEarly": "false", "Mtu": "1514"}
    assert QUEUE_DISCS["dualpi2"] == "bloatlab::DualPi2QueueDisc"
    given = DualPi2Params(step_packets=4, min_qlen_step=2, coupling_factor=3, classic_protection_percent=25,
                          ecn_mask="any_ect", drop_on_overload=False, drop_early=True, memory_limit_bytes=500000)
    attrs = queue_attributes(DirectionSpec(rate_bps=10**7, queue=QueueSpec("dualpi2", packets=None, bytes=300000, params=given)), "x")
    assert {k: attrs[k] for k in ("MaxSize", "StepPackets", "MinQlenStep", "CouplingFactor", "ClassicProtection",
                                  "EcnMask", "DropOnOverload", "DropEarly", "MemoryLimit")} == {
        "MaxSize": "300000B", "StepPackets": "4", "MinQlenStep": "2", "CouplingFactor": "3", "ClassicProtection": "25",
        "EcnMask": "any_ect", "DropOnOverload": "false", "DropEarly": "true", "MemoryLimit": "500000"}


L4S_SPEC = """
backend = "ns3"
duration = "10s"
[topology.hosts.h1]
[topology.hosts.h2]
[topology.hosts.h3]
[topology.switches.s0]
[[topology.links]]
ends = ["h1", "s0"]
rate = "1gbit"
delay = "5ms"
[[topology.links]]
ends = ["h2", "s0"]
rate = "1gbit"
delay = "5ms"
[[topology.links]]
ends = ["s0", "h3"]
rate = "50mbit"
delay = "5ms"
queue = { discipline = "dualpi2", packets = 10000 }
[[workloads]]
name = "classic"
kind = "bulk"
from = "h1"
to = "h3"
cc = "cubic"
[[workloads]]
name = "l4s"
kind = "bulk"
from = "h2"
to = "h3"
cc = "dctcp"
[probes]
queue = ["s0->h3"]
"""


def test_a_dualpi2_bottleneck_and_a_dctcp_flow_become_the_drivers_statements(tmp_path):
    path = tmp_path / "l4s.toml"
    path.write_text(L4S_SPEC)
    exp = load_experiment(path)
    text = scenario(exp, Path("/R/raw"), ports(exp)).splitlines()
    bottleneck = next(line for line in text if line.startswith("link s0-h3"))
    for option in ("f.name=s0->h3", "f.rate_bps=50000000", "f.discipline=dualpi2", "f.q.MaxSize=10000p",
                   "f.q.Target=15000000ns", "f.q.StepThreshold=1000000ns", "f.q.EcnMask=l4s_ect",
                   "f.q.CouplingFactor=2", "f.q.ClassicProtection=10", "f.qlog=/R/raw/qlog/s0-h3.forward.qlog",
                   "r.discipline=dualpi2"):
        assert option in bottleneck.split(), (option, bottleneck)
    assert "bulk classic h1 h3 start_ns=0 stop_ns=10000000000 cc=cubic port=5201" in text
    assert "bulk l4s h2 h3 start_ns=0 stop_ns=10000000000 cc=dctcp port=5202" in text
    assert "dctcp" in CONGESTION_CONTROLS


def test_l4s_gives_each_direction_its_own_delay_and_each_ping_its_codepoints():
    exp = load_preset("l4s", ["aqm=dualpi2", "rtt_classic=20ms", "rtt_scalable=8ms"], backend="ns3")
    check(exp)  # a base RTT on the way out only, and an ECT(1) ping: both modelled
    text = scenario(exp, Path("/R/raw"), ports(exp)).splitlines()
    links = {line.split()[1]: line.split() for line in text if line.startswith("link ")}
    assert {name: [o for o in opts if "delay_ns=" in o] for name, opts in links.items()} == {
        "c-s0": ["f.delay_ns=20000000", "r.delay_ns=0"], "l-s0": ["f.delay_ns=8000000", "r.delay_ns=0"],
        "s0-r": ["f.delay_ns=0", "r.delay_ns=0"]}
    pings = {line.split()[1]: line.split()[-1] for line in text if line.startswith("ping ")}
    assert pings == {"ping_classic": "tos=0", "ping_scalable": "tos=1"}  # Not-ECT; ECT(1), the L queue's


SPEC = """
duration = "10s"
[topology.hosts.h1]
[topology.hosts.h2]
[[topology.links]]
ends = ["h1", "h2"]
rate = "10mbit"
delay = "5ms"
[[workloads]]
kind = "bulk"
from = "h1"
to = "h2"
"""


@pytest.mark.parametrize("change, field", [
    (('rate = "10mbit"', 'rate = "10mbit"\nqueue = { discipline = "drophead", packets = 10 }'),
     "topology.links[0].forward.queue.discipline"),
    (('delay = "5ms"', 'delay = "5ms"\njitter = "1ms"'), "topology.links[0].forward.jitter"),
    (('to = "h2"', 'to = "h2"\ncc = "vegas"'), None),  # the spec refuses it before ns-3 is asked
    (('to = "h2"', 'to = "h2"\ndscp = "EF"'), "workloads[0].dscp"),
    # Its table's place: a disabled workload before it counts.
    (('[[workloads]]', '[[workloads]]\nkind = "ping"\nenabled = false\nfrom = "h1"\nto = "h2"\n[[workloads]]'
                       '\ndscp = "CS1"'), "workloads[1].dscp"),
    (('to = "h2"', 'to = "h2"\nbuffer = "1mb"'), "workloads[0].buffer"),
    (('kind = "bulk"', 'kind = "udp"\nrate = "1mbit"'), "workloads[0].kind"),
    (('to = "h2"\n', 'to = "h2"\n[probes]\npcap = ["h1->h2"]\n'), "probes.pcap"),
])
def test_what_ns3_cannot_model_is_named(tmp_path, change, field):
    old, new = change
    assert old in SPEC
    path = tmp_path / "exp.toml"
    path.write_text('backend = "ns3"\n' + SPEC.replace(old, new, 1))
    with pytest.raises(SpecError) as e:
        check(load_experiment(path))
    if field is not None:
        assert e.value.field == field, e.value.message


def test_a_pings_dscp_and_ecn_make_its_tos_byte(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_text('backend = "ns3"\n' + SPEC + '[[workloads]]\nkind = "ping"\nfrom = "h1"\nto = "h2"\n'
                    'dscp = "EF"\necn = "ect1"\n')
    exp = load_experiment(path)
    check(exp)
    ping = next(line for line in scenario(exp, Path("/R"), ports(exp)).splitlines() if line.startswith("ping "))
    assert ping.endswith(" tos=185"), ping  # 46 << 2 | 1


def test_a_spec_names_its_backend_and_the_cli_overrides_it(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_text('backend = "ns3"\n' + SPEC)
    assert load_experiment(path).backend == "ns3"
    assert load_experiment(path, backend="emulation").backend == "emulation"
    path.write_text('backend = "ns-3"\n' + SPEC)
    with pytest.raises(SpecError, match='"ns-3" is no backend; choose one of emulation, ns3') as e:
        load_experiment(path)
    assert e.value.field == "backend"

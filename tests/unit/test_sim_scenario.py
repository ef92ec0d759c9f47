"""The ns-3 scenario: what a spec becomes for the driver, and what ns-3 cannot model is refused
with the spec's field."""

from pathlib import Path

import pytest

from bloatlab.errors import SpecError
from bloatlab.sim.scenario import check, ewma_weight, queue_attributes, scenario
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
    assert "f.rate_bps=10000000" in bottleneck and "f.q.MaxSize=100p" in bottleneck and "delay_ns=5000000" in bottleneck
    assert "f.qlog=/R/raw/qlog/s0-h2.forward.qlog" in bottleneck and "r.qlog" not in bottleneck
    assert "bulk bulk h1 h2 start_ns=0 stop_ns=60000000000 cc=reno port=5201" in text
    assert "ping ping h1 h2 start_ns=0 stop_ns=60000000000 interval_ns=100000000" in text
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
    (('delay = "5ms"', 'forward = { delay = "5ms" }\nreverse = { delay = "6ms" }'), "topology.links[0].reverse.delay"),
    (('to = "h2"', 'to = "h2"\ncc = "vegas"'), None),  # the spec refuses it before ns-3 is asked
    (('to = "h2"', 'to = "h2"\ndscp = "EF"'), "workloads[0].dscp"),
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


def test_a_spec_names_its_backend_and_the_cli_overrides_it(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_text('backend = "ns3"\n' + SPEC)
    assert load_experiment(path).backend == "ns3"
    assert load_experiment(path, backend="emulation").backend == "emulation"
    path.write_text('backend = "ns-3"\n' + SPEC)
    with pytest.raises(SpecError, match='"ns-3" is no backend; choose one of emulation, ns3') as e:
        load_experiment(path)
    assert e.value.field == "backend"

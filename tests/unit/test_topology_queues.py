"""Queue disciplines in a topology: each discipline's parameters parse to exact datapath values
with their defaults, QueueSpec.to_dict is the datapath's "queue" object, and every rule rejects
its bad input with a one-line error on the right field."""

import json
import re
from pathlib import Path

import pytest

from bloatlab.errors import SpecError
from bloatlab.specs.disciplines import (CATALOGUE, DISCIPLINES, CakeParams, CoDelParams, FifoParams, FqCoDelParams,
                                       PieParams, RedParams)
from bloatlab.specs.model import QueueSpec
from bloatlab.specs.topology import parse_topology

DOCS = Path(__file__).resolve().parents[2] / "docs" / "queues.md"


def topology(queue: object, rate: str | None = None):
    link = {"ends": ["h1", "h2"], "queue": queue}
    if rate is not None:
        link["rate"] = rate
    return parse_topology({"hosts": {"h1": {}, "h2": {}}, "links": [link]}, where="topology")


def queue_of(queue: object, rate: str | None = None) -> QueueSpec:
    return topology(queue, rate).links[0].forward.queue


def rejects(queue: object, key: str, *fragments: str) -> SpecError:
    with pytest.raises(SpecError) as caught:
        queue_of(queue)
    error = caught.value
    field = "topology.links[0].queue" + (f".{key}" if key else "")
    assert error.field == field, str(error)
    assert "\n" not in str(error)
    for fragment in fragments:
        assert fragment in error.message, str(error)
    return error


# ---------------------------------------------------------------- defaults and aliases


@pytest.mark.parametrize(("discipline", "packets"), [
    ("droptail", 1000), ("drophead", 1000), ("codel", 1000), ("fq_codel", 10240), ("red", 1000), ("pie", 1000),
    ("cake", 10240),
])
def test_default_limit_is_the_disciplines(discipline, packets):
    assert queue_of({"discipline": discipline}) == QueueSpec(discipline, packets, None)


def test_taildrop_is_droptail():
    assert queue_of({"discipline": "taildrop", "packets": 5}) == QueueSpec("droptail", 5, None)
    assert queue_of({"discipline": "taildrop"}).to_dict()["discipline"] == "droptail"


def test_a_byte_limit_replaces_the_default_packet_limit():
    assert queue_of({"discipline": "fq_codel", "bytes": "1mb"}) == QueueSpec("fq_codel", None, 10**6)


def test_every_settable_parameter_is_documented():
    docs = DOCS.read_text()
    for discipline in DISCIPLINES:
        section = docs.split(f"\n## {discipline}")[1].split("\n## ")[0] if discipline not in (
            "droptail", "drophead") else docs.split("\n## droptail and drophead")[1].split("\n## ")[0]
        for param in CATALOGUE[discipline].settable:
            assert f"| `{param.key}` |" in section, (discipline, param.key)
        assert docs.count(f"`{discipline}`") >= 1


# ---------------------------------------------------------------- each discipline's parameters


def test_codel_params():
    q = queue_of({"discipline": "codel", "packets": 500, "target": "2.5ms", "interval": "50ms", "ecn": True})
    assert q == QueueSpec("codel", 500, None, CoDelParams(target_ns=2_500_000, interval_ns=50_000_000, ecn=True))


def test_fq_codel_params():
    q = queue_of({"discipline": "fq_codel", "target": "5ms", "interval": "100ms", "ecn": False, "flows": 16,
                  "quantum": "300b", "memory_limit": "4mib", "drop_batch": 1})
    assert q.params == FqCoDelParams(target_ns=5_000_000, interval_ns=100_000_000, ecn=False, flows=16,
                                     quantum_bytes=300, memory_limit_bytes=4 * 2**20, drop_batch=1)
    assert queue_of({"discipline": "fq_codel", "flows": 65536, "drop_batch": 1024, "quantum": 1514}).params == (
        FqCoDelParams(flows=65536, drop_batch=1024, quantum_bytes=1514))


def test_red_params_in_packets():
    q = queue_of({"discipline": "red", "packets": 200, "min": 20, "max": 60, "avpkt": "1500b", "burst": 30,
                  "probability": 0.1, "bandwidth": "20mbit", "ecn": True, "harddrop": True, "adaptive": True,
                  "gentle": True})
    assert q == QueueSpec("red", 200, None, RedParams(
        min=20, max=60, avpkt_bytes=1500, burst_pkts=30, probability=0.1,
        bandwidth_bps=20_000_000, ecn=True, harddrop=True, adaptive=True, gentle=True))


def test_red_thresholds_in_bytes_are_sizes():
    q = queue_of({"discipline": "red", "bytes": "150kb", "min": "15kb", "max": 45000, "probability": "2%"})
    assert q == QueueSpec("red", None, 150_000, RedParams(min=15_000, max=45_000, probability=0.02))
    assert queue_of({"discipline": "red", "probability": "100%"}).params == RedParams(probability=1.0)
    assert queue_of({"discipline": "red", "probability": 1}).params == RedParams(probability=1.0)


def test_pie_params():
    q = queue_of({"discipline": "pie", "target": "20ms", "tupdate": "30ms", "alpha": 0.25, "beta": 2,
                  "max_burst": "100ms", "ecn": True, "ecn_prob": "20%", "bytemode": True,
                  "dq_rate_estimator": True})
    assert q.params == PieParams(target_ns=20_000_000, tupdate_ns=30_000_000, alpha=0.25, beta=2.0,
                                 max_burst_ns=100_000_000, ecn=True, ecn_prob=0.2, bytemode=True,
                                 dq_rate_estimator=True)
    assert isinstance(q.params.beta, float)
    assert queue_of({"discipline": "pie", "alpha": 0, "ecn_prob": 0}).params == PieParams(alpha=0.0, ecn_prob=0.0)
    assert queue_of({"discipline": "pie", "ecn_prob": 1}).params == PieParams(ecn_prob=1.0)


# ---------------------------------------------------------------- the datapath's "queue" object


@pytest.mark.parametrize(("queue", "expected"), [
    ({"discipline": "droptail"}, {"discipline": "droptail", "packets": 1000, "bytes": None}),
    ({"discipline": "drophead", "bytes": 3000}, {"discipline": "drophead", "packets": None, "bytes": 3000}),
    ({"discipline": "codel", "target": "5ms", "ecn": True},
     {"discipline": "codel", "packets": 1000, "bytes": None, "target_ns": 5_000_000, "ecn": True}),
    ({"discipline": "fq_codel", "quantum": "300b", "memory_limit": "32mib"},
     {"discipline": "fq_codel", "packets": 10240, "bytes": None, "quantum_bytes": 300,
      "memory_limit_bytes": 33_554_432}),
    ({"discipline": "red", "bytes": "150kb", "max": "45kb", "bandwidth": "10mbit", "gentle": True},
     {"discipline": "red", "packets": None, "bytes": 150_000, "max": 45_000, "bandwidth_bps": 10_000_000,
      "gentle": True}),
    ({"discipline": "pie", "packets": 100, "alpha": 0.125, "tupdate": "30ms"},
     {"discipline": "pie", "packets": 100, "bytes": None, "tupdate_ns": 30_000_000, "alpha": 0.125}),
])
def test_to_dict_is_limit_and_what_the_spec_set(queue, expected):
    q = queue_of(queue)
    assert q.to_dict() == expected
    assert json.loads(json.dumps(q.to_dict())) == expected  # JSON-ready
    assert QueueSpec.from_dict(q.to_dict()) == q


def test_direction_to_dict_carries_the_queue():
    topo = topology({"discipline": "codel", "interval": "200ms"}, rate="10mbit")
    assert topo.to_dict()["links"][0]["forward"]["queue"] == {
        "discipline": "codel", "packets": 1000, "bytes": None, "interval_ns": 200_000_000}


def test_queue_params_do_not_break_hashing():
    assert len({QueueSpec("codel", 10, None, CoDelParams(ecn=True)), QueueSpec("codel", 10, None)}) == 2
    assert QueueSpec("codel", 10, None, CoDelParams(ecn=True)) != QueueSpec("codel", 10, None, CoDelParams())


# ---------------------------------------------------------------- resolved parameters


def test_resolved_codel_fq_codel_and_pie_are_the_defaults_under_what_was_set():
    assert queue_of({"discipline": "codel", "ecn": True}).resolved(None) == CoDelParams(
        target_ns=5_000_000, interval_ns=100_000_000, ecn=True, coarse_time=False, mtu_bytes=1514)
    assert queue_of({"discipline": "fq_codel"}).resolved(None) == FqCoDelParams(
        target_ns=5_000_000, interval_ns=100_000_000, ecn=True, coarse_time=False, flows=1024, quantum_bytes=1514,
        memory_limit_bytes=32 * 2**20, drop_batch=64, mtu_bytes=1514)
    assert queue_of({"discipline": "pie"}).resolved(None) == PieParams(
        target_ns=15_000_000, tupdate_ns=15_000_000, alpha=0.125, beta=1.25,
        max_burst_ns=150_000_000, ecn=False, ecn_prob=0.1, bytemode=False, dq_rate_estimator=False,
        ns3=False, mtu_bytes=1514)
    assert queue_of({"discipline": "droptail"}).resolved(None) == FifoParams()


def test_resolved_red_in_packets_uses_tcs_formulas():
    # max = 1000 / 4 = 250, min = 250 / 3 = 83, burst = (2 * 83 + 250) / 3 = 138 (avpkt cancels out)
    assert queue_of({"discipline": "red"}).resolved(20_000_000) == RedParams(
        min=83, max=250, avpkt_bytes=1000, burst_pkts=138, probability=0.02,
        bandwidth_bps=20_000_000, ecn=False, harddrop=False, adaptive=False, gentle=False,
        ns3=False)


def test_resolved_red_in_bytes_uses_tcs_formulas():
    # max = 150000 / 4 = 37500, min = 12500, burst = (25000 + 37500) / 3000 = 20; no rate: 10 Mbit/s
    params = queue_of({"discipline": "red", "bytes": 150_000}).resolved(None)
    assert (params.min, params.max, params.burst_pkts, params.bandwidth_bps) == (
        12_500, 37_500, 20, 10_000_000)
    # a given max sets the default min; a given min is kept; burst is never below 1
    params = queue_of({"discipline": "red", "bytes": 150_000, "max": 9000, "avpkt": 6000}).resolved(None)
    assert (params.min, params.max, params.burst_pkts) == (3000, 9000, 1)
    params = queue_of({"discipline": "red", "packets": 100, "min": 5, "burst": 7}).resolved(None)
    assert (params.min, params.max, params.burst_pkts) == (5, 25, 7)


def test_red_bandwidth_given_beats_the_rate():
    q = queue_of({"discipline": "red", "bandwidth": "1mbit"})
    assert q.resolved(50_000_000).bandwidth_bps == 1_000_000


# ---------------------------------------------------------------- rejections


def test_a_parameter_of_another_discipline_names_the_disciplines_keys():
    error = rejects({"target": "5ms"}, "target")
    assert error.message.startswith("droptail has no target; its keys are: discipline, packets, bytes")
    assert "codel, fq_codel, pie" in error.message
    rejects({"discipline": "codel", "flows": 4}, "flows",
            "codel has no flows; its keys are: discipline, packets, bytes, target, interval, ecn")
    rejects({"discipline": "red", "target": "5ms"}, "target", "red has no target",
            "min, max, avpkt, burst, probability, bandwidth, ecn, harddrop, adaptive, gentle")
    rejects({"discipline": "pie", "interval": "5ms"}, "interval", "pie has no interval",
            "target, tupdate, alpha, beta, max_burst, ecn, ecn_prob, bytemode, dq_rate_estimator")


def test_unknown_key_lists_the_allowed_ones():
    rejects({"discipline": "fq_codel", "flow": 4}, "flow", 'unknown key "flow" in a fq_codel queue',
            'did you mean "flows"', "quantum, memory_limit, drop_batch")
    rejects({"discipline": "fq-codel"}, "discipline", 'did you mean "fq_codel"')
    rejects({"discipline": 7}, "discipline", "not a queue discipline")


@pytest.mark.parametrize(("queue", "key", "fragment"), [
    # durations: strict units, above zero, at most 10 s
    ({"discipline": "codel", "target": 5}, "target", "has no unit"),
    ({"discipline": "codel", "target": "5"}, "target", "has no unit"),
    ({"discipline": "codel", "target": "0ms"}, "target", "longer than zero"),
    ({"discipline": "codel", "interval": "-1ms"}, "interval", "negative"),
    ({"discipline": "codel", "interval": "5 ms"}, "interval", '"5ms"'),
    ({"discipline": "codel", "interval": "11s"}, "interval", "at most"),
    ({"discipline": "pie", "tupdate": "5msec"}, "tupdate", '"5ms"'),
    ({"discipline": "pie", "max_burst": "0s"}, "max_burst", "longer than zero"),
    # booleans are TOML booleans
    ({"discipline": "codel", "ecn": "yes"}, "ecn", "true or false"),
    ({"discipline": "red", "gentle": 1}, "gentle", "true or false"),
    ({"discipline": "pie", "dq_rate_estimator": "true"}, "dq_rate_estimator", "true or false"),
    # counts
    ({"discipline": "fq_codel", "flows": 0}, "flows", "from 1 to 65536"),
    ({"discipline": "fq_codel", "flows": 65537}, "flows", "from 1 to 65536"),
    ({"discipline": "fq_codel", "flows": 2.0}, "flows", "whole number"),
    ({"discipline": "fq_codel", "drop_batch": 1025}, "drop_batch", "from 1 to 1024"),
    ({"discipline": "fq_codel", "drop_batch": True}, "drop_batch", "whole number"),
    ({"discipline": "red", "burst": 0}, "burst", "whole number from 1"),
    # sizes
    ({"discipline": "fq_codel", "quantum": 0}, "quantum", "positive"),
    ({"discipline": "fq_codel", "quantum": "1514"}, "quantum", "has no unit"),
    ({"discipline": "fq_codel", "memory_limit": "-1mb"}, "memory_limit", "negative"),
    ({"discipline": "fq_codel", "memory_limit": "2gib"}, "memory_limit", "1 GiB"),
    ({"discipline": "red", "avpkt": "1.5b"}, "avpkt", "whole number of bytes"),
    # rates
    ({"discipline": "red", "bandwidth": "10mbps"}, "bandwidth", "bytes per second"),
    ({"discipline": "red", "bandwidth": "unlimited"}, "bandwidth", "leave bandwidth out"),
    # probabilities and ratios
    ({"discipline": "red", "probability": 0}, "probability", "not above 0"),
    ({"discipline": "red", "probability": "0%"}, "probability", "not above 0"),
    ({"discipline": "red", "probability": 1.5}, "probability", "from 0 to 1"),
    ({"discipline": "red", "probability": "150%"}, "probability", "over 100%"),
    ({"discipline": "red", "probability": "2 %"}, "probability", 'write "2%"'),
    ({"discipline": "red", "probability": "0.02"}, "probability", "not a probability"),
    ({"discipline": "pie", "ecn_prob": -0.1}, "ecn_prob", "from 0 to 1"),
    ({"discipline": "pie", "ecn_prob": True}, "ecn_prob", "not a probability"),
    ({"discipline": "pie", "alpha": -0.125}, "alpha", ">= 0"),
    ({"discipline": "pie", "beta": "1.25"}, "beta", ">= 0"),
    ({"discipline": "pie", "beta": float("inf")}, "beta", ">= 0"),
    # RED's thresholds count what the limit counts
    ({"discipline": "red", "min": "10kb"}, "min", "counts packets"),
    ({"discipline": "red", "max": 2.5}, "max", "not a packet count"),
    ({"discipline": "red", "bytes": "150kb", "min": "10 kb"}, "min", '"10kb"'),
    ({"discipline": "red", "bytes": "150kb", "max": 0}, "max", "positive"),
    # cake's choices and signed overhead
    ({"discipline": "cake", "diffserv": "difserv4"}, "diffserv", 'did you mean "diffserv4"'),
    ({"discipline": "cake", "flow_mode": "triple"}, "flow_mode", "triple-isolate"),
    ({"discipline": "cake", "framing": 1}, "framing", "choose one of: none, atm, ptm"),
    ({"discipline": "cake", "overhead": -65}, "overhead", "from -64 to 256"),
    ({"discipline": "cake", "mpu": 257}, "mpu", "from 0 to 256"),
])
def test_bad_parameter_values(queue, key, fragment):
    rejects(queue, key, fragment)


def test_codel_target_must_be_below_interval():
    error = rejects({"discipline": "codel", "target": "200ms"}, "target")
    assert error.message.startswith("target (200ms) must be below interval (100ms, the default)")
    rejects({"discipline": "fq_codel", "interval": "4ms"}, "interval",
            "target (5ms, the default) must be below interval (4ms)")
    rejects({"discipline": "codel", "target": "10ms", "interval": "10ms"}, "target",
            "target (10ms) must be below interval (10ms)")
    assert queue_of({"discipline": "codel", "target": "99ms"}).params == CoDelParams(target_ns=99_000_000)


def test_red_threshold_rules():
    rejects({"discipline": "red", "min": 300}, "min",
            "min (300 packets) must be below max (250 packets, the default, limit / 4)")
    rejects({"discipline": "red", "min": 50, "max": 50}, "min", "min (50 packets) must be below max (50 packets)")
    rejects({"discipline": "red", "max": 1001}, "max",
            "max (1001 packets) must be at most the queue limit (1000 packets)")
    rejects({"discipline": "red", "bytes": 10_000, "max": "20kb"}, "max", "at most the queue limit (10000 bytes)")
    rejects({"discipline": "red", "packets": 100, "max": 2}, "max", "min defaults to max / 3, which is 0 packets")
    rejects({"discipline": "red", "packets": 8}, "packets", "which is 0 packets", "set min and max")
    rejects({"discipline": "red", "packets": 8, "min": 2}, "min",
            "min (2 packets) must be below max (2 packets, the default, limit / 4)")
    assert queue_of({"discipline": "red", "packets": 8, "min": 1}).params == RedParams(min=1)


def test_limit_rules_hold_for_every_discipline():
    for discipline in DISCIPLINES:
        rejects({"discipline": discipline, "packets": 0}, "packets", "from 1 to 1000000")
        rejects({"discipline": discipline, "packets": 1, "bytes": 3000}, "bytes", "either packets or bytes")
        rejects({"discipline": discipline, "bytes": 1000}, "bytes", "1514")


def test_errors_are_one_line_and_name_the_field_in_the_file(tmp_path):
    from bloatlab.specs.topology import load_topology

    path = tmp_path / "t.toml"
    path.write_text('[hosts.h1]\n[hosts.h2]\n[[links]]\nends = ["h1", "h2"]\n'
                    'reverse = { queue = { discipline = "pie", alpha = "fast" } }\n')
    with pytest.raises(SpecError) as caught:
        load_topology(path)
    assert caught.value.field == "links[0].reverse.queue.alpha"
    assert re.fullmatch(r"[^\n]+", str(caught.value))


def test_cake_params_and_its_bandwidth_from_the_link():
    q = queue_of({"discipline": "cake", "diffserv": "diffserv4", "flow_mode": "dual-srchost", "overhead": -4,
                  "framing": "ptm", "wash": True})
    assert q.params == CakeParams(diffserv="diffserv4", flow_mode="dual-srchost", overhead_bytes=-4, framing="ptm",
                                  wash=True)
    assert q.resolved(10_000_000).bandwidth_bps == 10_000_000  # the line's rate, as SQM sets it
    assert q.resolved(None).bandwidth_bps is None  # no rate: unlimited
    unlimited = queue_of({"discipline": "cake", "bandwidth": "unlimited"})
    assert unlimited.resolved(10_000_000).bandwidth_bps == 0  # asked for: the link paces
    assert queue_of({"discipline": "cake", "bandwidth": "8mbit"}).resolved(10_000_000).bandwidth_bps == 8_000_000

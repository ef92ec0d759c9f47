"""The responsiveness test's arithmetic (draft-ietf-ippm-responsiveness-08), its spec, and the
grade both it and RRUL report."""

import pytest

from bloatlab.errors import SpecError
from bloatlab.experiment.record import Collected, ResponsivenessResult, RunRecord, flow_from_json
from bloatlab.experiment.responsiveness import method as m
from bloatlab.results.stats import grade
from bloatlab.results.writer import summary
from bloatlab.specs.experiment import load_preset


def test_the_trimmed_mean_drops_the_worst_five_percent():
    assert m.trimmed_mean([]) is None
    assert m.trimmed_mean([10.0]) == 10.0
    values = [10.0] * 19 + [1000.0]  # 95% of 20 is 19: the outlier goes
    assert m.trimmed_mean(values) == 10.0
    assert m.trimmed_mean([1.0, 2.0, 3.0, 4.0]) == pytest.approx(2.5)  # ceil(3.8) = 4 kept


def test_rpm_is_the_mean_of_foreign_and_loaded_responsiveness():
    # Droptail, 100 packets at 10 Mbit/s: every probe waits about 141 ms.
    got = m.rpm(tcp_f=141.0, tls_f=141.0, http_f=141.0, http_l=141.0)
    assert got["rpm"] == pytest.approx(60000 / 141)
    got = m.rpm(tcp_f=20.0, tls_f=25.0, http_f=30.0, http_l=50.0)
    assert got["foreign_rpm"] == pytest.approx(60000 / 25)
    assert got["loaded_rpm"] == pytest.approx(1200)
    assert got["rpm"] == pytest.approx((2400 + 1200) / 2)
    # Without TLS the foreign figure is the mean of TCP and HTTP: a zero would flatter it.
    assert m.rpm(tcp_f=20.0, tls_f=None, http_f=40.0, http_l=30.0)["foreign_rpm"] == pytest.approx(2000)
    assert m.rpm(None, None, None, 30.0) == {"rpm": None, "foreign_rpm": None, "loaded_rpm": 2000}


def test_stability_needs_mad_values_within_the_tolerance():
    assert not m.stable([100.0, 100.0, 100.0])  # fewer than MAD
    assert m.stable([50.0, 100.0, 101.0, 99.0, 100.0])
    assert not m.stable([60.0, 80.0, 100.0, 120.0])  # still climbing
    assert not m.stable([0.0, 0.0, 0.0, 0.0])


def test_confidence_bands_and_probe_rate():
    assert m.confidence(2, False) == "low"
    assert m.confidence(4, False) == "medium"
    assert m.confidence(1, True) == "high"
    assert [m.band(x) for x in (None, 120, 425, 2400, 7000)] == [None, "poor", "fair", "good", "excellent"]
    assert m.probe_rate(0) == 1.0
    assert m.probe_rate(10e6) == pytest.approx(10e6 / 8 * 0.05 / m.PROBE_PAIR_BYTES)
    assert m.probe_rate(10e9) == m.MPS


@pytest.mark.parametrize("increase, letter", [(None, None), (0.0, "A+"), (4.9, "A+"), (5.0, "A"), (29.9, "A"),
                                              (59.0, "B"), (199.0, "C"), (399.0, "D"), (400.0, "F"), (-3.0, "A+")])
def test_the_grade_follows_the_dslreports_bounds(increase, letter):
    assert grade(increase) == letter


def test_the_responsiveness_preset_and_its_checks():
    test = load_preset("responsiveness", ["direction=both", "cc=reno"]).workloads[0]
    assert (test.server, test.client, test.direction, test.cc) == ("h2", "h1", "both", "reno")
    with pytest.raises(SpecError) as e:
        load_preset("responsiveness", ["duration=5s"])
    assert e.value.field == "workloads[0].stop"
    with pytest.raises(SpecError) as e:
        load_preset("responsiveness", ["direction=sideways"])
    assert e.value.field == "--set direction"


def test_a_responsiveness_summary_grades_its_own_idle_and_loaded_latency():
    record = RunRecord(load_preset("responsiveness"))
    test = {"rpm": 400.0, "idle_latency_ms": 20.0, "confidence": "high"}
    record.collected = Collected(responsiveness=ResponsivenessResult.from_json(test))
    written = summary(record)
    assert written.responsiveness.rpm == 400.0 and written.to_dict()["responsiveness"] == test
    assert written.bufferbloat.loaded_ms == pytest.approx(150.0)
    assert written.bufferbloat.increase_ms == pytest.approx(130.0)
    assert written.bufferbloat.grade == "C"


def test_rrul_grades_the_probes_under_load_against_before_it():
    experiment = load_preset("rrul", ["duration=12s", "idle=2s"])
    record = RunRecord(experiment)
    # Idle before 2 s, loaded from 3 s (a second to settle) to 10 s, idle again after.
    rows = [(0.5, "icmp", 20.0), (1.5, "udp_ef", 22.0), (2.5, "icmp", 90.0), (4.0, "icmp", 120.0),
            (9.0, "udp_be", 140.0), (11.0, "icmp", 21.0)]
    record.collected = Collected(ping=rows, flows={name: flow_from_json(f) for name, f in {
        "up_be": {"kind": "bulk", "src": "h1", "dst": "h2", "goodput_mbps": 2.0},
        "up_ef": {"kind": "bulk", "src": "h1", "dst": "h2", "goodput_mbps": 3.0},
        "down_be": {"kind": "bulk", "src": "h2", "dst": "h1", "goodput_mbps": 4.5},
        "udp_ef": {"kind": "irtt", "src": "h1", "dst": "h2"}}.items()})
    written = summary(record)
    assert written.bufferbloat.idle_ms == pytest.approx(21.0)
    assert written.bufferbloat.loaded_ms == pytest.approx(130.0)
    assert written.bufferbloat.grade == "C"
    assert written.totals_mbps == {"h1->h2": pytest.approx(5.0), "h2->h1": pytest.approx(4.5)}

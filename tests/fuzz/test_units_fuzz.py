"""Fuzz targets: the units a spec is written in (specs/units.py: rates, durations, sizes,
percentages), the other scalar readers every table uses (probabilities, DSCP and ECN names,
disciplines, congestion controls), and the Mahimahi traces a user gives (specs/topology.py's
check_trace, lab/replay.py's trace_mean_bps)."""

import math
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from bloatlab.errors import SpecError
from bloatlab.lab.replay import trace_mean_bps
from bloatlab.specs.dscp import parse_dscp, parse_ecn
from bloatlab.specs.queues import parse_discipline, parse_probability
from bloatlab.specs.reading import congestion_control
from bloatlab.specs.topology import check_trace
from bloatlab.specs.units import (MAX_RATE_BPS, MIN_RATE_BPS, format_duration_ns, format_rate, parse_duration_ns,
                                  parse_percent, parse_rate, parse_size_bytes)

from fuzzkit import budget, contract, mutated_text, one_line, scalars, unit_text, values

PARSERS = {
    "rate": parse_rate,
    "duration": parse_duration_ns,
    "duration>0": lambda v, f: parse_duration_ns(v, f, allow_zero=False),
    "percent": parse_percent,
    "size": parse_size_bytes,
    "probability": parse_probability,
    "dscp": parse_dscp,
    "ecn": parse_ecn,
    "discipline": parse_discipline,
    "cc": congestion_control,
}


@budget(250)
@given(value=st.one_of(unit_text(), scalars(), values()), which=st.sampled_from(sorted(PARSERS)))
def test_unit_parsers_give_a_value_or_a_one_line_error(value, which):
    result = contract(lambda: PARSERS[which](value, "links[0].rate"))
    if result is None:
        return
    # What a valid value reads as: in its unit, within its bounds.
    if which == "rate":
        assert MIN_RATE_BPS <= result <= MAX_RATE_BPS and isinstance(result, int)
    elif which.startswith("duration"):
        assert isinstance(result, int) and result >= (1 if which == "duration>0" else 0)
    elif which == "percent":
        assert 0.0 <= result < 1.0
    elif which == "size":
        assert isinstance(result, int) and result > 0
    elif which == "probability":
        assert 0.0 <= result <= 1.0
    elif which == "dscp":
        assert 0 <= result <= 63


def _spec_form(formatted: str) -> str:
    """"1.5 Mbit/s" -> "1.5mbit", "200 us" -> "200us": what format_* prints, as a spec writes it."""
    return formatted.replace(" ", "").replace("/s", "").lower()


@budget(150)
@given(bps=st.integers(MIN_RATE_BPS, MAX_RATE_BPS), ns=st.integers(0, 10**15),
       digits=st.decimals(min_value=Decimal("0.001"), max_value=Decimal("400000"), places=3),
       unit=st.sampled_from(["bit", "kbit", "mbit", "gbit"]))
def test_units_round_trip(bps, ns, digits, unit):
    # Formatted for a person, then written back into a spec: the same value, to the bit and nanosecond.
    assert parse_rate(_spec_form(format_rate(bps)), "rate") == bps
    assert parse_duration_ns(_spec_form(format_duration_ns(ns)), "delay") == ns
    assert parse_size_bytes(f"{ns + 1}b", "size") == ns + 1
    # Decimal arithmetic: "1.5mbit" is exactly 1_500_000, rounded half up to the bit.
    scale = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}[unit]
    exact = int((digits * scale).to_integral_value(rounding="ROUND_HALF_UP"))
    got = contract(lambda: parse_rate(f"{digits}{unit}", "rate"))
    assert got == (exact if MIN_RATE_BPS <= exact <= MAX_RATE_BPS else None)
    assert parse_percent(f"{digits / 10000:f}%", "loss") == float(digits / 10000 / 100)


def _trace_text(times: list[int]) -> str:
    return "".join(f"{t}\n" for t in times)


@st.composite
def traces(draw) -> bytes:
    """A Mahimahi trace: well formed (non-decreasing milliseconds), then often mutated, or any bytes."""
    steps = draw(st.lists(st.integers(0, 30), min_size=1, max_size=60))
    times = [sum(steps[:i + 1]) for i in range(len(steps))]
    text = _trace_text(times)
    how = draw(st.integers(0, 3))
    if how == 0:
        return text.encode()
    if how == 3:
        return draw(st.binary(max_size=64))
    return draw(mutated_text(text)).encode("utf-8", "surrogatepass")


@budget(120)
@given(data=traces())
def test_traces_are_read_or_refused_in_one_line(data, tmp_path):
    path = tmp_path / "trace.up"
    path.write_bytes(data)
    try:
        check_trace(path, "links[0].trace")
    except SpecError as error:
        one_line(error)
        return
    # A trace check_trace takes, the replay can load: a finite positive mean rate.
    mean = trace_mean_bps(path)
    assert math.isfinite(mean) and mean > 0



# Found by fuzzing: each defect's smallest input, as a plain test ------------------------------

def test_a_trace_timestamp_too_large_is_refused_in_one_line(tmp_path):
    # int() of a 5000-digit line raised ValueError; a 400-digit one passed, and trace_mean_bps
    # then raised OverflowError dividing by it.
    path = tmp_path / "trace.up"
    for line in ("1" * 5000, "9" * 400, str(2**64)):
        path.write_text(f"1\n{line}\n")
        try:
            check_trace(path, "links[0].trace")
        except SpecError as error:
            one_line(error)
            assert "too large" in error.message
        else:
            raise AssertionError(f"{line[:20]}... was taken")
    path.write_text("0" * 5000 + "7\n")  # leading zeros: seven milliseconds
    check_trace(path, "links[0].trace")
    assert trace_mean_bps(path) == 1504 * 8 / 0.007

"""Unit parsers: exact values for the good forms, a SpecError naming the field for each bad one."""

import pytest

from bloatlab.errors import SpecError
from bloatlab.specs.units import format_duration_ns, format_rate, parse_duration_ns, parse_percent, parse_rate, parse_size_bytes

FIELD = "links[1].rate"


def rejects(parse, value, *fragments, **kwargs):
    """Assert `parse` rejects `value` with a one-line error on FIELD mentioning each fragment."""
    with pytest.raises(SpecError) as caught:
        parse(value, FIELD, **kwargs)
    error = caught.value
    assert error.field == FIELD
    assert "\n" not in str(error)
    assert str(error).startswith(f"{FIELD}: ")
    for fragment in fragments:
        assert fragment in error.message
    return error


# ---------------------------------------------------------------- rates


@pytest.mark.parametrize(
    ("text", "bps"),
    [
        ("10mbit", 10_000_000),
        ("1.5mbit", 1_500_000),
        ("100kbit", 100_000),
        ("1gbit", 1_000_000_000),
        ("0.4tbit", 400_000_000_000),
        ("400gbit", 400_000_000_000),
        ("10kbit", 10_000),
        ("10000bit", 10_000),
        ("12345bit", 12_345),
        ("10MBIT", 10_000_000),
        ("2.5Gbit", 2_500_000_000),
        ("0.0000001tbit", 100_000),
        ("10.0000004kbit", 10_000),  # rounded to whole bit/s
    ],
)
def test_rate_accepts(text, bps):
    assert parse_rate(text, FIELD) == bps


@pytest.mark.parametrize("text", ["unlimited", "UNLIMITED", "Unlimited"])
def test_rate_unlimited_is_none(text):
    assert parse_rate(text, FIELD) is None


@pytest.mark.parametrize(
    ("text", "suggestion"),
    [
        ("10Mbps", '"10mbit"'),
        ("10mbps", '"10mbit"'),
        ("500kbps", '"500kbit"'),
        ("1gbps", '"1gbit"'),
        ("9000bps", '"9000bit"'),
    ],
)
def test_rate_rejects_bps_because_tc_reads_bytes(text, suggestion):
    rejects(parse_rate, text, "bytes per second", suggestion)


def test_rate_rejects_bit_per_second_spelling():
    rejects(parse_rate, "10mbit/s", 'write "10mbit"')


def test_rate_rejects_spaces():
    rejects(parse_rate, "10 mbit", 'without spaces: "10mbit"')
    rejects(parse_rate, "10 mbps", "no spaces", '"10mbit"', '"unlimited"')


@pytest.mark.parametrize("value", [10, 10_000_000, 1.5, 0, -1])
def test_rate_rejects_bare_numbers(value):
    rejects(parse_rate, value, "no unit", '"10mbit"')


@pytest.mark.parametrize("text", ["10", "1.5"])
def test_rate_rejects_bare_number_strings(text):
    rejects(parse_rate, text, "no unit")


def test_rate_rejects_zero_and_points_to_unlimited():
    rejects(parse_rate, "0mbit", "zero", '"unlimited"')
    rejects(parse_rate, "0.0kbit", "zero")


def test_rate_rejects_negative():
    rejects(parse_rate, "-1mbit", "negative")


@pytest.mark.parametrize("text", ["9kbit", "9999bit", "401gbit", "1tbit"])
def test_rate_rejects_out_of_range_and_says_the_range(text):
    rejects(parse_rate, text, "out of range", '"10kbit"', '"400gbit"')


@pytest.mark.parametrize(
    "value", ["10m", "10mb", "fast", "mbit", ".5mbit", "1e6bit", "1,5mbit", "+1mbit", "", True, None, [10]]
)
def test_rate_rejects_other_nonsense(value):
    rejects(parse_rate, value, '"10mbit"')


# ---------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("5ms", 5_000_000),
        ("1.5ms", 1_500_000),
        ("200us", 200_000),
        ("200µs", 200_000),  # micro sign
        ("200μs", 200_000),  # Greek mu
        ("100ns", 100),
        ("1s", 1_000_000_000),
        ("0.1s", 100_000_000),
        ("10s", 10_000_000_000),
        ("0ms", 0),
        ("0.0000015s", 1_500),
        ("5MS", 5_000_000),
        ("1.4ns", 1),  # rounded to the nanosecond
        ("1.6ns", 2),
    ],
)
def test_duration_accepts(text, ns):
    assert parse_duration_ns(text, FIELD) == ns


def test_duration_zero_can_be_forbidden():
    rejects(parse_duration_ns, "0ms", "longer than zero", allow_zero=False)
    assert parse_duration_ns("1ns", FIELD, allow_zero=False) == 1


@pytest.mark.parametrize("value", [5, 0, 1.5, -5])
def test_duration_rejects_bare_numbers(value):
    rejects(parse_duration_ns, value, "no unit", '"5ms"')


def test_duration_rejects_bare_number_string():
    rejects(parse_duration_ns, "5", "no unit")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_duration_rejects_nan_and_inf(value):
    rejects(parse_duration_ns, value, "not a finite duration")


@pytest.mark.parametrize("text", ["nanms", "infms", "NaN", "inf"])
def test_duration_rejects_nan_and_inf_strings(text):
    rejects(parse_duration_ns, text, '"5ms"')


def test_duration_rejects_negative():
    rejects(parse_duration_ns, "-1ms", "negative")


@pytest.mark.parametrize(("text", "suggestion"), [("5msec", '"5ms"'), ("2sec", '"2s"'), ("3usec", '"3us"')])
def test_duration_suggests_the_unit_for_tc_spellings(text, suggestion):
    rejects(parse_duration_ns, text, suggestion)


@pytest.mark.parametrize("value", ["1min", "1h", "5m", "ms", "5 ms", "", None, True])
def test_duration_rejects_unknown_units_and_types(value):
    rejects(parse_duration_ns, value, '"5ms"')


# ---------------------------------------------------------------- percentages


@pytest.mark.parametrize(
    ("value", "probability"),
    [("1%", 0.01), ("0.5%", 0.005), ("0%", 0.0), ("99.9%", 0.999), ("25%", 0.25), (0, 0.0), (0.0, 0.0)],
)
def test_percent_accepts(value, probability):
    assert parse_percent(value, FIELD) == probability


@pytest.mark.parametrize("value", [1, 0.01, 0.5, -1])
def test_percent_rejects_bare_nonzero_numbers(value):
    rejects(parse_percent, value, 'no "%"', '"1%"')


def test_percent_rejects_bare_number_string_with_the_fix():
    rejects(parse_percent, "1", 'write "1%"')


@pytest.mark.parametrize("text", ["100%", "150%", "99.99999999999999999999%"])
def test_percent_rejects_100_and_above(text):
    rejects(parse_percent, text, "out of range", '"100%"')


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("-1%", "negative"), ("1 %", 'without spaces: "1%"'), ("1pct", '"1%"'), (None, '"1%"'), (False, '"1%"')],
)
def test_percent_rejects_other_forms(value, fragment):
    rejects(parse_percent, value, fragment)


# ---------------------------------------------------------------- sizes


@pytest.mark.parametrize(
    ("value", "size"),
    [
        (150_000, 150_000),
        (1, 1),
        ("1514b", 1514),
        ("64kb", 64_000),
        ("1.5mb", 1_500_000),
        ("1gb", 1_000_000_000),
        ("64kib", 65_536),
        ("1.5kib", 1536),
        ("2mib", 2_097_152),
        ("1gib", 2**30),
        ("64KB", 64_000),
    ],
)
def test_size_accepts(value, size):
    assert parse_size_bytes(value, FIELD) == size


@pytest.mark.parametrize(
    ("value", "fragment"), [(0, "positive"), (-1, "positive"), ("0kb", "zero"), ("-5kb", "negative")]
)
def test_size_rejects_zero_and_negative(value, fragment):
    rejects(parse_size_bytes, value, fragment)


def test_size_rejects_quoted_bare_number_with_the_fix():
    rejects(parse_size_bytes, "150000", "without quotes", '"150000b"')


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("1.5b", "whole number"),
        ("0.0001kb", "whole number"),
        ("10 kb", 'without spaces: "10kb"'),
        ("64k", '"64kb"'),
        ("64kbit", '"64kb"'),
        (1.5, '"64kb"'),
        (True, '"64kb"'),
    ],
)
def test_size_rejects_other_forms(value, fragment):
    rejects(parse_size_bytes, value, fragment)


# ---------------------------------------------------------------- formatting


@pytest.mark.parametrize(
    ("bps", "text"),
    [
        (None, "unlimited"),
        (10_000_000, "10 Mbit/s"),
        (1_500_000, "1.5 Mbit/s"),
        (100_000, "100 kbit/s"),
        (1_000_000_000, "1 Gbit/s"),
        (400_000_000_000, "400 Gbit/s"),
        (1_234_567, "1.234567 Mbit/s"),
        (999, "999 bit/s"),
    ],
)
def test_format_rate(bps, text):
    assert format_rate(bps) == text


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (5_000_000, "5 ms"),
        (200_000, "200 us"),
        (1_500_000, "1.5 ms"),
        (2_000_000_000, "2 s"),
        (7, "7 ns"),
        (0, "0 ms"),
    ],
)
def test_format_duration(ns, text):
    assert format_duration_ns(ns) == text


@pytest.mark.parametrize("text", ["10mbit", "1.5mbit", "100kbit", "1gbit", "12345bit"])
def test_format_rate_round_trips(text):
    bps = parse_rate(text, FIELD)
    number, unit = format_rate(bps).split()
    assert parse_rate(number + unit.removesuffix("/s").lower(), FIELD) == bps

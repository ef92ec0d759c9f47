"""Strict parsers and formatters for the units a spec is written in: rates, durations,
percentages and byte sizes.

Every parser takes the raw TOML value and the name of the field it came from, and either
returns a number in the unit its name says (bit/s, ns, probability, bytes) or raises a
one-line SpecError that says what is wrong and how to write it instead. Arithmetic is done
in Decimal, so "1.5mbit" is exactly 1_500_000 and "0.1ms" exactly 100_000 ns.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal

from bloatlab.errors import SpecError, show

# A plain decimal number: no sign, no exponent, digits on both sides of a point.
_NUMBER = r"(\d+(?:\.\d+)?)"

# SI prefixes, as tc reads them: 1kbit = 1000 bit/s.
_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
_RATE_RE = re.compile(_NUMBER + r"([a-z/]+)")
MIN_RATE_BPS = 10_000  # a full 1514-byte frame already takes 1.2 s to serialise at this rate
MAX_RATE_BPS = 400 * 10**9
_RATE_EXAMPLES = '"10mbit", "1.5mbit", "100kbit", "1gbit", or "unlimited"'
# Units people write that tc would misread ("bps" is bytes per second) or that we don't take.
_RATE_MISTAKES = {
    f"{p}{u}": f"{p}bit" for p in ("", "k", "m", "g", "t") for u in ("bps", "b/s", "bit/s", "bits/s", "bits")
}

_DURATION_UNITS = {"s": 10**9, "ms": 10**6, "us": 10**3, "µs": 10**3, "μs": 10**3, "ns": 1}
_DURATION_RE = re.compile(_NUMBER + r"([a-zµμ]+)")
_DURATION_EXAMPLES = '"5ms", "1.5ms", "200us", "1s" or "0ms"'
_DURATION_MISTAKES = {
    **dict.fromkeys(("sec", "secs", "second", "seconds"), "s"),
    **dict.fromkeys(("msec", "msecs", "millisecond", "milliseconds"), "ms"),
    **dict.fromkeys(("usec", "usecs", "microsecond", "microseconds"), "us"),
    **dict.fromkeys(("nsec", "nsecs", "nanosecond", "nanoseconds"), "ns"),
}

_PERCENT_RE = re.compile(_NUMBER + r"%")
_PERCENT_EXAMPLES = '"1%", "0.5%" or "0%"'

_SIZE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}
_SIZE_RE = re.compile(_NUMBER + r"([a-z]+)")
_SIZE_EXAMPLES = '150000 (an integer), "1514b", "64kb", "1.5mb" or "64kib"'
# What a signed 64-bit count holds: the bound of every size and duration (8 EiB, some 292 years),
# which the fields that take them bound further; past it a value is no longer what was written.
SIZE_LIMIT_BYTES = 2**63 - 1
DURATION_LIMIT_NS = 2**63 - 1


def _is_number(value: object) -> bool:
    # bool is an int subclass, but `rate = true` is not a number the user meant.
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _scaled(number: str, factor: int) -> Decimal:
    return Decimal(number) * factor


def _to_int(amount: Decimal) -> int:
    return int(amount.to_integral_value(rounding=ROUND_HALF_UP))


def _reject_spaces(
    value: str, field: str, parse: Callable[[str, str], object], what: str, examples: str
) -> None:
    """Units are glued to their number ("10mbit"); say so, with the fixed text if it would parse."""
    if not any(c.isspace() for c in value):
        return
    squeezed = "".join(value.split())
    try:
        parse(squeezed, field)
    except SpecError:
        raise SpecError(
            f"{show(value)} is not {what}; write a number and a unit with no spaces: {examples}", field=field
        ) from None
    raise SpecError(f"{show(value)} is not {what}; write it without spaces: {show(squeezed)}", field=field)


def parse_rate(value: object, field: str) -> int | None:
    """A link rate in bit/s, or None for "unlimited". SI units bit..tbit, e.g. "1.5mbit"."""
    if _is_number(value):
        raise SpecError(
            f"{show(value)} has no unit; write the rate as a string with a unit: {_RATE_EXAMPLES}",
            field=field,
        )
    if not isinstance(value, str):
        raise SpecError(f"{show(value)} is not a rate; write a string such as {_RATE_EXAMPLES}", field=field)
    text = value.lower()
    if text == "unlimited":
        return None
    if text.startswith("-"):
        raise SpecError(f"{show(value)} is negative; a rate is positive, e.g. {_RATE_EXAMPLES}", field=field)
    _reject_spaces(value, field, parse_rate, "a rate", _RATE_EXAMPLES)
    if re.fullmatch(_NUMBER, text):
        raise SpecError(
            f"{show(value)} has no unit; write a number and a unit: {_RATE_EXAMPLES}", field=field
        )
    match = _RATE_RE.fullmatch(text)
    if match and match[2] in _RATE_MISTAKES:
        right = match[1] + _RATE_MISTAKES[match[2]]
        if match[2].endswith("bps"):
            raise SpecError(
                f'{show(value)}: tc reads "bps" as bytes per second, so bloatlab does not accept it; '
                f"for bits per second write {show(right)}",
                field=field,
            )
        raise SpecError(f"{show(value)} is not a rate; write {show(right)}", field=field)
    if not match or match[2] not in _RATE_UNITS:
        raise SpecError(
            f"{show(value)} is not a rate; write a number and a unit: {_RATE_EXAMPLES}", field=field
        )
    bps = _to_int(_scaled(match[1], _RATE_UNITS[match[2]]))
    if bps == 0:
        raise SpecError(f'{show(value)} is zero; for no rate limit write "unlimited"', field=field)
    if not MIN_RATE_BPS <= bps <= MAX_RATE_BPS:
        raise SpecError(
            f'{show(value)} is out of range; write a rate from "10kbit" to "400gbit", or "unlimited"',
            field=field,
        )
    return bps


def parse_duration_ns(value: object, field: str, allow_zero: bool = True) -> int:
    """A duration in integer nanoseconds from "5ms", "1.5ms", "200us", "1s", "100ns"."""
    if _is_number(value):
        if isinstance(value, float) and not math.isfinite(value):
            raise SpecError(
                f"{show(value)} is not a finite duration; write one such as {_DURATION_EXAMPLES}", field=field
            )
        raise SpecError(
            f"{show(value)} has no unit; write the duration as a string with a unit: {_DURATION_EXAMPLES}",
            field=field,
        )
    if not isinstance(value, str):
        raise SpecError(
            f"{show(value)} is not a duration; write a string such as {_DURATION_EXAMPLES}", field=field
        )
    text = value.lower()
    if text.startswith("-"):
        raise SpecError(
            f"{show(value)} is negative; a duration is >= 0, e.g. {_DURATION_EXAMPLES}", field=field
        )
    _reject_spaces(value, field, parse_duration_ns, "a duration", _DURATION_EXAMPLES)
    if re.fullmatch(_NUMBER, text):
        raise SpecError(
            f"{show(value)} has no unit; write a number and a unit (s, ms, us, ns): {_DURATION_EXAMPLES}",
            field=field,
        )
    match = _DURATION_RE.fullmatch(text)
    if match and match[2] in _DURATION_MISTAKES:
        right = match[1] + _DURATION_MISTAKES[match[2]]
        raise SpecError(
            f"{show(value)}: unit {show(match[2])} is not accepted; write {show(right)}", field=field
        )
    if not match or match[2] not in _DURATION_UNITS:
        raise SpecError(
            f"{show(value)} is not a duration; write a number and a unit (s, ms, us, ns): "
            f"{_DURATION_EXAMPLES}",
            field=field,
        )
    ns = _to_int(_scaled(match[1], _DURATION_UNITS[match[2]]))
    if ns > DURATION_LIMIT_NS:
        raise SpecError(f"{show(value)} is out of range; a duration is at most some 292 years "
                        f"({DURATION_LIMIT_NS} ns)", field=field)
    if ns == 0 and not allow_zero:
        raise SpecError(f'{show(value)} must be longer than zero, e.g. "1ms"', field=field)
    return ns


def parse_percent(value: object, field: str) -> float:
    """A probability from a percentage: "1%" -> 0.01. 0% <= p < 100%; the number 0 is 0."""
    if _is_number(value):
        if value == 0:  # unambiguous without a unit
            return 0.0
        raise SpecError(
            f'{show(value)} has no "%"; write a percentage as a string: "1%" for one packet in a hundred, '
            f'"0.5%", or "0%"',
            field=field,
        )
    if not isinstance(value, str):
        raise SpecError(
            f'{show(value)} is not a percentage; write a string such as "1%", "0.5%" or "0%"', field=field
        )
    if value.startswith("-"):
        raise SpecError(
            f'{show(value)} is negative; write a percentage from "0%" to below "100%"', field=field
        )
    _reject_spaces(value, field, parse_percent, "a percentage", _PERCENT_EXAMPLES)
    if re.fullmatch(_NUMBER, value):
        raise SpecError(f'{show(value)} has no "%"; write {show(value + "%")}', field=field)
    match = _PERCENT_RE.fullmatch(value)
    if not match:
        raise SpecError(
            f'{show(value)} is not a percentage; write a number followed by "%": "1%", "0.5%" or "0%"',
            field=field,
        )
    probability = float(Decimal(match[1]) / 100)
    if probability >= 1.0:  # also "99.99999999999999999%", which a float can't tell from 100%
        raise SpecError(
            f'{show(value)} is out of range; write a percentage from "0%" to below "100%"', field=field
        )
    return probability


def parse_size_bytes(value: object, field: str) -> int:
    """A size in bytes: an integer, or "1514b", "64kb" (SI), "64kib" (binary), "1.5mb"."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise SpecError(
                f"{show(value)} is not a positive size; write one such as {_SIZE_EXAMPLES}", field=field
            )
        if value > SIZE_LIMIT_BYTES:
            raise SpecError(f"{show(value)} is out of range; a size is at most {SIZE_LIMIT_BYTES} bytes", field=field)
        return value
    if not isinstance(value, str):
        raise SpecError(f"{show(value)} is not a size in bytes; write {_SIZE_EXAMPLES}", field=field)
    text = value.lower()
    if text.startswith("-"):
        raise SpecError(
            f"{show(value)} is negative; write a positive size such as {_SIZE_EXAMPLES}", field=field
        )
    _reject_spaces(value, field, parse_size_bytes, "a size", _SIZE_EXAMPLES)
    if re.fullmatch(r"\d+", text):
        raise SpecError(
            f"{show(value)} has no unit; write {text} without quotes or {show(text + 'b')}", field=field
        )
    match = _SIZE_RE.fullmatch(text)
    if not match or match[2] not in _SIZE_UNITS:
        raise SpecError(
            f"{show(value)} is not a size in bytes; write a number and a unit "
            f"(b, kb, mb, gb, kib, mib, gib): {_SIZE_EXAMPLES}",
            field=field,
        )
    amount = _scaled(match[1], _SIZE_UNITS[match[2]])
    if amount != amount.to_integral_value():
        raise SpecError(
            f"{show(value)} is not a whole number of bytes; write e.g. {_SIZE_EXAMPLES}", field=field
        )
    if amount == 0:
        raise SpecError(f"{show(value)} is zero; write a positive size such as {_SIZE_EXAMPLES}", field=field)
    if amount > SIZE_LIMIT_BYTES:
        raise SpecError(f"{show(value)} is out of range; a size is at most {SIZE_LIMIT_BYTES} bytes", field=field)
    return int(amount)


def _exact(amount: int, scale: int) -> str:
    """amount / scale without float noise or trailing zeros: 1_500_000 / 10**6 -> "1.5"."""
    return f"{(Decimal(amount) / scale).normalize():f}"


def format_rate(bps: int | None) -> str:
    """10_000_000 -> "10 Mbit/s"; None -> "unlimited". Exact, with the largest unit that fits."""
    if bps is None:
        return "unlimited"
    for scale, unit in ((10**12, "Tbit/s"), (10**9, "Gbit/s"), (10**6, "Mbit/s"), (10**3, "kbit/s")):
        if abs(bps) >= scale:
            return f"{_exact(bps, scale)} {unit}"
    return f"{bps} bit/s"


def format_duration_ns(ns: int) -> str:
    """5_000_000 -> "5 ms", 200_000 -> "200 us", 0 -> "0 ms". Exact, largest unit that fits."""
    if ns == 0:
        return "0 ms"
    for scale, unit in ((10**9, "s"), (10**6, "ms"), (10**3, "us")):
        if abs(ns) >= scale:
            return f"{_exact(ns, scale)} {unit}"
    return f"{ns} ns"

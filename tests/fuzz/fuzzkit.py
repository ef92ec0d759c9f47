"""What the fuzz targets share: the two campaigns (short in `make test`, long on demand), the
contract every parser is held to, and strategies that mutate real inputs.

The contract: bad input raises a BloatlabError (SpecError, MachineError) whose str() is one
non-empty line (naming the field, for what a user writes); anything else escaping is a defect.

Campaigns, chosen by BLOATLAB_FUZZ:
    short (default)  derandomized: every run tries the same examples, so `make test` is
                     reproducible and a failure it shows is one a rerun shows again
    long             random, many more examples, failures kept in .hypothesis/ (gitignored)
                     and tried first next time
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from bloatlab.errors import BloatlabError

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
PRESETS = ROOT / "src" / "bloatlab" / "specs" / "presets"
EXAMPLES = ROOT / "examples"

PROFILE = os.environ.get("BLOATLAB_FUZZ", "short")
if PROFILE not in ("short", "long"):
    raise SystemExit(f"BLOATLAB_FUZZ={PROFILE!r}: choose short or long")
# The long campaign's examples per target are the short one's times this (each target's short
# count is sized to its speed: at 100, each long target runs 0.5-4 minutes on two busy cores; make
# fuzz sets it with FUZZ_SCALE).
LONG_FACTOR = int(os.environ.get("BLOATLAB_FUZZ_FACTOR", "100"))

_COMMON = dict(deadline=None,  # a noisy machine: a slow example is not a failure
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture])
settings.register_profile("short", derandomize=True, database=None, print_blob=False, **_COMMON)
settings.register_profile("long", derandomize=False, print_blob=True,
                          database=DirectoryBasedExampleDatabase(ROOT / ".hypothesis" / "examples"), **_COMMON)
settings.load_profile(PROFILE)


def budget(short: int) -> settings:
    """A target's examples: `short` in the short campaign, LONG_FACTOR times that in the long."""
    return settings(max_examples=short if PROFILE == "short" else short * LONG_FACTOR)


# The contract -----------------------------------------------------------------------------

def one_line(error: BaseException, *, field: bool = True) -> None:
    """A BloatlabError as the CLI prints it: one non-empty line, naming the field (for input a
    user writes)."""
    assert isinstance(error, BloatlabError), f"{type(error).__name__} escaped: {error!r}"
    text = str(error)
    assert text.strip(), f"an empty message: {error!r}"
    assert "\n" not in text and "\r" not in text, f"a message of several lines: {text!r}"
    if field:
        assert error.field, f"no field named: {text!r}"


def contract(call: Callable[[], Any], *, field: bool = True) -> Any:
    """call(), or None when it raised a BloatlabError that keeps the contract; anything else
    escapes (the defect the target looks for)."""
    try:
        return call()
    except BloatlabError as error:
        one_line(error, field=field)
        return None


# Seeds ------------------------------------------------------------------------------------

def leaves(doc: Any) -> Iterable[Any]:
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield key
            yield from leaves(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from leaves(value)
    else:
        yield doc


def string_pool(*docs: Any) -> list[str]:
    """Every key and text value of the seeds: names, units, placeholders to recombine."""
    return sorted({v for doc in docs for v in leaves(doc) if isinstance(v, str) and len(v) < 80})


# Values -----------------------------------------------------------------------------------

# Numbers as text that parsers misread: unicode digits, several points, exponents, overflow,
# more digits than int() takes (4300).
NASTY_NUMBER_TEXT = ["0", "-0", "-1", "1", "00", "0.0", ".", "1.", ".5", "1.2.3", "1e3", "1e999", "-1e999",
                     "nan", "NaN", "inf", "-inf", "0x10", "1_000", "²", "١٢٣", "१०", "18446744073709551616",
                     "9223372036854775808", "4294967296", "2147483648", "99999999999999999999999999999999",
                     "9" * 400, "1" * 5000, "0." + "0" * 60 + "1", " 1", "1 ", "+1", "−1", "1,5", "",
                     "1" + "0" * 320, "0" * 30]
NASTY_TEXT = ["", " ", "\t", "\n", "\r\n", "\x00", "\x7f", "\x85", "\u2028", "\ud800", "é", "µs", "μs", "ms",
              "mbit", "kib", "%", "-", "=", ",", "{", "}", "{x}", "{maxq}", "{duration}", "}{", "\\", '"', "'",
              "../", "/", ".", "a" * 300, "unlimited", "UNLIMITED", "true", "on", "off", "auto", "none",
              "h1", "h2", "s0", "h1->s0", "s0->h2", "droptail", "taildrop", "codel", "red", "cake", "dualpi2",
              "EF", "ect1", "CE", "reno", "cubic", "dctcp", "offered", "-5s", "5 ms", "5ms ", "1,2,3"]
UNITS = ["", "bit", "kbit", "mbit", "gbit", "tbit", "bps", "kbps", "mbit/s", "bits", "b", "kb", "mb", "gb",
         "kib", "mib", "gib", "s", "ms", "us", "µs", "μs", "ns", "sec", "msec", "%", "MBIT", "Ms", "mbitt", "m"]

_INTS = st.one_of(st.integers(-3, 1100), st.sampled_from([2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, -2**63,
                                                         2**64, 10**18, 10**30, 10**400, -10**400]),
                  st.integers())
_FLOATS = st.one_of(st.sampled_from([0.0, -0.0, 0.5, 1.0, 1.5, 100.0, 1e-9, 5e-324, 1e308, -1e308,
                                     math.inf, -math.inf, math.nan]), st.floats())
_DATES = st.sampled_from([dt.date(1979, 5, 27), dt.time(7, 32), dt.datetime(1979, 5, 27, 7, 32),
                          dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))])


_NUMBER_TEXT = st.one_of(st.integers(0, 10**13).map(str), st.decimals(0, 10**6, places=3).map(str),
                         st.sampled_from(NASTY_NUMBER_TEXT))
_JUNK_LINE = st.one_of(st.text(max_size=40), st.sampled_from(NASTY_TEXT))


@st.composite
def unit_text(draw) -> str:
    """A number and a unit, mostly well formed, often slightly not."""
    number = draw(_NUMBER_TEXT)
    unit = pick(draw, UNITS)
    glue = pick(draw, ["", "", "", " ", "-", "\t"])
    text = f"{number}{glue}{unit}"
    if between(draw, 0, 7) == 0:
        text = pick(draw, ["-", " ", "+", ""]) + text + pick(draw, ["", " ", "x", "\n"])
    return text


UNIT_TEXT = unit_text()


# Strategies are built once per pool: building (and validating) them afresh on every draw
# costs more than the parsers they feed.
_BUILT: dict[tuple[str, int], tuple[Any, st.SearchStrategy[Any]]] = {}


def _once(kind: str, pool: list[str] | None, build: Callable[[], st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    key = (kind, id(pool))
    if key not in _BUILT:
        _BUILT[key] = (pool, build())  # the pool kept alive, so its id stays its own
    return _BUILT[key][1]


def texts(pool: list[str] | None = None) -> st.SearchStrategy[str]:
    extra = [st.sampled_from(pool)] if pool else []
    return _once("texts", pool, lambda: st.one_of(st.sampled_from(NASTY_TEXT), UNIT_TEXT, st.text(max_size=20),
                                                  *extra))


def scalars(pool: list[str] | None = None) -> st.SearchStrategy[Any]:
    return _once("scalars", pool, lambda: st.one_of(_INTS, _FLOATS, st.booleans(), texts(pool), _DATES))


def values(pool: list[str] | None = None) -> st.SearchStrategy[Any]:
    """Any TOML or JSON value: scalars, and small lists and tables of them."""
    def build() -> st.SearchStrategy[Any]:
        leaf = scalars(pool)
        shallow = st.one_of(st.lists(leaf, max_size=3), st.dictionaries(texts(pool), leaf, max_size=3))
        return st.one_of(leaf, leaf, shallow, st.lists(shallow, max_size=2),
                         st.dictionaries(texts(pool), shallow, max_size=2))
    return _once("values", pool, build)


_INDEXES: dict[tuple[int, int], st.SearchStrategy[int]] = {}


def between(draw, low: int, high: int) -> int:
    """draw(st.integers(low, high)), with the strategy built once."""
    if (low, high) not in _INDEXES:
        _INDEXES[low, high] = st.integers(low, high)
    return draw(_INDEXES[low, high])


def pick(draw, items: list[Any]) -> Any:
    """One of `items`, drawn cheaply (an index: no strategy to build over a long list)."""
    return items[between(draw, 0, len(items) - 1)]


# Mutating a tree (a spec's tables, a JSON document) -----------------------------------------

def _paths(doc: Any, here: tuple = ()) -> list[tuple]:
    out = [here]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, (*here, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            out += _paths(value, (*here, index))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _near(value: Any, draw) -> Any:
    """A value of the same kind, pushed: a number to an extreme, a text with its unit changed."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return pick(draw, [0, -value, value + 1, value - 1, value * 1000, value * 10**20, -1, 2**63])
    if isinstance(value, float):
        return pick(draw, [0.0, -value, value * 1e300, math.nan, math.inf, value / 1e300])
    if isinstance(value, str):
        how = between(draw, 0, 6)
        if how == 0:
            return value[:between(draw, 0, len(value))]
        if how == 1:
            return value + pick(draw, UNITS + NASTY_TEXT)
        if how == 2:
            return value.upper()
        if how == 3:
            cut = between(draw, 0, len(value))
            return value[:cut] + pick(draw, NASTY_TEXT + NASTY_NUMBER_TEXT) + value[cut:]
        if how == 4:
            return "".join(pick(draw, NASTY_NUMBER_TEXT) if c.isdigit() else c for c in value)
        if how == 5:
            return str(value.count("1")) + value.lstrip("0123456789.")
        return "{" + value + "}"
    return value


@st.composite
def mutated(draw, doc: Any, pool: list[str] | None = None, most: int = 4) -> Any:
    """`doc` (a dict of tables, lists and values) with one to `most` changes: a key removed,
    added or renamed, a value retyped, pushed to an extreme or swapped with another part of the
    document, a list emptied, shortened or repeated, a table nested where a value was."""
    doc = copy.deepcopy(doc)
    for _ in range(between(draw, 1, most)):
        paths = _paths(doc)
        path = pick(draw, paths)
        op = pick(draw, ["remove", "replace", "near", "near", "add", "rename", "swap", "wrap",
                                   "duplicate", "empty"])
        if not path:  # the root: add or remove a top-level key
            op = pick(draw, ["add", "remove"])
            if op == "add" and isinstance(doc, dict):
                doc[draw(texts(pool))] = draw(values(pool))
            elif isinstance(doc, dict) and doc:
                doc.pop(pick(draw, list(doc)))
            continue
        parent, key = _get(doc, path[:-1]), path[-1]
        here = parent[key]
        if op == "remove":
            del parent[key]
        elif op == "replace":
            parent[key] = draw(values(pool))
        elif op == "near":
            parent[key] = _near(here, draw)
        elif op == "add" and isinstance(here, dict):
            here[draw(texts(pool))] = draw(values(pool))
        elif op == "add" and isinstance(here, list):
            here.insert(between(draw, 0, len(here)), copy.deepcopy(pick(draw, here))
                        if here and draw(st.booleans()) else draw(values(pool)))
        elif op == "rename" and isinstance(parent, dict):
            parent[draw(texts(pool))] = parent.pop(key)
        elif op == "swap":
            other = pick(draw, paths)
            if other and other[:len(path)] != path and path[:len(other)] != other:
                parent[key] = copy.deepcopy(_get(doc, other))
        elif op == "wrap":
            parent[key] = draw(st.sampled_from([[here], {"value": here}, [here, here]]))
        elif op == "duplicate" and isinstance(here, list) and here:
            here.extend(copy.deepcopy(here) * between(draw, 1, 3))
        elif op == "empty":
            parent[key] = type(here)() if isinstance(here, (dict, list, str)) else None
        else:
            parent[key] = _near(here, draw)
    return doc


# JSON and TOML as text ------------------------------------------------------------------------

DEEP = "\x00deep\x00"  # a leaf that json_text() turns into arrays nested deeper than Python recurses


def json_text(doc: Any) -> str:
    text = json.dumps(doc, default=str)
    return text.replace(json.dumps(DEEP), "[" * 100_000 + "]" * 100_000)


@st.composite
def json_bytes(draw, doc: Any, pool: list[str] | None = None) -> bytes:
    """A JSON document mutated as a tree, and now and then as bytes (cut short, spliced, not
    UTF-8, nested too deep)."""
    tree_pool = (pool or []) + [DEEP]
    data = json_text(draw(mutated(doc, tree_pool))).encode("utf-8", "surrogatepass")
    how = between(draw, 0, 9)
    if how == 0:
        return data[:between(draw, 0, len(data))]
    if how == 1:
        cut = between(draw, 0, len(data))
        return data[:cut] + draw(st.binary(max_size=8)) + data[cut:]
    if how == 2:
        return draw(st.sampled_from([b"", b"null", b"[]", b"7", b'"x"', b"\xff\xfe", b"{", b"NaN", b"[" * 5000]))
    return data


def toml_text(doc: dict[str, Any]) -> str:
    """A dict as TOML: one `key = value` line per top-level key, tables inline."""
    return "".join(f"{_toml_key(k)} = {_toml_value(v)}\n" for k, v in doc.items())


def _toml_key(key: Any) -> str:
    return _toml_string(str(key))


def _toml_string(text: str) -> str:
    return json.dumps(text).replace("\x7f", "\\u007f")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else "inf" if value == math.inf else "-inf" if value == -math.inf \
            else repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return _toml_string(str(value))


# Text a tool printed ------------------------------------------------------------------------------

@st.composite
def mutated_text(draw, text: str, most: int = 5) -> str:
    """A tool's real output with lines dropped, repeated, swapped or cut, numbers replaced,
    junk inserted, or the whole cut short (a tool killed mid-line)."""
    lines = text.splitlines(keepends=True) or [""]
    for _ in range(between(draw, 1, most)):
        i = between(draw, 0, max(0, len(lines) - 1))
        op = between(draw, 0, 7)
        if op == 0 and len(lines) > 1:
            del lines[i]
        elif op == 1:
            lines[i:i] = [lines[i]] * between(draw, 1, 3)
        elif op == 2:
            j = between(draw, 0, len(lines) - 1)
            lines[i], lines[j] = lines[j], lines[i]
        elif op == 3:
            lines[i] = lines[i][:between(draw, 0, len(lines[i]))]
        elif op in (4, 5):
            lines[i] = _replace_a_number(draw, lines[i])
        elif op == 6:
            lines.insert(i, draw(_JUNK_LINE) + "\n")
        else:
            cut = between(draw, 0, len(lines[i]))
            lines[i] = lines[i][:cut] + pick(draw, NASTY_TEXT + NASTY_NUMBER_TEXT) + lines[i][cut:]
    out = "".join(lines)
    if between(draw, 0, 7) == 0:
        out = out[:between(draw, 0, len(out))]
    return out


def _replace_a_number(draw, line: str) -> str:
    import re

    spans = [m.span() for m in re.finditer(r"\d+(?:\.\d+)?", line)]
    if not spans:
        return line
    start, end = pick(draw, spans)
    return line[:start] + pick(draw, NASTY_NUMBER_TEXT) + line[end:]


@st.composite
def mutated_bytes(draw, data: bytes, most: int = 4) -> bytes:
    """Binary input with bytes flipped, fields set to extremes, bytes cut or inserted."""
    buf = bytearray(data)
    for _ in range(between(draw, 1, most)):
        op = between(draw, 0, 4)
        i = between(draw, 0, max(0, len(buf) - 1))
        if op == 0 and buf:
            buf[i] = between(draw, 0, 255)
        elif op == 1 and len(buf) >= i + 2:
            buf[i:i + 2] = pick(draw, [b"\x00\x00", b"\xff\xff", b"\x04\x00", b"\x03\x00", b"\x01\x00"])
        elif op == 2 and len(buf) >= i + 4:
            buf[i:i + 4] = pick(draw, [b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"\x00\x00\x00\x80",
                                                 b"\x10\x00\x00\x00"])
        elif op == 3:
            del buf[i:i + between(draw, 1, 16)]
        else:
            buf[i:i] = draw(st.binary(min_size=1, max_size=16))
    return bytes(buf)

"""Queue tables of a spec ({ discipline = "codel", packets = 1000, target = "5ms" }) validated
into QueueSpecs against the catalogue of disciplines (disciplines.py): which keys a discipline
takes, each value in its unit and bounds, and the rules between parameters. Every error is
one line that names the key and says the fix.
"""

from __future__ import annotations

import difflib
import math
import re
from decimal import Decimal
from typing import Any

from bloatlab.errors import SpecError, show
from bloatlab.specs.disciplines import (ALIASES, CATALOGUE, DISCIPLINES, LIMIT_KEYS, MAX_QUEUE_BYTES,
                                       MAX_QUEUE_DURATION_NS, MAX_QUEUE_PACKETS, MTU_FRAME_BYTES, DisciplineName,
                                       Param)
from bloatlab.specs.model import QueueSpec
from bloatlab.specs.reading import check_keys, field_of
from bloatlab.specs.units import format_duration_ns, parse_duration_ns, parse_rate, parse_size_bytes

QUEUE_EXAMPLE = '{ discipline = "droptail", packets = 100 }'


def parse_queue(value: object, base: str) -> QueueSpec:
    """A queue table ({"discipline": "codel", "target": "5ms", "packets": 1000}) validated into a
    QueueSpec; errors name `base`.KEY."""
    if not isinstance(value, dict):
        raise SpecError(f"{show(value)} is not a queue; write a table such as {QUEUE_EXAMPLE}", field=base)
    discipline = parse_discipline(value.get("discipline", "droptail"), field_of(base, "discipline"))
    value = _with_discipline_table(value, discipline, base)
    _check_queue_keys(value, discipline, base)
    packets, limit_bytes = _parse_limit(value, discipline, base)
    params = {
        param.field: _parse_queue_param(param, value[param.key], field_of(base, param.key), limit_bytes is not None)
        for param in CATALOGUE[discipline].settable
        if param.key in value
    }
    queue = QueueSpec(discipline=discipline, packets=packets, bytes=limit_bytes,
                      params=CATALOGUE[discipline].record(**params))
    _check_queue(queue, value, base)
    return queue


def _with_discipline_table(value: dict[str, Any], discipline: DisciplineName, base: str) -> dict[str, Any]:
    """A queue may hold a table per discipline (`red = { min = 15, max = 45 }`) whose keys apply
    only when that discipline is the one chosen, so one spec can sweep disciplines with each
    tuned. The chosen one's keys override the queue's own."""
    merged = {k: v for k, v in value.items() if k not in DISCIPLINES and k not in ALIASES}
    for name in value.keys() & {*DISCIPLINES, *ALIASES}:
        table = value[name]
        if not isinstance(table, dict):
            raise SpecError(f"{show(table)} is not a table of {name} settings; write {name} = {{ ... }}",
                            field=field_of(base, name))
        if ALIASES.get(name, name) == discipline:
            if "discipline" in table or "packets" in table or "bytes" in table:
                raise SpecError("set discipline and the limit on the queue itself, not per discipline",
                                field=field_of(base, name))
            merged.update(table)
    return merged


def parse_discipline(value: object, field_name: str) -> DisciplineName:
    if isinstance(value, str) and value in ALIASES:
        return ALIASES[value]
    if isinstance(value, str) and value in DISCIPLINES:
        return DisciplineName(value)
    close = difflib.get_close_matches(value, DISCIPLINES, n=1) if isinstance(value, str) else []
    guess = f"did you mean {show(close[0])}? " if close else ""
    raise SpecError(
        f"{show(value)} is not a queue discipline; {guess}choose one of: {', '.join(DISCIPLINES)}",
        field=field_name,
    )


def _check_queue_keys(value: dict[str, Any], discipline: DisciplineName, base: str) -> None:
    """Only the keys of this discipline; a key another discipline takes is named as such."""
    allowed = (*LIMIT_KEYS, *(p.key for p in CATALOGUE[discipline].settable))
    for key in value:
        owners = [d.name for d in CATALOGUE.values() if key in (p.key for p in d.settable)]
        if key not in allowed and owners:
            raise SpecError(
                f"{discipline} has no {key}; its keys are: {', '.join(allowed)} "
                f"({key} belongs to {', '.join(owners)})",
                field=field_of(base, key),
            )
    check_keys(value, allowed, base, f"a {discipline} queue")


def _parse_limit(value: dict[str, Any], discipline: DisciplineName, base: str) -> tuple[int | None, int | None]:
    """(packets, bytes), exactly one of them set; the discipline's default packet limit if neither."""
    if "packets" in value and "bytes" in value:
        raise SpecError(
            "set either packets or bytes, not both: a queue is limited in one unit", field=field_of(base, "bytes")
        )
    if "bytes" in value:
        field_name = field_of(base, "bytes")
        limit_bytes = parse_size_bytes(value["bytes"], field_name)
        if limit_bytes < MTU_FRAME_BYTES:
            raise SpecError(
                f"{show(value['bytes'])} is smaller than one full {MTU_FRAME_BYTES}-byte frame, "
                f"which the queue could never hold; write at least {MTU_FRAME_BYTES}",
                field=field_name,
            )
        if limit_bytes > MAX_QUEUE_BYTES:
            raise SpecError(f'{show(value["bytes"])} is over 1 GiB; write at most "1gib"', field=field_name)
        return None, limit_bytes
    packets = value.get("packets", CATALOGUE[discipline].packets)
    if not _is_whole(packets) or not 1 <= packets <= MAX_QUEUE_PACKETS:
        raise SpecError(
            f"{show(packets)} is not a queue length; write a whole number of packets from 1 to "
            f"{MAX_QUEUE_PACKETS}, e.g. packets = 100",
            field=field_of(base, "packets"),
        )
    return packets, None


def _is_whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: object) -> float | None:
    """A number as a finite float, or None: not a number, NaN, infinite, or an integer too large
    for a float (math.isfinite(10**400) raises)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _parse_queue_param(param: Param, value: object, field_name: str, in_bytes: bool) -> Any:
    """One discipline parameter in its field's unit; RED's thresholds are bytes when `in_bytes`
    (the queue is limited in bytes), else packets."""
    key = param.key
    if param.kind == "duration":
        ns = parse_duration_ns(value, field_name, allow_zero=False)
        if ns > MAX_QUEUE_DURATION_NS:
            raise SpecError(f'{show(value)} is longer than 10 s; write at most "10s"', field=field_name)
        return ns
    if param.kind == "size":
        size = parse_size_bytes(value, field_name)
        if size > MAX_QUEUE_BYTES:
            raise SpecError(f'{show(value)} is over 1 GiB; write at most "1gib"', field=field_name)
        return size
    if param.kind == "rate":
        bps = parse_rate(value, field_name)
        if bps is None:
            if param.unlimited:
                return 0
            raise SpecError(
                f"{show(value)} is not a rate here; RED ages its average queue over idle time at this rate: "
                'write one such as "10mbit", or leave bandwidth out to use the link\'s rate',
                field=field_name,
            )
        return bps
    if param.kind == "choice":
        if value not in param.choices:
            close = difflib.get_close_matches(value, param.choices, n=1) if isinstance(value, str) else []
            guess = f"did you mean {show(close[0])}? " if close else ""
            raise SpecError(f"{show(value)} is not a {key}; {guess}choose one of: {', '.join(param.choices)}",
                            field=field_name)
        return value
    if param.kind == "bool":
        if not isinstance(value, bool):
            raise SpecError(f"{show(value)} is not true or false; write {key} = true or {key} = false",
                            field=field_name)
        return value
    if param.kind == "count":
        if not _is_whole(value) or not param.low <= value <= param.high:
            raise SpecError(
                f"{show(value)} is not a whole number from {param.low} to {param.high}; "
                f"write e.g. {key} = {param.default or param.low}",
                field=field_name,
            )
        return value
    if param.kind == "ratio":
        if _finite(value) is None or value < 0:
            raise SpecError(
                f"{show(value)} is not a number >= 0; write e.g. {key} = {param.default} "
                "(per second)",
                field=field_name,
            )
        return float(value)
    if param.kind == "probability":
        return parse_probability(value, field_name)
    if param.kind == "threshold":  # RED's min and max count what the limit counts
        if in_bytes:
            return parse_size_bytes(value, field_name)
        if not _is_whole(value) or not 1 <= value <= MAX_QUEUE_PACKETS:
            raise SpecError(
                f"{show(value)} is not a packet count; this queue's limit is in packets, so {key} counts "
                f"packets: write a whole number, e.g. {key} = 100 (or give the limit in bytes to give sizes)",
                field=field_name,
            )
        return value
    raise AssertionError(param.kind)


_PROBABILITY_PERCENT_RE = re.compile(r"(\d+(?:\.\d+)?)%")
_PROBABILITY_EXAMPLES = '0.02 or "2%"'


def parse_probability(value: object, field_name: str) -> float:
    """A probability from 0 to 1: a number (0.02) or a percentage string ("2%")."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if _finite(value) is None or not 0 <= value <= 1:
            raise SpecError(
                f"{show(value)} is out of range; write a probability from 0 to 1, e.g. {_PROBABILITY_EXAMPLES}",
                field=field_name,
            )
        return float(value)
    if not isinstance(value, str):
        raise SpecError(f"{show(value)} is not a probability; write e.g. {_PROBABILITY_EXAMPLES}", field=field_name)
    squeezed = "".join(value.split())
    match = _PROBABILITY_PERCENT_RE.fullmatch(squeezed)
    if not match or squeezed != value:
        if match:
            fix = f"write {show(squeezed)}"
        else:
            fix = f"write a number from 0 to 1 or a percentage: {_PROBABILITY_EXAMPLES}"
        raise SpecError(f"{show(value)} is not a probability; {fix}", field=field_name)
    probability = Decimal(match[1]) / 100
    if probability > 1:
        raise SpecError(f'{show(value)} is over 100%; write a percentage from "0%" to "100%"', field=field_name)
    return float(probability)


def _check_queue(queue: QueueSpec, raw: dict[str, Any], base: str) -> None:
    """The rules between parameters, on the values the datapath will use (defaults included).
    An error names the first of the clashing keys the spec set: that is what the user can change."""
    params = queue.resolved(None)
    limit_key = "bytes" if queue.bytes is not None else "packets"

    def blame(*keys: str) -> str:
        return field_of(base, next((key for key in keys if key in raw), keys[-1]))

    def given(key: str, text: str, default: str = "the default") -> str:
        return text if key in raw else f"{text}, {default}"

    if queue.discipline in (DisciplineName.CODEL, DisciplineName.FQ_CODEL):
        target, interval = params.target_ns, params.interval_ns
        if target >= interval:
            raise SpecError(
                f"target ({given('target', _compact_ns(target))}) must be below interval "
                f"({given('interval', _compact_ns(interval))}); make target a small fraction of interval, "
                "typically 5-10%",
                field=blame("target", "interval"),
            )
    elif queue.discipline == DisciplineName.DUALPI2:
        if "step_thresh" in raw and "step_packets" in raw:
            raise SpecError(
                "set step_thresh (a sojourn time) or step_packets (an L-queue length), not both: the step "
                "threshold is one or the other",
                field=field_of(base, "step_packets"),
            )
    elif queue.discipline == DisciplineName.RED:
        unit = limit_key  # RED's thresholds count what the limit counts
        limit = queue.bytes if queue.bytes is not None else queue.packets
        min_, max_ = params.min, params.max
        if params.probability <= 0:
            raise SpecError(
                f"{show(raw['probability'])} is not above 0; probability is RED's drop probability at max, "
                f"from above 0 to 1, e.g. {_PROBABILITY_EXAMPLES}",
                field=field_of(base, "probability"),
            )
        if max_ > limit:
            raise SpecError(
                f"max ({_count(max_, unit)}) must be at most the queue limit ({_count(limit, unit)}); "
                f"lower max or raise {limit_key}",
                field=field_of(base, "max"),
            )
        if min_ < 1:  # only by default (a given min is positive): max / 3 rounds down to nothing
            raise SpecError(
                f"min defaults to max / 3, which is 0 {unit} here; set min and max, or raise the limit",
                field=blame("max", limit_key),
            )
        if min_ >= max_:
            raise SpecError(
                f"min ({given('min', _count(min_, unit), 'the default, max / 3')}) must be below "
                f"max ({given('max', _count(max_, unit), 'the default, limit / 4')}); lower min or raise max",
                field=blame("min", "max", limit_key),
            )


def _count(n: int, unit: str) -> str:
    """3 packets, 1 packet, 1 byte."""
    return f"{n} {unit if n != 1 else unit[:-1]}"


def _compact_ns(ns: int) -> str:
    """5_000_000 -> "5ms": a duration as it is written in a spec."""
    return format_duration_ns(ns).replace(" ", "")

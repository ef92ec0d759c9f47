"""Topology files: hosts, switches and links with their per-direction parameters, read from
TOML and validated into a Topology (specs/model.py). Every error is one line that names the
field and says the fix. testbed/network.py turns a Topology into namespaces and links.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from bloatlab.errors import SpecError, show
from bloatlab.specs.model import BACKENDS, QUEUE_AT, DirectionSpec, HostSpec, LinkSpec, QueueSpec, SwitchSpec, Topology
from bloatlab.specs.queues import parse_queue
from bloatlab.specs.reading import check_keys, congestion_control, field_of, load_toml, path_text
from bloatlab.specs.units import format_duration_ns, parse_duration_ns, parse_percent, parse_rate

NODE_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,9}")
LINK_NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,30}")
MAX_DELAY_NS = 10 * 10**9
MAX_TRACE_MS = (2**64 - 1) // 10**6  # a trace's timestamps, as the datapath's u64 nanoseconds hold them

TOPOLOGY_KEYS = ("seed", "cc", "hosts", "switches", "links")
HOST_KEYS = ("cc",)
SWITCH_KEYS = ("namespace",)
DIRECTION_KEYS = ("rate", "trace", "delay", "jitter", "loss", "queue")
LINK_KEYS = ("name", "ends", *DIRECTION_KEYS, "backend", "queue_at", "forward", "reverse")


def load_topology(path: str | Path) -> Topology:
    """Read and validate a topology TOML file. Trace paths are relative to its directory."""
    path = Path(path)
    data = load_toml(path)
    return parse_topology(data, base_dir=path.parent)


def parse_topology(data: dict[str, Any], where: str = "", base_dir: Path | None = None) -> Topology:
    """Validate a loaded topology table into a Topology.

    `where` prefixes every field name (where="topology" gives "topology.links[1].rate"), so a
    topology can be embedded in a larger file. Relative trace paths start at `base_dir`
    (default: the current directory).
    """
    base_dir = Path.cwd() if base_dir is None else base_dir
    if not isinstance(data, dict):
        raise SpecError("must be a table of hosts, switches and links", field=where or None)
    check_keys(data, TOPOLOGY_KEYS, where, "the topology")

    seed = data.get("seed", Topology.seed)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise SpecError(
            f"{show(seed)} is not a seed; write a whole number >= 0, e.g. seed = 1", field=field_of(where, "seed")
        )

    cc = congestion_control(data["cc"], field_of(where, "cc")) if "cc" in data else None
    hosts = _parse_nodes(data, "hosts", where)
    switches = _parse_nodes(data, "switches", where)
    for name in switches:
        if name in hosts:
            raise SpecError(
                f"{show(name)} is already a host; give the switch a name no host uses",
                field=field_of(field_of(where, "switches"), name),
            )
    if not hosts:
        raise SpecError("no hosts; declare at least one, e.g. [hosts.h1]", field=field_of(where, "hosts"))

    links_field = field_of(where, "links")
    raw_links = data.get("links", [])
    if not isinstance(raw_links, list):
        raise SpecError("must be an array of tables: write each link as a [[links]] table", field=links_field)
    nodes = [*hosts, *switches]
    links = []
    for index, raw in enumerate(raw_links):
        links.append(_parse_link(raw, field_of(links_field, index), nodes, base_dir))

    first_with_name: dict[str, int] = {}
    for index, link in enumerate(links):
        if link.name in first_with_name:
            default = "" if "name" in raw_links[index] else " (the default name from ends)"
            raise SpecError(
                f"{show(link.name)}{default} is already the name of links[{first_with_name[link.name]}]; "
                f'give each link a distinct name = "..."',
                field=field_of(field_of(links_field, index), "name"),
            )
        first_with_name[link.name] = index

    # A host is one namespace with one interface and one address: exactly one link.
    attached: dict[str, list[int]] = {name: [] for name in hosts}
    for index, link in enumerate(links):
        for end in link.ends:
            if end in attached:
                attached[end].append(index)
    for name, indexes in attached.items():
        field_name = field_of(field_of(where, "hosts"), name)
        if not indexes:
            raise SpecError(
                f"host {show(name)} has no link; connect it with a [[links]] table, "
                f'e.g. ends = ["{name}", "s0"]',
                field=field_name,
            )
        if len(indexes) > 1:
            listed = ", ".join(f"links[{i}]" for i in indexes)
            raise SpecError(
                f"host {show(name)} has {len(indexes)} links ({listed}); a host has one address, "
                "so give it exactly one link and join them through a switch",
                field=field_name,
            )

    return Topology(
        hosts={name: HostSpec(name, cc) for name, cc in hosts.items()},
        switches={name: SwitchSpec(name, namespace) for name, namespace in switches.items()},
        links=links,
        seed=seed,
        cc=cc,
    )


def _parse_nodes(data: dict[str, Any], kind: str, where: str) -> dict[str, Any]:
    """Host or switch names in file order, each with its congestion control if it is a host
    that names one: [hosts.h1] cc = "reno"; each switch with whether it keeps a namespace of its
    own: [switches.s0] namespace = true."""
    base = field_of(where, kind)
    singular = kind[:-1] if kind == "hosts" else "switch"
    raw = data.get(kind, {})
    if not isinstance(raw, dict):
        raise SpecError(
            f"must be a table of {kind}: write one [{kind}.NAME] table per {singular}", field=base
        )
    for name, table in raw.items():
        field_name = field_of(base, name)
        if not NODE_NAME_RE.fullmatch(name):
            lower = name.lower()
            guess = f' such as "{lower}"' if NODE_NAME_RE.fullmatch(lower) else ""
            raise SpecError(
                f"{show(name)} is not a valid {singular} name; use 1 to 10 characters{guess}: "
                'a lowercase letter, then lowercase letters, digits or "_" (node names become parts '
                "of Linux interface names, which are limited to 15 characters)",
                field=field_name,
            )
        if not isinstance(table, dict):
            raise SpecError(f"must be a table; write [{kind}.{name}]", field=field_name)
        check_keys(table, HOST_KEYS if kind == "hosts" else SWITCH_KEYS, field_name, f"a {singular}")
        if kind == "switches" and not isinstance(table.get("namespace", False), bool):
            raise SpecError(f"{show(table['namespace'])} is not true or false; write namespace = true to give the "
                            "switch a namespace with a Linux bridge (to run commands on it), or leave it out",
                            field=field_of(field_name, "namespace"))
    if kind == "switches":
        return {name: table.get("namespace", False) for name, table in raw.items()}
    return {name: congestion_control(table["cc"], field_of(field_of(base, name), "cc")) if "cc" in table else None
            for name, table in raw.items()}


def _parse_link(raw: object, base: str, nodes: list[str], base_dir: Path) -> LinkSpec:
    if not isinstance(raw, dict):
        raise SpecError("must be a table; write each link as a [[links]] table", field=base)
    check_keys(raw, LINK_KEYS, base, "a link")
    ends = _parse_ends(raw, base, nodes)

    if "name" in raw:
        name = raw["name"]
        if not isinstance(name, str) or not LINK_NAME_RE.fullmatch(name):
            raise SpecError(
                f"{show(name)} is not a valid link name; use 1 to 31 characters: a lowercase letter, "
                'then lowercase letters, digits, "_" or "-"',
                field=field_of(base, "name"),
            )
    else:
        name = "-".join(ends)

    backend = raw.get("backend", "auto")
    if backend not in BACKENDS:
        raise SpecError(
            f"{show(backend)} is not a backend; choose one of: {', '.join(BACKENDS)}",
            field=field_of(base, "backend"),
        )
    queue_at = raw.get("queue_at", "link")
    if queue_at not in QUEUE_AT:
        raise SpecError(f'{show(queue_at)} is not a place for the queue; choose "link" (between the ends, '
                        'as a router\'s) or "sender" (the sending node\'s own interface, kernel backend only)',
                        field=field_of(base, "queue_at"))
    if queue_at == "sender" and backend == "userspace":
        raise SpecError('"sender" needs backend = "kernel": the userspace datapath sits between the ends; '
                        'use backend = "kernel" or leave queue_at out', field=field_of(base, "queue_at"))

    common = _parse_params(raw, base, base_dir)
    directions = {}
    for which in ("forward", "reverse"):
        override_field = field_of(base, which)
        override = raw.get(which, {})
        if not isinstance(override, dict):
            raise SpecError(
                f'must be a table of overrides, e.g. {which} = {{ delay = "10ms" }}', field=override_field
            )
        check_keys(override, DIRECTION_KEYS, override_field, f"{which}")
        directions[which] = _direction(common, _parse_params(override, override_field, base_dir), which)
    return LinkSpec(
        name=name, ends=ends, forward=directions["forward"], reverse=directions["reverse"], backend=backend,
        queue_at=queue_at,
    )


def _parse_ends(raw: dict[str, Any], base: str, nodes: list[str]) -> tuple[str, str]:
    field_name = field_of(base, "ends")
    if "ends" not in raw:
        raise SpecError(
            'missing; say which two nodes the link joins, e.g. ends = ["h1", "s0"]', field=field_name
        )
    ends = raw["ends"]
    if not isinstance(ends, list) or len(ends) != 2:
        raise SpecError(
            f'{show(ends)} is not two node names; write e.g. ends = ["h1", "s0"]', field=field_name
        )
    for index, end in enumerate(ends):
        if end not in nodes:  # also catches non-strings
            raise SpecError(
                f"unknown node {show(end)}; the nodes are {', '.join(nodes)} "
                "(declare new ones as [hosts.NAME] or [switches.NAME])",
                field=field_of(field_name, index),
            )
    if ends[0] == ends[1]:
        raise SpecError(f"both ends are {show(ends[0])}; a link joins two different nodes", field=field_name)
    return ends[0], ends[1]


def _parse_params(table: dict[str, Any], base: str, base_dir: Path) -> dict[str, tuple[Any, str]]:
    """The direction parameters set in one table (link, forward or reverse): key -> (value, field)."""
    params: dict[str, tuple[Any, str]] = {}
    if "rate" in table and "trace" in table:
        raise SpecError(
            "set either rate or trace, not both: a trace replaces the rate (remove one of them)",
            field=field_of(base, "trace"),
        )
    for key in DIRECTION_KEYS:
        if key not in table:
            continue
        value, field_name = table[key], field_of(base, key)
        if key == "rate":
            parsed: Any = parse_rate(value, field_name)
        elif key == "trace":
            parsed = _parse_trace(value, field_name, base_dir)
        elif key == "delay":
            parsed = parse_duration_ns(value, field_name)
            if parsed > MAX_DELAY_NS:
                raise SpecError(
                    f'{show(value)} is longer than 10 s; write a delay of at most "10s"', field=field_name
                )
        elif key == "jitter":
            parsed = parse_duration_ns(value, field_name)
        elif key == "loss":
            parsed = parse_percent(value, field_name)
        else:
            parsed = parse_queue(value, field_name)
        params[key] = (parsed, field_name)
    return params


def _direction(
    common: dict[str, tuple[Any, str]], override: dict[str, tuple[Any, str]], which: str
) -> DirectionSpec:
    """Link-wide parameters with one direction's overrides on top."""
    merged = dict(common)
    if "rate" in override or "trace" in override:
        # rate and trace are one choice (what paces the direction): overriding either replaces both.
        merged.pop("rate", None)
        merged.pop("trace", None)
    merged.update(override)

    def value(key: str, default: Any) -> Any:
        return merged[key][0] if key in merged else default

    delay_ns, jitter_ns = value("delay", 0), value("jitter", 0)
    if jitter_ns > delay_ns:
        # Blame the most specific setting: the override that made them clash, if any.
        culprit = "delay" if "delay" in override and "jitter" not in override else "jitter"
        raise SpecError(
            f"in the {which} direction the jitter ({format_duration_ns(jitter_ns)}) is larger than the delay "
            f"({format_duration_ns(delay_ns)}); make jitter <= delay (the delay varies by +-jitter)",
            field=merged[culprit][1],
        )
    return DirectionSpec(
        rate_bps=value("rate", None),
        trace=value("trace", None),
        delay_ns=delay_ns,
        jitter_ns=jitter_ns,
        loss=value("loss", 0.0),
        queue=value("queue", QueueSpec()),
    )


def _parse_trace(value: object, field_name: str, base_dir: Path) -> Path:
    if not isinstance(value, str) or not value or "\0" in value:  # no file name holds a NUL
        raise SpecError(
            f"{show(value)} is not a trace path; write the path of a Mahimahi trace file relative to the "
            'topology file, e.g. "traces/att.up"',
            field=field_name,
        )
    path = (base_dir / value).resolve()
    check_trace(path, field_name)
    return path


def check_trace(path: Path, field_name: str) -> None:
    """Validate a Mahimahi trace: one non-negative integer millisecond timestamp per line, never
    decreasing, each line one 1504-byte delivery opportunity; it repeats after its last timestamp,
    so that must be > 0."""
    shown = path_text(path)
    if "\0" in str(path):  # no file name holds one (the OS refuses it)
        raise SpecError(f"{shown} is not a file name: it holds a NUL character", field=field_name)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SpecError(
            f"trace file {shown} not found (a relative trace path starts at the topology file's directory)",
            field=field_name,
        ) from None
    except IsADirectoryError:
        raise SpecError(
            f"{shown} is a directory; give the path of a Mahimahi trace file", field=field_name
        ) from None
    except OSError as error:
        raise SpecError(
            f"cannot read trace file {shown} ({error.strerror}); check its permissions", field=field_name
        ) from None
    if not raw:
        raise SpecError(
            f"trace file {shown} is empty; a Mahimahi trace has one millisecond timestamp per line",
            field=field_name,
        )
    lines = raw.split(b"\n")
    if lines[-1] == b"":  # the final newline ends the last line, it doesn't start a new one
        lines.pop()
    previous_ms = 0
    for number, line in enumerate(lines, start=1):
        if not line.isdigit():
            text = show(line.decode("utf-8", "replace"))
            problem = "is negative" if re.fullmatch(rb"-\d+", line) else "is not a timestamp"
            if not line:
                problem = "is empty"
            raise SpecError(
                f"trace file {shown} line {number}: {text} {problem}; each line must be one non-negative "
                "whole number of milliseconds",
                field=field_name,
            )
        digits = line.lstrip(b"0") or b"0"  # int() reads at most 4300 digits: a long line is refused first
        if len(digits) > len(str(MAX_TRACE_MS)) or int(digits) > MAX_TRACE_MS:
            raise SpecError(
                f"trace file {shown} line {number}: {digits[:20].decode()}{'...' if len(digits) > 20 else ''} is "
                f"too large; a timestamp is at most {MAX_TRACE_MS} ms (the datapath counts nanoseconds in 64 bits)",
                field=field_name,
            )
        ms = int(digits)
        if ms < previous_ms:
            raise SpecError(
                f"trace file {shown} line {number}: {ms} is less than the previous {previous_ms}; "
                "timestamps must never decrease (repeat a timestamp for several packets in one millisecond)",
                field=field_name,
            )
        previous_ms = ms
    if previous_ms == 0:
        raise SpecError(
            f"trace file {shown}: the last timestamp is 0, so the trace has no length; "
            "it repeats after its last timestamp, which must be > 0",
            field=field_name,
        )

"""A topology is data: hosts, switches and links with their per-direction parameters.

This module only describes and validates; `network.py` turns a Topology into namespaces,
veths and datapath processes.
"""

from __future__ import annotations

import difflib
import math
import re
import tomllib
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from bloatlab.errors import SpecError
from bloatlab.units import (
    format_duration_ns,
    parse_duration_ns,
    parse_percent,
    parse_rate,
    parse_size_bytes,
    show,
)

# Largest frame a 1500-byte-MTU Ethernet link carries (no FCS): what the queue and the
# serialiser count, as the kernel's htb and pfifo do.
MTU_FRAME_BYTES = 1514

BACKENDS = ("auto", "userspace", "kernel")
# Where a link's queue sits: "link", between the ends as in a router (both backends); or
# "sender", on the sending node's own interface as a NIC's queue is (kernel backend only).
QUEUE_AT = ("link", "sender")
DISCIPLINES = ("droptail", "drophead", "codel", "fq_codel", "red", "pie")
DISCIPLINE_ALIASES = {"taildrop": "droptail"}  # other names a discipline goes by -> its name here

_MS = 10**6

# Every queue parameter's default, by discipline, under its datapath JSON name; "packets" is the
# limit when the spec gives neither packets nor bytes. The Rust datapath holds the same table and
# fills in whatever a config leaves out; the kernel backend writes every value out to tc.
# None: derived from other values, see resolve_queue_params(). Sources in docs/queues.md.
QUEUE_DEFAULTS: dict[str, dict[str, Any]] = {
    "droptail": {"packets": 1000},  # Linux txqueuelen
    "drophead": {"packets": 1000},
    "codel": {  # Linux sch_codel, RFC 8289
        "packets": 1000, "target_ns": 5 * _MS, "interval_ns": 100 * _MS, "ecn": False,
        "mtu_bytes": MTU_FRAME_BYTES,  # not settable: below one frame of backlog CoDel never drops
    },
    "fq_codel": {  # Linux sch_fq_codel, RFC 8290
        "packets": 10240, "target_ns": 5 * _MS, "interval_ns": 100 * _MS, "ecn": True, "flows": 1024,
        "quantum_bytes": MTU_FRAME_BYTES, "memory_limit_bytes": 32 * 2**20, "drop_batch": 64,
    },
    "red": {  # Linux sch_red with tc's defaults, Floyd & Jacobson 1993
        "packets": 1000,
        "min": None,  # max / 3, in the limit's unit
        "max": None,  # limit / 4, in the limit's unit
        "avpkt_bytes": 1000,
        "burst_pkts": None,  # (2 * min_bytes + max_bytes) / (3 * avpkt_bytes), at least 1
        "probability": 0.02,
        "bandwidth_bps": None,  # the direction's rate; RED_IDLE_BANDWIDTH_BPS if it has none
        "ecn": False, "harddrop": False, "adaptive": False, "gentle": False,
    },
    "pie": {  # Linux sch_pie, RFC 8033
        "packets": 1000, "target_ns": 15 * _MS, "tupdate_ns": 15 * _MS, "alpha": 0.125, "beta": 1.25,
        "max_burst_ns": 150 * _MS, "ecn": False, "ecn_prob": 0.1, "bytemode": False,
        "dq_rate_estimator": False,
    },
}
RED_IDLE_BANDWIDTH_BPS = 10_000_000  # tc's red bandwidth when none is given


@dataclass(frozen=True)
class QueueParam:
    """One settable queue parameter: its TOML key, its datapath JSON name and how it is read."""

    key: str  # in the spec: queue = { target = "5ms" }
    json: str  # in the datapath config and QueueSpec.params: "target_ns"
    kind: str  # duration | size | rate | bool | count | ratio | probability | threshold
    low: int = 1  # count: smallest value
    high: int = 0  # count: largest value


def _params(*params: QueueParam) -> dict[str, QueueParam]:
    return {p.key: p for p in params}


_TARGET = QueueParam("target", "target_ns", "duration")
_INTERVAL = QueueParam("interval", "interval_ns", "duration")
_ECN = QueueParam("ecn", "ecn", "bool")
MAX_FQ_FLOWS = 65536
MAX_DROP_BATCH = 1024
MAX_QUEUE_PACKETS = 1_000_000
MAX_QUEUE_BYTES = 2**30
MAX_QUEUE_DURATION_NS = 10 * 10**9

# The parameters each discipline takes, besides discipline, packets and bytes, in doc order.
QUEUE_PARAMS: dict[str, dict[str, QueueParam]] = {
    "droptail": {},
    "drophead": {},
    "codel": _params(_TARGET, _INTERVAL, _ECN),
    "fq_codel": _params(
        _TARGET, _INTERVAL, _ECN,
        QueueParam("flows", "flows", "count", 1, MAX_FQ_FLOWS),
        QueueParam("quantum", "quantum_bytes", "size"),
        QueueParam("memory_limit", "memory_limit_bytes", "size"),
        QueueParam("drop_batch", "drop_batch", "count", 1, MAX_DROP_BATCH),
    ),
    "red": _params(
        QueueParam("min", "min", "threshold"),
        QueueParam("max", "max", "threshold"),
        QueueParam("avpkt", "avpkt_bytes", "size"),
        QueueParam("burst", "burst_pkts", "count", 1, MAX_QUEUE_PACKETS),
        QueueParam("probability", "probability", "probability"),
        QueueParam("bandwidth", "bandwidth_bps", "rate"),
        _ECN,
        QueueParam("harddrop", "harddrop", "bool"),
        QueueParam("adaptive", "adaptive", "bool"),
        QueueParam("gentle", "gentle", "bool"),
    ),
    "pie": _params(
        _TARGET,
        QueueParam("tupdate", "tupdate_ns", "duration"),
        QueueParam("alpha", "alpha", "ratio"),
        QueueParam("beta", "beta", "ratio"),
        QueueParam("max_burst", "max_burst_ns", "duration"),
        _ECN,
        QueueParam("ecn_prob", "ecn_prob", "probability"),
        QueueParam("bytemode", "bytemode", "bool"),
        QueueParam("dq_rate_estimator", "dq_rate_estimator", "bool"),
    ),
}
QUEUE_KEYS = ("discipline", "packets", "bytes")  # what every queue takes


@dataclass(frozen=True)
class QueueSpec:
    """The queue in front of a link direction's serialiser."""

    discipline: str = "droptail"  # one of DISCIPLINES
    packets: int | None = 1000  # limit in packets (exclusive with bytes); 1000 = Linux txqueuelen
    bytes: int | None = None  # limit in bytes of Ethernet frames
    # The discipline's parameters the spec set, under their datapath JSON names, in their units
    # ("target_ns": 5000000); the datapath fills in QUEUE_DEFAULTS for the rest.
    params: dict[str, Any] = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        """The datapath config's "queue" object (docs/datapath.md, docs/queues.md)."""
        return {"discipline": self.discipline, "packets": self.packets, "bytes": self.bytes, **self.params}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QueueSpec:
        """The inverse of to_dict()."""
        params = {key: value for key, value in data.items() if key not in QUEUE_KEYS}
        return cls(discipline=data["discipline"], packets=data.get("packets"), bytes=data.get("bytes"),
                   params=params)


def resolve_queue_params(queue: QueueSpec, rate_bps: int | None) -> dict[str, Any]:
    """Every parameter of the queue's discipline: what the spec set over QUEUE_DEFAULTS, with the
    derived defaults computed as the datapath computes them. `rate_bps` is the direction's rate."""
    resolved = {key: value for key, value in QUEUE_DEFAULTS[queue.discipline].items() if key != "packets"}
    resolved.update(queue.params)
    if queue.discipline == "red":
        resolved["min"], resolved["max"] = red_thresholds(queue)
        if resolved["burst_pkts"] is None:
            resolved["burst_pkts"] = red_default_burst(queue, resolved["min"], resolved["max"],
                                                       resolved["avpkt_bytes"])
        if resolved["bandwidth_bps"] is None:
            resolved["bandwidth_bps"] = rate_bps if rate_bps is not None else RED_IDLE_BANDWIDTH_BPS
    return resolved


def red_thresholds(queue: QueueSpec) -> tuple[int, int]:
    """RED's (min, max) in the limit's unit, tc's defaults for those not set: max = limit / 4,
    min = max / 3, in whole units (integer division, as tc computes them)."""
    limit = queue.bytes if queue.bytes is not None else queue.packets
    assert limit is not None
    max_ = queue.params.get("max", limit // 4)
    min_ = queue.params.get("min", max_ // 3)
    return min_, max_


def red_default_burst(queue: QueueSpec, min_: int, max_: int, avpkt_bytes: int) -> int:
    """tc's burst: (2 * min + max) / (3 * avpkt) with the thresholds in bytes, at least 1 packet.
    With a packet limit the thresholds count packets of avpkt bytes, so avpkt cancels out."""
    if queue.bytes is None:
        return max(1, (2 * min_ + max_) // 3)
    return max(1, (2 * min_ + max_) // (3 * avpkt_bytes))


@dataclass(frozen=True)
class DirectionSpec:
    """One direction of a link: arrival -> loss -> queue -> serialiser -> delay -> out."""

    rate_bps: int | None = None  # None: unlimited (no serialiser)
    trace: Path | None = None  # Mahimahi trace (exclusive with rate_bps)
    delay_ns: int = 0  # one-way propagation delay
    jitter_ns: int = 0  # uniform +-jitter on the delay, never reordering; <= delay_ns
    loss: float = 0.0  # random loss probability, 0 <= loss < 1
    queue: QueueSpec = field(default_factory=QueueSpec)

    @property
    def unlimited(self) -> bool:
        return self.rate_bps is None and self.trace is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate_bps": self.rate_bps,
            "trace_path": str(self.trace) if self.trace else None,
            "delay_ns": self.delay_ns,
            "jitter_ns": self.jitter_ns,
            "loss": self.loss,
            "queue": self.queue.to_dict(),
        }


@dataclass(frozen=True)
class HostSpec:
    name: str


@dataclass(frozen=True)
class SwitchSpec:
    name: str


@dataclass(frozen=True)
class LinkSpec:
    name: str  # default "a-b" from ends
    ends: tuple[str, str]
    forward: DirectionSpec  # ends[0] -> ends[1]
    reverse: DirectionSpec  # ends[1] -> ends[0]
    backend: str = "auto"  # one of BACKENDS
    queue_at: str = "link"  # one of QUEUE_AT

    def direction_name(self, which: str) -> str:
        """"s0->h2" style name of a direction, as results key it."""
        a, b = self.ends
        return f"{a}->{b}" if which == "forward" else f"{b}->{a}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ends": list(self.ends),
            "backend": self.backend,
            "queue_at": self.queue_at,
            "forward": {"direction": self.direction_name("forward"), **self.forward.to_dict()},
            "reverse": {"direction": self.direction_name("reverse"), **self.reverse.to_dict()},
        }


@dataclass(frozen=True)
class Topology:
    hosts: dict[str, HostSpec]  # in file order: host i (from 1) gets 10.0.0.i
    switches: dict[str, SwitchSpec]
    links: list[LinkSpec]
    seed: int = 1  # root of every link direction's random generator

    def address(self, host: str) -> str:
        return f"10.0.0.{list(self.hosts).index(host) + 1}"

    def node_names(self) -> list[str]:
        return [*self.hosts, *self.switches]

    def direction_seed(self, link_index: int, which: str) -> int:
        """A distinct, reproducible seed per link direction."""
        return (self.seed * 1_000_003 + link_index * 2 + (0 if which == "forward" else 1)) & (2**63 - 1)

    def to_dict(self) -> dict[str, Any]:
        """The resolved topology, JSON-ready, for results files: every default filled in,
        units in the key names, and the seed each link direction draws from."""
        links = []
        for index, link in enumerate(self.links):
            resolved = link.to_dict()
            for which in ("forward", "reverse"):
                resolved[which]["seed"] = self.direction_seed(index, which)
            links.append(resolved)
        return {
            "seed": self.seed,
            "hosts": [{"name": name, "address": self.address(name)} for name in self.hosts],
            "switches": [{"name": name} for name in self.switches],
            "links": links,
        }


# Parsing: TOML -> Topology. Every error is one line that names the field and says the fix.

# Node names become parts of Linux interface names ("h1-eth0"), which are at most 15 characters.
NODE_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,9}")
LINK_NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,30}")
MAX_DELAY_NS = 10 * 10**9

TOPOLOGY_KEYS = ("seed", "hosts", "switches", "links")
DIRECTION_KEYS = ("rate", "trace", "delay", "jitter", "loss", "queue")
LINK_KEYS = ("name", "ends", *DIRECTION_KEYS, "backend", "queue_at", "forward", "reverse")
_QUEUE_EXAMPLE = '{ discipline = "droptail", packets = 100 }'


def load_topology(path: str | Path) -> Topology:
    """Read and validate a topology TOML file. Trace paths are relative to its directory."""
    path = Path(path)
    data = load_toml(path)
    return parse_topology(data, base_dir=path.parent)


def load_toml(path: Path) -> dict[str, Any]:
    """A TOML file as a dict; any failure is a SpecError whose field is the file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SpecError("no such file; check the path", field=str(path)) from None
    except IsADirectoryError:
        raise SpecError("is a directory; give the path of a .toml file", field=str(path)) from None
    except OSError as error:
        raise SpecError(
            f"cannot read the file ({error.strerror}); check its permissions", field=str(path)
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise SpecError(f"line {line}: not UTF-8 text; save the file as UTF-8", field=str(path)) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SpecError(_toml_error_message(str(error)), field=str(path)) from None


def _toml_error_message(message: str) -> str:
    # tomllib (3.11) only puts the position into its message: "Invalid value (at line 3, column 8)".
    match = re.fullmatch(r"(.*) \(at (line \d+, column \d+|end of document)\)", message, re.DOTALL)
    what, where = (match[1], match[2]) if match else (message, None)
    if what.startswith(("Cannot overwrite", "Cannot declare", "Cannot mutate")):
        fix = "each key and each table may appear only once; remove or merge the repeated one"
    else:
        fix = "fix the TOML syntax (strings in double quotes, tables as [name], arrays of tables as [[name]])"
    text = f"invalid TOML: {what[:1].lower()}{what[1:]}; {fix}"
    if where == "end of document":
        where = "at the end of the file"
    return f"{where}: {text}" if where else text


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
        hosts={name: HostSpec(name) for name in hosts},
        switches={name: SwitchSpec(name) for name in switches},
        links=links,
        seed=seed,
    )


def field_of(base: str, key: str | int) -> str:
    """The field name of `key` inside `base`: "links" + 1 -> "links[1]", "links[1]" + "rate"."""
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else key


def check_keys(table: dict[str, Any], allowed: tuple[str, ...], base: str, what: str) -> None:
    for key in table:
        if key in allowed:
            continue
        if not allowed:
            raise SpecError(
                f"unknown key {show(key)}; {what} takes no keys, leave its table empty", field=field_of(base, key)
            )
        close = difflib.get_close_matches(key, allowed, n=1)
        guess = f"did you mean {show(close[0])}? " if close else ""
        raise SpecError(
            f"unknown key {show(key)} in {what}; {guess}allowed keys: {', '.join(allowed)}",
            field=field_of(base, key),
        )


def _parse_nodes(data: dict[str, Any], kind: str, where: str) -> list[str]:
    """Host or switch names in file order; each is an empty table, e.g. [hosts.h1]."""
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
        check_keys(table, (), field_name, f"a {singular}")
    return list(raw)


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
            parsed = _parse_queue(value, field_name)
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


def parse_queue(value: object, field_name: str) -> QueueSpec:
    """A queue table as a topology gives it ({"discipline": "codel", "target": "5ms", "packets": 1000})
    validated into a QueueSpec; errors name `field_name`.KEY. For tools outside topologies (replay)."""
    return _parse_queue(value, field_name)


def _parse_queue(value: object, base: str) -> QueueSpec:
    if not isinstance(value, dict):
        raise SpecError(f"{show(value)} is not a queue; write a table such as {_QUEUE_EXAMPLE}", field=base)
    discipline = _parse_discipline(value.get("discipline", "droptail"), field_of(base, "discipline"))
    value = _with_discipline_table(value, discipline, base)
    _check_queue_keys(value, discipline, base)
    packets, limit_bytes = _parse_limit(value, discipline, base)
    params = {
        param.json: _parse_queue_param(param, value[key], field_of(base, key), discipline, limit_bytes is not None)
        for key, param in QUEUE_PARAMS[discipline].items()
        if key in value
    }
    queue = QueueSpec(discipline=discipline, packets=packets, bytes=limit_bytes, params=params)
    _check_queue(queue, value, base)
    return queue


def _with_discipline_table(value: dict[str, Any], discipline: str, base: str) -> dict[str, Any]:
    """A queue may hold a table per discipline (`red = { min = 15, max = 45 }`) whose keys apply
    only when that discipline is the one chosen, so one spec can sweep disciplines with each
    tuned. The chosen one's keys override the queue's own."""
    merged = {k: v for k, v in value.items() if k not in DISCIPLINES and k not in DISCIPLINE_ALIASES}
    for name in value.keys() & {*DISCIPLINES, *DISCIPLINE_ALIASES}:
        table = value[name]
        if not isinstance(table, dict):
            raise SpecError(f"{show(table)} is not a table of {name} settings; write {name} = {{ ... }}",
                            field=field_of(base, name))
        if DISCIPLINE_ALIASES.get(name, name) == discipline:
            if "discipline" in table or "packets" in table or "bytes" in table:
                raise SpecError("set discipline and the limit on the queue itself, not per discipline",
                                field=field_of(base, name))
            merged.update(table)
    return merged


def _parse_discipline(value: object, field_name: str) -> str:
    if isinstance(value, str) and value in DISCIPLINE_ALIASES:
        return DISCIPLINE_ALIASES[value]
    if isinstance(value, str) and value in DISCIPLINES:
        return value
    close = difflib.get_close_matches(value, DISCIPLINES, n=1) if isinstance(value, str) else []
    guess = f"did you mean {show(close[0])}? " if close else ""
    raise SpecError(
        f"{show(value)} is not a queue discipline; {guess}choose one of: {', '.join(DISCIPLINES)}",
        field=field_name,
    )


def _check_queue_keys(value: dict[str, Any], discipline: str, base: str) -> None:
    """Only the keys of this discipline; a key another discipline takes is named as such."""
    allowed = (*QUEUE_KEYS, *QUEUE_PARAMS[discipline])
    for key in value:
        owners = [d for d in DISCIPLINES if key in QUEUE_PARAMS[d]]
        if key not in allowed and owners:
            raise SpecError(
                f"{discipline} has no {key}; its keys are: {', '.join(allowed)} "
                f"({key} belongs to {', '.join(owners)})",
                field=field_of(base, key),
            )
    check_keys(value, allowed, base, f"a {discipline} queue")


def _parse_limit(value: dict[str, Any], discipline: str, base: str) -> tuple[int | None, int | None]:
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
    packets = value.get("packets", QUEUE_DEFAULTS[discipline]["packets"])
    if not _is_whole(packets) or not 1 <= packets <= MAX_QUEUE_PACKETS:
        raise SpecError(
            f"{show(packets)} is not a queue length; write a whole number of packets from 1 to "
            f"{MAX_QUEUE_PACKETS}, e.g. packets = 100",
            field=field_of(base, "packets"),
        )
    return packets, None


def _is_whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_queue_param(param: QueueParam, value: object, field_name: str, discipline: str, in_bytes: bool) -> Any:
    """One discipline parameter in its datapath unit; RED's thresholds are bytes when `in_bytes`
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
            raise SpecError(
                f"{show(value)} is not a rate here; RED ages its average queue over idle time at this rate: "
                'write one such as "10mbit", or leave bandwidth out to use the link\'s rate',
                field=field_name,
            )
        return bps
    if param.kind == "bool":
        if not isinstance(value, bool):
            raise SpecError(f"{show(value)} is not true or false; write {key} = true or {key} = false",
                            field=field_name)
        return value
    if param.kind == "count":
        if not _is_whole(value) or not param.low <= value <= param.high:
            raise SpecError(
                f"{show(value)} is not a whole number from {param.low} to {param.high}; "
                f"write e.g. {key} = {QUEUE_DEFAULTS[discipline].get(param.json) or param.low}",
                field=field_name,
            )
        return value
    if param.kind == "ratio":
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
            raise SpecError(
                f"{show(value)} is not a number >= 0; write e.g. {key} = {QUEUE_DEFAULTS['pie'][param.json]} "
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
        if not math.isfinite(value) or not 0 <= value <= 1:
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
    params = resolve_queue_params(queue, None)
    limit_key = "bytes" if queue.bytes is not None else "packets"

    def blame(*keys: str) -> str:
        return field_of(base, next((key for key in keys if key in raw), keys[-1]))

    def given(key: str, text: str, default: str = "the default") -> str:
        return text if key in raw else f"{text}, {default}"

    if queue.discipline in ("codel", "fq_codel"):
        target, interval = params["target_ns"], params["interval_ns"]
        if target >= interval:
            raise SpecError(
                f"target ({given('target', _compact_ns(target))}) must be below interval "
                f"({given('interval', _compact_ns(interval))}); make target a small fraction of interval, "
                "typically 5-10%",
                field=blame("target", "interval"),
            )
    elif queue.discipline == "red":
        unit = limit_key  # RED's thresholds count what the limit counts
        limit = queue.bytes if queue.bytes is not None else queue.packets
        min_, max_ = params["min"], params["max"]
        if params["probability"] <= 0:
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


def _parse_trace(value: object, field_name: str, base_dir: Path) -> Path:
    if not isinstance(value, str) or not value:
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
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SpecError(
            f"trace file {path} not found (a relative trace path starts at the topology file's directory)",
            field=field_name,
        ) from None
    except IsADirectoryError:
        raise SpecError(
            f"{path} is a directory; give the path of a Mahimahi trace file", field=field_name
        ) from None
    except OSError as error:
        raise SpecError(
            f"cannot read trace file {path} ({error.strerror}); check its permissions", field=field_name
        ) from None
    if not raw:
        raise SpecError(
            f"trace file {path} is empty; a Mahimahi trace has one millisecond timestamp per line",
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
                f"trace file {path} line {number}: {text} {problem}; each line must be one non-negative "
                "whole number of milliseconds",
                field=field_name,
            )
        ms = int(line)
        if ms < previous_ms:
            raise SpecError(
                f"trace file {path} line {number}: {ms} is less than the previous {previous_ms}; "
                "timestamps must never decrease (repeat a timestamp for several packets in one millisecond)",
                field=field_name,
            )
        previous_ms = ms
    if previous_ms == 0:
        raise SpecError(
            f"trace file {path}: the last timestamp is 0, so the trace has no length; "
            "it repeats after its last timestamp, which must be > 0",
            field=field_name,
        )

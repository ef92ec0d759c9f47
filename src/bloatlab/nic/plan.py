"""A nic sweep as data: which interface, which server, which knob values, how long, how often.

From the command line (`--txqueuelen 1,10,100`) or from a TOML file with the same fields:

    iface = "eth0"
    server = "192.0.2.7"
    netns = "lab"                 # optional: the client side runs in this namespace
    repeat = 5
    duration = "50s"
    udp_rate = "10gbit"
    [axes]
    txqueuelen = [1, 10, 100, 1000]
    offloads = ["on", "off"]

Every value is checked here, before the machine is touched; errors name the field
(`--txqueuelen`, or `axes.txqueuelen[2]` in a file).
"""

from __future__ import annotations

import argparse

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bloatlab.errors import SpecError, show
from bloatlab.nic.knobs import BQL_MAX, QDISC_KINDS, TXQUEUELEN_MAX, TXQUEUELEN_MIN, Iface
from bloatlab.specs.reading import check_keys, field_of, load_toml
from bloatlab.specs.units import format_rate, parse_duration_ns, parse_rate

# Knobs in the order their axes nest on the command line (the first varies slowest).
KNOBS = ("qdisc", "offloads", "bql_limit_max", "bql_limit_min", "txqueuelen")
# Each knob in a few words, for the axes and titles of a sweep's figures.
KNOB_LABELS = {"qdisc": "root qdisc", "offloads": "segmentation offloads", "bql_limit_max": "BQL limit_max, bytes",
               "bql_limit_min": "BQL limit_min, bytes", "txqueuelen": "transmit queue length, packets"}
DEFAULT_OFFLOAD_FEATURES = ("gso", "tso", "gro", "sg")
DEFAULT_PORT = 5201
SPEC_KEYS = ("iface", "server", "netns", "port", "repeat", "duration", "udp_rate", "ping_interval",
             "offload_features", "tests", "axes")
TESTS = ("tcp", "udp")
IFNAME_RE = re.compile(r"[^\s/:]{1,15}")
MAX_TIME_NS = 24 * 3600 * 10**9  # a test's duration and the ping's interval: at most a day


@dataclass
class NicPlan:
    iface: Iface
    server: str
    port: int = DEFAULT_PORT
    knobs: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # knob -> values, in nesting order
    offload_features: tuple[str, ...] = DEFAULT_OFFLOAD_FEATURES
    repeat: int = 5
    duration_s: int = 50
    udp_rate_bps: int = 10 * 10**9
    ping_interval_s: float = 0.2  # 0: no ping
    tests: tuple[str, ...] = TESTS
    source: str = "command line"
    fields: dict[str, str] = field(default_factory=dict)  # knob -> the field to blame in errors

    @property
    def axes(self) -> list[tuple[str, tuple[Any, ...]]]:
        """Knobs with more than one value: the sweep's axes."""
        return [(k, v) for k, v in self.knobs.items() if len(v) > 1]

    @property
    def fixed_knobs(self) -> dict[str, Any]:
        return {k: v[0] for k, v in self.knobs.items() if len(v) == 1}

    def fixed(self) -> dict[str, str]:
        """What every run shares, as text (sweep.json "fixed"; a resume must match it)."""
        out = {"iface": self.iface.name, "server": self.server, "port": str(self.port),
               "duration": f"{self.duration_s}s", "tests": ",".join(self.tests),
               "ping_interval": f"{self.ping_interval_s:g}s"}
        if self.iface.netns:
            out["netns"] = self.iface.netns
        if "udp" in self.tests:
            out["udp_rate"] = format_rate(self.udp_rate_bps).replace(" ", "").replace("/s", "").lower()
        if "offloads" in self.knobs:
            out["offload_features"] = ",".join(self.offload_features)
        out.update({k: str(v) for k, v in self.fixed_knobs.items()})
        return out

    @property
    def run_s(self) -> float:
        """One run's time, roughly: each test, and settling."""
        return len(self.tests) * (self.duration_s + 1.5) + 2


# Values ---------------------------------------------------------------------------------------

def _whole(value: object, where: str, low: int, high: int, what: str) -> int:
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,30}", value.strip()):  # int() takes at most 4300 digits
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{show(value)} is not {what}; write a whole number from {low} to {high}", field=where)
    if not low <= value <= high:
        raise SpecError(f"{value} is out of range; {what} is a whole number from {low} to {high}", field=where)
    return value


def parse_knob(knob: str, value: object, where: str) -> Any:
    if knob == "txqueuelen":
        return _whole(value, where, TXQUEUELEN_MIN, TXQUEUELEN_MAX, "a txqueuelen (packets)")
    if knob in ("bql_limit_max", "bql_limit_min"):
        return _whole(value, where, 0, BQL_MAX, "a Byte Queue Limit (bytes)")
    if knob == "offloads":
        if value in ("on", "off"):
            return value
        raise SpecError(f"{show(value)} is not an offload setting; write on or off", field=where)
    if knob == "qdisc":
        if value in QDISC_KINDS:
            return value
        raise SpecError(f"{show(value)} is not a root qdisc bloatlab sets; write one of {', '.join(QDISC_KINDS)}",
                        field=where)
    raise AssertionError(knob)


def parse_list(text: str, knob: str, flag: str) -> tuple[Any, ...]:
    """'1,10,100' -> (1, 10, 100), each value checked; a value given twice is an error."""
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise SpecError(f"{text!r} has an empty value; write values separated by commas, e.g. 1,10,100", field=flag)
    values = tuple(parse_knob(knob, item, flag) for item in items)
    return _distinct(values, flag)


def _distinct(values: tuple[Any, ...], where: str) -> tuple[Any, ...]:
    seen = set()
    for v in values:
        if v in seen:
            raise SpecError(f"{show(v)} is given twice", field=where)
        seen.add(v)
    return values


def check_iface_name(name: object, where: str) -> str:
    if not isinstance(name, str) or not IFNAME_RE.fullmatch(name):
        raise SpecError(f"{show(name)} is not an interface name (1 to 15 characters, no spaces, / or :), "
                        "e.g. eth0", field=where)
    return name


def _server(value: object, where: str) -> str:
    if not isinstance(value, str) or not value or value.startswith("-") or any(c.isspace() for c in value):
        raise SpecError(f"{show(value)} is not a host; write the iperf3 server's name or address, e.g. 192.0.2.7",
                        field=where)
    return value


def _features(value: object, where: str) -> tuple[str, ...]:
    items = [v.strip() for v in value.split(",")] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items or not all(isinstance(v, str) and v for v in items):
        raise SpecError(f"{show(value)} is not a list of offloads; write e.g. gso,tso,gro,sg", field=where)
    return _distinct(tuple(items), where)


def _tests(value: object, where: str) -> tuple[str, ...]:
    items = [v.strip() for v in value.split(",")] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items or any(v not in TESTS for v in items):
        raise SpecError(f"{show(value)} is not a list of tests; write tcp, udp or tcp,udp", field=where)
    return _distinct(tuple(items), where)


def _duration_s(value: object, where: str) -> int:
    ns = parse_duration_ns(value, where, allow_zero=False)
    if ns > MAX_TIME_NS:
        raise SpecError(f'{show(value)} is longer than a day; write at most "86400s"', field=where)
    if ns % 10**9:
        raise SpecError(f"{show(value)} is not whole seconds (iperf3 runs whole seconds); write e.g. \"50s\"",
                        field=where)
    return ns // 10**9


def _ping_interval_s(value: object, where: str) -> float:
    ns = parse_duration_ns(value, where)
    if ns > MAX_TIME_NS:
        raise SpecError(f'{show(value)} is longer than a day; write at most "86400s", or 0 for no ping', field=where)
    if ns and ns < 10**7:
        raise SpecError(f"{show(value)} is too short; ping at most every 10ms, or 0 for no ping", field=where)
    return ns / 1e9


def _udp_rate(value: object, where: str) -> int:
    bps = parse_rate(value, where)
    if bps is None:
        raise SpecError('UDP needs a target rate; write e.g. "10gbit"', field=where)
    return bps


# The two ways in ------------------------------------------------------------------------------

# What --repeat, --duration, ... (and their keys in a spec file) are when not given.
MEASURE_DEFAULTS = {"repeat": 5, "duration": "50s", "udp_rate": "10gbit", "tests": "tcp,udp",
                    "ping_interval": "200ms"}


def plan_from_args(args: Any) -> NicPlan:
    """From `bloatlab nic sweep` flags (argparse has made --iface and --server required)."""
    iface = Iface(check_iface_name(args.iface, "--iface"), args.netns)
    plan = NicPlan(iface=iface, server=_server(args.server, "--server"))
    plan.port = _whole(DEFAULT_PORT if args.port is None else args.port, "--port", 1, 65535, "a port")
    given = {k: getattr(args, k) for k in MEASURE_DEFAULTS}
    args = argparse.Namespace(**{**vars(args), **{k: MEASURE_DEFAULTS[k] if v is None else v for k, v in given.items()}})
    for knob in KNOBS:
        text = getattr(args, knob)
        if text is not None:
            flag = "--" + knob.replace("_", "-")
            plan.knobs[knob] = parse_list(text, knob, flag)
            plan.fields[knob] = flag
    if args.offload_features is not None:
        plan.offload_features = _features(args.offload_features, "--offload-features")
    plan.repeat = _whole(args.repeat, "--repeat", 1, 1000, "a number of repetitions")
    plan.duration_s = _duration_s(args.duration, "--duration")
    plan.udp_rate_bps = _udp_rate(args.udp_rate, "--udp-rate")
    plan.ping_interval_s = _ping_interval_s(args.ping_interval, "--ping-interval")
    plan.tests = _tests(args.tests, "--tests")
    return plan


def load_plan(path: Path) -> NicPlan:
    """From a TOML file."""
    data = load_toml(path)
    check_keys(data, SPEC_KEYS, "", "a nic sweep")
    for key, example in (("iface", 'its interface, e.g. iface = "eth0"'),
                         ("server", 'its iperf3 server, e.g. server = "192.0.2.7"')):
        if key not in data:
            raise SpecError(f"missing; a nic sweep names {example}", field=key)
    netns_name = data.get("netns")
    if netns_name is not None and (not isinstance(netns_name, str) or not netns_name):
        raise SpecError(f"{show(netns_name)} is not a namespace name", field="netns")
    plan = NicPlan(iface=Iface(check_iface_name(data["iface"], "iface"), netns_name),
                   server=_server(data["server"], "server"), source=str(path))
    plan.port = _whole(data.get("port", DEFAULT_PORT), "port", 1, 65535, "a port")
    plan.repeat = _whole(data.get("repeat", MEASURE_DEFAULTS["repeat"]), "repeat", 1, 1000, "a number of repetitions")
    plan.duration_s = _duration_s(data.get("duration", MEASURE_DEFAULTS["duration"]), "duration")
    plan.udp_rate_bps = _udp_rate(data.get("udp_rate", MEASURE_DEFAULTS["udp_rate"]), "udp_rate")
    plan.ping_interval_s = _ping_interval_s(data.get("ping_interval", MEASURE_DEFAULTS["ping_interval"]),
                                            "ping_interval")
    plan.tests = _tests(data.get("tests", list(TESTS)), "tests")
    if "offload_features" in data:
        plan.offload_features = _features(data["offload_features"], "offload_features")
    axes = data.get("axes", {})
    if not isinstance(axes, dict):
        raise SpecError("is not a table; write [axes] with e.g. txqueuelen = [1, 10, 100]", field="axes")
    check_keys(axes, KNOBS, "axes", "axes")
    for knob, raw in axes.items():
        where = field_of("axes", knob)
        items = raw if isinstance(raw, list) else [raw]
        if not items:
            raise SpecError("is empty; give at least one value", field=where)
        plan.knobs[knob] = _distinct(tuple(parse_knob(knob, v, field_of(where, i) if isinstance(raw, list) else where)
                                           for i, v in enumerate(items)), where)
        plan.fields[knob] = where
    return plan

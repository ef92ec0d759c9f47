"""An experiment's [[workloads]]: each table checked against its kind and the topology into a
typed workload (specs/model.py), on the experiment's schedule. bloatlab.experiment runs them."""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from bloatlab.errors import SpecError, show
from bloatlab.specs.dscp import parse_dscp, parse_ecn
from bloatlab.specs.model import (DEFAULT_WEB_SIZE_BYTES, DIRECTIONS, WORKLOAD_KINDS, Bulk, Irtt, Ping, Responsiveness,
                                 Topology, Udp, Web, Workload)
from bloatlab.specs.reading import NAME_RE, check_keys, congestion_control, field_of
from bloatlab.specs.units import parse_duration_ns, parse_rate, parse_size_bytes

DEFAULT_CC = "cubic"  # a TCP workload's, where neither it nor its sending host names one
# Congestion controls both ends of a connection must run: DCTCP, for its ECN handshake (its SYN is
# ECT, which Linux accepts only where the listener's congestion control needs ECN) and its
# receiver's CE echo. iperf3 and curl choose one only once connected (or never), so the testbed
# gives every TCP connection between the two hosts that congestion control by their routes
# (experiment.running.route_congestion_control): every TCP workload between them must use it.
BOTH_ENDS_CCS = frozenset({"dctcp"})
# Congestion controls that negotiate ECN and answer CE as a scalable one does (RFC 9331): a bulk
# flow of theirs may carry ECT(1), the L4S identifier (`ecn = "ect1"`). This kernel's TCP sends
# ECT(0) for them, so the datapath sets it where the flow enters (docs/experiments.md).
SCALABLE_CCS = frozenset({"dctcp"})
MIN_PING_INTERVAL_NS = 10 * 10**6  # what the issue promises; ping itself goes lower as root
MIN_IRTT_INTERVAL_NS = 10**6  # below 1 ms the probes are load (the server is started with no floor)
MIN_RESPONSIVENESS_NS = 10 * 10**9  # idle probes, then MAD (4) intervals to saturate and MAD to be stable
# A bulk table's `count`: that many flows, each its own connection, iperf3 pair, port and results.
# The bound keeps a slip (count = 1000) from starting thousands of processes.
MAX_FLOW_COUNT = 64
COMMON_WORKLOAD_KEYS = ("kind", "name", "start", "stop", "enabled")
SWITCHES = {True: True, False: False, "on": True, "off": False, "true": True, "false": False,
            "yes": True, "no": False}
WORKLOAD_KEYS = {
    "bulk": ("from", "to", "cc", "buffer", "dscp", "ecn", "count"),
    "udp": ("from", "to", "rate", "dscp"),
    "ping": ("from", "to", "interval", "dscp", "ecn"),
    "irtt": ("from", "to", "interval", "dscp", "ecn"),
    "web": ("server", "client", "size", "every", "count", "timeout", "cc"),
    "responsiveness": ("server", "client", "direction", "cc"),
}


def parse_workloads(raw: object, topology: Topology, duration_ns: int) -> list[Workload]:
    """The [[workloads]] array: every table, a disabled one included, is checked; the enabled
    ones are returned in the spec's order."""
    if not isinstance(raw, list):
        raise SpecError("must be an array of tables: write each as [[workloads]]", field="workloads")
    kinds = [w.get("kind") if isinstance(w, dict) else None for w in raw]
    workloads: list[Workload] = []
    seen: dict[str, str] = {}  # flow names, of disabled workloads too -> what they name, for errors
    for index, table in enumerate(raw):
        where = field_of("workloads", index)
        if not isinstance(table, dict):
            raise SpecError("must be a table; write each workload as [[workloads]]", field=where)
        kind = table.get("kind")
        if kind is None:
            raise SpecError(f"missing; say what the workload is: kind = one of {', '.join(WORKLOAD_KINDS)}",
                            field=field_of(where, "kind"))
        if kind not in WORKLOAD_KINDS:
            close = difflib.get_close_matches(str(kind), WORKLOAD_KINDS, n=1)
            guess = f"did you mean {show(close[0])}? " if close else ""
            raise SpecError(f"{show(kind)} is not a workload kind; {guess}choose one of: {', '.join(WORKLOAD_KINDS)}",
                            field=field_of(where, "kind"))
        if "count" in table and "count" not in WORKLOAD_KEYS[kind]:
            raise SpecError(f"a {kind} workload takes no count (count = N makes N flows of a bulk workload); write a "
                            f"[[workloads]] table for each {kind}", field=field_of(where, "count"))
        check_keys(table, COMMON_WORKLOAD_KEYS + WORKLOAD_KEYS[kind], where, f"a {kind} workload")
        default_name = kind if kinds.count(kind) == 1 else f"{kind}{kinds[:index + 1].count(kind)}"
        name = table.get("name", default_name)
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            raise SpecError(f"{show(name)} is not a valid workload name; use a lowercase letter, then up "
                            'to 30 lowercase letters, digits, "_" or "-"', field=field_of(where, "name"))
        names = _flow_names(table, kind, name, where)
        for flow in dict.fromkeys([name, *names]):  # a counted table's name too: its flows' group
            if flow in seen:
                raise SpecError(f"{show(flow)} already names {seen[flow]}; give each a distinct name"
                                + (f" (this workload's count names its flows {names[0]} to {names[-1]})"
                                   if flow != name else ""), field=field_of(where, "name"))
            seen[flow] = "an earlier workload" if flow == name else f"a flow of {name} ({where}, count = {len(names)})"
        start = parse_duration_ns(table.get("start", "0s"), field_of(where, "start"))
        stop = _stop(table, where, duration_ns)
        if stop > duration_ns:
            raise SpecError(f"{show(table['stop'])} is after the end of the run; stop at most at the duration",
                            field=field_of(where, "stop"))
        if start >= stop:
            raise SpecError("the workload must start before it stops (and before the run ends)",
                            field=field_of(where, "start"))
        common = dict(name=name, kind=kind, start_ns=start, stop_ns=stop, index=index)
        workload = _KIND_PARSERS[kind](table, where, topology, common)
        # A count makes separate flows, each with the table's index (errors name the table).
        flows = [workload] if names == [name] else [dataclasses.replace(workload, name=flow, group=name)
                                                   for flow in names]
        # `enabled = "{load}"` lets a parameter switch a workload on and off (with and without
        # a competing flow); a disabled workload is still checked.
        enabled = table.get("enabled", True)
        if isinstance(enabled, str):
            enabled = enabled.strip().lower()
        if isinstance(enabled, (list, dict)) or enabled not in SWITCHES:
            raise SpecError(f"{show(table['enabled'])} is not on or off; write true, false, \"on\" or \"off\"",
                            field=field_of(where, "enabled"))
        if SWITCHES[enabled]:
            workloads += flows
    tests = [w for w in workloads if isinstance(w, Responsiveness)]
    if len(tests) > 1:
        raise SpecError("a run holds one responsiveness test; its result is the run's RPM",
                        field=field_of(field_of("workloads", tests[1].index), "kind"))
    for test in tests:
        for w in workloads:
            sender = (w.src, w.dst) if isinstance(w, Bulk) else (w.server, w.client) if isinstance(w, Web) else None
            if test.cc and sender == (test.server, test.client) and w.cc != test.cc:
                raise SpecError(f"the responsiveness test gives every TCP connection from {test.server} to "
                                f"{test.client} its cc ({test.cc}); use that cc here too, or another pair of hosts",
                                field=field_of(field_of("workloads", w.index), "cc"))
    _check_both_ends(workloads)
    _check_ect1(workloads)
    web_cc: dict[str, str] = {}
    for w in workloads:
        if isinstance(w, Web) and web_cc.setdefault(w.server, w.cc) != w.cc:
            raise SpecError(f"another web workload on {w.server} uses {web_cc[w.server]}; a host's web "
                            "servers share one congestion control", field=field_of(field_of("workloads", w.index), "cc"))
    return workloads


def tcp_ends(w: Workload) -> tuple[str, str, str | None] | None:
    """A TCP workload's two hosts, sender first, with its congestion control (a responsiveness
    test's may be None: each host's default); None for a workload that is not TCP."""
    if isinstance(w, Bulk):
        return w.src, w.dst, w.cc
    if isinstance(w, (Web, Responsiveness)):
        return w.server, w.client, w.cc
    return None


def _check_both_ends(workloads: list[Workload]) -> None:
    """A pair of hosts one of whose TCP workloads runs a BOTH_ENDS_CCS congestion control runs it
    for every TCP connection between them: every other TCP workload between them must ask for it."""
    path_cc: dict[frozenset[str], tuple[str, Workload]] = {}
    for w in workloads:
        ends = tcp_ends(w)
        if ends is not None and ends[2] in BOTH_ENDS_CCS:
            path_cc.setdefault(frozenset(ends[:2]), (ends[2], w))
    for w in workloads:
        ends = tcp_ends(w)
        if ends is None or frozenset(ends[:2]) not in path_cc:
            continue
        cc, first = path_cc[frozenset(ends[:2])]
        if ends[2] != cc:
            a, b, _ = tcp_ends(first) or ends
            raise SpecError(f"{first.name} runs {cc} between {a} and {b}, and so does every TCP connection "
                            f"between them ({cc} needs both ends: bloatlab sets it on their routes); use cc = "
                            f'"{cc}" here too, or another pair of hosts',
                            field=field_of(field_of("workloads", w.index), "cc"))


def _check_ect1(workloads: list[Workload]) -> None:
    """ECT(1) is set on every TCP packet from a bulk flow's sender to its receiver (the datapath
    matches their addresses): another bulk flow on that path must ask for it too, so that what
    its spec says is what it gets."""
    first: dict[tuple[str, str], Bulk] = {}
    for w in workloads:
        if isinstance(w, Bulk) and w.ecn == "ect1":
            first.setdefault((w.src, w.dst), w)
    for w in workloads:
        if isinstance(w, Bulk) and w.ecn != "ect1" and (w.src, w.dst) in first:
            raise SpecError(f'{first[w.src, w.dst].name} has ecn = "ect1", and the datapath sets ECT(1) on every '
                            f'TCP packet from {w.src} to {w.dst}; write ecn = "ect1" here too, or use another pair of '
                            'hosts',
                            field=field_of(field_of("workloads", w.index), "ecn"))


def _flow_names(table: dict[str, Any], kind: str, name: str, where: str) -> list[str]:
    """The names of the flows a table makes: its own name, or with a bulk workload's count N > 1
    NAME-1 .. NAME-N (each a flow in the results; a count of 1 keeps the name)."""
    if kind != "bulk":
        return [name]  # a web workload's count is its fetches per round
    count = table.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_FLOW_COUNT:
        raise SpecError(f"{show(count)} is not a flow count; write a whole number from 1 to {MAX_FLOW_COUNT}",
                        field=field_of(where, "count"))
    if count == 1:
        return [name]
    names = [f"{name}-{i}" for i in range(1, count + 1)]
    if not NAME_RE.fullmatch(names[-1]):
        raise SpecError(f"{show(name)} is too long for count = {count}: its flows are named {name}-1 to {names[-1]}, "
                        f"and a flow's name has at most 31 characters; shorten the name", field=field_of(where, "name"))
    return names


def _stop(table: dict[str, Any], where: str, duration_ns: int) -> int:
    """When a workload stops: the run's end unless given; "-5s" is 5 s before the end, so a
    spec can keep an idle tail whatever its duration."""
    if "stop" not in table:
        return duration_ns
    text = table["stop"]
    if isinstance(text, str) and text.strip().startswith("-"):
        before = parse_duration_ns(text.strip()[1:], field_of(where, "stop"))
        if before >= duration_ns:
            raise SpecError(f"{show(text)} is before the run starts; the run lasts {duration_ns / 1e9:g} s",
                            field=field_of(where, "stop"))
        return duration_ns - before
    return parse_duration_ns(text, field_of(where, "stop"))


def _host(table: dict[str, Any], key: str, where: str, topology: Topology) -> str:
    if key not in table:
        raise SpecError(f"missing; name a host ({', '.join(topology.hosts)})", field=field_of(where, key))
    host = table[key]
    if not isinstance(host, str) or host not in topology.hosts:
        raise SpecError(f"unknown host {show(host)}; the hosts are {', '.join(topology.hosts)}",
                        field=field_of(where, key))
    return host


def _two_hosts(table, where, topology, a: str, b: str) -> tuple[str, str]:
    first, second = _host(table, a, where, topology), _host(table, b, where, topology)
    if first == second:
        raise SpecError(f"{a} and {b} are both {show(first)}; use two different hosts", field=field_of(where, b))
    return first, second


def _whole_seconds(common: dict[str, Any], where: str) -> None:
    # iperf3 -t takes whole seconds (it truncates 1.5 to 1).
    if (common["stop_ns"] - common["start_ns"]) % 10**9:
        raise SpecError("an iperf3 flow runs for whole seconds; make stop - start a whole number of seconds",
                        field=field_of(where, "stop"))


def _cc(table: dict[str, Any], where: str, sender_cc: str | None) -> str:
    """The workload's own cc, else its sending host's (the topology's cc), else cubic."""
    return congestion_control(table.get("cc", sender_cc or DEFAULT_CC), field_of(where, "cc"))


def _parse_bulk(table, where, topology, common) -> Bulk:
    src, dst = _two_hosts(table, where, topology, "from", "to")
    _whole_seconds(common, where)
    cc = _cc(table, where, topology.host_cc(src))
    buffer = parse_size_bytes(table["buffer"], field_of(where, "buffer")) if "buffer" in table else None
    return Bulk(**common, src=src, dst=dst, cc=cc, buffer_bytes=buffer, dscp=_dscp(table, where),
                ecn=_bulk_ecn(table, where, cc))


def _bulk_ecn(table: dict[str, Any], where: str, cc: str) -> str | None:
    """A bulk flow's `ecn`: "ect1" with a scalable congestion control, or absent (its cc's own)."""
    if "ecn" not in table:
        return None
    value = table["ecn"]
    if not isinstance(value, str) or value.strip().lower() != "ect1":
        raise SpecError(f'{show(table["ecn"])} cannot be asked of a TCP flow, whose packets carry what its congestion '
                        'control negotiates; write ecn = "ect1" (with cc = "dctcp") for the L4S identifier, or leave '
                        'ecn out', field=field_of(where, "ecn"))
    if cc not in SCALABLE_CCS:
        raise SpecError(f"ECT(1) says a flow negotiated ECN and answers each CE mark as a scalable one does, and "
                        f'{cc} does not; use cc = "dctcp", or leave ecn out', field=field_of(where, "ecn"))
    return "ect1"


def _probe_ecn(table: dict[str, Any], where: str) -> str:
    return parse_ecn(table.get("ecn", "not-ect"), field_of(where, "ecn"))


def _dscp(table: dict[str, Any], where: str) -> int:
    return parse_dscp(table.get("dscp", 0), field_of(where, "dscp"))


def _parse_udp(table, where, topology, common) -> Udp:
    src, dst = _two_hosts(table, where, topology, "from", "to")
    _whole_seconds(common, where)
    if "rate" not in table:
        raise SpecError('missing; give the sending rate, e.g. rate = "5mbit"', field=field_of(where, "rate"))
    rate = parse_rate(table["rate"], field_of(where, "rate"))
    if rate is None:
        raise SpecError('a UDP flow needs a finite rate, e.g. rate = "5mbit"', field=field_of(where, "rate"))
    return Udp(**common, src=src, dst=dst, rate_bps=rate, dscp=_dscp(table, where))


def _interval(table: dict[str, Any], where: str, minimum_ns: int) -> int:
    """A probe's interval: "100ms" unless given, at least `minimum_ns`."""
    interval = parse_duration_ns(table.get("interval", "100ms"), field_of(where, "interval"), allow_zero=False)
    if interval < minimum_ns:
        raise SpecError(f'{show(table["interval"])} is below the minimum "{minimum_ns // 10**6}ms"',
                        field=field_of(where, "interval"))
    return interval


def _parse_ping(table, where, topology, common) -> Ping:
    src, dst = _two_hosts(table, where, topology, "from", "to")
    interval = _interval(table, where, MIN_PING_INTERVAL_NS)
    return Ping(**common, src=src, dst=dst, interval_ns=interval, dscp=_dscp(table, where),
                ecn=_probe_ecn(table, where))


def _parse_irtt(table, where, topology, common) -> Irtt:
    src, dst = _two_hosts(table, where, topology, "from", "to")
    interval = _interval(table, where, MIN_IRTT_INTERVAL_NS)
    if (common["stop_ns"] - common["start_ns"]) < 2 * interval:
        raise SpecError("the probe must run for at least two intervals; lengthen it or shorten the interval",
                        field=field_of(where, "interval"))
    return Irtt(**common, src=src, dst=dst, interval_ns=interval, dscp=_dscp(table, where),
                ecn=_probe_ecn(table, where))


def _parse_web(table, where, topology, common) -> Web:
    server, client = _two_hosts(table, where, topology, "server", "client")
    size = parse_size_bytes(table.get("size", DEFAULT_WEB_SIZE_BYTES), field_of(where, "size"))
    every = parse_duration_ns(table.get("every", "5s"), field_of(where, "every"), allow_zero=False)
    count = table.get("count", 3)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 1000:
        raise SpecError(f"{show(count)} is not a fetch count; write a whole number from 1 to 1000",
                        field=field_of(where, "count"))
    timeout = parse_duration_ns(table.get("timeout", "30s"), field_of(where, "timeout"), allow_zero=False)
    return Web(**common, server=server, client=client, size_bytes=size, every_ns=every, count=count,
               timeout_ns=timeout, cc=_cc(table, where, topology.host_cc(server)))


def _parse_responsiveness(table, where, topology, common) -> Responsiveness:
    server, client = _two_hosts(table, where, topology, "server", "client")
    direction = table.get("direction", "down")
    if direction not in DIRECTIONS:
        raise SpecError(f"{show(direction)} is not a direction; choose one of: {', '.join(DIRECTIONS)} "
                        "(down: from the server to the client)", field=field_of(where, "direction"))
    if common["stop_ns"] - common["start_ns"] < MIN_RESPONSIVENESS_NS:
        raise SpecError('the test needs at least "10s" (idle probes, then four one-second intervals to saturate '
                        "the path and four to be stable); start it earlier or stop it later", field=field_of(where, "stop"))
    cc = congestion_control(table["cc"], field_of(where, "cc")) if "cc" in table else topology.host_cc(client)
    return Responsiveness(**common, server=server, client=client, direction=direction, cc=cc)


_KIND_PARSERS = {"bulk": _parse_bulk, "udp": _parse_udp, "ping": _parse_ping, "irtt": _parse_irtt, "web": _parse_web,
                 "responsiveness": _parse_responsiveness}

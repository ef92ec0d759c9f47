"""`bloatlab replay`: a queue discipline in virtual time, from flags
(docs/replay.md). The work is bloatlab.lab.replay's; this reads the flags into a link direction
and an arrival process, and prints."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from bloatlab.cli.common import FILE, add_command, emit
from bloatlab.errors import SpecError
from bloatlab.lab.replay import (ECN_CODES, MAX_SIZE_BYTES, MIN_SIZE_BYTES, PROCESSES, binary, render_summary,
                                 run_binary, trace_mean_bps, write_config)
from bloatlab.specs.disciplines import DISCIPLINES
from bloatlab.specs.model import DirectionSpec, QueueSpec
from bloatlab.specs.queues import parse_queue
from bloatlab.specs.topology import check_trace
from bloatlab.specs.units import parse_duration_ns, parse_percent, parse_rate, parse_size_bytes


def _cli_value(text: str) -> Any:
    """A queue setting as TOML would give it: 1000 -> int, 0.02 -> float, true -> bool, "5ms" stays."""
    if re.fullmatch(r"\d{1,30}", text):  # longer stays text, which parse_queue refuses (int() takes 4300 digits)
        return int(text)
    if re.fullmatch(r"\d+\.\d*|\.\d+", text):
        return float(text)
    return {"true": True, "false": False}.get(text, text)


def parse_queue_option(text: str, flag: str = "--queue") -> QueueSpec:
    """'discipline=codel,target=5ms,packets=1000' -> a QueueSpec, by the topology's own rules."""
    table: dict[str, Any] = {}
    for item in (part.strip() for part in text.split(",")):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise SpecError(f"{item!r} is not KEY=VALUE; write e.g. discipline=codel,target=5ms,packets=1000",
                            field=flag)
        if key in table:
            raise SpecError(f"{key} is given twice", field=f"{flag}.{key}")
        table[key] = _cli_value(value)
    return parse_queue(table, flag)


def parse_count(text: str | None, flag: str, low: int = 1, high: int = 2**63 - 1) -> int | None:
    if text is None:
        return None
    if not re.fullmatch(r"\d{1,30}", text) or not low <= int(text) <= high:
        raise SpecError(f"{text!r} is not a whole number from {low} to {high}", field=flag)
    return int(text)


def _size(text: str, flag: str) -> int:
    size = parse_size_bytes(int(text) if re.fullmatch(r"\d{1,30}", text) else text, flag)
    if not MIN_SIZE_BYTES <= size <= MAX_SIZE_BYTES:
        raise SpecError(f"{size} bytes is not from {MIN_SIZE_BYTES} (the headers) to {MAX_SIZE_BYTES}", field=flag)
    return size


def build_direction(args: argparse.Namespace) -> DirectionSpec:
    """The link direction the flags describe: rate or trace, delay, loss, queue."""
    queue = parse_queue_option(args.queue)
    trace = None
    if args.trace is not None:
        if args.rate is not None:
            raise SpecError("give a rate or a trace, not both", field="--trace")
        trace = Path(args.trace).resolve()
        check_trace(trace, "--trace")
        rate_bps = None
    elif args.rate is None:
        raise SpecError('give the link rate (e.g. --rate 10mbit, or "unlimited") or --trace FILE', field="--rate")
    else:
        rate_bps = parse_rate(args.rate, "--rate")
    delay_ns = parse_duration_ns(args.delay, "--delay")
    loss = parse_percent(args.loss, "--loss") if args.loss is not None else 0.0
    return DirectionSpec(rate_bps=rate_bps, trace=trace, delay_ns=delay_ns, loss=loss, queue=queue)


def synthetic_flags(args: argparse.Namespace, direction: DirectionSpec) -> list[str]:
    """The binary's flags for the synthetic arrival process the command line asks for."""
    size = _size(args.size, "--size")
    rates = [name for name, given in (("--load", args.load), ("--arrival-rate", args.arrival_rate),
                                      ("--pps", args.pps)) if given is not None]
    if len(rates) != 1:
        raise SpecError("give the arrival rate as one of --load (times the link's rate), --arrival-rate "
                        "or --pps", field=rates[1] if len(rates) > 1 else "--load")
    flags = ["--synthetic", args.synthetic, "--size", str(size)]
    if args.load is not None:
        try:
            load = float(args.load)
        except ValueError:
            load = -1.0
        if not 0 < load <= 1000:
            raise SpecError(f"{args.load!r} is not a load; write a number above 0, e.g. 1.2", field="--load")
        if direction.trace is not None:
            link_bps = trace_mean_bps(direction.trace)
        elif direction.rate_bps is not None:
            link_bps = direction.rate_bps
        else:
            raise SpecError("an unlimited link has no rate to load; give --arrival-rate or --pps", field="--load")
        flags += ["--arrival-bps", str(max(1, round(load * link_bps)))]
    elif args.arrival_rate is not None:
        bps = parse_rate(args.arrival_rate, "--arrival-rate")
        if bps is None:
            raise SpecError('arrivals need a rate; "unlimited" is for links', field="--arrival-rate")
        flags += ["--arrival-bps", str(bps)]
    else:
        flags += ["--arrival-pps", str(parse_count(args.pps, "--pps"))]
    packets = parse_count(args.packets, "--packets")
    duration_ns = parse_duration_ns(args.duration, "--duration", allow_zero=False) if args.duration else None
    if packets is None and duration_ns is None:
        raise SpecError("say how many arrivals: --packets N, --duration TIME, or both", field="--packets")
    if packets is not None:
        flags += ["--packets", str(packets)]
    if duration_ns is not None:
        flags += ["--duration-ns", str(duration_ns)]
    flags += ["--flows", str(parse_count(args.flows, "--flows", 1, 2**32 - 1)), "--flow-ids", args.flow_ids,
              "--ecn", str(ECN_CODES[args.ecn])]
    if args.synthetic == "on-off":
        if args.on is None or args.off is None:
            raise SpecError("on-off arrivals need --on TIME and --off TIME", field="--on" if args.on is None else "--off")
        flags += ["--on-ns", str(parse_duration_ns(args.on, "--on", allow_zero=False)),
                  "--off-ns", str(parse_duration_ns(args.off, "--off"))]
    elif args.on is not None or args.off is not None:
        raise SpecError("only --synthetic on-off has on and off periods", field="--on" if args.on else "--off")
    return flags


def cmd_replay(args: argparse.Namespace) -> int:
    direction = build_direction(args)
    seed = parse_count(args.seed, "--seed", 0, 2**64 - 1)
    if (args.arrivals is None) == (args.synthetic is None):
        raise SpecError("give an arrival trace (--arrivals FILE.csv) or --synthetic PROCESS, one of them",
                        field="--arrivals")
    if args.arrivals is not None:
        given = [flag for flag, value in (("--load", args.load), ("--arrival-rate", args.arrival_rate),
                                          ("--pps", args.pps), ("--packets", args.packets),
                                          ("--duration", args.duration), ("--on", args.on), ("--off", args.off))
                 if value is not None]
        if given:
            raise SpecError("a trace gives every packet; this flag is for --synthetic", field=given[0])
        path = Path(args.arrivals)
        if not path.is_file():
            raise SpecError(f"{path} is not a file", field="--arrivals")
        arrival_flags = ["--arrivals", str(path.resolve())]
    else:
        arrival_flags = synthetic_flags(args, direction)
    binary()  # a missing or mismatched binary is said before anything is written
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = out / "replay.json"
    write_config(config, direction, seed)
    summary = run_binary(config, out, arrival_flags, progress=not args.quiet)
    files = {"fates": str(out / "fates.csv"), "summary": str(out / "summary.json"), "config": str(config)}
    emit(args, {"summary": summary, "files": files},
         render_summary(summary, direction) + f"\n\nfiles: {files['fates']} (one line per packet), "
         f"{files['summary']}, {files['config']}")
    return 0


def _add_arguments(sub: argparse.ArgumentParser) -> None:
    link = sub.add_argument_group("the link")
    link.add_argument("--queue", required=True, metavar="SPEC",
                      help="the queue as KEY=VALUE,...: discipline (" + ", ".join(DISCIPLINES) + "), limit "
                           "(packets or bytes) and the discipline's parameters as in a topology (bloatlab queues "
                           "lists them), e.g. discipline=codel,target=5ms,packets=1000")
    link.add_argument("--rate", metavar="RATE", help='the link rate, e.g. 10mbit, or "unlimited"')
    link.add_argument("--trace", metavar="FILE", help="a Mahimahi delivery trace instead of --rate").complete = FILE
    link.add_argument("--delay", default="0ms", metavar="TIME", help="propagation delay (default: %(default)s)")
    link.add_argument("--loss", metavar="PCT", help='random loss before the queue, e.g. "1%%" (default: none)')
    link.add_argument("--seed", default="1", metavar="N",
                      help="seeds the loss, the discipline and the synthetic arrivals (default: %(default)s)")
    arrivals = sub.add_argument_group("the arrivals: a trace, or a synthetic process")
    arrivals.add_argument("--arrivals", metavar="FILE.csv",
                          help="CSV with the header t_ns,size_bytes,flow,ecn, times never decreasing").complete = FILE
    arrivals.add_argument("--synthetic", choices=PROCESSES, help="an arrival process")
    arrivals.add_argument("--load", metavar="X", help="arrival rate as a multiple of the link's rate (a trace's mean)")
    arrivals.add_argument("--arrival-rate", metavar="RATE", help="arrival rate in bits, e.g. 12mbit")
    arrivals.add_argument("--pps", metavar="N", help="arrival rate in packets per second")
    arrivals.add_argument("--size", default="1500", metavar="BYTES",
                          help="frame size on the wire, 42..65535 (default: %(default)s)")
    arrivals.add_argument("--flows", default="1", metavar="N", help="number of flows (default: %(default)s)")
    arrivals.add_argument("--flow-ids", default="round-robin", choices=("round-robin", "random"),
                          help="how packets are given to flows (default: %(default)s)")
    arrivals.add_argument("--ecn", default="not-ect", choices=tuple(ECN_CODES),
                          help="the packets' ECN codepoint (default: %(default)s)")
    arrivals.add_argument("--packets", metavar="N", help="stop after N arrivals")
    arrivals.add_argument("--duration", metavar="TIME", help="stop arrivals at this virtual time")
    arrivals.add_argument("--on", metavar="TIME", help="on-off: how long each burst lasts")
    arrivals.add_argument("--off", metavar="TIME", help="on-off: the silence between bursts")
    sub.add_argument("--out", required=True, metavar="DIR", help="where fates.csv and summary.json go")


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """Registers `bloatlab replay` among the CLI's commands."""
    sub = add_command(
        commands, "replay", cmd_replay, "run a queue discipline in virtual time over an arrival trace or process",
        "The datapath core (the code bloatlab-link runs) serves the arrivals at the link's rate in virtual\n"
        "time and writes every packet's fate (DIR/fates.csv) and a summary (DIR/summary.json). No root,\n"
        "no namespaces (docs/replay.md).",
        ["bloatlab replay --queue discipline=codel,target=5ms,packets=1000 --rate 10mbit \\\n"
         "      --synthetic poisson --load 1.2 --size 1500 --flows 4 --packets 1000000 --out results/replay",
         "bloatlab replay --queue discipline=droptail,packets=100 --rate 12mbit --arrivals trace.csv --out results/r1"])
    _add_arguments(sub)

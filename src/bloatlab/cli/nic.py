"""`bloatlab nic sweep|restore|serve`: the command line of real-interface sweeps."""

from __future__ import annotations

import argparse
import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bloatlab import proc
from bloatlab.cli.common import FILE, add_command, emit, formatter, note
from bloatlab.errors import BloatlabError, MachineError, SpecError
from bloatlab.interrupts import Interrupts
from bloatlab.nic import journal as journals
from bloatlab.nic import knobs
from bloatlab.nic.plan import DEFAULT_OFFLOAD_FEATURES, DEFAULT_PORT, KNOBS, MEASURE_DEFAULTS, load_plan, plan_from_args
from bloatlab.testbed import netns

SERVE_INTERVAL_S = 0.1  # the server's reports, which clients fetch with --get-server-output


def _need_root(command: str) -> None:
    if os.geteuid() != 0:
        raise MachineError(f"bloatlab nic {command} needs root (it changes interface settings); run it with sudo")


def cmd_sweep(args: argparse.Namespace) -> int:
    from bloatlab.analysis.report import finish_sweep
    from bloatlab.lab import nic as runner

    if args.spec is not None:
        flags = [f"--{k.replace('_', '-')}" for k in (*KNOBS, "iface", "server", "netns", "offload_features",
                                                      "port", *MEASURE_DEFAULTS) if getattr(args, k) is not None]
        if flags:
            raise SpecError(f"give the sweep as a spec file or as flags, not both ({flags[0]} with {args.spec})",
                            field=flags[0])
        plan = load_plan(args.spec)
    else:
        if args.iface is None:
            raise SpecError("say which interface to change, e.g. --iface eth0; bloatlab never picks one itself",
                            field="--iface")
        if args.server is None:
            raise SpecError("give the iperf3 server to measure against, e.g. --server 192.0.2.7 "
                            "(run iperf3 -s or bloatlab nic serve there)", field="--server")
        plan = plan_from_args(args)
    if args.resume and args.out is None:
        raise SpecError("--resume needs --out DIR: the directory of the sweep to finish", field="--resume")
    _need_root("sweep")
    out = args.out or Path("results") / f"nic-{plan.iface.name}-{time.strftime('%Y%m%d-%H%M%S')}"

    def started() -> None:  # once every check has passed, so a bad input stays one line
        print(f"journal: {journals.journal_path(plan.iface)} (bloatlab nic restore puts {plan.iface} back "
              "after a crash)", file=sys.stderr)
        if not plan.knobs:
            note(args, "note: no knob to sweep (--txqueuelen, --bql-limit-max, --offloads, --qdisc ...): measuring "
                       "the interface as it is")

    # Every way of being told to stop must reach the restore (SIGINT too: a shell starts
    # background jobs with it ignored).
    with Interrupts() as stop:
        outcome, _ = runner.run(plan, out, resume=args.resume, progress=not args.quiet,
                                finish=functools.partial(finish_sweep, svg=args.svg), on_started=started)
    outcome.interrupted = outcome.interrupted or stop.received is not None
    print("\n" + runner.table(out))
    status = outcome.tell("each run as docs/nic.md tells")  # with --json, on stderr
    emit(args, {**outcome.to_dict(), "iface": str(plan.iface)})
    return status


def cmd_restore(args: argparse.Namespace) -> int:
    _need_root("restore")
    if args.iface is not None:
        iface = knobs.Iface(args.iface, args.netns)
        path = journals.journal_path(iface)
        if not path.exists():
            elsewhere = [j.iface for j in journals.list_journals([]) if j.iface.name == iface.name]
            if elsewhere:  # the same name journaled in a namespace: most likely a forgotten --netns
                raise SpecError(f"no journal names {iface}, but one names {elsewhere[0]}; add --netns "
                                f"{elsewhere[0].netns}", field="--netns")
            emit(args, {"restored": [], "gone": [], "failed": []}, f"no journal names {iface}: nothing to restore")
            return 0
        found = [journals.load(path)]
    else:
        if args.netns is not None:
            raise SpecError("--netns goes with --iface; without both, every journaled interface is restored",
                            field="--netns")
        damaged: list[str] = []
        found = journals.list_journals(damaged)
        if not found and not damaged:
            emit(args, {"restored": [], "gone": [], "failed": []}, "no journal: nothing to restore")
            return 0
    failed = list(damaged) if args.iface is None else []
    restored: list[dict[str, object]] = []
    gone: list[str] = []  # interfaces (or their namespaces) that no longer exist: their journals go
    for journal in found:
        iface = journal.iface
        if journal.owner_alive():
            failed.append(f"the sweep that changed {iface} (pid {journal.owner['pid']}) still runs; stop it "
                          "with Ctrl-C and it restores the interface itself")
            continue
        if iface.netns is not None and not netns.exists(iface.netns):
            print(f"{iface}: the namespace is gone, and the settings with it; journal removed")
            journals.remove(journal)
            gone.append(str(iface))
            continue
        try:
            knobs.check_iface(iface)
        except BloatlabError:
            print(f"{iface}: the interface is gone, and its settings with it; journal removed")
            journals.remove(journal)
            gone.append(str(iface))
            continue
        try:
            changed = knobs.restore(iface, journal.original)
        except BloatlabError as e:
            failed.append(str(e))
            continue
        journals.remove(journal)
        restored.append({"iface": str(iface), "changed": changed})
        print(f"restored {iface}: " + ("; ".join(changed) if changed else "every setting was as it had been"))
    emit(args, {"restored": restored, "gone": gone, "failed": failed})
    if failed:
        raise MachineError("; ".join(failed))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    if args.netns is not None:
        _need_root("serve --netns")
        if not netns.exists(args.netns):
            raise BloatlabError(f"no network namespace {args.netns!r} (ip netns list shows them)", field="--netns")
    port = args.port
    if not 1 <= port <= 65535:
        raise SpecError(f"{port} is not a port; write a whole number from 1 to 65535", field="--port")
    argv = ["iperf3", "-s", "-p", str(port), "-i", str(SERVE_INTERVAL_S), "--forceflush"]
    if args.bind:
        argv += ["-B", args.bind]
    if args.once:
        argv.append("-1")
    where = f" in namespace {args.netns}" if args.netns else ""
    note(args, f"iperf3 server on port {port}{where}; measure against it with bloatlab nic sweep --server ADDRESS"
               f"{' --port ' + str(port) if port != DEFAULT_PORT else ''}. Ctrl-C stops it.")
    # -v shows iperf3's own output (on stderr with --json, where stdout is the document's).
    server = proc.spawn(argv, ns=args.netns, stdout=(sys.stderr if args.json else None) if args.verbose
                        else subprocess.DEVNULL)
    ended = "once" if args.once else "interrupted"
    with Interrupts((signal.SIGTERM, signal.SIGHUP)):
        try:
            status = server.wait()
        except KeyboardInterrupt:
            proc.stop(server)
            status = 0
    if status != 0:
        raise MachineError(f"iperf3 -s ended with status {status} (is port {port} taken?)", field="--port")
    emit(args, {"port": port, "netns": args.netns, "bind": args.bind, "ended": ended})
    return 0


# The parser -----------------------------------------------------------------------------------

def add_parsers(commands: argparse._SubParsersAction) -> None:
    """Registers `bloatlab nic` and its subcommands among the CLI's commands."""
    nic = commands.add_parser(
        "nic", help="sweep a real interface's txqueuelen, BQL, offloads and qdisc, measured with iperf3 and ping",
        formatter_class=formatter,
        description="Real interfaces: change a knob, measure TCP, UDP and delay against an iperf3 server, "
                    "put the\ninterface back. docs/nic.md tells the result files.",
        epilog="examples:\n"
               "  sudo bloatlab nic sweep --iface eth0 --server 192.0.2.7 --txqueuelen 1,10,100 --offloads on,off\n"
               "  sudo bloatlab nic restore\n"
               "  bloatlab nic serve")
    sub = nic.add_subparsers(dest="nic_command", metavar="COMMAND", required=True)

    sweep = add_command(
        sub, "sweep", cmd_sweep, "run iperf3 and ping at each setting of an interface's knobs",
        "For each combination of the given knob values (the cross product, each --repeat times): set\n"
                    "the knobs, run iperf3 TCP for --duration, then iperf3 UDP at --udp-rate for --duration, "
                    "with\nping through both, against the iperf3 server. Before the first change the "
                    "interface's settings\ngo to a journal (/run/bloatlab/nic/); they are put back after the "
                    "sweep, on an error and on\nCtrl-C, and `bloatlab nic restore` puts them back after a crash. "
                    "A knob that has no effect\n(txqueuelen under a noqueue root, BQL on a driver without it, an "
                    "offload the driver fixes) is\nnoted in the output and in each run.json. Writes the sweep "
                    "directory of docs/sweeps.md, each run\nas docs/nic.md tells. Needs root.",
        ["sudo bloatlab nic sweep --iface eth0 --server 192.0.2.7 --txqueuelen 1,10,100,1000,10000",
         "sudo bloatlab nic sweep --iface eth0 --server 192.0.2.7 --qdisc pfifo --txqueuelen 10,1000 \\\n"
         "      --offloads on,off --repeat 5 --duration 50s --udp-rate 10gbit --out results/eth0",
         "sudo bloatlab nic sweep --iface enp0s5 --server 192.0.2.7 --bql-limit-max 0,1000,10000 --tests udp",
         "sudo bloatlab nic sweep my-nic-sweep.toml       # the same fields in a file (docs/nic.md)"])
    sweep.add_argument("spec", metavar="SPEC.toml", nargs="?", type=Path,
                       help="the sweep as a file, instead of flags").complete = FILE
    where = sweep.add_argument_group("where")
    where.add_argument("--iface", metavar="IF", help="the interface to change (required: bloatlab never picks one)")
    where.add_argument("--server", metavar="HOST", help="the iperf3 server (iperf3 -s, or bloatlab nic serve) and "
                                                       "ping target")
    where.add_argument("--port", type=int, help=f"its iperf3 port (default: {DEFAULT_PORT})")
    where.add_argument("--netns", metavar="NS", help="the interface and the client side are in this namespace")
    axes = sweep.add_argument_group("knobs (comma-separated values; several values make an axis)")
    axes.add_argument("--txqueuelen", metavar="N,...", help="packets, 1 to 1000000, e.g. 1,10,100,1000")
    axes.add_argument("--bql-limit-max", metavar="BYTES,...", help="BQL limit_max of every tx queue, 0 to 1879048192")
    axes.add_argument("--bql-limit-min", metavar="BYTES,...", help="BQL limit_min of every tx queue")
    axes.add_argument("--offloads", metavar="on|off,...", help="the --offload-features all on or all off")
    axes.add_argument("--offload-features", metavar="F,...",
                      help=f"which offloads --offloads switches (default: {','.join(DEFAULT_OFFLOAD_FEATURES)}); "
                           "ethtool's short or long names")
    axes.add_argument("--qdisc", metavar="KIND,...",
                      help="root qdisc: pfifo (sized by txqueuelen), bfifo, pfifo_fast, fq_codel, noqueue, ..., "
                           'or "default" (the kernel\'s)')
    how = sweep.add_argument_group("measurement")
    how.add_argument("--repeat", metavar="N", help=f"runs per setting (default: {MEASURE_DEFAULTS['repeat']})")
    how.add_argument("--duration", metavar="TIME",
                     help=f"each iperf3 test, whole seconds (default: {MEASURE_DEFAULTS['duration']})")
    how.add_argument("--udp-rate", metavar="RATE", help=f"UDP target rate (default: {MEASURE_DEFAULTS['udp_rate']})")
    how.add_argument("--tests", metavar="LIST", help=f"tcp, udp or both (default: {MEASURE_DEFAULTS['tests']})")
    how.add_argument("--ping-interval", metavar="TIME",
                     help="ping through the tests every TIME; 0 for no ping "
                          f"(default: {MEASURE_DEFAULTS['ping_interval']})")
    sweep.add_argument("--out", metavar="DIR", type=Path, help="the sweep directory (default: results/nic-IF-TIME)")
    sweep.add_argument("--resume", action="store_true", help="run only what an earlier run of this sweep left")
    sweep.add_argument("--svg", action="store_true", help="also write the plots as SVG")

    restore = add_command(
        sub, "restore", cmd_restore, "put back what a crashed or killed sweep left changed",
        "Restores the settings a journal in /run/bloatlab/nic/ holds, checks every field, and removes the\n"
        "journal. Without --iface, every journaled interface. Needs root.",
        ["sudo bloatlab nic restore", "sudo bloatlab nic restore --iface eth0",
         "sudo bloatlab nic restore --iface h1-eth0 --netns lab"])
    restore.add_argument("--iface", metavar="IF", help="only this interface")
    restore.add_argument("--netns", metavar="NS", help="the namespace of --iface")

    serve = add_command(
        sub, "serve", cmd_serve, "run an iperf3 server for nic sweeps (until Ctrl-C)",
        "Runs `iperf3 -s` with 100 ms reports (the sweep fetches them: the receiver's throughput over\n"
        "time); -v shows iperf3's output. A plain `iperf3 -s` on the far host serves as well.",
        ["bloatlab nic serve", "bloatlab nic serve --port 5202 --bind 192.0.2.7",
         "sudo bloatlab nic serve --netns lab"])
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="the port (default: %(default)s)")
    serve.add_argument("--bind", metavar="ADDR", help="listen on this address only")
    serve.add_argument("--netns", metavar="NS", help="run it in this namespace")
    serve.add_argument("--once", action="store_true", help="serve one test, then end")

"""The `bloatlab` command line: build, use and remove lab networks; doctor; benchmarks.

Every BloatlabError becomes one line on stderr and exit status 2; Ctrl-C exits 130 once
whatever was half built has been removed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from .errors import BloatlabError, MachineError

EXAMPLE_TOPOLOGY = "topology.toml"


class UsageError(BloatlabError):
    """Bad command-line syntax, reported like every other user error."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own: usage plus message on two lines
        raise UsageError(f"{message} (see {self.prog} --help)")


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def need_root(command: str) -> None:
    if os.geteuid() != 0:
        raise MachineError(f"bloatlab {command} needs root (it works with network namespaces); "
                           "run it with sudo")


# Commands -----------------------------------------------------------------------------------

def cmd_up(args: argparse.Namespace) -> int:
    from .network import Network, check_name
    from .topology import load_topology

    need_root("up")
    check_name(args.name)
    topology = load_topology(args.topology)
    net = Network(topology, args.name, detach=True, topology_path=Path(args.topology).resolve())
    # A SIGTERM or hangup during the build must clean up as Ctrl-C does.
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        net.up()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(summary(net))
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def summary(net) -> str:
    from .units import format_duration_ns, format_rate

    def direction(d) -> str:
        pace = f"trace {d.trace.name}" if d.trace else format_rate(d.rate_bps)
        parts = [pace, f"delay {format_duration_ns(d.delay_ns)}"]
        if d.jitter_ns:
            parts.append(f"jitter {format_duration_ns(d.jitter_ns)}")
        if d.loss:
            parts.append(f"loss {d.loss * 100:g}%")
        q = d.queue
        limit = f"{q.packets} packets" if q.packets is not None else f"{q.bytes} bytes"
        parts.append(f"{q.discipline} {limit}")
        return ", ".join(parts)

    topo = net.topology
    width = max(len(h) for h in [*topo.hosts, "host"])
    lines = [f"network {net.name} is up", ""]
    lines += [f"  {'host':<{width}}  address"]
    lines += [f"  {host:<{width}}  {topo.address(host)}" for host in topo.hosts]
    if topo.switches:
        lines += ["", f"  switches: {', '.join(topo.switches)}"]
    lines.append("")
    for link, backend in zip(topo.links, net.backends):
        lines.append(f"  link {link.name} ({backend} backend)")
        for which in ("forward", "reverse"):
            lines.append(f"    {link.direction_name(which):<24} {direction(getattr(link, which))}")
    first = next(iter(topo.hosts))
    other = next((h for h in topo.hosts if h != first), first)
    lines += ["", f"run commands in it:  bloatlab exec {net.name} {first} -- ping -c 3 {other}",
              f"take it down:        bloatlab down {net.name}"]
    return "\n".join(lines)


def cmd_exec(args: argparse.Namespace) -> int:
    from .network import Network

    need_root("exec")
    argv = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not argv:
        raise UsageError(f"give a command after --, e.g. bloatlab exec {args.name} {args.host} -- ping -c 3 h2")
    net = Network.attach(args.name)
    # stdin, stdout and stderr are inherited: the command talks to the terminal directly.
    with net.popen(args.host, argv) as proc:
        while True:
            try:
                status = proc.wait()
                break
            except KeyboardInterrupt:
                continue  # the command got the Ctrl-C too; let it end its own way (ping prints stats)
    return status if status >= 0 else 128 - status


def cmd_ls(args: argparse.Namespace) -> int:
    from .network import list_networks, stray_namespaces
    from .state import process_alive

    networks = list_networks()
    if not networks:
        print("no networks")
    else:
        rows = [("NAME", "STATUS", "HOSTS", "LINKS", "DATAPATH", "CREATED")]
        for st in networks:
            status = st.status
            if status == "building" and st.owner and not process_alive(st.owner["pid"], st.owner["starttime"]):
                status = "broken"  # its `up` died midway
            dp = "-"
            if st.datapath:
                alive = process_alive(st.datapath["pid"], st.datapath["starttime"])
                dp = f"pid {st.datapath['pid']}" if alive else "dead"
            kinds = sorted(set(st.backends))
            links = f"{len(st.backends)} ({', '.join(kinds)})" if kinds else "0"
            rows.append((st.name, status, str(len(st.topology["hosts"])), links, dp, st.created))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    stray = stray_namespaces()
    if stray:
        print(f"\nnamespaces of no network: {', '.join(stray)} (bloatlab clean removes them)")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from .network import check_name, remove_network

    need_root("down")
    check_name(args.name)
    remove_network(args.name)
    print(f"network {args.name} is down")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    from .network import clean

    need_root("clean")
    removed = clean()
    if not removed:
        print("nothing to clean")
    for item in removed:
        print(f"removed {item}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from . import doctor

    report = doctor.collect()
    print(json.dumps(report, indent=2) if args.json else doctor.render(report))
    return 0


def cmd_bench_link(args: argparse.Namespace) -> int:
    need_root("bench link")
    try:
        from . import bench
    except ModuleNotFoundError as error:
        if error.name != f"{__package__}.bench":
            raise
        raise MachineError("this bloatlab has no bench module yet") from None
    return bench.main_link(args)


def cmd_run(args: argparse.Namespace) -> int:
    from .results import summary_table
    from .runner import default_out, run_experiment
    from .spec import MAX_REPEAT, load_experiment, load_preset, sweep_axes

    if (args.spec is None) == (args.preset is None):
        raise UsageError("give a spec file or --preset NAME (bloatlab presets lists them), not both")
    if args.repeat is not None and not 1 <= args.repeat <= MAX_REPEAT:
        raise UsageError(f"{args.repeat} repetitions; give --repeat a whole number from 1 to {MAX_REPEAT}")
    sets = args.set or []
    axes = sweep_axes(args.preset, args.spec, sets, args.sweep or [])

    def load(point: list[str], rep: int = 1):
        if args.preset:
            return load_preset(args.preset, point, rep)
        return load_experiment(args.spec, point, rep)

    if args.repeat is None:  # the spec's own `repeat`
        args.repeat = load(sets).repeat
    if not axes and args.repeat == 1 and not args.resume:
        experiment = load(sets)
        need_root("run")
        out = args.out or default_out(experiment)
        outcome = run_experiment(experiment, out, progress=not args.quiet, svg=args.svg)
        label = " ".join(f"{k}={v}" for k, v in experiment.params.items()) or experiment.name
        print(summary_table([(label, outcome.summary)]))
        for warning in outcome.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        print(f"\nresults: {outcome.run_dir}/ (summary.json, series/, raw/)")
        if outcome.plots:
            print(f"plots:   {outcome.run_dir / 'plots'}/ ({', '.join(p.name for p in outcome.plots if p.suffix == '.png')})")
        if outcome.report:
            print(f"report:  {outcome.report}")
        return _exit_status(outcome)
    return _run_sweep(args, sets, axes, load)


def _exit_status(outcome: Any) -> int:
    if not outcome.complete:
        print(f"bloatlab: the run is incomplete ({outcome.reason}); what was measured is kept", file=sys.stderr)
        return 130 if (outcome.reason or "").startswith("interrupted") else 1
    return 0


def _run_sweep(args: argparse.Namespace, sets: list[str], axes: list[tuple[str, list[str]]], load) -> int:
    """The cross product of the axes, --repeat times each (docs/sweeps.md)."""
    import itertools

    from .results import headline
    from .runner import run_experiment
    from .errors import SpecError
    from .sweep import Axis, RunResult, run_sweep

    if args.resume and args.out is None:
        raise UsageError("--resume needs --out DIR: the directory of the sweep to finish")
    # Every point is loaded (and so checked) before the first run starts.
    experiments, typed = {}, {}
    for combo in itertools.product(*(values for _, values in axes)):
        point = dict(zip([name for name, _ in axes], combo))
        try:
            experiment = load(sets + [f"{k}={v}" for k, v in point.items()])
        except SpecError as e:  # a swept value is reported under --sweep, where the user wrote it
            if e.field and e.field.startswith("--set ") and e.field[6:] in point and e.field not in \
                    {f"--set {item.partition('=')[0].strip()}" for item in sets}:
                raise SpecError(e.message, field=f"--sweep {e.field[6:]}") from None
            raise
        for name, text in point.items():
            typed[name, text] = experiment.params[name]
        experiments[tuple(experiment.params[name] for name, _ in axes)] = point
    for name, values in axes:
        if len({json.dumps(typed[name, v]) for v in values}) < len(values):
            raise SpecError(f"{','.join(values)} names a value twice (as {name} reads them); give each once",
                            field=f"--sweep {name}")
    need_root("run")
    first = load(sets)
    sweep_axes = [Axis(name, tuple(typed[name, v] for v in values)) for name, values in axes]
    fixed = {k.strip(): v.strip() for k, _, v in (item.partition("=") for item in sets)}
    out = args.out or Path("results") / f"{first.name}-sweep-{_stamp()}"

    def run_one(values: dict[str, Any], rep: int, run_dir: Path, tick) -> RunResult:
        point = experiments[tuple(values[a.name] for a in sweep_axes)]
        experiment = load(sets + [f"{k}={v}" for k, v in point.items()], rep)
        outcome = run_experiment(experiment, run_dir, progress=tick if not args.quiet else False, svg=args.svg)
        return RunResult(outcome.complete, outcome.summary, outcome.reason, outcome.warnings, outcome.interrupted)

    total = len(experiments) * args.repeat
    print(f"sweep {first.name}: {len(experiments)} point(s) x {args.repeat} repetition(s) = {total} runs "
          f"of {first.duration_s:g} s into {out}/", flush=True)
    outcome = run_sweep(out, kind="experiment", name=first.name, source=first.source or first.name,
                        axes=sweep_axes, repeat=args.repeat, fixed=fixed, run_one=run_one,
                        estimate_s=first.duration_s + RUN_OVERHEAD_S, headline=headline, resume=args.resume,
                        progress=not args.quiet, svg=args.svg, command=["bloatlab", *sys.argv[1:]],
                        fingerprint=_fingerprint(args))
    return outcome.tell()


# Network build, teardown, iperf3's last report and writing results: added to a run's duration
# for the first time-left estimate; the sweep learns the real figure as runs finish.
RUN_OVERHEAD_S = 5.0


def _fingerprint(args: argparse.Namespace) -> str:
    """A hash of the spec's text: a resumed sweep must run the spec its first runs ran."""
    import hashlib

    from .spec import preset_path

    path = preset_path(args.preset) if args.preset else Path(args.spec)
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _stamp() -> str:
    import datetime as dt

    return dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def cmd_presets(args: argparse.Namespace) -> int:
    from .spec import list_presets, preset_info

    if args.name:
        description, params = preset_info(args.name)
        print(description)
        print("\nparameters (--set NAME=VALUE):")
        width = max((len(p.name) for p in params), default=0)
        for p in params:
            swept = f"; without --set runs each of: {', '.join(map(str, p.sweep))}" if p.sweep else ""
            print(f"  {p.name:<{width}}  {p.help} (default {p.default}, {p.type}{swept})")
        print(f"\nrun it:  sudo bloatlab run --preset {args.name}")
        return 0
    presets = list_presets()
    width = max(len(name) for name, _ in presets)
    for name, line in presets:
        print(f"{name:<{width}}  {line}")
    print("\nits parameters:  bloatlab presets NAME\nrun one:         sudo bloatlab run --preset NAME [--set PARAM=VALUE ...]")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from .plots import plot_run

    result = plot_run(args.dir, svg=args.svg)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for path in result.files:
        print(path)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from .results import summary_table

    runs = []
    for run_dir in args.dirs:
        summary_path, run_path = run_dir / "summary.json", run_dir / "run.json"
        if not summary_path.exists() or not run_path.exists():
            raise BloatlabError(f"{run_dir} is not a bloatlab run directory (no summary.json/run.json)", field="DIR")
        runs.append((run_dir, json.loads(run_path.read_text()).get("params", {}), json.loads(summary_path.read_text())))
    # Label each column by the parameters that differ between the runs.
    differ = [k for k in runs[0][1] if len({json.dumps(params.get(k)) for _, params, _ in runs}) > 1]
    columns = [(" ".join(f"{k}={params.get(k)}" for k in differ) or run_dir.name, summary)
               for run_dir, params, summary in runs]
    same = {k: v for k, v in runs[0][1].items() if k not in differ}
    if same and len(runs) > 1:
        print("common: " + " ".join(f"{k}={v}" for k, v in same.items()) + "\n")
    print(summary_table(columns))
    return 0


# The parser ---------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="bloatlab", formatter_class=_formatter,
        description="A laboratory for bufferbloat experiments: hosts in network namespaces, joined "
                    "by emulated links with a rate, a delay, loss and a bounded queue.",
        epilog="examples:\n"
               f"  sudo bloatlab up {EXAMPLE_TOPOLOGY} --name t1\n"
               "  sudo bloatlab exec t1 h1 -- ping -c 3 h2\n"
               "  sudo bloatlab down t1\n\n"
               "`bloatlab COMMAND --help` tells more about each command.")
    from . import __version__
    parser.add_argument("--version", action="version", version=f"bloatlab {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, handler, summary: str, description: str, examples: list[str]):
        sub = commands.add_parser(name, help=summary, description=f"{summary}\n\n{description}",
                                  epilog="examples:\n" + "\n".join(f"  {e}" for e in examples),
                                  formatter_class=_formatter)
        sub.set_defaults(handler=handler)
        return sub

    up = command("up", cmd_up, "build a network from a topology file and leave it running",
                 "Creates a namespace per host and switch, the links between them (each served by the "
                 "kernel's qdiscs\nor by the userspace datapath bloatlab-link, which keeps running in "
                 "the background), and\nprints the hosts' addresses and each link's backend. Needs root.",
                 [f"sudo bloatlab up {EXAMPLE_TOPOLOGY} --name t1"])
    up.add_argument("topology", metavar="TOPOLOGY.toml", help="the topology file")
    up.add_argument("--name", required=True,
                    help='the network\'s name: a lowercase letter, then up to 15 lowercase letters, '
                         'digits or "-"')

    ex = command("exec", cmd_exec, "run a command in a host of a network",
                 "Runs CMD in HOST's namespace with this terminal's stdin, stdout and stderr, and exits "
                 "with CMD's\nstatus. Host names resolve inside the network (ping h2 works). Needs root.",
                 ["sudo bloatlab exec t1 h1 -- ping -c 3 h2",
                  "sudo bloatlab exec t1 h2 -- iperf3 -s -1"])
    ex.add_argument("name", metavar="NAME", help="the network")
    ex.add_argument("host", metavar="HOST", help="the host to run in")
    ex.add_argument("command", metavar="-- CMD ...", nargs=argparse.REMAINDER, help="the command and its arguments")

    command("ls", cmd_ls, "list networks",
            "Shows each network's status, hosts, link backends and datapath process, and any bloatlab\n"
            "namespace that belongs to no network.", ["bloatlab ls"])

    down = command("down", cmd_down, "take a network down",
                   "Ends every process in the network's namespaces (the datapath first), then removes "
                   "the\nnamespaces, their /etc/netns files and the network's state. Needs root.",
                   ["sudo bloatlab down t1"])
    down.add_argument("name", metavar="NAME", help="the network")

    command("clean", cmd_clean, "remove everything bloatlab left on this machine",
            "Removes every namespace named bloatlab.* or bloatlab-* with the processes in it, every "
            "datapath\nprocess, /etc/netns/bloatlab.* and /run/bloatlab, also what a killed run left; it "
            "keeps\nthe journals of `bloatlab nic` (/run/bloatlab/nic), which `bloatlab nic restore` needs. "
            "Needs root.", ["sudo bloatlab clean"])

    doc = command("doctor", cmd_doctor, "check what this machine can do",
                  "Probes for real: root, namespaces, veth, kernel qdiscs, tools, the datapath binary, "
                  "and\nwhich link features each backend can serve here; says how to get what is missing.",
                  ["sudo bloatlab doctor", "sudo bloatlab doctor --json > doctor.json"])
    doc.add_argument("--json", action="store_true", help="print the report as JSON")

    run = command("run", cmd_run, "run an experiment and write its results, plots and summary",
                  "Builds the experiment's network, runs its workloads (iperf3, ping, curl) on their "
                  "schedule with\nthe probes (cwnd from tcp:tcp_probe or ss, queue occupancy, "
                  "throughput), removes the network,\nand writes RUN/run.json, summary.json, "
                  "series/*.csv, raw/ and plots/ (docs/results.md).\n\n"
                  "A sweep (--sweep, --repeat, or a parameter the spec sweeps, like aqm in the aqm preset, "
                  "unless\n--set) runs every point of the cross product of its axes --repeat times, each "
                  "run in\nOUT/LABEL/repK/, and writes OUT/sweep.json, aggregate.csv and .json (mean, sd, "
                  "median,\n95% CI per point), series.csv.gz, plots/ and report.html (docs/sweeps.md).\n\n"
                  "Ctrl-C stops cleanly and keeps what was measured, marked incomplete; a sweep keeps "
                  "its\ncomplete runs, and --resume finishes it. Needs root.",
                  ["sudo bloatlab run --preset cs244",
                   "sudo bloatlab run --preset cs244 --sweep maxq=20,40,60,80,100 --repeat 5 --out results/qlen",
                   "sudo bloatlab run --preset cs244 --sweep maxq=20,40,60,80,100 --repeat 5 --out results/qlen --resume",
                   "sudo bloatlab run --preset aqm --set duration=20s   # taildrop, red, codel, pie, fq_codel",
                   "sudo bloatlab run --preset cs244 --set maxq=20 --set duration=30s --out results/q20",
                   "sudo bloatlab run my-experiment.toml --set bw_net=1.5mbit"])
    run.add_argument("spec", metavar="SPEC.toml", nargs="?", type=Path, help="the experiment spec file")
    run.add_argument("--preset", metavar="NAME", help="a bundled experiment instead (bloatlab presets)")
    run.add_argument("--set", metavar="NAME=VALUE", action="append",
                     help="set a parameter of the experiment (repeatable)")
    run.add_argument("--out", metavar="DIR", type=Path,
                     help="the results directory (default: results/NAME-PARAMS-TIMESTAMP, "
                          "or results/NAME-sweep-TIMESTAMP)")
    run.add_argument("--sweep", metavar="NAME=V1,V2,...", action="append",
                     help="run each value of a parameter; repeatable: the runs are the cross product")
    run.add_argument("--repeat", metavar="N", type=int,
                     help="runs per sweep point (default: the spec's `repeat`, else 1); repetition K "
                          "uses seed + K - 1")
    run.add_argument("--resume", action="store_true",
                     help="finish the sweep in --out: skip its complete runs, redo the others")
    run.add_argument("--svg", action="store_true", help="also write the plots as SVG")
    run.add_argument("--quiet", action="store_true", help="no progress bar")

    presets = command("presets", cmd_presets, "list the bundled experiments, or show one's parameters",
                      "Without NAME: one line per preset. With NAME: its description and the parameters "
                      "--set can change.", ["bloatlab presets", "bloatlab presets cs244"])
    presets.add_argument("name", metavar="NAME", nargs="?", help="a preset")

    plot = command("plot", cmd_plot, "redraw the plots of a run from its files",
                   "Reads RUN/run.json, summary.json and series/*.csv (nothing else) and writes RUN/plots/.",
                   ["bloatlab plot results/cs244-maxq100-20261121-101500"])
    plot.add_argument("dir", metavar="DIR", type=Path, help="a run's results directory")
    plot.add_argument("--svg", action="store_true", help="also write SVG")

    compare = command("compare", cmd_compare, "print the summaries of runs side by side",
                      "One column per run, labelled with its parameters.",
                      ["bloatlab compare results/q20 results/q100"])
    compare.add_argument("dirs", metavar="DIR", type=Path, nargs="+", help="results directories of runs")

    from . import replay, report
    replay.add_parser(commands, _formatter)
    report.add_parser(commands, _formatter)
    from . import nic
    nic.add_parser(commands, _formatter)

    bench = commands.add_parser("bench", help="benchmarks of bloatlab itself", formatter_class=_formatter,
                                description="Benchmarks of bloatlab itself.")
    bench_commands = bench.add_subparsers(dest="bench_command", metavar="BENCHMARK", required=True)
    link = bench_commands.add_parser(
        "link", help="how faithfully each link backend emulates rate and delay",
        formatter_class=_formatter,
        description="Measures each backend at each rate and delay: achieved rate, RTT, queueing delay.",
        epilog="examples:\n  sudo bloatlab bench link\n"
               "  sudo bloatlab bench link --rates 10mbit,100mbit --delay 5ms --duration 3s --out results/bench")
    link.set_defaults(handler=cmd_bench_link)
    link.add_argument("--json", action="store_true", help="print the results as JSON")
    link.add_argument("--rates", default="1.5mbit,10mbit,100mbit,1gbit,unlimited",
                      help="comma-separated link rates (default: %(default)s)")
    link.add_argument("--delay", default="0ms,10ms",
                      help="comma-separated one-way delays, each way (default: %(default)s)")
    link.add_argument("--duration", default="5s", help="how long each measurement runs (default: %(default)s)")
    link.add_argument("--rounds", type=int, default=3, metavar="N",
                      help="alternating runs of the unlimited pair without delay, whose throughput is CPU-bound "
                           "and varies most; its target is judged on the median ratio (default: %(default)s)")
    link.add_argument("--out", metavar="DIR", type=Path, help="write raw results under DIR")
    replay.add_bench_parser(bench_commands, _formatter)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.handler(args)
    except BloatlabError as error:
        message = " ".join(str(error).split("\n"))
        print(f"bloatlab: error: {message}", file=sys.stderr)
        return error.exit_status
    except KeyboardInterrupt:
        print("bloatlab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `bloatlab doctor | head`: the reader has gone, which is no error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so exit's flush is quiet
        return 141
    except SystemExit as done:  # --help and --version
        return done.code if isinstance(done.code, int) else 0

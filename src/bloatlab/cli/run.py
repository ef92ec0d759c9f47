"""`bloatlab run` (one run, or a sweep), `presets`, `plot`, `compare` and `report`."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import sys
from pathlib import Path

from typing import TYPE_CHECKING

from bloatlab.cli.common import DIRECTORY, FILE, UsageError, add_command, emit, need_root
from bloatlab.errors import BloatlabError
from bloatlab.lab.executors import EXECUTORS
from bloatlab.live.address import DEFAULT_LISTEN
from bloatlab.specs.experiment import MAX_REPEAT, Source, list_presets, plan_sweep, preset_info, sweep_axes
from bloatlab.specs.model import RUN_BACKENDS

MAX_PARALLEL = 16

if TYPE_CHECKING:
    from bloatlab.lab.executors import Executor
    from bloatlab.lab.run import Outcome
    from bloatlab.specs.model import Experiment

# The layers a command runs are imported when it runs: `bloatlab --help` and the commands that
# only read a file start without pandas and matplotlib.


def cmd_run(args: argparse.Namespace) -> int:

    if (args.spec is None) == (args.preset is None):
        raise UsageError("give a spec file or --preset NAME (bloatlab presets lists them), not both")
    if args.allow_remote and args.live is None:
        raise UsageError("--allow-remote serves the live view beyond loopback; it goes with --live=ADDR:PORT")
    if args.repeat is not None and not 1 <= args.repeat <= MAX_REPEAT:
        raise UsageError(f"{args.repeat} repetitions; give --repeat a whole number from 1 to {MAX_REPEAT}")
    source = Source(args.preset, args.spec, pcap=tuple(d.strip() for item in args.pcap or [] for d in item.split(",")),
                    backend=args.backend, punctual=args.punctual)
    sets = args.set or []
    axes = sweep_axes(args.preset, args.spec, sets, args.sweep or [], offered_ccs=_offered_ccs)
    repeat = args.repeat if args.repeat is not None else source.load(sets).repeat  # the spec's own `repeat`
    if axes or repeat > 1 or args.resume:
        return _sweep(args, source, sets, axes, repeat)
    if args.cluster:
        raise UsageError("--cluster sends a sweep's runs to a Ray cluster; add --sweep NAME=V1,V2 or --repeat N")
    if args.parallel > 1:
        raise UsageError("--parallel runs a sweep's runs side by side; add --sweep NAME=V1,V2 or --repeat N")
    experiment = source.load(sets)
    from bloatlab.lab.outcome import default_out

    if experiment.backend == "ns3":  # a simulation builds nothing on the machine: no root
        from bloatlab.lab.simulate import simulate_experiment as run_experiment  # it imports the rest meanwhile
    else:
        need_root("run")
        from bloatlab.lab.run import run_experiment
    out = args.out or default_out(experiment)
    with _live(args, out) as live:
        outcome = run_experiment(experiment, out, progress=not args.quiet, svg=args.svg)
        _tell_run(args, experiment, outcome)
        if live is not None and not outcome.interrupted:
            live.linger()  # the page links the report now
    return _exit_status(outcome)


@contextlib.contextmanager
def _live(args: argparse.Namespace, out: Path):
    """The live view of OUT (with --live) for the block's length; None without."""
    if args.live is None:
        yield None
        return
    from bloatlab.live.child import ViewProcess

    try:
        live = ViewProcess(out, args.live, args.allow_remote)
    except BloatlabError as e:
        if "not ADDR:PORT" not in e.message:
            raise
        raise UsageError(f"{e.message}; write --live=ADDR:PORT, or give the spec file before --live",
                         field="--live") from None
    print(f"live view: {live.url}", file=sys.stderr, flush=True)
    try:
        yield live
    finally:
        live.close()


def _tell_run(args: argparse.Namespace, experiment: Experiment, outcome: Outcome) -> None:
    from bloatlab.analysis.summary import summary_table

    label = " ".join(f"{k}={v}" for k, v in experiment.params.items()) or experiment.name
    for warning in outcome.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    lines = [summary_table([(label, outcome.summary)]), "",
             f"results: {outcome.run_dir}/ (summary.json, series/, raw/)"]
    if outcome.summary.pcap:
        files = [f.file for d in outcome.summary.pcap.values() for f in (d.departures, d.drops)]
        lines.append(f"pcap:    {outcome.run_dir}/ ({', '.join(files)}): wireshark or tshark -r FILE")
    if outcome.plots:
        lines.append(f"plots:   {outcome.run_dir / 'plots'}/ "
                     f"({', '.join(p.name for p in outcome.plots if p.suffix == '.png')})")
    if outcome.report:
        lines.append(f"report:  {outcome.report}")
    emit(args, outcome.to_dict(), "\n".join(lines))


def _exit_status(outcome: Outcome) -> int:
    if not outcome.complete:
        print(f"bloatlab: the run is incomplete ({outcome.reason}); what was measured is kept", file=sys.stderr)
        return 130 if (outcome.reason or "").startswith("interrupted") else 1
    return 0


def _sweep(args: argparse.Namespace, source: Source, sets: list[str], axes: list[tuple[str, list[str]]],
           repeat: int) -> int:
    """The cross product of the axes, `repeat` times each (docs/sweeps.md)."""
    from bloatlab.lab.executors import ProcessExecutor, executor
    from bloatlab.lab.run import sweep_experiment

    if args.resume and args.out is None:
        raise UsageError("--resume needs --out DIR: the directory of the sweep to finish")
    if not 1 <= args.parallel <= MAX_PARALLEL:
        raise UsageError(f"--parallel {args.parallel}: give a whole number from 1 to {MAX_PARALLEL}")
    if args.parallel > 1 and args.cluster:
        raise UsageError("--parallel runs a sweep's runs side by side on this machine, --cluster on a cluster's "
                         "nodes (one per node); give one of them")
    plan = plan_sweep(source, sets, axes)  # every point is checked before the first run
    if plan.first.backend != "ns3" and not args.cluster:  # a cluster's nodes run as root, not this machine
        need_root("run")
    first = plan.first
    out = args.out or Path("results") / f"{first.name}-sweep-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    total = len(plan.points) * repeat
    with contextlib.ExitStack() as stack:
        if args.cluster:
            where = _cluster_executor(args.cluster, first.duration_s, quiet=args.quiet)
            stack.callback(where.close)
        elif args.parallel > 1:
            where = ProcessExecutor(args.parallel)
        else:
            where = executor(args.executor)
        print(f"sweep {first.name}: {len(plan.points)} point(s) x {repeat} repetition(s) = {total} runs "
              f"of {first.duration_s:g} s into {out}/", flush=True)
        live = stack.enter_context(_live(args, out))
        outcome = sweep_experiment(plan, out, repeat=repeat, resume=args.resume, progress=not args.quiet,
                                   svg=args.svg, command=["bloatlab", *sys.argv[1:]], executor=where)
        status = outcome.tell()  # with --json, on stderr
        emit(args, outcome.to_dict())
        if live is not None and not outcome.interrupted:
            live.linger()
    return status


def _offered_ccs() -> list[str]:
    from bloatlab.testbed.congestion import offered

    return offered()


def _cluster_executor(address: str, duration_s: float, quiet: bool) -> Executor:
    """The cluster at `address`, its nodes checked; those that fail are named and left out."""
    from bloatlab.lab import cluster

    ray = cluster.connect(address)
    checks = cluster.check_nodes(ray)
    if not quiet or not all(c.ok for c in checks):
        print(cluster.render_checks(checks, address), flush=True)
    trust = cluster.trust(address, checks)
    if not trust.guarded or trust.exposed:  # its runs are root on every node: say what guards them
        print(f"warning: {trust.line()}", file=sys.stderr, flush=True)
    if not any(c.ok for c in checks):
        cluster.disconnect()
        raise BloatlabError(f"no node of the Ray cluster at {address} can run bloatlab (above: why); "
                            "bloatlab doctor --cluster ADDRESS checks them again", field="--cluster")
    return cluster.ClusterExecutor(address, checks, run_timeout_s=cluster.run_timeout(duration_s))


def cmd_presets(args: argparse.Namespace) -> int:
    if args.name:
        description, params = preset_info(args.name)
        lines = [description, "", "parameters (--set NAME=VALUE):"]
        width = max((len(p.name) for p in params), default=0)
        for p in params:
            swept = f"; without --set runs each of: {', '.join(map(str, p.sweep))}" if p.sweep else ""
            lines.append(f"  {p.name:<{width}}  {p.help} (default {p.default}, {p.type}{swept})")
        lines += ["", f"run it:  sudo bloatlab run --preset {args.name}"]
        doc = {"name": args.name, "description": description,
               "params": [{"name": p.name, "type": p.type, "default": p.default, "help": p.help,
                           "choices": list(p.choices) if p.choices else None,
                           "sweep": list(p.sweep) if p.sweep else None} for p in params]}
        emit(args, doc, "\n".join(lines))
        return 0
    presets = list_presets()
    width = max(len(name) for name, _ in presets)
    lines = [f"{name:<{width}}  {line}" for name, line in presets]
    lines += ["", "its parameters:  bloatlab presets NAME",
              "run one:         sudo bloatlab run --preset NAME [--set PARAM=VALUE ...]"]
    emit(args, {"presets": [{"name": name, "summary": line} for name, line in presets]}, "\n".join(lines))
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from bloatlab.analysis.plots import plot_run

    result = plot_run(args.dir, svg=args.svg)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    emit(args, {"files": [str(p) for p in result.files], "warnings": result.warnings},
         "\n".join(str(p) for p in result.files))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from bloatlab.analysis import compare
    from bloatlab.analysis.summary import summary_table
    from bloatlab.results.reader import is_run, load_run

    runs = []
    for run_dir in args.dirs:
        if not is_run(run_dir):
            raise BloatlabError(f"{run_dir} is not a bloatlab run directory (no summary.json/run.json)", field="DIR")
        runs.append(load_run(run_dir))
    names, same = compare.labels(runs)
    text = summary_table(list(zip(names, (run.summary for run in runs))))
    if same and len(runs) > 1:
        text = "common: " + " ".join(f"{k}={v}" for k, v in same.items()) + "\n\n" + text
    doc: dict = {"runs": [{"dir": str(run.path), "label": label, "backend": compare.backend(run), "params": run.params,
                           "summary": run.summary.to_dict() if run.summary is not None else {}}
                          for run, label in zip(runs, names)]}
    if len(runs) == 2:
        diffs = compare.differences(runs[0].summary, runs[1].summary)
        text += f"\n\nB ({names[1]}) against A ({names[0]}):\n" + compare.differences_table(diffs, "A", "B")
        doc["differences"] = [{"metric": d.metric, "a": d.a, "b": d.b, "relative": d.relative} for d in diffs]
    if args.out is not None:
        from bloatlab.analysis.plots import save_figures
        from bloatlab.analysis.report import write_compare_report

        args.out.mkdir(parents=True, exist_ok=True)
        figures = compare.figures(runs, names)
        files = save_figures(figures, args.out, args.svg)
        report = write_compare_report(args.out, runs, names, same, {n: args.out / f"{n}.png" for n in figures})
        doc.update(files=[str(f) for f in files], report=str(report))
        text += f"\n\nplots:   {args.out}/ ({', '.join(f.name for f in files)})\nreport:  {report}"
    emit(args, doc, text)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from bloatlab.analysis.report import write_report
    from bloatlab.lab.run import recover_run

    # A run killed outright wrote no series: first what its tools had written by then.
    recovered = recover_run(args.dir)
    report = recovered.report if recovered is not None and recovered.report else write_report(args.dir)
    said = f"recovered a run that ended without its results ({recovered.reason})\n" if recovered is not None else ""
    emit(args, {"report": str(report), "recovered": recovered.reason if recovered is not None else None},
         f"{said}{report}")
    return 0


def add_parsers(commands: argparse._SubParsersAction) -> None:
    run = add_command(commands, "run", cmd_run, "run an experiment and write its results, plots and summary",
                      "Builds the experiment's network, runs its workloads (iperf3, ping, curl) on their "
                      "schedule with\nthe probes (cwnd from tcp:tcp_probe or ss, queue occupancy, "
                      "throughput), removes the network,\nand writes RUN/run.json, summary.json, "
                      "series/*.csv, raw/ and plots/ (docs/results.md).\n\n"
                      "A sweep (--sweep, --repeat, or a parameter the spec sweeps, like aqm in the aqm preset, "
                      "unless\n--set) runs every point of the cross product of its axes --repeat times, each "
                      "run in\nOUT/LABEL/repK/, and writes OUT/sweep.json, aggregate.csv and .json (mean, sd, "
                      "median,\n95% CI per point), series.csv.gz, plots/ and report.html (docs/sweeps.md).\n\n"
                      "Ctrl-C stops cleanly and keeps what was measured, marked incomplete; a sweep keeps "
                      "its\ncomplete runs, and --resume finishes it. Needs root, unless simulated (--backend ns3) "
                      "or sent\nto a Ray cluster (--cluster; docs/cluster.md). `bloatlab sweep` is this command.",
                      ["sudo bloatlab run --preset cs244",
                       "sudo bloatlab run --preset cs244 --sweep maxq=20,40,60,80,100 --repeat 5 --out results/qlen",
                       "sudo bloatlab run --preset cs244 --sweep maxq=20,40,60,80,100 --repeat 5 --out results/qlen --resume",
                       "sudo bloatlab run --preset aqm --set duration=20s   # taildrop, red, codel, pie, fq_codel",
                       "sudo bloatlab run --preset cs244 --set maxq=20 --set duration=30s --out results/q20",
                       "sudo bloatlab run --preset aqm --set aqm=codel --pcap 's0->h2'   # then: wireshark RUN/pcap/*.pcapng",
                       "bloatlab run --preset cs244 --backend ns3 --out results/cs244-ns3   # simulated: no root",
                       "sudo bloatlab run my-experiment.toml --set bw_net=1.5mbit",
                       "bloatlab sweep --preset cs244 --sweep maxq=20,100 --repeat 2 --cluster head:6379   # on a Ray cluster"],
                      aliases=("sweep",))
    run.add_argument("spec", metavar="SPEC.toml", nargs="?", type=Path, help="the experiment spec file").complete = FILE
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
    run.add_argument("--backend", choices=RUN_BACKENDS,
                     help="where it runs, instead of the spec's `backend`: emulation (network namespaces, the "
                          "real Linux stack; needs root) or ns3 (simulated in ns-3, from the same spec; "
                          "docs/simulation.md)")
    run.add_argument("--punctual", action="store_true",
                     help="the userspace datapath wakes early enough for this machine's latest wake-ups and spins "
                          "through them: departures as punctual as the machine allows, for up to a core per busy "
                          "worker (the spec's `punctual`; docs/datapath.md)")
    run.add_argument("--pcap", metavar="DIRECTION", action="append",
                     help='capture a link direction ("s0->h2"; repeat or comma-separate for more): every packet '
                          "it sends to RUN/pcap/s0_to_h2.pcapng and every packet it drops, with the reason, to "
                          "s0_to_h2.drops.pcapng; the spec's [probes] pcap_snaplen and pcap_limit bound them "
                          "(docs/results.md)")
    run.add_argument("--executor", default="local", choices=sorted(EXECUTORS),
                     help="where a sweep's runs run (default: %(default)s: one after another on this machine)")
    run.add_argument("--parallel", type=int, default=1, metavar="N",
                     help="a sweep's emulated runs N at a time on this machine, each its own network in a process of "
                          "its own (default 1; 2-3 suit rates to some 20 Mbit/s on two cores, and each run's "
                          "datapath self-check says when they shared too little CPU)")
    run.add_argument("--live", metavar="ADDR:PORT", nargs="?", const=DEFAULT_LISTEN,
                     help="follow the run (or sweep) in the browser: serves a live page on loopback (a free port "
                          "unless given; write --live=ADDR:PORT) and prints its URL; the page stays after the run "
                          "and links its report, until Ctrl-C (bloatlab view --help)")
    run.add_argument("--allow-remote", action="store_true",
                     help="with --live on a non-loopback address: serve it there, every request carrying the "
                          "printed URL's token")
    run.add_argument("--cluster", metavar="ADDRESS",
                     help="run a sweep's runs on the Ray cluster whose head is at ADDRESS (host:port), one at a "
                          "time per node that offers the bloatlab_testbed resource and passes its checks; the "
                          "results come back into --out as a local sweep's (docs/cluster.md)")

    presets = add_command(commands, "presets", cmd_presets, "list the bundled experiments, or show one's parameters",
                          "Without NAME: one line per preset. With NAME: its description and the parameters "
                          "--set can change.", ["bloatlab presets", "bloatlab presets cs244"])
    presets.add_argument("name", metavar="NAME", nargs="?", help="a preset")

    plot = add_command(commands, "plot", cmd_plot, "redraw the plots of a run from its files",
                       "Reads RUN/run.json, summary.json and series/*.csv (nothing else) and writes RUN/plots/.",
                       ["bloatlab plot results/cs244-maxq100-20261121-101500"])
    plot.add_argument("dir", metavar="DIR", type=Path, help="a run's results directory").complete = DIRECTORY
    plot.add_argument("--svg", action="store_true", help="also write SVG")

    compare = add_command(commands, "compare", cmd_compare, "print the summaries of runs side by side",
                          "One column per run, labelled with what differs between them: its parameters, or "
                          "where it ran\n(emulation, ns3). For two runs, the second's headline numbers "
                          "against the first's: goodput,\nRTT min/median/p95/max, queue, fetch times, "
                          "with the relative difference. With --out,\nfigures with every run on one axis "
                          "(RTT CDF, goodput, queue, cwnd) and OUT/report.html.",
                          ["bloatlab compare results/q20 results/q100",
                           "bloatlab compare results/cs244 results/cs244-ns3 --out results/cs244-vs-ns3"])
    compare.add_argument("dirs", metavar="DIR", type=Path, nargs="+",
                         help="results directories of runs").complete = DIRECTORY
    compare.add_argument("--out", metavar="DIR", type=Path,
                         help="write the comparison's figures and report.html here").complete = DIRECTORY
    compare.add_argument("--svg", action="store_true", help="also write the figures as SVG (with --out)")

    summary = "write the self-contained HTML report of a run or a sweep"
    report = add_command(commands, "report", cmd_report, summary,
                             "Reads DIR's files alone (run.json, summary.json, series/; or sweep.json, aggregate.json and "
                             "the\nrun directories) and writes DIR/report.html: what ran, on what machine, the numbers "
                             "per\nconfiguration and the figures, embedded. It opens in any browser, with no server "
                             "(docs/sweeps.md).\n\nA run killed outright (SIGKILL, a crash, a full disk) left only run.json "
                             "and raw/: its series and\nsummary are first rebuilt from what its tools had written "
                             "by then, still marked incomplete.",
                             ["bloatlab report results/q", "bloatlab report results/cs244-maxq100-20261121-101500"])
    report.add_argument("dir", metavar="DIR", type=Path,
                        help="a run's or a sweep's results directory").complete = DIRECTORY

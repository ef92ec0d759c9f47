"""`bloatlab calibrate`: an emulated path fitted to measurements of a real one (lab/calibration/)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bloatlab.cli.common import DIRECTORY, FILE, UsageError, add_command, emit, need_root, note
from bloatlab.errors import BloatlabError
from bloatlab.specs.units import parse_duration_ns

MAX_TRIALS = 500


def cmd_calibrate(args: argparse.Namespace) -> int:
    from bloatlab.lab.calibration.job import calibrate
    from bloatlab.lab.calibration.path import MAX_LIMIT, MIN_LIMIT
    from bloatlab.lab.calibration.search import Settings
    from bloatlab.results.measurement import MIN_LOAD_S, START_S, read_measurement
    from bloatlab.specs.queues import parse_discipline

    if not 2 <= args.trials <= MAX_TRIALS:
        raise UsageError(f"--trials {args.trials}: give a whole number from 2 to {MAX_TRIALS}")
    if not 0 <= args.confirm <= args.trials:
        raise UsageError(f"--confirm {args.confirm}: give a whole number from 0 to --trials ({args.trials})")
    if not 1 <= args.parallel <= 16:
        raise UsageError(f"--parallel {args.parallel}: give a whole number from 1 to 16")
    if args.limit is not None and not MIN_LIMIT <= args.limit <= MAX_LIMIT:
        raise UsageError(f"--limit {args.limit}: give packets from {MIN_LIMIT} to {MAX_LIMIT}")
    short_s = parse_duration_ns(args.short, "--short", allow_zero=False) / 1e9
    if short_s < MIN_LOAD_S or short_s != int(short_s):
        raise BloatlabError(f"{args.short} is not whole seconds of at least {MIN_LOAD_S:g}; iperf3 runs whole seconds, "
                            f"and the first {START_S:g} are slow start, compared apart", field="--short")
    disciplines = tuple(dict.fromkeys(parse_discipline(d.strip(), "--discipline").value
                                      for d in args.discipline.split(",") if d.strip()))
    if not disciplines:
        raise UsageError("--discipline: name at least one queue discipline, e.g. taildrop or taildrop,codel")
    measurements = [read_measurement(path) for path in args.measurement]
    if args.cluster is None:
        need_root("calibrate")
    settings = Settings(trials=args.trials, confirm=args.confirm, short_load_s=short_s, parallel=args.parallel,
                            disciplines=disciplines, limit_pkts=args.limit, loss=args.loss, jitter=args.jitter,
                            seed=args.seed)
    executor = None
    if args.cluster:
        from bloatlab.cli.run import _cluster_executor

        longest = max(m.duration_s for m in measurements)
        executor = _cluster_executor(args.cluster, longest, quiet=args.quiet)
    for m in measurements:
        for line in m.notes:
            note(args, f"calibrate: {m.source}: {line}")
    doc = calibrate(measurements, args.out, settings, executor,
                        say=(lambda line: None) if args.quiet else (lambda line: note(args, line)))
    worst = sorted(doc["residuals"], key=lambda r: -abs(r["relative_error"]))[:3]
    median = doc["median_abs_relative_error"]
    lines = [f"fitted path: {doc['fitted_text']}",
             f"error {doc['error']:.3f}; a figure's median |relative error| {100 * median:.1f}%; the worst: "
             + ", ".join(f"{r['figure']} {100 * r['relative_error']:+.1f}%" for r in worst),
             f"{doc['runs']} emulated runs in {doc['seconds']:.0f} s",
             f"results: {args.out}/ (calibration.json, path.toml, {', '.join(doc['files']['tests'])}, plots/, "
             "report.html)",
             f"run the measured test on it: bloatlab run {args.out / doc['files']['tests'][0]}"]
    emit(args, doc, "\n".join(lines))
    return 0


def add_parsers(commands: argparse._SubParsersAction) -> None:
    sub = add_command(
        commands, "calibrate", cmd_calibrate, "fit an emulated path to measurements of a real one",
        "Reads each MEASUREMENT (a Flent data file: rrul, rrul_be, tcp_nup, tcp_ndown, tcp_1up, tcp_1down,\n"
        "ping; a bloatlab run directory; a nic sweep's run), runs the same test on an emulated link\n"
        "between `client` and `server`, and searches the link's rate each way, base RTT, queue discipline\n"
        "and limit (and random loss and jitter where asked) until the emulated figures match the measured\n"
        "ones: each flow's throughput, each direction's total (10/50/90th percentiles) and each probe's\n"
        "round trips (10th to 99th percentile, idle and under load). Short runs search (optuna's TPE\n"
        "sampler, from a guess corrected by the physics), full-length runs confirm. Writes the fitted link\n"
        "(path.toml, for any experiment's topology), the measured test on it (test.toml), the residual of\n"
        "every figure (calibration.json), plots and report.html (docs/calibration.md).",
        ["bloatlab calibrate testbed.flent.gz --out results/cal",
         "bloatlab calibrate rrul.flent.gz tcp_nup.flent.gz --discipline taildrop,codel,fq_codel --out results/cal",
         "bloatlab calibrate results/rrul --discipline taildrop --trials 10 --parallel 2 --out results/cal-rrul",
         "bloatlab run results/cal/test.toml --set discipline=fq_codel   # the same path, another queue"])
    sub.add_argument("measurement", nargs="+", metavar="MEASUREMENT",
                     help="a Flent data file, a run directory or a nic sweep's run; several are fitted together (one path)"
                     ).complete = FILE
    sub.add_argument("--out", type=Path, required=True, metavar="DIR",
                     help="where the calibration goes (a new directory, or an earlier calibration's)"
                     ).complete = DIRECTORY
    sub.add_argument("--discipline", default="taildrop,codel,pie,fq_codel", metavar="D[,D]",
                     help="the queue discipline, or the candidates to choose among (default: %(default)s)")
    sub.add_argument("--limit", type=int, metavar="PACKETS",
                     help="the queue limit, if known (default: a FIFO's is searched, an AQM keeps its own)")
    sub.add_argument("--trials", type=int, default=16, metavar="N",
                     help="short emulated runs in all: one per candidate discipline, then the search (default 16)")
    sub.add_argument("--confirm", type=int, default=2, metavar="K",
                     help="of the best short runs, how many run again at the measurement's length (default 2)")
    sub.add_argument("--short", default="8s", metavar="SECONDS", help="the load of a short run (default 8s)")
    sub.add_argument("--parallel", type=int, default=1, metavar="N",
                     help="short runs at once on this machine, each its own network (default 1; 2-3 suit "
                          "rates to some 20 Mbit/s on two cores)")
    sub.add_argument("--loss", action="store_true", help="search random loss each way too (0-2%%)")
    sub.add_argument("--jitter", action="store_true", help="search delay jitter each way too")
    sub.add_argument("--seed", type=int, default=1, metavar="N", help="the search's and the runs' seed (default 1)")
    sub.add_argument("--cluster", metavar="ADDRESS",
                     help="run the emulated runs on the Ray cluster at ADDRESS, one per node (docs/cluster.md)")

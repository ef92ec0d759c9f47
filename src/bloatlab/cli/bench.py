"""`bloatlab bench`: benchmarks of bloatlab itself; the work is bloatlab.bench's (link, sim, machine, replay)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bloatlab.bench import replay as bench_replay
from bloatlab.cli.common import DIRECTORY, add_command, emit, formatter, need_root, note
from bloatlab.cli.replay import parse_count, parse_queue_option
from bloatlab.errors import BloatlabError, SpecError
from bloatlab.specs.units import parse_duration_ns, parse_rate


def _link_cases(args: argparse.Namespace) -> tuple[list[int | None], float]:
    """--rates, --duration and --rounds of the benchmarks that measure links, checked."""
    rates = [parse_rate(r.strip(), "--rates") for r in args.rates.split(",") if r.strip()]
    duration_s = parse_duration_ns(args.duration, "--duration", allow_zero=False) / 1e9
    if duration_s < 2:
        raise BloatlabError("at least 2s, so that the slow start can be left out", field="--duration")
    if not 1 <= args.rounds <= 20:
        raise BloatlabError(f"{args.rounds} is out of range; give 1 to 20", field="--rounds")
    return rates, duration_s


def cmd_bench_link(args: argparse.Namespace) -> int:
    rates, duration_s = _link_cases(args)
    delays = [parse_duration_ns(d.strip(), "--delay") for d in args.delay.split(",") if d.strip()]
    need_root("bench link")
    from bloatlab.bench import link as bench  # builds networks: imported when it runs

    out_dir = Path(args.out or f"results/bench-link-{time.strftime('%Y%m%d-%H%M%S')}")
    doc = bench.run_link(rates, delays, duration_s, args.rounds, out_dir, progress=not args.quiet, pcap=args.pcap)
    table = doc.pop("table")
    emit(args, doc, f"{table}\n\n" + "\n".join(doc["targets"]) + f"\n\nresults: {out_dir}/bench-link.txt and "
         "bench-link.json")
    return 1 if any(line.startswith("MISS") for line in doc["targets"]) else 0


def cmd_bench_sim(args: argparse.Namespace) -> int:
    if not 1 <= args.maxq <= 100000:
        raise BloatlabError(f"{args.maxq} is out of range; give 1 to 100000 packets", field="--maxq")
    duration_s = parse_duration_ns(args.duration, "--duration", allow_zero=False) / 1e9
    if duration_s < 5:
        raise BloatlabError("at least 5s: the first seconds are the flow's slow start", field="--duration")
    if not args.no_emulated:
        need_root("bench sim (its emulated baseline; --no-emulated skips it)")
    from bloatlab.bench import sim as bench_sim  # builds the ns-3 driver: imported when it runs

    out_dir = Path(args.out or f"results/bench-sim-{time.strftime('%Y%m%d-%H%M%S')}")
    doc = bench_sim.run_sim_bench(args.maxq, args.duration, out_dir, emulated=not args.no_emulated)
    table = bench_sim.render(doc)
    (out_dir / "bench-sim.txt").write_text(table + "\n\n" + "\n".join(doc["targets"]) + "\n")
    emit(args, doc, f"{table}\n\n" + "\n".join(doc["targets"]) + f"\n\nresults: {out_dir}/ (bench-sim.txt, "
         "bench-sim.json, ns3/ and emulation/ runs)")
    return 1 if any(line.startswith("MISS") for line in doc["targets"]) else 0


def cmd_bench_machine(args: argparse.Namespace) -> int:
    from bloatlab.bench import machine as bm  # builds networks: imported when it runs
    from bloatlab.bench import targets

    names = targets.parse_only(args.only)
    limits = targets.parse_limits(args.target or [])
    rates, duration_s = _link_cases(args)
    if not rates or None in rates:
        raise BloatlabError("give shaped rates, e.g. 1gbit,2gbit (not unlimited)", field="--rates")
    need_root("bench machine")
    out_dir = Path(args.out or f"results/bench-machine-{time.strftime('%Y%m%d-%H%M%S')}")
    doc = bm.run_machine(names, limits, rates, duration_s, args.rounds, out_dir,
                         say=lambda line: note(args, line))
    emit(args, doc, f"{targets.render(doc)}\n\nresults: {out_dir}/bench-machine.txt and bench-machine.json")
    return 0 if all(t["ok"] for t in doc["targets"]) else 1


def cmd_bench_calibrate(args: argparse.Namespace) -> int:
    """Parameter recovery: known paths measured, exported to Flent, calibrated back."""
    cases = []
    for item in (c.strip() for c in args.cases.split(",") if c.strip()):
        parts = item.split(":")
        if len(parts) != 3 or not parts[2].isdigit():
            raise BloatlabError(f"{item!r} is not RATE:DISCIPLINE:LIMIT; write e.g. 10mbit:taildrop:50", field="--cases")
        parse_rate(parts[0], "--cases")
        cases.append((parts[0], parts[1], int(parts[2])))
    parse_duration_ns(args.duration, "--duration", allow_zero=False)
    need_root("bench calibrate")
    from bloatlab.bench import calibrate as bench  # builds networks: imported when it runs
    from bloatlab.lab.calibration.search import Settings

    out_dir = Path(args.out or f"results/bench-calibrate-{time.strftime('%Y%m%d-%H%M%S')}")
    settings = Settings(trials=args.trials, confirm=args.confirm, parallel=args.parallel)
    doc = bench.run_calibration_bench(cases, args.duration, settings, out_dir, say=lambda line: note(args, line))
    emit(args, doc, f"{bench.render(doc)}\n\nresults: {out_dir}/ (bench-calibrate.txt, bench-calibrate.json, each "
         "case's measurement and calibration)")
    return 1 if any(line.startswith("MISS") for line in doc["targets"]) else 0


def cmd_bench_live(args: argparse.Namespace) -> int:
    """What following a run with the live view costs it: the same cs244 run alone and followed."""
    parse_duration_ns(args.duration, "--duration", allow_zero=False)
    repeats = parse_count(args.repeat, "--repeat", 2, 20)
    need_root("bench live")
    from bloatlab.bench import live as bench  # builds networks: imported when it runs

    out_dir = Path(args.out or f"results/bench-live-{time.strftime('%Y%m%d-%H%M%S')}")
    doc = bench.run_live_bench(args.duration, repeats, out_dir, say=lambda line: note(args, line))
    emit(args, doc, f"{bench.render(doc)}\n\nresults: {out_dir}/ (bench-live.json, each run)")
    return 1 if any(line.startswith("MISS") for line in doc["targets"]) else 0


def cmd_bench_soak(args: argparse.Namespace) -> int:
    """A long sweep of short runs, then one long run, watched for growth."""
    runs = parse_count(args.runs, "--runs", 6, 100000)
    for flag, value in (("--run", args.run), ("--long", args.long)):
        if parse_duration_ns(value, flag, allow_zero=False) < 1e9:
            raise BloatlabError(f"{value!r} is too short; give at least 1s", field=flag)
    need_root("bench soak")
    from bloatlab.bench import soak as bench  # builds networks: imported when it runs

    out_dir = Path(args.out or f"results/bench-soak-{time.strftime('%Y%m%d-%H%M%S')}")
    doc = bench.run_soak(runs, args.run, args.long, out_dir, say=lambda line: note(args, line))
    emit(args, doc, f"{bench.render(doc)}\n\nresults: {out_dir}/ (bench-soak.json, soak-samples.csv, the runs)")
    return 1 if any(line.startswith("MISS") for line in doc["targets"]) else 0


def cmd_bench_replay(args: argparse.Namespace) -> int:
    """Packets per second of each discipline, and a verdict on CoDel against its target."""
    try:
        millions = float(args.packets)
    except ValueError:
        millions = 0.0
    if not 0 < millions <= 1000:
        raise SpecError(f"{args.packets!r} is not a number of millions of packets, e.g. 5", field="--packets")
    repeats = parse_count(args.repeat, "--repeat", 1, 100)
    # By their names here: an alias (taildrop) is its discipline's.
    disciplines = [parse_queue_option(f"discipline={d.strip()}", "--disciplines").discipline
                   for d in args.disciplines.split(",") if d.strip()]
    results = bench_replay.bench(disciplines, round(millions * 1e6), repeats, say=lambda line: print(line, flush=True),
                    progress=not args.quiet)
    verdict = None
    if "codel" in results:
        best = results["codel"]["best_pps"]
        verdict = "ok" if best >= bench_replay.TARGET_PPS else "MISS"
        print(f"\n{verdict}: codel {best / 1e6:.2f} Mpps (best of {repeats}) against {bench_replay.TARGET_PPS / 1e6:g} Mpps")
    emit(args, {"packets": round(millions * 1e6), "repeat": repeats, "disciplines": results,
                "target": {"discipline": "codel", "pps": bench_replay.TARGET_PPS, "verdict": verdict}})
    return 1 if verdict == "MISS" else 0


def _add_replay_parser(bench_commands: argparse._SubParsersAction) -> None:
    """Registers `bloatlab bench replay` among the bench subcommands."""
    summary = "how many packets per second bloatlab replay runs through each discipline"
    sub = add_command(
        bench_commands, "replay", cmd_bench_replay, summary,
        "Replays synthetic packets (poisson, 1.2x the link rate) through each discipline in virtual time,\n"
        "writing every fate, and prints packets per second; the verdict is CoDel's against "
        f"{bench_replay.TARGET_PPS / 1e6:g} Mpps\n(exit status 1 if it misses).",
        ["bloatlab bench replay", "bloatlab bench replay --packets 10 --repeat 5 --disciplines codel"])
    sub.add_argument("--packets", default="5", metavar="MILLIONS", help="packets per run, in millions (default: %(default)s)")
    sub.add_argument("--repeat", default="3", metavar="N", help="runs per discipline (default: %(default)s)")
    sub.add_argument("--disciplines", default=",".join(bench_replay.DISCIPLINES), metavar="LIST",
                     help="comma-separated (default: %(default)s)")


def add_parsers(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("bench", help="benchmarks of bloatlab itself", formatter_class=formatter,
                                 description="Benchmarks of bloatlab itself. Each exits with status 1 when a "
                                             "figure misses its target.")
    benchmarks = parser.add_subparsers(dest="bench_command", metavar="BENCHMARK", required=True)
    link = add_command(
        benchmarks, "link", cmd_bench_link, "how faithfully each link backend emulates rate and delay",
        "Measures each backend at each rate and delay: achieved rate, RTT, queueing delay, and checks\n"
        "them against their targets (exit status 1 if one misses). Needs root.",
        ["sudo bloatlab bench link",
         "sudo bloatlab bench link --rates 10mbit,100mbit --delay 5ms --duration 3s --out results/bench",
         "sudo bloatlab bench link --rates 1gbit --delay 0ms --pcap   # what capturing both directions costs"])
    link.add_argument("--rates", default="1.5mbit,10mbit,100mbit,1gbit,unlimited",
                      help="comma-separated link rates (default: %(default)s)")
    link.add_argument("--delay", default="0ms,10ms",
                      help="comma-separated one-way delays, each way (default: %(default)s)")
    link.add_argument("--duration", default="5s", help="how long each measurement runs (default: %(default)s)")
    link.add_argument("--rounds", type=int, default=3, metavar="N",
                      help="alternating runs of the unlimited pair without delay, whose throughput is CPU-bound "
                           "and varies most; its target is judged on the median ratio (default: %(default)s)")
    link.add_argument("--pcap", action="store_true",
                      help="also run each userspace case capturing both directions (as [probes] pcap does, "
                           "files removed after): every packet must reach its file, and the goodput stay within "
                           "3%% of the uncaptured case's")
    link.add_argument("--out", metavar="DIR", type=Path, help="write raw results under DIR").complete = DIRECTORY
    cal = add_command(
        benchmarks, "calibrate", cmd_bench_calibrate, "parameter recovery: known paths calibrated back from Flent files",
        "For each case, an rrul run on a known path (20 ms base RTT, the case's rate, discipline and limit\n"
        "both ways) is exported with export --flent and calibrated from that file alone, with the\n"
        "candidate disciplines taildrop, codel, pie and fq_codel. Targets: the rates within 3%, the base\n"
        "RTT within 1 ms, a taildrop limit within 15%, an AQM named right (exit status 1 if one misses).",
        ["sudo bloatlab bench calibrate",
         "sudo bloatlab bench calibrate --cases 10mbit:taildrop:50 --trials 10 --parallel 3"])
    cal.add_argument("--cases", default="10mbit:taildrop:50,10mbit:codel:1000,100mbit:taildrop:300,100mbit:codel:1000",
                     help="RATE:DISCIPLINE:LIMIT, comma-separated (default: %(default)s)")
    cal.add_argument("--duration", default="30s", help="each measurement's length (default: %(default)s)")
    cal.add_argument("--trials", type=int, default=16, metavar="N", help="short runs per calibration (default 16)")
    cal.add_argument("--confirm", type=int, default=2, metavar="K", help="full-length runs per calibration (default 2)")
    cal.add_argument("--parallel", type=int, default=1, metavar="N",
                     help="short runs at once, in the cases below 50 Mbit/s (default 1; faster ones always run "
                          "alone: they want the machine to themselves)")
    cal.add_argument("--out", metavar="DIR", type=Path, help="write results under DIR").complete = DIRECTORY
    live = add_command(
        benchmarks, "live", cmd_bench_live, "what following a run in the browser costs it",
        "Runs cs244 (the same seed) alone and followed by `bloatlab view` with a page's stream open,\n"
        "alternately, --repeat times each. Target: the followed runs' mean goodput, RTT median and p95,\n"
        "queue mean and datapath lateness p99 within the alone runs' own spread of the alone runs' mean\n"
        "(at least 3% of it; the lateness at least 20 us). Also says the view's CPU (% of a core over\n"
        "the run) and its update latency: each ping reply's stamp to the update that carries it\n"
        "reaching the reader.",
        ["sudo bloatlab bench live", "sudo bloatlab bench live --duration 60s --repeat 3"])
    live.add_argument("--duration", default="30s", help="each run's length (default: %(default)s)")
    live.add_argument("--repeat", default="2", metavar="N", help="runs of each kind, 2-20 (default: %(default)s)")
    live.add_argument("--out", metavar="DIR", type=Path, help="where the runs go").complete = DIRECTORY
    soak = add_command(
        benchmarks, "soak", cmd_bench_soak, "bloatlab run for long, watched for growth",
        "Runs a sweep of --runs short cs244 runs, then one cs244 run of --long, each a `bloatlab run` of its\n"
        "own sampled every second: its process's and its children's memory, descriptors, threads and\n"
        "number, the datapath's, and bloatlab's namespaces, /run/bloatlab entries, tracefs instances and\n"
        "temporary directories. Targets: the lowest of the sweep runs' peaks the same in the last half of\n"
        "the runs as in the first after warm-up (memory within 10% or 8 MB, counts within 3); the long run's\n"
        "memory growing under 8 MB an hour over its second half (5 minutes or more; shorter, its peaks\n"
        "as the sweep's), its counts not growing; each run's directory the same size; nothing left behind.\n"
        "An hour: --runs 300 --run 3s --long 1800s. Samples in soak-samples.csv.",
        ["sudo bloatlab bench soak", "sudo bloatlab bench soak --runs 300 --run 3s --long 1800s"])
    soak.add_argument("--runs", default="40", metavar="N", help="the sweep's runs, 6 or more (default: %(default)s)")
    soak.add_argument("--run", default="2s", metavar="DURATION", help="each sweep run's length (default: %(default)s)")
    soak.add_argument("--long", default="300s", metavar="DURATION", help="the long run's length (default: %(default)s)")
    soak.add_argument("--out", metavar="DIR", type=Path, help="where the runs go").complete = DIRECTORY
    sim = add_command(
        benchmarks, "sim", cmd_bench_sim, "how fast a simulated run is, beside the same run emulated",
        "Runs the CS244 experiment simulated in ns-3 (building the driver first if it is not cached, timed\n"
        "apart), then emulated on this machine: the wall time of each, goodput, RTT and queue from both.\n"
        f"Targets: the simulation within {10:g} s of wall time for 60 s; goodput within 3% of the emulated\n"
        "run's, the median RTT within 10% (exit status 1 if one misses). The emulated run needs root.",
        ["sudo bloatlab bench sim", "bloatlab bench sim --no-emulated --maxq 20"])
    sim.add_argument("--maxq", type=int, default=100, metavar="PACKETS",
                     help="the bottleneck's queue, packets (default: %(default)s)")
    sim.add_argument("--duration", default="60s", help="the simulated and emulated length (default: %(default)s)")
    sim.add_argument("--no-emulated", action="store_true", help="simulate only: no baseline, no root")
    sim.add_argument("--out", metavar="DIR", type=Path, help="where both runs go").complete = DIRECTORY
    machine = add_command(
        benchmarks, "machine", cmd_bench_machine, "bloatlab against this machine's own baselines, in the same run",
        "Measures bloatlab beside what this machine does without it, minutes apart: a kernel bridge and\n"
        "a plain veth pair (and htb where the kernel has it), the overshoot of a 50 us sleep, plain `ip`\n"
        "calls and Python's start-up. Each target is a ratio or a difference to its baseline:\n\n"
        "  unlimited_tcp  >= 0.95  userspace link's TCP goodput / the kernel bridge's\n"
        "  shaped_tcp     >= 0.80  the best shaped TCP goodput within 3% of its rate (either way) / the bridge's\n"
        "  shaped_udp     >= 0.97  the worst UDP share of capacity over --rates\n"
        "  idle_rtt       <= 0.05  ms of idle RTT added over the delays, beyond a plain veth's RTT\n"
        "  lateness       <= 20    us of departure lateness p99 beyond the idle timer's p99 just before (1 Gbit/s, 10 ms)\n"
        "  loaded_rtt     <= 0.05  relative error of RTT p99 behind a full queue against base + queue / rate\n"
        "  up_down        <= 0.5   s for `up` then `down` of h1 - s0 - h2\n"
        "  run_overhead   <= 2.0   s a cs244 run takes beyond its duration\n"
        "  switched_tcp   >= 0.97  TCP goodput through h1 - s0 - h2 at 1 Gbit/s / its capacity\n"
        "  switched_fast  >= 0.95  TCP goodput through h1 - s0 - h2 at 2.5 Gbit/s / one link's at that rate\n"
        "  slow_lateness  <= 20    us of lateness p99 in cs244 at 10 Mbit/s beyond the sentinel's (20 s)\n"
        "  star_up        <= 3.0   s for `up` of a star of 100 hosts (100 Mbit/s links, s0 in the datapath)\n"
        "  star_down      <= 1.0   s for its `down`\n"
        "  star_idle      <= 1.0   % of a core its datapath takes while nothing flows\n\n"
        "shaped_tcp's rates go on above --rates, 500 Mbit/s apart and TCP only, until one could reach its\n"
        "target. Where the machine did the same work itself in the run, its figure is judged on the same\n"
        "target beside bloatlab's: htb at every shaped rate with the same queue (shaped_tcp, shaped_udp),\n"
        "a real-time thread's 50 us sleep under the lateness case's load, plain `ip` calls (up_down,\n"
        "star_up), kernel bridges with htb through the same switch (switched_tcp, switched_fast). A\n"
        "miss the machine's own shares is named as beyond this machine (and, where bloatlab did worse\n"
        "than the machine by more than 3%, by how much); one it does not share, as bloatlab's.\n"
        "shaped_udp's machine figure is htb's share at the lowest rate bloatlab's UDP misses.\n"
        "run_overhead is the median of 3 runs. unlimited_tcp and shaped_tcp say where the CPU went: the\n"
        "machine's busy share, and the busiest worker's share of a core, in bloatlab-link's own\n"
        "code and in the kernel (per worker, per case, in the JSON's datapath_workers). slow_lateness\n"
        "runs cs244 twice, the second punctual (--punctual), and says what each cost. The whole bench\n"
        "(or switched_fast) also runs RRUL at 1 Gbit/s each way on the datapath and on kernel bridges\n"
        "with htb, and gives their totals and lateness beside the targets.\n\n"
        "Exit status 0 when every target holds, 1 when one misses (a figure not measured misses).\n"
        "Takes about 12 minutes (more where the bridge is fast: each added rate is two cases); needs root.\n"
        "docs/bench.md has the figures per release.",
        ["sudo bloatlab bench machine",
         "sudo bloatlab bench machine --only up_down,run_overhead --json",
         "sudo bloatlab bench machine --target lateness=100   # a looser limit on a busy machine"])
    machine.add_argument("--only", metavar="NAMES", help="comma-separated targets to measure (default: all)")
    machine.add_argument("--target", action="append", metavar="NAME=LIMIT",
                         help="another limit for a target, in its unit (repeatable)")
    machine.add_argument("--rates", default="500mbit,1gbit,1500mbit,2gbit,2500mbit",
                         help="the shaped rates of shaped_tcp and shaped_udp (default: %(default)s)")
    machine.add_argument("--duration", default="3s", help="how long each link case measures (default: %(default)s)")
    machine.add_argument("--rounds", type=int, default=5, metavar="N",
                         help="alternating rounds of the unlimited cases, judged on the median (default: %(default)s)")
    machine.add_argument("--out", metavar="DIR", type=Path, help="where the results go").complete = DIRECTORY
    _add_replay_parser(benchmarks)

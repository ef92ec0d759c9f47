"""The replay: one link direction in virtual time, over an arrival trace or a synthetic arrival
process, with every packet's fate (docs/replay.md); and its benchmark.

Owns the replay's config and running the `bloatlab-replay` binary, which drives the datapath
core (the live datapath's own code) without a clock or a socket. Its command line is
bloatlab.cli.replay.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bloatlab import proc
from bloatlab.errors import MachineError, SpecError
from bloatlab.progress import Progress
from bloatlab.specs.model import DirectionSpec, QueueSpec
from bloatlab.specs.units import format_duration_ns, format_rate, parse_rate
from bloatlab.testbed import capabilities
from bloatlab.testbed.datapath import direction_config

BINARY_NAME = "bloatlab-replay"
PROCESSES = ("constant", "poisson", "on-off")
ECN_CODES = {"not-ect": 0, "ect1": 1, "ect0": 2, "ce": 3}
MIN_SIZE_BYTES, MAX_SIZE_BYTES = 42, 65535  # Ethernet + IPv4 + UDP headers .. an IPv4 datagram
TRACE_OPPORTUNITY_BYTES = 1504  # what one Mahimahi delivery opportunity carries

BENCH_DISCIPLINES = ("codel", "droptail", "fq_codel", "red", "pie", "cake")
BENCH_TARGET_PPS = 5_000_000  # for CoDel
BENCH_RATE = "10mbit"
BENCH_LOAD = 1.2


def trace_mean_bps(path: Path) -> float:
    """A Mahimahi trace's mean rate: its opportunities' bytes over its period."""
    times = [int(line) for line in path.read_text().split()]
    return len(times) * TRACE_OPPORTUNITY_BYTES * 8 / (times[-1] / 1000)


# Running the binary -------------------------------------------------------------------------

def write_config(path: Path, direction: DirectionSpec, seed: int) -> None:
    """The replay's config: the datapath's direction JSON (docs/datapath.md) with its seed."""
    config = direction_config(direction, seed)
    path.write_text(json.dumps(config, indent=2) + "\n")


def binary() -> Path:
    """bloatlab-replay, its version checked: asked before any file is written."""
    return capabilities.binary(BINARY_NAME)


def run_binary(config: Path, out: Path, arrival_flags: list[str], progress: bool = False) -> dict[str, Any]:
    """Runs bloatlab-replay; its summary.json. Its one-line errors become SpecErrors. With
    `progress`, a display on stderr says how far it is, from the lines the binary writes there
    (`total packets N` or `total ns T`, then `progress FATES VIRTUAL_NS`)."""
    argv = [str(binary()), "--config", str(config), "--out", str(out), *arrival_flags]
    if progress:
        argv.append("--progress")
    child = proc.spawn(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    bar = Progress(1.0, "replay") if progress else None
    total: tuple[str, int] | None = None
    said: list[str] = []  # what it wrote besides progress: its error, if it fails
    try:
        for line in child.stderr:
            words = line.split()
            if words[:1] == ["total"] and len(words) == 3:
                total = (words[1], int(words[2]))
            elif words[:1] == ["progress"] and len(words) == 3:
                if bar is not None and total is not None:
                    done = int(words[1]) if total[0] == "packets" else int(words[2])
                    bar.update_fraction(done / max(total[1], 1))
            else:
                said.append(line.strip())
        status = child.wait()
    finally:
        proc.stop(child)
        if bar is not None:
            bar.finish()
    if status != 0:
        lines = [line for line in said if line]
        message = lines[-1] if lines else f"exit status {status}"
        message = message.removeprefix(f"{BINARY_NAME}: error: ")
        if status == 2:
            raise SpecError(message)
        raise MachineError(f"{BINARY_NAME} failed (exit status {status}): {message}")  # ours, not the input
    return json.loads((out / "summary.json").read_text())


def _n(count: int) -> str:
    return f"{count:,}"


def render_summary(summary: dict[str, Any], direction: DirectionSpec) -> str:
    pace = f"trace {direction.trace.name}" if direction.trace else format_rate(direction.rate_bps)
    packets = summary["packets"]
    drops = {k: v for k, v in summary["dropped"].items() if v}
    marks = {k: v for k, v in summary["marked"].items() if v}
    by = lambda counts: f" ({', '.join(f'{k} {_n(v)}' for k, v in counts.items())})" if counts else ""  # noqa: E731
    share = lambda n: f" = {100 * n / packets:.2f}%" if packets else ""  # noqa: E731
    soj = summary["sojourn_ns"]
    ns = lambda v: "-" if v is None else f"{v / 1e6:.3f} ms"  # noqa: E731
    return "\n".join([
        f"replayed {_n(packets)} packets through {summary['discipline']} at {pace} in "
        f"{summary['wall_time_s']:.3f} s: {summary['packets_per_s'] / 1e6:.2f} Mpps",
        f"  departed {_n(summary['departed'])}, dropped {_n(summary['dropped_total'])}"
        f"{share(summary['dropped_total'])}{by(drops)}, marked {_n(summary['marked_total'])}{by(marks)}",
        f"  sojourn in the queue: p50 {ns(soj['p50'])}, p99 {ns(soj['p99'])}, max {ns(soj['max'])}",
        f"  throughput {summary['throughput_bps'] / 1e6:.3f} Mbit/s over "
        f"{summary['virtual_duration_ns'] / 1e9:.3f} s of virtual time",
    ])


# The benchmark ------------------------------------------------------------------------------

def bench(disciplines: list[str], packets: int, repeats: int, say=print,
          progress: bool = False) -> dict[str, dict[str, Any]]:
    """Replays `packets` synthetic packets (poisson at BENCH_LOAD times BENCH_RATE, 1500 bytes,
    4 flows, a queue of 1000 packets, every fate written) through each discipline `repeats`
    times; per discipline the best and median packets per second. say() gets a line per
    discipline as it finishes; `progress` shows a display on stderr over every run."""
    rate_bps = parse_rate(BENCH_RATE, "rate")
    say(f"replaying {_n(packets)} packets per run (poisson arrivals at {BENCH_LOAD}x {format_rate(rate_bps)}, "
        f"1500 bytes, 4 flows, queue of 1000 packets, fates written), best and median of {repeats} runs\n")
    say(f"  {'discipline':<10} {'best Mpps':>9} {'median':>7} {'dropped':>8}  {'sojourn p99':>11}")
    results: dict[str, dict[str, Any]] = {}
    bar = Progress(1.0, "bench replay") if progress else None
    runs, done = len(disciplines) * repeats, 0
    with tempfile.TemporaryDirectory(prefix="bloatlab-bench-replay-") as tmp:
        for discipline in disciplines:
            direction = DirectionSpec(rate_bps=rate_bps, queue=QueueSpec(discipline, packets=1000))
            config = Path(tmp) / f"{discipline}.json"
            write_config(config, direction, 1)
            flags = ["--synthetic", "poisson", "--arrival-bps", str(round(BENCH_LOAD * rate_bps)), "--size", "1500",
                     "--flows", "4", "--packets", str(packets)]
            rates = []
            for _ in range(repeats):
                summary = run_binary(config, Path(tmp) / discipline, flags)
                rates.append(summary["packets_per_s"])
                (Path(tmp) / discipline / "fates.csv").unlink()
                done += 1
                if bar is not None:
                    bar.update_fraction(done / runs, f"run {done}/{runs}")
            results[discipline] = {"best_pps": max(rates), "median_pps": statistics.median(rates), "runs_pps": rates,
                                   "dropped": summary["dropped_total"] / summary["packets"],
                                   "sojourn_p99_ns": summary["sojourn_ns"]["p99"]}
            r = results[discipline]
            if bar is not None:
                bar.finish()
            p99 = "-" if r["sojourn_p99_ns"] is None else format_duration_ns(r["sojourn_p99_ns"])
            say(f"  {discipline:<10} {r['best_pps'] / 1e6:>9.2f} {r['median_pps'] / 1e6:>7.2f} "
                f"{100 * r['dropped']:>7.1f}%  {p99:>11}")
    return results

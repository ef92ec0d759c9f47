"""The replay: one link direction in virtual time, over an arrival trace or a synthetic arrival
process, with every packet's fate (docs/replay.md). Its benchmark is bloatlab.bench.replay.

Owns the replay's config and running the `bloatlab-replay` binary, which drives the datapath
core (the live datapath's own code) without a clock or a socket. Its command line is
bloatlab.cli.replay.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from bloatlab import proc
from bloatlab.errors import MachineError, SpecError
from bloatlab.progress import Progress
from bloatlab.specs import dscp
from bloatlab.specs.model import DirectionSpec
from bloatlab.specs.units import format_rate
from bloatlab.testbed import capabilities
from bloatlab.testbed.datapath import direction_config

BINARY_NAME = "bloatlab-replay"
PROCESSES = ("constant", "poisson", "on-off")
ECN_CODES = dscp.ECN  # the two ECN bits by name, as specs name them
MIN_SIZE_BYTES, MAX_SIZE_BYTES = 42, 65535  # Ethernet + IPv4 + UDP headers .. an IPv4 datagram
TRACE_OPPORTUNITY_BYTES = 1504  # what one Mahimahi delivery opportunity carries



def trace_mean_bps(path: Path) -> float:
    """A Mahimahi trace's mean rate: its opportunities' bytes over its period."""
    times = [int(line.lstrip("0") or "0") for line in path.read_text().split()]  # as check_trace took them
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


def n_packets(count: int) -> str:
    return f"{count:,}"


def render_summary(summary: dict[str, Any], direction: DirectionSpec) -> str:
    pace = f"trace {direction.trace.name}" if direction.trace else format_rate(direction.rate_bps)
    packets = summary["packets"]
    drops = {k: v for k, v in summary["dropped"].items() if v}
    marks = {k: v for k, v in summary["marked"].items() if v}
    by = lambda counts: f" ({', '.join(f'{k} {n_packets(v)}' for k, v in counts.items())})" if counts else ""  # noqa: E731
    share = lambda n: f" = {100 * n / packets:.2f}%" if packets else ""  # noqa: E731
    soj = summary["sojourn_ns"]
    ns = lambda v: "-" if v is None else f"{v / 1e6:.3f} ms"  # noqa: E731
    return "\n".join([
        f"replayed {n_packets(packets)} packets through {summary['discipline']} at {pace} in "
        f"{summary['wall_time_s']:.3f} s: {summary['packets_per_s'] / 1e6:.2f} Mpps",
        f"  departed {n_packets(summary['departed'])}, dropped {n_packets(summary['dropped_total'])}"
        f"{share(summary['dropped_total'])}{by(drops)}, marked {n_packets(summary['marked_total'])}{by(marks)}",
        f"  sojourn in the queue: p50 {ns(soj['p50'])}, p99 {ns(soj['p99'])}, max {ns(soj['max'])}",
        f"  throughput {summary['throughput_bps'] / 1e6:.3f} Mbit/s over "
        f"{summary['virtual_duration_ns'] / 1e9:.3f} s of virtual time",
    ])

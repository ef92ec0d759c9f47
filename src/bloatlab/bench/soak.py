"""`bloatlab bench soak`: bloatlab run for long and watched for growth. Two phases, each a
`bloatlab run` of its own, sampled every SAMPLE_S from /proc while it runs:

    sweep   many short runs of cs244 in one sweep: the sweep's process lives through all of
            them, so what one run forgets to give back adds up there
    long    one cs244 run (its 10 Mbit/s bottleneck full, web fetches beside the upload) for a
            long time: its process and its datapath (bloatlab-link) hold the run's whole length

What is watched, per sample: the phase's process and its children (resident memory, open
descriptors, threads, how many children), the long run's datapath (the same three), and the
machine: bloatlab's namespaces, /run/bloatlab entries, tracefs instances and temporary
directories, and the free space of the results' disk.

Growth is judged where a leak adds up and noise does not (`judge`):
    sweep   each run's peak of each figure (the same each run when nothing leaks): the lowest
            in the last half of the runs against the lowest in the first, after warm-up
    long    memory: the least-squares slope over the run's second half, per hour (runs of 5
            minutes or more); counts, and memory in shorter runs: the second half's peak
            against the first's
    disk    each sweep run's directory: the last half's mean size against the first's
    after   nothing of bloatlab's left on the machine
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bloatlab import proc
from bloatlab.errors import MachineError

SAMPLE_S = 1.0
# Growth allowed, beyond which a figure is said to grow: a process's memory wanders by a few MB as
# Python's allocator and the kernel's page cache of its files go (the first runs set the level).
RSS_SLACK_MB = 8.0
RSS_SLACK_SHARE = 0.10
COUNT_SLACK = 3  # descriptors, threads, children: a sampler or a tool between two samples
LONG_RSS_MB_PER_HOUR = 8.0  # the long run's slope, judged on runs of LONG_SLOPE_AFTER_S or more
LONG_SLOPE_AFTER_S = 300.0  # shorter, a slope is noise: its peaks are compared as the sweep's are
DISK_SLACK_SHARE = 0.10
WARM_UP_SHARE = 0.25  # of the sweep's runs: imports, caches, the first plots
PROCESS_FIGURES = ("rss_mb", "fds", "threads", "children")
MACHINE_FIGURES = ("namespaces", "run_entries", "tracefs", "tmp_entries")


# What a sample reads ------------------------------------------------------------------------

def _status(pid: int) -> dict[str, float] | None:
    """A process's resident memory (MB), descriptors and threads; None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    if fields.get("State", "").strip().startswith("Z"):
        return None
    return {"rss_mb": int(fields.get("VmRSS", "0 kB").split()[0]) / 1024, "fds": fds,
            "threads": int(fields.get("Threads", "0"))}


def _children() -> dict[int, list[tuple[int, str]]]:
    """Every live process by its parent: (pid, command name)."""
    by_parent: dict[int, list[tuple[int, str]]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if state != "Z":
            by_parent.setdefault(int(ppid), []).append((int(entry.name), name))
    return by_parent


def _descendants(pid: int, by_parent: dict[int, list[tuple[int, str]]]) -> list[tuple[int, str]]:
    found, todo = [], [pid]
    while todo:
        for child in by_parent.get(todo.pop(), []):
            found.append(child)
            todo.append(child[0])
    return found


def _count(path: str, prefix: str) -> int:
    try:
        return sum(1 for name in os.listdir(path) if name.startswith(prefix))
    except OSError:
        return 0


def machine_figures() -> dict[str, int]:
    """What bloatlab keeps on the machine: namespaces, /run/bloatlab entries, tracefs instances,
    temporary directories."""
    return {"namespaces": _count("/run/netns", "bloatlab"), "run_entries": _count("/run/bloatlab", ""),
            "tracefs": _count("/sys/kernel/tracing/instances", "bloatlab"),
            "tmp_entries": _count("/tmp", "bloatlab")}


class _Sampler:
    """Samples a phase's process every SAMPLE_S in a thread, until stopped."""

    def __init__(self, phase: str, pid: int, runs_done: Callable[[], int], started: float):
        self.phase, self.pid, self.runs_done, self.started = phase, pid, runs_done, started
        self.samples: list[dict[str, Any]] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="bloatlab-soak", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.done.wait(SAMPLE_S):
            own = _status(self.pid)
            if own is None:
                return
            by_parent = _children()
            below = _descendants(self.pid, by_parent)
            sample: dict[str, Any] = {"phase": self.phase, "t_s": round(time.monotonic() - self.started, 1),
                                      "runs_done": self.runs_done(), **own, "children": len(below),
                                      **machine_figures(), "disk_free_mb": _free_mb()}
            links = [_status(pid) for pid, name in below if name == "bloatlab-link"]
            if links and links[0] is not None:
                sample.update({f"datapath_{k}": v for k, v in links[0].items()})
            self.samples.append(sample)

    def stop(self) -> list[dict[str, Any]]:
        self.done.set()
        self.thread.join()
        return self.samples


def _free_mb() -> float:
    return shutil.disk_usage(".").free / 1e6


def _dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


# The phases ---------------------------------------------------------------------------------

def _bloatlab(argv: list[str], log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return proc.spawn([sys.executable, "-m", "bloatlab", *argv], stdout=out, stderr=subprocess.STDOUT)


def _wait(child: subprocess.Popen, sampler: _Sampler, log: Path, what: str) -> list[dict[str, Any]]:
    try:
        status = child.wait()
    except BaseException:  # Ctrl-C: the run stops as it would (its network taken down)
        proc.stop(child, signal.SIGINT, timeout_s=60)
        sampler.stop()
        raise
    samples = sampler.stop()
    if status != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise MachineError(f"the soak's {what} failed (status {status}): {' / '.join(tail)}; see {log}")
    return samples


def run_soak(runs: int, run_duration: str, long_duration: str, out_dir: Path,
             say: Callable[[str], None] = print) -> dict[str, Any]:
    """The two phases, one after the other, into out_dir; the samples, the judgement, the figures."""
    out_dir.mkdir(parents=True, exist_ok=True)
    before = machine_figures()
    started = time.monotonic()
    samples: list[dict[str, Any]] = []

    sweep_dir = out_dir / "sweep"
    say(f"bench soak: a sweep of {runs} runs of {run_duration}")
    log = out_dir / "sweep.log"
    child = _bloatlab(["run", "--preset", "cs244", "--set", f"duration={run_duration}", "--repeat", str(runs),
                       "--out", str(sweep_dir), "-q"], log)
    sampler = _Sampler("sweep", child.pid, lambda: sum(1 for _ in sweep_dir.glob("all/rep*/summary.json")), started)
    samples += _wait(child, sampler, log, "sweep")
    run_sizes = [_dir_mb(d) for d in sorted(sweep_dir.glob("all/rep*"), key=lambda d: int(d.name[3:]))]

    long_dir = out_dir / "long"
    say(f"bench soak: one run of {long_duration}")
    log = out_dir / "long.log"
    child = _bloatlab(["run", "--preset", "cs244", "--set", f"duration={long_duration}", "--out", str(long_dir),
                       "-q"], log)
    sampler = _Sampler("long", child.pid, lambda: 0, started)
    samples += _wait(child, sampler, log, "long run")

    after = machine_figures()
    verdicts = judge(samples, runs, run_sizes, before, after)
    doc = {"kind": "bench-soak", "runs": runs, "run_duration": run_duration, "long_duration": long_duration,
           "wall_s": round(time.monotonic() - started, 1), "samples": len(samples), "run_sizes_mb": run_sizes,
           "before": before, "after": after, "figures": figures(samples, run_sizes), "verdicts": verdicts,
           "targets": [f"{'ok  ' if v['ok'] else 'MISS'} {name}: {v['why']}" for name, v in verdicts.items()]}
    with open(out_dir / "soak-samples.csv", "w", newline="") as f:
        keys = sorted({k for s in samples for k in s}, key=lambda k: (k not in ("phase", "t_s", "runs_done"), k))
        writer = csv.DictWriter(f, keys)
        writer.writeheader()
        writer.writerows(samples)
    (out_dir / "bench-soak.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc


# The judgement ------------------------------------------------------------------------------

def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def per_run_peaks(samples: list[dict[str, Any]], figure: str, runs: int) -> list[float]:
    """The sweep's peak of `figure` during each run (by the runs done when sampled), the
    sweep's own end (aggregate, plots, report: once) left out."""
    peaks: dict[int, float] = {}
    for s in samples:
        if s["phase"] == "sweep" and figure in s and s["runs_done"] < runs:
            peaks[s["runs_done"]] = max(peaks.get(s["runs_done"], s[figure]), s[figure])
    return [peaks[k] for k in sorted(peaks)]


def _halves(values: list[float]) -> tuple[list[float], list[float]] | None:
    """The runs after warm-up, in a first and a last half; None when too few to tell."""
    rest = values[int(len(values) * WARM_UP_SHARE):]
    if len(rest) < 4:
        return None
    return rest[:len(rest) // 2], rest[len(rest) - len(rest) // 2:]


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least squares slope of (t_s, value), per hour; None for fewer than 3 points."""
    if len(points) < 3:
        return None
    mt = _mean([t for t, _ in points])
    mv = _mean([v for _, v in points])
    var = sum((t - mt) ** 2 for t, _ in points)
    return None if var == 0 else 3600 * sum((t - mt) * (v - mv) for t, v in points) / var


def judge(samples: list[dict[str, Any]], runs: int, run_sizes: list[float], before: dict[str, int],
          after: dict[str, int]) -> dict[str, dict[str, Any]]:
    """Each figure's verdict: ok, and why, in a line."""
    verdicts: dict[str, dict[str, Any]] = {}
    for figure in PROCESS_FIGURES + MACHINE_FIGURES:
        # The lowest of the runs' peaks: a leak lifts every run's, while Python's memory rises and
        # falls over a few runs as its allocator gives arenas back (30 MB here) and lifts only some.
        halves = _halves(per_run_peaks(samples, figure, runs))
        if halves is None:
            verdicts[f"sweep {figure}"] = {"ok": False, "why": "too few runs to tell (give --runs 6 or more)"}
            continue
        first, last = min(halves[0]), min(halves[1])
        slack = max(RSS_SLACK_MB, RSS_SLACK_SHARE * first) if figure == "rss_mb" else COUNT_SLACK
        verdicts[f"sweep {figure}"] = {"ok": last - first <= slack, "first": round(first, 1), "last": round(last, 1),
                                       "why": f"lowest per-run peak {first:g} in the first half, {last:g} in the "
                                              f"last (growth allowed {slack:.3g})"}
    # The long run while its datapath runs (its traffic; not the writing and plotting after), less
    # the last samples, which may fall in its teardown.
    long = [s for s in samples if s["phase"] == "long" and "datapath_rss_mb" in s][:-2]
    for figure in ("rss_mb", "fds", "threads", "datapath_rss_mb", "datapath_fds", "datapath_threads"):
        points = [(s["t_s"], s[figure]) for s in long if figure in s]
        name = f"long {figure}"
        if len(points) < 8:
            verdicts[name] = {"ok": False, "why": "too few samples (give --long 20s or more)"}
            continue
        values = [v for _, v in points]
        first, last = max(values[:len(values) // 2]), max(values[len(values) // 2:])
        if figure.endswith("rss_mb") and points[-1][0] - points[0][0] >= LONG_SLOPE_AFTER_S:
            slope = slope_per_hour(points[len(points) // 2:])
            verdicts[name] = {"ok": slope is not None and slope <= LONG_RSS_MB_PER_HOUR,
                              "slope_mb_per_hour": slope and round(slope, 2),
                              "why": f"{slope:+.2f} MB/h over the run's second half (allowed "
                                     f"{LONG_RSS_MB_PER_HOUR:g}); peak {first:.1f} MB, then {last:.1f}"}
            continue
        slack = max(RSS_SLACK_MB, RSS_SLACK_SHARE * first) if figure.endswith("rss_mb") else COUNT_SLACK
        verdicts[name] = {"ok": last - first <= slack, "why": f"peak {first:g} in the first half, {last:g} in "
                                                             f"the second (growth allowed {slack:.3g})"}
    halves = _halves(run_sizes)
    if halves is None:
        verdicts["disk per run"] = {"ok": False, "why": "too few runs to tell"}
    else:
        first, last = _mean(halves[0]), _mean(halves[1])
        verdicts["disk per run"] = {"ok": last <= first * (1 + DISK_SLACK_SHARE),
                                    "why": f"{first:.2f} MB a run at first, {last:.2f} MB at last"}
    left = {k: after[k] - before[k] for k in after if after[k] > before[k]}
    verdicts["nothing left"] = {"ok": not left, "why": ", ".join(f"{k} +{v}" for k, v in left.items()) or
                                "as before: namespaces, /run/bloatlab, tracefs, /tmp"}
    return verdicts


def figures(samples: list[dict[str, Any]], run_sizes: list[float]) -> dict[str, Any]:
    """The figures of the note: each phase's range of each figure."""
    out: dict[str, Any] = {}
    for phase in ("sweep", "long"):
        rows = [s for s in samples if s["phase"] == phase]
        for figure in PROCESS_FIGURES + tuple(f"datapath_{k}" for k in ("rss_mb", "fds", "threads")) + \
                MACHINE_FIGURES + ("disk_free_mb",):
            values = [s[figure] for s in rows if figure in s]
            if values:
                out[f"{phase} {figure}"] = {"min": round(min(values), 1), "max": round(max(values), 1),
                                            "first": round(values[0], 1), "last": round(values[-1], 1)}
    if run_sizes:
        out["run size mb"] = {"min": round(min(run_sizes), 3), "max": round(max(run_sizes), 3)}
    return out


def render(doc: dict[str, Any]) -> str:
    lines = [f"bench soak: {doc['runs']} runs of {doc['run_duration']}, then one of {doc['long_duration']}; "
             f"{doc['samples']} samples in {doc['wall_s']:.0f} s", "",
             f"{'figure':<28} {'min':>9} {'max':>9} {'first':>9} {'last':>9}"]
    for name, f in doc["figures"].items():
        lines.append(f"{name:<28} {f['min']:>9g} {f['max']:>9g} {f.get('first', ''):>9} {f.get('last', ''):>9}")
    return "\n".join(lines + ["", *doc["targets"]])

"""Calibration: an emulated path fitted to measurements of a real one (docs/calibration.md).

The path is one link between `client` (the host that probed) and `server`: a rate each way, a
base RTT (split evenly: round trips cannot tell the two one-way delays apart), a queue
discipline at each bottleneck with its limit (searched for the FIFOs; an AQM keeps the
catalogue's, which it rarely reaches), and, where asked, random loss and jitter each way.

The search, for a handful of expensive noisy evaluations (each an emulated run of the
measurement's own test):

    guess     rates from the measured totals (goodput / 1448 x 1514: the datapath counts whole
              frames), the base RTT from the least round trip, a FIFO's limit from the queueing
              delay under load (the RTT's 99th percentile above the base, times the rate)
    screen    one short run per candidate discipline at the guess; those within 1.5 x the best
              error go on (a bandit's first cut)
    search    optuna's TPE sampler over a box around the guess: short runs (`short_load_s` of
              load), `parallel` at a time
    confirm   the best few short trials again at the measurement's own length; the best of these
              is the fit

The error of a trial compares distributions, figure by figure (results/measurement.py: each
flow's mean throughput, each direction's total at its 10/50/90th percentiles, each probe's
round trips at 10..99th, loaded and idle): |log(emulated / measured)|, averaged within four
groups (totals, flows, latency under load, idle latency), then over the groups present.
"""

from __future__ import annotations

import functools
import json
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bloatlab.errors import BloatlabError, MachineError, SpecError
from bloatlab.lab.executors import Executor, Job, LocalExecutor, ProcessExecutor, RunResult, Tick
from bloatlab.results.measurement import Measurement, from_run
from bloatlab.specs.disciplines import ALIASES, MTU_FRAME_BYTES
from bloatlab.specs.experiment import parse_experiment

PAYLOAD_BYTES = 1448  # a full TCP segment's payload with timestamps, in a 1514-byte frame
FIFOS = ("droptail", "drophead")  # their limit is what sets the delay under load: searched
CANDIDATES = ("droptail", "codel", "pie", "fq_codel")  # searched when no discipline is given
SCREEN_KEEP = 1.5  # disciplines within this factor of the best screened error go on
STACK_RTT_MS = 0.1  # what the hosts' stacks and serialisation add to an emulated round trip
MIN_LIMIT, MAX_LIMIT = 2, 100_000
FLOOR = {"mbps": 0.01, "ms": 0.01}  # figures below these compare as these (no log of zero)
GROUPS = ("total", "flow", "load", "idle")


@dataclass(frozen=True)
class PathValues:
    """One candidate path."""

    rate_up_bps: float
    rate_down_bps: float
    rtt_ms: float  # base RTT, split evenly between the two directions
    discipline: str
    limit_pkts: int | None  # None: the discipline's default
    loss: float = 0.0  # each way, a probability
    jitter_ms: float = 0.0  # each way

    def rounded(self) -> PathValues:
        """As the spec writes it: rates to 6 digits, the RTT to the microsecond."""
        return replace(self, rate_up_bps=float(f"{self.rate_up_bps:.6g}"), rate_down_bps=float(f"{self.rate_down_bps:.6g}"),
                       rtt_ms=round(self.rtt_ms, 3))

    def describe(self) -> str:
        limit = f" limit {self.limit_pkts}" if self.limit_pkts else ""
        extra = (f" loss {self.loss * 100:.3g}%" if self.loss else "") + \
            (f" jitter {self.jitter_ms:.3g} ms" if self.jitter_ms else "")
        return (f"{self.discipline}{limit}, up {self.rate_up_bps / 1e6:.4g} Mbit/s, down "
                f"{self.rate_down_bps / 1e6:.4g} Mbit/s, base RTT {self.rtt_ms:.3g} ms{extra}")


@dataclass(frozen=True)
class Settings:
    trials: int = 16  # short runs in all (screen and search)
    confirm: int = 2  # of them run again at full length
    short_load_s: float = 8.0
    parallel: int = 1
    disciplines: tuple[str, ...] = CANDIDATES
    limit_pkts: int | None = None  # given: not searched
    loss: bool = False  # search random loss
    jitter: bool = False  # search jitter
    seed: int = 1

    def __post_init__(self) -> None:  # the catalogue's own names ("taildrop" is droptail)
        object.__setattr__(self, "disciplines", tuple(str(ALIASES.get(d, d)) for d in self.disciplines))


@dataclass
class Trial:
    number: int
    stage: str  # screen, search, confirm
    values: PathValues
    load_s: float
    run_dir: Path
    error: float | None = None  # None: the run failed
    residuals: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # measurement -> figure -> ...
    reason: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"number": self.number, "stage": self.stage, "values": asdict(self.values), "load_s": self.load_s,
                "run_dir": str(self.run_dir), "error": self.error, "reason": self.reason,
                "seconds": round(self.seconds, 1)}


# The guess ------------------------------------------------------------------------------------

def guess(measurements: list[Measurement], discipline: str, limit_pkts: int | None = None) -> PathValues:
    """The path the measurements point to before any run."""
    bases = [b for b in (m.base_rtt_ms() for m in measurements) if b is not None]
    if not bases:
        raise BloatlabError("no measurement has a round trip to take the base RTT from; give one with a ping",
                            field="MEASUREMENT")
    rtt = max(0.1, min(bases) - STACK_RTT_MS)
    rates: dict[str, float] = {}
    for m in measurements:
        figures = m.figures()
        for d in m.directions():
            total = figures.get(f"{d}.total.p90")
            if total:
                rates[d] = max(rates.get(d, 0.0), total * 1e6 * MTU_FRAME_BYTES / PAYLOAD_BYTES)
    if not rates:
        raise BloatlabError("no measurement has a TCP flow to take the rate from; calibrate needs load",
                            field="MEASUREMENT")
    up = rates.get("up", rates.get("down"))
    down = rates.get("down", up)
    limit = limit_pkts
    if discipline in FIFOS and limit is None:
        limit = _limit_from_delay(measurements, rtt, {"up": up, "down": down})
    return PathValues(up, down, rtt, discipline, limit if discipline in FIFOS or limit_pkts else None)


def _limit_from_delay(measurements: list[Measurement], rtt_ms: float, rates: dict[str, float]) -> int:
    """The packets a full FIFO holds for the queueing delay seen under load: 99th percentile of
    the first probe's round trips above the base, over the loaded directions' drain times."""
    guesses = []
    for m in measurements:
        figures = m.figures()
        if not m.probes:
            continue
        p99 = figures.get(f"probe.{m.probes[0].name}.load.p99")
        if p99 is None:
            continue
        seconds_per_packet = sum(MTU_FRAME_BYTES * 8 / rates[d] for d in m.directions())
        guesses.append((p99 - rtt_ms) / 1e3 / seconds_per_packet)
    limit = max(guesses) if guesses else 100
    return int(min(MAX_LIMIT, max(MIN_LIMIT, round(limit))))


# The test on a candidate path -------------------------------------------------------------------

def _fmt_s(seconds: float) -> str:
    return f"{round(seconds, 3):g}s"


def timeline(m: Measurement, load_s: float | None) -> tuple[float, float, float]:
    """(idle before, load length, idle after) of the emulated test: the measurement's own, or a
    short one (load_s of load, at most 3 s idle before and 2 s after)."""
    window = m.load_window()
    if window is None:
        length = m.duration_s if load_s is None else min(m.duration_s, load_s)
        return 0.0, length, 0.0
    before, after = window[0], max(0.0, m.duration_s - window[1])
    length = window[1] - window[0]
    if load_s is None or load_s >= length:
        return before, length, after
    return min(before, 3.0), load_s, min(after, 2.0)


def test_spec(m: Measurement, path: PathValues, load_s: float | None = None, seed: int = 1,
              as_params: bool = False) -> dict[str, Any]:
    """The measurement's test on the candidate path, as an experiment spec (data). `as_params`:
    the path's values become [params] with the fitted values as defaults, so `--set` can
    change them in the written file."""
    before, length, after = timeline(m, load_s)
    window = m.load_window()
    scale = length / (window[1] - window[0]) if window and window[1] > window[0] else 1.0
    values = {"rate_up": f"{path.rate_up_bps / 1e6:.6g}mbit", "rate_down": f"{path.rate_down_bps / 1e6:.6g}mbit",
              "delay": f"{path.rtt_ms / 2:.6g}ms", "loss": f"{path.loss * 100:.6g}%",
              "jitter": f"{path.jitter_ms:.6g}ms", "discipline": path.discipline}
    if path.limit_pkts:
        values["limit"] = path.limit_pkts

    def v(name: str) -> Any:
        return f"{{{name}}}" if as_params else values[name]

    queue: dict[str, Any] = {"discipline": v("discipline")}
    if path.limit_pkts:
        queue["packets"] = v("limit")
    direction = {"delay": v("delay"), "loss": v("loss"), "queue": queue}
    if path.jitter_ms:
        direction["jitter"] = v("jitter")
    link = {"name": "path", "ends": ["client", "server"], "forward": {"rate": v("rate_up"), **direction},
            "reverse": {"rate": v("rate_down"), **direction}}
    workloads: list[dict[str, Any]] = []
    for i, p in enumerate(m.probes, 1):
        workloads.append({"kind": p.kind, "name": f"{p.kind}_{i}", "from": "client", "to": "server",
                          "interval": _fmt_s(p.interval_s), "dscp": p.dscp})
    counts = {"up": 0, "down": 0}
    for f in m.flows:
        counts[f.direction] += 1
        start = before + (f.start_s - window[0]) * scale if window else 0.0
        stop = before + (f.stop_s - window[0]) * scale if window else length
        ends = ("client", "server") if f.direction == "up" else ("server", "client")
        flow = {"kind": "bulk", "name": f"{f.direction}_{counts[f.direction]}", "from": ends[0], "to": ends[1],
                "cc": f.cc or "cubic", "dscp": f.dscp, "start": _fmt_s(round(start)), "stop": _fmt_s(round(stop))}
        if f.ecn == "ect1":
            flow["ecn"] = "ect1"
        workloads.append(flow)
    spec: dict[str, Any] = {
        "name": "calibrated", "duration": _fmt_s(before + length + after), "seed": seed,
        "topology": {"hosts": {"client": {}, "server": {}}, "links": [link]},
        "workloads": workloads, "probes": {"tcp": "off", "queue": ["client->server", "server->client"]},
    }
    if as_params:
        spec["params"] = _params(values)
    return spec


def names(m: Measurement) -> dict[str, str]:
    """The emulated test's workload name -> the measurement's flow or probe name."""
    out = {f"{p.kind}_{i}": p.name for i, p in enumerate(m.probes, 1)}
    counts = {"up": 0, "down": 0}
    for f in m.flows:
        counts[f.direction] += 1
        out[f"{f.direction}_{counts[f.direction]}"] = f.name
    return out


def _params(values: dict[str, Any]) -> dict[str, Any]:
    helps = {"rate_up": ("rate", "client to server rate (fitted)"),
             "rate_down": ("rate", "server to client rate (fitted)"),
             "delay": ("duration", "one-way delay each way: half the fitted base RTT"),
             "loss": ("percent", "random loss each way (fitted where asked)"),
             "jitter": ("duration", "delay jitter each way (fitted where asked)"),
             "discipline": ("string", "queue discipline each way (fitted)"),
             "limit": ("int", "queue limit each way, packets (fitted)")}
    return {k: {"default": v, "type": helps[k][0], "help": helps[k][1]} for k, v in values.items()}


def emulated(run_dir: Path, m: Measurement) -> Measurement:
    """An emulated run of `m`'s test, read back with the measurement's own names."""
    got = from_run(run_dir)
    rename = names(m)
    directions = {f.name: f.direction for f in m.flows}
    got.flows = [replace(f, name=rename[f.name], direction=directions[rename[f.name]]) for f in got.flows]
    got.probes = [replace(p, name=rename[p.name]) for p in got.probes]
    got.throughput = got.throughput.assign(flow=got.throughput["flow"].map(rename))
    got.latency = got.latency.assign(probe=got.latency["probe"].map(rename))
    return got


# The error ---------------------------------------------------------------------------------------

def group_of(figure: str) -> str:
    if figure.startswith("flow."):
        return "flow"
    if ".total." in figure:
        return "total"
    return "load" if ".load." in figure else "idle"


def residuals(measured: dict[str, float], emulated_figures: dict[str, float]) -> dict[str, dict[str, float]]:
    """Per figure: measured, emulated, relative error (emulated / measured - 1). A figure the
    emulation lacks counts as its worst (a relative error of -1)."""
    out = {}
    for name, want in measured.items():
        got = emulated_figures.get(name)
        floor = FLOOR["ms"] if name.startswith("probe.") else FLOOR["mbps"]
        rel = (max(got, floor) / max(want, floor) - 1) if got is not None else -1.0
        out[name] = {"measured": want, "emulated": got if got is not None else math.nan, "relative_error": rel}
    return out


def error(res: dict[str, dict[str, dict[str, float]]]) -> float:
    """The trial's error over every measurement: mean |log ratio| per group, then over groups."""
    groups: dict[str, list[float]] = {g: [] for g in GROUPS}
    for figures in res.values():
        for name, r in figures.items():
            groups[group_of(name)].append(abs(math.log(max(1e-3, 1 + r["relative_error"]))))
    means = [sum(v) / len(v) for v in groups.values() if v]
    return sum(means) / len(means) if means else math.inf


# One trial, wherever it runs ---------------------------------------------------------------------

def run_trial(specs: dict[str, dict[str, Any]], values: dict[str, Any], rep: int, run_dir: Path,
              tick: Tick) -> RunResult:
    """A trial's run of one measurement's test (values: {"trial": key}); runs on this machine, a
    child process or a cluster node, so it takes the spec as data."""
    from bloatlab.lab.run import Run

    experiment = parse_experiment(specs[values["trial"]], [], base_dir=Path("."), source="calibration")
    outcome = Run(experiment, run_dir, progress=False, plots=False).execute()
    return RunResult(outcome.complete, outcome.summary, outcome.reason, outcome.warnings, outcome.interrupted)


# The search ---------------------------------------------------------------------------------------

def _optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise MachineError("calibrate needs optuna, which is not installed; pip install 'bloatlab[calibrate]' "
                           "(make setup installs it)") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


class Calibration:
    """Fits one path to the measurements; its trials' runs go under out/trials/."""

    def __init__(self, measurements: list[Measurement], out: Path, settings: Settings,
                 executor: Executor | None = None, say: Callable[[str], None] = print):
        self.measurements = measurements
        self.out = out
        self.settings = settings
        self.executor = executor or (ProcessExecutor(settings.parallel) if settings.parallel > 1 else LocalExecutor())
        self.say = say
        self.trials: list[Trial] = []
        self.measured = {self._key(i): m.figures() for i, m in enumerate(measurements)}
        self.directions = sorted({d for m in measurements for d in m.directions()})
        self.kept: list[str] = list(settings.disciplines)  # the disciplines still searched

    @staticmethod
    def _key(i: int) -> str:
        return f"m{i + 1}"

    def run(self) -> Trial:
        started = time.monotonic()
        s = self.settings
        optuna = _optuna()
        disciplines = list(s.disciplines)
        guesses = {d: guess(self.measurements, d, s.limit_pkts) for d in disciplines}
        self.say(f"calibrate: guess {guesses[disciplines[0]].describe()}")
        # Screen: each discipline at its guess.
        screened = self._batch("screen", list(guesses.values()), s.short_load_s)
        ok = [t for t in screened if t.error is not None]
        if not ok:
            raise MachineError(f"every screening run failed (first: {screened[0].reason}); see {self.out}/trials")
        best = min(t.error for t in ok)
        kept = self.kept = [t.values.discipline for t in ok if t.error <= best * SCREEN_KEEP]
        if len(disciplines) > 1:
            self.say(f"calibrate: screened {', '.join(f'{t.values.discipline} {t.error:.3f}' for t in ok)}; "
                     f"searching {', '.join(kept)}")
        # Search: TPE in a box around each kept discipline's corrected screen, which goes first;
        # after each batch the best trial's correction goes next.
        centres = {t.values.discipline: self._correct(t) for t in ok if t.values.discipline in kept}
        guesses.update(centres)
        best_kept = min((t for t in ok if t.values.discipline in kept), key=lambda t: t.error)
        space = self._space(centres[best_kept.values.discipline], kept)
        sampler = optuna.samplers.TPESampler(seed=s.seed, n_startup_trials=max(2, s.parallel), multivariate=True,
                                             constant_liar=True)
        study = optuna.create_study(direction="minimize", sampler=sampler)
        for d in sorted(centres, key=lambda d: d != best_kept.values.discipline):
            study.enqueue_trial(self._params(centres[d], space))
        left = max(0, s.trials - len(screened))
        while left > 0:
            asked = [study.ask(space) for _ in range(min(s.parallel, left))]
            done = self._batch("search", [self._values(a.params, guesses) for a in asked], s.short_load_s)
            for a, t in zip(asked, done):
                study.tell(a, t.error if t.error is not None else None,
                           state=None if t.error is not None else optuna.trial.TrialState.FAIL)
            left -= len(asked)
            searched = [t for t in self.trials if t.stage == "search" and t.error is not None]
            if searched and left > 0:
                study.enqueue_trial(self._params(self._correct(min(searched, key=lambda t: t.error)), space),
                                    skip_if_exists=True)
        # Confirm at full length: the best short run's path corrected by its residuals (the
        # search's rates wander within their box while the latency's noise ranks the runs),
        # then the best short runs themselves.
        ranked = sorted((t for t in self.trials if t.error is not None), key=lambda t: t.error)
        candidates = [self._correct(ranked[0]).rounded()] if s.confirm > 1 else []
        for t in ranked:
            if all(t.values != c for c in candidates):
                candidates.append(t.values)
        confirmed = self._batch("confirm", candidates[:max(1, s.confirm)], None)
        final = [t for t in confirmed if t.error is not None] or ranked[:1]
        fit = min(final, key=lambda t: t.error)
        self.seconds = time.monotonic() - started
        return fit

    def _space(self, centre: PathValues, disciplines: list[str]) -> dict[str, Any]:
        """The box the search samples: narrow, since the centre has had the physics' correction."""
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        space: dict[str, Any] = {}
        for d in self.directions:
            rate = centre.rate_up_bps if d == "up" else centre.rate_down_bps
            space[f"rate_{d}"] = FloatDistribution(rate / 1.04, rate * 1.04, log=True)
        slack = max(0.5, 0.03 * centre.rtt_ms)
        space["rtt_ms"] = FloatDistribution(max(0.05, centre.rtt_ms - slack), centre.rtt_ms + slack)
        if len(disciplines) > 1:
            space["discipline"] = CategoricalDistribution(disciplines)
        if any(d in FIFOS for d in disciplines) and self.settings.limit_pkts is None:
            limit = centre.limit_pkts or next(self._correct_limit_default(d) for d in disciplines if d in FIFOS)
            space["limit"] = IntDistribution(max(MIN_LIMIT, int(limit / 1.4)), min(MAX_LIMIT, int(limit * 1.4) + 1),
                                             log=True)
        if self.settings.loss:
            space["loss_pct"] = FloatDistribution(0.0, 2.0)
        if self.settings.jitter:
            space["jitter_ms"] = FloatDistribution(0.0, max(0.5, centre.rtt_ms / 4))
        return space

    def _correct_limit_default(self, discipline: str) -> int:
        return guess(self.measurements, discipline).limit_pkts or 100

    def _correct(self, trial: Trial) -> PathValues:
        """The trial's path moved by what physics says of its residuals: throughput scales with
        the rate, the least round trip with the base RTT, a full FIFO's delay with limit / rate."""
        v = trial.values
        factors: dict[str, list[float]] = {"up": [], "down": [], "queue": []}
        rtt_shift: list[float] = []
        for figs in trial.residuals.values():
            for d in ("up", "down"):
                r = figs.get(f"{d}.total.p50")
                if r and r["emulated"] and math.isfinite(r["emulated"]):
                    factors[d].append(r["measured"] / r["emulated"])
            for name, r in figs.items():
                if name.endswith(".idle.p10") and math.isfinite(r["emulated"]):
                    rtt_shift.append(r["measured"] - r["emulated"])
            loads = [n for n in figs if n.endswith(".load.p50")]
            if loads:
                probe = loads[0][:-len(".load.p50")]
                base_m = figs.get(f"{probe}.idle.p10", {}).get("measured", v.rtt_ms)
                base_e = figs.get(f"{probe}.idle.p10", {}).get("emulated", v.rtt_ms)
                q_m, q_e = figs[loads[0]]["measured"] - base_m, figs[loads[0]]["emulated"] - base_e
                if q_m > 0 and q_e > 0 and math.isfinite(q_e):
                    factors["queue"].append(q_m / q_e)

        def median(values: list[float], default: float) -> float:
            return sorted(values)[len(values) // 2] if values else default

        up = v.rate_up_bps * median(factors["up"], 1.0)
        down = v.rate_down_bps * median(factors["down"], 1.0)
        if "up" not in self.directions:
            up = down
        if "down" not in self.directions:
            down = up
        limit = v.limit_pkts
        if v.discipline in FIFOS and self.settings.limit_pkts is None and limit:
            rate_factor = median(factors["up"] + factors["down"], 1.0)
            limit = int(min(MAX_LIMIT, max(MIN_LIMIT, round(limit * median(factors["queue"], 1.0) * rate_factor))))
        rtt = max(0.05, v.rtt_ms + median(rtt_shift, 0.0))
        return replace(v, rate_up_bps=up, rate_down_bps=down, rtt_ms=rtt, limit_pkts=limit)

    def _params(self, v: PathValues, space: dict[str, Any]) -> dict[str, Any]:
        params = {"rate_up": v.rate_up_bps, "rate_down": v.rate_down_bps, "rtt_ms": v.rtt_ms,
                  "discipline": v.discipline, "limit": v.limit_pkts, "loss_pct": v.loss * 100, "jitter_ms": v.jitter_ms}
        out = {}
        for k, dist in space.items():
            value = params[k]
            if k == "limit" and value is None:
                value = dist.low
            if hasattr(dist, "low"):
                value = min(dist.high, max(dist.low, value))
            out[k] = value
        return out

    def _values(self, params: dict[str, Any], guesses: dict[str, PathValues]) -> PathValues:
        discipline = params.get("discipline", self.kept[0])
        g = guesses[discipline]
        up = params.get("rate_up", g.rate_up_bps)
        down = params.get("rate_down", g.rate_down_bps)
        if "up" not in self.directions:  # unloaded: its rate cannot be told; the loaded one's
            up = down
        if "down" not in self.directions:
            down = up
        limit = params.get("limit", g.limit_pkts) if discipline in FIFOS else self.settings.limit_pkts
        return PathValues(up, down, params.get("rtt_ms", g.rtt_ms), discipline, limit,
                          params.get("loss_pct", 0.0) / 100, params.get("jitter_ms", 0.0))

    def _batch(self, stage: str, candidates: list[PathValues], load_s: float | None) -> list[Trial]:
        """Runs each candidate's test of every measurement; the trials, with their errors."""
        trials, jobs, specs = [], [], {}
        for values in candidates:
            trial = Trial(len(self.trials) + 1, stage, values, load_s or 0.0, self.out / "trials" / f"{len(self.trials) + 1:03d}")
            self.trials.append(trial)
            trials.append(trial)
            for i, m in enumerate(self.measurements):
                key = f"{trial.number}/{self._key(i)}"
                specs[key] = test_spec(m, values, load_s, seed=self.settings.seed + trial.number)
                run_dir = trial.run_dir / self._key(i) if len(self.measurements) > 1 else trial.run_dir
                jobs.append(Job({"trial": key}, 1, run_dir, f"trial {trial.number}"))
        runner = functools.partial(run_trial, specs)
        results: dict[str, tuple[RunResult, float]] = {}
        for done in self.executor.run(runner, jobs, lambda i, job: (lambda seconds: None)):
            results[done.job.values["trial"]] = (done.result, done.seconds)
            if done.result.interrupted:
                raise KeyboardInterrupt
        for trial in trials:
            res, reasons, seconds = {}, [], 0.0
            for i, m in enumerate(self.measurements):
                key = f"{trial.number}/{self._key(i)}"
                result, took = results.get(key, (RunResult(False, None, "not run"), 0.0))
                seconds += took
                run_dir = trial.run_dir / self._key(i) if len(self.measurements) > 1 else trial.run_dir
                if not result.complete:
                    reasons.append(result.reason or "incomplete")
                    continue
                res[self._key(i)] = residuals(self.measured[self._key(i)], emulated(run_dir, m).figures())
            trial.seconds = seconds
            if reasons:
                trial.reason = "; ".join(reasons)
            else:
                trial.residuals, trial.error = res, error(res)
            length = "full length" if load_s is None else f"{load_s:g} s load"
            told = f"error {trial.error:.3f}" if trial.error is not None else str(trial.reason)
            self.say(f"calibrate: run {trial.number} ({stage}, {length}) {values_text(trial.values)}: {told}")
        return trials


def values_text(v: PathValues) -> str:
    return v.describe()


# Writing ------------------------------------------------------------------------------------------

def write(cal: Calibration, fit: Trial) -> dict[str, Any]:
    """calibration.json, path.toml (the fitted link as a topology file) and one test spec per
    measurement (its test on the fitted path, the path's values as --set-able params)."""
    import tomli_w

    out = cal.out
    out.mkdir(parents=True, exist_ok=True)
    topology = test_spec(cal.measurements[0], fit.values)["topology"]
    (out / "path.toml").write_text("# The path bloatlab calibrate fitted (calibration.json says to what, and how "
                                   "well).\n# Any experiment can run on it: topology = \"path.toml\", hosts client "
                                   "and server.\n" + tomli_w.dumps(topology))
    tests = []
    for i, m in enumerate(cal.measurements):
        spec = test_spec(m, fit.values, None, cal.settings.seed, as_params=True)
        spec["description"] = f"The test of {m.source} ({m.test}) on the path bloatlab calibrate fitted to it."
        name = "test.toml" if len(cal.measurements) == 1 else f"test-{cal._key(i)}.toml"
        (out / name).write_text(tomli_w.dumps(_toml_ready(spec)))
        tests.append(name)
    figures = [{"measurement": key, "figure": name, **r} for key, figs in fit.residuals.items()
               for name, r in figs.items()]
    abs_errors = sorted(abs(f["relative_error"]) for f in figures)
    doc = {
        "kind": "calibration",
        "measurements": [{"key": cal._key(i), "source": m.source, "test": m.test, "duration_s": m.duration_s,
                          "flows": [asdict(f) for f in m.flows], "probes": [asdict(p) for p in m.probes],
                          "notes": m.notes} for i, m in enumerate(cal.measurements)],
        "fitted": asdict(fit.values), "fitted_text": fit.values.describe(), "error": fit.error,
        "median_abs_relative_error": abs_errors[len(abs_errors) // 2] if abs_errors else None,
        "residuals": figures, "best_run": str(fit.run_dir), "settings": asdict(cal.settings),
        "runs": len(cal.trials) * len(cal.measurements), "seconds": round(getattr(cal, "seconds", 0.0), 1),
        "trials": [t.to_dict() for t in cal.trials], "files": {"path": "path.toml", "tests": tests},
    }
    (out / "calibration.json").write_text(json.dumps(doc, indent=1, default=_json_default) + "\n")
    return doc


def _toml_ready(value: Any) -> Any:
    """tomli_w writes no None: drop such keys."""
    if isinstance(value, dict):
        return {k: _toml_ready(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_toml_ready(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(f"{type(value).__name__} is not JSON")


def check_out(out: Path) -> None:
    """A calibration writes into a new or empty directory, or over an earlier calibration."""
    if out.exists() and any(out.iterdir()) and not (out / "calibration.json").exists() \
            and not (out / "trials").exists():
        raise BloatlabError(f"{out} is not empty and holds no calibration; give a new directory", field="--out")
    if (out / "trials").exists():
        shutil.rmtree(out / "trials")


def check_measurements(measurements: list[Measurement]) -> None:
    if not any(m.flows for m in measurements):
        raise SpecError(f"{measurements[0].source} has no TCP flow: a path's rate cannot be fitted from pings "
                        "alone; give a test with load (rrul, tcp_nup, tcp_ndown) as well", field="MEASUREMENT")


def calibrate(measurements: list[Measurement], out: Path, settings: Settings, executor: Executor | None = None,
              say: Callable[[str], None] = print) -> dict[str, Any]:
    """The whole job: search, then calibration.json, path.toml, the test specs, the figures of
    the fit's full-length run against the measurement, and report.html. calibration.json's
    document, with "plots" and "report" added."""
    from bloatlab.analysis import calibration as drawing

    check_measurements(measurements)
    check_out(out)
    cal = Calibration(measurements, out, settings, executor, say)
    fit = cal.run()
    doc = write(cal, fit)
    plots = []
    for i, m in enumerate(measurements):
        run_dir = fit.run_dir / cal._key(i) if len(measurements) > 1 else fit.run_dir
        prefix = "" if len(measurements) == 1 else f"{cal._key(i)}-"
        plots += drawing.draw(m, emulated(run_dir, m), out / "plots", prefix)
    doc["plots"] = [str(p) for p in plots]
    doc["report"] = str(drawing.report(doc, plots, out))
    (out / "calibration.json").write_text(json.dumps(doc, indent=1, default=_json_default) + "\n")
    return doc

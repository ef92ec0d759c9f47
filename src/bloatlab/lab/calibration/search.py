"""The search for the path that fits (docs/calibration.md), and the error it minimises.

The search, for a handful of expensive noisy evaluations (each an emulated run of the
measurement's own test):

    guess     rates from the measured totals (goodput / 1448 x 1514: the datapath counts whole
              frames), the base RTT from the least round trip, a FIFO's limit from the queueing
              delay under load (the RTT's 99th percentile above the base, times the rate)
    screen    one short run per candidate discipline at the guess
    refine    each one's path corrected by its residuals (throughput scales with the rate, the
              least RTT with the base RTT, a full FIFO's delay with limit / rate) and run again;
              the disciplines within 1.5 x the best error go on (a bandit's cut), each from its
              best run corrected once more
    search    optuna's TPE sampler over a box around the best corrected path: short runs
              (`short_load_s` of load), `parallel` at a time
    confirm   at the measurement's own length: the best short run's path corrected once more, then
              the best short runs themselves; the best of these is the fit

The error of a trial compares distributions, figure by figure (results/measurement.py: each
flow's mean throughput, each direction's total at its 10/50/90th percentiles, each probe's
round trips at 10..99th, loaded and idle, and at 50th and 90th in the load's first seconds):
|log(emulated / measured)|, averaged within five groups (totals, flows, latency under load, in
the load's start, idle), then over the groups present.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bloatlab.errors import MachineError
from bloatlab.lab.calibration.path import FIFOS, MAX_LIMIT, MIN_LIMIT, PathValues, emulated, guess, test_spec
from bloatlab.lab.executors import Executor, Job, LocalExecutor, ProcessExecutor, RunResult, Tick
from bloatlab.results.measurement import Measurement
from bloatlab.specs.disciplines import ALIASES
from bloatlab.specs.experiment import parse_experiment

CANDIDATES = ("droptail", "codel", "pie", "fq_codel")  # searched when no discipline is given
SCREEN_KEEP = 1.5  # disciplines within this factor of the best screened error go on
FLOOR = {"mbps": 0.01, "ms": 0.01}  # figures below these compare as these (no log of zero)
GROUPS = ("total", "flow", "load", "start", "idle")


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
    stage: str  # screen, refine, search, confirm
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


# The error ---------------------------------------------------------------------------------------

def group_of(figure: str) -> str:
    if figure.startswith("flow."):
        return "flow"
    if ".total." in figure:
        return "total"
    return next(phase for phase in ("load", "start", "idle") if f".{phase}." in figure)


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

    def run_dir(self, trial: Trial, i: int) -> Path:
        """Where the trial's run of measurement i is: its directory, or a part of it per measurement."""
        return trial.run_dir / self._key(i) if len(self.measurements) > 1 else trial.run_dir

    def run(self) -> Trial:
        started = time.monotonic()
        s = self.settings
        optuna = _optuna()
        disciplines = list(s.disciplines)
        guesses = {d: guess(self.measurements, d, s.limit_pkts) for d in disciplines}
        self.say(f"calibrate: guess {guesses[disciplines[0]].describe()}")
        # Screen: each discipline at its guess; then refine: each one's path corrected by its
        # residuals and run again, so that every discipline is judged near its own best rates
        # (an AQM drops early and leaves the link less busy than the guess, made from the
        # totals, supposes); then the cut.
        screened = self._batch("screen", list(guesses.values()), s.short_load_s)
        ok = [t for t in screened if t.error is not None]
        if not ok:
            raise MachineError(f"every screening run failed (first: {screened[0].reason}); see {self.out}/trials")
        refined = [t for t in self._batch("refine", [self._correct(t).rounded() for t in ok], s.short_load_s)
                   if t.error is not None]
        best_of = {t.values.discipline: t for t in sorted(ok + refined, key=lambda t: -t.error)}  # the least wins
        best = min(t.error for t in best_of.values())
        kept = self.kept = [d for d, t in best_of.items() if t.error <= best * SCREEN_KEEP]
        if len(disciplines) > 1:
            self.say(f"calibrate: screened and refined {', '.join(f'{d} {t.error:.3f}' for d, t in best_of.items())}"
                     f"; searching {', '.join(kept)}")
        best_of = {d: best_of[d] for d in kept}
        # Search: TPE in a box around each kept discipline's twice-corrected path, which goes
        # first; after each batch the best trial's correction goes next.
        centres = {d: self._correct(t).rounded() for d, t in best_of.items()}
        guesses.update(centres)
        best_kept = min(best_of.values(), key=lambda t: t.error)
        space = self._space(centres[best_kept.values.discipline], kept, centres)
        sampler = optuna.samplers.TPESampler(seed=s.seed, n_startup_trials=max(2, s.parallel), multivariate=True,
                                             constant_liar=True)
        study = optuna.create_study(direction="minimize", sampler=sampler)
        for d in sorted(centres, key=lambda d: d != best_kept.values.discipline):
            study.enqueue_trial(self._params(centres[d], space))
        left = max(0, s.trials - len(screened) - len(refined))
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

    def _space(self, centre: PathValues, disciplines: list[str], centres: dict[str, PathValues]) -> dict[str, Any]:
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
            limit = next(centres[d].limit_pkts or 100 for d in disciplines if d in FIFOS)
            space["limit"] = IntDistribution(max(MIN_LIMIT, int(limit / 1.5)), min(MAX_LIMIT, int(limit * 1.5) + 1),
                                             log=True)
        if self.settings.loss:
            space["loss_pct"] = FloatDistribution(0.0, 2.0)
        if self.settings.jitter:
            space["jitter_ms"] = FloatDistribution(0.0, max(0.5, centre.rtt_ms / 4))
        return space

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
            # A full FIFO's delay shows in the loaded round trips' upper percentile: the median
            # also follows the flows' sawtooth, and moves with its phase from run to run.
            loads = [n for n in figs if n.endswith(".load.p95")]
            if loads:
                probe = loads[0][:-len(".load.p95")]
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
                run_dir = self.run_dir(trial, i)
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
                run_dir = self.run_dir(trial, i)
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
            self.say(f"calibrate: run {trial.number} ({stage}, {length}) {trial.values.describe()}: {told}")
        return trials

"""An experiment is data: a topology, workloads on a schedule, probes, a duration and a seed,
with named parameters that `--set` can change. This module validates a TOML spec into typed
objects (specs/model.py), its topology, workloads and probes through their own readers
(topology.py, workloads.py, probes.py); bloatlab.lab.run runs them.

Parameters are declared in a [params] table and used anywhere in the spec as "{name}":

    [params.maxq]
    default = 100
    type = "int"            # rate | duration | size | int | float | percent | string
    help = "bottleneck queue, packets"

A value that is exactly "{maxq}" takes the parameter's typed value (100, not "100"); a
placeholder inside a longer string is replaced by its text. Every --set value is checked
against the parameter's type, so a bad value is reported under the parameter's own name.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import itertools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from bloatlab.errors import SpecError, show
from bloatlab.specs.dscp import parse_dscp
from bloatlab.specs.model import OFFERED, PARAM_TYPES, RUN_BACKENDS, Experiment, Param
from bloatlab.specs.probes import parse_probes
from bloatlab.specs.reading import NAME_RE, check_keys, congestion_control, field_of, key_name, load_toml
from bloatlab.specs.topology import parse_topology
from bloatlab.specs.units import parse_duration_ns, parse_percent, parse_rate, parse_size_bytes
from bloatlab.specs.workloads import parse_workloads

PARAM_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,30}")
PLACEHOLDER_RE = re.compile(r"\{([a-z][a-z0-9_]*)\}")
MAX_DURATION_NS = 24 * 3600 * 10**9

SPEC_KEYS = ("name", "description", "duration", "seed", "repeat", "backend", "punctual", "params", "topology",
             "workloads", "probes")
MAX_REPEAT = 1000
PARAM_KEYS = ("default", "type", "help", "choices", "min", "max", "sweep", "label", "tag")


# Loading -----------------------------------------------------------------------------------

def presets_dir() -> Path:
    return Path(str(resources.files("bloatlab.specs") / "presets"))


def list_presets() -> list[tuple[str, str]]:
    """(name, one-line description) of every bundled preset."""
    found = []
    for path in sorted(presets_dir().glob("*.toml")):
        description = load_toml(path).get("description", "")
        found.append((path.stem, description.strip().splitlines()[0] if description.strip() else ""))
    return found


def preset_path(name: str) -> Path:
    path = presets_dir() / f"{name}.toml"
    if not re.fullmatch(r"[a-z0-9-]+", name) or not path.exists():
        names = [n for n, _ in list_presets()]
        close = difflib.get_close_matches(name, names, n=1)
        guess = f"did you mean {close[0]}? " if close else ""
        raise SpecError(f"no preset {name!r}; {guess}bloatlab presets lists them ({', '.join(names)})",
                        field="--preset")
    return path


def preset_info(name: str) -> tuple[str, list[Param]]:
    """A preset's description and parameters."""
    data = load_toml(preset_path(name))
    return data.get("description", "").strip(), list(_parse_params(data.get("params", {})).values())


def load_preset(name: str, sets: list[str] | None = None, rep: int = 1, pcap: tuple[str, ...] = (),
                backend: str | None = None, punctual: bool = False) -> Experiment:
    path = preset_path(name)
    return parse_experiment(load_toml(path), sets or [], base_dir=path.parent, preset=name,
                            source=f"preset {name}", rep=rep, pcap=pcap, backend=backend, punctual=punctual)


def load_experiment(path: str | Path, sets: list[str] | None = None, rep: int = 1,
                    pcap: tuple[str, ...] = (), backend: str | None = None, punctual: bool = False) -> Experiment:
    path = Path(path)
    return parse_experiment(load_toml(path), sets or [], base_dir=path.parent, source=str(path), rep=rep, pcap=pcap,
                            backend=backend, punctual=punctual)


@dataclass(frozen=True)
class Source:
    """Where an experiment comes from: a bundled preset or a spec file, with what the command
    line adds to every run of it."""

    preset: str | None = None
    path: Path | None = None
    pcap: tuple[str, ...] = ()  # link directions to capture besides the spec's (--pcap)
    backend: str | None = None  # instead of the spec's (--backend)
    punctual: bool = False  # the datapath punctual whatever the spec says (--punctual)

    def load(self, sets: list[str] | None = None, rep: int = 1) -> Experiment:
        if self.preset is not None:
            return load_preset(self.preset, sets, rep, self.pcap, self.backend, self.punctual)
        assert self.path is not None
        return load_experiment(self.path, sets, rep, self.pcap, self.backend, self.punctual)

    def file(self) -> Path:
        return preset_path(self.preset) if self.preset is not None else Path(self.path)  # type: ignore[arg-type]

    def fingerprint(self) -> str:
        """A hash of the spec's text: a resumed sweep must run the spec its first runs ran."""
        return hashlib.sha256(self.file().read_bytes()).hexdigest()[:16]


@dataclass(frozen=True)
class SweepPlan:
    """A sweep of an experiment: every point loaded (and so checked) once, before the first run;
    each run is its point's experiment at its repetition, never parsed again."""

    source: Source
    sets: list[str]  # the fixed --set NAME=VALUE items
    axes: list[tuple[str, tuple[Any, ...]]]  # each axis's name and its typed values, in order
    points: dict[tuple[Any, ...], Experiment]  # typed values -> the point's experiment (repetition 1)
    first: Experiment  # the experiment at the spec's own values, for names and durations
    labels: dict[str, str] = dataclasses.field(default_factory=dict)  # axis -> its `label`, where the spec gives one

    def key(self, values: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(values[name] for name, _ in self.axes)

    def load(self, values: dict[str, Any], rep: int) -> Experiment:
        """The experiment at one point (typed values, as the engine keeps them), repetition rep."""
        return self.points[self.key(values)].repetition(rep)

    def replace_points(self, change: Callable[[Experiment], Experiment]) -> SweepPlan:
        """The plan with every point's experiment changed alike (a backend chosen for all)."""
        return dataclasses.replace(self, points={k: change(e) for k, e in self.points.items()})

    @property
    def fixed(self) -> dict[str, str]:
        return {k.strip(): v.strip() for k, _, v in (item.partition("=") for item in self.sets)}


def plan_sweep(source: Source, sets: list[str], axes: list[tuple[str, list[str]]]) -> SweepPlan:
    """The cross product of `axes` (names and values as text, as sweep_axes gives them), each
    point loaded now: a bad swept value is reported under --sweep, where the user wrote it, and
    two texts that read as one value (20 and 2e1) are refused."""
    points, typed = {}, {}
    for combo in itertools.product(*(values for _, values in axes)):
        point = dict(zip([name for name, _ in axes], combo))
        try:
            experiment = source.load(sets + [f"{k}={v}" for k, v in point.items()])
        except SpecError as e:
            if e.field and e.field.startswith("--set ") and e.field[6:] in point and e.field not in \
                    {f"--set {item.partition('=')[0].strip()}" for item in sets}:
                raise SpecError(e.message, field=f"--sweep {e.field[6:]}") from None
            raise
        for name, text in point.items():
            typed[name, text] = experiment.params[name]
        points[tuple(experiment.params[name] for name, _ in axes)] = experiment
    for name, values in axes:
        if len({json.dumps(typed[name, v]) for v in values}) < len(values):
            raise SpecError(f"{','.join(values)} names a value twice (as {name} reads them); give each once",
                            field=f"--sweep {name}")
    typed_axes = [(name, tuple(typed[name, v] for v in values)) for name, values in axes]
    declared = _parse_params(load_toml(source.file()).get("params", {}))
    labels = {name: declared[name].label for name, _ in axes if declared[name].label}
    return SweepPlan(source, list(sets), typed_axes, points, source.load(sets), labels)


def parse_experiment(data: dict[str, Any], sets: list[str], *, base_dir: Path,
                     preset: str | None = None, source: str | None = None, rep: int = 1,
                     pcap: tuple[str, ...] = (), backend: str | None = None, punctual: bool = False) -> Experiment:
    """The experiment; repetition `rep` (from 1) runs with the seeds moved on by rep - 1, so
    the emulated loss and hashing differ between repetitions yet each stays reproducible.
    `pcap` adds link directions to capture (--pcap) to the spec's own; `backend` (--backend)
    stands for the spec's; `punctual` (--punctual) makes the datapath punctual whatever the
    spec says."""
    check_keys(data, SPEC_KEYS, "", "an experiment spec")
    params = _parse_params(data.get("params", {}))
    values = _apply_sets({p.name: p.default for p in params.values()}, params, sets)
    spec = {key: _substitute(value, values, key) for key, value in data.items()
            if key not in ("params", "description")}

    name = spec.get("name", preset or (Path(source).stem if source else "experiment"))
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise SpecError(f"{show(name)} is not a valid name; use a lowercase letter, then up to 30 "
                        'lowercase letters, digits, "_" or "-"', field="name")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise SpecError("must be a string", field="description")

    if "duration" not in spec:
        raise SpecError('missing; say how long the run lasts, e.g. duration = "60s"', field="duration")
    duration_ns = parse_duration_ns(spec["duration"], "duration", allow_zero=False)
    if duration_ns > MAX_DURATION_NS:
        raise SpecError(f'{show(spec["duration"])} is longer than a day; write at most "86400s"', field="duration")

    seed = spec.get("seed", 1)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise SpecError(f"{show(seed)} is not a seed; write a whole number >= 0", field="seed")

    repeat = spec.get("repeat", 1)
    if not isinstance(repeat, int) or isinstance(repeat, bool) or not 1 <= repeat <= MAX_REPEAT:
        raise SpecError(f"{show(repeat)} is not a repetition count; write a whole number from 1 to {MAX_REPEAT}",
                        field="repeat")

    raw_topology = spec.get("topology")
    if raw_topology is None:
        raise SpecError('missing; give a [topology] table or a file: topology = "net.toml"', field="topology")
    if isinstance(raw_topology, str):
        topo_path = base_dir / raw_topology
        raw_topology, topo_base, where = load_toml(topo_path), topo_path.parent, ""
    else:
        topo_base, where = base_dir, "topology"
    raw_topology = {"seed": seed, **raw_topology} if isinstance(raw_topology, dict) else raw_topology
    topology = parse_topology(raw_topology, where=where, base_dir=topo_base)

    run_backend = backend if backend is not None else spec.get("backend", "emulation")
    if run_backend not in RUN_BACKENDS:
        raise SpecError(f"{show(run_backend)} is no backend; choose one of {', '.join(RUN_BACKENDS)}",
                        field="--backend" if backend is not None else "backend")

    if not isinstance(spec.get("punctual", False), bool):
        raise SpecError(f"{show(spec['punctual'])} is not true or false; write punctual = true to have the datapath "
                        "spin through the machine's late wake-ups (a core per busy worker), or leave it out",
                        field="punctual")
    punctual = punctual or spec.get("punctual", False)

    workloads = parse_workloads(spec.get("workloads", []), topology, duration_ns)
    probes = parse_probes(spec.get("probes", {}), topology, pcap)
    return Experiment(name=name, description=description.strip(), topology=topology,
                      workloads=tuple(workloads), probes=probes, duration_ns=duration_ns, seed=seed,
                      params=values, preset=preset, source=source, repeat=repeat, backend=run_backend,
                      tags=tuple(name for name, p in params.items() if p.tag), punctual=punctual).repetition(rep)


# Parameters --------------------------------------------------------------------------------

def _parse_params(raw: object) -> dict[str, Param]:
    if not isinstance(raw, dict):
        raise SpecError("must be a table of parameters, e.g. [params.maxq]", field="params")
    params = {}
    for name, table in raw.items():
        where = field_of("params", name)
        if not PARAM_NAME_RE.fullmatch(name):
            raise SpecError(f"{show(name)} is not a valid parameter name; use a lowercase letter, then "
                            'lowercase letters, digits or "_"', field=where)
        if not isinstance(table, dict):
            table = {"default": table}  # maxq = 100 is short for [params.maxq] default = 100
        check_keys(table, PARAM_KEYS, where, "a parameter")
        if "default" not in table:
            raise SpecError("missing; every parameter has a default", field=field_of(where, "default"))
        default = table["default"]
        kind = table.get("type", "int" if isinstance(default, int) and not isinstance(default, bool)
                         else "float" if isinstance(default, float) else "string")
        if kind not in PARAM_TYPES:
            raise SpecError(f"{show(kind)} is not a parameter type; choose one of: {', '.join(PARAM_TYPES)}",
                            field=field_of(where, "type"))
        choices = table.get("choices")
        if choices is not None and not (isinstance(choices, list) and choices):
            raise SpecError("must be a non-empty list of the allowed values", field=field_of(where, "choices"))
        label, tag = table.get("label", ""), table.get("tag", False)
        if not isinstance(label, str) or len(label) > 60:
            raise SpecError(f"{show(label)} is not a label; write a few words, e.g. label = \"queue size, packets\"",
                            field=field_of(where, "label"))
        if not isinstance(tag, bool):
            raise SpecError(f"{show(tag)} is not true or false; tag = true names default run directories by this "
                            "parameter's value", field=field_of(where, "tag"))
        for bound in ("min", "max"):  # check_param compares a value with them: a number with numbers
            limit = table.get(bound)
            if limit is not None and kind not in ("int", "float"):
                raise SpecError(f"a {kind} parameter has no {bound}; only int and float ones are bounded",
                                field=field_of(where, bound))
            if limit is not None and (not isinstance(limit, (int, float)) or isinstance(limit, bool) or limit != limit):
                raise SpecError(f"{show(limit)} is not a number; write e.g. {bound} = 1", field=field_of(where, bound))
        param = Param(name, kind, None, str(table.get("help", "")),
                      tuple(choices) if choices else None, table.get("min"), table.get("max"), label=label, tag=tag)
        sweep = _parse_sweep(table.get("sweep"), param, field_of(where, "sweep"))
        params[name] = Param(**{**param.__dict__, "default": check_param(param, default, field_of(where, "default")),
                                "sweep": sweep})
    return params


def _parse_sweep(raw: object, param: Param, where: str) -> tuple[Any, ...] | None:
    if raw is None or raw is False:
        return None
    if raw is True and param.type == "cc" and param.choices is None:
        return (OFFERED,)  # resolved by sweep_axes, which is told what the machine offers
    if raw is True:
        if param.choices is None:
            raise SpecError("sweep = true runs every choice, but the parameter has no choices; "
                            "list the values: sweep = [...]", field=where)
        return param.choices
    if not isinstance(raw, list) or not raw:
        raise SpecError("must be true (every choice) or a non-empty list of values", field=where)
    return tuple(check_param(param, v, field_of(where, i)) for i, v in enumerate(raw))


def sweep_axes(preset: str | None, path: str | Path | None, sets: list[str], sweeps: list[str],
               offered_ccs: Callable[[], list[str]] | None = None) -> list[tuple[str, list[str]]]:
    """The axes a command means, as (name, values as text): each `--sweep NAME=V1,V2,...` in
    order, then every parameter the spec sweeps that neither --set nor --sweep names. The
    values are checked when each point's experiment is loaded. A cc parameter's value
    "offered" stands for every congestion control this machine offers (`offered_ccs`, which
    the testbed knows)."""
    source = preset_path(preset) if preset else Path(path)  # type: ignore[arg-type]
    params = _parse_params(load_toml(source).get("params", {}))
    given = {item.partition("=")[0].strip() for item in sets}
    axes: list[tuple[str, list[str]]] = []
    for item in sweeps:
        name, sep, text = item.partition("=")
        name = name.strip()
        values = [v.strip() for v in text.split(",")]
        if not sep or not name or not all(values):
            raise SpecError(f"{item!r} is not NAME=V1,V2,...; write e.g. --sweep maxq=20,100", field="--sweep")
        if name not in params:
            raise SpecError(_unknown_param(name, params), field=f"--sweep {key_name(name)}")
        if name in given:
            raise SpecError(f"{name} is both --set and swept; drop one of them", field=f"--sweep {name}")
        if any(n == name for n, _ in axes):
            raise SpecError(f"{name} is swept twice; give all its values in one --sweep {name}=V1,V2",
                            field=f"--sweep {name}")
        if len(set(values)) != len(values):
            raise SpecError(f"{text!r} lists a value twice; give each value once", field=f"--sweep {name}")
        axes.append((name, values))
    for p in params.values():
        if p.sweep and p.name not in given and all(n != p.name for n, _ in axes):
            axes.append((p.name, [str(v) for v in p.sweep]))
    expanded = []
    for name, values in axes:
        if params[name].type == "cc" and OFFERED in values:
            if offered_ccs is None:
                raise SpecError(f'"{OFFERED}" stands for the congestion controls this machine offers, which only a '
                                "run here can tell; name them instead", field=f"--sweep {name}")
            values = list(dict.fromkeys(v for value in values for v in (offered_ccs() if value == OFFERED else [value])))
        expanded.append((name, values))
    return expanded


def _unknown_param(name: str, params: dict[str, Param]) -> str:
    known = ", ".join(params) or "none"
    close = difflib.get_close_matches(name, list(params), n=1)
    guess = f"did you mean {close[0]}? " if close else ""
    return f"unknown parameter {name!r}; {guess}this experiment's parameters: {known}"


def check_param(param: Param, value: Any, where: str) -> Any:
    """The value, typed and checked, or a SpecError naming `where`."""
    if param.type in ("int", "float") and isinstance(value, str):
        try:
            value = int(value) if param.type == "int" else float(value)
        except ValueError:
            raise SpecError(f"{show(value)} is not {'an integer' if param.type == 'int' else 'a number'}",
                            field=where) from None
    if param.type == "int" and (not isinstance(value, int) or isinstance(value, bool)):
        raise SpecError(f"{show(value)} is not an integer", field=where)
    if param.type == "float" and (not isinstance(value, (int, float)) or isinstance(value, bool)):
        raise SpecError(f"{show(value)} is not a number", field=where)
    if param.type not in ("int", "float", "dscp") and not isinstance(value, str):
        value = str(value) if param.type in ("string", "size") else value
    if param.type == "cc":
        congestion_control(value, where)
    if param.type == "dscp":  # a name ("EF") or a codepoint, which --set gives as text
        value = int(value) if isinstance(value, str) and re.fullmatch(r"[0-9]+", value.strip()) else value
        parse_dscp(value, where)
    checker = {"rate": parse_rate, "duration": parse_duration_ns, "size": parse_size_bytes,
               "percent": parse_percent}.get(param.type)
    if checker is not None:
        checker(value, where)
    if param.choices is not None and value not in param.choices:
        raise SpecError(f"{show(value)} is not one of: {', '.join(key_name(str(c)) for c in param.choices)}",
                        field=where)
    if param.min is not None and value < param.min:
        raise SpecError(f"{show(value)} is below the minimum {param.min}", field=where)
    if param.max is not None and value > param.max:
        raise SpecError(f"{show(value)} is above the maximum {param.max}", field=where)
    return value


def _apply_sets(values: dict[str, Any], params: dict[str, Param], sets: list[str]) -> dict[str, Any]:
    values = dict(values)
    for item in sets:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise SpecError(f"{item!r} is not NAME=VALUE; write e.g. --set maxq=20", field="--set")
        if name not in params:
            raise SpecError(_unknown_param(name, params), field=f"--set {key_name(name)}")
        values[name] = check_param(params[name], text.strip(), f"--set {name}")
    return values


def _substitute(value: Any, values: dict[str, Any], where: str) -> Any:
    """Replace "{name}" placeholders in strings, recursively."""
    if isinstance(value, dict):
        return {k: _substitute(v, values, field_of(where, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, values, field_of(where, i)) for i, v in enumerate(value)]
    if not isinstance(value, str) or "{" not in value:
        return value
    for name in PLACEHOLDER_RE.findall(value):
        if name not in values:
            raise SpecError(f"{{{name}}} names no parameter; declare it as [params.{name}] "
                            f"(known: {', '.join(values) or 'none'})", field=where)
    whole = PLACEHOLDER_RE.fullmatch(value)
    if whole:
        return values[whole[1]]
    return PLACEHOLDER_RE.sub(lambda m: str(values[m[1]]), value)

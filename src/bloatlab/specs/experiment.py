"""An experiment is data: a topology, workloads on a schedule, probes, a duration and a seed,
with named parameters that `--set` can change. This module validates a TOML spec into typed
objects (specs/model.py); bloatlab.lab.run runs them.

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
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from bloatlab.errors import SpecError, show
from bloatlab.specs.dscp import parse_dscp
from bloatlab.specs.model import (DEFAULT_WEB_SIZE_BYTES, DIRECTIONS, PARAM_TYPES, PCAP_LIMIT_BYTES, PCAP_MIN_LIMIT_BYTES,
                                 PCAP_SNAPLEN, PCAP_SNAPLEN_RANGE, RUN_BACKENDS, TCP_PROBES, WORKLOAD_KINDS, Bulk, Experiment, Irtt,
                                 Param, Ping, Probes, Responsiveness, Topology, Udp, Web, Workload)
from bloatlab.specs.reading import check_keys, congestion_control, field_of, load_toml
from bloatlab.specs.topology import parse_topology
from bloatlab.specs.units import parse_duration_ns, parse_percent, parse_rate, parse_size_bytes

NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,30}")
PARAM_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,30}")
PLACEHOLDER_RE = re.compile(r"\{([a-z][a-z0-9_]*)\}")
MAX_DURATION_NS = 24 * 3600 * 10**9
DEFAULT_CC = "cubic"  # a TCP workload's, where neither it nor its sending host names one
MIN_PING_INTERVAL_NS = 10 * 10**6  # what the issue promises; ping itself goes lower as root
MIN_IRTT_INTERVAL_NS = 10**6  # below 1 ms the probes are load (the server is started with no floor)
MIN_RESPONSIVENESS_NS = 10 * 10**9  # idle probes, then MAD (4) intervals to saturate and MAD to be stable

SPEC_KEYS = ("name", "description", "duration", "seed", "repeat", "backend", "params", "topology", "workloads", "probes")
MAX_REPEAT = 1000
PARAM_KEYS = ("default", "type", "help", "choices", "min", "max", "sweep")
PROBE_KEYS = ("tcp", "queue", "pcap", "pcap_snaplen", "pcap_limit")
COMMON_WORKLOAD_KEYS = ("kind", "name", "start", "stop", "enabled")
SWITCHES = {True: True, False: False, "on": True, "off": False, "true": True, "false": False,
            "yes": True, "no": False}
WORKLOAD_KEYS = {
    "bulk": ("from", "to", "cc", "buffer", "dscp"),
    "udp": ("from", "to", "rate", "dscp"),
    "ping": ("from", "to", "interval", "dscp"),
    "irtt": ("from", "to", "interval", "dscp"),
    "web": ("server", "client", "size", "every", "count", "timeout", "cc"),
    "responsiveness": ("server", "client", "direction", "cc"),
}


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
                backend: str | None = None) -> Experiment:
    path = preset_path(name)
    return parse_experiment(load_toml(path), sets or [], base_dir=path.parent, preset=name,
                            source=f"preset {name}", rep=rep, pcap=pcap, backend=backend)


def load_experiment(path: str | Path, sets: list[str] | None = None, rep: int = 1,
                    pcap: tuple[str, ...] = (), backend: str | None = None) -> Experiment:
    path = Path(path)
    return parse_experiment(load_toml(path), sets or [], base_dir=path.parent, source=str(path), rep=rep, pcap=pcap,
                            backend=backend)


@dataclass(frozen=True)
class Source:
    """Where an experiment comes from: a bundled preset or a spec file. Each run of a sweep
    loads it anew, with its point's --set values and its repetition."""

    preset: str | None = None
    path: Path | None = None
    pcap: tuple[str, ...] = ()  # link directions to capture besides the spec's (--pcap)
    backend: str | None = None  # instead of the spec's (--backend)

    def load(self, sets: list[str] | None = None, rep: int = 1) -> Experiment:
        if self.preset is not None:
            return load_preset(self.preset, sets, rep, self.pcap, self.backend)
        assert self.path is not None
        return load_experiment(self.path, sets, rep, self.pcap, self.backend)

    def file(self) -> Path:
        return preset_path(self.preset) if self.preset is not None else Path(self.path)  # type: ignore[arg-type]

    def fingerprint(self) -> str:
        """A hash of the spec's text: a resumed sweep must run the spec its first runs ran."""
        return hashlib.sha256(self.file().read_bytes()).hexdigest()[:16]


@dataclass(frozen=True)
class SweepPlan:
    """A sweep of an experiment: every point loaded (and so checked) before the first run."""

    source: Source
    sets: list[str]  # the fixed --set NAME=VALUE items
    axes: list[tuple[str, tuple[Any, ...]]]  # each axis's name and its typed values, in order
    points: dict[tuple[Any, ...], dict[str, str]]  # typed values -> the point as --set text
    first: Experiment  # the experiment at the spec's own values, for names and durations

    def load(self, values: dict[str, Any], rep: int) -> Experiment:
        """The experiment at one point (typed values, as the engine keeps them), repetition rep."""
        point = self.points[tuple(values[name] for name, _ in self.axes)]
        return self.source.load(self.sets + [f"{k}={v}" for k, v in point.items()], rep)

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
        points[tuple(experiment.params[name] for name, _ in axes)] = point
    for name, values in axes:
        if len({json.dumps(typed[name, v]) for v in values}) < len(values):
            raise SpecError(f"{','.join(values)} names a value twice (as {name} reads them); give each once",
                            field=f"--sweep {name}")
    typed_axes = [(name, tuple(typed[name, v] for v in values)) for name, values in axes]
    return SweepPlan(source, list(sets), typed_axes, points, source.load(sets))


def parse_experiment(data: dict[str, Any], sets: list[str], *, base_dir: Path,
                     preset: str | None = None, source: str | None = None, rep: int = 1,
                     pcap: tuple[str, ...] = (), backend: str | None = None) -> Experiment:
    """The experiment; repetition `rep` (from 1) runs with the seeds moved on by rep - 1, so
    the emulated loss and hashing differ between repetitions yet each stays reproducible.
    `pcap` adds link directions to capture (--pcap) to the spec's own; `backend` (--backend)
    stands for the spec's."""
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
    if rep > 1:
        seed += rep - 1
        topology = dataclasses.replace(topology, seed=topology.seed + rep - 1)

    run_backend = backend if backend is not None else spec.get("backend", "emulation")
    if run_backend not in RUN_BACKENDS:
        raise SpecError(f"{show(run_backend)} is no backend; choose one of {', '.join(RUN_BACKENDS)}",
                        field="--backend" if backend is not None else "backend")

    workloads = _parse_workloads(spec.get("workloads", []), topology, duration_ns)
    probes = _parse_probes(spec.get("probes", {}), topology, pcap)
    return Experiment(name=name, description=description.strip(), topology=topology,
                      workloads=tuple(workloads), probes=probes, duration_ns=duration_ns, seed=seed,
                      params=values, preset=preset, source=source, repeat=repeat, backend=run_backend)


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
        param = Param(name, kind, None, str(table.get("help", "")),
                      tuple(choices) if choices else None, table.get("min"), table.get("max"))
        sweep = _parse_sweep(table.get("sweep"), param, field_of(where, "sweep"))
        params[name] = Param(**{**param.__dict__, "default": check_param(param, default, field_of(where, "default")),
                                "sweep": sweep})
    return params


def _parse_sweep(raw: object, param: Param, where: str) -> tuple[Any, ...] | None:
    if raw is None or raw is False:
        return None
    if raw is True:
        if param.choices is None:
            raise SpecError("sweep = true runs every choice, but the parameter has no choices; "
                            "list the values: sweep = [...]", field=where)
        return param.choices
    if not isinstance(raw, list) or not raw:
        raise SpecError("must be true (every choice) or a non-empty list of values", field=where)
    return tuple(check_param(param, v, field_of(where, i)) for i, v in enumerate(raw))


def sweep_axes(preset: str | None, path: str | Path | None, sets: list[str],
               sweeps: list[str]) -> list[tuple[str, list[str]]]:
    """The axes a command means, as (name, values as text): each `--sweep NAME=V1,V2,...` in
    order, then every parameter the spec sweeps that neither --set nor --sweep names. The
    values are checked when each point's experiment is loaded."""
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
            raise SpecError(_unknown_param(name, params), field=f"--sweep {name}")
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
    return axes


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
    if param.type == "dscp":  # a name ("EF") or a codepoint, which --set gives as text
        value = int(value) if isinstance(value, str) and value.strip().isdigit() else value
        parse_dscp(value, where)
    checker = {"rate": parse_rate, "duration": parse_duration_ns, "size": parse_size_bytes,
               "percent": parse_percent}.get(param.type)
    if checker is not None:
        checker(value, where)
    if param.choices is not None and value not in param.choices:
        raise SpecError(f"{show(value)} is not one of: {', '.join(map(str, param.choices))}", field=where)
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
            raise SpecError(_unknown_param(name, params), field=f"--set {name}")
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


# Workloads ---------------------------------------------------------------------------------

def _parse_workloads(raw: object, topology: Topology, duration_ns: int) -> list[Workload]:
    if not isinstance(raw, list):
        raise SpecError("must be an array of tables: write each as [[workloads]]", field="workloads")
    kinds = [w.get("kind") if isinstance(w, dict) else None for w in raw]
    workloads: list[Workload] = []
    seen: set[str] = set()  # names, of disabled workloads too
    for index, table in enumerate(raw):
        where = field_of("workloads", index)
        if not isinstance(table, dict):
            raise SpecError("must be a table; write each workload as [[workloads]]", field=where)
        kind = table.get("kind")
        if kind is None:
            raise SpecError(f"missing; say what the workload is: kind = one of {', '.join(WORKLOAD_KINDS)}",
                            field=field_of(where, "kind"))
        if kind not in WORKLOAD_KINDS:
            close = difflib.get_close_matches(str(kind), WORKLOAD_KINDS, n=1)
            guess = f"did you mean {show(close[0])}? " if close else ""
            raise SpecError(f"{show(kind)} is not a workload kind; {guess}choose one of: {', '.join(WORKLOAD_KINDS)}",
                            field=field_of(where, "kind"))
        check_keys(table, COMMON_WORKLOAD_KEYS + WORKLOAD_KEYS[kind], where, f"a {kind} workload")
        default_name = kind if kinds.count(kind) == 1 else f"{kind}{kinds[:index + 1].count(kind)}"
        name = table.get("name", default_name)
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            raise SpecError(f"{show(name)} is not a valid workload name; use a lowercase letter, then up "
                            'to 30 lowercase letters, digits, "_" or "-"', field=field_of(where, "name"))
        if name in seen:
            raise SpecError(f"{show(name)} already names an earlier workload; give each a distinct name",
                            field=field_of(where, "name"))
        start = parse_duration_ns(table.get("start", "0s"), field_of(where, "start"))
        stop = _stop(table, where, duration_ns)
        if stop > duration_ns:
            raise SpecError(f"{show(table['stop'])} is after the end of the run; stop at most at the duration",
                            field=field_of(where, "stop"))
        if start >= stop:
            raise SpecError("the workload must start before it stops (and before the run ends)",
                            field=field_of(where, "start"))
        seen.add(name)
        common = dict(name=name, kind=kind, start_ns=start, stop_ns=stop, index=index)
        workload = _KIND_PARSERS[kind](table, where, topology, common)
        # `enabled = "{load}"` lets a parameter switch a workload on and off (with and without
        # a competing flow); a disabled workload is still checked.
        enabled = table.get("enabled", True)
        if isinstance(enabled, str):
            enabled = enabled.strip().lower()
        if enabled not in SWITCHES:
            raise SpecError(f"{show(table['enabled'])} is not on or off; write true, false, \"on\" or \"off\"",
                            field=field_of(where, "enabled"))
        if SWITCHES[enabled]:
            workloads.append(workload)
    tests = [w for w in workloads if isinstance(w, Responsiveness)]
    if len(tests) > 1:
        raise SpecError("a run holds one responsiveness test; its result is the run's RPM",
                        field=field_of(field_of("workloads", tests[1].index), "kind"))
    for test in tests:
        for w in workloads:
            sender = (w.src, w.dst) if isinstance(w, Bulk) else (w.server, w.client) if isinstance(w, Web) else None
            if test.cc and sender == (test.server, test.client) and w.cc != test.cc:
                raise SpecError(f"the responsiveness test gives every TCP connection from {test.server} to "
                                f"{test.client} its cc ({test.cc}); use that cc here too, or another pair of hosts",
                                field=field_of(field_of("workloads", w.index), "cc"))
    web_cc: dict[str, str] = {}
    for w in workloads:
        if isinstance(w, Web) and web_cc.setdefault(w.server, w.cc) != w.cc:
            raise SpecError(f"another web workload on {w.server} uses {web_cc[w.server]}; a host's web "
                            "servers share one congestion control", field=field_of(field_of("workloads", w.index), "cc"))
    return workloads


def _stop(table: dict[str, Any], where: str, duration_ns: int) -> int:
    """When a workload stops: the run's end unless given; "-5s" is 5 s before the end, so a
    spec can keep an idle tail whatever its duration."""
    if "stop" not in table:
        return duration_ns
    text = table["stop"]
    if isinstance(text, str) and text.strip().startswith("-"):
        before = parse_duration_ns(text.strip()[1:], field_of(where, "stop"))
        if before >= duration_ns:
            raise SpecError(f"{show(text)} is before the run starts; the run lasts {duration_ns / 1e9:g} s",
                            field=field_of(where, "stop"))
        return duration_ns - before
    return parse_duration_ns(text, field_of(where, "stop"))


def _host(table: dict[str, Any], key: str, where: str, topology: Topology) -> str:
    if key not in table:
        raise SpecError(f"missing; name a host ({', '.join(topology.hosts)})", field=field_of(where, key))
    host = table[key]
    if host not in topology.hosts:
        raise SpecError(f"unknown host {show(host)}; the hosts are {', '.join(topology.hosts)}",
                        field=field_of(where, key))
    return host


def _two_hosts(table, where, topology, a: str, b: str) -> tuple[str, str]:
    first, second = _host(table, a, where, topology), _host(table, b, where, topology)
    if first == second:
        raise SpecError(f"{a} and {b} are both {show(first)}; use two different hosts", field=field_of(where, b))
    return first, second


def _whole_seconds(common: dict[str, Any], where: str) -> None:
    # iperf3 -t takes whole seconds (it truncates 1.5 to 1).
    if (common["stop_ns"] - common["start_ns"]) % 10**9:
        raise SpecError("an iperf3 flow runs for whole seconds; make stop - start a whole number of seconds",
                        field=field_of(where, "stop"))


def _cc(table: dict[str, Any], where: str, sender_cc: str | None) -> str:
    """The workload's own cc, else its sending host's (the topology's cc), else cubic."""
    return congestion_control(table.get("cc", sender_cc or DEFAULT_CC), field_of(where, "cc"))


def _parse_bulk(table, where, topology, common) -> Bulk:
    src, dst = _two_hosts(table, where, topology, "from", "to")
    _whole_seconds(common, where)
    cc = _cc(table, where, topology.host_cc(src))
    buffer = parse_size_bytes(table["buffer"], field_of(where, "buffer")) if "buffer" in table else None
    return Bulk(**common, src=src, dst=dst, cc=cc, buffer_bytes=buffer, dscp=_dscp(table, where))


def _dscp(table: dict[str, Any], where: str) -> int:
    return parse_dscp(table.get("dscp", 0), field_of(where, "dscp"))


def _parse_udp(table, where, topology, common) -> Udp:
    src, dst = _two_hosts(table, where, topology, "from", "to")
    _whole_seconds(common, where)
    if "rate" not in table:
        raise SpecError('missing; give the sending rate, e.g. rate = "5mbit"', field=field_of(where, "rate"))
    rate = parse_rate(table["rate"], field_of(where, "rate"))
    if rate is None:
        raise SpecError('a UDP flow needs a finite rate, e.g. rate = "5mbit"', field=field_of(where, "rate"))
    return Udp(**common, src=src, dst=dst, rate_bps=rate, dscp=_dscp(table, where))


def _interval(table: dict[str, Any], where: str, minimum_ns: int) -> int:
    """A probe's interval: "100ms" unless given, at least `minimum_ns`."""
    interval = parse_duration_ns(table.get("interval", "100ms"), field_of(where, "interval"), allow_zero=False)
    if interval < minimum_ns:
        raise SpecError(f'{show(table["interval"])} is below the minimum "{minimum_ns // 10**6}ms"',
                        field=field_of(where, "interval"))
    return interval


def _parse_ping(table, where, topology, common) -> Ping:
    src, dst = _two_hosts(table, where, topology, "from", "to")
    interval = _interval(table, where, MIN_PING_INTERVAL_NS)
    return Ping(**common, src=src, dst=dst, interval_ns=interval, dscp=_dscp(table, where))


def _parse_irtt(table, where, topology, common) -> Irtt:
    src, dst = _two_hosts(table, where, topology, "from", "to")
    interval = _interval(table, where, MIN_IRTT_INTERVAL_NS)
    if (common["stop_ns"] - common["start_ns"]) < 2 * interval:
        raise SpecError("the probe must run for at least two intervals; lengthen it or shorten the interval",
                        field=field_of(where, "interval"))
    return Irtt(**common, src=src, dst=dst, interval_ns=interval, dscp=_dscp(table, where))


def _parse_web(table, where, topology, common) -> Web:
    server, client = _two_hosts(table, where, topology, "server", "client")
    size = parse_size_bytes(table.get("size", DEFAULT_WEB_SIZE_BYTES), field_of(where, "size"))
    every = parse_duration_ns(table.get("every", "5s"), field_of(where, "every"), allow_zero=False)
    count = table.get("count", 3)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 1000:
        raise SpecError(f"{show(count)} is not a fetch count; write a whole number from 1 to 1000",
                        field=field_of(where, "count"))
    timeout = parse_duration_ns(table.get("timeout", "30s"), field_of(where, "timeout"), allow_zero=False)
    return Web(**common, server=server, client=client, size_bytes=size, every_ns=every, count=count,
               timeout_ns=timeout, cc=_cc(table, where, topology.host_cc(server)))


def _parse_responsiveness(table, where, topology, common) -> Responsiveness:
    server, client = _two_hosts(table, where, topology, "server", "client")
    direction = table.get("direction", "down")
    if direction not in DIRECTIONS:
        raise SpecError(f"{show(direction)} is not a direction; choose one of: {', '.join(DIRECTIONS)} "
                        "(down: from the server to the client)", field=field_of(where, "direction"))
    if common["stop_ns"] - common["start_ns"] < MIN_RESPONSIVENESS_NS:
        raise SpecError('the test needs at least "10s" (idle probes, then four one-second intervals to saturate '
                        "the path and four to be stable); start it earlier or stop it later", field=field_of(where, "stop"))
    cc = congestion_control(table["cc"], field_of(where, "cc")) if "cc" in table else topology.host_cc(client)
    return Responsiveness(**common, server=server, client=client, direction=direction, cc=cc)


_KIND_PARSERS = {"bulk": _parse_bulk, "udp": _parse_udp, "ping": _parse_ping, "irtt": _parse_irtt, "web": _parse_web,
                 "responsiveness": _parse_responsiveness}


def _parse_probes(raw: object, topology: Topology, pcap: tuple[str, ...] = ()) -> Probes:
    """The [probes] table; `pcap` adds directions to capture (from --pcap)."""
    if not isinstance(raw, dict):
        raise SpecError("must be a table, e.g. [probes]", field="probes")
    check_keys(raw, PROBE_KEYS, "probes", "probes")
    tcp = raw.get("tcp", "auto")
    if tcp not in TCP_PROBES:
        raise SpecError(f"{show(tcp)} is not a TCP probe; choose one of: {', '.join(TCP_PROBES)}",
                        field="probes.tcp")
    queue = _directions(raw.get("queue", bottlenecks(topology)), topology, "probes.queue")
    captured = _directions(raw.get("pcap", []), topology, "probes.pcap") + _directions(list(pcap), topology, "--pcap")
    snaplen = raw.get("pcap_snaplen", PCAP_SNAPLEN)
    low, high = PCAP_SNAPLEN_RANGE
    if not isinstance(snaplen, int) or isinstance(snaplen, bool) or not low <= snaplen <= high:
        raise SpecError(f"{show(snaplen)} is not a snap length; write a whole number of bytes from {low} to {high} "
                        f"({PCAP_SNAPLEN} keeps the headers, {high} whole frames)", field="probes.pcap_snaplen")
    limit = parse_size_bytes(raw.get("pcap_limit", PCAP_LIMIT_BYTES), "probes.pcap_limit")
    if limit < PCAP_MIN_LIMIT_BYTES:
        raise SpecError(f"{show(raw.get('pcap_limit'))} is too small to hold a packet; write at least "
                        f'"{PCAP_MIN_LIMIT_BYTES // 1024}kib"', field="probes.pcap_limit")
    return Probes(tcp=tcp, queue=tuple(dict.fromkeys(queue)), pcap=tuple(dict.fromkeys(captured)),
                  pcap_snaplen=snaplen, pcap_limit_bytes=limit)


def _directions(raw: object, topology: Topology, field: str) -> list[str]:
    """A list of link direction names ("s0->h2"), each checked against the topology."""
    directions = [link.direction_name(which) for link in topology.links for which in ("forward", "reverse")]
    if not isinstance(raw, list) or not all(isinstance(q, str) for q in raw):
        raise SpecError(f'must be a list of link directions, e.g. {field.partition(".")[2] or "pcap"} = ["s0->h2"]',
                        field=field)
    for index, name in enumerate(raw):
        if name not in directions:
            raise SpecError(f"{show(name)} is no link direction; the directions are {', '.join(directions)}",
                            field=field if field == "--pcap" else field_of(field, index))
    return list(raw)


def bottlenecks(topology: Topology) -> list[str]:
    """The directions with the lowest constant rate: the default queues to record."""
    rated = [(d.rate_bps, link.direction_name(which)) for link in topology.links
             for which, d in (("forward", link.forward), ("reverse", link.reverse)) if d.rate_bps]
    if not rated:
        return []
    lowest = min(rate for rate, _ in rated)
    return [name for rate, name in rated if rate == lowest]

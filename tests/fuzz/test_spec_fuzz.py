"""Fuzz targets: what a user writes to describe an experiment. Every preset and example, read
and then mutated (fields removed, retyped, pushed to extremes, swapped; unknown keys), through
the whole spec reader (specs/experiment.py and the topology, queue, workload and probe readers
below it); --set and --sweep values; spec files as bytes and as TOML text; nic sweep plans
(nic/plan.py); and `bloatlab replay`'s flags (cli/replay.py).

Each either gives the typed model or a one-line SpecError naming the field; what it gives must
be sound: it survives its own JSON round trip (run.json keeps it so) and keeps its bounds."""

import json
import shutil

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from bloatlab.cli.main import build_parser
from bloatlab.errors import SpecError
from bloatlab.cli.replay import build_direction, parse_queue_option, synthetic_flags
from bloatlab.nic.plan import load_plan, plan_from_args
from bloatlab.specs.disciplines import ALIASES, CATALOGUE, DISCIPLINES, LIMIT_KEYS, MAX_QUEUE_PACKETS
from bloatlab.specs.experiment import MAX_DURATION_NS, Source, _parse_params, load_experiment, parse_experiment, plan_sweep, sweep_axes
from bloatlab.specs.model import Experiment, QueueSpec, Topology
from bloatlab.specs.queues import parse_queue
from bloatlab.specs.reading import load_toml
from bloatlab.specs.topology import load_topology, parse_topology

from fuzzkit import (EXAMPLES, PRESETS, UNIT_TEXT, between, budget, contract, mutated, mutated_text, one_line, pick,
                     string_pool, texts, toml_text, values)

PRESET_DOCS = {p.stem: load_toml(p) for p in sorted(PRESETS.glob("*.toml"))}
TOPOLOGY_DOCS = [load_toml(p) for p in sorted(EXAMPLES.glob("*.toml"))] + \
    [d["topology"] for d in PRESET_DOCS.values() if isinstance(d.get("topology"), dict)]
PARAMS = {name: _parse_params(doc.get("params", {})) for name, doc in PRESET_DOCS.items()}
# Files a spec may name (relative to its directory): a trace, a topology, and one that is no TOML.
FILE_NAMES = ["trace.up", "net.toml", "bad.toml", "missing.toml", "."]
POOL = string_pool(PRESET_DOCS, TOPOLOGY_DOCS) + FILE_NAMES + \
    [f"{{{p}}}" for params in PARAMS.values() for p in params]
# Each preset's parameters' choices, as --set writes them.
CHOICES = {name: [str(v) for p in params.values() for v in (p.choices or ())] or ["1"]
           for name, params in PARAMS.items()}
PARSER = build_parser()  # bloatlab's own command line, built once: flags as a user types them
NIC_PLAN = {"iface": "eth0", "server": "192.0.2.7", "netns": "lab", "port": 5201, "repeat": 5, "duration": "50s",
            "udp_rate": "10gbit", "ping_interval": "200ms", "tests": ["tcp", "udp"],
            "offload_features": ["gso", "tso"], "axes": {"txqueuelen": [1, 10, 100], "offloads": ["on", "off"],
                                                          "qdisc": ["pfifo_fast"], "bql_limit_max": [0, 3000]}}


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory):
    """The directory fuzzed specs sit in, with the files they may name."""
    where = tmp_path_factory.mktemp("spec")
    (where / "trace.up").write_text("".join(f"{t}\n" for t in (1, 1, 2, 5, 8, 12)))
    shutil.copy(EXAMPLES / "cs244.toml", where / "net.toml")
    (where / "bad.toml").write_bytes(b"[hosts\n\xff")
    return where


def check_experiment(e: Experiment) -> None:
    """What a valid experiment keeps: its bounds, and its JSON round trip (run.json's record of it)."""
    assert 0 < e.duration_ns <= MAX_DURATION_NS
    for w in e.workloads:
        assert 0 <= w.start_ns < w.stop_ns <= e.duration_ns
    doc = json.loads(json.dumps(e.to_dict(), allow_nan=False))
    assert Experiment.from_dict(doc, params=e.params, preset=e.preset, source=e.source) == e
    check_topology(e.topology)


def check_topology(t: Topology) -> None:
    assert Topology.from_dict(json.loads(json.dumps(t.to_dict(), allow_nan=False))) == t
    for name in t.hosts:
        assert sum(name in link.ends for link in t.links) == 1
    for link in t.links:
        for d in (link.forward, link.reverse):
            assert 0 <= d.jitter_ns <= d.delay_ns and 0 <= d.loss < 1
            json.dumps(d.queue.config(d.rate_bps), allow_nan=False)


@st.composite
def set_items(draw, preset: str) -> str:
    """NAME=VALUE as --set takes it: mostly the preset's own names, with values of every kind."""
    names = sorted(PARAMS[preset]) or ["x"]
    name = pick(draw, names) if draw(st.integers(0, 3)) else draw(texts(POOL))
    how = draw(st.integers(0, 3))
    value = draw(UNIT_TEXT) if how == 0 else draw(texts(POOL)) if how == 1 else str(draw(values(POOL))) \
        if how == 2 else pick(draw, CHOICES[preset])
    sep = pick(draw, ["=", "=", "=", " = ", "", "=="])
    return f"{name}{sep}{value}"


@budget(100)
@given(data=st.data(), preset=st.sampled_from(sorted(PRESET_DOCS)))
def test_mutated_presets(spec_dir, data, preset):
    doc = data.draw(mutated(PRESET_DOCS[preset], POOL))
    sets = data.draw(st.lists(set_items(preset), max_size=2))
    e = contract(lambda: parse_experiment(doc, sets, base_dir=spec_dir, preset=preset, source=f"preset {preset}"))
    if e is not None:
        check_experiment(e)


@budget(200)
@given(data=st.data(), seed=st.integers(0, len(TOPOLOGY_DOCS) - 1), where=st.sampled_from(["", "topology"]))
def test_mutated_topologies(spec_dir, data, seed, where):
    doc = data.draw(mutated(TOPOLOGY_DOCS[seed], POOL))
    t = contract(lambda: parse_topology(doc, where=where, base_dir=spec_dir), field=bool(where) or isinstance(doc, dict))
    if t is not None:
        check_topology(t)


QUEUE_KEYS = sorted({*LIMIT_KEYS, *(p.key for d in CATALOGUE.values() for p in d.params), *DISCIPLINES, *ALIASES})


DISCIPLINE_NAMES = st.one_of(st.sampled_from([*DISCIPLINES, *ALIASES]), texts(POOL))
QUEUE_VALUES = st.one_of(values(POOL), UNIT_TEXT, st.integers(1, 2 * MAX_QUEUE_PACKETS), st.floats(0, 1),
                         st.dictionaries(st.sampled_from(QUEUE_KEYS), values(POOL), max_size=2))


@st.composite
def queue_tables(draw) -> dict:
    """A queue table with a discipline and keys the catalogue knows (some another discipline's)."""
    table = {"discipline": draw(DISCIPLINE_NAMES)}
    for key in draw(st.lists(st.sampled_from(QUEUE_KEYS), max_size=4, unique=True)):
        table[key] = draw(QUEUE_VALUES)
    if draw(st.integers(0, 9)) == 0:
        table.pop("discipline")
    return table


@budget(150)
@given(table=queue_tables(), rate=st.one_of(st.none(), st.integers(10_000, 400 * 10**9)))
def test_queue_tables(table, rate):
    q = contract(lambda: parse_queue(table, "links[1].queue"))
    if q is None:
        return
    assert QueueSpec.from_dict(json.loads(json.dumps(q.to_dict(), allow_nan=False))) == q
    config = q.config(rate)
    json.dumps(config, allow_nan=False)
    assert (config["packets"] is None) != (config["bytes"] is None)
    if config["discipline"] == "red":
        assert 1 <= config["min"] < config["max"] <= (q.packets or q.bytes)


@budget(60)
@given(data=st.data(), preset=st.sampled_from(sorted(PRESET_DOCS)))
def test_set_and_sweep(data, preset):
    sets = data.draw(st.lists(set_items(preset), max_size=2))
    sweeps = [f"{name}={','.join(vals)}" for name, vals in
              data.draw(st.lists(st.tuples(st.one_of(st.sampled_from(sorted(PARAMS[preset]) or ["x"]), texts(POOL)),
                                           st.lists(st.one_of(UNIT_TEXT, texts(POOL)), min_size=1, max_size=3)),
                                 max_size=2))]
    axes = contract(lambda: sweep_axes(preset, None, sets, sweeps, offered_ccs=lambda: ["reno", "cubic"]))
    if axes is None:
        return
    points = 1
    for _, vals in axes:
        points *= len(vals)
    assume(points <= 8)  # every point is loaded: keep each example quick
    plan = contract(lambda: plan_sweep(Source(preset=preset), sets, axes))
    if plan is not None:
        assert len(plan.points) == points
        for e in plan.points.values():
            check_experiment(e)


@st.composite
def spec_texts(draw) -> bytes:
    """A spec file: a preset as TOML text, mutated as a tree or as text, or any bytes."""
    preset = draw(st.sampled_from(sorted(PRESET_DOCS)))
    how = draw(st.integers(0, 3))
    if how == 0:
        return toml_text(draw(mutated(PRESET_DOCS[preset], POOL))).encode("utf-8", "surrogatepass")
    if how == 1:
        return draw(mutated_text((PRESETS / f"{preset}.toml").read_text())).encode("utf-8", "surrogatepass")
    if how == 2:
        return draw(st.binary(max_size=200))
    return toml_text(PRESET_DOCS[preset]).encode()


@budget(80)
@given(data=spec_texts(), sets=st.lists(set_items("cs244"), max_size=1))
def test_spec_files(spec_dir, data, sets):
    path = spec_dir / "spec.toml"
    path.write_bytes(data)
    e = contract(lambda: load_experiment(path, sets))
    if e is not None:
        check_experiment(e)


@budget(100)
@given(data=st.data(), seed=st.integers(0, len(TOPOLOGY_DOCS) - 1))
def test_topology_files(spec_dir, data, seed):
    path = spec_dir / "topology.toml"
    doc = TOPOLOGY_DOCS[seed]
    path.write_bytes(data.draw(st.one_of(st.just(toml_text(doc)), mutated(doc, POOL).map(toml_text),
                                         mutated_text(toml_text(doc)))).encode("utf-8", "surrogatepass"))
    t = contract(lambda: load_topology(path))
    if t is not None:
        check_topology(t)


@budget(100)
@given(data=st.data())
def test_nic_plan_files(spec_dir, data):
    path = spec_dir / "nic.toml"
    text = data.draw(st.one_of(mutated(NIC_PLAN, POOL).map(toml_text), mutated_text(toml_text(NIC_PLAN))))
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    plan = contract(lambda: load_plan(path))
    if plan is not None:
        assert plan.repeat >= 1 and plan.duration_s >= 1 and plan.tests
        json.dumps(plan.fixed(), allow_nan=False)


def _flag(draw, name: str, choices: list[str], optional: bool = True) -> list[str]:
    if optional and between(draw, 0, 1):
        return []
    how = between(draw, 0, 3)
    value = draw(UNIT_TEXT) if how == 0 else draw(texts(POOL)) if how == 1 else pick(draw, choices)
    return [f"{name}={value}"]


@st.composite
def nic_sweep_argv(draw) -> list[str]:
    argv = ["nic", "sweep", *_flag(draw, "--iface", ["eth0", "veth-a", "x" * 16], optional=False),
            *_flag(draw, "--server", ["192.0.2.7", "-h"], optional=False), *_flag(draw, "--netns", ["lab"])]
    for flag, choices in (("--txqueuelen", ["1,10,100", "0", "1,1"]), ("--bql-limit-max", ["0,3000", "-1"]),
                          ("--bql-limit-min", ["0"]), ("--offloads", ["on,off", "on"]),
                          ("--offload-features", ["gso,tso", "gso,gso"]), ("--qdisc", ["pfifo_fast,fq_codel"]),
                          ("--repeat", ["5", "0", "1001"]), ("--duration", ["50s", "1.5s"]),
                          ("--udp-rate", ["10gbit", "unlimited"]), ("--tests", ["tcp,udp", "tcp", "icmp"]),
                          ("--ping-interval", ["200ms", "0s", "1ms"])):
        argv += _flag(draw, flag, choices)
    return argv


@budget(80)
@given(argv=nic_sweep_argv())
def test_nic_sweep_flags(argv):
    try:
        args = PARSER.parse_args(argv)
    except SystemExit:  # argparse's own usage error: not ours to read
        assume(False)
    plan = contract(lambda: plan_from_args(args))
    if plan is not None:
        json.dumps(plan.fixed(), allow_nan=False)


SPEC_DIR = "\x00spec\x00"  # where the module's spec_dir fixture goes, in drawn flags


@st.composite
def replay_argv(draw) -> tuple[list[str], str]:
    queue = draw(queue_tables())
    queue_text = ",".join(f"{k}={v}" for k, v in queue.items() if not isinstance(v, dict))
    argv = ["replay", f"--queue={queue_text if between(draw, 0, 3) else draw(texts(POOL))}", "--out=x",
            f"--synthetic={pick(draw, ['constant', 'poisson', 'on-off'])}",
            *_flag(draw, "--rate", ["10mbit", "unlimited"]),
            *_flag(draw, "--trace", [f"{SPEC_DIR}/trace.up", f"{SPEC_DIR}/missing", SPEC_DIR]),
            *_flag(draw, "--delay", ["5ms"]), *_flag(draw, "--loss", ["1%"]), *_flag(draw, "--seed", ["7"]),
            *_flag(draw, "--load", ["1.2", "0", "1e3", "nan"]), *_flag(draw, "--arrival-rate", ["12mbit"]),
            *_flag(draw, "--pps", ["1000"]), *_flag(draw, "--size", ["1500", "64kib", "1" * 5000]),
            *_flag(draw, "--flows", ["4", "0"]), *_flag(draw, "--packets", ["1000"]),
            *_flag(draw, "--duration", ["1s"]), *_flag(draw, "--on", ["5ms"]), *_flag(draw, "--off", ["5ms"])]
    return argv, queue_text


@budget(70)
@given(case=replay_argv())
def test_replay_flags(spec_dir, case):
    argv, queue_text = case
    try:
        args = PARSER.parse_args([a.replace(SPEC_DIR, str(spec_dir)) for a in argv])
    except SystemExit:
        assume(False)
    direction = contract(lambda: build_direction(args))
    if direction is not None:
        flags = contract(lambda: synthetic_flags(args, direction))
        if flags is not None:
            assert all(isinstance(f, str) and "\n" not in f for f in flags)
    contract(lambda: parse_queue_option(queue_text))


# Found by fuzzing: each defect's smallest input, as a plain test ------------------------------

def _cs244(**change) -> dict:
    doc = json.loads(json.dumps(PRESET_DOCS["cs244"]))
    doc.update(change)
    return doc


def _refused(call, field: str) -> str:
    with pytest.raises(SpecError) as caught:
        call()
    one_line(caught.value)
    assert caught.value.field == field, caught.value.field
    return caught.value.message


def test_a_key_that_is_empty_or_holds_a_line_break_is_named_quoted(spec_dir):
    # field_of gave "" (no field) and "a\nb" (an error of two lines).
    _refused(lambda: parse_experiment(_cs244(**{"": 0}), [], base_dir=spec_dir), '""')
    _refused(lambda: parse_experiment(_cs244(**{"a\nb": 0}), [], base_dir=spec_dir), '"a\\nb"')
    _refused(lambda: parse_experiment(PRESET_DOCS["cs244"], ["0\n0=1"], base_dir=spec_dir), '--set "0\\n0"')


def test_a_parameter_bound_that_is_no_number_is_refused(spec_dir):
    # check_param compared 5 < "a": TypeError.
    doc = _cs244(params={"maxq": {"default": 100, "min": "a"}})
    _refused(lambda: parse_experiment(doc, [], base_dir=spec_dir), "params.maxq.min")
    doc = _cs244(params={"bw_net": {"default": "10mbit", "type": "rate", "max": 5}})
    _refused(lambda: parse_experiment(doc, [], base_dir=spec_dir), "params.bw_net.max")


def test_a_dscp_set_in_unicode_digits_is_refused():
    # "²".isdigit() is true, and int("²") a ValueError.
    from bloatlab.specs.experiment import load_preset

    _refused(lambda: load_preset("rrul", ["mark_bk=²"]), "--set mark_bk")


def test_a_host_or_switch_given_as_a_list_is_refused(spec_dir):
    # `host not in topology.hosts` and `enabled not in SWITCHES` hashed a list: TypeError.
    doc = _cs244()
    doc["workloads"][0]["from"] = ["h1"]
    _refused(lambda: parse_experiment(doc, [], base_dir=spec_dir), "workloads[0].from")
    doc = _cs244()
    doc["workloads"][0]["enabled"] = []
    _refused(lambda: parse_experiment(doc, [], base_dir=spec_dir), "workloads[0].enabled")


def test_a_file_name_with_a_nul_is_refused(spec_dir):
    # Path.read_bytes() and resolve() raise ValueError ("embedded null byte").
    _refused(lambda: parse_experiment(_cs244(topology="a\x00b"), [], base_dir=spec_dir),
             json.dumps(str(spec_dir / "a\x00b")))  # the path, quoted: it holds a character no terminal prints
    doc = _cs244()
    del doc["topology"]["links"][0]["rate"]
    doc["topology"]["links"][0]["trace"] = "a\x00b"
    _refused(lambda: parse_experiment(doc, [], base_dir=spec_dir), "topology.links[0].trace")


def test_toml_nested_too_deeply_or_with_a_number_too_long_is_a_one_line_error(spec_dir):
    # tomllib raised RecursionError, and ValueError for an integer of over 4300 digits.
    path = spec_dir / "deep.toml"
    for text in ("a = " + "[" * 2000 + "]" * 2000, "a = " + "1" * 5000):
        path.write_text(text)
        _refused(lambda: load_experiment(path), str(path))


def test_a_probability_or_gain_beyond_a_float_is_refused():
    # math.isfinite(10**400) raises OverflowError.
    _refused(lambda: parse_queue({"discipline": "red", "probability": 10**400}, "queue"), "queue.probability")
    _refused(lambda: parse_queue({"discipline": "pie", "alpha": 10**400}, "queue"), "queue.alpha")


def test_a_nic_plan_with_numbers_too_long_is_refused(spec_dir):
    # int() of 5000 digits raised ValueError; a duration of 10**400 ns, OverflowError.
    path = spec_dir / "nic.toml"
    path.write_text(toml_text({**NIC_PLAN, "port": "1" * 5000}))
    _refused(lambda: load_plan(path), "port")
    path.write_text(toml_text({**NIC_PLAN, "ping_interval": "9" * 400 + "s"}))
    _refused(lambda: load_plan(path), "ping_interval")


def test_a_size_or_duration_beyond_64_bits_is_refused(spec_dir):
    # parse_size_bytes and parse_duration_ns had no bound: a 5000-digit buffer reached run.json,
    # whose JSON encoder refuses ints of over 4300 digits (ValueError), and iperf3's -w.
    doc = _cs244()
    doc["workloads"][0]["buffer"] = "9" * 5000 + "b"
    _refused(lambda: parse_experiment(doc, [], base_dir=spec_dir), "workloads[0].buffer")
    doc = _cs244()
    doc["workloads"][2]["every"] = "1" * 30 + "s"
    _refused(lambda: parse_experiment(doc, [], base_dir=spec_dir), "workloads[2].every")


def test_a_choice_with_a_line_break_is_named_quoted(spec_dir):
    # The list of choices in the error was joined as written: an error of two lines.
    doc = _cs244(params={"cc": {"default": "reno", "choices": ["\nreno", "cubic"]}})
    _refused(lambda: parse_experiment(doc, [], base_dir=spec_dir), "params.cc.default")


def test_replay_flags_with_numbers_int_does_not_take_are_refused():
    # int() of 5000 digits raised ValueError in the queue's settings, --packets and --size.
    _refused(lambda: parse_queue_option("discipline=droptail,packets=" + "1" * 5000), "--queue.packets")
    args = PARSER.parse_args(["replay", "--queue=discipline=droptail", "--rate=10mbit", "--out=x", "--synthetic=poisson",
                              "--pps=1000", "--packets=" + "1" * 5000])
    _refused(lambda: synthetic_flags(args, build_direction(args)), "--packets")

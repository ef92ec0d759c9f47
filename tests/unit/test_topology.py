"""Topology files: the examples load, defaults and per-direction overrides resolve to exact
values, and every validation rule rejects its bad input with a one-line error on the right field."""

import json
import os
from pathlib import Path

import pytest

from bloatlab.errors import SpecError
from bloatlab.specs.model import DirectionSpec, QueueSpec, Topology
from bloatlab.specs.topology import load_topology, parse_topology

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# h1 - s0 - h2 with the bottleneck as links[1]; tests append keys to it.
DUMBBELL = """
[hosts.h1]
[hosts.h2]
[switches.s0]
[[links]]
ends = ["h1", "s0"]
[[links]]
ends = ["s0", "h2"]
"""


def load(tmp_path: Path, text: str) -> Topology:
    path = tmp_path / "topo.toml"
    path.write_text(text)
    return load_topology(path)


def bottleneck(tmp_path: Path, extra: str):
    """The dumbbell's links[1] with `extra` TOML lines added to it."""
    return load(tmp_path, DUMBBELL + extra).links[1]


def rejects(tmp_path: Path, text: str, field: str, *fragments: str) -> SpecError:
    with pytest.raises(SpecError) as caught:
        load(tmp_path, text)
    error = caught.value
    assert error.field == field, str(error)
    assert "\n" not in str(error)
    for fragment in fragments:
        assert fragment in error.message, str(error)
    return error


def write_trace(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ---------------------------------------------------------------- examples and defaults


def test_cs244_example():
    topo = load_topology(EXAMPLES / "cs244.toml")
    assert list(topo.hosts) == ["h1", "h2"]
    assert list(topo.switches) == ["s0"]
    assert topo.address("h1") == "10.0.0.1" and topo.address("h2") == "10.0.0.2"
    access, neck = topo.links
    assert access.name == "h1-s0" and access.ends == ("h1", "s0")
    assert access.forward == access.reverse == DirectionSpec(rate_bps=1_000_000_000, delay_ns=5_000_000)
    assert neck.name == "s0-h2" and neck.ends == ("s0", "h2")
    expected = DirectionSpec(rate_bps=10_000_000, delay_ns=5_000_000, queue=QueueSpec("droptail", 100, None))
    assert neck.forward == neck.reverse == expected
    assert topo.seed == 1


def test_two_hosts_example():
    topo = load_topology(EXAMPLES / "two-hosts.toml")
    assert list(topo.hosts) == ["h1", "h2"] and topo.switches == {}
    (link,) = topo.links
    assert link.name == "h1-h2"
    assert link.forward == link.reverse == DirectionSpec(rate_bps=100_000_000, delay_ns=10_000_000)


def test_defaults(tmp_path):
    topo = load(tmp_path, DUMBBELL)
    link = topo.links[1]
    assert link.name == "s0-h2" and link.backend == "auto"
    assert link.forward == link.reverse == DirectionSpec()
    assert link.forward.unlimited
    assert link.forward.queue == QueueSpec("droptail", 1000, None)
    assert topo.seed == 1


def test_hosts_and_switches_keep_file_order(tmp_path):
    text = """
[hosts.zed]
[hosts.alpha]
[switches.s9]
[switches.s1]
[[links]]
ends = ["zed", "s9"]
[[links]]
ends = ["alpha", "s1"]
"""
    topo = load(tmp_path, text)
    assert list(topo.hosts) == ["zed", "alpha"] and list(topo.switches) == ["s9", "s1"]
    assert topo.address("zed") == "10.0.0.1" and topo.address("alpha") == "10.0.0.2"


def test_all_link_parameters(tmp_path):
    link = bottleneck(
        tmp_path,
        'name = "neck"\nrate = "1.5mbit"\ndelay = "2.5ms"\njitter = "200us"\nloss = "0.5%"\n'
        'backend = "userspace"\nqueue = { discipline = "drophead", bytes = "150kb" }\n',
    )
    assert link.name == "neck" and link.backend == "userspace"
    expected = DirectionSpec(
        rate_bps=1_500_000,
        delay_ns=2_500_000,
        jitter_ns=200_000,
        loss=0.005,
        queue=QueueSpec("drophead", None, 150_000),
    )
    assert link.forward == link.reverse == expected


def test_seed(tmp_path):
    assert load(tmp_path, "seed = 42\n" + DUMBBELL).seed == 42
    assert load(tmp_path, "seed = 0\n" + DUMBBELL).seed == 0


# ---------------------------------------------------------------- per-direction overrides


def test_overrides_apply_to_one_direction(tmp_path):
    link = bottleneck(
        tmp_path,
        'rate = "10mbit"\ndelay = "5ms"\nloss = "1%"\n'
        'forward = { rate = "20mbit" }\nreverse = { delay = "10ms", jitter = "1ms" }\n',
    )
    assert link.forward == DirectionSpec(rate_bps=20_000_000, delay_ns=5_000_000, loss=0.01)
    assert link.reverse == DirectionSpec(
        rate_bps=10_000_000, delay_ns=10_000_000, jitter_ns=1_000_000, loss=0.01
    )


def test_queue_override_replaces_the_whole_queue(tmp_path):
    link = bottleneck(
        tmp_path,
        'queue = { discipline = "drophead", packets = 100 }\nreverse = { queue = { bytes = 3000 } }\n',
    )
    assert link.forward.queue == QueueSpec("drophead", 100, None)
    assert link.reverse.queue == QueueSpec("droptail", None, 3000)  # discipline not inherited


def test_overrides_as_subtables(tmp_path):
    link = bottleneck(tmp_path, 'rate = "10mbit"\n[links.forward]\nrate = "unlimited"\nloss = "2%"\n')
    assert link.forward == DirectionSpec(rate_bps=None, loss=0.02)
    assert link.reverse == DirectionSpec(rate_bps=10_000_000)


def test_trace_override_replaces_the_link_rate(tmp_path):
    trace = write_trace(tmp_path, "up.trace", "1\n2\n")
    link = bottleneck(tmp_path, 'rate = "10mbit"\nforward = { trace = "up.trace" }\n')
    assert link.forward == DirectionSpec(trace=trace.resolve())
    assert link.reverse == DirectionSpec(rate_bps=10_000_000)


def test_rate_override_replaces_the_link_trace(tmp_path):
    trace = write_trace(tmp_path, "t", "5\n")
    link = bottleneck(tmp_path, 'trace = "t"\nreverse = { rate = "1mbit" }\n')
    assert link.forward.trace == trace.resolve() and link.forward.rate_bps is None
    assert link.reverse.trace is None and link.reverse.rate_bps == 1_000_000


def test_empty_override_tables_change_nothing(tmp_path):
    link = bottleneck(tmp_path, 'rate = "10mbit"\nforward = {}\nreverse = {}\n')
    assert link.forward == link.reverse == DirectionSpec(rate_bps=10_000_000)


# ---------------------------------------------------------------- reading the file


def test_missing_file(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(SpecError) as caught:
        load_topology(path)
    assert caught.value.field == str(path) and "no such file" in caught.value.message


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(SpecError) as caught:
        load_topology(tmp_path)
    assert caught.value.field == str(tmp_path) and "directory" in caught.value.message


def test_unreadable_path(tmp_path):
    (tmp_path / "file").write_text("")
    path = tmp_path / "file" / "topo.toml"  # a file used as a directory: ENOTDIR
    with pytest.raises(SpecError) as caught:
        load_topology(path)
    assert caught.value.field == str(path) and "cannot read" in caught.value.message


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file(tmp_path):
    path = tmp_path / "topo.toml"
    path.write_text(DUMBBELL)
    path.chmod(0)
    with pytest.raises(SpecError) as caught:
        load_topology(path)
    assert "cannot read" in caught.value.message and "ermission" in caught.value.message


def test_toml_syntax_error_names_file_and_line(tmp_path):
    text = '[hosts.h1]\n[[links]]\nends = ["h1", "s0"]\nrate = 10mbit\n'
    error = rejects(tmp_path, text, str(tmp_path / "topo.toml"), "line 4, column")
    assert "invalid TOML" in error.message


def test_duplicate_key_names_line(tmp_path):
    text = '[hosts.h1]\n[hosts.h2]\n[[links]]\nends = ["h1", "h2"]\nrate = "1mbit"\nrate = "2mbit"\n'
    rejects(tmp_path, text, str(tmp_path / "topo.toml"), "line 6", "only once")


def test_duplicate_table_names_line(tmp_path):
    rejects(
        tmp_path, "[hosts.h1]\n[hosts.h2]\n[hosts.h1]\n", str(tmp_path / "topo.toml"), "line 3", "only once"
    )


def test_not_utf8(tmp_path):
    path = tmp_path / "topo.toml"
    path.write_bytes(b"[hosts.h1]\n# caf\xe9\n")
    with pytest.raises(SpecError) as caught:
        load_topology(path)
    assert "line 2" in caught.value.message and "UTF-8" in caught.value.message


# ---------------------------------------------------------------- where prefix


def test_where_prefixes_fields():
    data = {
        "hosts": {"h1": {}, "h2": {}},
        "links": [{"ends": ["h1", "h2"], "rate": "10 mbps"}],
    }
    with pytest.raises(SpecError) as caught:
        parse_topology(data, where="topology")
    assert caught.value.field == "topology.links[0].rate"
    assert str(caught.value).startswith('topology.links[0].rate: "10 mbps" is not a rate;')


def test_where_prefixes_unknown_top_level_keys():
    with pytest.raises(SpecError) as caught:
        parse_topology({"hosts": {"h1": {}}, "lnks": []}, where="topology")
    assert caught.value.field == "topology.lnks"


def test_parse_topology_accepts_a_dict():
    topo = parse_topology({"hosts": {"a": {}, "b": {}}, "links": [{"ends": ["a", "b"], "delay": "1ms"}]})
    assert topo.links[0].forward.delay_ns == 1_000_000


# ---------------------------------------------------------------- unknown keys


@pytest.mark.parametrize(
    ("text", "field", "fragments"),
    [
        ("sed = 1\n" + DUMBBELL, "sed", ('"sed"', 'did you mean "seed"', "hosts, switches, links")),
        ("[hosts.h1]\nip = 1\n", "hosts.h1.ip", ('"ip"', "in a host", "allowed keys: cc")),
        ("[hosts.h1]\nc = 'reno'\n", "hosts.h1.c", ('did you mean "cc"',)),
        (DUMBBELL + "[switches.s0.x]\n", "switches.s0.x", ("in a switch", "allowed keys: namespace")),
        (DUMBBELL + 'rte = "1mbit"\n', "links[1].rte", ('did you mean "rate"', "ends, rate, trace")),
        (
            DUMBBELL + "queue = { packet = 100 }\n",
            "links[1].queue.packet",
            ('"packets"', "discipline, packets, bytes"),
        ),
        (
            DUMBBELL + "forward = { backend = 'kernel' }\n",
            "links[1].forward.backend",
            ("rate, trace, delay",),
        ),
        (DUMBBELL + "reverse = { name = 'x' }\n", "links[1].reverse.name", ("allowed keys",)),
    ],
)
def test_unknown_keys(tmp_path, text, field, fragments):
    rejects(tmp_path, text, field, "unknown key", *fragments)


# ---------------------------------------------------------------- nodes


@pytest.mark.parametrize("name", ["H1", "1h", "h-1", "host_number1", "h.x", "é"])
def test_bad_host_names(tmp_path, name):
    rejects(tmp_path, f'[hosts."{name}"]\n', f"hosts.{name}", "interface names", "15 characters")


def test_bad_host_name_suggests_lowercase(tmp_path):
    rejects(tmp_path, "[hosts.H1]\n", "hosts.H1", '"h1"')


def test_bad_switch_name(tmp_path):
    rejects(tmp_path, "[hosts.h1]\n[switches.S0]\n", "switches.S0", "switch name")


def test_longest_node_name(tmp_path):
    topo = load(tmp_path, '[hosts.a123456789]\n[hosts.b]\n[[links]]\nends = ["a123456789", "b"]\n')
    assert list(topo.hosts) == ["a123456789", "b"]


def test_name_used_by_host_and_switch(tmp_path):
    rejects(tmp_path, "[hosts.h1]\n[switches.h1]\n", "switches.h1", "already a host")


def test_needs_a_host(tmp_path):
    rejects(tmp_path, "[switches.s0]\n", "hosts", "at least one")
    rejects(tmp_path, "", "hosts", "at least one")


def test_hosts_must_be_tables(tmp_path):
    rejects(tmp_path, 'hosts = ["h1", "h2"]\n', "hosts", "[hosts.NAME]")
    rejects(tmp_path, "[hosts]\nh1 = 1\n", "hosts.h1", "[hosts.h1]")


# ---------------------------------------------------------------- links: ends, names, counts


def test_ends_missing(tmp_path):
    rejects(
        tmp_path, '[hosts.h1]\n[[links]]\nrate = "1mbit"\n', "links[0].ends", "missing", 'ends = ["h1", "s0"]'
    )


@pytest.mark.parametrize("ends", ['["h1"]', '["h1", "h2", "s0"]', '"h1-h2"', "[]"])
def test_ends_not_two_names(tmp_path, ends):
    rejects(
        tmp_path,
        f"[hosts.h1]\n[hosts.h2]\n[switches.s0]\n[[links]]\nends = {ends}\n",
        "links[0].ends",
        "two node names",
    )


def test_end_unknown_lists_known_nodes(tmp_path):
    text = DUMBBELL.replace('ends = ["s0", "h2"]', 'ends = ["s0", "h3"]')
    rejects(tmp_path, text, "links[1].ends[1]", 'unknown node "h3"', "h1, h2, s0")


def test_end_not_a_string(tmp_path):
    rejects(tmp_path, '[hosts.h1]\n[[links]]\nends = ["h1", 2]\n', "links[0].ends[1]", "unknown node 2")


def test_ends_identical(tmp_path):
    rejects(
        tmp_path,
        '[hosts.h1]\n[switches.s0]\n[[links]]\nends = ["s0", "s0"]\n',
        "links[0].ends",
        "two different",
    )


@pytest.mark.parametrize("name", ["Neck", "1neck", "a" * 32, "neck.1", "", 5])
def test_bad_link_names(tmp_path, name):
    rejects(tmp_path, DUMBBELL + f"name = {json.dumps(name)}\n", "links[1].name", "not a valid link name")


def test_good_link_name(tmp_path):
    assert bottleneck(tmp_path, 'name = "' + "a_-" * 10 + 'b"\n').name == "a_-" * 10 + "b"


def test_duplicate_explicit_link_names(tmp_path):
    text = DUMBBELL.replace('ends = ["h1", "s0"]', 'ends = ["h1", "s0"]\nname = "x"') + 'name = "x"\n'
    rejects(tmp_path, text, "links[1].name", '"x" is already the name of links[0]')


def test_duplicate_default_link_names(tmp_path):
    text = "[hosts.h1]\n[switches.s0]\n[switches.s1]\n"
    text += '[[links]]\nends = ["h1", "s0"]\n[[links]]\nends = ["s0", "s1"]\n[[links]]\nends = ["s0", "s1"]\n'
    rejects(tmp_path, text, "links[2].name", "default name", "links[1]")


def test_host_with_two_links(tmp_path):
    text = DUMBBELL + '[[links]]\nends = ["h1", "s0"]\nname = "second"\n'
    rejects(tmp_path, text, "hosts.h1", "2 links (links[0], links[2])", "through a switch")


def test_host_without_link(tmp_path):
    rejects(tmp_path, DUMBBELL + "[hosts.h3]\n", "hosts.h3", "no link")


def test_switch_without_link_is_fine(tmp_path):
    topo = load(tmp_path, DUMBBELL + "[switches.spare]\n")
    assert list(topo.switches) == ["s0", "spare"]


def test_a_switch_may_keep_a_namespace_of_its_own(tmp_path):
    topo = load(tmp_path, DUMBBELL.replace("[switches.s0]", "[switches.s0]\nnamespace = true") + "[switches.s1]\n")
    assert topo.switches["s0"].namespace and not topo.switches["s1"].namespace
    assert Topology.from_dict(topo.to_dict()) == topo
    rejects(tmp_path, DUMBBELL.replace("[switches.s0]", "[switches.s0]\nnamespace = 1"), "switches.s0.namespace",
            "not true or false", "namespace = true")
    rejects(tmp_path, "[hosts.h1]\nnamespace = true\n", "hosts.h1.namespace", "allowed keys: cc")


def test_links_must_be_an_array_of_tables(tmp_path):
    rejects(tmp_path, '[hosts.h1]\n[links]\nends = ["h1", "s0"]\n', "links", "[[links]]")
    rejects(tmp_path, "links = [1]\n[hosts.h1]\n", "links[0]", "[[links]]")


# ---------------------------------------------------------------- link parameters


def test_bad_rate_names_its_field(tmp_path):
    rejects(tmp_path, DUMBBELL + 'rate = "10Mbps"\n', "links[1].rate", "bytes per second", '"10mbit"')
    rejects(tmp_path, DUMBBELL + "forward = { rate = 10 }\n", "links[1].forward.rate", "no unit")


def test_rate_and_trace_exclusive(tmp_path):
    write_trace(tmp_path, "t", "1\n")
    rejects(tmp_path, DUMBBELL + 'rate = "1mbit"\ntrace = "t"\n', "links[1].trace", "either rate or trace")
    rejects(
        tmp_path,
        DUMBBELL + 'reverse = { rate = "1mbit", trace = "t" }\n',
        "links[1].reverse.trace",
        "not both",
    )


def test_delay_limit(tmp_path):
    assert bottleneck(tmp_path, 'delay = "10s"\n').forward.delay_ns == 10_000_000_000
    rejects(tmp_path, DUMBBELL + 'delay = "10.001s"\n', "links[1].delay", '"10s"')
    rejects(
        tmp_path, DUMBBELL + 'reverse = { delay = "11s" }\n', "links[1].reverse.delay", "longer than 10 s"
    )
    rejects(tmp_path, DUMBBELL + "delay = 5\n", "links[1].delay", "no unit")


def test_jitter_equal_to_delay_is_fine(tmp_path):
    link = bottleneck(tmp_path, 'delay = "1ms"\njitter = "1ms"\n')
    assert link.forward.jitter_ns == link.forward.delay_ns == 1_000_000


def test_jitter_larger_than_delay(tmp_path):
    rejects(
        tmp_path,
        DUMBBELL + 'delay = "1ms"\njitter = "2ms"\n',
        "links[1].jitter",
        "2 ms",
        "1 ms",
        "jitter <= delay",
    )
    rejects(tmp_path, DUMBBELL + 'jitter = "1ms"\n', "links[1].jitter", "0 ms")


def test_jitter_against_overridden_delay_blames_the_override(tmp_path):
    text = DUMBBELL + 'delay = "5ms"\njitter = "2ms"\nreverse = { delay = "1ms" }\n'
    rejects(tmp_path, text, "links[1].reverse.delay", "reverse direction")
    text = DUMBBELL + 'delay = "5ms"\nforward = { jitter = "6ms" }\n'
    rejects(tmp_path, text, "links[1].forward.jitter", "forward direction")


def test_loss(tmp_path):
    assert bottleneck(tmp_path, "loss = 0\n").forward.loss == 0.0
    rejects(tmp_path, DUMBBELL + 'loss = "100%"\n', "links[1].loss", 'below "100%"')
    rejects(tmp_path, DUMBBELL + "loss = 0.01\n", "links[1].loss", '"1%"')
    rejects(tmp_path, DUMBBELL + 'forward = { loss = "-1%" }\n', "links[1].forward.loss", "negative")


def test_backend(tmp_path):
    assert bottleneck(tmp_path, 'backend = "kernel"\n').backend == "kernel"
    rejects(tmp_path, DUMBBELL + 'backend = "tc"\n', "links[1].backend", "auto, userspace, kernel")


def test_queue_at(tmp_path):
    assert bottleneck(tmp_path, "").queue_at == "link"
    assert bottleneck(tmp_path, 'backend = "kernel"\nqueue_at = "sender"\n').queue_at == "sender"
    rejects(tmp_path, DUMBBELL + 'queue_at = "nic"\n', "links[1].queue_at", '"link"')
    rejects(tmp_path, DUMBBELL + 'backend = "userspace"\nqueue_at = "sender"\n', "links[1].queue_at",
            'use backend = "kernel"')


@pytest.mark.parametrize("seed", ["-1", '"1"', "true", "1.5"])
def test_bad_seed(tmp_path, seed):
    rejects(tmp_path, f"seed = {seed}\n" + DUMBBELL, "seed", ">= 0")


def test_overrides_must_be_tables(tmp_path):
    rejects(tmp_path, DUMBBELL + 'forward = "fast"\n', "links[1].forward", "table of overrides")


# ---------------------------------------------------------------- queues


def test_queue_limits_accepted(tmp_path):
    assert bottleneck(tmp_path, "queue = { packets = 1 }\n").forward.queue == QueueSpec("droptail", 1, None)
    assert bottleneck(tmp_path, "queue = { packets = 1000000 }\n").forward.queue.packets == 1_000_000
    assert bottleneck(tmp_path, "queue = { bytes = 1514 }\n").forward.queue == QueueSpec(
        "droptail", None, 1514
    )
    assert bottleneck(tmp_path, 'queue = { bytes = "1gib" }\n').forward.queue.bytes == 2**30
    assert bottleneck(tmp_path, 'queue = { discipline = "drophead" }\n').forward.queue == QueueSpec(
        "drophead", 1000, None
    )


@pytest.mark.parametrize(
    ("queue", "field", "fragment"),
    [
        ("{ packets = 100, bytes = 150000 }", "links[1].queue.bytes", "either packets or bytes"),
        ("{ packets = 0 }", "links[1].queue.packets", "from 1 to 1000000"),
        ("{ packets = 1000001 }", "links[1].queue.packets", "from 1 to 1000000"),
        ('{ packets = "100" }', "links[1].queue.packets", "whole number of packets"),
        ("{ packets = 1.5 }", "links[1].queue.packets", "whole number of packets"),
        ("{ bytes = 1513 }", "links[1].queue.bytes", "1514"),
        ('{ bytes = "1.5kb" }', "links[1].queue.bytes", "full 1514-byte frame"),
        ("{ bytes = 1073741825 }", "links[1].queue.bytes", "1 GiB"),
        ("{ bytes = 0 }", "links[1].queue.bytes", "positive"),
        ('{ bytes = "150 kb" }', "links[1].queue.bytes", '"150kb"'),
        ('{ discipline = "blue" }', "links[1].queue.discipline", "droptail, drophead, codel, fq_codel, red, pie"),
        ("100", "links[1].queue", "table"),
    ],
)
def test_bad_queues(tmp_path, queue, field, fragment):
    rejects(tmp_path, DUMBBELL + f"queue = {queue}\n", field, fragment)


def test_bad_queue_in_override(tmp_path):
    rejects(
        tmp_path,
        DUMBBELL + "forward = { queue = { packets = 0 } }\n",
        "links[1].forward.queue.packets",
        "from 1",
    )


# ---------------------------------------------------------------- traces


def test_trace_resolves_relative_to_the_topology_file(tmp_path, monkeypatch):
    trace = write_trace(tmp_path, "traces/att.up", "0\n0\n3\n3\n10\n")  # repeats are fine
    monkeypatch.chdir("/")  # the working directory must not matter
    link = bottleneck(tmp_path, 'trace = "traces/att.up"\n')
    assert link.forward.trace == link.reverse.trace == trace.resolve()
    assert link.forward.trace.is_absolute() and link.forward.rate_bps is None and not link.forward.unlimited


def test_trace_absolute_path(tmp_path):
    trace = write_trace(tmp_path, "elsewhere/t", "7")  # no final newline
    assert bottleneck(tmp_path, f'trace = "{trace}"\n').forward.trace == trace


def test_trace_in_parse_topology_uses_base_dir(tmp_path):
    trace = write_trace(tmp_path, "t", "1\n")
    data = {"hosts": {"a": {}, "b": {}}, "links": [{"ends": ["a", "b"], "trace": "t"}]}
    assert parse_topology(data, base_dir=tmp_path).links[0].forward.trace == trace.resolve()


def test_trace_missing(tmp_path):
    rejects(
        tmp_path, DUMBBELL + 'trace = "nope.up"\n', "links[1].trace", "not found", str(tmp_path / "nope.up")
    )


def test_trace_is_a_directory(tmp_path):
    (tmp_path / "d").mkdir()
    rejects(tmp_path, DUMBBELL + 'trace = "d"\n', "links[1].trace", "directory")


def test_trace_unreadable(tmp_path):
    write_trace(tmp_path, "f", "1\n")
    rejects(tmp_path, DUMBBELL + 'trace = "f/x"\n', "links[1].trace", "cannot read")


@pytest.mark.parametrize("value", ['""', "5", "[]"])
def test_trace_not_a_path(tmp_path, value):
    rejects(tmp_path, DUMBBELL + f"trace = {value}\n", "links[1].trace", "not a trace path")


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        ("", ("is empty",)),
        ("1\n2\nabc\n", ("line 3", '"abc" is not a timestamp')),
        ("1\n1.5\n", ("line 2", '"1.5"')),
        ("1\n -2\n", ("line 2",)),
        ("1\n-2\n", ("line 2", "negative")),
        ("1\n\n2\n", ("line 2", "is empty")),
        ("1\n2 \n", ("line 2",)),
        ("5\n7\n6\n", ("line 3", "6 is less than the previous 7")),
        ("0\n0\n", ("last timestamp is 0",)),
    ],
)
def test_bad_traces(tmp_path, content, fragments):
    write_trace(tmp_path, "t.up", content)
    rejects(tmp_path, DUMBBELL + 'forward = { trace = "t.up" }\n', "links[1].forward.trace", *fragments)


# ---------------------------------------------------------------- resolved form


def test_to_dict(tmp_path):
    trace = write_trace(tmp_path, "t", "1\n")
    topo = load(
        tmp_path,
        "seed = 7\n" + DUMBBELL + 'rate = "10mbit"\ndelay = "5ms"\nforward = { trace = "t", loss = "1%" }\n'
        'reverse = { queue = { bytes = "150kb" } }\n',
    )
    resolved = json.loads(json.dumps(topo.to_dict()))  # JSON-ready
    assert resolved["seed"] == 7
    assert resolved["cc"] is None
    assert resolved["hosts"] == [{"name": "h1", "address": "10.0.0.1", "cc": None},
                                 {"name": "h2", "address": "10.0.0.2", "cc": None}]
    assert resolved["switches"] == [{"name": "s0", "namespace": False}]
    neck = resolved["links"][1]
    assert neck["name"] == "s0-h2" and neck["ends"] == ["s0", "h2"] and neck["backend"] == "auto"
    assert neck["forward"] == {
        "direction": "s0->h2",
        "rate_bps": None,
        "trace_path": str(trace.resolve()),
        "delay_ns": 5_000_000,
        "jitter_ns": 0,
        "loss": 0.01,
        "queue": {"discipline": "droptail", "packets": 1000, "bytes": None},
        "seed": topo.direction_seed(1, "forward"),
    }
    assert neck["reverse"]["direction"] == "h2->s0"
    assert neck["reverse"]["rate_bps"] == 10_000_000 and neck["reverse"]["trace_path"] is None
    assert neck["reverse"]["queue"] == {"discipline": "droptail", "packets": None, "bytes": 150_000}
    assert neck["reverse"]["seed"] == topo.direction_seed(1, "reverse") != neck["forward"]["seed"]


def test_congestion_control_per_host_and_per_network(tmp_path):
    topo = load(tmp_path, 'cc = "reno"\n' + DUMBBELL.replace("[hosts.h2]\n", '[hosts.h2]\ncc = "bbr"\n'))
    assert (topo.cc, topo.hosts["h1"].cc, topo.hosts["h2"].cc) == ("reno", None, "bbr")
    assert (topo.host_cc("h1"), topo.host_cc("h2")) == ("reno", "bbr")  # a host's own wins
    again = Topology.from_dict(json.loads(json.dumps(topo.to_dict())))
    assert (again.cc, again.host_cc("h1"), again.host_cc("h2")) == ("reno", "reno", "bbr")
    assert load(tmp_path, DUMBBELL).host_cc("h1") is None  # the machine's default


@pytest.mark.parametrize(("text", "field"), [('cc = "Reno"\n', "cc"), ("cc = 1\n", "cc"),
                                             ("", "hosts.h2.cc")])
def test_congestion_control_names_are_checked(tmp_path, text, field):
    body = text + (DUMBBELL.replace("[hosts.h2]\n", '[hosts.h2]\ncc = "tcp-x"\n') if not text else DUMBBELL)
    with pytest.raises(SpecError) as caught:
        load(tmp_path, body)
    assert caught.value.field == field and "is not a congestion control name" in caught.value.message

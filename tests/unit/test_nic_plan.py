"""A nic sweep's plan from flags and from a file: values, axes, and errors that name the field."""

import argparse

import pytest

from bloatlab.cli.main import build_parser
from bloatlab.errors import BloatlabError
from bloatlab.nic.plan import load_plan, plan_from_args


def args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["nic", "sweep", *argv])


def plan(*argv: str):
    return plan_from_args(args("--iface", "eth0", "--server", "192.0.2.7", *argv))


def test_flags_make_axes_of_several_values_and_fix_single_ones():
    p = plan("--txqueuelen", "1,10,100", "--offloads", "on,off", "--qdisc", "pfifo", "--duration", "2s",
             "--udp-rate", "100mbit", "--repeat", "3")
    # Nesting order is fixed (qdisc, offloads, bql, txqueuelen): the table reads txqueuelen fastest.
    assert p.axes == [("offloads", ("on", "off")), ("txqueuelen", (1, 10, 100))]
    assert p.fixed_knobs == {"qdisc": "pfifo"}
    assert (p.duration_s, p.udp_rate_bps, p.repeat, p.port) == (2, 100_000_000, 3, 5201)
    assert p.fixed() == {"iface": "eth0", "server": "192.0.2.7", "port": "5201", "duration": "2s",
                         "tests": "tcp,udp", "ping_interval": "0.2s", "udp_rate": "100mbit",
                         "offload_features": "gso,tso,gro,sg", "qdisc": "pfifo"}


def test_the_defaults_are_the_seeds_five_runs_of_fifty_seconds():
    p = plan()
    assert (p.repeat, p.duration_s, p.udp_rate_bps, p.axes) == (5, 50, 10 * 10**9, [])


@pytest.mark.parametrize("argv, field, says", [
    (["--txqueuelen", "1,-1"], "--txqueuelen", "-1 is out of range"),
    (["--txqueuelen=-1"], "--txqueuelen", "from 1 to 1000000"),
    (["--txqueuelen", "1000001"], "--txqueuelen", "out of range"),
    (["--txqueuelen", "10,,100"], "--txqueuelen", "empty value"),
    (["--txqueuelen", "ten"], "--txqueuelen", "not a txqueuelen"),
    (["--txqueuelen", "10,10"], "--txqueuelen", "given twice"),
    (["--bql-limit-max", "1879048193"], "--bql-limit-max", "out of range"),
    (["--offloads", "yes"], "--offloads", "write on or off"),
    (["--qdisc", "htb"], "--qdisc", "not a root qdisc bloatlab sets"),
    (["--duration", "1.5s"], "--duration", "whole seconds"),
    (["--duration", "0s"], "--duration", "longer than zero"),
    (["--udp-rate", "10mbps"], "--udp-rate", "bytes per second"),
    (["--tests", "icmp"], "--tests", "tcp, udp or tcp,udp"),
    (["--ping-interval", "1ms"], "--ping-interval", "too short"),
    (["--repeat", "0"], "--repeat", "out of range"),
    (["--port", "70000"], "--port", "out of range"),
])
def test_bad_flags_name_themselves(argv, field, says):
    with pytest.raises(BloatlabError, match=says) as e:
        plan(*argv)
    assert e.value.field == field and "\n" not in str(e.value)


def test_an_interface_name_the_kernel_could_not_have_is_refused():
    with pytest.raises(BloatlabError) as e:
        plan_from_args(args("--iface", "a/b", "--server", "h"))
    assert e.value.field == "--iface"


def test_a_spec_file_has_the_same_fields(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text('iface = "eth0"\nserver = "192.0.2.7"\nnetns = "lab"\nrepeat = 2\nduration = "3s"\n'
                    'udp_rate = "1gbit"\noffload_features = ["gso", "gro"]\n'
                    '[axes]\ntxqueuelen = [1, 10]\noffloads = ["on", "off"]\nbql_limit_max = 0\n')
    p = load_plan(spec)
    assert (p.iface.name, p.iface.netns, p.server, p.repeat, p.duration_s) == ("eth0", "lab", "192.0.2.7", 2, 3)
    assert p.axes == [("txqueuelen", (1, 10)), ("offloads", ("on", "off"))]  # the file's order
    assert p.fixed_knobs == {"bql_limit_max": 0} and p.offload_features == ("gso", "gro")
    assert p.source == str(spec)


@pytest.mark.parametrize("text, field, says", [
    ('server = "h"\n', "iface", "missing"),
    ('iface = "eth0"\n', "server", "missing"),
    ('iface = "eth0"\nserver = "h"\nrepat = 2\n', "repat", 'did you mean "repeat"'),
    ('iface = "eth0"\nserver = "h"\n[axes]\ntxqueuelen = [1, -1]\n', "axes.txqueuelen[1]", "out of range"),
    ('iface = "eth0"\nserver = "h"\n[axes]\ntxq = [1]\n', "axes.txq", "unknown key"),
    ('iface = "eth0"\nserver = "h"\n[axes]\ntxqueuelen = []\n', "axes.txqueuelen", "empty"),
    ('iface = "eth0"\nserver = "h"\nduration = 50\n', "duration", "no unit"),
])
def test_spec_file_errors_name_the_field(tmp_path, text, field, says):
    spec = tmp_path / "s.toml"
    spec.write_text(text)
    with pytest.raises(BloatlabError, match=says) as e:
        load_plan(spec)
    assert e.value.field == field

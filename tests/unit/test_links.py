"""Backend choice and the kernel backend's tc commands: pure functions, exact expectations."""

import pytest

from bloatlab.errors import MachineError, SpecError
from bloatlab.specs.disciplines import MTU_FRAME_BYTES
from bloatlab.specs.model import DirectionSpec, LinkSpec, QueueSpec
from bloatlab.testbed.links.kernel import htb_burst_bytes, kernel_needs, kernel_tc_commands
from bloatlab.specs.model import HostSpec, SwitchSpec, Topology
from bloatlab.testbed.network import choose_backend, inner_switches

ALL = {"htb": True, "netem": True, "pfifo": True, "bfifo": True, "pfifo_head_drop": True}
NO_NETEM = {**ALL, "netem": False}


def link(backend="auto", queue_at="link", **direction) -> LinkSpec:
    d = DirectionSpec(**direction)
    return LinkSpec(name="h1-h2", ends=("h1", "h2"), forward=d, reverse=d, backend=backend, queue_at=queue_at)


@pytest.mark.parametrize("direction, qdiscs", [
    ({"rate_bps": 10_000_000}, ["htb", "pfifo"]),
    ({}, ["pfifo"]),
    ({"queue": QueueSpec(packets=None, bytes=150_000)}, ["bfifo"]),
    ({"queue": QueueSpec(discipline="drophead", packets=50)}, ["pfifo_head_drop"]),
    ({"rate_bps": 10_000_000, "delay_ns": 5_000_000, "loss": 0.01}, ["htb", "netem", "netem"]),
])
def test_kernel_needs_names_each_qdisc(direction, qdiscs):
    assert [n.qdisc for n in kernel_needs(DirectionSpec(**direction), "forward")] == qdiscs


def test_auto_takes_the_kernel_when_it_serves_everything():
    assert choose_backend(link(rate_bps=10_000_000), ALL) == "kernel"
    assert choose_backend(link(rate_bps=10_000_000, delay_ns=5_000_000), ALL) == "kernel"


def test_auto_falls_back_to_userspace_for_what_the_kernel_lacks():
    assert choose_backend(link(delay_ns=5_000_000), NO_NETEM) == "userspace"
    assert choose_backend(link(rate_bps=10_000_000), {**ALL, "htb": False}) == "userspace"


@pytest.mark.parametrize("direction", [
    {"trace": "cell.trace"},  # no qdisc replays a trace
    {"delay_ns": 5_000_000, "jitter_ns": 1_000_000},  # netem would reorder
    {"delay_ns": 5_000_000, "queue": QueueSpec(packets=None, bytes=100_000)},  # netem counts packets
    {"delay_ns": 5_000_000, "queue": QueueSpec(discipline="drophead", packets=10)},
    {"queue": QueueSpec(discipline="drophead", packets=None, bytes=100_000)},
])
def test_never_the_kernel_for_what_no_qdisc_does(direction):
    assert choose_backend(link(**direction), ALL) == "userspace"
    with pytest.raises(SpecError) as error:
        choose_backend(link("kernel", **direction), ALL, index=3)
    assert error.value.field == "links[3].backend"
    assert 'use backend = "userspace" or "auto"' in error.value.message


def test_explicit_kernel_without_netem_names_field_qdisc_and_fix():
    with pytest.raises(MachineError) as error:
        choose_backend(link("kernel", rate_bps=10_000_000, delay_ns=5_000_000), NO_NETEM, index=1)
    assert str(error.value) == (
        'links[1].backend: the kernel backend needs the netem qdisc for delay, and this kernel has none '
        '(see bloatlab doctor); use backend = "userspace" or "auto"')


def test_a_queue_at_the_sender_only_the_kernel_can_serve():
    assert choose_backend(link(queue_at="sender", rate_bps=10_000_000), ALL) == "kernel"
    with pytest.raises(MachineError) as error:
        choose_backend(link(queue_at="sender", rate_bps=10_000_000, delay_ns=5_000_000), NO_NETEM, index=0)
    assert error.value.field == "links[0].queue_at"
    assert "needs the netem qdisc for delay" in error.value.message and "leave queue_at out" in error.value.message


def test_userspace_is_taken_as_asked():
    assert choose_backend(link("userspace", rate_bps=10_000_000), ALL) == "userspace"


def test_htb_burst_is_a_frame_plus_a_millisecond_of_tokens():
    assert htb_burst_bytes(10_000_000) == MTU_FRAME_BYTES + 1_250
    assert htb_burst_bytes(1_000_000_000) == MTU_FRAME_BYTES + 125_000
    assert htb_burst_bytes(10_000) == MTU_FRAME_BYTES + 1  # never below one full frame


def test_rate_and_packet_queue_is_htb_over_pfifo():
    d = DirectionSpec(rate_bps=10_000_000, queue=QueueSpec(packets=100))
    assert kernel_tc_commands("h1-eth0", d) == [
        ["qdisc", "add", "dev", "h1-eth0", "root", "handle", "1:", "htb", "default", "1"],
        ["class", "add", "dev", "h1-eth0", "parent", "1:", "classid", "1:1", "htb", "rate", "10000000bit",
         "ceil", "10000000bit", "burst", "2764", "cburst", "2764", "quantum", "1514"],
        ["qdisc", "add", "dev", "h1-eth0", "parent", "1:1", "handle", "10:", "pfifo", "limit", "100"],
    ]


def test_unlimited_rate_is_the_leaf_alone():
    d = DirectionSpec(queue=QueueSpec(packets=None, bytes=64_000))
    assert kernel_tc_commands("s0-eth1", d) == [
        ["qdisc", "add", "dev", "s0-eth1", "root", "handle", "1:", "bfifo", "limit", "64000"]]
    d = DirectionSpec(queue=QueueSpec(discipline="drophead", packets=20))
    assert kernel_tc_commands("s0-eth1", d)[0][-3:] == ["pfifo_head_drop", "limit", "20"]


def test_delay_and_loss_go_to_netem_with_the_queue_limit():
    d = DirectionSpec(rate_bps=10_000_000, delay_ns=5_000_000, loss=0.015, queue=QueueSpec(packets=100))
    leaf = kernel_tc_commands("h1-eth0", d)[-1]
    assert leaf[:9] == ["qdisc", "add", "dev", "h1-eth0", "parent", "1:1", "handle", "10:", "netem"]
    assert leaf[9:] == ["limit", "100", "delay", "5000us", "loss", "random", "1.5%"]
    d = DirectionSpec(delay_ns=1_000_500, jitter_ns=250, queue=QueueSpec(packets=10))
    assert kernel_tc_commands("h1-eth0", d)[0][-5:] == ["limit", "10", "delay", "1000.500us", "0.250us"]


def test_a_switch_is_served_inside_the_datapath_when_the_datapath_serves_all_its_links():
    def topo(namespace: bool = False) -> Topology:
        links = [LinkSpec(name=f"{a}-{b}", ends=(a, b), forward=DirectionSpec(), reverse=DirectionSpec())
                 for a, b in (("h1", "s0"), ("s0", "s1"), ("s1", "h2"), ("h3", "s2"))]
        return Topology(hosts={h: HostSpec(h) for h in ("h1", "h2", "h3")},
                        switches={s: SwitchSpec(s, namespace=namespace and s == "s1") for s in ("s0", "s1", "s2")},
                        links=links)
    assert inner_switches(topo(), ["userspace"] * 4) == {"s0", "s1", "s2"}
    # A kernel link's end is a namespace's interface: s1 and s2 keep theirs, with a bridge.
    assert inner_switches(topo(), ["userspace", "userspace", "kernel", "kernel"]) == {"s0"}
    # And so does a switch the spec gives one.
    assert inner_switches(topo(namespace=True), ["userspace"] * 4) == {"s0", "s2"}

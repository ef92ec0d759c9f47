"""The AQM disciplines on the kernel backend: which qdisc each needs, the exact tc argv, and what
the kernel backend refuses (one-line errors naming the field and the fix). This machine's kernel
lacks codel, fq_codel, red and pie, so these are pure-function tests of the commands."""

import pytest

from bloatlab.errors import MachineError, SpecError
from bloatlab.specs.disciplines import CakeParams, CoDelParams, FqCoDelParams, PieParams, RedParams
from bloatlab.specs.model import DirectionSpec, LinkSpec, QueueSpec
from bloatlab.testbed.links.kernel import kernel_needs, kernel_tc_commands
from bloatlab.testbed.network import choose_backend

AQM = ("codel", "fq_codel", "red", "pie")
BASIC = {"htb": True, "netem": True, "pfifo": True, "bfifo": True, "pfifo_head_drop": True}
ALL = {**BASIC, **dict.fromkeys(AQM, True)}
RATE = 10_000_000


def direction(queue: QueueSpec, **kwargs) -> DirectionSpec:
    return DirectionSpec(rate_bps=RATE, queue=queue, **kwargs)


def link(queue: QueueSpec, backend="auto", **kwargs) -> LinkSpec:
    d = direction(queue, **kwargs)
    return LinkSpec(name="h1-h2", ends=("h1", "h2"), forward=d, reverse=d, backend=backend)


def leaf(queue: QueueSpec, rate_bps: int | None = RATE) -> list[str]:
    """The leaf qdisc's kind and arguments, after "... handle 10:"."""
    commands = kernel_tc_commands("h1-eth0", DirectionSpec(rate_bps=rate_bps, queue=queue))
    return commands[-1][commands[-1].index("handle") + 2:]


# ---------------------------------------------------------------- tc argv per discipline


def test_codel_defaults_and_settings():
    assert leaf(QueueSpec("codel", 1000)) == [
        "codel", "limit", "1000", "target", "5000us", "interval", "100000us", "noecn"]
    q = QueueSpec("codel", 300, None, CoDelParams(target_ns=2_500_500, interval_ns=50_000_000, ecn=True))
    assert leaf(q) == ["codel", "limit", "300", "target", "2500.500us", "interval", "50000us", "ecn"]


def test_fq_codel_defaults_and_settings():
    assert leaf(QueueSpec("fq_codel", 10240)) == [
        "fq_codel", "limit", "10240", "flows", "1024", "quantum", "1514", "target", "5000us",
        "interval", "100000us", "ecn", "memory_limit", "33554432", "drop_batch", "64"]
    q = QueueSpec("fq_codel", 500, None, FqCoDelParams(flows=16, quantum_bytes=300, ecn=False,
                                                       memory_limit_bytes=1_000_000, drop_batch=8))
    assert leaf(q) == ["fq_codel", "limit", "500", "flows", "16", "quantum", "300", "target", "5000us",
                       "interval", "100000us", "noecn", "memory_limit", "1000000", "drop_batch", "8"]


def test_pie_defaults_and_settings():
    assert leaf(QueueSpec("pie", 1000)) == [
        "pie", "limit", "1000", "target", "15000us", "tupdate", "15000us", "alpha", "2", "beta", "20",
        "noecn", "nobytemode"]
    q = QueueSpec("pie", 100, None, PieParams(target_ns=20_000_000, tupdate_ns=30_000_000, alpha=0.0625,
                                              beta=2.0, ecn=True, bytemode=True, dq_rate_estimator=True))
    assert leaf(q) == ["pie", "limit", "100", "target", "20000us", "tupdate", "30000us", "alpha", "1",
                       "beta", "32", "ecn", "bytemode", "dq_rate_estimator"]


def test_red_defaults_from_the_limit_and_the_rate():
    # max = 150000 / 4, min = max / 3, burst = (2 min + max) / (3 avpkt), bandwidth = the link's rate
    assert leaf(QueueSpec("red", None, 150_000)) == [
        "red", "limit", "150000", "min", "12500", "max", "37500", "avpkt", "1000", "burst", "20",
        "probability", "0.02", "bandwidth", "10000000bit"]
    # no rate: tc's 10 Mbit/s
    assert leaf(QueueSpec("red", None, 150_000), rate_bps=None)[-2:] == ["bandwidth", "10000000bit"]
    assert kernel_tc_commands("x", DirectionSpec(queue=QueueSpec("red", None, 150_000)))[0][:7] == [
        "qdisc", "add", "dev", "x", "root", "handle", "1:"]


def test_red_settings_and_flags():
    q = QueueSpec("red", None, 300_000, RedParams(min=30_000, max=90_000, avpkt_bytes=1500, burst_pkts=55,
                                                  probability=0.1, bandwidth_bps=1_000_000, ecn=True,
                                                  harddrop=True, adaptive=True))
    assert leaf(q) == ["red", "limit", "300000", "min", "30000", "max", "90000", "avpkt", "1500", "burst", "55",
                       "probability", "0.1", "bandwidth", "1000000bit", "ecn", "harddrop", "adaptive"]


def test_the_aqm_leaf_sits_under_htb():
    commands = kernel_tc_commands("s0-eth1", direction(QueueSpec("codel", 1000)))
    assert [c[:2] for c in commands] == [["qdisc", "add"], ["class", "add"], ["qdisc", "add"]]
    assert commands[2][:8] == ["qdisc", "add", "dev", "s0-eth1", "parent", "1:1", "handle", "10:"]


def test_no_tc_command_for_a_refused_queue():
    with pytest.raises(ValueError, match="red counts bytes"):
        kernel_tc_commands("x", direction(QueueSpec("red", 1000)))


# ---------------------------------------------------------------- which qdisc, and backend choice


@pytest.mark.parametrize("discipline", AQM)
def test_each_discipline_needs_its_qdisc(discipline):
    limit = (None, 150_000) if discipline == "red" else (1000, None)
    q = QueueSpec(discipline, *limit)
    assert [n.qdisc for n in kernel_needs(direction(q), "forward")] == ["htb", discipline]
    assert choose_backend(link(q), ALL) == "kernel"
    assert choose_backend(link(q), {**ALL, discipline: False}) == "userspace"  # auto: the kernel lacks it
    with pytest.raises(MachineError) as error:
        choose_backend(link(q, "kernel"), {**ALL, discipline: False}, index=2)
    assert str(error.value) == (
        f"links[2].backend: the kernel backend needs the {discipline} qdisc for a {discipline} queue, and this "
        'kernel has none (see bloatlab doctor); use backend = "userspace" or "auto"')


def refused(q: QueueSpec, **kwargs) -> SpecError:
    """The queue is never the kernel's: auto takes userspace, explicit kernel is a one-line SpecError."""
    assert choose_backend(link(q, **kwargs), ALL) == "userspace"
    with pytest.raises(SpecError) as caught:
        choose_backend(link(q, "kernel", **kwargs), ALL, index=1)
    assert caught.value.field == "links[1].backend"
    assert "\n" not in str(caught.value)
    return caught.value


def test_red_in_packets_is_refused_saying_to_give_bytes():
    error = refused(QueueSpec("red", 1000))
    assert error.message == (
        "the kernel backend cannot serve this red queue (forward.queue): Linux red counts bytes and this queue "
        'is limited in packets; give the limit in bytes (e.g. bytes = "150kb", with min and max in bytes too) '
        'or use backend = "userspace"')


def test_red_gentle_and_small_burst_are_refused():
    assert "Linux red has no gentle mode" in refused(QueueSpec("red", None, 150_000, RedParams(gentle=True))).message
    # min / avpkt = 12.5: tc refuses 12, takes 13
    error = refused(QueueSpec("red", None, 150_000, RedParams(burst_pkts=12)))
    assert "(forward.queue.burst)" in error.message and "raise burst to at least 13" in error.message
    assert choose_backend(link(QueueSpec("red", None, 150_000, RedParams(burst_pkts=13))), ALL) == "kernel"


@pytest.mark.parametrize("discipline", ["codel", "fq_codel", "pie"])
def test_packet_qdiscs_refuse_a_byte_limit(discipline):
    error = refused(QueueSpec(discipline, None, 150_000))
    assert f"Linux {discipline} limits packets, not bytes; give the limit in packets" in error.message


@pytest.mark.parametrize(("params", "field", "fragment"), [
    ({"alpha": 0.1}, "alpha", "steps of 1/16 from 0 to 2, and 0.1 is not one"),
    ({"alpha": 2.0625}, "alpha", "2.0625 is not one"),
    ({"beta": 3.0}, "beta", "write a multiple of 0.0625 up to 2 (e.g. 1.25)"),
    ({"max_burst_ns": 100_000_000}, "max_burst", "fixed at 150 ms"),
    ({"ecn": True, "ecn_prob": 0.2}, "ecn_prob", "fixed 10% drop probability"),
])
def test_pie_refusals(params, field, fragment):
    error = refused(QueueSpec("pie", 1000, None, PieParams(**params)))
    assert f"(forward.queue.{field})" in error.message and fragment in error.message


def test_pie_takes_what_tc_can_write():
    for params in ({"alpha": 0.0, "beta": 2.0}, {"ecn_prob": 0.2}, {"ecn": True, "ecn_prob": 0.1}):
        assert choose_backend(link(QueueSpec("pie", 1000, None, PieParams(**params))), ALL) == "kernel", params


def test_fq_codel_quantum_below_256_is_refused():
    error = refused(QueueSpec("fq_codel", 1000, None, FqCoDelParams(quantum_bytes=255)))
    assert "raises a quantum below 256" in error.message
    assert choose_backend(link(QueueSpec("fq_codel", 1000, None, FqCoDelParams(quantum_bytes=256))), ALL) == "kernel"


@pytest.mark.parametrize("discipline", AQM)
def test_with_delay_the_queue_is_netems(discipline):
    error = refused(QueueSpec(discipline, None, 150_000), delay_ns=5_000_000)
    assert "the queue is netem's" in error.message


def test_cake_defaults_and_settings():
    assert leaf(QueueSpec("cake", 10240)) == [
        "cake", "bandwidth", "10000000bit", "diffserv3", "triple-isolate", "rtt", "100000us", "raw", "noatm",
        "nowash", "no-ack-filter"]
    q = QueueSpec("cake", 10240, None, CakeParams(bandwidth_bps=0, diffserv="diffserv4", flow_mode="dual-dsthost",
                                                  overhead_bytes=18, mpu_bytes=64, framing="atm", wash=True,
                                                  memory_limit_bytes=1_000_000, target_ns=10_000_000,
                                                  interval_ns=200_000_000, ack_filter="aggressive"))
    assert leaf(q) == ["cake", "bandwidth", "unlimited", "diffserv4", "dual-dsthost", "rtt", "200000us",
                       "overhead", "18", "mpu", "64", "atm", "wash", "ack-filter-aggressive", "memlimit", "1000000"]
    assert "ack-filter" in leaf(QueueSpec("cake", 10240, None, CakeParams(ack_filter="conservative")))


def test_the_kernel_backend_refuses_what_tcs_cake_cannot_set():
    needs = kernel_needs(direction(QueueSpec("cake", 1000, None, CakeParams(target_ns=10_000_000))), "forward")
    refused = {n.field: (n.why_not, n.fix) for n in needs if n.qdisc is None}
    assert set(refused) == {"forward.queue.packets", "forward.queue.target"}
    assert "fixed at 10240" in refused["forward.queue.packets"][0]
    assert "interval / 20" in refused["forward.queue.target"][1]
    assert [n.qdisc for n in kernel_needs(direction(QueueSpec("cake", 10240)), "forward")] == ["htb", "cake"]

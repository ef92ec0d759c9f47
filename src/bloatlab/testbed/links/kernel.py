"""The kernel backend: each link direction shaped by the kernel's own qdiscs (htb for the
rate, netem for delay and loss, a fifo or an AQM qdisc for the queue), built with tc.

kernel_needs() says what each direction asks of the kernel, so the backend can refuse what
no qdisc does faithfully or what this kernel lacks; bloatlab doctor's table reads it too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bloatlab.specs.disciplines import CATALOGUE, MTU_FRAME_BYTES, DisciplineName, DualPi2Params
from bloatlab.specs.model import DirectionSpec, LinkSpec, QueueSpec
from bloatlab.testbed import netns
from bloatlab.testbed.links.base import DIRECTIONS, LinkBackend, Port, Refusal, middle_ifaces

U32_MAX = 2**32 - 1


@dataclass(frozen=True)
class KernelNeed:
    """Something a link direction asks for and the kernel qdisc that serves it."""

    field: str  # within the link, e.g. "forward.delay_ns"
    what: str  # for messages: "delay"
    qdisc: str | None  # None: no kernel qdisc can do it faithfully
    why_not: str = ""  # when qdisc is None
    fix: str = ""  # when qdisc is None and there is more to do than to leave the kernel backend


def kernel_needs(direction: DirectionSpec, which: str) -> list[KernelNeed]:
    """What the kernel backend needs to serve one direction, in the order it is built."""
    needs = []
    if direction.trace is not None:
        needs.append(KernelNeed(f"{which}.trace", "a rate trace", None, "no qdisc replays a trace"))
    if direction.rate_bps is not None:
        needs.append(KernelNeed(f"{which}.rate_bps", "the rate", "htb"))
    uses_netem = False
    for attr, what in (("delay_ns", "delay"), ("loss", "loss")):
        if getattr(direction, attr):
            needs.append(KernelNeed(f"{which}.{attr}", what, "netem"))
            uses_netem = True
    if direction.jitter_ns:
        # netem sorts its queue by send time, so jitter reorders packets; ours never does.
        needs.append(KernelNeed(f"{which}.jitter_ns", "jitter", None, "netem reorders packets under jitter"))
    queue = direction.queue
    if uses_netem:
        # netem's own queue takes over: it holds a packet limit and drops at the tail.
        if queue.discipline != DisciplineName.DROPTAIL or queue.packets is None:
            needs.append(KernelNeed(f"{which}.queue", "this queue", None,
                                    "with delay or loss the queue is netem's, a tail-drop packet limit"))
    elif queue.discipline == DisciplineName.DROPHEAD:
        if queue.bytes is not None:
            needs.append(KernelNeed(f"{which}.queue", "this queue", None,
                                    "pfifo_head_drop limits packets, not bytes"))
        else:
            needs.append(KernelNeed(f"{which}.queue", "drophead", "pfifo_head_drop"))
    elif queue.discipline in AQM_QDISCS:
        needs += _aqm_needs(queue, direction.rate_bps, which)
    elif queue.bytes is not None:
        needs.append(KernelNeed(f"{which}.queue", "a byte limit", "bfifo"))
    else:
        needs.append(KernelNeed(f"{which}.queue", "a packet limit", "pfifo"))
    return needs


# The AQM disciplines and the Linux qdisc of each (the same names).
AQM_QDISCS = {DisciplineName.CODEL: "codel", DisciplineName.FQ_CODEL: "fq_codel", DisciplineName.RED: "red",
              DisciplineName.PIE: "pie", DisciplineName.CAKE: "cake", DisciplineName.DUALPI2: "dualpi2"}
CAKE_KERNEL_PACKETS = 10240  # Linux cake's packet limit, which tc cannot set
CAKE_TC_TARGET_DIVISOR = 20  # tc's `rtt` sets cake's interval, and its target to a twentieth of it
# tc's pie reads alpha and beta as whole numbers 0..32 in units of 1/16 per second.
PIE_TC_SCALE = 16
PIE_TC_MAX = 32
FQ_CODEL_MIN_QUANTUM_BYTES = 256  # Linux raises a smaller quantum to this
# tc's dualpi2 sends alpha and beta in 1/256 Hz, from 1 to 2^31 - 1 of them, and its times in us.
DUALPI2_TC_SCALE = 256
DUALPI2_TC_MAX = 2**31 - 1


def _aqm_needs(queue: QueueSpec, rate_bps: int | None, which: str) -> list[KernelNeed]:
    """The qdisc an AQM queue needs, or what about it the Linux qdisc cannot do as asked."""
    name = queue.discipline
    qdisc = AQM_QDISCS[name]
    field = f"{which}.queue"
    what = f"this {qdisc} queue"
    p = queue.resolved(rate_bps)
    refusals = []

    def refuse(key: str, why_not: str, fix: str = "") -> None:
        refusals.append(KernelNeed(f"{field}.{key}" if key else field, what, None, why_not, fix))

    if name in (DisciplineName.RED, DisciplineName.PIE) and p.ns3:
        refuse("ns3", f"Linux {qdisc} decides as Linux does, not as ns-3", 'drop ns3 or use backend = "userspace"')

    if name == DisciplineName.RED:
        if queue.bytes is None:
            refuse("", "Linux red counts bytes and this queue is limited in packets",
                   'give the limit in bytes (e.g. bytes = "150kb", with min and max in bytes too) '
                   'or use backend = "userspace"')
        if p.gentle:
            refuse("gentle", "Linux red has no gentle mode", 'drop gentle or use backend = "userspace"')
        elif queue.bytes is not None and p.burst_pkts * p.avpkt_bytes < p.min:
            # tc derives red's averaging weight from burst, and refuses a burst below min / avpkt.
            least = -(-p.min // p.avpkt_bytes)
            refuse("burst", f"tc needs burst >= min / avpkt ({least} packets) to derive red's averaging weight",
                   f'raise burst to at least {least} or use backend = "userspace"')
    elif name == DisciplineName.CAKE:
        if queue.bytes is not None or queue.packets != CAKE_KERNEL_PACKETS:
            refuse("packets" if queue.bytes is None else "bytes",
                   f"Linux cake's packet limit is fixed at {CAKE_KERNEL_PACKETS} (its buffer is memory_limit)",
                   'leave the limit out, set memory_limit, or use backend = "userspace"')
        if p.target_ns * CAKE_TC_TARGET_DIVISOR != p.interval_ns:
            refuse("target", "tc sets cake's target to a twentieth of its rtt (interval)",
                   'set target to interval / 20 (5ms for 100ms) or use backend = "userspace"')
    elif queue.bytes is not None:
        refuse("", f"Linux {qdisc} limits packets, not bytes",
               'give the limit in packets (e.g. packets = 1000) or use backend = "userspace"')
    if name == DisciplineName.PIE:
        pie = CATALOGUE[DisciplineName.PIE]
        for key, value in (("alpha", p.alpha), ("beta", p.beta)):
            scaled = value * PIE_TC_SCALE  # exact: a multiple of 1/16 is exact in binary
            if not scaled.is_integer() or scaled > PIE_TC_MAX:
                refuse(key, f"tc's pie takes {key} in steps of 1/16 from 0 to 2, and {value:g} is not one",
                       f"write a multiple of 0.0625 up to 2 (e.g. {pie.param(key).default:g}) "
                       'or use backend = "userspace"')
        fixed = (("max_burst", p.max_burst_ns != pie.param("max_burst").default,
                  "Linux pie's burst allowance is fixed at 150 ms"),
                 # without ECN the threshold has nothing to decide
                 ("ecn_prob", p.ecn and p.ecn_prob != pie.param("ecn_prob").default,
                  "Linux pie marks ECN only up to a fixed 10% drop probability"))
        for key, changed, why_not in fixed:
            if changed:
                refuse(key, why_not, f'leave {key} out or use backend = "userspace"')
    if name == DisciplineName.DUALPI2:
        refusals += _dualpi2_refusals(p, field, what)
    if name == DisciplineName.FQ_CODEL and p.quantum_bytes < FQ_CODEL_MIN_QUANTUM_BYTES:
        refuse("quantum", f"Linux fq_codel raises a quantum below {FQ_CODEL_MIN_QUANTUM_BYTES} bytes to that",
               f'write a quantum of at least {FQ_CODEL_MIN_QUANTUM_BYTES} or use backend = "userspace"')
    return refusals or [KernelNeed(field, f"a {qdisc} queue", qdisc)]


def _dualpi2_refusals(p: DualPi2Params, field: str, what: str) -> list[KernelNeed]:
    """What of a dualpi2 queue tc cannot hand Linux as it is: gains off tc's 1/256 grid, times
    finer than a microsecond."""
    default = CATALOGUE[DisciplineName.DUALPI2]
    refusals = []
    for key, value in (("alpha", p.alpha), ("beta", p.beta)):
        scaled = value * DUALPI2_TC_SCALE  # exact: a multiple of 1/256 is exact in binary
        if not scaled.is_integer() or not 1 <= scaled <= DUALPI2_TC_MAX:
            refusals.append(KernelNeed(
                f"{field}.{key}", what, None,
                f"tc's dualpi2 takes {key} in steps of 1/256 above 0, and {value:g} is not one",
                f"write a multiple of 0.00390625 (e.g. {default.param(key).default:.10g}) "
                'or use backend = "userspace"'))
    for key, ns in (("target", p.target_ns), ("tupdate", p.tupdate_ns), ("step_thresh", p.step_thresh_ns)):
        if ns % 1000:
            refusals.append(KernelNeed(f"{field}.{key}", what, None,
                                       f"Linux dualpi2 counts {key} in whole microseconds",
                                       f'round {key} to a microsecond or use backend = "userspace"'))
    return refusals


def qdiscs_wanted(links: Iterable[LinkSpec]) -> list[str]:
    """The qdisc kinds the kernel backend would use for these links: all a run need probe."""
    return list(dict.fromkeys(need.qdisc for link in links for which in DIRECTIONS
                              for need in kernel_needs(getattr(link, which), which) if need.qdisc))


class KernelBackend(LinkBackend):
    """Each direction shaped by the kernel's qdiscs.

    queue_at "link": each end has a veth pair into the datapath namespace, where a bridge joins
    the two; a direction's qdiscs sit on the egress toward its receiver. The queue then holds
    frames forwarded from the sender, as a router's does and as bloatlab-link's does: the
    sender's TCP lets go of a frame once it has crossed its veth, so TCP small queues never
    see the queue (on the sender's own interface they kept it near empty: a peak RTT of 5.7 ms
    where a 100-packet queue at 10 Mbit/s should give 121). Frames leave a host's veth cut to
    single segments, since its segmentation offloads are off.
    queue_at "sender": one veth pair, each direction shaped on its sender's own interface, as
    a NIC's queue is; a host's TCP then sees and limits its own queue.
    """

    name = "kernel"

    @classmethod
    def refusals(cls, link: LinkSpec, kernel_qdiscs: dict[str, bool]) -> list[Refusal]:
        needs = [need for which in DIRECTIONS for need in kernel_needs(getattr(link, which), which)]
        return [Refusal(cls.name, need.field, need.what, need.why_not,
                        None if need.qdisc is None else need.qdisc, need.fix)
                for need in needs if need.qdisc is None or not kernel_qdiscs.get(need.qdisc)]

    @staticmethod
    def bridge(index: int) -> str:
        return f"lb{index}"

    @staticmethod
    def qdisc_port(dp_ns: str, index: int, link: LinkSpec, a: Port, b: Port, which: str) -> Port:
        """Where the qdiscs of one direction of link `index` sit."""
        if link.queue_at == "sender":
            return a if which == "forward" else b
        a_mid, b_mid = middle_ifaces(index)
        return Port(dp_ns, b_mid if which == "forward" else a_mid)

    def add_link(self, index: int, link: LinkSpec, a: Port, b: Port) -> None:
        if link.queue_at == "sender":
            netns.veth_pair(a.ns, a.iface, b.ns, b.iface)
            netns.offloads_off([(a.ns, a.iface), (b.ns, b.iface)])
        else:
            bridge = self.bridge(index)
            pairs = list(zip((a, b), middle_ifaces(index)))
            with netns.Netlink() as netlink:
                netlink.add_bridge(self.site.dp_ns, bridge)
                for node_port, mid in pairs:
                    netns.veth_pair(node_port.ns, node_port.iface, self.site.dp_ns, mid)
                netns.offloads_off([end for port, mid in pairs for end in ((port.ns, port.iface), (self.site.dp_ns, mid))])
                for _, mid in pairs:
                    netlink.set_link(self.site.dp_ns, mid, master=bridge, up=True)
        for which, end in (("forward", a), ("reverse", b)):
            direction = getattr(link, which)
            port = self.qdisc_port(self.site.dp_ns, index, link, a, b, which)
            if port == end and direction.rate_bps is not None:  # a host's own backlog: real frames
                netns.single_segments(port.ns, port.iface)
            for args in kernel_tc_commands(port.iface, direction):
                netns.tc(port.ns, *args)


def htb_burst_bytes(rate_bps: int) -> int:
    """htb's bucket: one full frame plus one millisecond of tokens.

    Smaller than a frame, the bucket could never pay for a full frame at once and htb would
    undershoot the rate; the millisecond absorbs timer and softirq lateness, which at high
    rates would otherwise cost throughput (the kernel's own default is rate/HZ + MTU).
    """
    return MTU_FRAME_BYTES + rate_bps // 8 // 1000


def kernel_tc_commands(iface: str, direction: DirectionSpec) -> list[list[str]]:
    """The `tc` arguments that shape `direction` on `iface`'s egress."""
    leaf = _leaf_qdisc(direction)
    if direction.rate_bps is None:
        return [["qdisc", "add", "dev", iface, "root", "handle", "1:", *leaf]]
    rate = f"{direction.rate_bps}bit"
    burst = str(htb_burst_bytes(direction.rate_bps))
    return [
        ["qdisc", "add", "dev", iface, "root", "handle", "1:", "htb", "default", "1"],
        # quantum only matters between classes; set it so the kernel does not warn about r2q.
        ["class", "add", "dev", iface, "parent", "1:", "classid", "1:1", "htb", "rate", rate,
         "ceil", rate, "burst", burst, "cburst", burst, "quantum", str(MTU_FRAME_BYTES)],
        ["qdisc", "add", "dev", iface, "parent", "1:1", "handle", "10:", *leaf],
    ]


def _leaf_qdisc(d: DirectionSpec) -> list[str]:
    q = d.queue
    if d.delay_ns or d.loss or d.jitter_ns:
        # netem's queue holds both the packets waiting for the rate and those in flight.
        args = ["netem", "limit", str(q.packets), "delay", _tc_time(d.delay_ns)]
        if d.jitter_ns:
            args += [_tc_time(d.jitter_ns)]
        if d.loss:
            args += ["loss", "random", f"{d.loss * 100:.6g}%"]
        return args
    if q.discipline == DisciplineName.DROPHEAD:
        return ["pfifo_head_drop", "limit", str(q.packets)]
    if q.discipline in AQM_QDISCS:
        return _aqm_qdisc(q, d.rate_bps)
    if q.bytes is not None:
        return ["bfifo", "limit", str(q.bytes)]
    return ["pfifo", "limit", str(q.packets if q.packets is not None else U32_MAX)]


def _aqm_qdisc(q: QueueSpec, rate_bps: int | None) -> list[str]:
    """tc arguments for an AQM leaf, every parameter written out (kernel_needs has refused what the
    kernel qdisc cannot do). ECN is the qdisc's own: it marks ECT packets, drops the others."""
    refused = [need for need in _aqm_needs(q, rate_bps, "") if need.qdisc is None]
    if refused:
        raise ValueError(f"no tc command for {refused[0].what}: {refused[0].why_not} (choose_backend refuses it)")
    p = q.resolved(rate_bps)
    if q.discipline == DisciplineName.CODEL:
        return ["codel", "limit", str(q.packets), "target", _tc_time(p.target_ns),
                "interval", _tc_time(p.interval_ns), _tc_ecn(p.ecn)]
    if q.discipline == DisciplineName.FQ_CODEL:
        return ["fq_codel", "limit", str(q.packets), "flows", str(p.flows), "quantum", str(p.quantum_bytes),
                "target", _tc_time(p.target_ns), "interval", _tc_time(p.interval_ns), _tc_ecn(p.ecn),
                "memory_limit", str(p.memory_limit_bytes), "drop_batch", str(p.drop_batch)]
    if q.discipline == DisciplineName.CAKE:  # cake marks ECN-capable packets always
        args = ["cake", "bandwidth", f"{p.bandwidth_bps}bit" if p.bandwidth_bps else "unlimited",
                p.diffserv, p.flow_mode, "rtt", _tc_time(p.interval_ns),
                *(["raw"] if p.overhead_bytes is None else ["overhead", str(p.overhead_bytes)]),
                *(["mpu", str(p.mpu_bytes)] if p.mpu_bytes else []),
                {"none": "noatm", "atm": "atm", "ptm": "ptm"}[p.framing], "wash" if p.wash else "nowash",
                {"off": "no-ack-filter", "conservative": "ack-filter", "aggressive": "ack-filter-aggressive"}[
                    p.ack_filter]]
        return args + (["memlimit", str(p.memory_limit_bytes)] if p.memory_limit_bytes else [])
    if q.discipline == DisciplineName.DUALPI2:
        return _dualpi2_qdisc(q, p)
    if q.discipline == DisciplineName.PIE:
        args = ["pie", "limit", str(q.packets), "target", _tc_time(p.target_ns), "tupdate", _tc_time(p.tupdate_ns),
                "alpha", str(int(p.alpha * PIE_TC_SCALE)), "beta", str(int(p.beta * PIE_TC_SCALE)),
                _tc_ecn(p.ecn), "bytemode" if p.bytemode else "nobytemode"]
        return args + (["dq_rate_estimator"] if p.dq_rate_estimator else [])
    args = ["red", "limit", str(q.bytes), "min", str(p.min), "max", str(p.max),
            "avpkt", str(p.avpkt_bytes), "burst", str(p.burst_pkts),
            "probability", f"{p.probability:.12g}", "bandwidth", f"{p.bandwidth_bps}bit"]
    return args + [flag for flag, on in (("ecn", p.ecn), ("harddrop", p.harddrop), ("adaptive", p.adaptive)) if on]


def _dualpi2_qdisc(q: QueueSpec, p: DualPi2Params) -> list[str]:
    """tc's dualpi2, every parameter written out; a derived memory limit is left to Linux, which
    derives it alike (limit x 2 x MTU)."""
    step = f"{p.step_packets}p" if p.step_packets is not None else _tc_time(p.step_thresh_ns)
    args = ["dualpi2", "limit", str(q.packets), "target", _tc_time(p.target_ns), "tupdate", _tc_time(p.tupdate_ns),
            "alpha", f"{p.alpha:.10g}", "beta", f"{p.beta:.10g}", "step_thresh", step,
            "min_qlen_step", str(p.min_qlen_step), "coupling_factor", str(p.coupling_factor),
            "drop_on_overload" if p.drop_on_overload else "overflow",
            "drop_enqueue" if p.drop_early else "drop_dequeue",
            "classic_protection", f"{p.classic_protection_percent}%", p.ecn_mask]
    return args + (["memlimit", str(p.memory_limit_bytes)] if p.memory_limit_bytes is not None else [])


def _tc_ecn(on: bool) -> str:
    return "ecn" if on else "noecn"


def _tc_time(ns: int) -> str:
    # tc (iproute2 6.1) reads no "ns" unit: write microseconds, with decimals when needed.
    return f"{ns // 1000}us" if ns % 1000 == 0 else f"{ns // 1000}.{ns % 1000:03d}us"

"""The catalogue of queue disciplines: each one's parameters with their units, defaults, bounds
and sources, declared once, as ns-3 declares a queue disc's attributes in its TypeId.

Everything else reads it: spec validation (specs/queues.py), the resolved parameters that go
into results and into the datapath's config, `bloatlab queues`, the tables of docs/queues.md
(`make docs` writes them), the kernel backend's defaults. A test holds bloatlab-link's own
defaults (`bloatlab-link --describe`) equal to it.

A discipline's names are a DisciplineName; its parameters, typed, are its record (CoDelParams,
...), each field the spec's key with its unit (`target_ns`) and in that unit. The datapath config,
run.json and a spec's dict name them as the config does (Param.config): to_config and
from_config map between the two.
This module imports nothing of bloatlab's: it is data and the arithmetic of derived defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import Any

# Largest frame a 1500-byte-MTU Ethernet link carries (no FCS): what queues and the serialiser
# count, as the kernel's htb and pfifo do.
MTU_FRAME_BYTES = 1514

MS = 10**6  # nanoseconds
MIB = 2**20

# Bounds every discipline shares.
MAX_QUEUE_PACKETS = 1_000_000
MAX_QUEUE_BYTES = 2**30
MAX_QUEUE_DURATION_NS = 10 * 10**9

# The kinds of parameter, and how a spec writes each.
KINDS = {
    "duration": 'a duration above 0, at most "10s": "5ms", "200us"',
    "size": 'a size in bytes, at most "1gib": 1514, "1514b", "32mib"',
    "rate": 'a rate: "10mbit"',
    "bool": "true or false",
    "count": "a whole number within the bounds given",
    "ratio": "a number >= 0",
    "probability": 'a probability from 0 to 1: 0.02 or "2%"',
    "threshold": "what the limit counts: whole packets, or a size when the limit is in bytes",
    "choice": "one of the names listed",
}
# The unit a value of each kind is held in, the suffix of its field name (Param.field).
KIND_UNITS = {"duration": "ns", "size": "bytes", "rate": "bps"}


class DisciplineName(StrEnum):
    """The disciplines, by the name specs, results and the datapath's config give them."""

    DROPTAIL = "droptail"
    DROPHEAD = "drophead"
    CODEL = "codel"
    FQ_CODEL = "fq_codel"
    RED = "red"
    PIE = "pie"
    CAKE = "cake"
    DUALPI2 = "dualpi2"


@dataclass(frozen=True)
class Param:
    """One parameter of a discipline."""

    key: str  # in a spec: queue = { target = "5ms" }
    config: str  # in the datapath config, run.json and a spec's dict: "target_ns"
    kind: str  # one of KINDS
    default: Any  # in the config's unit; None: derived (see `derived`)
    help: str  # what it does, one line
    source: str  # where the default comes from
    low: int | None = None  # count: the smallest value
    high: int | None = None  # count: the largest value
    derived: str = ""  # how the default is derived when it depends on the queue or the link
    settable: bool = True  # False: fixed, only written to the config (a spec cannot set it)
    choices: tuple[str, ...] = ()  # choice: the names it takes
    unlimited: bool = False  # rate: "unlimited" is a value (0 in the config)
    unit: str = ""  # count: what it counts when that has a unit ("pkts", "bytes"); other kinds: KIND_UNITS

    @property
    def field(self) -> str:
        """Its name in the discipline's typed record: the spec's key with its unit (target_ns)."""
        unit = self.unit or KIND_UNITS.get(self.kind, "")
        return f"{self.key}_{unit}" if unit else self.key


# Each discipline's parameters, typed: the fields are its Params' `field`s in their order, each
# in the unit its name says (a test holds them equal to the catalogue). In a QueueSpec a field
# is None when the spec left it out: the catalogue's default, or the derived value, stands for
# it. Resolved (QueueSpec.resolved), every field holds the value that runs; None only where
# that is a value (CAKE's bandwidth_bps, overhead_bytes and memory_limit_bytes).

@dataclass(frozen=True)
class FifoParams:
    """droptail's and drophead's: nothing beyond the limit."""


@dataclass(frozen=True)
class CoDelParams:
    target_ns: int | None = None
    interval_ns: int | None = None
    ecn: bool | None = None
    coarse_time: bool | None = None
    mtu_bytes: int | None = None


@dataclass(frozen=True)
class FqCoDelParams:
    target_ns: int | None = None
    interval_ns: int | None = None
    ecn: bool | None = None
    coarse_time: bool | None = None
    flows: int | None = None
    quantum_bytes: int | None = None
    memory_limit_bytes: int | None = None
    drop_batch: int | None = None  # packets
    mtu_bytes: int | None = None


@dataclass(frozen=True)
class RedParams:
    min: int | None = None  # min and max count what the queue's limit counts: packets, or bytes
    max: int | None = None
    avpkt_bytes: int | None = None
    burst_pkts: int | None = None
    probability: float | None = None
    bandwidth_bps: int | None = None
    ecn: bool | None = None
    harddrop: bool | None = None
    adaptive: bool | None = None
    gentle: bool | None = None
    ns3: bool | None = None


@dataclass(frozen=True)
class PieParams:
    target_ns: int | None = None
    tupdate_ns: int | None = None
    alpha: float | None = None  # per second
    beta: float | None = None  # per second
    max_burst_ns: int | None = None
    ecn: bool | None = None
    ecn_prob: float | None = None
    bytemode: bool | None = None
    dq_rate_estimator: bool | None = None
    ns3: bool | None = None
    mtu_bytes: int | None = None


@dataclass(frozen=True)
class CakeParams:
    bandwidth_bps: int | None = None  # 0, or resolved None (no rate to take): unlimited
    diffserv: str | None = None
    flow_mode: str | None = None
    target_ns: int | None = None
    interval_ns: int | None = None
    overhead_bytes: int | None = None  # resolved None: none, the frame's own length (tc's raw)
    mpu_bytes: int | None = None
    framing: str | None = None
    wash: bool | None = None
    memory_limit_bytes: int | None = None  # resolved None: the datapath derives it
    ack_filter: str | None = None
    mtu_bytes: int | None = None


@dataclass(frozen=True)
class DualPi2Params:
    target_ns: int | None = None
    tupdate_ns: int | None = None
    alpha: float | None = None  # Hz: per update, per second of delay
    beta: float | None = None  # Hz
    step_thresh_ns: int | None = None
    step_packets: int | None = None  # resolved None: the step threshold is step_thresh_ns, a time
    min_qlen_step: int | None = None  # packets
    coupling_factor: int | None = None
    classic_protection_percent: int | None = None
    ecn_mask: str | None = None
    drop_on_overload: bool | None = None
    drop_early: bool | None = None
    memory_limit_bytes: int | None = None  # resolved None: the datapath derives it
    mtu_bytes: int | None = None


Params = FifoParams | CoDelParams | FqCoDelParams | RedParams | PieParams | CakeParams | DualPi2Params


@dataclass(frozen=True)
class Discipline:
    name: DisciplineName
    summary: str  # what it does, one line
    packets: int  # the packet limit when a spec gives neither packets nor bytes
    packets_source: str
    params: tuple[Param, ...] = ()
    aliases: tuple[str, ...] = ()
    record: type = FifoParams  # its typed parameters (Params)

    def param(self, key: str) -> Param:
        return next(p for p in self.params if p.key == key)

    @property
    def settable(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.settable)

    def defaults(self) -> dict[str, Any]:
        """Every parameter's default under its config name (None where it is derived)."""
        return {p.config: p.default for p in self.params}


# CAKE's diffserv modes and flow modes, as tc names them.
CAKE_DIFFSERV = ("besteffort", "precedence", "diffserv8", "diffserv4", "diffserv3")
CAKE_FLOW_MODES = ("flowblind", "srchost", "dsthost", "hosts", "flows", "dual-srchost", "dual-dsthost",
                   "triple-isolate")
# Which ECN codepoints DualPI2 sends to its L queue, as tc names the choice.
DUALPI2_ECN_MASKS = ("l4s_ect", "any_ect")
# DualPI2's PI gains as Linux holds them, in steps of 1/256 Hz: RFC 9332's 0.16 and 3.2 Hz.
DUALPI2_ALPHA = 41 / 256
DUALPI2_BETA = 819 / 256


def _target(default_ms: int, source: str) -> Param:
    return Param("target", "target_ns", "duration", default_ms * MS,
                 "the queueing delay the controller holds the queue to", source)


def _ecn(default: bool, source: str) -> Param:
    return Param("ecn", "ecn", "bool", default, "mark ECN-capable packets CE instead of dropping them", source)


def _mtu(source: str) -> Param:
    return Param("mtu", "mtu_bytes", "size", MTU_FRAME_BYTES,
                 "below this backlog the discipline never drops (one full frame)", source, settable=False)


_INTERVAL = Param("interval", "interval_ns", "duration", 100 * MS,
                  "the window over which the least sojourn time must stay above target", "RFC 8289, Linux")
_COARSE_TIME = Param("coarse_time", "coarse_time", "bool", False,
                     "count time in 1024-ns units, as Linux's and ns-3's CoDel do, rather than exact nanoseconds",
                     "Linux `codel_time_t`, ns-3 `CoDelQueueDisc`")

CATALOGUE: dict[DisciplineName, Discipline] = {d.name: d for d in (
    Discipline(DisciplineName.DROPTAIL, "first in, first out; a packet that does not fit is dropped on arrival",
               1000, "Linux txqueuelen", aliases=("taildrop",)),
    Discipline(DisciplineName.DROPHEAD, "first in, first out; when full, the oldest packet is dropped to make room",
               1000, "Linux txqueuelen"),
    Discipline(DisciplineName.CODEL,
               "drops at the head when packets have waited longer than `target` for a whole `interval`",
               1000, "Linux `sch_codel`", (
                   _target(5, "RFC 8289, Linux `sch_codel`"),
                   _INTERVAL,
                   _ecn(False, "Linux `sch_codel`"),
                   _COARSE_TIME,
                   _mtu("Linux `sch_codel` (the MTU-plus-header rule)"),
               ), record=CoDelParams),
    Discipline(DisciplineName.FQ_CODEL,
               "hashes flows into separate queues served round-robin, each with its own CoDel",
               10240, "Linux `sch_fq_codel`", (
                   _target(5, "RFC 8290, Linux"),
                   _INTERVAL,
                   _ecn(True, "RFC 8290, Linux"),
                   _COARSE_TIME,
                   Param("flows", "flows", "count", 1024, "how many queues flows are hashed into",
                         "RFC 8290, Linux", low=1, high=65536),
                   Param("quantum", "quantum_bytes", "size", MTU_FRAME_BYTES,
                         "bytes a queue may send per round-robin turn", "RFC 8290 (one MTU), Linux (`psched_mtu`)"),
                   Param("memory_limit", "memory_limit_bytes", "size", 32 * MIB,
                         "memory all flows' packets may take together", "Linux `sch_fq_codel`"),
                   Param("drop_batch", "drop_batch", "count", 64,
                         "packets dropped at once from the fattest flow when the queue is full",
                         "Linux `sch_fq_codel`", low=1, high=1024),
                   _mtu("Linux `sch_fq_codel` (CoDel's MTU-plus-header rule)"),
               ), record=FqCoDelParams),
    Discipline(DisciplineName.RED,
               "drops (or marks) arrivals with a probability that grows with the average queue length",
               1000, "bloatlab (Linux red has only a byte limit)", (
                   Param("min", "min", "threshold", None, "below this average queue, nothing is dropped",
                         "`tc` (`q_red.c`)", derived="max / 3"),
                   Param("max", "max", "threshold", None, "above this average queue, every arrival is dropped",
                         "`tc` (`q_red.c`)", derived="limit / 4"),
                   Param("avpkt", "avpkt_bytes", "size", 1000, "the average packet size RED assumes",
                         "`tc-red(8)`'s typical value"),
                   Param("burst", "burst_pkts", "count", None,
                         "how many packets of a burst the average absorbs (sets its weight)", "`tc` (`q_red.c`)",
                         low=1, high=MAX_QUEUE_PACKETS, unit="pkts",
                         derived="(2 min + max) / (3 avpkt), thresholds in bytes, at least 1; with a packet "
                                 "limit, (2 min + max) / 3"),
                   Param("probability", "probability", "probability", 0.02,
                         "the drop probability at max, above 0", "`tc-red(8)`"),
                   Param("bandwidth", "bandwidth_bps", "rate", 10_000_000,
                         "the rate at which the average decays while the queue is idle",
                         "`tc` (`q_red.c`) defaults to 10 Mbit/s", derived="the direction's rate if it has one"),
                   _ecn(False, "Linux `sch_red`"),
                   Param("harddrop", "harddrop", "bool", False, "with ecn, drop rather than mark above max",
                         "Linux `sch_red`"),
                   Param("adaptive", "adaptive", "bool", False,
                         "tune probability to keep the average between min and max",
                         "Linux `sch_red`; Floyd, Gummadi and Shenker 2001"),
                   Param("gentle", "gentle", "bool", False,
                         "from max to 2 max, raise the probability to 1 instead of dropping everything",
                         "Floyd 2000"),
                   Param("ns3", "ns3", "bool", False,
                         "decide as ns-3's RedQueueDisc does (its count and wait rule, idle decay), not Linux's",
                         "ns-3 3.44 `RedQueueDisc` (docs/simulation.md)"),
               ), record=RedParams),
    Discipline(DisciplineName.PIE,
               "drops (or marks) arrivals with a probability steered by a controller on the queueing delay",
               1000, "Linux `sch_pie`", (
                   _target(15, "RFC 8033, Linux"),
                   Param("tupdate", "tupdate_ns", "duration", 15 * MS, "how often the probability is updated",
                         "RFC 8033, Linux"),
                   Param("alpha", "alpha", "ratio", 0.125,
                         "gain on the delay's distance from target, per second", "RFC 8033; Linux 2/16"),
                   Param("beta", "beta", "ratio", 1.25, "gain on the delay's change, per second",
                         "RFC 8033; Linux 20/16"),
                   Param("max_burst", "max_burst_ns", "duration", 150 * MS,
                         "how long a burst into an idle queue passes without early drops", "RFC 8033, Linux (fixed)"),
                   _ecn(False, "Linux `sch_pie`"),
                   Param("ecn_prob", "ecn_prob", "probability", 0.1,
                         "above this drop probability even ECN-capable packets are dropped",
                         "RFC 8033 (10%); Linux (fixed)"),
                   Param("bytemode", "bytemode", "bool", False, "scale the probability by packet size",
                         "Linux `sch_pie`"),
                   Param("dq_rate_estimator", "dq_rate_estimator", "bool", False,
                         "estimate the delay from the departure rate instead of per-packet timestamps",
                         "Linux `sch_pie`, RFC 8033"),
                   Param("ns3", "ns3", "bool", False,
                         "decide as ns-3's PieQueueDisc does (burst allowance, update, no derandomisation), "
                         "not Linux's", "ns-3 3.44 `PieQueueDisc` (docs/simulation.md)"),
                   _mtu("Linux `sch_pie` (no early drop below two frames)"),
               ), record=PieParams),
    Discipline(DisciplineName.CAKE,
               "sorts DSCP marks into tins and flows into queues fair between hosts, with COBALT in each "
               "and its own shaper", 10240, "Linux `sch_cake`", (
                   Param("bandwidth", "bandwidth_bps", "rate", None,
                         'the shaper\'s rate, whose shares decide which tin goes first; "unlimited" leaves the '
                         "pace to the link and shares tins by weight", "Linux `sch_cake` (unlimited)",
                         derived="the direction's rate if it has one (as SQM sets it to the line's), else unlimited",
                         unlimited=True),
                   Param("diffserv", "diffserv", "choice", "diffserv3",
                         "how DSCP marks sort packets into tins (diffserv3: bulk, best effort, voice)",
                         "Linux `sch_cake`", choices=CAKE_DIFFSERV),
                   Param("flow_mode", "flow_mode", "choice", "triple-isolate",
                         "what a flow is, and between which hosts the queue is fair before flows",
                         "Linux `sch_cake`", choices=CAKE_FLOW_MODES),
                   _target(5, "Linux `sch_cake`"),
                   Param("interval", "interval_ns", "duration", 100 * MS,
                         "COBALT's interval, about the flows' worst RTT (tc's rtt)", "Linux `sch_cake`"),
                   Param("overhead", "overhead", "count", None,
                         "bytes the shaper adds to each packet in place of its Ethernet header (the framing "
                         "of the line below)", "Linux `sch_cake`", low=-64, high=256, unit="bytes",
                         derived="none: the frame's own length (tc's raw)"),
                   Param("mpu", "mpu", "count", 0, "the least length a packet counts for", "Linux `sch_cake`",
                         low=0, high=256, unit="bytes"),
                   Param("framing", "framing", "choice", "none",
                         "the line's cells: atm (48 bytes of each 53) or ptm (64/65 encoding)", "Linux `sch_cake`",
                         choices=("none", "atm", "ptm")),
                   Param("wash", "wash", "bool", False, "clear DSCP marks once a packet's tin is chosen",
                         "Linux `sch_cake`"),
                   Param("memory_limit", "memory_limit_bytes", "size", None,
                         "bytes the flows may hold together; over it the fattest flow loses its head packet",
                         "Linux `sch_cake`",
                         derived="four intervals at the bandwidth, at least 4 MiB, at most packets x 1514 bytes"),
                   Param("ack_filter", "ack_filter", "choice", "off",
                         "drop a queued pure TCP ACK that a newer one of its flow makes redundant: conservative "
                         "when two wait, aggressive also when one waits right before it", "Linux `sch_cake`",
                         choices=("off", "conservative", "aggressive")),
                   _mtu("Linux `sch_cake` (`psched_mtu`)"),
               ), record=CakeParams),
    Discipline(DisciplineName.DUALPI2,
               "couples a low-latency queue for L4S packets (ECT(1), CE), marked with k p', to a classic "
               "queue dropped with p'^2, both steered by one PI controller on the queueing delay", 10000,
               "Linux `sch_dualpi2`", (
                   _target(15, "RFC 9332, Linux `sch_dualpi2`"),
                   Param("tupdate", "tupdate_ns", "duration", 16 * MS, "how often the base probability p' is updated",
                         "RFC 9332, Linux"),
                   Param("alpha", "alpha", "ratio", DUALPI2_ALPHA,
                         "gain on the delay's distance from target, per second, per update (Hz)",
                         "RFC 9332 (0.16); Linux 41/256"),
                   Param("beta", "beta", "ratio", DUALPI2_BETA,
                         "gain on the delay's change since the last update, per second (Hz)",
                         "RFC 9332 (3.2); Linux 819/256"),
                   Param("step_thresh", "step_thresh_ns", "duration", 1 * MS,
                         "the L queue's own AQM: an L4S packet that waited longer than this is marked",
                         "Linux `sch_dualpi2`"),
                   Param("step_packets", "step_packets", "count", None,
                         "the step threshold as a queue length: mark an L4S packet that leaves more than this "
                         "many behind it in the L queue (exclusive with step_thresh)", "Linux `sch_dualpi2`",
                         low=1, high=MAX_QUEUE_PACKETS, derived="none: the threshold is step_thresh, a time"),
                   Param("min_qlen_step", "min_qlen_step", "count", 0,
                         "step-mark only packets that found at least this many packets in the L queue",
                         "Linux `sch_dualpi2`", low=0, high=MAX_QUEUE_PACKETS),
                   Param("coupling_factor", "coupling_factor", "count", 2,
                         "k: L4S packets are marked with k p', classic ones dropped (or marked) with p'^2",
                         "RFC 9332, Linux", low=1, high=255),
                   Param("classic_protection", "classic_protection_percent", "count", 10,
                         "the classic queue's share of the link in percent, when both queues wait (a weighted "
                         "round robin of bytes)", "Linux `sch_dualpi2`", low=0, high=100, unit="percent"),
                   Param("ecn_mask", "ecn_mask", "choice", "l4s_ect",
                         "which packets go to the L queue: ECT(1) and CE (l4s_ect), or every ECN-capable one "
                         "(any_ect)", "Linux `sch_dualpi2`", choices=DUALPI2_ECN_MASKS),
                   Param("drop_on_overload", "drop_on_overload", "bool", True,
                         "once k p' passes 1, drop with p'^2 in both queues; false (tc's overflow): hold p' at "
                         "1/k, mark every L4S packet and let the queue grow", "Linux `sch_dualpi2`"),
                   Param("drop_early", "drop_early", "bool", False,
                         "drop (or mark) at enqueue rather than at dequeue (tc's drop_enqueue)",
                         "Linux `sch_dualpi2`"),
                   Param("memory_limit", "memory_limit_bytes", "size", None,
                         "bytes both queues may hold; over it an arrival is dropped", "Linux `sch_dualpi2`",
                         derived="packets x 2 x 1514 bytes (with a byte limit, that limit)"),
                   _mtu("Linux `sch_dualpi2` (`psched_mtu`: no drop or mark below two frames queued)"),
               ), record=DualPi2Params),
)}

DISCIPLINES = tuple(CATALOGUE)
ALIASES = {alias: d.name for d in CATALOGUE.values() for alias in d.aliases}  # other name -> name
LIMIT_KEYS = ("discipline", "packets", "bytes")  # what every queue takes


def discipline(name: str) -> Discipline:
    """The discipline called `name` or one of its aliases (KeyError for none)."""
    return CATALOGUE[ALIASES.get(name, name)]


# Derived defaults ---------------------------------------------------------------------------

def red_thresholds(limit: int, min_: int | None, max_: int | None) -> tuple[int, int]:
    """RED's (min, max) in the limit's unit, tc's defaults for those not given (None): max =
    limit / 4, min = max / 3, in whole units (integer division, as tc computes them)."""
    max_ = limit // 4 if max_ is None else max_
    min_ = max_ // 3 if min_ is None else min_
    return min_, max_


def red_burst(min_: int, max_: int, avpkt_bytes: int, in_bytes: bool) -> int:
    """tc's burst: (2 min + max) / (3 avpkt) with the thresholds in bytes, at least 1 packet.
    With a packet limit the thresholds count packets of avpkt bytes, so avpkt cancels out."""
    if not in_bytes:
        return max(1, (2 * min_ + max_) // 3)
    return max(1, (2 * min_ + max_) // (3 * avpkt_bytes))


def resolve(name: DisciplineName, packets: int | None, nbytes: int | None, params: Params,
            rate_bps: int | None) -> Params:
    """Every parameter of a queue: what the spec set over the catalogue's defaults, the derived
    ones computed as the datapath computes them. `rate_bps` is the link direction's rate, None
    when unlimited."""
    d = CATALOGUE[name]
    resolved = replace(d.record(**{p.field: p.default for p in d.params}), **given(params))
    if isinstance(params, RedParams):
        limit = nbytes if nbytes is not None else packets
        assert limit is not None
        min_, max_ = red_thresholds(limit, params.min, params.max)
        burst_pkts = params.burst_pkts
        if burst_pkts is None:
            burst_pkts = red_burst(min_, max_, resolved.avpkt_bytes, nbytes is not None)
        resolved = replace(resolved, min=min_, max=max_, burst_pkts=burst_pkts)
    if isinstance(params, (RedParams, CakeParams)) and params.bandwidth_bps is None and rate_bps is not None:
        resolved = replace(resolved, bandwidth_bps=rate_bps)
    return resolved


# The config's names --------------------------------------------------------------------------

def given(params: Params) -> dict[str, Any]:
    """The parameters a spec set (those not None), by field."""
    return {f.name: getattr(params, f.name) for f in fields(params) if getattr(params, f.name) is not None}


def to_config(name: DisciplineName, params: Params) -> dict[str, Any]:
    """The parameters under the datapath config's names, in the catalogue's order: the one
    mapping from the typed record to the datapath's config, run.json and a spec's dict."""
    return {p.config: getattr(params, p.field) for p in CATALOGUE[name].params}


def from_config(name: DisciplineName, values: dict[str, Any]) -> Params:
    """The inverse of to_config: parameters under the config's names as the discipline's record."""
    d = CATALOGUE[name]
    field_of = {p.config: p.field for p in d.params}
    return d.record(**{field_of[config]: value for config, value in values.items()})

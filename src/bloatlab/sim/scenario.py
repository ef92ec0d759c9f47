"""An experiment as the ns-3 driver reads it (cxx/bloatlab_ns3.cc): one statement per line,
a verb, words, then key=value options. What ns-3 cannot model here is refused first, with a
one-line error naming the spec's field.

Each discipline's parameters map to the ns-3 queue disc's attributes (q.NAME=VALUE), from the
resolved parameters the emulated run would use (docs/simulation.md lists the mapping and what
differs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bloatlab.errors import SpecError
from bloatlab.specs import dscp
from bloatlab.specs.disciplines import DisciplineName
from bloatlab.specs.model import Bulk, DirectionSpec, Experiment, Ping, Web

# The disciplines ns-3's traffic-control module has, by bloatlab's name; DualPI2, which ns-3
# lacks, is the driver's own queue disc (cxx/bloatlab_ns3.cc).
QUEUE_DISCS = {DisciplineName.DROPTAIL: "ns3::FifoQueueDisc", DisciplineName.CODEL: "ns3::CoDelQueueDisc",
               DisciplineName.FQ_CODEL: "ns3::FqCoDelQueueDisc", DisciplineName.RED: "ns3::RedQueueDisc",
               DisciplineName.PIE: "ns3::PieQueueDisc", DisciplineName.DUALPI2: "bloatlab::DualPi2QueueDisc"}
# ns-3's TcpNewReno, TcpCubic, TcpBbr and TcpDctcp (ECN on, ECT(1): DualPI2's L queue).
CONGESTION_CONTROLS = ("reno", "cubic", "bbr", "dctcp")
WORKLOADS = ("bulk", "ping", "web")


def _ns(value: int) -> str:
    return f"{value}ns"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def ewma_weight(min_pkts: float, burst: int) -> float:
    """RED's EWMA weight as tc chooses it (datapath/core/src/qdisc/red.rs, ewma_wlog): ns-3 takes
    the weight itself (QW)."""
    a = burst + 1.0 - min_pkts
    for wlog in range(1, 32):
        w = 0.5 ** wlog
        if a <= (1.0 - (1.0 - w) ** burst) / w:
            return w
    return 0.5 ** 31


def queue_attributes(direction: DirectionSpec, field: str) -> dict[str, str]:
    """The ns-3 attributes of a direction's queue disc, from the parameters as they resolve."""
    q = direction.queue
    if q.discipline not in QUEUE_DISCS:
        raise SpecError(f"ns-3 has no {q.discipline} queue disc; choose one of {', '.join(QUEUE_DISCS)}",
                        field=f"{field}.queue.discipline")
    p = q.resolved(direction.rate_bps)
    attrs = {"MaxSize": f"{q.packets}p" if q.packets else f"{q.bytes}B"}
    if q.discipline in (DisciplineName.CODEL, DisciplineName.FQ_CODEL):
        attrs.update(Target=_ns(p.target_ns), Interval=_ns(p.interval_ns), UseEcn=_bool(p.ecn))
    if q.discipline == DisciplineName.CODEL:
        attrs["MinBytes"] = str(p.mtu_bytes)
    elif q.discipline == DisciplineName.FQ_CODEL:
        attrs.update(Flows=str(p.flows), DropBatchSize=str(p.drop_batch))
    elif q.discipline == DisciplineName.RED:
        per_pkt = 1 if q.packets else p.avpkt_bytes
        attrs.update(MinTh=str(p.min), MaxTh=str(p.max), LInterm=repr(1 / p.probability),
                     MeanPktSize=str(p.avpkt_bytes), QW=repr(ewma_weight(p.min / per_pkt, p.burst_pkts)),
                     LinkBandwidth=f"{p.bandwidth_bps}bps", UseEcn=_bool(p.ecn),
                     UseHardDrop=_bool(p.harddrop), Gentle=_bool(p.gentle), ARED=_bool(p.adaptive))
    elif q.discipline == DisciplineName.PIE:
        attrs.update(QueueDelayReference=_ns(p.target_ns), Tupdate=_ns(p.tupdate_ns), A=repr(p.alpha),
                     B=repr(p.beta), MaxBurstAllowance=_ns(p.max_burst_ns), UseEcn=_bool(p.ecn),
                     MarkEcnThreshold=repr(p.ecn_prob), UseDequeueRateEstimator=_bool(p.dq_rate_estimator))
    elif q.discipline == DisciplineName.DUALPI2:
        attrs.update(Target=_ns(p.target_ns), Tupdate=_ns(p.tupdate_ns), Alpha=repr(p.alpha), Beta=repr(p.beta),
                     StepThreshold=_ns(p.step_thresh_ns), StepPackets=str(p.step_packets or 0),
                     MinQlenStep=str(p.min_qlen_step), CouplingFactor=str(p.coupling_factor),
                     ClassicProtection=str(p.classic_protection_percent), EcnMask=p.ecn_mask,
                     DropOnOverload=_bool(p.drop_on_overload), DropEarly=_bool(p.drop_early),
                     Mtu=str(p.mtu_bytes))
        if p.memory_limit_bytes is not None:  # else the disc derives it, as the core does
            attrs["MemoryLimit"] = str(p.memory_limit_bytes)
    return attrs


def check(exp: Experiment) -> None:
    """Refuse, with the spec's field, what the ns-3 scenario cannot model."""
    if exp.probes.pcap:
        raise SpecError("the ns-3 backend takes no packet captures; leave pcap out, or run it emulated",
                        field="probes.pcap")
    for index, link in enumerate(exp.topology.links):
        field = f"topology.links[{index}]"
        if link.queue_at == "sender":
            raise SpecError("ns-3 models a queue on the link, not a NIC's at the sender; leave queue_at out",
                            field=f"{field}.queue_at")
        for which in ("forward", "reverse"):
            d = getattr(link, which)
            if d.trace is not None:
                raise SpecError("the ns-3 backend takes a constant rate, not a trace", field=f"{field}.{which}.trace")
            if d.jitter_ns:
                raise SpecError("the ns-3 backend has no jitter; leave it out", field=f"{field}.{which}.jitter")
            queue_attributes(d, f"{field}.{which}")
    for w in exp.workloads:
        field = f"workloads[{w.index}]"  # its table's place in the spec (a disabled one counts)
        if w.kind not in WORKLOADS:
            raise SpecError(f"the ns-3 backend runs {', '.join(WORKLOADS)} workloads, not {w.kind}",
                            field=f"{field}.kind")
        if isinstance(w, (Bulk, Web)) and w.cc not in CONGESTION_CONTROLS:
            raise SpecError(f"ns-3 has no {w.cc}; choose one of {', '.join(CONGESTION_CONTROLS)}", field=f"{field}.cc")
        if isinstance(w, Bulk) and w.buffer_bytes is not None:
            raise SpecError("the ns-3 backend sizes TCP buffers as Linux autotunes them; leave buffer out",
                            field=f"{field}.buffer")
        # A ping's codepoints are its TOS byte (ns-3's Ping sends it whole); a bulk flow's ecn =
        # "ect1" is what ns-3's TcpDctcp sends anyway (its cc is dctcp): accepted.
        if not isinstance(w, Ping) and getattr(w, "dscp", 0):
            raise SpecError("the ns-3 backend marks only pings; leave dscp out, or run it emulated",
                            field=f"{field}.dscp")


def scenario(exp: Experiment, raw: Path, ports: dict[str, int]) -> str:
    """The driver's scenario; queue logs of the probed directions go into `raw`."""
    check(exp)
    lines = [f"# bloatlab experiment {exp.name}",
             f"run duration_ns={exp.duration_ns} seed={exp.seed} run=1"]
    lines += [f"node {name}" for name in exp.topology.node_names()]
    for link in exp.topology.links:
        opts: dict[str, Any] = {}
        for which, prefix in (("forward", "f."), ("reverse", "r.")):
            d: DirectionSpec = getattr(link, which)
            name = link.direction_name(which)
            opts.update({f"{prefix}name": name, f"{prefix}rate_bps": d.rate_bps or 0, f"{prefix}delay_ns": d.delay_ns,
                         f"{prefix}loss": repr(d.loss), f"{prefix}discipline": d.queue.discipline})
            opts.update({f"{prefix}q.{k}": v for k, v in queue_attributes(d, "topology").items()})
            if name in exp.probes.queue:
                opts[f"{prefix}qlog"] = str(raw / "qlog" / f"{link.name}.{which}.qlog")
        lines.append(f"link {link.name} {link.ends[0]} {link.ends[1]} " + " ".join(f"{k}={v}" for k, v in opts.items()))
    for w in exp.workloads:
        common = f"start_ns={w.start_ns} stop_ns={w.stop_ns}"
        if isinstance(w, Bulk):
            lines.append(f"bulk {w.name} {w.src} {w.dst} {common} cc={w.cc} port={ports[w.name]}")
        elif isinstance(w, Ping):
            lines.append(f"ping {w.name} {w.src} {w.dst} {common} interval_ns={w.interval_ns} "
                         f"tos={dscp.tos(w.dscp, w.ecn)}")
        elif isinstance(w, Web):
            lines.append(f"web {w.name} {w.server} {w.client} {common} every_ns={w.every_ns} count={w.count} "
                         f"timeout_ns={w.timeout_ns} size={w.size_bytes} cc={w.cc} port={ports[w.name]}")
    return "\n".join(lines) + "\n"


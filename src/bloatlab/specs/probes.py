"""An experiment's [probes]: what a run records beside its workloads (TCP state, the queues of
link directions, packet captures), each checked against the topology."""

from __future__ import annotations

from bloatlab.errors import SpecError, show
from bloatlab.specs.model import PCAP_LIMIT_BYTES, PCAP_MIN_LIMIT_BYTES, PCAP_SNAPLEN, PCAP_SNAPLEN_RANGE, TCP_PROBES, Probes, Topology
from bloatlab.specs.reading import check_keys, field_of
from bloatlab.specs.units import parse_size_bytes

PROBE_KEYS = ("tcp", "queue", "pcap", "pcap_snaplen", "pcap_limit")


def parse_probes(raw: object, topology: Topology, pcap: tuple[str, ...] = ()) -> Probes:
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

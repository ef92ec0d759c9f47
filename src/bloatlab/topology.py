"""A topology is data: hosts, switches and links with their per-direction parameters.

This module only describes and validates; `network.py` turns a Topology into namespaces,
veths and datapath processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# Largest frame a 1500-byte-MTU Ethernet link carries (no FCS): what the queue and the
# serialiser count, as the kernel's htb and pfifo do.
MTU_FRAME_BYTES = 1514

BACKENDS = ("auto", "userspace", "kernel")
DISCIPLINES = ("droptail", "drophead")


@dataclass(frozen=True)
class QueueSpec:
    """The queue in front of a link direction's serialiser."""

    discipline: str = "droptail"  # one of DISCIPLINES
    packets: int | None = 1000  # limit in packets (exclusive with bytes); 1000 = Linux txqueuelen
    bytes: int | None = None  # limit in bytes of Ethernet frames


@dataclass(frozen=True)
class DirectionSpec:
    """One direction of a link: arrival -> loss -> queue -> serialiser -> delay -> out."""

    rate_bps: int | None = None  # None: unlimited (no serialiser)
    trace: Path | None = None  # Mahimahi trace (exclusive with rate_bps)
    delay_ns: int = 0  # one-way propagation delay
    jitter_ns: int = 0  # uniform +-jitter on the delay, never reordering; <= delay_ns
    loss: float = 0.0  # random loss probability, 0 <= loss < 1
    queue: QueueSpec = field(default_factory=QueueSpec)

    @property
    def unlimited(self) -> bool:
        return self.rate_bps is None and self.trace is None


@dataclass(frozen=True)
class HostSpec:
    name: str


@dataclass(frozen=True)
class SwitchSpec:
    name: str


@dataclass(frozen=True)
class LinkSpec:
    name: str  # default "a-b" from ends
    ends: tuple[str, str]
    forward: DirectionSpec  # ends[0] -> ends[1]
    reverse: DirectionSpec  # ends[1] -> ends[0]
    backend: str = "auto"  # one of BACKENDS

    def direction_name(self, which: str) -> str:
        """"s0->h2" style name of a direction, as results key it."""
        a, b = self.ends
        return f"{a}->{b}" if which == "forward" else f"{b}->{a}"


@dataclass(frozen=True)
class Topology:
    hosts: dict[str, HostSpec]  # in file order: host i (from 1) gets 10.0.0.i
    switches: dict[str, SwitchSpec]
    links: list[LinkSpec]
    seed: int = 1  # root of every link direction's random generator

    def address(self, host: str) -> str:
        return f"10.0.0.{list(self.hosts).index(host) + 1}"

    def node_names(self) -> list[str]:
        return [*self.hosts, *self.switches]

    def direction_seed(self, link_index: int, which: str) -> int:
        """A distinct, reproducible seed per link direction."""
        return (self.seed * 1_000_003 + link_index * 2 + (0 if which == "forward" else 1)) & (2**63 - 1)


# Parsing (load_topology, parse_topology) is below.

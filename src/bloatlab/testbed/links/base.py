"""What a link backend is: one interface, several implementations (kernel.py, userspace.py).

Every backend takes the same LinkSpec and ends with the same thing seen from the nodes: an
interface in each end's namespace that carries the link. testbed/network.py decides names and
namespaces, brings the node ends up, and chooses a backend per link from what each one says
it cannot serve here (refusals); a backend builds what lies between the ends.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

from bloatlab.errors import BloatlabError, MachineError, SpecError
from bloatlab.specs.model import LinkSpec, Topology

DIRECTIONS = ("forward", "reverse")


@dataclass(frozen=True)
class Port:
    """One end of a link as a node sees it: an interface in a namespace."""

    ns: str
    iface: str


@dataclass(frozen=True)
class Refusal:
    """Why a backend cannot serve a link (on this machine, or on any)."""

    backend: str
    field: str  # within the link: "forward.delay_ns", "queue_at"
    what: str  # for messages: "delay"
    why: str = ""  # no machine could: why not
    missing_qdisc: str | None = None  # this machine lacks the kernel qdisc that would serve it
    fix: str = ""  # what would let this backend, or another, serve it

    def error(self, field: str, fix: str) -> BloatlabError:
        """The one-line error for the user, on `field` (the spec's), with `fix` unless it has its own."""
        if self.missing_qdisc:
            return MachineError(f"the {self.backend} backend needs the {self.missing_qdisc} qdisc for {self.what}, "
                                f"and this kernel has none (see bloatlab doctor); {fix}", field=field)
        return SpecError(f"the {self.backend} backend cannot serve {self.what} ({self.field}): {self.why}; "
                         f"{self.fix or fix}", field=field)


@dataclass(frozen=True)
class Captures:
    """pcapng captures of link directions, which only the userspace datapath can take: each
    captured direction's departures, and its drops, in two files in `dir`."""

    dir: Path
    directions: frozenset[str]  # "s0->h2"
    snaplen: int  # bytes kept of each frame
    limit_bytes: int  # the most each file grows to

    def paths(self, direction: str) -> tuple[Path, Path]:
        """The departures' file and the drops' file of `direction`."""
        return self.dir / capture_file(direction), self.dir / capture_file(direction, drops=True)


def capture_file(direction: str, drops: bool = False) -> str:
    """The file name of a direction's capture: "s0->h2" -> s0_to_h2.pcapng, s0_to_h2.drops.pcapng."""
    return direction.replace("->", "_to_") + (".drops" if drops else "") + ".pcapng"


@dataclass(frozen=True)
class Ect1Flow:
    """A scalable flow whose ECT(0) packets the datapath turns into ECT(1), the L4S identifier,
    where they enter the network: every TCP packet from host `src` to host `dst`, on the
    direction leaving `src` (Topology.first_hop), so that every queue on the way sees ECT(1).
    This kernel's TCP sends ECT(0) even for DCTCP. `field` is the spec's, for errors."""

    src: str
    dst: str
    field: str  # "workloads[0].ecn"


@dataclass(frozen=True)
class Site:
    """Where and how a network's links are built: what every backend is made with."""

    topology: Topology
    dp_ns: str  # the namespace between the nodes, where links are built
    state_dir: Path  # the network's /run/bloatlab/NAME
    detach: bool = False  # processes outlive the one that built them (bloatlab up)
    qlog_dir: Path | None = None  # queue logs of userspace links, if wanted
    qlog_directions: set[str] | None = None  # of these directions ("s0->h2"); None: all
    captures: Captures | None = None  # pcapng captures of userspace link directions
    inner_switches: frozenset[str] = frozenset()  # switches the datapath serves inside itself
    punctual: bool = False  # the datapath spins through the machine's late wake-ups (datapath.PUNCTUAL)
    # Per userspace direction ("h1->s0"), the (source, destination) IPv4 addresses of the TCP
    # packets it turns from ECT(0) into ECT(1) as they arrive (Ect1Flow).
    ect1_rewrite: dict[str, tuple[tuple[str, str], ...]] = dataclasses.field(default_factory=dict)


class Daemon(Protocol):
    """A process a backend leaves running for the network (bloatlab-link: testbed.datapath)."""

    pid: int
    starttime: int | None
    stats_path: Path | None

    def stop(self) -> bool:
        """End it (it flushes what it writes first); whether it was running."""


class LinkBackend(ABC):
    """Builds links of one kind: add_link for each, then start once all exist."""

    name: ClassVar[str]
    # What the backend left running, which the network records and stops first when it comes down.
    daemon: Daemon | None = None

    def __init__(self, site: Site):
        self.site = site

    @classmethod
    @abstractmethod
    def refusals(cls, link: LinkSpec, kernel_qdiscs: dict[str, bool]) -> list[Refusal]:
        """What stops this backend from serving `link` here; none: it can."""

    @abstractmethod
    def add_link(self, index: int, link: LinkSpec, a: Port, b: Port) -> None:
        """Create the link between a (ends[0]) and b (ends[1]); the ports are left down."""

    def start(self) -> None:
        """Called once every link of the network exists. What it starts, network.py stops."""


def middle_ifaces(index: int) -> tuple[str, str]:
    """Link `index`'s interfaces in the datapath namespace, toward ends[0] and ends[1]."""
    return f"l{index}a", f"l{index}b"

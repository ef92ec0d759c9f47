"""The typed model of an experiment: queues, link directions, links, topologies, workloads,
probes. Plain frozen data that the parsers (queues.py, topology.py, workloads.py, probes.py,
experiment.py) produce and every layer above reads; nothing here parses text or touches the
machine.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bloatlab.specs import disciplines

BACKENDS = ("auto", "userspace", "kernel")
# Where a link's queue sits: "link", between the ends as in a router (both backends); or
# "sender", on the sending node's own interface as a NIC's queue is (kernel backend only).
QUEUE_AT = ("link", "sender")
PARAM_TYPES = ("rate", "duration", "size", "int", "float", "percent", "dscp", "cc", "string")
OFFERED = "offered"  # a cc parameter's sweep value: every congestion control the machine offers
WORKLOAD_KINDS = ("bulk", "udp", "ping", "irtt", "web", "responsiveness")
DIRECTIONS = ("down", "up", "both")  # a responsiveness test's, seen from its client
TCP_PROBES = ("auto", "tracepoint", "ss", "off")
# Where an experiment runs: emulated (namespaces, real TCP, bloatlab's links) or simulated in ns-3.
RUN_BACKENDS = ("emulation", "ns3")
# Captures: 128 bytes hold the Ethernet, IP and TCP headers with every option, which is what
# Wireshark's TCP analysis reads; 262144 (tcpdump's) keeps whole frames.
PCAP_SNAPLEN = 128
PCAP_SNAPLEN_RANGE = (14, 262_144)
PCAP_LIMIT_BYTES = 100_000_000  # per file: 550k headers, some 7 s of a saturated 1 Gbit/s link
PCAP_MIN_LIMIT_BYTES = 4096  # the files' header blocks and a frame or two
DEFAULT_WEB_SIZE_BYTES = 180_000  # about the index page the CS244 original fetched


# Topology ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class QueueSpec:
    """The queue in front of a link direction's serialiser."""

    discipline: disciplines.DisciplineName = disciplines.DisciplineName.DROPTAIL
    packets: int | None = disciplines.CATALOGUE[disciplines.DisciplineName.DROPTAIL].packets  # limit in packets
    bytes: int | None = None  # limit in bytes of Ethernet frames (exclusive with packets)
    # The parameters the spec set, as the discipline's record (disciplines.CoDelParams, ...):
    # None for those it did not, where the catalogue's defaults stand. None here: none set.
    params: disciplines.Params | None = None

    def __post_init__(self) -> None:
        # A name given as text (QueueSpec("codel")) is the catalogue's.
        object.__setattr__(self, "discipline", disciplines.DisciplineName(self.discipline))
        record = disciplines.CATALOGUE[self.discipline].record
        if self.params is None:
            object.__setattr__(self, "params", record())
        elif type(self.params) is not record:
            raise TypeError(f"a {self.discipline} queue takes {record.__name__}, not {type(self.params).__name__}")

    def to_dict(self) -> dict[str, Any]:
        """The queue as the spec gave it: the limit and the parameters it set (config names)."""
        params = disciplines.to_config(self.discipline, self.params)
        return {"discipline": self.discipline, "packets": self.packets, "bytes": self.bytes,
                **{name: value for name, value in params.items() if value is not None}}

    def resolved(self, rate_bps: int | None) -> disciplines.Params:
        """Every parameter of the discipline: what the spec set over the catalogue's defaults,
        derived ones computed. `rate_bps` is the direction's rate."""
        return disciplines.resolve(self.discipline, self.packets, self.bytes, self.params, rate_bps)

    def config(self, rate_bps: int | None) -> dict[str, Any]:
        """The datapath config's "queue" object: the limit and every parameter, resolved, under
        the config's names (as run.json records it too)."""
        return {"discipline": self.discipline, "packets": self.packets, "bytes": self.bytes,
                **disciplines.to_config(self.discipline, self.resolved(rate_bps))}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QueueSpec:
        """The inverse of to_dict()."""
        name = disciplines.DisciplineName(data["discipline"])
        params = {key: value for key, value in data.items() if key not in disciplines.LIMIT_KEYS}
        return cls(discipline=name, packets=data.get("packets"), bytes=data.get("bytes"),
                   params=disciplines.from_config(name, params))


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate_bps": self.rate_bps,
            "trace_path": str(self.trace) if self.trace else None,
            "delay_ns": self.delay_ns,
            "jitter_ns": self.jitter_ns,
            "loss": self.loss,
            "queue": self.queue.to_dict(),
        }


@dataclass(frozen=True)
class HostSpec:
    name: str
    # The host's default TCP congestion control (what iperf3 without -C uses); None keeps the
    # machine's. Workloads name their own per socket.
    cc: str | None = None


@dataclass(frozen=True)
class SwitchSpec:
    name: str
    # A namespace of its own with a Linux bridge, where commands can run. Without it, a switch
    # whose links bloatlab's datapath serves is served inside the datapath (no namespace, no
    # veths: a frame crosses the switch without leaving the process).
    namespace: bool = False


@dataclass(frozen=True)
class LinkSpec:
    name: str  # default "a-b" from ends
    ends: tuple[str, str]
    forward: DirectionSpec  # ends[0] -> ends[1]
    reverse: DirectionSpec  # ends[1] -> ends[0]
    backend: str = "auto"  # one of BACKENDS
    queue_at: str = "link"  # one of QUEUE_AT

    def direction_name(self, which: str) -> str:
        """"s0->h2" style name of a direction, as results key it."""
        a, b = self.ends
        return f"{a}->{b}" if which == "forward" else f"{b}->{a}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ends": list(self.ends),
            "backend": self.backend,
            "queue_at": self.queue_at,
            "forward": {"direction": self.direction_name("forward"), **self.forward.to_dict()},
            "reverse": {"direction": self.direction_name("reverse"), **self.reverse.to_dict()},
        }


@dataclass(frozen=True)
class Topology:
    hosts: dict[str, HostSpec]  # in file order: host i (from 1) gets 10.0.0.i
    switches: dict[str, SwitchSpec]
    links: list[LinkSpec]
    seed: int = 1  # root of every link direction's random generator
    cc: str | None = None  # every host's congestion control, unless the host names its own

    def host_cc(self, host: str) -> str | None:
        """The congestion control `host` is given, or None: the machine's default."""
        return self.hosts[host].cc or self.cc

    def address(self, host: str) -> str:
        return f"10.0.0.{list(self.hosts).index(host) + 1}"

    def first_hop(self, host: str) -> tuple[int, str]:
        """Where `host`'s packets enter the network: its link (a host has exactly one), as its
        index, and the direction leaving the host ("forward" when the host is ends[0])."""
        index = next(i for i, link in enumerate(self.links) if host in link.ends)
        return index, "forward" if self.links[index].ends[0] == host else "reverse"

    def node_names(self) -> list[str]:
        return [*self.hosts, *self.switches]

    def direction_seed(self, link_index: int, which: str) -> int:
        """A distinct, reproducible seed per link direction."""
        return (self.seed * 1_000_003 + link_index * 2 + (0 if which == "forward" else 1)) & (2**63 - 1)

    def to_dict(self) -> dict[str, Any]:
        """The resolved topology, JSON-ready, for results files: every default filled in,
        units in the key names, and the seed each link direction draws from."""
        links = []
        for index, link in enumerate(self.links):
            resolved = link.to_dict()
            for which in ("forward", "reverse"):
                resolved[which]["seed"] = self.direction_seed(index, which)
            links.append(resolved)
        return {
            "seed": self.seed,
            "cc": self.cc,
            "hosts": [{"name": name, "address": self.address(name), "cc": spec.cc} for name, spec in self.hosts.items()],
            "switches": [{"name": name, "namespace": spec.namespace} for name, spec in self.switches.items()],
            "links": links,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Topology:
        """The inverse of to_dict()."""

        def direction(d: dict[str, Any]) -> DirectionSpec:
            return DirectionSpec(
                rate_bps=d["rate_bps"],
                trace=Path(d["trace_path"]) if d.get("trace_path") else None,
                delay_ns=d["delay_ns"], jitter_ns=d["jitter_ns"], loss=d["loss"],
                queue=QueueSpec.from_dict(d["queue"]),
            )

        links = [LinkSpec(name=link["name"], ends=tuple(link["ends"]), forward=direction(link["forward"]),
                          reverse=direction(link["reverse"]), backend=link["backend"],
                          queue_at=link.get("queue_at", "link"))
                 for link in data["links"]]
        return cls(hosts={h["name"]: HostSpec(h["name"], h.get("cc")) for h in data["hosts"]},
                   switches={s["name"]: SwitchSpec(s["name"], s.get("namespace", False)) for s in data["switches"]},
                   links=links, seed=data["seed"], cc=data.get("cc"))


# Experiment --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Param:
    name: str
    type: str  # one of PARAM_TYPES
    default: Any
    help: str = ""
    choices: tuple[Any, ...] | None = None
    min: float | None = None
    max: float | None = None
    # Values run in turn when the parameter is not --set (`sweep = true`: every choice).
    sweep: tuple[Any, ...] | None = None
    label: str = ""  # what it is in a few words, for a sweep's axes and titles ("queue size, packets")
    tag: bool = False  # a run's default directory name carries NAMEVALUE (cs244-maxq20-...)


@dataclass(frozen=True)
class Workload:
    """Common to every workload: a name (also its flow's name), a kind and a schedule."""

    name: str
    kind: str
    start_ns: int  # since the run's t0
    stop_ns: int  # when it ends; the run's duration unless given
    index: int = 0  # its place in the spec's [[workloads]] (disabled ones count): errors name it

    @property
    def window_s(self) -> float:
        return (self.stop_ns - self.start_ns) / 1e9


@dataclass(frozen=True)
class FromTo(Workload):
    """Traffic from host `src` to host `dst` (the spec's `from` and `to`)."""

    src: str = ""
    dst: str = ""


@dataclass(frozen=True)
class Bulk(FromTo):
    """A long-lived TCP flow, iperf3 client in src, server in dst."""

    cc: str = "cubic"
    buffer_bytes: int | None = None  # socket buffer (iperf3 -w); None: the kernel's autotuning
    dscp: int = 0  # the codepoint its packets carry (specs/dscp.py)
    # "ect1": its ECT(0) packets become ECT(1), the L4S identifier, where they enter the datapath
    # (a scalable cc only: dctcp); None: the ECN codepoint its congestion control sends.
    ecn: str | None = None
    # The name of the [[workloads]] table whose `count` made this flow one of several (named
    # GROUP-1 .. GROUP-N); None: the table's only flow, named as the table.
    group: str | None = None


@dataclass(frozen=True)
class Udp(FromTo):
    """iperf3 UDP at a constant rate from src to dst."""

    rate_bps: int = 0
    dscp: int = 0


@dataclass(frozen=True)
class Ping(FromTo):
    """ICMP echo from src to dst every interval."""

    interval_ns: int = 100 * 10**6
    dscp: int = 0
    ecn: str = "not-ect"  # the echo requests' ECN codepoint (specs/dscp.py's ECN)


@dataclass(frozen=True)
class Irtt(FromTo):
    """UDP round trips with irtt: a server in dst, a client in src sending every interval."""

    interval_ns: int = 100 * 10**6
    dscp: int = 0
    ecn: str = "not-ect"  # the requests' ECN codepoint


@dataclass(frozen=True)
class Web(Workload):
    """An HTTP server in `server` with one object; `client` fetches it `count` times in a row
    every `every_ns`, each fetch given at most `timeout_ns`. The server's connections use
    congestion control `cc` (set as the server host's default)."""

    server: str = ""
    client: str = ""
    size_bytes: int = DEFAULT_WEB_SIZE_BYTES
    every_ns: int = 5 * 10**9
    count: int = 3
    timeout_ns: int = 30 * 10**9
    cc: str = "cubic"


@dataclass(frozen=True)
class Responsiveness(Workload):
    """The IETF responsiveness test (RPM): an HTTP/2 server in `server`, the test's client in
    `client`, loading the path `direction` (down: server to client) for at most the window.
    `cc`: the congestion control of the test's connections at both ends (the server's through a
    route with congctl); None keeps each host's."""

    server: str = ""
    client: str = ""
    direction: str = "down"  # one of DIRECTIONS
    cc: str | None = None


@dataclass(frozen=True)
class Probes:
    tcp: str = "auto"  # one of TCP_PROBES; auto = the tracepoint where it exists, else ss
    queue: tuple[str, ...] = ()  # link directions ("s0->h2") whose queue is recorded
    pcap: tuple[str, ...] = ()  # link directions whose departures and drops are captured
    pcap_snaplen: int = PCAP_SNAPLEN  # bytes kept of each frame
    pcap_limit_bytes: int = PCAP_LIMIT_BYTES  # the most each capture file grows to

    def to_dict(self) -> dict[str, Any]:
        return {"tcp": self.tcp, "queue": list(self.queue), "pcap": list(self.pcap),
                "pcap_snaplen": self.pcap_snaplen, "pcap_limit_bytes": self.pcap_limit_bytes}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Probes:
        """The inverse of to_dict()."""
        return cls(tcp=data["tcp"], queue=tuple(data["queue"]), pcap=tuple(data["pcap"]),
                   pcap_snaplen=data["pcap_snaplen"], pcap_limit_bytes=data["pcap_limit_bytes"])


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    topology: Topology
    workloads: tuple[Workload, ...]
    probes: Probes
    duration_ns: int
    seed: int
    params: dict[str, Any] = field(default_factory=dict)  # name -> value used
    repeat: int = 1  # runs per sweep point unless --repeat says otherwise
    preset: str | None = None
    source: str | None = None  # the spec file, or "preset NAME"
    backend: str = "emulation"  # one of RUN_BACKENDS: namespaces and links, or simulated in ns-3
    # The parameters (`tag = true`) a default run directory is named by: the spec's declaration,
    # not what ran (run.json does not keep it).
    tags: tuple[str, ...] = field(default=(), compare=False)
    # The userspace datapath wakes early enough for the machine's latest wake-ups and spins
    # through them, for departures as punctual as the machine allows (docs/datapath.md, "Punctual").
    punctual: bool = False

    @property
    def duration_s(self) -> float:
        return self.duration_ns / 1e9

    def repetition(self, rep: int) -> Experiment:
        """Repetition `rep` (from 1) of this experiment: its seeds moved on by rep - 1, so the
        emulated loss and hashing differ between repetitions yet each stays reproducible."""
        if rep == 1:
            return self
        return dataclasses.replace(self, seed=self.seed + rep - 1,
                                   topology=dataclasses.replace(self.topology, seed=self.topology.seed + rep - 1))

    def with_link_backends(self, backends: dict[str, str]) -> Experiment:
        """This experiment with the named links' backends fixed (a sweep's one choice for all
        of its points)."""
        links = tuple(dataclasses.replace(link, backend=backends.get(link.name, link.backend))
                      for link in self.topology.links)
        return dataclasses.replace(self, topology=dataclasses.replace(self.topology, links=links))

    def to_dict(self) -> dict[str, Any]:
        """The resolved experiment, JSON-ready (for run.json)."""
        # A flow of no group leaves out `group`: run.json stays as it was before counts.
        workloads = [{k: v for k, v in w.__dict__.items() if not (k == "group" and v is None)}
                     for w in self.workloads]
        return {
            "name": self.name, "description": self.description, "duration_s": self.duration_s,
            "seed": self.seed, "repeat": self.repeat, "topology": self.topology.to_dict(), "workloads": workloads,
            "probes": self.probes.to_dict(), "backend": self.backend, "punctual": self.punctual,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, params: dict[str, Any] | None = None, preset: str | None = None,
                  source: str | None = None) -> Experiment:
        """The inverse of to_dict(), with what run.json keeps beside it (params, preset, source):
        a run's own record of what it ran, read back without its spec file."""
        return cls(name=data["name"], description=data["description"],
                   topology=Topology.from_dict(data["topology"]),
                   workloads=tuple(WORKLOAD_TYPES[w["kind"]](**w) for w in data["workloads"]),
                   probes=Probes.from_dict(data["probes"]), duration_ns=round(data["duration_s"] * 1e9),
                   seed=data["seed"], repeat=data.get("repeat", 1), params=dict(params or {}), preset=preset, source=source,
                   backend=data.get("backend", "emulation"), punctual=data.get("punctual", False))


# Each workload kind's spec (WORKLOAD_KINDS, in order).
WORKLOAD_TYPES: dict[str, type[Workload]] = {"bulk": Bulk, "udp": Udp, "ping": Ping, "irtt": Irtt, "web": Web,
                                             "responsiveness": Responsiveness}

"""A Network turns a Topology into namespaces, veths, bridges, qdiscs and a datapath process.

This is the only module that builds. Names:
    namespaces   bloatlab.NET.NODE for each host and switch, bloatlab.NET._dp for the datapath
    interfaces   <host>-eth0 on a host; <switch>-eth<i> on a switch, i counting its links from 0
    switches     inside the datapath where every link of the switch is a userspace one (no
                 namespace, no interface: bloatlab-link forwards between the links), unless
                 the spec gives it a namespace; else a Linux bridge br0 in the switch's
                 namespace, every port enslaved
    hosts        10.0.0.N/24 (Topology.address) and /etc/netns/bloatlab.NET.HOST/hosts naming
                 every host, which `ip netns exec` mounts as /etc/hosts
Everything built is recorded in /run/bloatlab/NET (state.py) before it is built, so `down`
and `clean` find it again, also after a crash. So are the congestion controls its sockets use:
one the kernel lacks (dctcp) is provided by congestion.py before the hosts are built, and a BPF
stand-in registered for it is unregistered once no network's state names it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from bloatlab import interrupts, proc
from bloatlab.errors import BloatlabError, MachineError, SpecError
from bloatlab.specs.model import LinkSpec, Topology
from bloatlab.testbed import capabilities, congestion, netns, state
from bloatlab.testbed.datapath import BINARY_NAME as DATAPATH_BINARY, Datapath
from bloatlab.testbed.datapath_stats import DatapathStats
from bloatlab.testbed.links.base import DIRECTIONS, Captures, Ect1Flow, LinkBackend, Port, Site, middle_ifaces
from bloatlab.testbed.links.kernel import KernelBackend, qdiscs_wanted
from bloatlab.testbed.links.userspace import UserspaceBackend

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"[a-z][a-z0-9-]{0,15}")
PREFIX = "bloatlab"
NETNS_PREFIXES = (f"{PREFIX}.", f"{PREFIX}-")  # what `clean` removes: networks' and tools' namespaces
ETC_NETNS = Path("/etc/netns")
# A claim writes its state file a moment after making the directory: an older one without it
# is what a cut-short removal left.
UNREGISTERED_AGE_S = 60
IFNAME_MAX = 15  # Linux IFNAMSIZ - 1
BRIDGE = "br0"
DP_NODE = "_dp"
CC_SYSCTL = "net.ipv4.tcp_congestion_control"
RS_SYSCTL = "net.ipv6.conf.default.router_solicitations"

# The link backends, by the name a spec chooses them with; "auto" tries them in this order.
LINK_BACKENDS: dict[str, type[LinkBackend]] = {b.name: b for b in (KernelBackend, UserspaceBackend)}
AUTO_ORDER = ("kernel", "userspace")


def choose_backend(link: LinkSpec, kernel_qdiscs: dict[str, bool], index: int | None = None,
                   captured: str | None = None, ect1: Ect1Flow | None = None) -> str:
    """The backend that serves `link`: the one it names, or with "auto" the first in AUTO_ORDER
    that can serve everything it asks here. A backend the link names that cannot serve it, or
    none under "auto", is a one-line error naming the field to change. A link with a `captured`
    direction needs the userspace datapath, the one that sees every packet and every drop; so
    does the first hop of an `ect1` flow, whose packets it marks ECT(1)."""
    def field(key: str) -> str:
        return f"links[{index}].{key}" if index is not None else f"link {link.name}: {key}"

    if captured is not None:
        if link.backend == "kernel":
            raise SpecError(f"the kernel backend cannot capture {captured} (probes.pcap): only bloatlab's "
                            'datapath sees each packet it sends and drops; use backend = "userspace" or "auto"',
                            field=field("backend"))
        link = dataclasses.replace(link, backend="userspace")
    if ect1 is not None:
        if link.backend == "kernel":
            raise SpecError(f"{ect1.src}'s packets enter the network on {link.name}, a kernel-backend link, and only "
                            "bloatlab's datapath sets ECT(1) where a flow enters; give that link backend = "
                            '"userspace" or "auto", or leave ecn out', field=ect1.field)
        link = dataclasses.replace(link, backend="userspace")
    if link.backend != "auto":
        refused = LINK_BACKENDS[link.backend].refusals(link, kernel_qdiscs)
        if refused:
            raise refused[0].error(field("backend"), 'use backend = "userspace" or "auto"')
        return link.backend
    refusals = {}
    for name in AUTO_ORDER:
        refusals[name] = LINK_BACKENDS[name].refusals(link, kernel_qdiscs)
        if not refusals[name]:
            return name
    # None can: why the first cannot, and what the last needs to (queue_at = "sender" is the kernel's alone).
    first, last = refusals[AUTO_ORDER[0]][0], refusals[AUTO_ORDER[-1]][0]
    raise first.error(field(last.field), last.fix)


def sweep_backends(topologies: Sequence[Topology], kernel_qdiscs: dict[str, bool],
                   datapath_only: frozenset[str] = frozenset()) -> dict[str, str]:
    """One backend per "auto" link for every point of a sweep (a topology per point: the same
    links, other parameters), so that one comparison never mixes two implementations: the
    first in AUTO_ORDER that serves the link at every point. A link that names its backend
    keeps it (each run checks it). A link with a direction in `datapath_only` (captured, or
    where a flow is marked ECT(1)) is the datapath's. None serving every point is a one-line
    error naming the link and why each backend cannot."""
    chosen: dict[str, str] = {}
    for index, link in enumerate(topologies[0].links):
        if link.backend != "auto":
            continue
        if datapath_only & {link.direction_name("forward"), link.direction_name("reverse")}:
            chosen[link.name] = "userspace"
            continue
        alike = [next(other for other in topo.links if other.name == link.name) for topo in topologies]
        refusals = {name: next((r for spec in alike for r in LINK_BACKENDS[name].refusals(spec, kernel_qdiscs)), None)
                    for name in AUTO_ORDER}
        name = next((name for name in AUTO_ORDER if refusals[name] is None), None)
        if name is None:
            why = "; ".join(f"{r.backend}: {r.what} ({'no ' + r.missing_qdisc + ' qdisc here' if r.missing_qdisc else r.why})"
                            for r in refusals.values() if r is not None)
            raise SpecError(f"no one backend serves this link at every point of the sweep ({why}); sweep the points "
                            "each backend can serve apart", field=f"links[{index}].backend")
        chosen[link.name] = name
    return chosen


def ect1_directions(topology: Topology, flows: Iterable[Ect1Flow]) -> dict[str, list[Ect1Flow]]:
    """The flows whose packets are marked ECT(1), by the direction where they enter the network
    ("h1->s0": the one leaving the sender, on its one link)."""
    out: dict[str, list[Ect1Flow]] = {}
    for flow in flows:
        index, which = topology.first_hop(flow.src)
        out.setdefault(topology.links[index].direction_name(which), []).append(flow)
    return out


def inner_switches(topology: Topology, backends: Sequence[str]) -> frozenset[str]:
    """The switches the userspace datapath serves inside itself: those whose every link it
    serves, and which the spec does not give a namespace (`namespace = true`). A frame then
    crosses them without leaving the process, whatever the number of links on its path."""
    served = {s for s in topology.switches if not topology.switches[s].namespace}
    for link, backend in zip(topology.links, backends):
        if backend != "userspace":
            served -= set(link.ends)
    return frozenset(served)


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise SpecError(f"{name!r} is not a valid network name; use 1 to 16 characters: a lowercase "
                        'letter, then lowercase letters, digits or "-" (e.g. t1)', field="name")
    if name == state.NIC_DIR.name:
        raise SpecError(f"{name!r} is taken by bloatlab nic's journals ({state.NIC_DIR}); give the network "
                        "another name (one made before this rule goes with: bloatlab clean --all)", field="name")
    return name


def namespace(network: str, node: str) -> str:
    return f"{PREFIX}.{network}.{node}"


def interface_names(topology: Topology) -> list[tuple[str, str]]:
    """For each link, the interface names at ends[0] and ends[1]."""
    next_port = {node: 0 for node in topology.node_names()}
    names = []
    for link in topology.links:
        pair = []
        for node in link.ends:
            pair.append(f"{node}-eth{next_port[node]}")
            next_port[node] += 1
        names.append((pair[0], pair[1]))
    return names


def hosts_file(topology: Topology) -> str:
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [f"{topology.address(host)}\t{host}" for host in topology.hosts]
    return "\n".join(lines) + "\n"


class Network:
    """A built (or to-be-built) topology under a name.

        with Network(topology, "t1") as net:
            net.exec("h1", ["ping", "-c", "1", "h2"], check=True)
    """

    def __init__(self, topology: Topology, name: str, detach: bool = False, *,
                 qlog_dir: Path | None = None, qlog_directions: set[str] | None = None,
                 captures: Captures | None = None, topology_path: str | Path | None = None,
                 punctual: bool = False, congestion_controls: Iterable[str] = (),
                 ect1_flows: Iterable[Ect1Flow] = ()):
        self.topology = topology
        self.name = check_name(name)
        self.detach = detach  # the datapath outlives this process (bloatlab up)
        self.qlog_dir = qlog_dir  # queue logs of userspace links, if wanted
        self.qlog_directions = qlog_directions  # of these directions ("s0->h2"); None: all
        self.captures = captures  # pcapng captures of userspace link directions, if wanted
        self.punctual = punctual  # the datapath spins through the machine's late wake-ups
        self.topology_path = str(topology_path) if topology_path is not None else None
        self.backends: list[str] = []  # per link, known after up() or attach()
        self.host_cc: dict[str, str] = {}  # each host's default congestion control, after up() or attach()
        # The congestion controls the hosts' sockets will use (the workloads'), by the spec's
        # names, beside the hosts' defaults; the kernel's name for each, after up() or attach().
        self.congestion_controls = tuple(dict.fromkeys(congestion_controls))
        # Flows whose ECT(0) packets the datapath marks ECT(1) where they enter it (scalable ones).
        self.ect1_flows = ect1_directions(topology, ect1_flows)
        self.cc_names: dict[str, str] = {}
        self._state: state.NetworkState | None = None
        self._datapath: Datapath | None = None  # the userspace links' bloatlab-link, if any
        # The datapath's stats file as it was written on exit (counters per reason), after down().
        self.final_datapath_stats: DatapathStats | None = None

    # Names ------------------------------------------------------------------------------

    @property
    def state_dir(self) -> Path:
        return state.state_dir(self.name)

    @property
    def datapath_namespace(self) -> str:
        """Where links are built between the nodes: bloatlab-link's veth ends, and the bridges
        and qdiscs of kernel-backend links."""
        return namespace(self.name, DP_NODE)

    def namespace(self, node: str) -> str:
        if node not in self.topology.hosts and node not in self.topology.switches:
            nodes = ", ".join(self.topology.node_names())
            raise SpecError(f"no host {node!r} in network {self.name} (it has: {nodes})", field="host")
        if node in self.inner_switches:
            raise SpecError(f"switch {node} of network {self.name} is served inside the datapath and has no namespace "
                            f"to run commands in; to give it one (a Linux bridge), write namespace = true in its "
                            f"[switches.{node}] table", field="host")
        return namespace(self.name, node)

    @property
    def inner_switches(self) -> frozenset[str]:
        """The switches served inside the datapath (known once the backends are)."""
        return inner_switches(self.topology, self.backends)

    def node_namespaces(self) -> dict[str, str]:
        """Every node that has a namespace, with it: the hosts, and the switches not served
        inside the datapath."""
        return {node: namespace(self.name, node) for node in self.topology.node_names()
                if node not in self.inner_switches}

    def address(self, host: str) -> str:
        self.namespace(host)  # the same error for an unknown host
        return self.topology.address(host)

    def congestion_control(self, cc: str) -> str:
        """The kernel's name for the spec's congestion control `cc` on this network's hosts: the
        name itself, or its BPF stand-in's (dctcp: bloatlab_dctcp where the kernel has none)."""
        return self.cc_names.get(cc, cc)

    def _wanted_congestion(self) -> list[str]:
        """Every congestion control the hosts use: their defaults, then the workloads'."""
        defaults = [cc for host in self.topology.hosts if (cc := self.topology.host_cc(host)) is not None]
        return list(dict.fromkeys([*defaults, *self.congestion_controls]))

    @property
    def datapath(self) -> Datapath | None:
        return self._datapath

    # Running things in hosts ------------------------------------------------------------

    def exec(self, host: str, argv: Sequence[str], *, input: str | None = None,
             timeout_s: float | None = None, check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run argv in `host` to completion, its output captured (bloatlab.proc.run); by default
        for as long as it takes, as the command is the caller's."""
        return proc.run(argv, ns=self.namespace(host), input=input, timeout_s=timeout_s, check=check)

    def popen(self, host: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """Start argv in `host`; kwargs go to subprocess.Popen. down() ends it if it still runs."""
        return proc.spawn(argv, ns=self.namespace(host), **kwargs)

    # Building ---------------------------------------------------------------------------

    def _plan(self) -> list[tuple[Port, Port]]:
        """Check everything that can be checked before building; return each link's ports."""
        topo = self.topology
        if len(topo.hosts) > 254:
            raise SpecError(f"{len(topo.hosts)} hosts do not fit 10.0.0.0/24; use at most 254", field="hosts")
        for host in topo.hosts:
            if topo.host_cc(host) is not None:
                field = f"hosts.{host}.cc" if topo.hosts[host].cc else "cc"
                congestion.check(topo.host_cc(host), field, as_default=True)
        kernel_able = [link for link in topo.links if link.backend != "userspace"]
        qdiscs = capabilities.kernel_qdiscs(qdiscs_wanted(kernel_able)) if kernel_able else {}
        captured = self.captures.directions if self.captures is not None else frozenset()
        self.backends = []
        for index, link in enumerate(topo.links):
            directions = [link.direction_name(which) for which in DIRECTIONS]
            self.backends.append(choose_backend(
                link, qdiscs, index, captured=next((d for d in directions if d in captured), None),
                ect1=next((flow for d in directions for flow in self.ect1_flows.get(d, ())), None)))
        if "userspace" in self.backends:
            capabilities.binary(DATAPATH_BINARY)  # missing, or of another version: said before building
        ports = [self._end_ports(index) for index in range(len(topo.links))]
        inner = self.inner_switches
        for index, pair in enumerate(ports):
            for node, port in zip(topo.links[index].ends, pair):
                if node not in inner and len(port.iface) > IFNAME_MAX:
                    raise SpecError(f"interface name {port.iface!r} is longer than Linux allows ({IFNAME_MAX}); "
                                    "use a shorter node name", field=f"links[{index}].ends")
        return ports

    @functools.cached_property
    def _interface_names(self) -> list[tuple[str, str]]:
        return interface_names(self.topology)

    def _end_ports(self, index: int) -> tuple[Port, Port]:
        """Link `index`'s interfaces in the namespaces of ends[0] and ends[1]."""
        link = self.topology.links[index]
        a, b = (Port(namespace(self.name, node), iface)
                for node, iface in zip(link.ends, self._interface_names[index]))
        return a, b

    def _in_middle(self, index: int) -> bool:
        """Whether link `index` is built in the datapath namespace (all but queue_at "sender")."""
        return self.backends[index] == "userspace" or self.topology.links[index].queue_at == "link"

    def _namespaces(self) -> list[str]:
        names = list(self.node_namespaces().values())
        if any(self._in_middle(index) for index in range(len(self.backends))):
            names.append(self.datapath_namespace)
        return names

    def queue_port(self, index: int, which: str) -> Port:
        """Where the qdiscs of a kernel-backend link direction sit ("forward" or "reverse")."""
        a, b = self._end_ports(index)
        return KernelBackend.qdisc_port(self.datapath_namespace, index, self.topology.links[index], a, b, which)

    def up(self, on_hosts: Callable[[], None] | None = None) -> Network:
        """Build the network. On any failure (or Ctrl-C) remove what was built, then re-raise.

        `on_hosts`, if given, runs as soon as every host has its addresses, while the links come
        up: a run starts its servers there, so that their start-up (a Python web server's is
        100 ms) overlaps the datapath's (20-60 ms) and the wait for the interfaces."""
        ports = self._plan()
        leftovers = _network_namespaces(self.name)
        if leftovers and not state.state_dir(self.name).exists():
            raise BloatlabError(f"namespaces of an earlier network {self.name} are left ({leftovers[0]}, ...); "
                                f"remove them with: bloatlab down {self.name}", field="name")
        self._state = state.NetworkState(
            name=self.name, topology=self.topology.to_dict(), namespaces=self._namespaces(),
            topology_path=self.topology_path, backends=self.backends, detached=self.detach,
            owner=dict(zip(("pid", "starttime"), proc.identify(os.getpid()))),
            congestion=dict.fromkeys(self._wanted_congestion(), ""))
        self._state.claim()  # from here on, everything we make can be found by name
        try:
            # Before the hosts, whose defaults may name them: the machine's, not a namespace's.
            self.cc_names = congestion.provide(self._state.congestion)
            self._state.congestion = dict(self.cc_names)
            self._state.save()
            self._build(ports, on_hosts)
            # A stop signal whose raise was lost (it landed in a finaliser, such as a finished
            # command's Popen.__del__: interrupts.py) undoes the build all the same.
            interrupts.check()
        except BaseException:
            self._teardown(quiet=True)
            raise
        return self

    def _build(self, ports: list[tuple[Port, Port]], on_hosts: Callable[[], None] | None) -> None:
        topo = self.topology
        # Closed before up() tears anything down: a socket into a namespace keeps it alive.
        with netns.Netlink() as netlink:
            self._build_hosts(netlink)
            self._build_switches(netlink)
            if self.datapath_namespace in self._namespaces():
                netns.add(self.datapath_namespace)
                self._silence_ipv6([self.datapath_namespace])
            site = Site(topo, self.datapath_namespace, self.state_dir, detach=self.detach, qlog_dir=self.qlog_dir,
                        qlog_directions=self.qlog_directions, captures=self.captures,
                        inner_switches=self.inner_switches, punctual=self.punctual,
                        ect1_rewrite={direction: tuple(dict.fromkeys((topo.address(f.src), topo.address(f.dst))
                                                                     for f in flows))
                                      for direction, flows in self.ect1_flows.items()})
            builders = {name: LINK_BACKENDS[name](site) for name in dict.fromkeys(self.backends)}
            for index, (link, (a, b)) in enumerate(zip(topo.links, ports)):
                builders[self.backends[index]].add_link(index, link, a, b)
            self._bring_up_ends(netlink, ports)

            if on_hosts is not None:
                on_hosts()
            inner = self.inner_switches
            ends = [port for link, pair in zip(topo.links, ports) for node, port in zip(link.ends, pair)
                    if node not in inner]
            ends += [Port(self.datapath_namespace, iface) for index, link in enumerate(topo.links)
                     if self._in_middle(index) for node, iface in zip(link.ends, middle_ifaces(index))
                     if node not in inner]
            self._wait_until_running(ends)
        for builder in builders.values():
            builder.start()  # once, after every veth exists
            if builder.daemon is not None:
                self._datapath = builder.daemon
                self._state.datapath = {"pid": self._datapath.pid, "starttime": self._datapath.starttime}
        self._state.host_cc = self.host_cc
        self._state.status = "up"
        self._state.save()

    def _build_hosts(self, netlink: netns.Netlink) -> None:
        """Every host's namespace, its congestion control and its /etc/netns files."""
        topo = self.topology
        hosts = {node: namespace(self.name, node) for node in topo.hosts}
        netns.add(*hosts.values())
        # No router answers in a lab network, and Linux solicits one for ever (4, 8, 16 s... apart):
        # each solicitation would cross the links under test, flooded to every host, so a
        # 100-host star never fell idle. Interfaces made from now on take "default".
        quiet = {RS_SYSCTL: 0}
        netns.write_sysctls({ns: {**quiet, **({CC_SYSCTL: self.congestion_control(cc)}
                                              if (cc := topo.host_cc(node)) is not None else {})}
                             for node, ns in hosts.items()})
        # What the hosts' sockets get unless they choose: set above, or the machine's.
        cc = netns.read_sysctls(hosts.values(), CC_SYSCTL)
        self.host_cc = {node: cc[ns] for node, ns in hosts.items()}
        netlink.open(hosts.values())
        for node, ns in hosts.items():
            netlink.set_link(ns, "lo", up=True)
            self._write_etc(node)

    def _build_switches(self, netlink: netns.Netlink) -> None:
        """Every switch's namespace and its bridge, which _bring_up_ends enslaves its ports to
        (but for those served inside the datapath, which have neither)."""
        switches = [namespace(self.name, node) for node in self.topology.switches if node not in self.inner_switches]
        netns.add(*switches)
        self._silence_ipv6(switches)
        for ns in switches:
            netlink.add_bridge(ns, BRIDGE)

    def _bring_up_ends(self, netlink: netns.Netlink, ports: list[tuple[Port, Port]]) -> None:
        """The nodes' ends of the links, up: a host's with its address, a switch's in its bridge."""
        topo = self.topology
        inner = self.inner_switches
        for link, pair in zip(topo.links, ports):
            for node, port in zip(link.ends, pair):
                if node in inner:
                    continue  # a port of a switch inside the datapath: no interface
                if node in topo.hosts:
                    netlink.add_address(port.ns, port.iface, f"{topo.address(node)}/24")
                    netlink.set_link(port.ns, port.iface, up=True)
                else:
                    netlink.set_link(port.ns, port.iface, master=BRIDGE, up=True)

    @staticmethod
    def _wait_until_running(ports: list[Port], timeout_s: float = 5.0) -> None:
        """Return once every port is operationally up.

        The kernel applies a carrier change (and starts the interface's qdisc) from its link
        watch, which can lag up to a second behind `ip link set up`; until then the interface
        drops what it is given, the first ARP request included.
        """
        deadline = time.monotonic() + timeout_s
        waiting = set(ports)
        while True:
            waiting -= {Port(ns, iface) for ns, iface in netns.running((port.ns, port.iface) for port in waiting)}
            if not waiting:
                return
            if time.monotonic() > deadline:
                down = ", ".join(sorted(f"{p.ns}/{p.iface}" for p in waiting))
                raise MachineError(f"interfaces still down after {timeout_s:g} s: {down}")
            time.sleep(0.02)

    @staticmethod
    def _silence_ipv6(namespaces: list[str]) -> None:
        # Bridges and datapath ends would otherwise send router solicitations and MLD reports
        # into the links under test. "default" covers interfaces created from now on.
        netns.write_sysctls({ns: {f"net.ipv6.conf.{scope}.disable_ipv6": 1 for scope in ("all", "default")}
                             for ns in namespaces})

    def _write_etc(self, host: str) -> None:
        etc = ETC_NETNS / namespace(self.name, host)
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(hosts_file(self.topology))
        # No name server: a lookup of an unknown name then fails at once on the host's own
        # loopback instead of leaving the lab.
        (etc / "resolv.conf").write_text("# bloatlab: no DNS inside a lab network\n")

    # Tearing down -----------------------------------------------------------------------

    def down(self) -> list[str]:
        """End every process in the network, the datapath first, and remove all of it."""
        return self._teardown(quiet=False)

    def _teardown(self, quiet: bool) -> list[str]:
        removed: list[str] = []
        errors: list[BaseException] = []
        dp = self.datapath
        ran = dp is not None and dp.alive()
        try:
            try:
                if dp is not None:  # first: it flushes its logs and final stats
                    self.final_datapath_stats = dp.final_stats()
            except Exception as e:  # keep going: the namespaces must go whatever happened
                errors.append(e)
            namespaces = self._state.namespaces if self._state else []
            # The datapath's sockets close meanwhile (tens of ms); it is waited for last.
            spare = (dp.pid, dp.starttime) if ran else None
            removed += _remove_network(self.name, namespaces, errors, spare=spare)
        finally:
            try:
                if dp is not None:
                    dp.stop()
                    if ran:
                        removed.insert(0, f"process {dp.pid} (bloatlab-link)")
            except Exception as e:
                errors.append(e)
        if errors and not quiet:
            raise errors[0]
        for e in errors:
            log.warning("while removing network %s: %s", self.name, e)
        return removed

    def __enter__(self) -> Network:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    # Networks built by another process --------------------------------------------------

    @classmethod
    def attach(cls, name: str) -> Network:
        """The network `name` as recorded in the registry (built by `bloatlab up`, say)."""
        st = state.load(check_name(name))
        net = cls(st.topology_object(), name, detach=True, topology_path=st.topology_path)
        net.backends = list(st.backends)
        net.host_cc = dict(st.host_cc)
        net.cc_names = {cc: name for cc, name in st.congestion.items() if name}
        net._state = st
        if st.datapath:
            net._datapath = Datapath(st.datapath["pid"], st.datapath["starttime"],
                                     net.state_dir / "datapath-stats.json")
        return net

    @property
    def status(self) -> str:
        return self._state.status if self._state else "new"


# The registry as a whole --------------------------------------------------------------------

def _network_namespaces(name: str) -> list[str]:
    return [ns for ns in netns.list_namespaces() if ns.startswith(f"{PREFIX}.{name}.")]


def _end_processes(namespaces: list[str], spare: tuple[int, int | None] | None = None) -> list[str]:
    """SIGTERM, then SIGKILL, every process in the namespaces (but `spare`, by pid and start
    time, so a process that took a dead one's pid is not spared)."""
    processes = [ident for found in netns.pids_by_namespace(namespaces).values() for pid in found
                 if (ident := proc.identify(pid)) != spare]
    return [f"process {pid}" for pid in proc.terminate(processes)]


def _remove_network(name: str, namespaces: list[str], errors: list[BaseException],
                    spare: tuple[int, int | None] | None = None) -> list[str]:
    """Remove what is left of network `name`: processes (but `spare`, the datapath, which the
    caller has stopped and waits for), namespaces, /etc/netns dirs, state."""
    removed: list[str] = []
    every = sorted(set(namespaces) | set(_network_namespaces(name)))
    try:
        removed += _end_processes(every, spare)
    except Exception as e:
        errors.append(e)
    if _uses_bpf_congestion(name):
        _destroy_tcp_sockets([ns for ns in every if netns.exists(ns)])
    for ns in every:
        try:
            if netns.exists(ns):
                netns.delete(ns)  # takes the veths in it, and so their peers, along
                removed.append(f"namespace {ns}")
        except Exception as e:
            errors.append(e)
    for etc in sorted(ETC_NETNS.glob(f"{PREFIX}.{name}.*")):
        shutil.rmtree(etc, ignore_errors=True)
        removed.append(str(etc))
    try:
        if state.remove(name):
            removed.append(str(state.state_dir(name)))
    except OSError as e:  # a file written into it meanwhile
        errors.append(BloatlabError(f"could not remove {state.state_dir(name)}: {e.strerror}; "
                                    f"remove what is left with: bloatlab down {name}"))
    removed += release_congestion(errors)
    _remove_if_empty(ETC_NETNS, state.RUN_DIR)
    return removed


def _uses_bpf_congestion(name: str) -> bool:
    """Whether network `name`'s sockets were given one of bloatlab's BPF congestion controls."""
    try:
        held = state.load(name).congestion
    except BloatlabError:
        return False
    return any(bpf.kernel_name in held.values() for bpf in congestion.BPF_CCS.values())


def _destroy_tcp_sockets(namespaces: list[str]) -> None:
    """Destroy the TCP sockets still closing in the namespaces once their processes are gone (ss
    -K). Their peers are unreachable by now, so each would retransmit its FIN for a minute or two
    and keep the BPF congestion control it used, unregistered but not freed, as long; this way it
    is freed with the network. Where ss cannot (no SOCK_DESTROY) they are left to time out."""
    for ns in namespaces:
        try:
            proc.run(["ss", "-K", "-tn", "state", "all"], ns=ns, timeout_s=10, check=False)
        except MachineError:
            return


def release_congestion(errors: list[Any]) -> list[str]:
    """Unregister bloatlab's BPF congestion controls that no registered network names any more
    (a network that is being built names them before it registers them); what could not be goes
    to `errors`."""
    try:
        return congestion.release(lambda: {cc for st in state.list_states() for cc in st.congestion})
    except BloatlabError as e:
        errors.append(e)
        return []


def _nic_journals(entry: Path) -> bool:
    """The journals of `bloatlab nic`: a real interface's original settings, which `bloatlab nic
    restore` needs, and so never removed by `clean`."""
    return entry.name == state.NIC_DIR.name and any(entry.glob("*.json"))


def _remove_if_empty(*dirs: Path) -> None:
    for path in dirs:
        try:
            path.rmdir()
        except OSError:
            pass  # not empty (another network, or not ours), or already gone


def remove_network(name: str) -> list[str]:
    """Take down network `name`, from its state file or, if that is gone, by its namespaces."""
    check_name(name)
    if state.state_dir(name).exists():
        try:
            net = Network.attach(name)
        except BloatlabError:
            net = None  # a damaged or half-written state file: remove by name below
        if net is not None:
            return net.down()
    errors: list[BaseException] = []
    removed = _remove_network(name, [], errors)
    if errors:
        raise errors[0]
    if not removed:
        raise BloatlabError(f"no network named {name!r} (bloatlab ls lists them)", field="name")
    return removed


def leftovers(name: str) -> list[str]:
    """Everything of network `name` that exists on the machine: namespaces, /etc/netns
    directories, its state directory."""
    found = [ns for ns in netns.list_namespaces() if ns.startswith(f"{PREFIX}.{name}.")]
    found += [str(p) for p in ETC_NETNS.glob(f"{PREFIX}.{name}.*")]
    found += [str(p) for p in [state.RUN_DIR / name] if p.exists()]
    return found


def list_networks() -> list[state.NetworkState]:
    return state.list_states()


def stray_namespaces() -> list[str]:
    """bloatlab namespaces that belong to no registered network (`clean` removes them)."""
    known = {ns for st in state.list_states() for ns in st.namespaces}
    return [ns for ns in netns.list_namespaces()
            if ns.startswith(NETNS_PREFIXES) and ns not in known]


def _delete_namespaces(namespaces: list[str], errors: list[BloatlabError]) -> list[str]:
    """End the processes in the namespaces, then delete them; what could not be deleted goes to
    `errors` once the rest is tried."""
    removed = _end_processes(namespaces)
    for ns in namespaces:
        try:
            netns.delete(ns)
            removed.append(f"namespace {ns}")
        except BloatlabError as e:
            errors.append(e)
    return removed


def _etc_entries() -> list[Path]:
    """bloatlab's /etc/netns directories: networks' and tools'."""
    return sorted([*ETC_NETNS.glob(f"{PREFIX}.*"), *ETC_NETNS.glob(f"{PREFIX}-*")])


def tool_owner_alive(namespace: str) -> bool:
    """Whether the process a tool's namespace is named after (bloatlab-WHAT-PID) still runs.
    A name without a pid has no owner to wait for."""
    pid = namespace.rsplit("-", 1)[-1]
    return pid.isdigit() and proc.alive(int(pid), None)


def clean_orphaned_networks(errors: list[BloatlabError]) -> tuple[list[str], list[state.NetworkState]]:
    """Remove only what no live process owns: each network whose owner has died (or whose build
    never finished), namespaces of no registered network, tool namespaces whose process is
    gone, with their processes and /etc/netns entries, and old state directories with no state
    file. Return (what was removed, the networks spared); what could not be removed goes to
    `errors`."""
    removed: list[str] = []
    states = state.list_states()
    for st in states:
        if st.orphaned:
            try:
                removed += remove_network(st.name)
            except BloatlabError as e:
                errors.append(e)
    spared = [st for st in states if not st.orphaned]
    owned = {ns for st in spared for ns in st.namespaces} | {ns for st in spared for ns in _network_namespaces(st.name)}
    strays = [ns for ns in netns.list_namespaces() if ns.startswith(NETNS_PREFIXES) and ns not in owned
              and not (ns.startswith(f"{PREFIX}-") and tool_owner_alive(ns))]
    removed += _delete_namespaces(strays, errors)
    for entry in state.unregistered(older_than_s=UNREGISTERED_AGE_S):
        try:
            shutil.rmtree(entry)
            removed.append(str(entry))
        except FileNotFoundError:
            pass  # another clean took it
        except OSError as e:
            errors.append(BloatlabError(f"could not remove {entry}: {e.strerror}; bloatlab clean tries again"))
    live = {ns for st in spared for ns in st.namespaces}
    for etc in _etc_entries():
        if etc.name not in live and not netns.exists(etc.name):
            shutil.rmtree(etc, ignore_errors=True)
            removed.append(str(etc))
    removed += release_congestion(errors)  # a killed run's, unless a live network holds it too
    _remove_if_empty(ETC_NETNS, state.RUN_DIR)
    return removed, spared


def clean_networks(errors: list[BloatlabError]) -> list[str]:
    """Remove every network bloatlab made, and what a killed one left: datapaths, processes and
    namespaces named bloatlab.* or bloatlab-*, /etc/netns/bloatlab.*, /run/bloatlab/* (but the
    nic journals). Return what was removed; what could not be goes to `errors`, once the rest is
    done."""
    removed: list[str] = []
    for st in state.list_states():
        if st.datapath:
            dp = Datapath(st.datapath["pid"], st.datapath["starttime"])
            if dp.stop():
                removed.append(f"process {dp.pid} (bloatlab-link of {st.name})")
    removed += _delete_namespaces([ns for ns in netns.list_namespaces() if ns.startswith(NETNS_PREFIXES)], errors)
    for etc in _etc_entries():
        shutil.rmtree(etc, ignore_errors=True)
        removed.append(str(etc))
    if state.RUN_DIR.exists():
        for entry in sorted(state.RUN_DIR.iterdir()):
            if _nic_journals(entry):
                continue
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed.append(str(entry))
    removed += release_congestion(errors)  # no network is left to hold one
    _remove_if_empty(ETC_NETNS, state.RUN_DIR)
    return removed

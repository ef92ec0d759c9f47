"""The userspace backend: bloatlab-link serves every userspace link of a network from one
process in the datapath namespace (docs/datapath.md). A link's end at a host, or at a switch
with a namespace of its own, is a veth pair into the datapath namespace; an end at a switch
served inside the datapath is a port of that switch, with no interface at all.
"""

from __future__ import annotations

from bloatlab.specs.model import LinkSpec
from bloatlab.testbed import netns
from bloatlab.testbed.datapath import PUNCTUAL, Datapath, direction_config, write_config
from bloatlab.testbed.links.base import DIRECTIONS, LinkBackend, Port, Refusal, Site, middle_ifaces


class UserspaceBackend(LinkBackend):
    """A veth pair per link end into the datapath namespace (none at a switch served inside it);
    one bloatlab-link serves them all."""

    name = "userspace"

    @classmethod
    def refusals(cls, link: LinkSpec, kernel_qdiscs: dict[str, bool]) -> list[Refusal]:
        if link.queue_at == "sender":  # a NIC's own queue is the kernel's
            return [Refusal(cls.name, "queue_at", "a queue at the sender", "bloatlab-link sits between the ends",
                            fix="leave queue_at out, so the userspace datapath can serve the link")]
        return []

    def __init__(self, site: Site):
        super().__init__(site)
        self.links: list[dict] = []  # config entries, one per link

    def add_link(self, index: int, link: LinkSpec, a: Port, b: Port) -> None:
        ends: dict[str, str] = {}
        pairs = []
        for side, node, node_port, dp_iface in zip("ab", link.ends, (a, b), middle_ifaces(index)):
            if node in self.site.inner_switches:
                ends[f"{side}_switch"] = node
            else:
                ends[f"{side}_iface"] = dp_iface
                pairs.append((node_port, dp_iface))
        with netns.Netlink() as netlink:
            for node_port, dp_iface in pairs:
                netns.veth_pair(node_port.ns, node_port.iface, self.site.dp_ns, dp_iface)
            netns.offloads_off([end for port, mid in pairs for end in ((port.ns, port.iface), (self.site.dp_ns, mid))])
            for _, dp_iface in pairs:
                # The datapath reads every frame on its ends, whatever the destination MAC.
                netlink.set_link(self.site.dp_ns, dp_iface, promisc=True, up=True)
        self.links.append({
            "name": link.name, **ends,
            **{which: {**direction_config(getattr(link, which), self.site.topology.direction_seed(index, which)),
                       "qlog": self.site.qlog_directions is None or link.direction_name(which) in self.site.qlog_directions,
                       **self._capture(link.direction_name(which)), **self._ect1(link.direction_name(which))}
               for which in DIRECTIONS},
        })

    def _capture(self, direction: str) -> dict:
        """The config's `capture` of a direction, if it is captured."""
        captures = self.site.captures
        if captures is None or direction not in captures.directions:
            return {}
        departures, drops = captures.paths(direction)
        return {"capture": {"name": direction, "departures_path": str(departures), "drops_path": str(drops),
                            "snaplen": captures.snaplen, "limit_bytes": captures.limit_bytes}}

    def _ect1(self, direction: str) -> dict:
        """The config's `ect1_rewrite` of a direction where scalable flows enter, if any."""
        pairs = self.site.ect1_rewrite.get(direction)
        return {"ect1_rewrite": [{"src": src, "dst": dst} for src, dst in pairs]} if pairs else {}

    def start(self) -> None:
        if not self.links:
            return
        config_path = self.site.state_dir / "datapath.json"
        stats_path = self.site.state_dir / "datapath-stats.json"
        if self.site.qlog_dir is not None:
            self.site.qlog_dir.mkdir(parents=True, exist_ok=True)
        if self.site.captures is not None:
            self.site.captures.dir.mkdir(parents=True, exist_ok=True)
        write_config(config_path, netns=self.site.dp_ns, stats_path=stats_path, log_dir=self.site.qlog_dir,
                     links=self.links, settings=PUNCTUAL if self.site.punctual else None)
        self.daemon = Datapath.start(config_path, stats_path, self.site.state_dir / "datapath.log",
                                     detach=self.site.detach)

"""The userspace backend: bloatlab-link serves every userspace link of a network from one
process in the datapath namespace, between two veth pairs per link (docs/datapath.md).
"""

from __future__ import annotations

from bloatlab.specs.model import LinkSpec
from bloatlab.testbed import netns
from bloatlab.testbed.datapath import Datapath, direction_config, write_config
from bloatlab.testbed.links.base import DIRECTIONS, LinkBackend, Port, Refusal, Site, middle_ifaces


class UserspaceBackend(LinkBackend):
    """Two veth pairs per link into the datapath namespace; one bloatlab-link serves them all."""

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
        a_dp, b_dp = middle_ifaces(index)
        pairs = [(a, a_dp), (b, b_dp)]
        for node_port, dp_iface in pairs:
            netns.veth_pair(node_port.ns, node_port.iface, self.site.dp_ns, dp_iface)
        netns.offloads_off([end for port, mid in pairs for end in ((port.ns, port.iface), (self.site.dp_ns, mid))])
        for _, dp_iface in pairs:
            # The datapath reads every frame on its ends, whatever the destination MAC.
            netns.ip(self.site.dp_ns, "link", "set", dp_iface, "promisc", "on", "up")
        self.links.append({
            "name": link.name, "a_iface": a_dp, "b_iface": b_dp,
            **{which: {**direction_config(getattr(link, which), self.site.topology.direction_seed(index, which)),
                       "qlog": self.site.qlog_directions is None or link.direction_name(which) in self.site.qlog_directions,
                       **self._capture(link.direction_name(which))}
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
                     links=self.links)
        self.daemon = Datapath.start(config_path, stats_path, self.site.state_dir / "datapath.log",
                                     detach=self.site.detach)

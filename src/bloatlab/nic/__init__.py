"""Real interfaces: sweep an interface's txqueuelen, Byte Queue Limits, offloads and root qdisc,
measured with iperf3 and ping against a server, and always put the interface back.

    knobs     read, set and restore each knob; snapshots
    journal   the original settings on disk before the first change (/run/bloatlab/nic/)
    plan      a sweep as data, from flags or a TOML file, validated
    measure   iperf3 TCP and UDP, ping; summaries and series
    runner    check, journal, run each point (bloatlab.sweep), restore
    command   `bloatlab nic sweep|restore|serve`
"""

from .command import add_parser

__all__ = ["add_parser"]

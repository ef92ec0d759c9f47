"""`bloatlab up`, `exec`, `ls`, `down` and `clean`: lab networks by hand, and what bloatlab left."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bloatlab.cli.common import COMMON, FILE, UsageError, add_command, configure_logging, emit, need_root, note
from bloatlab.errors import BloatlabError, MachineError
from bloatlab.interrupts import Interrupts
from bloatlab.proc import alive
from bloatlab.specs.topology import load_topology
from bloatlab.specs.units import format_duration_ns, format_rate
from bloatlab.testbed.network import Network, check_name, list_networks, remove_network, stray_namespaces
from bloatlab.testbed.state import NetworkState

EXAMPLE_TOPOLOGY = "topology.toml"


def cmd_up(args: argparse.Namespace) -> int:
    need_root("up")
    check_name(args.name)
    topology = load_topology(args.topology)
    net = Network(topology, args.name, detach=True, topology_path=Path(args.topology).resolve())
    # A SIGTERM or hangup during the build must clean up as Ctrl-C does; each is noted as it
    # comes, so one whose raise is lost still stops the build (interrupts.py).
    with Interrupts():
        net.up()
    emit(args, describe(net), summary(net))
    return 0


def describe(net: Network) -> dict[str, Any]:
    """The network as `up --json` gives it: the resolved topology, each link's backend and each
    host's congestion control as built."""
    topo = net.topology.to_dict()
    for host in topo["hosts"]:
        host["cc"] = net.host_cc.get(host["name"])
    for link, backend in zip(topo["links"], net.backends):
        link["backend"] = backend
    return {"name": net.name, "status": net.status, **topo}


def summary(net: Network) -> str:
    def direction(d) -> str:
        pace = f"trace {d.trace.name}" if d.trace else format_rate(d.rate_bps)
        parts = [pace, f"delay {format_duration_ns(d.delay_ns)}"]
        if d.jitter_ns:
            parts.append(f"jitter {format_duration_ns(d.jitter_ns)}")
        if d.loss:
            parts.append(f"loss {d.loss * 100:g}%")
        q = d.queue
        limit = f"{q.packets} packets" if q.packets is not None else f"{q.bytes} bytes"
        parts.append(f"{q.discipline} {limit}")
        return ", ".join(parts)

    topo = net.topology
    width = max(len(h) for h in [*topo.hosts, "host"])
    lines = [f"network {net.name} is up", ""]
    lines += [f"  {'host':<{width}}  {'address':<11}  congestion control"]
    lines += [f"  {host:<{width}}  {topo.address(host):<11}  {_cc_text(net, host)}" for host in topo.hosts]
    if topo.switches:
        inner = net.inner_switches
        named = [f"{s} (inside the datapath)" if s in inner else f"{s} (a bridge in its namespace)" for s in topo.switches]
        lines += ["", f"  switches: {', '.join(named)}"]
    lines.append("")
    for link, backend in zip(topo.links, net.backends):
        lines.append(f"  link {link.name} ({backend} backend)")
        for which in ("forward", "reverse"):
            lines.append(f"    {link.direction_name(which):<24} {direction(getattr(link, which))}")
    first = next(iter(topo.hosts))
    other = next((h for h in topo.hosts if h != first), first)
    lines += ["", f"run commands in it:  bloatlab exec {net.name} {first} -- ping -c 3 {other}",
              f"take it down:        bloatlab down {net.name}"]
    return "\n".join(lines)


def _cc_text(net: Network, host: str) -> str:
    """The host's default congestion control, and where it came from."""
    cc = net.host_cc.get(host, "?")
    if net.topology.host_cc(host):
        return f"{cc} (the topology's)"
    return f"{cc} (this machine's default; set cc to change it)"


def cmd_exec(args: argparse.Namespace) -> int:
    argv = list(args.command)
    # `exec NAME HOST --json -- CMD`: no command starts with "-", so what comes before -- is ours.
    if argv[:1] != ["--"] and argv[:1] and argv[0].startswith("-"):
        if "--" not in argv:
            raise UsageError(f"give the command after --, e.g. bloatlab exec {args.name} {args.host} "
                             f"{argv[0]} -- ping -c 3 h2")
        COMMON.parse_args(argv[:argv.index("--")], namespace=args)
        argv = argv[argv.index("--"):]
        configure_logging(args)
        if args.json and not hasattr(args, "document_out"):
            args.document_out = sys.stdout  # nothing else prints here: stdout carries the document
    need_root("exec")
    argv = argv[1:] if argv[:1] == ["--"] else argv
    if not argv:
        raise UsageError(f"give a command after --, e.g. bloatlab exec {args.name} {args.host} -- ping -c 3 h2")
    net = Network.attach(args.name)
    if args.json:  # the command's output, captured, in the one document
        done = net.exec(args.host, argv)
        status = done.returncode if done.returncode >= 0 else 128 - done.returncode
        emit(args, {"network": args.name, "host": args.host, "argv": argv, "status": status,
                    "stdout": done.stdout, "stderr": done.stderr})
        return status
    # stdin, stdout and stderr are inherited: the command talks to the terminal directly.
    with net.popen(args.host, argv, stdin=None) as proc:
        while True:
            try:
                status = proc.wait()
                break
            except KeyboardInterrupt:
                continue  # the command got the Ctrl-C too; let it end its own way (ping prints stats)
    return status if status >= 0 else 128 - status


def _network_entry(st: NetworkState) -> dict[str, Any]:
    status = st.status
    if status == "building" and st.owner and not alive(st.owner["pid"], st.owner["starttime"]):
        status = "broken"  # its `up` died midway
    datapath = None
    if st.datapath:
        datapath = {"pid": st.datapath["pid"], "running": alive(st.datapath["pid"], st.datapath["starttime"])}
    return {"name": st.name, "status": status, "created": st.created, "topology_path": st.topology_path,
            "hosts": [{"name": h["name"], "address": h["address"], "cc": st.host_cc.get(h["name"])}
                      for h in st.topology["hosts"]],
            "links": [{"name": link["name"], "ends": link["ends"], "backend": backend}
                      for link, backend in zip(st.topology["links"], st.backends)],
            "datapath": datapath}


def cmd_ls(args: argparse.Namespace) -> int:
    networks = [_network_entry(st) for st in list_networks()]
    stray = stray_namespaces()
    lines = []
    if not networks:
        lines.append("no networks")
    else:
        rows = [("NAME", "STATUS", "HOSTS", "CC", "LINKS", "DATAPATH", "CREATED")]
        for net in networks:
            dp = net["datapath"]
            kinds = sorted({link["backend"] for link in net["links"]})
            ccs = sorted({h["cc"] or "?" for h in net["hosts"]})
            rows.append((net["name"], net["status"], str(len(net["hosts"])), ",".join(ccs),
                         f"{len(net['links'])} ({', '.join(kinds)})" if kinds else "0",
                         "-" if dp is None else f"pid {dp['pid']}" if dp["running"] else "dead", net["created"]))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    if stray:
        lines.append(f"\nnamespaces of no network: {', '.join(stray)} (bloatlab clean removes them)")
    emit(args, {"networks": networks, "stray_namespaces": stray}, "\n".join(lines))
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    need_root("down")
    check_name(args.name)
    removed = remove_network(args.name)
    emit(args, {"network": args.name, "removed": removed}, f"network {args.name} is down")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    from bloatlab.lab import clean  # it reaches the probes' tracefs: imported when it runs

    need_root("clean")
    failed: list[BloatlabError] = []
    if args.all:
        live = [st for st in list_networks() if not st.orphaned]
        if live:  # named before they go: other shells' networks and runs end here
            note(args, "taking down live networks too: " + ", ".join(clean.describe(st) for st in live))
        removed, spared = clean.clean(failed), []
    else:
        removed, spared = clean.clean_orphans(failed)
    lines = [f"removed {item}" for item in removed] or (["nothing to clean"] if not failed else [])
    if spared:
        lines.append(f"left {len(spared)} live network{'s' if len(spared) > 1 else ''}: "
                     + ", ".join(clean.describe(st) for st in spared) + " (bloatlab down NAME, or clean --all)")
    emit(args, {"removed": removed, "failed": [str(e) for e in failed], "spared": [st.name for st in spared]},
         "\n".join(lines))
    if failed:
        raise MachineError("; ".join(str(e) for e in failed) + " (the rest is removed)")
    return 0


def add_parsers(commands: argparse._SubParsersAction) -> None:
    up = add_command(commands, "up", cmd_up, "build a network from a topology file and leave it running",
                     "Creates a namespace per host, the links between them (each served by the kernel's "
                     "qdiscs or by\nthe userspace datapath bloatlab-link, which keeps running in the "
                     "background) and the switches:\ninside bloatlab-link where it serves all of a switch's "
                     "links, else a Linux bridge in the\nswitch's own namespace (namespace = true in its "
                     "table asks for that). Prints the hosts'\naddresses, their TCP congestion control (the "
                     "topology's cc, else this machine's default) and\neach link's backend. Needs root.",
                     [f"sudo bloatlab up {EXAMPLE_TOPOLOGY} --name t1"])
    up.add_argument("topology", metavar="TOPOLOGY.toml", help="the topology file").complete = FILE
    up.add_argument("--name", required=True,
                    help='the network\'s name: a lowercase letter, then up to 15 lowercase letters, '
                         'digits or "-"')

    ex = add_command(commands, "exec", cmd_exec, "run a command in a host of a network",
                     "Runs CMD in HOST's namespace with this terminal's stdin, stdout and stderr, and exits "
                     "with CMD's\nstatus (not bloatlab's, below, once CMD has started). Host names resolve inside "
                     "the network\n(ping h2 works). With --json, CMD's output is captured into the document instead. "
                     "Needs root.",
                     ["sudo bloatlab exec t1 h1 -- ping -c 3 h2",
                      "sudo bloatlab exec t1 h2 -- iperf3 -s -1"])
    ex.add_argument("name", metavar="NAME", help="the network")
    ex.add_argument("host", metavar="HOST", help="the host to run in")
    ex.add_argument("command", metavar="-- CMD ...", nargs=argparse.REMAINDER, help="the command and its arguments")

    add_command(commands, "ls", cmd_ls, "list networks",
                "Shows each network's status, hosts, their congestion controls, link backends and datapath "
                "process,\nand any bloatlab "
                "namespace that belongs to no network.", ["bloatlab ls"])

    down = add_command(commands, "down", cmd_down, "take a network down",
                       "Ends every process in the network's namespaces (the datapath first), then removes "
                       "the\nnamespaces, their /etc/netns files and the network's state. Needs root.",
                       ["sudo bloatlab down t1"])
    down.add_argument("name", metavar="NAME", help="the network")

    clean_parser = add_command(
        commands, "clean", cmd_clean, "remove what dead runs and tools left on this machine",
        "Removes what no live process owns: the network of a run that was killed (its namespaces,\n"
        "processes, datapath, /etc/netns and /run/bloatlab entries, TCP probe instances), a network\n"
        "whose build never finished, bloatlab namespaces of no network, and a /run/bloatlab directory\n"
        "without a state file, untouched for a minute (what a cut-short removal leaves). The networks\n"
        "of runs still running, and those `bloatlab up` made, stay: they are named, and `bloatlab down\n"
        "NAME` or --all removes them. The journals of `bloatlab nic` (/run/bloatlab/nic) stay:\n"
        "`bloatlab nic restore` needs them. Needs root.",
        ["sudo bloatlab clean", "sudo bloatlab clean --all   # live networks too, other shells' included"])
    clean_parser.add_argument("--all", action="store_true",
                              help="remove everything bloatlab made, live networks and runs included, "
                                   "after naming them")

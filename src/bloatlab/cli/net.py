"""`bloatlab up`, `exec`, `ls`, `down` and `clean`: lab networks by hand, and what bloatlab left."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path

from bloatlab.cli.common import UsageError, add_command, need_root
from bloatlab.interrupts import Interrupts
from bloatlab.proc import alive
from bloatlab.specs.topology import load_topology
from bloatlab.specs.units import format_duration_ns, format_rate
from bloatlab.testbed.network import Network, check_name, list_networks, remove_network, stray_namespaces

EXAMPLE_TOPOLOGY = "topology.toml"


def cmd_up(args: argparse.Namespace) -> int:
    need_root("up")
    check_name(args.name)
    topology = load_topology(args.topology)
    net = Network(topology, args.name, detach=True, topology_path=Path(args.topology).resolve())
    # A SIGTERM or hangup during the build must clean up as Ctrl-C does.
    with Interrupts((signal.SIGTERM, signal.SIGHUP)):
        net.up()
    print(summary(net))
    return 0


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
    lines += [f"  {'host':<{width}}  address"]
    lines += [f"  {host:<{width}}  {topo.address(host)}" for host in topo.hosts]
    if topo.switches:
        lines += ["", f"  switches: {', '.join(topo.switches)}"]
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


def cmd_exec(args: argparse.Namespace) -> int:
    need_root("exec")
    argv = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not argv:
        raise UsageError(f"give a command after --, e.g. bloatlab exec {args.name} {args.host} -- ping -c 3 h2")
    net = Network.attach(args.name)
    # stdin, stdout and stderr are inherited: the command talks to the terminal directly.
    with net.popen(args.host, argv, stdin=None) as proc:
        while True:
            try:
                status = proc.wait()
                break
            except KeyboardInterrupt:
                continue  # the command got the Ctrl-C too; let it end its own way (ping prints stats)
    return status if status >= 0 else 128 - status


def cmd_ls(args: argparse.Namespace) -> int:

    networks = list_networks()
    if not networks:
        print("no networks")
    else:
        rows = [("NAME", "STATUS", "HOSTS", "LINKS", "DATAPATH", "CREATED")]
        for st in networks:
            status = st.status
            if status == "building" and st.owner and not alive(st.owner["pid"], st.owner["starttime"]):
                status = "broken"  # its `up` died midway
            dp = "-"
            if st.datapath:
                running = alive(st.datapath["pid"], st.datapath["starttime"])
                dp = f"pid {st.datapath['pid']}" if running else "dead"
            kinds = sorted(set(st.backends))
            links = f"{len(st.backends)} ({', '.join(kinds)})" if kinds else "0"
            rows.append((st.name, status, str(len(st.topology["hosts"])), links, dp, st.created))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    stray = stray_namespaces()
    if stray:
        print(f"\nnamespaces of no network: {', '.join(stray)} (bloatlab clean removes them)")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    need_root("down")
    check_name(args.name)
    remove_network(args.name)
    print(f"network {args.name} is down")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    from bloatlab.lab.clean import clean  # it reaches the probes' tracefs: imported when it runs

    need_root("clean")
    removed = clean()
    if not removed:
        print("nothing to clean")
    for item in removed:
        print(f"removed {item}")
    return 0


def add_parsers(commands: argparse._SubParsersAction) -> None:
    up = add_command(commands, "up", cmd_up, "build a network from a topology file and leave it running",
                     "Creates a namespace per host and switch, the links between them (each served by the "
                     "kernel's qdiscs\nor by the userspace datapath bloatlab-link, which keeps running in "
                     "the background), and\nprints the hosts' addresses and each link's backend. Needs root.",
                     [f"sudo bloatlab up {EXAMPLE_TOPOLOGY} --name t1"])
    up.add_argument("topology", metavar="TOPOLOGY.toml", help="the topology file")
    up.add_argument("--name", required=True,
                    help='the network\'s name: a lowercase letter, then up to 15 lowercase letters, '
                         'digits or "-"')

    ex = add_command(commands, "exec", cmd_exec, "run a command in a host of a network",
                     "Runs CMD in HOST's namespace with this terminal's stdin, stdout and stderr, and exits "
                     "with CMD's\nstatus. Host names resolve inside the network (ping h2 works). Needs root.",
                     ["sudo bloatlab exec t1 h1 -- ping -c 3 h2",
                      "sudo bloatlab exec t1 h2 -- iperf3 -s -1"])
    ex.add_argument("name", metavar="NAME", help="the network")
    ex.add_argument("host", metavar="HOST", help="the host to run in")
    ex.add_argument("command", metavar="-- CMD ...", nargs=argparse.REMAINDER, help="the command and its arguments")

    add_command(commands, "ls", cmd_ls, "list networks",
                "Shows each network's status, hosts, link backends and datapath process, and any bloatlab\n"
                "namespace that belongs to no network.", ["bloatlab ls"])

    down = add_command(commands, "down", cmd_down, "take a network down",
                       "Ends every process in the network's namespaces (the datapath first), then removes "
                       "the\nnamespaces, their /etc/netns files and the network's state. Needs root.",
                       ["sudo bloatlab down t1"])
    down.add_argument("name", metavar="NAME", help="the network")

    add_command(commands, "clean", cmd_clean, "remove everything bloatlab left on this machine",
                "Removes every namespace named bloatlab.* or bloatlab-* with the processes in it, every "
                "datapath\nprocess, /etc/netns/bloatlab.* and /run/bloatlab, also what a killed run left; it "
                "keeps\nthe journals of `bloatlab nic` (/run/bloatlab/nic), which `bloatlab nic restore` needs. "
                "Needs root.", ["sudo bloatlab clean"])

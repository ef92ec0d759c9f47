"""`bloatlab doctor`: what this machine can do (bloatlab.lab.doctor probes it), or with
--cluster, what every node of a Ray cluster can (bloatlab.lab.cluster checks them)."""

from __future__ import annotations

import argparse

from bloatlab.cli.common import add_command, emit


def cmd_doctor(args: argparse.Namespace) -> int:
    if args.cluster:
        return _cluster(args)
    from bloatlab.lab import doctor  # its probes' modules: loaded by this command alone

    report = doctor.collect()
    emit(args, report, doctor.render(report))
    return 0


def _cluster(args: argparse.Namespace) -> int:
    from bloatlab.lab import cluster

    ray = cluster.connect(args.cluster)
    try:
        checks = cluster.check_nodes(ray)
    finally:
        cluster.disconnect()
    trust = cluster.trust(args.cluster, checks)
    emit(args, {"address": args.cluster, "nodes": [c.to_dict() for c in checks], "trust": trust.to_dict()},
         cluster.render_checks(checks, args.cluster) + "\n" + trust.line())
    return 0 if checks and all(c.ok for c in checks) else 1


def add_parsers(commands: argparse._SubParsersAction) -> None:
    doc = add_command(commands, "doctor", cmd_doctor, "check what this machine can do",
                      "Probes for real: root, namespaces, veth, kernel qdiscs, tools, the datapath binary, "
                      "and\nwhich link features each backend can serve here; says how to get what is missing.\n\n"
                      "With --cluster, checks every node of a Ray cluster where it runs (its bloatlab version, "
                      "root,\nand this doctor's verdict) and prints one line per node; exit 1 if any node would "
                      "be left out\nof a sweep (docs/cluster.md).",
                      ["sudo bloatlab doctor", "sudo bloatlab doctor --json > doctor.json",
                       "bloatlab doctor --cluster head:6379"])
    doc.add_argument("--cluster", metavar="ADDRESS",
                     help="check the nodes of the Ray cluster whose head is at ADDRESS (host:port) instead")

"""`bloatlab doctor`: what this machine can do (bloatlab.lab.doctor probes it)."""

from __future__ import annotations

import argparse

from bloatlab.cli.common import add_command, emit
from bloatlab.lab import doctor


def cmd_doctor(args: argparse.Namespace) -> int:
    report = doctor.collect()
    emit(args, report, doctor.render(report))
    return 0


def add_parsers(commands: argparse._SubParsersAction) -> None:
    add_command(commands, "doctor", cmd_doctor, "check what this machine can do",
                "Probes for real: root, namespaces, veth, kernel qdiscs, tools, the datapath binary, "
                "and\nwhich link features each backend can serve here; says how to get what is missing.",
                ["sudo bloatlab doctor", "sudo bloatlab doctor --json > doctor.json"])

"""Facts about this machine and its namespaces that make a run describe itself: the kernel,
CPUs and tool versions, and each namespace's qdiscs and TCP sysctls as they were.
"""

from __future__ import annotations

import json
import os
import platform
import re
from typing import Any

from bloatlab import proc
from bloatlab.errors import MachineError
from bloatlab.testbed import netns

SYSCTLS = ("net.ipv4.tcp_congestion_control", "net.ipv4.tcp_ecn", "net.ipv4.tcp_sack",
           "net.ipv4.tcp_timestamps", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.core.default_qdisc",
           "net.ipv4.tcp_no_metrics_save")


def _version(argv: list[str], pattern: str) -> str | None:
    try:
        out = proc.run(argv, timeout_s=10, check=False)
    except MachineError:  # not installed, or hung
        return None
    m = re.search(pattern, out.stdout + out.stderr)
    return m[1] if m else None


def tool_versions() -> dict[str, str | None]:
    return {
        "iperf3": _version(["iperf3", "--version"], r"iperf (\S+)"),
        "ping": _version(["ping", "-V"], r"iputils[- ](s?\d[\w.]*)"),
        "curl": _version(["curl", "--version"], r"curl (\S+)"),
        "tc": _version(["tc", "-V"], r"iproute2-([\w.]+)"),
    }


def machine() -> dict[str, Any]:
    uname = platform.uname()
    return {"kernel": uname.release, "hostname": uname.node, "machine": uname.machine, "cpus": os.cpu_count()}


def snapshot(ns: str) -> dict[str, Any]:
    """A host's qdiscs (tc -s, JSON) and TCP sysctls, as they are now."""
    try:
        qdiscs = json.loads(netns.tc(ns, "-s", "-j", "qdisc", "show") or "[]")
    except (proc.CommandError, json.JSONDecodeError) as e:
        qdiscs = {"error": str(e)}
    sysctls: dict[str, str | None] = dict.fromkeys(SYSCTLS)
    try:  # one process for all; -e: a key this kernel lacks stays null
        for line in proc.output(["sysctl", "-e", *SYSCTLS], ns=ns).splitlines():
            key, sep, value = line.partition(" = ")
            if sep:
                sysctls[key.strip()] = value.strip()
    except proc.CommandError:
        pass
    return {"qdiscs": qdiscs, "sysctls": sysctls}

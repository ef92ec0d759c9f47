"""Facts about this machine and its namespaces that make a run describe itself: the kernel,
CPUs and tool versions, and each namespace's qdiscs and TCP sysctls as they were.
"""

from __future__ import annotations

import json
import os
import platform
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bloatlab import proc
from bloatlab.errors import MachineError
from bloatlab.testbed import capabilities, netns

SYSCTLS = ("net.ipv4.tcp_congestion_control", "net.ipv4.tcp_ecn", "net.ipv4.tcp_sack",
           "net.ipv4.tcp_timestamps", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.core.default_qdisc",
           "net.ipv4.tcp_no_metrics_save")


# The tools runs use: name -> (arguments that print its version, a pattern for the version in
# it, the Debian package). doctor lists them; run.json records their versions.
TOOLS: dict[str, tuple[list[str], str, str]] = {
    "iperf3": (["--version"], r"iperf (\S+)", "iperf3"),
    "ping": (["-V"], r"iputils[- ](s?\d[\w.]*)", "iputils-ping"),
    "curl": (["--version"], r"curl (\S+)", "curl"),
    "irtt": (["version"], r"irtt version: (\S+)", "irtt"),
    "nghttpd": (["--version"], r"nghttp2/(\S+)", "nghttp2-server"),
    "openssl": (["version"], r"OpenSSL (\S+)", "openssl"),
    "ethtool": (["--version"], r"ethtool version (\S+)", "ethtool"),
    "tc": (["-V"], r"iproute2-([\w.]+)", "iproute2"),
    "ip": (["-V"], r"iproute2-([\w.]+)", "iproute2"),
}
RECORDED = ("iperf3", "ping", "curl", "irtt", "nghttpd", "tc")  # in every run.json


def _version(argv: list[str], pattern: str) -> str | None:
    try:
        out = proc.run(argv, timeout_s=10, check=False)
    except MachineError:  # not installed, or hung
        return None
    m = re.search(pattern, out.stdout + out.stderr)
    return m[1] if m else None


def tool_versions() -> dict[str, str | None]:
    """Each recorded tool's version, asked of all at once: one by one they take 40 ms of a run's start."""
    with ThreadPoolExecutor(len(RECORDED)) as pool:
        found = pool.map(lambda name: _version([name, *TOOLS[name][0]], TOOLS[name][1]), RECORDED)
        return dict(zip(RECORDED, found))


def check_tools(names: list[str], field: str | None = None) -> None:
    """A MachineError naming the Debian packages to install, unless every tool is on PATH."""
    missing = [name for name in dict.fromkeys(names) if capabilities.which(name) is None]
    if missing:
        packages = " ".join(dict.fromkeys(TOOLS[name][2] for name in missing))
        raise MachineError(f"{', '.join(missing)} not installed; apt-get install {packages} (make setup does)",
                           field=field)


def machine() -> dict[str, Any]:
    uname = platform.uname()
    return {"kernel": uname.release, "hostname": uname.node, "machine": uname.machine, "cpus": os.cpu_count(),
            "cpu": cpu_model()}


def cpu_model() -> str | None:
    """The CPU's model name (/proc/cpuinfo), as a run records where it ran."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("model name", "Model", "cpu model"):
                    return value.strip()
    except OSError:
        pass
    return None


def snapshots(namespaces: dict[str, str]) -> dict[str, dict[str, Any]]:
    """snapshot() of each namespace (keyed by its node's name), taken side by side."""
    with ThreadPoolExecutor(max(1, len(namespaces))) as pool:
        return dict(zip(namespaces, pool.map(snapshot, namespaces.values())))


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

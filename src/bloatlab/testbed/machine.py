"""Facts about this machine and its namespaces that make a run describe itself: the kernel,
CPUs and tool versions, each namespace's qdiscs and TCP sysctls as they were, and how short of
CPU the machine was while the run played.
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

# The kernel's CPU pressure (PSI): the time in which at least one runnable task waited for a CPU.
PSI_CPU = "/proc/pressure/cpu"
# The share of a run past which its hosts' figures may be the machine's CPU rather than the
# network: the pressure at which bloatlab-link starts batching its departures to leave the hosts
# CPU (datapath/link/src/config.rs, Batching's enter_pressure; a unit test keeps them equal). On
# 2 vCPUs a 1 Gbit/s TCP flow with the links spinning made 0.39-0.57; 100 Mbit/s 0.07-0.19
# (docs/bench.md, stop 3).
CPU_PRESSURE_WARN = 0.4
# Batching lowers the pressure it answers (to 0.31-0.41 at 1 Gbit/s), so a run whose links batched
# most of the time was short of CPU even where its average stayed below CPU_PRESSURE_WARN.
BATCHING_WARN = 0.5


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


def cpu_pressure_us(path: str = PSI_CPU) -> int | None:
    """PSI's "some" total for the CPU, in microseconds since boot; None where the kernel has no
    PSI (built without it, or booted with psi=0)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("some "):
                    return int(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def pressure_share(start: tuple[int | None, float], end: tuple[int | None, float]) -> float | None:
    """The share of the time between two (cpu_pressure_us(), monotonic seconds) readings in which
    some task waited for a CPU."""
    (us0, t0), (us1, t1) = start, end
    if us0 is None or us1 is None or t1 <= t0:
        return None
    return min(1.0, max(0.0, (us1 - us0) / 1e6 / (t1 - t0)))


def pressure_warnings(pressure: float | None, links_batching: float | None) -> list[str]:
    """What a run's numbers may owe to this machine's CPU rather than to the network."""
    short = pressure is not None and pressure >= CPU_PRESSURE_WARN
    batched = links_batching is not None and links_batching >= BATCHING_WARN
    if not short and not batched:
        return []
    waited = f"tasks waited for a CPU during {100 * pressure:.0f}% of the run (the kernel's CPU pressure)" \
        if pressure is not None else "the kernel's CPU pressure was high"
    how = (f"; the links batched their departures in {100 * links_batching:.0f}% of their report periods to leave "
           "the hosts CPU, each departure then waiting up to the batching sleep (50 us) and a late wake-up"
           if links_batching else "")
    return [f"this machine was short of CPU: {waited}{how}; goodput and the hosts' socket losses may be the "
            "machine's, not the network's (run fewer experiments side by side, or at a lower rate)"]

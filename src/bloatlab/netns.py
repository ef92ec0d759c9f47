"""Thin helpers over iproute2 and ethtool: namespaces, commands inside them, offloads.

Every helper runs one command with check=True semantics; a failure becomes a CommandError
that quotes the command and the last line it printed on stderr.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
from collections.abc import Sequence

from .errors import MachineError

log = logging.getLogger(__name__)

NETNS_DIR = "/run/netns"  # where `ip netns add` mounts named namespaces

# Offloads that make veths carry frames larger than the MTU or with partial checksums.
OFFLOADS = ("tso", "gso", "gro", "sg", "tx", "rx")


class CommandError(MachineError):
    """A system command failed."""

    def __init__(self, argv: Sequence[str], stderr: str):
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        detail = lines[-1] if lines else "failed with no message"
        super().__init__(f"`{shlex.join(argv)}` failed: {detail}")
        self.argv = list(argv)
        self.stderr = stderr


def run(argv: Sequence[str], *, input: str | None = None) -> str:
    """Run a command, return its stdout; raise CommandError (with its stderr) if it fails."""
    log.debug("run: %s", shlex.join(argv))
    try:
        proc = subprocess.run(argv, input=input, capture_output=True, text=True)
    except FileNotFoundError:
        raise MachineError(f"`{argv[0]}` is not installed (see bloatlab doctor)") from None
    if proc.returncode != 0:
        raise CommandError(argv, proc.stderr)
    return proc.stdout


def add(ns: str) -> None:
    run(["ip", "netns", "add", ns])


def delete(ns: str) -> None:
    run(["ip", "netns", "delete", ns])


def exists(ns: str) -> bool:
    return os.path.exists(os.path.join(NETNS_DIR, ns))


def list_namespaces() -> list[str]:
    """Names of all named namespaces (`ip netns list`)."""
    # Lines look like "bloatlab.t1.h1 (id: 3)" or just "bloatlab.t1.h1".
    return [line.split()[0] for line in run(["ip", "netns", "list"]).splitlines() if line.strip()]


def exec_argv(ns: str, argv: Sequence[str]) -> list[str]:
    """The argv that runs `argv` inside `ns` (with /etc/netns/NS files bind-mounted)."""
    return ["ip", "netns", "exec", ns, *argv]


def run_in(ns: str, argv: Sequence[str]) -> str:
    return run(exec_argv(ns, argv))


def ip(ns: str, *args: str) -> str:
    """`ip -n NS ARGS...`"""
    return run(["ip", "-n", ns, *args])


def tc(ns: str, *args: str) -> str:
    """`tc -n NS ARGS...`"""
    return run(["tc", "-n", ns, *args])


def sysctl(ns: str, key: str, value: str | int) -> None:
    run_in(ns, ["sysctl", "-qw", f"{key}={value}"])


def pids(ns: str) -> list[int]:
    """Processes whose network namespace is `ns`."""
    return [int(p) for p in run(["ip", "netns", "pids", ns]).split()]


def offloads_off(ns: str, iface: str) -> None:
    """Turn off segmentation, aggregation and checksum offloads, so queues see real frames.

    A feature the driver refuses is logged and skipped: the datapath counts any oversize
    frame that still gets through.

    TCP builds GSO super-packets whatever the device's features and segments them only when
    they leave the qdisc, so a kernel qdisc on a host's own interface would count up to 64 KB
    as one packet. gso_max_segs 1 makes the host's TCP send single segments instead.
    """
    try:
        run_in(ns, ["ip", "link", "set", "dev", iface, "gso_max_segs", "1"])
    except CommandError as e:
        log.debug("%s/%s: gso_max_segs 1 refused: %s", ns, iface, e)
    try:
        run_in(ns, ["ethtool", "-K", iface, *(arg for f in OFFLOADS for arg in (f, "off"))])
        return
    except CommandError:
        pass
    for feature in OFFLOADS:  # one at a time, to keep every feature the driver allows
        try:
            run_in(ns, ["ethtool", "-K", iface, feature, "off"])
        except CommandError as e:
            log.debug("%s/%s: driver refuses %s off: %s", ns, iface, feature, e)

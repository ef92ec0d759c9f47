"""What this machine's kernel offers a testbed, probed for real: which qdiscs exist, whether
namespaces and veths can be made. Every probe runs inside one throw-away namespace,
`bloatlab-doctor-<pid>`, which is always deleted again. bloatlab doctor reports it all; the
network builder asks which qdiscs the kernel backend may use.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bloatlab import binaries, proc
from bloatlab.errors import MachineError

# Each qdisc with arguments that are valid whenever the kind exists, so a failure means the
# kernel lacks it rather than that we asked badly.
QDISC_PROBES: dict[str, list[str]] = {
    "htb": [],
    "tbf": ["rate", "1mbit", "burst", "10kb", "latency", "10ms"],
    "pfifo": ["limit", "100"],
    "bfifo": ["limit", "150000"],
    "pfifo_head_drop": ["limit", "100"],
    "netem": ["delay", "10ms"],
    "codel": [],
    "fq_codel": [],
    "red": ["limit", "400000", "min", "30000", "max", "90000", "avpkt", "1000",
            "burst", "55", "bandwidth", "10mbit", "probability", "0.02"],
    "pie": [],
    "cake": [],
    "dualpi2": [],  # Linux 6.17 and later
    "fq": [],
}
UNKNOWN_QDISC = "Specified qdisc kind is unknown"

# Root's tools live in sbin, which a user's PATH often lacks.
_SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def which(name: str) -> str | None:
    path = os.environ.get("PATH", os.defpath)
    return shutil.which(name, path=os.pathsep.join([path, *_SBIN]))


def attempt(argv: list[str], timeout_s: float = 5.0) -> subprocess.CompletedProcess[str]:
    """Run a probe command; a missing program or a hang reads as a failure, never raises."""
    try:
        return proc.run(argv, timeout_s=timeout_s, check=False)
    except MachineError as exc:
        return subprocess.CompletedProcess(argv, 127, "", str(exc))


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def version_output(argv: list[str]) -> str:
    """What a binary prints for --version (a binary that prints none fails the check after)."""
    return proc.output(argv, timeout_s=10, check=False)


def binary(name: str) -> Path:
    """bloatlab's binary `name` (bloatlab.binaries finds it), once its version is checked: else a
    MachineError that says what is wrong. Asked before anything is built."""
    return binaries.verified(name, version_output)


def is_root() -> bool:
    return os.geteuid() == 0


@dataclass(frozen=True)
class CongestionControls:
    """The kernel's TCP congestion controls: every loaded one, and those a network namespace
    may make its default (the kernel lets only the init namespace default to a restricted one,
    one missing from net.ipv4.tcp_allowed_congestion_control). None: could not be read."""

    available: frozenset[str] | None
    allowed: frozenset[str] | None
    default: str | None


CC_PROC = Path("/proc/sys/net/ipv4")


def congestion_controls() -> CongestionControls:
    def read(name: str) -> list[str] | None:
        try:
            return (CC_PROC / name).read_text().split()
        except OSError:
            return None

    available, allowed, default = (read(f"tcp_{n}") for n in ("available_congestion_control",
                                                               "allowed_congestion_control", "congestion_control"))
    return CongestionControls(frozenset(available) if available is not None else None,
                              frozenset(allowed) if allowed is not None else None,
                              default[0] if default else None)


def check_congestion_control(cc: str, field: str, *, as_default: bool = False) -> None:
    """That this kernel has `cc` (and, as_default, that a namespace may make it its default);
    else a MachineError that says how to get it. Unreadable lists pass: the use will tell."""
    have = congestion_controls()
    if have.available is not None and cc not in have.available:
        raise MachineError(f"congestion control {cc!r} is not available in this kernel (it has: "
                           f"{', '.join(sorted(have.available))}); pick one of those or load its module "
                           f"(modprobe tcp_{cc})", field=field)
    if as_default:
        check_default_allowed(cc, field, have)


def check_default_allowed(cc: str, field: str, have: CongestionControls | None = None) -> None:
    """That a namespace may make `cc` its default (the kernel lists it in
    tcp_allowed_congestion_control); else a MachineError that says how to allow it."""
    have = have or congestion_controls()
    if have.allowed is not None and cc not in have.allowed:
        allowed = " ".join([*sorted(have.allowed), cc])
        raise MachineError(f"{cc} is restricted here: a namespace may default only to "
                           f"{', '.join(sorted(have.allowed))}; allow it with sysctl -w "
                           f'net.ipv4.tcp_allowed_congestion_control="{allowed}", or name it in each '
                           "workload's cc instead", field=field)


def probe_sandbox(root: bool, kinds: Iterable[str] | None = None) -> dict[str, Any]:
    """Create one namespace with a veth pair and try every qdisc (or those of `kinds`) on it,
    then delete it all.

    qdisc values: True present, False absent, None not probed (no root, no tc, no veth).
    """
    result: dict[str, Any] = {
        "netns": None, "veth": None, "error": None,
        "qdiscs": dict.fromkeys(QDISC_PROBES), "qdisc_errors": {},
    }
    ip, tc = which("ip"), which("tc")
    if not root:
        result["error"] = "not root"
        return result
    if ip is None:
        result["error"] = "ip (iproute2) not found"
        return result

    ns = f"bloatlab-doctor-{os.getpid()}"
    created = False
    try:
        added = attempt([ip, "netns", "add", ns])
        if added.returncode != 0 and "File exists" in added.stderr:
            # A namespace of ours left by a crashed doctor that had the same pid.
            attempt([ip, "netns", "del", ns])
            added = attempt([ip, "netns", "add", ns])
        created = result["netns"] = added.returncode == 0
        if not created:
            result["error"] = first_line(added.stderr) or "ip netns add failed"
            return result
        # Names are local to the namespace, so they cannot clash with the host's.
        veth = attempt([ip, "-n", ns, "link", "add", "bloatlab-d0", "type", "veth", "peer", "name", "bloatlab-d1"])
        result["veth"] = veth.returncode == 0
        if not result["veth"]:
            result["error"] = first_line(veth.stderr) or "veth creation failed"
            return result
        if tc is None:
            result["error"] = "tc (iproute2) not found"
            return result
        for kind in QDISC_PROBES if kinds is None else kinds:
            add = attempt([tc, "-n", ns, "qdisc", "add", "dev", "bloatlab-d0", "root", kind, *QDISC_PROBES[kind]])
            result["qdiscs"][kind] = add.returncode == 0
            if add.returncode == 0:
                attempt([tc, "-n", ns, "qdisc", "del", "dev", "bloatlab-d0", "root"])
            elif UNKNOWN_QDISC not in add.stderr:
                # Present maybe, but refused: worth showing rather than calling it absent.
                result["qdisc_errors"][kind] = first_line(add.stderr)
    finally:
        if created:
            deleted = attempt([ip, "netns", "del", ns])  # takes the veth pair with it
            if deleted.returncode != 0:
                result["error"] = f"could not delete namespace {ns}: {first_line(deleted.stderr)}"
    return result


_PROBED: dict[str, bool] = {}  # kind -> present, for the life of the process


def kernel_qdiscs(kinds: Iterable[str] | None = None) -> dict[str, bool]:
    """Which qdisc kinds the kernel has (False also when they could not be probed: no root):
    all of QDISC_PROBES, or those of `kinds`. Each kind is probed once per process; a run asks
    only for what its links could use (12 kinds take 60-130 ms of its start)."""
    wanted = list(QDISC_PROBES if kinds is None else dict.fromkeys(k for k in kinds if k in QDISC_PROBES))
    missing = [kind for kind in wanted if kind not in _PROBED]
    if missing:
        probed = probe_sandbox(is_root(), missing)["qdiscs"]
        _PROBED.update({kind: bool(probed[kind]) for kind in missing})
    return {kind: _PROBED[kind] for kind in wanted}

"""`bloatlab doctor`: what this machine can do, probed for real.

Owns the machine probes (root, namespaces, veth, TUN, tracefs, kernel qdiscs, tools, the
datapath binary, TCP congestion controls) and the table of which link backend can serve which
link feature. Every probe that touches the kernel does so inside one throw-away namespace,
`bloatlab-doctor-<pid>`, which is always deleted again.
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path
from typing import Any

from bloatlab import binaries
from bloatlab.errors import MachineError
from bloatlab.sim import driver as sim_driver
from bloatlab.specs.model import DirectionSpec, QueueSpec
from bloatlab.testbed import capabilities, congestion
from bloatlab.testbed.machine import TOOLS
from bloatlab.testbed.links.kernel import kernel_needs
from bloatlab.version import __version__

TRACEFS = Path("/sys/kernel/tracing")
TCP_PROBE_EVENT = "events/tcp/tcp_probe"


# Kernel module and config option for each qdisc, for the "how to get it" hints.
QDISC_SOURCES: dict[str, tuple[str, str]] = {
    "htb": ("sch_htb", "CONFIG_NET_SCH_HTB"),
    "tbf": ("sch_tbf", "CONFIG_NET_SCH_TBF"),
    "pfifo": ("sch_fifo", "CONFIG_NET_SCHED"),
    "bfifo": ("sch_fifo", "CONFIG_NET_SCHED"),
    "pfifo_head_drop": ("sch_fifo", "CONFIG_NET_SCHED"),
    "netem": ("sch_netem", "CONFIG_NET_SCH_NETEM"),
    "codel": ("sch_codel", "CONFIG_NET_SCH_CODEL"),
    "fq_codel": ("sch_fq_codel", "CONFIG_NET_SCH_FQ_CODEL"),
    "red": ("sch_red", "CONFIG_NET_SCH_RED"),
    "pie": ("sch_pie", "CONFIG_NET_SCH_PIE"),
    "cake": ("sch_cake", "CONFIG_NET_SCH_CAKE"),
    "dualpi2": ("sch_dualpi2", "CONFIG_NET_SCH_DUALPI2"),
    "fq": ("sch_fq", "CONFIG_NET_SCH_FQ"),
}

# Link features, as doctor's table of backends names them.
FEATURES: dict[str, str] = {
    "rate": "rate",
    "delay": "delay",
    "jitter": "jitter",
    "loss": "loss",
    "queue_droptail_packets": "queue droptail (packets)",
    "queue_droptail_bytes": "queue droptail (bytes)",
    "queue_drophead": "queue drophead",
    "queue_codel": "queue codel",
    "queue_fq_codel": "queue fq_codel",
    "queue_red_bytes": "queue red (bytes)",
    "queue_red_packets": "queue red (packets)",
    "queue_pie": "queue pie",
    "queue_cake": "queue cake",
    "queue_dualpi2": "queue dualpi2",
    "trace": "trace-driven rate",
    "queue_at_sender": "queue_at = sender",
}
# One link direction asking for each feature, and the field of links.kernel_needs that answers
# it: the table shows what the kernel backend would build for these, so it cannot drift from it.
_RATE = 10_000_000
FEATURE_SAMPLES: dict[str, tuple[DirectionSpec, str]] = {
    "rate": (DirectionSpec(rate_bps=_RATE), "rate_bps"),
    "delay": (DirectionSpec(delay_ns=5_000_000), "delay_ns"),
    "jitter": (DirectionSpec(delay_ns=5_000_000, jitter_ns=1_000_000), "jitter_ns"),
    "loss": (DirectionSpec(loss=0.01), "loss"),
    "queue_droptail_packets": (DirectionSpec(rate_bps=_RATE, queue=QueueSpec(packets=100)), "queue"),
    "queue_droptail_bytes": (DirectionSpec(rate_bps=_RATE, queue=QueueSpec(packets=None, bytes=150_000)), "queue"),
    "queue_drophead": (DirectionSpec(rate_bps=_RATE, queue=QueueSpec("drophead", packets=100)), "queue"),
    "queue_codel": (DirectionSpec(rate_bps=_RATE, queue=QueueSpec("codel", packets=1000)), "queue"),
    "queue_fq_codel": (DirectionSpec(rate_bps=_RATE, queue=QueueSpec("fq_codel", packets=10240)), "queue"),
    "queue_red_bytes": (DirectionSpec(rate_bps=_RATE, queue=QueueSpec("red", packets=None, bytes=400_000)), "queue"),
    "queue_red_packets": (DirectionSpec(rate_bps=_RATE, queue=QueueSpec("red", packets=1000)), "queue"),
    "queue_pie": (DirectionSpec(rate_bps=_RATE, queue=QueueSpec("pie", packets=1000)), "queue"),
    "queue_cake": (DirectionSpec(rate_bps=_RATE, queue=QueueSpec("cake", packets=10240)), "queue"),
    "queue_dualpi2": (DirectionSpec(rate_bps=_RATE, queue=QueueSpec("dualpi2", packets=10000)), "queue"),
    "trace": (DirectionSpec(trace=Path("cellular.trace")), "trace"),
}


@functools.cache
def kernel_support() -> dict[str, tuple[tuple[str, ...], str]]:
    """For each feature, the qdiscs the kernel backend builds for it (all needed), or none and why."""
    table: dict[str, tuple[tuple[str, ...], str]] = {"queue_at_sender": (("pfifo",), "")}
    for feature, (direction, field) in FEATURE_SAMPLES.items():
        needs = [n for n in kernel_needs(direction, "forward") if n.field.split(".")[1] == field]
        refused = next((n for n in needs if n.qdisc is None), None)
        table[feature] = ((), refused.why_not) if refused else (tuple(n.qdisc for n in needs if n.qdisc), "")
    return table


# Features only the kernel backend serves, and why.
KERNEL_ONLY = {"queue_at_sender": "bloatlab-link sits between the ends"}


def _tracefs_mounted() -> bool:
    try:
        mounts = Path("/proc/self/mounts").read_text()
    except OSError:
        return False
    return any(fields[1] == str(TRACEFS) and fields[2] == "tracefs"
               for fields in (line.split() for line in mounts.splitlines()) if len(fields) > 2)


def _probe_tracefs(root: bool) -> dict[str, Any]:
    """tracefs mounted (mounting it if we may) and whether tcp:tcp_probe exists."""
    out: dict[str, Any] = {"path": str(TRACEFS), "mounted": _tracefs_mounted(),
                           "mounted_by_doctor": False, "tcp_probe": None, "error": None}
    if not out["mounted"] and root:
        mount = capabilities.attempt(["mount", "-t", "tracefs", "nodev", str(TRACEFS)])
        if mount.returncode == 0:
            out["mounted"] = out["mounted_by_doctor"] = True
        else:
            out["error"] = capabilities.first_line(mount.stderr) or "mount failed"
    if out["mounted"]:
        try:
            out["tcp_probe"] = (TRACEFS / TCP_PROBE_EVENT).is_dir()
        except PermissionError:
            out["tcp_probe"] = None  # tracefs is root-only: unknown, not absent
    return out


def _probe_tun() -> bool | None:
    try:
        fd = os.open("/dev/net/tun", os.O_RDWR)
    except PermissionError:
        return None  # the device exists but is root-only here
    except OSError:
        return False
    os.close(fd)
    return True


def _probe_tools() -> dict[str, dict[str, str | None]]:
    tools: dict[str, dict[str, str | None]] = {}
    for name, (version_args, _pattern, _package) in TOOLS.items():
        path = capabilities.which(name)
        version = None
        if path is not None:
            run = capabilities.attempt([path, *version_args])
            version = capabilities.first_line(run.stdout) or capabilities.first_line(run.stderr) or None
        tools[name] = {"path": path, "version": version}
    return tools


def probe_binary(name: str) -> dict[str, str | None]:
    """Where a Rust binary is, the version it reports, and why it cannot be used, if it cannot
    (none found, a variable that names no executable, another version than bloatlab's)."""
    entry: dict[str, str | None] = {"path": None, "version": None, "env": os.environ.get(binaries.BINARIES[name][0]),
                                    "problem": None}
    try:
        path = binaries.locate(name)
    except MachineError as e:
        entry["problem"] = str(e)
        return entry
    if path is None:
        return entry
    entry["path"] = str(path)
    run = capabilities.attempt(binaries.version_argv(path))
    entry["version"] = binaries.reported_version(name, run.stdout)
    try:
        binaries.check(name, path, run.stdout)
    except MachineError as e:
        entry["problem"] = str(e)
    return entry


def backend_support(report: dict[str, Any]) -> dict[str, dict[str, bool]]:
    """For each backend ("userspace", "kernel"), which link features it can serve here."""
    sandbox = report["sandbox"]
    links_possible = bool(sandbox["netns"]) and bool(sandbox["veth"])
    userspace = links_possible and report["datapath"]["path"] is not None and not report["datapath"]["problem"]
    qdiscs = report["qdiscs"]
    return {
        "userspace": {feature: userspace and feature not in KERNEL_ONLY for feature in FEATURES},
        "kernel": {feature: links_possible and bool(needs) and all(qdiscs.get(q) for q in needs)
                   for feature, (needs, _) in kernel_support().items()},
    }


# What an emulated run needs of a machine's tools: the ones the workloads start, and iproute2.
RUN_TOOLS = ("iperf3", "ping", "curl", "irtt", "nghttpd", "tc", "ip")


def problems(report: dict[str, Any]) -> list[str]:
    """What stops this machine from running emulated experiments, one line each naming the fix;
    none: it can (what a cluster node must pass, lab/cluster.py)."""
    out = []
    if not report["root"]:
        out.append(f"not root (euid {report['euid']}); run bloatlab as root")
    if not (report["sandbox"]["netns"] and report["sandbox"]["veth"]):
        out.append(f"no network namespaces or veth pairs ({report['sandbox']['error'] or 'refused'})")
    datapath = report["datapath"]
    if datapath["path"] is None or datapath["problem"]:
        out.append(f"bloatlab-link unusable: {datapath['problem'] or 'not found'}; make setup builds it")
    missing = [name for name in RUN_TOOLS if not report["tools"].get(name, {}).get("path")]
    if missing:
        packages = " ".join(dict.fromkeys(TOOLS[name][2] for name in missing))
        out.append(f"{', '.join(missing)} not installed; apt-get install {packages}")
    return out


def collect() -> dict[str, Any]:
    """Probe the machine; the result is JSON-ready."""
    root = capabilities.is_root()
    sandbox = capabilities.probe_sandbox(root)
    found = {name: probe_binary(name) for name in binaries.BINARIES}
    cc = capabilities.congestion_controls()
    report: dict[str, Any] = {
        "bloatlab": __version__,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "root": root,
        "euid": os.geteuid(),
        "sandbox": {key: sandbox[key] for key in ("netns", "veth", "error")},
        "tun": _probe_tun(),
        "tracefs": _probe_tracefs(root),
        "qdiscs": sandbox["qdiscs"],
        "qdisc_errors": sandbox["qdisc_errors"],
        "tools": _probe_tools(),
        "datapath": found["bloatlab-link"],
        "binaries": found,
        # `allowed`: what a host's `cc` may be (the kernel lets a namespace default to no other).
        "congestion_control": {"available": sorted(cc.available or ()), "allowed": sorted(cc.allowed or ()),
                               "default": cc.default, "dctcp": congestion.dctcp_support().to_dict()},
    }
    report["backends"] = backend_support(report)
    report["simulation"] = sim_driver.status()
    report["calibration"] = {"optuna": _installed("optuna"), "tomli_w": _installed("tomli-w")}
    return report


def _installed(distribution: str) -> str | None:
    """An installed Python package's version, or None."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


# ---------------------------------------------------------------------------------------
# Rendering

_LABEL_WIDTH = 28
_VERSION_WIDTH = 48


def render(report: dict[str, Any], ascii_only: bool = False) -> str:
    """A readable report: one line per check, and for each missing thing how to get it."""
    marks = {True: "yes", False: "no ", None: "?  "} if ascii_only else {True: "✓", False: "✗", None: "?"}
    lines: list[str] = []

    def check(ok: bool | None, label: str, detail: str = "") -> None:
        lines.append(f"  {marks[ok]} {label:<{_LABEL_WIDTH}} {detail}".rstrip())

    def section(title: str) -> None:
        lines.extend(["", title])

    root = report["root"]
    lines.append(f"bloatlab {report['bloatlab']} doctor: kernel {report['kernel']}, "
                 f"python {report['python']}")
    if not root:
        lines.append("NOT ROOT: most features (namespaces, links, qdisc probes, tracing) need "
                     "root; run `sudo bloatlab doctor` for the full picture.")

    section("Privileges")
    check(root, "root", f"euid {report['euid']}" if root else
          f"euid {report['euid']}: run as root (sudo)")

    section("Namespaces")
    sandbox = report["sandbox"]
    needs_root = "needs root" if not root else ""
    check(sandbox["netns"], "network namespaces",
          needs_root or ("" if sandbox["netns"] else
                         f"{sandbox['error']}: a kernel with CONFIG_NET_NS"))
    check(sandbox["veth"], "veth pairs",
          needs_root or ("" if sandbox["veth"] else "modprobe veth / a kernel with CONFIG_VETH"))
    tun = report["tun"]
    check(tun, "TUN (/dev/net/tun)", "" if tun else
          "needs root" if tun is None else "modprobe tun / a kernel with CONFIG_TUN")
    if sandbox["error"] and root and sandbox["netns"] and sandbox["veth"]:
        lines.append(f"    note: {sandbox['error']}")

    section("Tracing")
    tracefs = report["tracefs"]
    if tracefs["mounted"]:
        detail = tracefs["path"] + (" (mounted it just now)" if tracefs["mounted_by_doctor"] else "")
    else:
        detail = (f"mount -t tracefs nodev {tracefs['path']} (as root) / a kernel with CONFIG_TRACING"
                  + (f"; mount said: {tracefs['error']}" if tracefs["error"] else ""))
    check(tracefs["mounted"], "tracefs", detail)
    probe = tracefs["tcp_probe"]
    check(probe, "tcp:tcp_probe tracepoint",
          "" if probe else ("needs root (tracefs is root-only)" if probe is None and not root
                            else "a kernel >= 4.16 with CONFIG_TRACEPOINTS"))

    section("Kernel qdiscs (for the kernel backend)")
    for kind, present in report["qdiscs"].items():
        module, config = QDISC_SOURCES.get(kind, (f"sch_{kind}", "?"))
        if present is None:
            detail = "not probed: " + (sandbox["error"] or "unknown")
        elif present:
            detail = ""
        elif kind in report.get("qdisc_errors", {}):
            detail = f"tc refused: {report['qdisc_errors'][kind]}"
        else:
            detail = f"modprobe {module} / a kernel with {config}"
        check(present, kind, detail)

    section("Tools")
    for name, tool in report["tools"].items():
        package = TOOLS[name][2] if name in TOOLS else name
        if tool["path"]:
            version = tool["version"] or "version unknown"
            if len(version) > _VERSION_WIDTH:  # curl's first line lists every library it links
                version = version[:_VERSION_WIDTH - 1] + "…"
            check(True, name, f"{version}  ({tool['path']})")
        else:
            check(False, name, f"apt-get install {package}")

    section("bloatlab's binaries")
    for name, binary in report["binaries"].items():
        if binary["path"] and not binary["problem"]:
            check(True, name, f"{binary['version']}  ({binary['path']})")
        elif binary["path"]:
            check(False, name, binary["path"])
        else:
            check(False, name, f"make build, pip install bloatlab, or set {binaries.BINARIES[name][0]}")
        if binary["problem"]:
            lines.append(f"    note: {binary['problem']}")
    datapath = report["datapath"]

    section("TCP congestion control")
    cc = report["congestion_control"]
    lines.append(f"  available: {' '.join(cc['available']) or 'unknown'}")
    lines.append(f"  default:   {cc['default'] or 'unknown'}")
    lines.append(f"  a host's default may be: {' '.join(cc['allowed']) or 'unknown'}"
                 " (net.ipv4.tcp_allowed_congestion_control)")
    lines.append("  (more may load as modules: modprobe tcp_<name>)")
    if (dctcp := cc.get("dctcp")) is not None:
        check(dctcp["provider"] is not None, "dctcp", congestion.Support(**dctcp).summary().removeprefix("dctcp: "))

    sim = report.get("simulation") or {"ns3": None, "compiler": None, "driver": None, "problem": None}
    section("Simulation (ns-3, for backend = \"ns3\")")
    check(sim["ns3"] is not None, "ns3 wheel", sim["ns3"] or "pip install 'bloatlab[sim]' (make test installs it)")
    if sim["ns3"] is not None:
        check(sim["compiler"] is not None, "C++ compiler", sim["compiler"] or "apt-get install g++")
        if sim["compiler"] is not None:
            check(True, "driver", sim["driver"] or "built on the first simulated run (some 20 s), then cached")
    if sim["problem"] and sim["ns3"] is not None:
        lines.append(f"    note: {sim['problem']}")

    calibration = report.get("calibration") or {"optuna": None, "tomli_w": None}
    section("Calibration (bloatlab calibrate)")
    for name in ("optuna", "tomli_w"):
        check(calibration[name] is not None, name.replace("_", "-"),
              calibration[name] or "pip install 'bloatlab[calibrate]' (make setup installs it)")

    section("Link backends")
    backends = report["backends"]
    lines.append(f"  {'feature':<{_LABEL_WIDTH + 2}} {'userspace':<10} kernel")
    for feature, label in FEATURES.items():
        user_ok, kernel_ok = backends["userspace"][feature], backends["kernel"][feature]
        needs, why_not = kernel_support()[feature]
        why = ""
        if feature in KERNEL_ONLY:
            why = f"  (kernel only: {KERNEL_ONLY[feature]})"
        elif not needs:
            why = f"  (no kernel qdisc does this: {why_not})"
        elif not kernel_ok:
            why = (f"  (needs {' and '.join(needs)})" if sandbox["netns"] and sandbox["veth"]
                   else "  (needs namespaces and veth)")
        lines.append(f"  {label:<{_LABEL_WIDTH + 2}} {marks[user_ok]:<10} {marks[kernel_ok]}{why}")
    if not any(backends["userspace"].values()):
        missing = [what for what, ok in (("root", root), ("network namespaces", sandbox["netns"]),
                                         ("veth", sandbox["veth"]),
                                         ("bloatlab-link", datapath["path"] and not datapath["problem"]))
                   if not ok]
        lines.append(f"  userspace backend unavailable: missing {', '.join(missing)}")
    return "\n".join(lines)

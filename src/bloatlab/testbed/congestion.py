"""The TCP congestion controls a spec may name that this kernel may lack, and where each comes
from. "dctcp" is the kernel's own where it has one (tcp_dctcp, loaded with modprobe where it is a
module); else bloatlab's BPF DCTCP (bpf/bloatlab_dctcp.bpf.c), registered as bloatlab_dctcp
while a network holds it. Every other name is the kernel's alone (capabilities).

    check(cc, field)     before anything is built: a one-line error naming the field and the fix
                         where `cc` cannot be had here
    provide(ccs)         as a network is built: the kernel's name for each, registering ours
    release(held)        as a network is removed, and in `bloatlab clean`: ours unregistered once
                         no network holds it
    dctcp_support()      for bloatlab doctor: whether dctcp can be had here, how, or why not
    read_flows(cc)       the BPF DCTCP's record of each connection: alpha, marks, windows, cwnd

A registration is the machine's, not a namespace's: one serves every network. A network holds a
congestion control by naming it in its state file (state.py) before it is provided, and lets it
go by removing that file; provide and release take one lock, so a run that ends never
unregisters what a run that starts has just found registered.
"""

from __future__ import annotations

import fcntl
import functools
import json
import logging
import subprocess
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bloatlab import binaries
from bloatlab.errors import MachineError
from bloatlab.testbed import capabilities

log = logging.getLogger(__name__)

BTF = Path("/sys/kernel/btf/vmlinux")
# What the kernel's BTF names where it takes BPF congestion controls (bpf_tcp_ca's struct_ops).
STRUCT_OPS_TYPE = b"bpf_struct_ops_tcp_congestion_ops"
BPFTOOL_TIMEOUT_S = 30.0  # registering loads the object through the verifier: about a second
CC_LIST = capabilities.CC_PROC / "tcp_available_congestion_control"


@dataclass(frozen=True)
class BpfCongestionControl:
    """A congestion control bloatlab brings as a BPF object, for a kernel without its own."""

    spec_name: str  # what a spec writes: "dctcp"
    kernel_name: str  # what it is registered as, and its struct_ops map's name (<= 15 characters)
    module: str  # the kernel's module that is spec_name
    object: str  # the object's file name (bloatlab.binaries.locate_object)
    stats_map: str  # its map of per-connection figures
    what: str  # its name in messages


BPF_CCS = {cc.spec_name: cc for cc in (
    BpfCongestionControl("dctcp", "bloatlab_dctcp", "tcp_dctcp", "bloatlab_dctcp.bpf.o", "bloatlab_dcflow",
                         "bloatlab's BPF DCTCP"),
)}


def _available() -> frozenset[str]:
    return capabilities.congestion_controls().available or frozenset()


def offered() -> list[str]:
    """Every congestion control a run can ask for here: the kernel's (those a user registered,
    BPF ones too), then bloatlab's own BPF ones the kernel lacks but can take."""
    own = {bpf.kernel_name for bpf in BPF_CCS.values()}
    kernel = [cc for cc in sorted(_available()) if cc not in own]
    return kernel + [cc for cc in BPF_CCS if cc not in kernel and support(cc).provider is not None]


def _module_exists(module: str) -> bool:
    """The kernel has `module` to load (modprobe's dry run: nothing is loaded)."""
    modprobe = capabilities.which("modprobe")
    return modprobe is not None and capabilities.attempt([modprobe, "-n", "-q", module]).returncode == 0


@functools.cache
def _kernel_takes_bpf_cc() -> bool:
    try:
        return STRUCT_OPS_TYPE + b"\0" in BTF.read_bytes()  # the type's name in BTF's string table
    except OSError:
        return False


# Whether a congestion control can be had -------------------------------------------------------

@dataclass(frozen=True)
class Support:
    """Whether a spec's congestion control can be had on this machine, and how (doctor shows it)."""

    cc: str  # the spec's name: "dctcp"
    provider: str | None  # "kernel" (its own: loaded, or a module to load), "bpf" (bloatlab's), None: neither
    name: str | None  # what the hosts' sockets are given: "dctcp" or "bloatlab_dctcp"; None: neither
    kernel_module: bool  # the kernel has it, loaded or as a module
    btf: bool  # /sys/kernel/btf/vmlinux, which BPF objects are built and loaded against
    struct_ops: bool  # the kernel takes BPF congestion controls (bpf_tcp_ca)
    bpftool: str | None  # the bpftool that registers it
    object: str | None  # the built BPF object
    registered: bool  # bloatlab's is registered now (a run holds it, or a killed one left it)
    reason: str | None  # provider None: why it cannot be had, and the fix

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """One line: how a spec's cc = "dctcp" is served here, or why it is not."""
        bpf = BPF_CCS[self.cc]
        if self.provider == "kernel":
            return f"{self.cc}: the kernel's own ({bpf.module})"
        if self.provider == "bpf":
            now = "; registered now" if self.registered else ""
            return (f"{self.cc}: {bpf.what} ({self.object}), registered as {self.name} while a run uses it "
                    f"(this kernel has no {bpf.module}){now}")
        return f"{self.cc}: unavailable: {self.reason}"


def support(cc: str) -> Support:
    """How `cc` (one of BPF_CCS) can be had here: the kernel's own first, else bloatlab's."""
    bpf = BPF_CCS[cc]
    have = _available()
    kernel = cc in have or _module_exists(bpf.module)
    btf = BTF.is_file()
    struct_ops = btf and _kernel_takes_bpf_cc()
    bpftool = capabilities.which("bpftool")
    env_var, _ = binaries.BPF_OBJECTS[bpf.object]
    try:
        found = binaries.locate_object(bpf.object)
        bad_variable = None
    except MachineError as e:
        found, bad_variable = None, str(e)
    reason = None
    if not kernel:
        if not btf:
            reason = (f"the kernel has no {bpf.module} and no BTF ({BTF}), which BPF congestion controls need; "
                      f"load {bpf.module} (modprobe {bpf.module}) or boot a kernel with it or with BTF")
        elif not struct_ops:
            reason = (f"the kernel has no {bpf.module} and takes no BPF congestion controls (bpf_tcp_ca); boot a "
                      f"kernel with {bpf.module} or with CONFIG_BPF_JIT and CONFIG_BPF_SYSCALL")
        elif bpftool is None:
            reason = "bpftool is not installed; apt-get install bpftool (make setup does)"
        elif found is None:
            reason = bad_variable or (f"{bpf.what} is not built ({bpf.object}); run make build in bloatlab's checkout "
                                      "(with clang, bpftool and libbpf-dev, which make setup installs), or set "
                                      f"{env_var} to a built object")
    provider = "kernel" if kernel else None if reason else "bpf"
    return Support(cc=cc, provider=provider, name={"kernel": cc, "bpf": bpf.kernel_name}.get(provider or ""),
                   kernel_module=kernel, btf=btf, struct_ops=struct_ops, bpftool=bpftool,
                   object=str(found) if found else None, registered=bpf.kernel_name in have, reason=reason)


def dctcp_support() -> Support:
    """For bloatlab doctor: how cc = "dctcp" is served on this machine, or why it cannot be."""
    return support("dctcp")


def check(cc: str, field: str, *, as_default: bool = False) -> None:
    """That `cc` can be had here (as a namespace's default too, as_default); else a MachineError
    naming `field` and the fix. Changes nothing on the machine."""
    bpf = BPF_CCS.get(cc)
    have = capabilities.congestion_controls()
    if bpf is None or have.available is None or cc in have.available:
        capabilities.check_congestion_control(cc, field, as_default=as_default)
        return
    found = support(cc)
    if found.provider == "kernel" and as_default:
        capabilities.check_default_allowed(cc, field, have)
    elif found.provider is None:
        # Ours says it is not restricted (TCP_CONG_NON_RESTRICTED): any namespace may default to it.
        raise MachineError(f"this kernel has no {cc}, and {bpf.what} cannot stand in for it: {found.reason}",
                           field=field)


# Registering and unregistering ------------------------------------------------------------------

@contextmanager
def _lock() -> Iterator[None]:
    """One process at a time registers or unregisters: an exclusive flock on the kernel's list of
    congestion controls, which is what they change (and which leaves no lock file behind)."""
    with open(CC_LIST) as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def provide(ccs: Iterable[str]) -> dict[str, str]:
    """The kernel's name for each of `ccs`, as the hosts' sockets, routes and sysctls take it:
    the name itself, or its BPF stand-in's, registered now unless it is already. Says which."""
    names = {}
    for cc in dict.fromkeys(ccs):
        bpf = BPF_CCS.get(cc)
        names[cc] = cc if bpf is None else _provide(bpf)
    return names


def _provide(bpf: BpfCongestionControl) -> str:
    if bpf.spec_name not in _available() and _module_exists(bpf.module):
        modprobe = capabilities.which("modprobe")
        capabilities.attempt([modprobe or "modprobe", "-q", bpf.module])
    if bpf.spec_name in _available():
        log.info("cc %s: the kernel's own (%s)", bpf.spec_name, bpf.module)
        return bpf.spec_name
    with _lock():
        if bpf.kernel_name in _available():
            log.info("cc %s: %s, registered already as %s (another run uses it too)", bpf.spec_name, bpf.what,
                     bpf.kernel_name)
        else:
            _register(bpf)
            log.info("cc %s: this kernel has no %s; %s registered as %s, until no network uses it",
                     bpf.spec_name, bpf.module, bpf.what, bpf.kernel_name)
    return bpf.kernel_name


def _register(bpf: BpfCongestionControl) -> None:
    found = support(bpf.spec_name)
    if found.provider != "bpf" or found.bpftool is None or found.object is None:
        raise MachineError(f"this kernel has no {bpf.spec_name}, and {bpf.what} cannot stand in for it: "
                           f"{found.reason or 'the kernel has it after all'}")
    done = capabilities.attempt([found.bpftool, "struct_ops", "register", found.object], timeout_s=BPFTOOL_TIMEOUT_S)
    if done.returncode != 0 or bpf.kernel_name not in _available():
        # What a failed register made (its maps, its programs) went with the bpftool process.
        raise MachineError(f"bpftool could not register {bpf.what} ({found.object}): {_bpftool_error(done)}; "
                           "rebuild it (make build), and see bloatlab doctor")


def _bpftool_error(done: subprocess.CompletedProcess[str]) -> str:
    """The line that says why: bpftool's "Error:" line, else the last it printed (a verifier log
    ends with its verdict)."""
    lines = [line.strip() for line in (done.stderr + "\n" + done.stdout).splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error:")]
    return (errors or lines or [f"exit status {done.returncode}"])[-1]


def release(held: Callable[[], Iterable[str]]) -> list[str]:
    """Unregister the BPF stand-ins no network holds; `held` gives the spec names every
    registered network holds, asked under the lock. What was removed, as `bloatlab clean` says it."""
    registered = [bpf for bpf in BPF_CCS.values() if bpf.kernel_name in _available()]
    if not registered:
        return []
    removed = []
    with _lock():
        kept = set(held())
        for bpf in registered:
            if bpf.spec_name not in kept and bpf.kernel_name in _available():
                _unregister(bpf)
                removed.append(f"congestion control {bpf.kernel_name} ({bpf.what})")
    return removed


def _unregister(bpf: BpfCongestionControl) -> None:
    bpftool = capabilities.which("bpftool")
    if bpftool is None:
        raise MachineError(f"{bpf.kernel_name} is registered, but bpftool, which unregisters it, is not installed; "
                           "apt-get install bpftool, then bloatlab clean")
    last = None
    for map_id in struct_ops_ids(bpf.kernel_name):
        last = capabilities.attempt([bpftool, "struct_ops", "unregister", "id", str(map_id)],
                                    timeout_s=BPFTOOL_TIMEOUT_S)
    if bpf.kernel_name in _available():
        why = _bpftool_error(last) if last is not None else "bpftool lists no struct_ops map of that name"
        raise MachineError(f"could not unregister {bpf.kernel_name}: {why}; try bpftool struct_ops unregister "
                           f"name {bpf.kernel_name}")


def _bpftool_json(*args: str) -> Any:
    bpftool = capabilities.which("bpftool")
    if bpftool is None:
        return []
    done = capabilities.attempt([bpftool, "-j", *args], timeout_s=BPFTOOL_TIMEOUT_S)
    try:
        return json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else []
    except ValueError:
        return []


def struct_ops_ids(name: str) -> list[int]:
    """The struct_ops maps of congestion controls named `name` (bloatlab's only ever by its own
    names): registered ones, and any still freed while sockets that used it close."""
    shown = _bpftool_json("struct_ops", "show")
    return [m["id"] for m in shown if isinstance(m, dict) and m.get("name") == name
            and m.get("kernel_struct_ops") == "tcp_congestion_ops"]


# What the BPF DCTCP recorded ---------------------------------------------------------------------

@dataclass(frozen=True)
class BpfFlow:
    """One connection end as bloatlab's BPF DCTCP saw it (bpf/bloatlab_dctcp.bpf.c's map)."""

    local: str  # "10.0.0.1:41180"
    remote: str
    alpha: float  # 0..1, after the last window
    cwnd_pkts: int  # at the last window's end
    ssthresh_pkts: int
    fallback: bool  # ECN was not negotiated: the connection ran reno
    windows: int  # windows that ended (alpha updates)
    marked_windows: int
    cwnd_sum_pkts: int  # the cwnd at each window's end, summed
    bytes_acked: int
    bytes_marked: int  # acknowledged with ECE
    reductions: int  # ssthresh asked: ECE (once a window) or loss
    losses: int  # halvings for loss
    ce_segments: int  # as a receiver: CE-marked data segments
    ce_changes: int  # as a receiver: CE state changes, each acknowledged at once
    delayed_acks_flushed: int  # as a receiver: delayed ACKs sent early with the prior CE state
    updated_ns: int  # CLOCK_MONOTONIC

    @classmethod
    def from_map(cls, key: dict[str, Any], value: dict[str, Any]) -> BpfFlow:
        def end(addr: str, port: str) -> str:
            return ".".join(str(byte) for byte in key[addr]) + f":{key[port]}"

        return cls(local=end("local_addr", "local_port"), remote=end("remote_addr", "remote_port"),
                   alpha=value["alpha"] / 1024, cwnd_pkts=value["cwnd"], ssthresh_pkts=value["ssthresh"],
                   fallback=bool(value["fallback"]), windows=value["windows"], marked_windows=value["marked_windows"],
                   cwnd_sum_pkts=value["cwnd_sum"], bytes_acked=value["bytes_acked"],
                   bytes_marked=value["bytes_marked"], reductions=value["reductions"], losses=value["losses"],
                   ce_segments=value["ce_segments"], ce_changes=value["ce_changes"],
                   delayed_acks_flushed=value["delayed_acks_flushed"], updated_ns=value["updated_ns"])


def read_flows(cc: str = "dctcp") -> list[BpfFlow]:
    """Every connection end the BPF stand-in for `cc` has recorded since it was last registered
    (none when it is not loaded). An earlier registration's map lives on, unregistered, while
    sockets that used it close; the newest map (the highest id) is the registered one's."""
    bpf = BPF_CCS[cc]
    ids = [m["id"] for m in _bpftool_json("map", "show") if isinstance(m, dict) and m.get("name") == bpf.stats_map]
    if not ids:
        return []
    return [BpfFlow.from_map(entry["formatted"]["key"], entry["formatted"]["value"])
            for entry in _bpftool_json("map", "dump", "id", str(max(ids)))
            if isinstance(entry, dict) and "formatted" in entry]

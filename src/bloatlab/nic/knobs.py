"""The knobs of a real interface: read them, set them, put them back.

    txqueuelen   `ip link set IF txqueuelen N`; it bounds a pfifo or bfifo when the qdisc is
                 created, and pfifo_fast always; a noqueue root has no queue for it to bound
    root qdisc   `tc qdisc replace dev IF root KIND`; "default" deletes the root, so the kernel
                 attaches the device's default (noqueue on a veth, default_qdisc elsewhere)
    BQL          /sys/class/net/IF/queues/tx-*/byte_queue_limits/limit_{max,min}, every tx queue
    offloads     `ethtool -K IF FEATURE on|off`; `ethtool -k` marks what the driver cannot change

A snapshot is plain JSON (the journal's "original", run.json's "settings_applied"); restore()
puts a snapshot back and checks every field afterwards. Everything runs inside the namespace
when there is one: `ip -n`, `tc -n`, and `ip netns exec` (which mounts the namespace's /sys)
for ethtool and the BQL files.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any

from bloatlab import proc
from bloatlab.errors import BloatlabError, MachineError
from bloatlab.testbed import netns

TXQUEUELEN_MIN, TXQUEUELEN_MAX = 1, 1_000_000
BQL_MAX = 1_879_048_192  # DQL_MAX_LIMIT: the kernel's limit_max default and ceiling
BQL_KEYS = ("limit_max", "limit_min")
DEFAULT_QDISC = "default"  # not a kind: "give the root back to the kernel"
# Root qdiscs a sweep may install, with their defaults (no parameters: the kernel's own).
QDISC_KINDS = ("pfifo", "bfifo", "pfifo_head_drop", "pfifo_fast", "fq_codel", "codel", "fq", "cake", "pie",
               "noqueue", DEFAULT_QDISC)
# Qdiscs whose packet limit txqueuelen sets (pfifo_fast reads it on every change).
TXQUEUELEN_BOUNDS = ("pfifo", "bfifo", "pfifo_head_drop", "pfifo_fast")
# ethtool's short names and the names `ethtool -k` prints for them.
OFFLOAD_NAMES = {
    "rx": "rx-checksumming", "tx": "tx-checksumming", "sg": "scatter-gather",
    "tso": "tcp-segmentation-offload", "ufo": "udp-fragmentation-offload",
    "gso": "generic-segmentation-offload", "gro": "generic-receive-offload", "lro": "large-receive-offload",
    "rxvlan": "rx-vlan-offload", "txvlan": "tx-vlan-offload", "ntuple": "ntuple-filters",
    "rxhash": "receive-hashing",
}
SHORT_NAMES = {long: short for short, long in OFFLOAD_NAMES.items()}


@dataclass(frozen=True)
class Iface:
    """An interface, in a namespace or in this one. `sysfs` is where /sys is (tests use a tree)."""

    name: str
    netns: str | None = None
    sysfs: str = "/sys"

    def __str__(self) -> str:
        return f"{self.name} in namespace {self.netns}" if self.netns else self.name

    def exec(self, argv: list[str]) -> str:
        return proc.output(argv, ns=self.netns)

    def ip(self, *args: str) -> str:
        return proc.output(["ip", *(["-n", self.netns] if self.netns else []), *args])

    def tc(self, *args: str) -> str:
        return proc.output(["tc", *(["-n", self.netns] if self.netns else []), *args])

    @property
    def queues_dir(self) -> str:
        return f"{self.sysfs}/class/net/{self.name}/queues"


def check_iface(iface: Iface) -> dict[str, Any]:
    """The interface's `ip -j link` entry; a one-line error naming the field if there is none."""
    if iface.netns is not None and not netns.exists(iface.netns):
        raise BloatlabError(f"no network namespace {iface.netns!r} (ip netns list shows them)", field="--netns")
    try:
        links = json.loads(iface.ip("-j", "link", "show"))
    except proc.CommandError as e:
        raise MachineError(f"cannot list interfaces: {e}", field="--iface") from None
    for link in links:
        if link.get("ifname") == iface.name:
            return link
    where = f" in namespace {iface.netns}" if iface.netns else ""
    names = ", ".join(link["ifname"] for link in links if link.get("ifname") != "lo") or "none but lo"
    raise BloatlabError(f"no interface {iface.name!r}{where} (it has: {names})", field="--iface")


# txqueuelen ----------------------------------------------------------------------------------

def read_txqueuelen(iface: Iface) -> int:
    return int(check_iface(iface).get("txqlen", 0))


def set_txqueuelen(iface: Iface, packets: int) -> None:
    iface.ip("link", "set", "dev", iface.name, "txqueuelen", str(packets))


# The root qdisc ------------------------------------------------------------------------------

def read_root_qdisc(iface: Iface) -> dict[str, Any]:
    """{"kind", "handle", "default", "options"}; default: the kernel attached it (handle 0:)."""
    found = json.loads(iface.tc("-j", "qdisc", "show", "dev", iface.name, "root") or "[]")
    root = next((q for q in found if q.get("root")), found[0] if found else {"kind": "noqueue", "handle": "0:"})
    return {"kind": root["kind"], "handle": root.get("handle", "0:"), "default": root.get("handle") == "0:",
            "options": root.get("options", {})}


def restorable_qdisc(qdisc: dict[str, Any]) -> list[str] | None:
    """The `tc qdisc replace ... root` arguments that re-create a hand-made root qdisc, or None
    if bloatlab cannot (a classful one, or options it does not know)."""
    kind, options = qdisc["kind"], qdisc.get("options", {})
    if kind in ("pfifo", "bfifo", "pfifo_head_drop") and set(options) <= {"limit"} and "limit" in options:
        return ["handle", qdisc["handle"], kind, "limit", str(options["limit"])]
    if kind in ("noqueue", "pfifo_fast") and not qdisc_has_custom_priomap(options):
        return ["handle", qdisc["handle"], kind]
    return None


def qdisc_has_custom_priomap(options: dict[str, Any]) -> bool:
    return "priomap" in options and options["priomap"] != [1, 2, 2, 2, 1, 2, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]


def set_root_qdisc(iface: Iface, kind: str, txqueuelen: int, mtu: int) -> None:
    """Install `kind` as the root (its limit from txqueuelen for the FIFOs, as a fresh one takes
    it: an existing FIFO changed without a limit would keep its old one)."""
    if kind == DEFAULT_QDISC:
        if not read_root_qdisc(iface)["default"]:
            iface.tc("qdisc", "del", "dev", iface.name, "root")
        return
    args = [kind]
    if kind in ("pfifo", "pfifo_head_drop"):
        args += ["limit", str(txqueuelen)]
    elif kind == "bfifo":
        args += ["limit", str(txqueuelen * mtu)]
    iface.tc("qdisc", "replace", "dev", iface.name, "root", *args)


def restore_root_qdisc(iface: Iface, original: dict[str, Any]) -> None:
    current = read_root_qdisc(iface)
    if original["default"]:
        if not current["default"]:
            iface.tc("qdisc", "del", "dev", iface.name, "root")
        return
    if (current["kind"], current["handle"], current["options"]) == (original["kind"], original["handle"],
                                                                    original["options"]):
        return
    args = restorable_qdisc(original)
    if args is None:
        raise MachineError(f"cannot re-create the root qdisc {original['kind']} {original['handle']} of {iface}; "
                           "set it up again by hand")
    if not current["default"]:  # a replace keeps the handle of what is there; start afresh
        iface.tc("qdisc", "del", "dev", iface.name, "root")
    iface.tc("qdisc", "replace", "dev", iface.name, "root", *args)


# Byte Queue Limits ----------------------------------------------------------------------------

def read_bql(iface: Iface) -> dict[str, dict[str, int]]:
    """{"tx-0": {"limit_max": N, "limit_min": N}, ...}; empty when the driver has no BQL
    (the kernel then shows no byte_queue_limits directory)."""
    script = (f"cd {shlex.quote(iface.queues_dir)} || exit 3; for q in tx-*; do "
              'for k in limit_max limit_min; do f="$q/byte_queue_limits/$k"; '
              '[ -r "$f" ] && echo "$q $k $(cat "$f")"; done; done; exit 0')
    try:
        out = iface.exec(["sh", "-c", script])
    except proc.CommandError:
        raise MachineError(f"cannot read {iface.queues_dir} for {iface}") from None
    bql: dict[str, dict[str, int]] = {}
    for line in out.splitlines():
        queue, key, value = line.split()
        bql.setdefault(queue, {})[key] = int(value)
    return dict(sorted(bql.items(), key=lambda item: int(item[0].split("-")[1])))


def set_bql(iface: Iface, key: str, value: int, queues: list[str]) -> None:
    """Write one limit into every tx queue."""
    if key not in BQL_KEYS:
        raise ValueError(key)
    script = "; ".join(f"echo {int(value)} > {shlex.quote(f'{iface.queues_dir}/{q}/byte_queue_limits/{key}')}"
                       for q in queues)
    iface.exec(["sh", "-ec", script])


def restore_bql(iface: Iface, original: dict[str, dict[str, int]]) -> None:
    current = read_bql(iface)
    # limit_min may not exceed limit_max: lower limit_min first if it is too high for the target.
    for key in ("limit_min", "limit_max", "limit_min"):
        queues = [q for q, limits in original.items() if q in current and key in limits
                  and current[q].get(key) != limits[key]]
        for q in queues:
            set_bql(iface, key, original[q][key], [q])
        current = read_bql(iface) if queues else current


# Offloads -------------------------------------------------------------------------------------

_FEATURE = re.compile(r"^(?P<indent>\s*)(?P<name>[\w-]+): (?P<state>on|off)(?: \[(?P<note>[^\]]+)\])?$")


@dataclass(frozen=True)
class Feature:
    name: str
    active: bool
    fixed: bool
    requested: bool  # what was asked; differs from active when the kernel overrode it
    parent: str | None  # the aggregate line it is indented under ("tcp-segmentation-offload")


def parse_features(text: str) -> dict[str, Feature]:
    """`ethtool -k` output: every feature line, aggregates (those with indented children) too."""
    features: dict[str, Feature] = {}
    parent: str | None = None
    for line in text.splitlines():
        m = _FEATURE.match(line.rstrip())
        if not m:
            continue
        active = m["state"] == "on"
        note = m["note"] or ""
        requested = (note == "requested on") if note.startswith("requested") else active
        child = bool(m["indent"])
        features[m["name"]] = Feature(m["name"], active, note == "fixed", requested, parent if child else None)
        if not child:
            parent = m["name"]
    return features


def read_features(iface: Iface) -> dict[str, Feature]:
    return parse_features(iface.exec(["ethtool", "-k", iface.name]))


def children(features: dict[str, Feature], name: str) -> list[Feature]:
    return [f for f in features.values() if f.parent == name]


def leaves(features: dict[str, Feature]) -> list[Feature]:
    """The features ethtool sets one by one (an aggregate line stands for its children)."""
    return [f for f in features.values() if not children(features, f.name)]


def read_offloads(iface: Iface) -> dict[str, str]:
    """The requested state of every feature the driver lets change, by the name ethtool -k prints."""
    return {f.name: "on" if f.requested else "off" for f in leaves(read_features(iface)) if not f.fixed}


def canonical_feature(name: str) -> str:
    return OFFLOAD_NAMES.get(name, name)


def check_features(iface: Iface, names: list[str], field: str) -> None:
    """Every name is a feature of this interface (its driver may still fix it)."""
    have = read_features(iface)
    for name in names:
        if canonical_feature(name) not in have:
            known = ", ".join(s for s, long in OFFLOAD_NAMES.items() if long in have)
            raise BloatlabError(f"{iface} has no offload {name!r} (ethtool -k {iface.name} lists them; "
                                f"short names it takes: {known})", field=field)


def set_offloads(iface: Iface, wanted: dict[str, bool]) -> None:
    """ethtool -K; a feature the driver refuses makes ethtool fail, so each is tried alone then."""
    if not wanted:
        return
    args = [a for name, on in wanted.items() for a in (canonical_feature(name), "on" if on else "off")]
    try:
        iface.exec(["ethtool", "-K", iface.name, *args])
        return
    except proc.CommandError:
        pass
    for name, on in wanted.items():
        try:
            iface.exec(["ethtool", "-K", iface.name, canonical_feature(name), "on" if on else "off"])
        except proc.CommandError:
            pass  # offload_notes() says which stayed as they were


def offload_notes(iface: Iface, wanted: dict[str, bool]) -> list[str]:
    """What of `wanted` the driver did not do, after set_offloads()."""
    features = read_features(iface)
    notes = []
    for name, on in wanted.items():
        feature = features[canonical_feature(name)]
        parts = children(features, feature.name) or [feature]
        fixed = [p for p in parts if p.fixed and p.active != on]
        stuck = [p for p in parts if not p.fixed and p.active != on]
        state = "on" if on else "off"
        if fixed and len(fixed) == len(parts):
            notes.append(f"offload {name}: the driver cannot change it (fixed {'on' if fixed[0].active else 'off'})")
        elif fixed or stuck:
            names = ", ".join(p.name for p in fixed + stuck)
            # Asked for but not active: the kernel holds it back until a feature it needs is on
            # (TSO needs scatter-gather and tx checksumming).
            why = "; the kernel keeps them until a feature they need is on" if on and stuck and all(
                p.requested for p in stuck) else ""
            notes.append(f"offload {name}: {names} stayed {'off' if on else 'on'} (asked {state}{why})")
    return notes


def restore_offloads(iface: Iface, original: dict[str, str]) -> None:
    current = read_offloads(iface)
    wanted = {name: state == "on" for name, state in original.items() if name in current and current[name] != state}
    if not wanted:
        return
    set_offloads(iface, wanted)
    # Dependencies (sg under tso) can refuse one order; a second pass settles it.
    current = read_offloads(iface)
    rest = {name: state == "on" for name, state in original.items() if name in current and current[name] != state}
    set_offloads(iface, rest)


# Snapshots ------------------------------------------------------------------------------------

def snapshot(iface: Iface) -> dict[str, Any]:
    """Every setting a sweep may change, as JSON."""
    link = check_iface(iface)
    features = read_features(iface)
    changeable = [f for f in leaves(features) if not f.fixed]
    return {"txqueuelen": int(link.get("txqlen", 0)), "mtu": int(link.get("mtu", 1500)),
            "qdisc": read_root_qdisc(iface), "bql": read_bql(iface),
            "offloads": {f.name: "on" if f.requested else "off" for f in changeable},  # what restore sets
            "offloads_active": {f.name: "on" if f.active else "off" for f in changeable}}  # what the kernel does


def differences(original: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Field by field, what differs ("txqueuelen 10, was 1000")."""
    out = []
    if now["txqueuelen"] != original["txqueuelen"]:
        out.append(f"txqueuelen {now['txqueuelen']}, was {original['txqueuelen']}")
    q0, q1 = original["qdisc"], now["qdisc"]
    same_qdisc = (q1["kind"] == q0["kind"] and q1["default"]) if q0["default"] else \
        (q1["kind"], q1["handle"], q1["options"]) == (q0["kind"], q0["handle"], q0["options"])
    if not same_qdisc:
        out.append(f"root qdisc {_qdisc_text(q1)}, was {_qdisc_text(q0)}")
    for queue, limits in original["bql"].items():
        for key, value in limits.items():
            if now["bql"].get(queue, {}).get(key) != value:
                out.append(f"{queue} {key} {now['bql'].get(queue, {}).get(key)}, was {value}")
    for name, state in original["offloads"].items():
        if name in now["offloads"] and now["offloads"][name] != state:
            out.append(f"offload {name} {now['offloads'][name]}, was {state}")
    return out


def _qdisc_text(qdisc: dict[str, Any]) -> str:
    limit = qdisc.get("options", {}).get("limit")
    return f"{qdisc['kind']} {qdisc['handle']}" + (f" limit {limit}" if limit is not None else "") + \
        (" (the default)" if qdisc["default"] else "")


def restore(iface: Iface, original: dict[str, Any]) -> list[str]:
    """Put `original` back; return what was changed to do so. Every knob is tried even when
    one fails; then a field-by-field check raises if anything still differs."""
    changed = differences(original, snapshot(iface))
    errors: list[str] = []
    # txqueuelen before the qdisc, as when they were set: a FIFO re-created takes it as its limit.
    steps = [("offloads", restore_offloads, original["offloads"]),
             ("txqueuelen", set_txqueuelen, original["txqueuelen"]),
             ("qdisc", restore_root_qdisc, original["qdisc"]),
             ("bql", restore_bql, original["bql"])]
    for what, step, value in steps:
        try:
            step(iface, value)
        except BloatlabError as e:
            errors.append(f"{what}: {e}")
    left = differences(original, snapshot(iface))
    if left:
        raise MachineError(f"could not restore {iface}: {'; '.join(left)}" + (f" ({errors[0]})" if errors else ""))
    return changed

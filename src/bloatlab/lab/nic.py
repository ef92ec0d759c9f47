"""A nic sweep, the job on a real interface: check everything, journal the interface, run each
point (set the knobs, measure), restore the interface. The sweep engine (lab/sweep.py) runs
the points and writes the sweep directory; this module owns the interface, so the restore is
here: after the last run, on an error, on Ctrl-C. The pieces are bloatlab.nic's.

One run's directory (docs/nic.md): run.json, summary.json, raw/ (iperf3 JSON, ping -D) and
series/ (throughput.csv, ping.csv).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from bloatlab import proc
from bloatlab.analysis.summary import show_number
from bloatlab.errors import BloatlabError, MachineError
from bloatlab.lab.executors import RunResult
from bloatlab.lab.sweep import Axis, SweepOutcome, check_out, run_sweep
from bloatlab.nic import journal as journals
from bloatlab.nic import knobs
from bloatlab.nic.knobs import Iface
from bloatlab.nic.measure import GRACE_S, Target, ping_outcome, preflight, run_iperf3, start_ping, stop, throughput_rows
from bloatlab.nic.plan import KNOB_LABELS, NicPlan
from bloatlab.results.files import RunDir
from bloatlab.results.reader import load_sweep
from bloatlab.results.summary import NicPing, NicSummary, NicTcp, NicUdp, Summary
from bloatlab.testbed.machine import machine, tool_versions
from bloatlab.version import __version__

def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class NicSweep:
    def __init__(self, plan: NicPlan):
        self.plan = plan
        self.iface: Iface = plan.iface
        self.target = Target(plan.server, plan.port, plan.iface.netns)
        self.journal: journals.Journal | None = None
        self.restored: list[str] = []  # what the restore changed back
        self.said: set[str] = set()  # notes already shown
        self.driver: str | None = None
        self.tools: dict[str, str | None] = {}

    # Before anything changes ----------------------------------------------------------------

    def check(self) -> dict[str, Any]:
        """Everything that can be checked without changing the interface; its settings now."""
        plan = self.plan
        needed = ["ip", "tc", "ethtool", "iperf3"] + (["ping"] if plan.ping_interval_s else [])
        for tool in needed:
            if shutil.which(tool) is None:
                raise MachineError(f"`{tool}` is not installed (see bloatlab doctor)")
        knobs.check_iface(self.iface)
        journals.refuse_if_journaled(self.iface)
        original = knobs.snapshot(self.iface)
        if "offloads" in plan.knobs:
            knobs.check_features(self.iface, list(plan.offload_features),
                                 "offload_features" if plan.source != "command line" else "--offload-features")
        if "qdisc" in plan.knobs:
            self._check_qdiscs(original["qdisc"])
        preflight(self.target, ping=bool(plan.ping_interval_s))
        try:
            info = self.iface.exec(["ethtool", "-i", self.iface.name])
            self.driver = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                                if line.startswith("driver:")), None)
        except BloatlabError:
            self.driver = None  # ethtool -i is not supported by every device
        self.tools = {**tool_versions(), "ethtool": _ethtool_version()}
        return original

    def _check_qdiscs(self, root: dict[str, Any]) -> None:
        from bloatlab.testbed.capabilities import kernel_qdiscs

        where = self.plan.fields["qdisc"]
        probed = kernel_qdiscs()
        for kind in self.plan.knobs["qdisc"]:
            if probed.get(kind) is False:
                raise MachineError(f"this kernel has no {kind} qdisc (see bloatlab doctor); pick another", field=where)
        if not root["default"] and knobs.restorable_qdisc(root) is None:
            raise BloatlabError(f"{self.iface} has a hand-made root qdisc {root['kind']} {root['handle']} that "
                                "bloatlab could not put back after the sweep; remove it first "
                                f"(tc qdisc del dev {self.iface.name} root) or leave out {where}", field=where)

    def start(self, original: dict[str, Any]) -> None:
        """Journal the original settings: from here on, the interface may change."""
        self.journal = journals.create(self.iface, original)

    # One run --------------------------------------------------------------------------------

    def apply(self, settings: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Set the knobs (offloads, txqueuelen, then the qdisc that reads it, then BQL); return
        the settings read back and a note for each knob that has no effect."""
        iface, notes = self.iface, []
        if "offloads" in settings:
            wanted = {f: settings["offloads"] == "on" for f in self.plan.offload_features}
            knobs.set_offloads(iface, wanted)
            notes += knobs.offload_notes(iface, wanted)
        if "txqueuelen" in settings:
            knobs.set_txqueuelen(iface, settings["txqueuelen"])
        if "qdisc" in settings:
            link = knobs.check_iface(iface)
            knobs.set_root_qdisc(iface, settings["qdisc"], int(link["txqlen"]), int(link.get("mtu", 1500)))
        bql_given = [k for k in ("bql_limit_max", "bql_limit_min") if k in settings]
        if bql_given:
            queues = list(knobs.read_bql(iface))
            if not queues:
                notes.append(f"{', '.join(bql_given)} has no effect: the driver of {iface.name} "
                             f"({self.driver or 'unknown'}) has no Byte Queue Limits")
            for key in bql_given:
                if queues:
                    knobs.set_bql(iface, key.removeprefix("bql_"), settings[key], queues)
        applied = knobs.snapshot(iface)
        root = applied["qdisc"]
        if "txqueuelen" in settings:
            notes += _txqueuelen_notes(iface, root, settings["txqueuelen"], applied["mtu"])
        if "qdisc" in settings and settings["qdisc"] not in (knobs.DEFAULT_QDISC, root["kind"]):
            notes.append(f"qdisc {settings['qdisc']}: the root of {iface.name} is {root['kind']} instead")
        return applied, notes

    def run_one(self, values: dict[str, Any], rep: int, run_dir: Path,
                tick: Callable[[float], None] | None = None) -> RunResult:
        """One run into run_dir: set the knobs, measure, write the files. tick(seconds into the
        run) feeds the engine's progress bar. On Ctrl-C: the interface is restored, then the
        KeyboardInterrupt goes on."""
        plan = self.plan
        settings = {**plan.fixed_knobs, **values}
        run = RunDir(Path(run_dir))
        for d in (run.path, run.raw, run.series):
            d.mkdir(parents=True, exist_ok=True)
        doc: dict[str, Any] = {
            "kind": "nic", "bloatlab_version": __version__, "name": f"nic-{self.iface.name}", "params": values,
            "settings": settings, "rep": rep, "iface": self.iface.name, "netns": self.iface.netns,
            "driver": self.driver, "server": plan.server, "port": plan.port, "tests": list(plan.tests),
            "duration_s": plan.duration_s, "udp_rate_bps": plan.udp_rate_bps if "udp" in plan.tests else None,
            "ping_interval_s": plan.ping_interval_s or None,
            "offload_features": list(plan.offload_features) if "offloads" in settings else None,
            "original": self.journal.original if self.journal else None, "started_at": _now(),
            "complete": False, "incomplete_reason": "running", "machine": machine(), "tools": self.tools,
        }
        run.write_json("run.json", doc)  # a killed run leaves an incomplete run.json, not none
        summary = NicSummary(complete=False)
        notes: list[str] = []
        try:
            doc["settings_applied"], notes = self.apply(settings)
            doc["notes"] = notes
            summary, reason, warnings = self._measure(run, doc, tick)
        except KeyboardInterrupt:
            doc.update(complete=False, incomplete_reason="interrupted (Ctrl-C)", ended_at=_now())
            run.write_json("run.json", doc)
            self.restore(quiet=True)
            raise
        except BloatlabError as e:
            reason, warnings = str(e), []
        complete = reason is None
        summary = replace(summary, complete=complete)
        doc.update(complete=complete, incomplete_reason=reason, ended_at=_now())
        run.write_json("summary.json", summary.to_dict())
        run.write_json("run.json", doc)
        try:  # each run has its report, as an emulated run does
            from bloatlab.analysis.report import write_report

            write_report(run_dir)
        except Exception as e:
            warnings = [*warnings, f"report.html not written ({e}); bloatlab report {run_dir} retries"]
        # Every run.json has its notes; the terminal hears each one once.
        fresh = [n for n in notes if n not in self.said]
        self.said.update(fresh)
        return RunResult(complete, summary, reason, fresh + warnings)

    def _measure(self, run: RunDir, doc: dict[str, Any], tick: Callable[[float], None] | None = None
                 ) -> tuple[NicSummary, str | None, list[str]]:
        plan = self.plan
        # Each test's figures: null ones where it failed.
        tcp: NicTcp | None = None
        udp: NicUdp | None = None
        ping_figures: NicPing | None = None
        throughput: list[tuple[float, str, float]] = []
        failures: list[str] = []
        sides: dict[str, str] = {}
        t0_mono, t0_real = time.monotonic(), time.time()
        doc["t0_realtime_s"] = t0_real
        ping = start_ping(self.target, plan.ping_interval_s, run.raw / "ping.txt",
                          len(plan.tests) * (plan.duration_s + GRACE_S) + 10) if plan.ping_interval_s else None
        try:
            for test in plan.tests:
                offset = time.monotonic() - t0_mono
                raw = run.raw / f"{test}.json"
                if test == "tcp":
                    tcp = NicTcp.unmeasured()
                else:
                    udp = NicUdp.unmeasured()
                try:
                    result = run_iperf3(self.target, plan.duration_s, raw,
                                        plan.udp_rate_bps if test == "udp" else None,
                                        tick=(lambda s, base=offset: tick(base + s)) if tick else None)
                except BloatlabError as e:
                    failures.append(f"{test}: {e}")
                    continue
                iperf = json.loads(raw.read_text())
                if test == "tcp":
                    tcp = NicTcp.of(result, iperf)
                else:
                    udp = NicUdp.of(result)
                rows, sides[test] = throughput_rows(iperf, test, offset)
                throughput += rows
        finally:
            if ping is not None:
                stop(ping)
        doc["throughput_side"] = sides
        if ping is not None:
            try:
                got = ping_outcome((run.raw / "ping.txt").read_text(errors="replace"), t0_real)
                ping_figures = NicPing.of(got.stated, got.rtts, got.lost)
                run.write_series("ping", got.rows)
                if not got.rows:
                    failures.append(f"ping: no reply from {plan.server}")
            except BloatlabError as e:
                ping_figures = NicPing.unmeasured()
                failures.append(f"ping: {e}")
        run.write_series("throughput", throughput)
        warnings = [f"{test}: the server sent no report, so series/throughput.csv has the sender's intervals"
                    for test, side in sides.items() if side == "sender"]
        return NicSummary(complete=False, tcp=tcp, udp=udp, ping=ping_figures), "; ".join(failures) or None, warnings

    # After ----------------------------------------------------------------------------------

    def restore(self, quiet: bool = False) -> list[str]:
        """Put the journal's settings back; the journal goes once every field checks."""
        if self.journal is None:
            return self.restored
        try:
            self.restored = knobs.restore(self.iface, self.journal.original)
        except BloatlabError:
            if quiet:
                return []
            raise
        journals.remove(self.journal)
        self.journal = None
        return self.restored


def _txqueuelen_notes(iface: Iface, root: dict[str, Any], txqueuelen: int, mtu: int) -> list[str]:
    kind, limit = root["kind"], root.get("options", {}).get("limit")
    if kind == "noqueue":
        return [f"txqueuelen has no effect: the root qdisc of {iface.name} is noqueue (the default on a veth), "
                "which holds no packets; add --qdisc pfifo to queue in front of it"]
    if kind in ("pfifo", "pfifo_head_drop", "bfifo"):
        expected = txqueuelen * mtu if kind == "bfifo" else txqueuelen
        if limit != expected:
            return [f"txqueuelen has no effect: the root {kind} of {iface.name} keeps its limit of {limit}; "
                    "add --qdisc pfifo to make one sized by txqueuelen"]
        return []
    if kind == "pfifo_fast":
        return []
    if kind == "mq":  # one child per tx queue, of the kind net.core.default_qdisc names
        return [] if _default_qdisc() in ("pfifo_fast", "pfifo") else [
            f"txqueuelen may have no effect: the root of {iface.name} is mq, whose per-queue children are "
            f"{_default_qdisc()} (net.core.default_qdisc) with limits of their own; add --qdisc pfifo"]
    return [f"txqueuelen has no effect on the root qdisc {kind} of {iface.name}, which has its own limit"]


def _default_qdisc() -> str:
    try:
        with open("/proc/sys/net/core/default_qdisc") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def _ethtool_version() -> str | None:
    try:
        out = proc.output(["ethtool", "--version"], timeout_s=10, check=False)
    except MachineError:
        return None
    return out.split()[-1] if out.split() else None


# Running a whole sweep ----------------------------------------------------------------------

def headline(summary: Summary | None) -> str:
    """A run's result in a line."""
    num = show_number
    parts = []
    if not isinstance(summary, NicSummary):
        return ""
    if (tcp := summary.tcp) is not None:
        parts.append(f"TCP {num(tcp.receiver_mbps, '.1f')} Mbit/s, {num(tcp.retransmits, 'd')} retr, "
                     f"cwnd {num(tcp.cwnd_kb_mean, '.0f')} KB")
    if (udp := summary.udp) is not None:
        parts.append(f"UDP {num(udp.receiver_mbps, '.1f')} of {num(udp.sender_mbps, '.1f')} Mbit/s, "
                     f"{num(udp.lost_percent, '.1f')}% lost")
    if (ping := summary.ping) is not None:
        parts.append("ping " + "/".join(num(v, ".2f") for v in (ping.min_ms, ping.avg_ms, ping.max_ms, ping.mdev_ms))
                     + " ms")
    return "; ".join(parts)


def run(plan: NicPlan, out: Path, *, resume: bool = False, progress: bool = True,
        finish: Callable[[Path, dict[str, Any], SweepOutcome], None] | None = None,
        on_started: Callable[[], None] | None = None) -> tuple[SweepOutcome, NicSweep]:
    """Check, journal, sweep (bloatlab.lab.sweep; `finish` analyses it), restore. The restore runs whatever ends the sweep
    (an error, Ctrl-C, SIGTERM as the CLI maps it); only SIGKILL leaves it to `bloatlab nic
    restore`."""
    sweep = NicSweep(plan)
    original = sweep.check()
    check_out(out, resume)  # a bad --out must not cost a journal and a restore
    sweep.start(original)
    if on_started:
        on_started()
    try:
        outcome = run_sweep(
            out, kind="nic", name=f"nic-{plan.iface.name}", source=plan.source,
            axes=[Axis(name, values, KNOB_LABELS.get(name, "")) for name, values in plan.axes], repeat=plan.repeat, fixed=plan.fixed(),
            run_one=sweep.run_one, estimate_s=plan.run_s, headline=headline, finish=finish, resume=resume,
            progress=progress, command=["bloatlab", *sys.argv[1:]])
    finally:
        try:
            changed = sweep.restore()
        except BloatlabError as e:
            print(f"bloatlab: {e}; the journal is kept: fix it, then run bloatlab nic restore", file=sys.stderr)
        else:
            print(f"restored {plan.iface}: " + ("; ".join(changed) if changed else "every setting was as it had been"),
                  file=sys.stderr)
    return outcome, sweep


# The table ------------------------------------------------------------------------------------

ROWS = (("TCP sender Mbit/s", "tcp", "sender_mbps", ".1f"), ("TCP receiver Mbit/s", "tcp", "receiver_mbps", ".1f"),
        ("TCP retransmits", "tcp", "retransmits", ".0f"), ("TCP cwnd KB", "tcp", "cwnd_kb_mean", ".0f"),
        ("TCP RTT ms", "tcp", "rtt_ms_mean", ".2f"),
        ("UDP sender Mbit/s", "udp", "sender_mbps", ".1f"), ("UDP receiver Mbit/s", "udp", "receiver_mbps", ".1f"),
        ("UDP jitter ms", "udp", "jitter_ms", ".3f"), ("UDP lost %", "udp", "lost_percent", ".2f"),
        ("ping min ms", "ping", "min_ms", ".3f"), ("ping avg ms", "ping", "avg_ms", ".3f"),
        ("ping max ms", "ping", "max_ms", ".3f"), ("ping mdev ms", "ping", "mdev_ms", ".3f"))


def table(out: Path) -> str:
    """The seeds' table: one column per point, each cell the mean over its complete runs, as
    aggregate.json has it (so runs of an earlier, resumed invocation count)."""
    doc = load_sweep(out).aggregate or {"points": []}
    points = [p for p in doc["points"] if p["n"]]
    if not points:
        return "no complete runs"
    heads = [f"{p['label']} (n={p['n']})" for p in points]
    lines = []
    for title, section, key, spec in ROWS:
        cells = [show_number(p["metrics"].get(f"{section}.{key}", {}).get("mean"), spec) for p in points]
        if any(c != "-" for c in cells):
            lines.append((title, cells))
    if not lines:
        return "no measurements"
    width = max(len(t) for t, _ in lines)
    widths = [max(len(h), *(len(c[i]) for _, c in lines)) for i, h in enumerate(heads)]
    out = ["  ".join([" " * width] + [h.rjust(w) for h, w in zip(heads, widths)])]
    out += ["  ".join([t.ljust(width)] + [c.rjust(w) for c, w in zip(cells, widths)]) for t, cells in lines]
    return "\n".join(out)

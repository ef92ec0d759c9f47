"""A run's summary for people: lines for the terminal, runs side by side, a sweep's log line."""

from __future__ import annotations

from typing import Any

from bloatlab.experiment.record import BulkSummary, IrttSummary, UdpSummary
from bloatlab.results.summary import RunSummary, Summary


def show_number(value: Any, spec: str) -> str:
    """A number as `spec` formats it, or "-" for none."""
    return "-" if value is None else format(value, spec)


def summary_lines(summary: Summary | None) -> list[tuple[str, str]]:
    """(label, value) lines of a run's summary, for the terminal (none for a nic run's, which
    has its table, or for no summary)."""
    if not isinstance(summary, RunSummary):
        return []
    lines: list[tuple[str, str]] = []
    if (test := summary.responsiveness) is not None:
        lines.append(("responsiveness", f"{show_number(test.rpm, '.0f')} RPM ({test.band or '-'}), "
                                        f"confidence {test.confidence}"))
        lines.append(("RPM foreign / loaded", f"{show_number(test.foreign_rpm, '.0f')} / "
                                              f"{show_number(test.loaded_rpm, '.0f')}"))
        for direction, mbps in (test.goodput_mbps or {}).items():
            lines.append((f"responsiveness goodput {direction}", f"{show_number(mbps, '.2f')} Mbit/s"))
    if (bloat := summary.bufferbloat) is not None:
        lines.append(("latency idle / under load", f"{show_number(bloat.idle_ms, '.1f')} / "
                                                   f"{show_number(bloat.loaded_ms, '.1f')} ms"))
        if bloat.increase_ms is None:  # cs244's flow starts with the run: nothing idle to compare
            lines.append(("bufferbloat grade", "- (no idle latency: no probe answered before the load started)"))
        else:
            lines.append(("bufferbloat grade", f"{bloat.grade or '-'} (+{show_number(bloat.increase_ms, '.1f')} ms)"))
    for pair, mbps in (summary.totals_mbps or {}).items():
        lines.append((f"goodput total {pair}", f"{show_number(mbps, '.2f')} Mbit/s"))
    for name, flow in (summary.flows or {}).items():
        if isinstance(flow, IrttSummary):
            lines.append((f"{name} loss up/down, jitter",
                          f"{show_number(flow.loss_up_percent, '.2f')}% / "
                          f"{show_number(flow.loss_down_percent, '.2f')}%, {show_number(flow.jitter_ms, '.2f')} ms"))
            continue
        value = f"{show_number(flow.goodput_mbps, '.2f')} Mbit/s"
        if isinstance(flow, BulkSummary) and flow.retransmits is not None:
            value += f", {flow.retransmits} retransmits"
        if isinstance(flow, UdpSummary) and flow.lost_percent is not None:
            value += f", {flow.lost_percent:.2f}% lost"
        lines.append((f"{name} goodput", value))
    rtt = summary.rtt_ms
    if rtt is not None and rtt.count:
        lines.append(("ping RTT min/median/p95/max",
                      "/".join(show_number(v, ".1f") for v in (rtt.min, rtt.median, rtt.p95, rtt.max)) + " ms"))
        lines.append(("pings answered / lost", f"{rtt.count} / {rtt.lost or 0}"))
    for name, probe in (summary.pings or {}).items():
        if probe.count:
            lines.append((f"{name} RTT median/p95", "/".join(show_number(v, ".1f") for v in (probe.median, probe.p95))
                          + f" ms, {probe.lost or 0} lost"))
    fetch = summary.fetch_s
    if fetch is not None and (fetch.count or fetch.failed):
        lines.append(("web fetch mean +- sd", f"{show_number(fetch.mean, '.3f')} +- {show_number(fetch.stddev, '.3f')} s"))
        lines.append(("web fetch median/p95/max",
                      "/".join(show_number(v, ".3f") for v in (fetch.median, fetch.p95, fetch.max)) + " s"))
        lines.append(("web fetches ok / failed", f"{fetch.count} / {fetch.failed or 0}"))
    for link, q in (summary.queue or {}).items():
        lines.append((f"queue {link} mean/max", f"{show_number(q.mean_pkts, '.1f')}/{show_number(q.max_pkts, 'd')} packets"))
        reasons = f" ({', '.join(f'{r} {n}' for r, n in q.drops_by_reason.items())})" if q.drops_by_reason else ""
        lines.append((f"queue {link} drops", show_number(q.drops, "d") + reasons))
        if q.marks:
            lines.append((f"queue {link} CE marks", ", ".join(f"{r} {n}" for r, n in q.marks.items())))
        if q.departures_by_ecn and any(q.departures_by_ecn.values()):
            lines.append((f"queue {link} sent, by ECN", ", ".join(f"{c.replace('_', '-')} {n}"
                                                                  for c, n in q.departures_by_ecn.items())))
    if (late := summary.lateness) is not None:
        value = f"{show_number(late.p99_us, '.0f')} us ({late.direction})"
        if late.within is not None and late.sentinel_p99_us is not None:
            sleep = f"{late.sentinel_sleep_us / 1e3:.1f} ms sleeps" if late.sentinel_sleep_us else "sleeps"
            machine = max(late.sentinel_at_random_p99_us or 0, late.sentinel_p99_us)
            value += (f"; the machine's own under this load {machine:.0f} us (a real-time sentinel's {sleep}, at a "
                      "random moment): " + ("the datapath added nothing beyond it" if late.within else
                                             f"the datapath added {late.p99_us - machine:.0f} us of its own"))
        elif late.within is not None:
            value += (f", {'within' if late.within else 'beyond'} what this machine allows: "
                      f"{late.allowed_us:.0f} us (its timer's p99 {late.timer_p99_us:.0f} us + 20)")
        lines.append(("datapath lateness p99", value))
    if (cpu := summary.cpu) is not None and cpu.pressure is not None:
        value = f"some task waited for a CPU {100 * cpu.pressure:.0f}% of the run"
        if cpu.links_batching is not None:
            value += f"; the links batched in {100 * cpu.links_batching:.0f}% of their report periods"
        lines.append(("CPU pressure", value))
    return lines


def summary_table(columns: list[tuple[str, Summary | None]]) -> str:
    """Summaries side by side: one column per (heading, summary)."""
    per_column = [dict(summary_lines(summary)) for _, summary in columns]
    labels = list(dict.fromkeys(label for col in per_column for label in col))
    heads = [heading for heading, _ in columns]
    width = max([len(label) for label in labels] + [0])
    widths = [max([len(h)] + [len(col.get(label, "-")) for label in labels]) for h, col in zip(heads, per_column)]
    out = ["  ".join([" " * width] + [h.ljust(w) for h, w in zip(heads, widths)]).rstrip()]
    for label in labels:
        cells = [col.get(label, "-").ljust(w) for col, w in zip(per_column, widths)]
        out.append("  ".join([label.ljust(width)] + cells).rstrip())
    return "\n".join(out)


def headline(summary: Summary | None) -> str:
    """One line of a run's main numbers, for a sweep's log of finished runs."""
    if not isinstance(summary, RunSummary):
        return "no measurements"
    parts = []
    if (test := summary.responsiveness) is not None:
        parts.append(f"{show_number(test.rpm, '.0f')} RPM ({test.confidence} confidence)")
    if (bloat := summary.bufferbloat) is not None and bloat.increase_ms is not None:
        parts.append(f"grade {bloat.grade or '-'} (+{show_number(bloat.increase_ms, '.0f')} ms under load)")
    for name, flow in (summary.flows or {}).items():
        if not isinstance(flow, IrttSummary) and flow.goodput_mbps is not None:
            parts.append(f"{name} {show_number(flow.goodput_mbps, '.2f')} Mbit/s")
    if (rtt := summary.rtt_ms) is not None and rtt.count:
        parts.append(f"RTT median {show_number(rtt.median, '.1f')} p95 {show_number(rtt.p95, '.1f')} ms")
    if (fetch := summary.fetch_s) is not None and fetch.count:
        parts.append(f"fetch mean {show_number(fetch.mean, '.2f')} s")
    for link, q in (summary.queue or {}).items():
        parts.append(f"queue {link} mean {show_number(q.mean_pkts, '.1f')} pkts, {show_number(q.drops, 'd')} drops")
    return "; ".join(parts) or "no measurements"

"""A run's summary for people: lines for the terminal, runs side by side, a sweep's log line."""

from __future__ import annotations

from typing import Any


def show_number(value: Any, spec: str) -> str:
    """A number as `spec` formats it, or "-" for none."""
    return "-" if value is None else format(value, spec)


def summary_lines(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) lines of a summary, for the terminal."""
    lines: list[tuple[str, str]] = []
    test = summary.get("responsiveness")
    if test:
        lines.append(("responsiveness", f"{show_number(test.get('rpm'), '.0f')} RPM ({test.get('band') or '-'}), "
                                        f"confidence {test.get('confidence')}"))
        lines.append(("RPM foreign / loaded", f"{show_number(test.get('foreign_rpm'), '.0f')} / "
                                              f"{show_number(test.get('loaded_rpm'), '.0f')}"))
        for direction, mbps in (test.get("goodput_mbps") or {}).items():
            lines.append((f"responsiveness goodput {direction}", f"{show_number(mbps, '.2f')} Mbit/s"))
    bloat = summary.get("bufferbloat")
    if bloat:
        lines.append(("latency idle / under load", f"{show_number(bloat.get('idle_ms'), '.1f')} / "
                                                   f"{show_number(bloat.get('loaded_ms'), '.1f')} ms"))
        if bloat.get("increase_ms") is None:  # cs244's flow starts with the run: nothing idle to compare
            lines.append(("bufferbloat grade", "- (no idle latency: no probe answered before the load started)"))
        else:
            lines.append(("bufferbloat grade", f"{bloat.get('grade') or '-'} (+{show_number(bloat['increase_ms'], '.1f')} ms)"))
    for pair, mbps in summary.get("totals_mbps", {}).items():
        lines.append((f"goodput total {pair}", f"{show_number(mbps, '.2f')} Mbit/s"))
    for name, flow in summary.get("flows", {}).items():
        if flow.get("kind") == "irtt":
            lines.append((f"{name} loss up/down, jitter",
                          f"{show_number(flow.get('loss_up_percent'), '.2f')}% / "
                          f"{show_number(flow.get('loss_down_percent'), '.2f')}%, {show_number(flow.get('jitter_ms'), '.2f')} ms"))
            continue
        value = f"{show_number(flow.get('goodput_mbps'), '.2f')} Mbit/s"
        if flow.get("retransmits") is not None:
            value += f", {flow['retransmits']} retransmits"
        if flow.get("lost_percent") is not None:
            value += f", {flow['lost_percent']:.2f}% lost"
        lines.append((f"{name} goodput", value))
    rtt = summary.get("rtt_ms", {})
    if rtt.get("count"):
        lines.append(("ping RTT min/median/p95/max",
                      "/".join(show_number(rtt.get(k), ".1f") for k in ("min", "median", "p95", "max")) + " ms"))
        lines.append(("pings answered / lost", f"{rtt['count']} / {rtt.get('lost', 0)}"))
    for name, probe in summary.get("pings", {}).items():
        if probe.get("count"):
            lines.append((f"{name} RTT median/p95", "/".join(show_number(probe.get(k), ".1f") for k in ("median", "p95"))
                          + f" ms, {probe.get('lost', 0)} lost"))
    fetch = summary.get("fetch_s", {})
    if fetch.get("count") or fetch.get("failed"):
        lines.append(("web fetch mean +- sd", f"{show_number(fetch.get('mean'), '.3f')} +- {show_number(fetch.get('stddev'), '.3f')} s"))
        lines.append(("web fetch median/p95/max",
                      "/".join(show_number(fetch.get(k), ".3f") for k in ("median", "p95", "max")) + " s"))
        lines.append(("web fetches ok / failed", f"{fetch['count']} / {fetch.get('failed', 0)}"))
    for link, q in summary.get("queue", {}).items():
        lines.append((f"queue {link} mean/max", f"{show_number(q.get('mean_pkts'), '.1f')}/{show_number(q.get('max_pkts'), 'd')} packets"))
        by_reason = q.get("drops_by_reason")
        reasons = f" ({', '.join(f'{r} {n}' for r, n in by_reason.items())})" if by_reason else ""
        lines.append((f"queue {link} drops", show_number(q.get("drops"), "d") + reasons))
        if q.get("marks"):
            lines.append((f"queue {link} CE marks", ", ".join(f"{r} {n}" for r, n in q["marks"].items())))
    if late := summary.get("lateness"):
        value = f"{show_number(late.get('p99_us'), '.0f')} us ({late.get('direction')})"
        if late.get("within") is not None and late.get("sentinel_p99_us") is not None:
            sleep = f"{late['sentinel_sleep_us'] / 1e3:.1f} ms sleeps" if late.get("sentinel_sleep_us") else "sleeps"
            machine = max(late.get("sentinel_at_random_p99_us") or 0, late["sentinel_p99_us"])
            value += (f"; the machine's own under this load {machine:.0f} us (a real-time sentinel's {sleep}, at a "
                      "random moment): " + ("the datapath added nothing beyond it" if late["within"] else
                                             f"the datapath added {late['p99_us'] - machine:.0f} us of its own"))
        elif late.get("within") is not None:
            value += (f", {'within' if late['within'] else 'beyond'} what this machine allows: "
                      f"{late['allowed_us']:.0f} us (its timer's p99 {late['timer_p99_us']:.0f} us + 20)")
        lines.append(("datapath lateness p99", value))
    if (cpu := summary.get("cpu")) and cpu.get("pressure") is not None:
        value = f"some task waited for a CPU {100 * cpu['pressure']:.0f}% of the run"
        if cpu.get("links_batching") is not None:
            value += f"; the links batched in {100 * cpu['links_batching']:.0f}% of their report periods"
        lines.append(("CPU pressure", value))
    return lines


def summary_table(columns: list[tuple[str, dict[str, Any]]]) -> str:
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


def headline(summary: dict[str, Any]) -> str:
    """One line of a run's main numbers, for a sweep's log of finished runs."""
    parts = []
    if test := summary.get("responsiveness"):
        parts.append(f"{show_number(test.get('rpm'), '.0f')} RPM ({test.get('confidence')} confidence)")
    if (bloat := summary.get("bufferbloat")) and bloat.get("increase_ms") is not None:
        parts.append(f"grade {bloat.get('grade') or '-'} (+{show_number(bloat.get('increase_ms'), '.0f')} ms under load)")
    for name, flow in summary.get("flows", {}).items():
        if flow.get("goodput_mbps") is not None:
            parts.append(f"{name} {show_number(flow.get('goodput_mbps'), '.2f')} Mbit/s")
    rtt = summary.get("rtt_ms", {})
    if rtt.get("count"):
        parts.append(f"RTT median {show_number(rtt.get('median'), '.1f')} p95 {show_number(rtt.get('p95'), '.1f')} ms")
    fetch = summary.get("fetch_s", {})
    if fetch.get("count"):
        parts.append(f"fetch mean {show_number(fetch.get('mean'), '.2f')} s")
    for link, q in summary.get("queue", {}).items():
        parts.append(f"queue {link} mean {show_number(q.get('mean_pkts'), '.1f')} pkts, {show_number(q.get('drops'), 'd')} drops")
    return "; ".join(parts) or "no measurements"

"""Where each tool's output goes in a run's raw/ directory: one place for the workloads and
probes that write there, the run's own reading of it, and the live view that follows it as it
grows (live/follow.py)."""

from __future__ import annotations

from pathlib import Path


def ping(raw: Path, name: str) -> Path:
    return raw / f"{name}.ping.txt"  # ping -D's stdout


def server(raw: Path, name: str) -> Path:
    return raw / f"{name}.server.txt"  # an iperf3 or irtt server's output, iperf3's lines stamped


def irtt_client(raw: Path, name: str) -> Path:
    return raw / f"{name}.client.txt"  # a line per reply


def fetches(raw: Path, name: str) -> Path:
    return raw / f"{name}.fetches.txt"  # a line per web fetch


def tcp_probe(raw: Path, kind: str) -> Path | None:
    """The TCP probe's lines: tracepoint events, or `ss` polls."""
    return {"tracepoint": raw / "tcp_probe.txt", "ss": raw / "ss.txt"}.get(kind)


def queue(raw: Path, link: str, which: str, kernel: bool) -> Path:
    """A probed link direction's queue: a kernel qdisc's samples, or the datapath's queue log."""
    return raw / f"qdisc.{link}.{which}.csv" if kernel else raw / "qlog" / f"{link}.{which}.qlog"

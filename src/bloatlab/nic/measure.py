"""What a nic run measures, against an iperf3 server on the far host: iperf3 TCP, then iperf3
UDP at a target rate, each for the run's duration, with ping running through both.

Raw outputs go to RUN/raw/ (tcp.json, udp.json: the client's `iperf3 --json
--get-server-output`; ping.txt: `ping -D`); parsing is parsers.py's.
"""

from __future__ import annotations

import ctypes
import json
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from bloatlab import interrupts, proc
from bloatlab.errors import BloatlabError
from bloatlab.experiment.parsers import (IperfResult, PingSummary, parse_iperf3, parse_iperf3_text_report,
                                        parse_ping_replies, parse_ping_summary)
from bloatlab.testbed.datapath_stats import finite_number

CLIENT_INTERVAL_S = 0.1  # iperf3's reporting interval on our side: cwnd and RTT samples
CONNECT_TIMEOUT_MS = 3000
BUSY_RETRY_S = 10.0  # a server ends an aborted test on its own within a few seconds
GRACE_S = 15.0  # iperf3 may run this long past -t (connection setup, the final exchange)


_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: a sweep killed with SIGKILL takes its iperf3 and ping along
    (`ip netns exec` execs the tool itself, so the setting reaches it)."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Target:
    server: str
    port: int
    netns: str | None  # where the client side runs


def preflight(target: Target, ping: bool) -> None:
    """A one-line error unless the server answers iperf3 (and ping, if it will be measured)."""
    argv = ["iperf3", "-c", target.server, "-p", str(target.port), "-n", "1K", "--json",
            "--connect-timeout", str(CONNECT_TIMEOUT_MS)]
    deadline = time.monotonic() + BUSY_RETRY_S
    while True:
        try:
            test = proc.run(argv, ns=target.netns, timeout_s=30, check=False)
        except proc.CommandError:  # it did not end in time
            raise BloatlabError(f"iperf3 got no answer from {target.server} port {target.port} in 30 s; start "
                                "`iperf3 -s` (or bloatlab nic serve) there", field="--server") from None
        try:
            # iperf3 3.12 exits 0 after a failed --json test: the "error" key is what tells.
            reason = json.loads(test.stdout).get("error")
            if test.returncode != 0 and not reason:
                reason = f"iperf3 exit status {test.returncode}"
        except json.JSONDecodeError:
            reason = ((test.stderr or test.stdout).strip().splitlines()[-1:] or ["no output"])[0]
        if test.returncode == 0 and not reason:
            break
        if "busy" in reason and time.monotonic() < deadline:
            time.sleep(1)
            continue
        raise BloatlabError(f"no iperf3 server answers at {target.server} port {target.port} ({reason}); "
                            "start `iperf3 -s` (or bloatlab nic serve) there, or fix --server/--port",
                            field="--server")
    if ping:
        pinged = proc.run(["ping", "-n", "-c", "2", "-i", "0.2", "-W", "2", target.server], ns=target.netns,
                          timeout_s=30, check=False)
        if pinged.returncode != 0:
            raise BloatlabError(f"{target.server} does not answer ping; allow ICMP echo there, or leave delay out "
                                "with --ping-interval 0", field="--server")


def run_iperf3(target: Target, duration_s: int, out: Path, udp_rate_bps: int | None = None,
               tick: Callable[[float], None] | None = None) -> IperfResult:
    """One iperf3 client test, its JSON kept in `out`; retried while the server is busy.
    tick(seconds since it started) is called every half second, for a progress bar."""
    argv = ["iperf3", "-c", target.server, "-p", str(target.port), "--json", "--get-server-output",
            "-t", str(duration_s), "-i", str(CLIENT_INTERVAL_S), "--connect-timeout", str(CONNECT_TIMEOUT_MS)]
    if udp_rate_bps is not None:
        argv += ["-u", "-b", str(udp_rate_bps)]
    deadline = time.monotonic() + BUSY_RETRY_S
    while True:
        with open(out, "w") as f:
            client = proc.spawn(argv, ns=target.netns, stdout=f, stderr=subprocess.STDOUT,
                                preexec_fn=_die_with_parent)
        started = time.monotonic()
        try:
            while client.poll() is None:
                if time.monotonic() - started > duration_s + GRACE_S:
                    stop(client)
                    raise BloatlabError(f"iperf3 did not end within {GRACE_S:g} s of its {duration_s} s test",
                                        field="iperf3")
                if tick is not None:
                    tick(time.monotonic() - started)
                interrupts.check()
                try:
                    client.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    pass
        except BaseException:  # Ctrl-C: end it, keep what it printed
            stop(client)
            raise
        text = out.read_text(errors="replace")
        try:
            return parse_iperf3(text)
        except BloatlabError as e:
            if "busy" in str(e) and time.monotonic() < deadline:
                time.sleep(1)
                continue
            raise


def stop(tool: subprocess.Popen) -> None:
    """SIGINT (tools print their summaries), then SIGKILL."""
    proc.stop(tool, signal.SIGINT)


def start_ping(target: Target, interval_s: float, out: Path, deadline_s: float) -> subprocess.Popen:
    """ping -D until stop(); -w bounds it should nobody stop it."""
    argv = ["ping", "-D", "-n", "-i", f"{interval_s:g}", "-w", str(int(deadline_s) + 1), target.server]
    with open(out, "w") as f:
        return proc.spawn(argv, ns=target.netns, stdout=f, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)


# Series, and ping's figures (the summary's records, results/summary.py's NicTcp, NicUdp and
# NicPing, are made of iperf3's result and these) -------------------------------------------

def throughput_rows(doc: dict[str, Any], flow: str, offset_s: float) -> tuple[list[tuple[float, str, float]], str]:
    """(t_s, flow, mbps) per interval, the receiver's where the server sent its report, else the
    sender's; t_s is the interval's end, `offset_s` after the run's t0. Returns the side used."""
    server = doc.get("server_output_json")
    if server:
        rows = _interval_rows(server.get("intervals") if isinstance(server, dict) else None)
    else:
        text = doc.get("server_output_text", "")
        rows = [(end, mbps) for _, end, mbps in parse_iperf3_text_report(text if isinstance(text, str) else "")]
    side = "receiver"
    if not rows:
        rows = _interval_rows(doc.get("intervals"))
        side = "sender"
    return [(offset_s + end, flow, round(mbps, 6)) for end, mbps in rows], side


def _interval_rows(intervals: Any) -> list[tuple[float, float]]:
    """(end s, Mbit/s) of each of iperf3's interval sums; a sum without both numbers (a report cut
    short) is left out."""
    rows = []
    for interval in intervals if isinstance(intervals, list) else []:
        total = interval.get("sum") if isinstance(interval, dict) else None
        end, bps = (finite_number(total.get("end")), finite_number(total.get("bits_per_second"))) \
            if isinstance(total, dict) else (None, None)
        if end is not None and bps is not None:
            rows.append((end, bps / 1e6))
    return rows


@dataclass
class PingOutcome:
    stated: PingSummary  # what ping printed as it ended
    rtts: list[float]  # every reply's, ms
    lost: int  # requests that had no reply
    rows: list[tuple[float, str, float]] = field(default_factory=list)  # t_s, probe ("ping"), rtt_ms


def ping_outcome(text: str, t0_real: float) -> PingOutcome:
    replies = parse_ping_replies(text)
    stated = parse_ping_summary(text)
    # The request sent just before SIGINT may still be on its way: not lost.
    lost = max(0, stated.transmitted - stated.received - 1)
    return PingOutcome(stated, [r.rtt_ms for r in replies], lost,
                       [(r.t_s - t0_real, "ping", r.rtt_ms) for r in replies if r.t_s is not None])

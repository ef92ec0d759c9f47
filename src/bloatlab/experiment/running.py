"""What every workload is: a Running, which a run drives through prepare (servers, before t0),
start and stop on the schedule, end (whatever still runs is ended: also the Ctrl-C path) and
collect (the tools' raw outputs, kept in RUN/raw/, read into a Collected). The kinds are in
workloads.py and responsiveness/.
"""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from bloatlab.errors import MachineError
from bloatlab.experiment.clock import Clock
from bloatlab.experiment.hosts import Hosts
from bloatlab.experiment.record import Collected
from bloatlab.specs.model import Workload

LISTEN_TIMEOUT_S = 5.0


class RunFault(Exception):
    """Something the run depends on failed while it ran (a tool killed, the datapath gone): the
    run stops there, is torn down and written as incomplete with this as its reason."""


def wait_listening(net: Hosts, host: str, port: int, what: str, timeout_s: float = LISTEN_TIMEOUT_S,
                   udp: bool = False) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = net.exec(host, ["ss", "-Hlun" if udp else "-Hltn", f"sport = :{port}"]).stdout
        if out.strip():
            return
        time.sleep(0.02)
    raise MachineError(f"the {what} in {host} did not listen on port {port} within {timeout_s:g} s")


def route_congestion_control(net: Hosts, host: str, peer: str, cc: str) -> None:
    """Every TCP connection of `host` with `peer` starts with congestion control `cc` (the
    kernel's name): a /32 route to the peer with `congctl`. The kernel gives a connection its
    route's congestion control before the handshake, an active one before its SYN and a passive
    one from the SYN it answers, whatever its listener's; a tool that sets its own on a connected
    socket changes it afterwards. A route whose congestion control needs ECN also accepts an ECN
    handshake whose SYN is ECT, as DCTCP's is (Linux otherwise refuses one)."""
    words = net.exec(host, ["ip", "-o", "route", "get", net.address(peer)], check=True).stdout.split()
    via = ["via", words[words.index("via") + 1]] if "via" in words else []
    net.exec(host, ["ip", "route", "replace", f"{net.address(peer)}/32", *via, "dev", words[words.index("dev") + 1],
                    "congctl", cc], check=True)


def pick_ports(count: int, rng: random.Random | None = None) -> list[int]:
    """Distinct ports for a run's servers. Random, so two runs at once (whose hosts all have
    10.0.0.x addresses) can tell their flows apart in the global tcp_probe tracepoint."""
    rng = rng or random.SystemRandom()
    return rng.sample(range(20000, 60000), count)


class Running:
    """A workload being run; subclasses know their tool."""

    def __init__(self, workload: Workload, net: Hosts, raw_dir: Path, clock: Clock, port: int):
        self.w = workload
        self.net = net
        self.raw = raw_dir
        self.clock = clock
        self.port = port
        self.procs: list[subprocess.Popen] = []
        self.started = False
        # Read back from the files of a run killed outright (lab/run.py recover_run): its tools
        # were killed too, so what they print only as they end is missing, and that is no fault.
        self.recovered = False
        # The servers prepare() started, as wait_listening's (host, port, what, udp): every
        # workload's are started first and then awaited (ready), so their start-ups overlap.
        self.servers: list[tuple[str, int, str, bool]] = []

    def prepare(self) -> None:
        """Before t0: start servers (and name them in self.servers)."""

    def ready(self) -> None:
        """Before t0, after every workload's prepare(): wait until its servers listen."""
        for host, port, what, udp in self.servers:
            wait_listening(self.net, host, port, what, udp=udp)

    def check(self, at_s: float) -> None:
        """Between its start and its stop: a RunFault if one of its tools was killed (by a
        signal nobody here sent), since from then on it measures nothing."""
        for proc in self.procs:
            status = proc.poll()
            if status is not None and status < 0:
                argv = proc.args if isinstance(proc.args, list) else [str(proc.args)]
                tool = argv[4] if argv[:3] == ["ip", "netns", "exec"] and len(argv) > 4 else argv[0]
                raise RunFault(f"the {tool} of workload {self.w.name} (pid {proc.pid}) was killed by signal "
                               f"{-status} at {at_s:.1f} s")

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        """The schedule says stop (the default: the tool ends by itself)."""

    def wait(self, deadline: float) -> None:
        """Wait (until time.monotonic() `deadline`) for the tools to end by themselves."""
        for proc in self.procs:
            remaining = deadline - time.monotonic()
            if remaining > 0 and proc.poll() is None:
                try:
                    proc.wait(timeout=remaining)
                except subprocess.TimeoutExpired:
                    pass

    def end(self) -> None:
        """End whatever still runs: SIGINT first (tools print their summaries), then SIGKILL."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def collect(self) -> Collected:
        raise NotImplementedError

    def _spawn(self, host: str, argv: list[str], out: Path, **kwargs: Any) -> subprocess.Popen:
        with open(out, "wb") as f:
            proc = self.net.popen(host, argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **kwargs)
        self.procs.append(proc)
        return proc


def last_line(path: Path) -> str:
    """The last line a tool printed to its log, or "": what a failure says."""
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""

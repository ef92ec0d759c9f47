"""The TCP probe: cwnd, ssthresh and srtt of every flow of a run over time.

Two ways to see them:
    tracepoint  the kernel's tcp:tcp_probe event, one sample per segment a socket receives,
                recorded in a tracefs instance of the run's own (instances/bloatlab-RUN) whose
                trace_pipe a thread streams into raw/; the kernel filters on the run's ports
    ss          `ss -tine` polled in each host's namespace every interval_s (the fallback when
                the tracepoint is missing, or tracefs is not ours to use)
Both write the tool's own text to a raw file; read_samples() turns it into TcpSample rows with
the parsers of bloatlab.experiment.parsers. Times are CLOCK_MONOTONIC seconds, as time.monotonic().
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from ipaddress import IPv6Address, ip_address
from pathlib import Path
from bloatlab.errors import BloatlabError, MachineError
from bloatlab.experiment.hosts import Hosts
from bloatlab.experiment.parsers import parse_ss_tin, parse_tcp_probe

log = logging.getLogger(__name__)

TRACEFS = Path("/sys/kernel/tracing")
INSTANCE_PREFIX = "bloatlab-"
EVENT = ("tcp", "tcp_probe")
TRACE_CLOCK = "mono"  # CLOCK_MONOTONIC, the clock of time.monotonic()
# Per CPU. One event is ~140 bytes in the ring; at 10 Mbit/s a flow makes ~1300 events/s in
# all, and the reader empties the ring every READ_PAUSE_S, so 1 MiB per CPU is already ample.
# The total is kept near 16 MiB on machines with many CPUs.
BUFFER_TOTAL_KB = 16384
BUFFER_KB_RANGE = (1024, 4096)
READ_PAUSE_S = 0.05  # how long the reader sleeps when the ring is empty
READ_CHUNK_BYTES = 1 << 16
RUN_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class TcpSample:
    """One observation of one socket. The socket is (src, sport) -> (dst, dport) as the socket
    sees it: a sender's samples have the receiver as dst. IPv4-mapped IPv6 addresses (a
    dual-stack server's view of an IPv4 peer) are shown as plain IPv4."""

    t_s: float  # CLOCK_MONOTONIC seconds
    src: str
    sport: int
    dst: str
    dport: int
    cwnd_pkts: int
    ssthresh_pkts: int | None  # None while unset (the kernel's 0x7fffffff)
    srtt_ms: float | None  # None until the socket has an RTT sample
    snd_una: int | None  # the tracepoint's snd_una (32-bit sequence number); None from ss
    cookie: int | None  # the kernel's socket cookie (sock_cookie, ss -e's sk:)


def _port_list(ports: Iterable[int]) -> list[int]:
    ports = sorted(set(ports))
    for port in ports:
        if not isinstance(port, int) or not 0 < port < 65536:
            raise BloatlabError(f"{port!r} is not a TCP port; use 1 to 65535", field="ports")
    return ports


@functools.lru_cache(maxsize=1024)  # a run has a handful of addresses, in thousands of samples
def _unmapped(address: str) -> str:
    try:
        ip = ip_address(address)
    except ValueError:
        return address  # a scoped or odd address: as printed
    if isinstance(ip, IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return address


# The tracepoint -----------------------------------------------------------------------------

def _event_dir(tracefs: Path) -> Path:
    return tracefs.joinpath("events", *EVENT)


def _write(path: Path, value: str) -> None:
    # tracefs files want one write(2) of the whole value; open without truncating and creating.
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    except OSError as e:
        e.filename = str(path)  # os.write does not say which file refused the value
        raise
    finally:
        os.close(fd)


def _disable_events(instance: Path) -> None:
    if (instance / "events" / "enable").exists():
        _write(instance / "events" / "enable", "0")


def _remove_instance(instance: Path) -> None:
    """Disable the instance's events and remove it; retry while a reader lets go of it."""
    _disable_events(instance)
    for attempt in range(50):
        try:
            instance.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY or attempt == 49:
                raise
            time.sleep(0.02)  # a trace_pipe reader that has not closed yet


def instance_runs(tracefs: Path = TRACEFS) -> list[str]:
    """The runs (network names) that have a tracefs instance now."""
    instances = tracefs / "instances"
    if not instances.is_dir():
        return []
    return sorted(p.name[len(INSTANCE_PREFIX):] for p in instances.glob(f"{INSTANCE_PREFIX}*"))


def remove_stale_instances(tracefs: Path = TRACEFS, *, runs: Iterable[str] | None = None) -> list[str]:
    """Remove every instances/bloatlab-* tracefs instance (after a crash; `bloatlab clean`), or
    only those of `runs`. Return the paths removed."""
    removed: list[str] = []
    instances = tracefs / "instances"
    if not instances.is_dir():
        return removed
    wanted = None if runs is None else {f"{INSTANCE_PREFIX}{run}" for run in runs}
    for instance in sorted(instances.glob(f"{INSTANCE_PREFIX}*")):
        if wanted is not None and instance.name not in wanted:
            continue
        _remove_instance(instance)
        removed.append(str(instance))
    return removed


class TracepointProbe:
    """Records tcp:tcp_probe events of the flows on `ports` (either end) into raw_path.

        with TracepointProbe("r1", [5201], run_dir / "raw" / "tcp_probe.txt") as probe:
            ...  # the workloads
        samples = read_samples(probe.raw_path, "tracepoint")

    The instance is the run's own: its ring buffer, clock and filter touch no other tracer.
    """

    kind = "tracepoint"

    def __init__(self, run_name: str, ports: Sequence[int], raw_path: Path, *,
                 dports: Sequence[int] = (), sports: Sequence[int] = (),
                 buffer_kb_per_cpu: int | None = None, tracefs: Path = TRACEFS):
        if not isinstance(run_name, str) or not RUN_NAME_RE.fullmatch(run_name):
            raise BloatlabError(f"{run_name!r} cannot name a tracefs instance; use letters, digits, "
                                "'_', '.' and '-' (at most 64)", field="name")
        self.run_name = run_name
        # `ports` match either end of a socket; `dports` and `sports` only that end, so that a
        # run records its senders' sockets and not the receivers' too.
        self.ports, self.dports, self.sports = _port_list(ports), _port_list(dports), _port_list(sports)
        if not (self.ports or self.dports or self.sports):
            raise BloatlabError("the TCP probe needs the run's ports; give at least one", field="ports")
        self.raw_path = Path(raw_path)
        self.tracefs = tracefs
        cpus = os.cpu_count() or 1
        self.buffer_kb_per_cpu = buffer_kb_per_cpu or min(max(BUFFER_TOTAL_KB // cpus, BUFFER_KB_RANGE[0]),
                                                          BUFFER_KB_RANGE[1])
        self.instance = tracefs / "instances" / f"{INSTANCE_PREFIX}{run_name}"
        self.lost_events: int | None = None  # known after stop(): events the ring overwrote
        self.raw_bytes = 0  # what the reader has written so far
        self._created = False
        self._stopped = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pipe_fd: int | None = None
        self._error: BaseException | None = None

    @property
    def filter(self) -> str:
        """The event filter: the socket's ports."""
        terms = [f"sport == {p} || dport == {p}" for p in self.ports]
        terms += [f"dport == {p}" for p in self.dports] + [f"sport == {p}" for p in self.sports]
        return " || ".join(terms)

    @staticmethod
    def available(tracefs: Path = TRACEFS) -> str | None:
        """None if this probe can run here, else why not (and what would fix it)."""
        if os.geteuid() != 0:
            return "the tcp_probe tracepoint needs root; run bloatlab as root (or use the ss probe)"
        if not (tracefs / "instances").is_dir():
            return f"tracefs is not mounted at {tracefs}; mount it: mount -t tracefs nodev {tracefs}"
        if not (_event_dir(tracefs) / "format").exists():
            return ("this kernel has no tcp:tcp_probe tracepoint (CONFIG_TRACEPOINTS, "
                    "Linux >= 4.16); use the ss probe")
        return None

    # Starting and stopping ----------------------------------------------------------------

    def start(self) -> TracepointProbe:
        if self._created or self._stopped:
            raise BloatlabError("a TracepointProbe starts once; make a new one for another run")
        if reason := self.available(self.tracefs):
            raise MachineError(reason)
        try:
            self.instance.mkdir()
        except FileExistsError:
            raise MachineError(f"tracefs instance {self.instance} exists: a run named {self.run_name} is "
                               "running, or a crash left it; bloatlab clean removes it") from None
        self._created = True
        try:
            self._setup()
        except OSError as e:
            self.stop(raise_errors=False)
            raise MachineError(f"cannot start the tcp_probe in {self.instance}: {e.strerror or e} "
                               f"({e.filename}); check that tracefs and the raw file's directory are "
                               "writable") from e
        except BaseException:
            self.stop(raise_errors=False)
            raise
        return self

    def _setup(self) -> None:
        inst = self.instance
        _write(inst / "trace_clock", TRACE_CLOCK)
        _write(inst / "buffer_size_kb", str(self.buffer_kb_per_cpu))
        _write(_event_dir(inst) / "filter", self.filter)
        self.raw_path.parent.mkdir(parents=True, exist_ok=True)
        raw = open(self.raw_path, "wb")
        try:
            self._pipe_fd = os.open(inst / "trace_pipe", os.O_RDONLY | os.O_NONBLOCK)
        except BaseException:
            raw.close()
            raise
        self._thread = threading.Thread(target=self._stream, args=(raw,), name=f"tcp-probe-{self.run_name}",
                                        daemon=True)
        self._thread.start()
        _write(_event_dir(inst) / "enable", "1")

    def _stream(self, raw) -> None:
        """Copy trace_pipe to the raw file until asked to stop, then drain what is left."""
        fd = self._pipe_fd
        try:
            with raw:
                while True:
                    stopping = self._stop.is_set()  # read before draining: nothing is missed
                    drained = False
                    while True:
                        try:
                            chunk = os.read(fd, READ_CHUNK_BYTES)
                        except BlockingIOError:
                            drained = True
                            break
                        if not chunk:
                            drained = True
                            break
                        raw.write(chunk)
                        self.raw_bytes += len(chunk)
                    if stopping and drained:
                        return
                    raw.flush()
                    self._stop.wait(READ_PAUSE_S)
        except BaseException as e:  # stop() reports it, after removing the instance
            self._error = e

    def stop(self, raise_errors: bool = True, *, remove: bool = True) -> None:
        """Disable the event, drain the ring into the raw file, count what was lost, remove the
        instance. Safe to call twice and after a failed start; the instance goes in any case.
        With remove=False the caller must call remove() (a second stop() does not): the kernel
        takes 25-50 ms to remove it, which the caller can spend on other work meanwhile."""
        if self._stopped:
            return
        self._stopped = True
        errors: list[BaseException] = []
        if self._created:
            try:
                _disable_events(self.instance)
            except OSError as e:
                errors.append(e)
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=10)
            if self._thread.is_alive():
                errors.append(MachineError("the tcp_probe reader did not finish draining in 10 s"))
        if self._error is not None:
            errors.append(self._error)
        if self._pipe_fd is not None:
            os.close(self._pipe_fd)  # the instance stays busy while its trace_pipe is open
            self._pipe_fd = None
        if self._created:
            try:
                self.lost_events = self._overruns()
            except (OSError, ValueError) as e:
                errors.append(e)
            if remove:
                try:
                    _remove_instance(self.instance)
                except OSError as e:
                    errors.append(e)
        self._report(errors, raise_errors)

    def remove(self, raise_errors: bool = True) -> None:
        """The instance removed, after stop(remove=False)."""
        errors: list[BaseException] = []
        if self._created:
            try:
                _remove_instance(self.instance)
            except OSError as e:
                errors.append(e)
        self._report(errors, raise_errors)

    def _report(self, errors: list[BaseException], raise_errors: bool) -> None:
        if errors and raise_errors:
            first = errors[0]
            if isinstance(first, BloatlabError):
                raise first
            raise MachineError(f"the tcp_probe of run {self.run_name} failed: {first}; its samples may be "
                               "incomplete (bloatlab clean removes a left tracefs instance)") from first
        for e in errors:
            log.warning("tcp probe of %s: %s", self.run_name, e)

    def _overruns(self) -> int:
        """Events the ring buffer overwrote or dropped before the reader got them, all CPUs."""
        lost = 0
        for stats in sorted((self.instance / "per_cpu").glob("cpu*/stats")):
            for line in stats.read_text().splitlines():
                key, _, value = line.partition(":")
                if key.strip() in ("overrun", "dropped events"):
                    lost += int(value)
        return lost

    def __enter__(self) -> TracepointProbe:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(raise_errors=exc[0] is None)  # do not hide the body's own exception


# ss polling ---------------------------------------------------------------------------------

class SsProbe:
    """Polls `ss -tine` for sockets on `ports` in each host's namespace every interval_s.

    raw_path gets, per host and poll, a line "# t_s=SECONDS host=NAME" (time.monotonic() half
    way through the ss call) and then ss's output as printed.
    """

    kind = "ss"

    def __init__(self, net: Hosts, hosts: Sequence[str], ports: Sequence[int], raw_path: Path,
                 interval_s: float = 0.1):
        if not hosts:
            raise BloatlabError("the ss probe needs at least one host to poll", field="hosts")
        if not interval_s > 0:
            raise BloatlabError(f"interval_s {interval_s!r} must be > 0 seconds", field="interval_s")
        self.net = net
        self.hosts = list(hosts)
        for host in self.hosts:
            net.namespace(host)  # an unknown host fails now, not in the thread
        self.ports = _port_list(ports)
        if not self.ports:
            raise BloatlabError("the TCP probe needs the run's ports; give at least one", field="ports")
        self.raw_path = Path(raw_path)
        self.interval_s = interval_s
        self.polls = 0  # ss calls that succeeded
        self.failed_polls = 0
        self.lost_events = None  # nothing to lose: ss samples, it does not record
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._error: BaseException | None = None
        self._last_failure = ""

    @property
    def argv(self) -> list[str]:
        ports = " or ".join(f"sport = :{p} or dport = :{p}" for p in self.ports)
        return ["ss", "-tine", f"( {ports} )"]

    @staticmethod
    def available() -> str | None:
        if shutil.which("ss") is None:
            return "`ss` is not installed; install iproute2"
        return None

    def start(self) -> SsProbe:
        if self._thread is not None or self._stopped:
            raise BloatlabError("an SsProbe starts once; make a new one for another run")
        if reason := self.available():
            raise MachineError(reason)
        self.raw_path.parent.mkdir(parents=True, exist_ok=True)
        raw = open(self.raw_path, "w")
        self._thread = threading.Thread(target=self._poll, args=(raw,), name="ss-probe", daemon=True)
        self._thread.start()
        return self

    def _poll(self, raw) -> None:
        try:
            with raw:
                next_poll = time.monotonic()
                while not self._stop.is_set():
                    for host in self.hosts:
                        self._poll_host(raw, host)
                    raw.flush()
                    # A fixed schedule: a slow poll shortens the next pause, never shifts the grid.
                    next_poll += self.interval_s
                    now = time.monotonic()
                    if next_poll < now:
                        next_poll = now
                    self._stop.wait(next_poll - now)
        except BaseException as e:
            self._error = e

    def _poll_host(self, raw, host: str) -> None:
        before = time.monotonic()
        try:
            proc = self.net.exec(host, self.argv, timeout_s=5)
        except Exception as e:  # a timeout, or the namespace went away at the end of the run
            proc, failure = None, str(e)
        else:
            failure = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        t_s = (before + time.monotonic()) / 2
        if proc is None or proc.returncode != 0:
            self.failed_polls += 1
            self._last_failure = failure or "failed with no message"
            return
        self.polls += 1
        raw.write(f"# t_s={t_s:.6f} host={host}\n")
        raw.write(proc.stdout)

    def stop(self, raise_errors: bool = True) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5 * len(self.hosts) + 5)  # a round of ss calls, each up to 5 s
        if self.failed_polls:
            log.warning("ss probe: %d of %d polls failed, the last: %s", self.failed_polls,
                        self.polls + self.failed_polls, self._last_failure)
        if self._error is not None and raise_errors:
            raise MachineError(f"the ss probe failed: {self._error}; its samples may be incomplete") \
                from self._error

    def __enter__(self) -> SsProbe:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(raise_errors=exc[0] is None)


# Reading ------------------------------------------------------------------------------------

def read_samples(raw_path: Path, kind: str) -> list[TcpSample]:
    """The samples in a probe's raw file, in time order. kind: "tracepoint" or "ss"."""
    text = Path(raw_path).read_text(errors="replace")
    samples: list[TcpSample]
    if kind == "tracepoint":
        samples = [TcpSample(t_s=e.t_s, src=_unmapped(e.src), sport=e.sport, dst=_unmapped(e.dst), dport=e.dport,
                             cwnd_pkts=e.snd_cwnd_pkts, ssthresh_pkts=e.ssthresh_pkts,
                             srtt_ms=e.srtt_us / 1000 if e.srtt_us else None, snd_una=e.snd_una,
                             cookie=e.sock_cookie)
                   for e in parse_tcp_probe(text)]
    elif kind == "ss":
        samples = [TcpSample(t_s=s.t_s, src=_unmapped(s.src), sport=s.sport, dst=_unmapped(s.dst), dport=s.dport,
                             cwnd_pkts=s.cwnd_pkts, ssthresh_pkts=s.ssthresh_pkts, srtt_ms=s.srtt_ms,
                             snd_una=None, cookie=s.cookie)
                   for s in parse_ss_tin(text) if s.cwnd_pkts is not None and s.t_s is not None]
    else:
        raise BloatlabError(f"unknown TCP probe kind {kind!r}; use 'tracepoint' or 'ss'", field="kind")
    # trace_pipe merges the CPUs' rings by time, but an event committed late on one CPU can
    # follow a later one of another CPU across two reads.
    samples.sort(key=lambda s: s.t_s)
    return samples

"""A sweep's runs on a Ray cluster (docs/cluster.md): the cluster executor, and the checks a
node passes before it gets a run.

    connect        ray.init to an existing cluster; Ray is imported here and nowhere else
    check_nodes    on every node, at once: its bloatlab version, root, and `bloatlab doctor`
    ClusterExecutor
                   one run at a time per node that passed; each run in a temporary directory
                   there, sent back as a tar archive and unpacked into the sweep's directory

A node offers the custom resource `bloatlab_testbed` (one by default), and every run asks for
one, so two runs never share a machine, not even runs of two sweeps. A run whose node dies, or
whose worker is killed, or that outlives its time, is retried on another node (MAX_ATTEMPTS in
all); its node first removes what the run left (clean_orphans). Only the attempt that ends is
unpacked, so nothing is counted twice.
"""

from __future__ import annotations

import collections
import io
import ipaddress
import logging
import os
import signal
import socket
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bloatlab.errors import BloatlabError, MachineError
from bloatlab.lab.clean import CLUSTER_TMP_PREFIX
from bloatlab.lab.executors import Done, Executor, Job, RunOne, RunResult, Tick
from bloatlab.results.summary import RunSummary
from bloatlab.version import __version__

RESOURCE = "bloatlab_testbed"
MAX_ATTEMPTS = 3  # a run's tries, on different nodes where the cluster has them
CHECK_TIMEOUT_S = 120.0  # a node that has not answered its check by then is left out
CONNECT_TIMEOUT_S = 5.0
STOP_GRACE_S = 20.0  # a cancelled run's time to take its network down before its worker is killed
START_HINT = ("start one with: ray start --head --resources='{\"bloatlab_testbed\": 1}' "
              "(docs/cluster.md)")


def run_timeout(duration_s: float) -> float:
    """How long a run may take on a node before it is stopped and tried elsewhere: three times
    its length with a run's overhead, and two minutes more for a slow or busy node."""
    return 3 * (duration_s + 10) + 120


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MachineError("--cluster needs Ray, which is not installed; pip install 'bloatlab[cluster]' "
                            "(make test installs it)", field="--cluster") from None
    return ray


def head(address: str) -> tuple[str, int]:
    """ADDRESS as host and port, refused in one line unless it is host:port."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BloatlabError(f"{address!r} is not a Ray head's address; give HOST:PORT, as `ray start --head` "
                            "printed it (its --port, 6379 by default)", field="--cluster")
    return host.strip("[]"), int(port)


def connect(address: str) -> Any:
    """The ray module, connected to the cluster at `address` (host:port of its head)."""
    host, port = head(address)
    ray = _ray()
    if ray.is_initialized():
        return ray
    # Ray itself retries a silent address for minutes: a closed port is an answer at once.
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise BloatlabError(f"nothing answers at {address} ({e.strerror or e}); {START_HINT}",
                            field="--cluster") from None
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False,
                 configure_logging=False)
    except Exception as e:  # Ray raises ConnectionError, ValueError or its own for a wrong address
        first = " ".join(str(e).split())[:200] or type(e).__name__
        raise BloatlabError(f"cannot reach a Ray cluster at {address} ({first}); {START_HINT}",
                            field="--cluster") from None
    return ray


def disconnect() -> None:
    ray = _ray()
    if ray.is_initialized():
        ray.shutdown()


# What runs on a node ------------------------------------------------------------------------

def node_facts() -> dict[str, Any]:
    """This machine as a run records it: host name, kernel, CPU, bloatlab version, root."""
    from bloatlab.testbed.machine import machine

    return {**machine(), "bloatlab_version": __version__, "root": os.geteuid() == 0, "pid": os.getpid()}


def _check_here() -> dict[str, Any]:
    """A node's check: its facts and what `bloatlab doctor` finds missing."""
    from bloatlab.lab import doctor

    return {**node_facts(), "problems": doctor.problems(doctor.collect())}


def _clean_here() -> list[str]:
    """What dead runs left on this node: their networks, probes and temporary directories."""
    from bloatlab.lab.clean import clean_orphans

    errors: list[BloatlabError] = []
    removed, _ = clean_orphans(errors)
    return removed + [f"not removed: {e}" for e in errors]


def _run_here(run_one: RunOne, values: dict[str, Any], rep: int) -> dict[str, Any]:
    """One run in a temporary directory of this node; its result, its files as a tar.gz, and
    the node's facts."""
    # Ray starts its workers at niceness 15, and a run's datapath, iperf3 and servers would
    # inherit it: behind every other process of the node, the emulated link falls behind its
    # schedule. The run takes a local run's priority (root may), and gives it back.
    niceness = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, 0)
    # Ray's workers block SIGINT and ignore it, and both stay so across exec: the run's process
    # would not stop on it. Unblocked and handled here instead, it also lets ray.cancel's
    # KeyboardInterrupt (interrupt_main, a no-op on an ignored signal) reach this function.
    sigint = signal.signal(signal.SIGINT, signal.default_int_handler)
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    try:
        with tempfile.TemporaryDirectory(prefix=f"{CLUSTER_TMP_PREFIX}{os.getpid()}-") as tmp:
            run_dir = Path(tmp) / "run"
            result = _in_run_process(run_one, values, rep, run_dir)
            archive = io.BytesIO()
            with tarfile.open(fileobj=archive, mode="w:gz", compresslevel=1) as tar:
                if run_dir.exists():
                    tar.add(run_dir, arcname=".")
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        signal.signal(signal.SIGINT, sigint)
        os.setpriority(os.PRIO_PROCESS, 0, niceness)
    # The summary travels as its JSON, as it goes to summary.json (a cluster runs experiments).
    summary = result.summary.to_dict() if result.summary is not None else None
    return {"result": {**asdict(replace(result, summary=None)), "summary": summary}, "archive": archive.getvalue(),
            "node": node_facts()}


def _in_run_process(run_one: RunOne, values: dict[str, Any], rep: int, run_dir: Path) -> RunResult:
    """run_one in a process of its own (`python -m bloatlab.lab.cluster`), which is not this
    worker's child. When the sweep that owns a task dies, or the node stops (`ray stop`), the
    raylet kills the task's worker and the worker's children with SIGKILL: a run inside them
    would leave its network behind. The run's process sees the worker gone and stops as Ctrl-C
    stops a run, its network taken down."""
    import pickle
    import subprocess

    from bloatlab import proc

    answer = run_dir.parent / "result.pickle"
    # The command forks the run's process, says its pid and ends: the run is then init's child.
    starter = proc.spawn([sys.executable, "-m", __name__, str(os.getpid()), str(answer)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, start_new_session=True)
    with starter.stdin, starter.stdout:  # type: ignore[union-attr]
        starter.stdin.write(_pickled((run_one, values, rep, run_dir)))  # type: ignore[union-attr]
        starter.stdin.close()  # type: ignore[union-attr]
        said = starter.stdout.readline()  # type: ignore[union-attr]
    starter.wait()
    if not said.strip().isdigit():
        raise RuntimeError(f"the run's process did not start (status {starter.returncode})")
    pid = int(said)
    ended = os.pidfd_open(pid)
    try:
        try:
            _wait_readable(ended, None)
        except BaseException:  # ray.cancel's KeyboardInterrupt: the run stops as Ctrl-C stops it
            os.kill(pid, signal.SIGINT)
            _wait_readable(ended, STOP_GRACE_S)
            raise
    finally:
        os.close(ended)
    try:
        outcome, value = pickle.loads(answer.read_bytes())
    except (OSError, EOFError, pickle.UnpicklingError) as e:
        raise RuntimeError(f"the run's process ended with no result ({e})") from None
    if outcome == "error":
        raise value
    return value


def _pickled(job: tuple[Any, ...]) -> bytes:
    """The job as pickle sends it, by name; a function pickle cannot name (one defined inside
    another, as Ray itself sends by value) with Ray's cloudpickle, which plain pickle loads."""
    import pickle

    try:
        return pickle.dumps(job)
    except (pickle.PicklingError, AttributeError, TypeError):
        return _ray().cloudpickle.dumps(job)


def _wait_readable(fd: int, timeout_s: float | None) -> bool:
    """Until a pidfd says its process ended (True), or timeout_s passes; in short waits, so that
    ray.cancel's KeyboardInterrupt, raised only between bytecodes, comes through."""
    import select

    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while deadline is None or time.monotonic() < deadline:
        if select.select([fd], [], [], 0.2)[0]:
            return True
    return False


def _run_process_main(worker: int, answer: Path) -> None:
    """A run's process: its job from stdin; forked away from the starter, which says its pid
    and ends; the result (or what it raised) into `answer`."""
    import pickle
    import shutil
    import threading

    run_one, values, rep, run_dir = pickle.loads(sys.stdin.buffer.read())
    worker_fd = os.pidfd_open(worker)
    if os.fork():
        os._exit(0)  # the starter; its child's pid goes out below, from the child itself
    print(os.getpid(), flush=True)
    os.close(1)
    os.open(os.devnull, os.O_WRONLY)  # fd 1 again: later prints reach nobody, and no pipe stays open
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    main = threading.main_thread().ident
    orphaned, ended = threading.Event(), threading.Event()

    def watch() -> None:  # the worker gone (killed with its task, or by `ray stop`): stop the run
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])  # a SIGINT is the main thread's
        _wait_readable(worker_fd, None)
        orphaned.set()
        if not ended.is_set():
            signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=watch, name="worker-watch", daemon=True).start()
    try:
        outcome: tuple[str, Any] = ("ok", run_one(values, rep, run_dir, lambda _s: None))
    except KeyboardInterrupt:
        outcome = ("ok", RunResult(False, None, "interrupted", stop=True))
    except BaseException as e:
        outcome = ("error", e)
    ended.set()
    if orphaned.is_set():  # nobody will take the results: the worker's directory goes too
        shutil.rmtree(run_dir.parent, ignore_errors=True)
        return
    try:
        data = pickle.dumps(outcome)
    except Exception as e:  # an exception that does not pickle: its line
        data = pickle.dumps(("error", RuntimeError(_first_line(outcome[1]) if outcome[0] == "error" else str(e))))
    answer.write_bytes(data)


# The nodes ------------------------------------------------------------------------------

@dataclass
class NodeCheck:
    node_id: str
    name: str  # Ray's node name (its address unless `ray start --node-name` set one)
    address: str
    testbeds: float  # how many bloatlab_testbed it offers
    facts: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # why it is left out; none: it takes runs

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "name": self.name, "address": self.address, "testbeds": self.testbeds,
                "ok": self.ok, "problems": self.problems, **{k: self.facts.get(k) for k in (
                    "hostname", "kernel", "cpu", "cpus", "bloatlab_version", "root")}}


def _pinned(ray: Any, node_id: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def _alive_nodes(ray: Any) -> list[dict[str, Any]]:
    return [n for n in ray.nodes() if n.get("Alive")]


def check_nodes(ray: Any, timeout_s: float = CHECK_TIMEOUT_S) -> list[NodeCheck]:
    """Every live node of the cluster, checked where it runs, all at once: it offers
    bloatlab_testbed, runs this bloatlab's version as root, and `bloatlab doctor` finds
    nothing missing for an emulated run. A node that fails is named with why."""
    checks, refs = [], {}
    check = ray.remote(_check_here)
    nodes = _alive_nodes(ray)
    names = collections.Counter(n.get("NodeName") for n in nodes)
    for node in nodes:
        name = node.get("NodeName") or node.get("NodeManagerAddress", "?")
        if names[node.get("NodeName")] > 1:  # nodes on one machine share its address, Ray's default name
            name = f"{name}#{node['NodeID'][:6]}"
        c = NodeCheck(node["NodeID"], name, node.get("NodeManagerAddress", "?"),
                      float(node.get("Resources", {}).get(RESOURCE, 0)))
        checks.append(c)
        if not c.testbeds:
            c.problems.append(f"offers no {RESOURCE} resource (ray start --resources='{{\"{RESOURCE}\": 1}}')")
            continue
        refs[check.options(num_cpus=0, max_retries=0, name="bloatlab-check",
                           scheduling_strategy=_pinned(ray, c.node_id)).remote()] = c
    ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s) if refs else ([], [])
    for ref in late:
        ray.cancel(ref, force=True)
        refs[ref].problems.append(f"did not answer its check within {timeout_s:g} s")
    for ref in ready:
        c = refs[ref]
        try:
            c.facts = ray.get(ref)
        except Exception as e:
            c.problems.append(f"its check failed: {_first_line(e)}")
            continue
        if c.facts.get("bloatlab_version") != __version__:
            c.problems.append(f"runs bloatlab {c.facts.get('bloatlab_version')}, not {__version__}; "
                              f"install bloatlab {__version__} there")
        c.problems += c.facts.get("problems", [])
    return checks


@dataclass(frozen=True)
class Trust:
    """What guards the cluster (docs/cluster.md, Trust): whether this machine speaks to it with
    Ray's mutual TLS or its token (then the cluster requires it: a plain client would not have
    connected), and which of the head's and the nodes' addresses the internet routes: reachable
    from beyond the lab."""

    tls: bool
    token: bool
    exposed: tuple[str, ...]

    @property
    def guarded(self) -> bool:
        return self.tls or self.token

    def to_dict(self) -> dict[str, Any]:
        return {"tls": self.tls, "token": self.token, "exposed": list(self.exposed)}

    def line(self) -> str:
        guard = ("mutual TLS" if self.tls else "") + (" and " if self.tls and self.token else "") + \
            ("a token" if self.token else "")
        said = f"guarded by {guard}" if self.guarded else "no TLS and no token: anyone who reaches its ports runs code as root on its nodes"
        where = (f"; reachable from the internet at {', '.join(self.exposed)}" if self.exposed
                 else "; on loopback or private addresses only")
        return f"trust: {said}{where} (docs/cluster.md, Trust)"


def _public(host: str) -> bool:
    """An address (or a name, resolved) that the internet routes: not loopback, private, link-local
    or reserved (IANA's special-purpose registry, as ipaddress reads it)."""
    try:
        found = {info[4][0].split("%")[0] for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return False  # no address: nothing to say of it
    return any(ipaddress.ip_address(a).is_global for a in found)


def trust(address: str, checks: Sequence[NodeCheck], env: Mapping[str, str] = os.environ) -> Trust:
    host, _ = head(address)
    addresses = [host, *(c.address for c in checks)]
    return Trust(tls=env.get("RAY_USE_TLS", "0").strip().lower() in ("1", "true"),
                 token=env.get("RAY_AUTH_MODE", "").strip().lower() == "token",
                 exposed=tuple(dict.fromkeys(a for a in addresses if a and a != "?" and _public(a))))


def render_checks(checks: Sequence[NodeCheck], address: str) -> str:
    """The nodes as a table, then each left-out node with why."""
    lines = [f"Ray cluster at {address}: {sum(c.ok for c in checks)} of {len(checks)} node(s) can run bloatlab",
             f"  {'node':<24} {'host':<20} {'kernel':<18} {'cpus':>4}  {'bloatlab':<9} {'root':<5} check"]
    for c in checks:
        f = c.facts
        lines.append(f"  {c.name[:24]:<24} {str(f.get('hostname', '-'))[:20]:<20} {str(f.get('kernel', '-'))[:18]:<18} "
                     f"{str(f.get('cpus', '-')):>4}  {str(f.get('bloatlab_version', '-')):<9} "
                     f"{'yes' if f.get('root') else 'no' if f else '-':<5} {'ok' if c.ok else 'LEFT OUT'}")
    for c in checks:
        if not c.ok:
            lines.append(f"left out {c.name}: {'; '.join(c.problems)}")
    return "\n".join(lines)


def _first_line(error: BaseException) -> str:
    cause = getattr(error, "cause", None)
    text = str(cause if cause is not None else error).strip().splitlines()
    return text[-1] if text else type(error).__name__


# The executor ------------------------------------------------------------------------------

@dataclass
class _Attempt:
    job: Job
    index: int  # the job's number from 1, for its progress callback
    node: NodeCheck
    started: float
    tick: Tick
    stopping_since: float | None = None  # cancelled, waiting for it to end


class ClusterExecutor(Executor):
    """Each run on a node of a Ray cluster that passed its checks, one per node at a time."""

    name = "cluster"

    def __init__(self, address: str, nodes: Sequence[NodeCheck], run_timeout_s: float | None = None,
                 say: Callable[[str], None] = print):
        self.address = address
        self.nodes = [n for n in nodes if n.ok]
        self.run_timeout_s = run_timeout_s  # set by the sweep from a run's expected length
        self.say = say

    def close(self) -> None:
        """Leave the cluster (it keeps running: it is not ours)."""
        disconnect()

    def run(self, run_one: RunOne, jobs: Sequence[Job], tick_for: Callable[[int, Job], Tick]) -> Iterator[Done]:
        ray = connect(self.address)
        remote = ray.remote(_run_here)
        clean = ray.remote(_clean_here)
        pending = collections.deque(enumerate(jobs, 1))
        tried: dict[Path, list[dict[str, Any]]] = {}  # per run: the attempts that failed, and why
        free = list(self.nodes)
        running: dict[Any, _Attempt] = {}
        try:
            while pending or running:
                while (pick := self._pick(pending, free, tried)) is not None:
                    i, job, node = pick
                    free.remove(node)
                    ref = remote.options(num_cpus=0, resources={RESOURCE: 1}, max_retries=0,
                                         name="bloatlab-run", scheduling_strategy=_pinned(ray, node.node_id)
                                         ).remote(run_one, dict(job.values), job.rep)
                    running[ref] = _Attempt(job, i, node, time.monotonic(), tick_for(i, job))
                ready, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
                now = time.monotonic()
                for ref, a in running.items():
                    a.tick(now - a.started)
                    self._enforce_timeout(ray, ref, a, now)
                for ref in ready:
                    a = running.pop(ref)
                    done, failure = self._outcome(ray, ref, a, tried)
                    if failure is None:
                        free.append(a.node)
                        yield done
                        continue
                    tried.setdefault(a.job.run_dir, []).append({"node": a.node.name, "node_id": a.node.node_id,
                                                                "reason": failure})
                    alive = {n["NodeID"] for n in _alive_nodes(ray)}
                    self.nodes = [n for n in self.nodes if n.node_id in alive]
                    if a.node.node_id in alive:
                        self._clean(ray, clean, a.node)
                        free.append(a.node)
                    else:
                        self.say(f"node {a.node.name} has left the cluster; its runs go to the others")
                    attempts = tried[a.job.run_dir]
                    if len(attempts) < MAX_ATTEMPTS and self.nodes:
                        self.say(f"{a.job.label} rep {a.job.rep}: {failure} on {a.node.name}; trying again "
                                 f"(attempt {len(attempts) + 1} of {MAX_ATTEMPTS})")
                        pending.appendleft((a.index, a.job))
                    else:
                        reason = "; ".join(f"{t['node']}: {t['reason']}" for t in attempts)
                        yield Done(a.job, RunResult(False, None, f"failed on the cluster after {len(attempts)} "
                                                    f"attempt(s): {reason}"), now - a.started,
                                   node=a.node.name, attempts=attempts)
                if not self.nodes and pending:
                    raise BloatlabError(f"no node of the cluster at {self.address} is left to run on",
                                        field="--cluster")
        finally:  # stopped early (Ctrl-C, a failure): the runs still going end, their networks too
            self._stop(ray, running)

    def _pick(self, pending: collections.deque[tuple[int, Job]], free: list[NodeCheck],
              tried: dict[Path, list[dict[str, Any]]]) -> tuple[int, Job, NodeCheck] | None:
        """The next run and a free node for it, taken from `pending`. A run that failed goes to
        a node it has not failed on, waiting for one that is busy; on a node it failed on only
        when it has failed on every node left."""
        for entry in pending:
            i, job = entry
            failed_on = {t["node_id"] for t in tried.get(job.run_dir, [])}
            fresh = any(n.node_id not in failed_on for n in self.nodes)
            node = next((n for n in free if not fresh or n.node_id not in failed_on), None)
            if node is not None:
                pending.remove(entry)
                return i, job, node
        return None

    def _enforce_timeout(self, ray: Any, ref: Any, a: _Attempt, now: float) -> None:
        """Past its time, a run is cancelled as Ctrl-C stops one (it takes its network down);
        one that does not end within STOP_GRACE_S has its worker killed."""
        if self.run_timeout_s is None or now - a.started < self.run_timeout_s:
            return
        if a.stopping_since is None:
            a.stopping_since = now
            ray.cancel(ref, force=False)
        elif now - a.stopping_since > STOP_GRACE_S:
            ray.cancel(ref, force=True)

    def _outcome(self, ray: Any, ref: Any, a: _Attempt,
                 tried: dict[Path, list[dict[str, Any]]]) -> tuple[Done | None, str | None]:
        """The attempt's Done, or why it failed in a way another node may not (None, reason)."""
        from ray import exceptions as rx

        seconds = time.monotonic() - a.started
        try:
            got = ray.get(ref)
        except rx.TaskCancelledError:
            return None, f"did not end within {self.run_timeout_s:g} s"
        except rx.RayTaskError as e:  # the run itself raised: as in a local sweep, the sweep stops
            if a.stopping_since is not None:
                return None, f"did not end within {self.run_timeout_s:g} s"
            cause = e.cause if isinstance(getattr(e, "cause", None), BaseException) else e
            return Done(a.job, RunResult(False, None, f"failed on {a.node.name}: {_first_line(e)}"), seconds,
                        cause, node=a.node.name, attempts=tried.get(a.job.run_dir, [])), None
        except (rx.WorkerCrashedError, rx.NodeDiedError, rx.LocalRayletDiedError) as e:
            return None, "its worker died" if isinstance(e, rx.WorkerCrashedError) else "its node died"
        except rx.RayError as e:
            return None, f"Ray: {_first_line(e)}"
        if a.stopping_since is not None:  # it stopped as told, incomplete: its time ran out
            return None, f"did not end within {self.run_timeout_s:g} s"
        summary = got["result"]["summary"]
        result = RunResult(**{**got["result"], "summary": RunSummary.from_json(summary) if summary is not None else None})
        attempts = tried.get(a.job.run_dir, [])
        try:
            unpack(got["archive"], a.job.run_dir)
        except (tarfile.TarError, OSError) as e:  # a damaged archive, or one that reaches outside its run
            return None, f"its results could not be unpacked ({e})"
        record_node(a.job.run_dir, {"address": self.address, "node": a.node.name, "node_id": a.node.node_id,
                                    **{k: got["node"].get(k) for k in ("hostname", "kernel", "cpu", "cpus",
                                                                       "bloatlab_version")},
                                    "attempts": attempts})
        if attempts:
            result.warnings.append(f"ran on {a.node.name} after {len(attempts)} failed attempt(s): "
                                   + "; ".join(f"{t['node']}: {t['reason']}" for t in attempts))
        return Done(a.job, result, seconds, node=a.node.name, attempts=attempts), None

    def _clean(self, ray: Any, clean: Any, node: NodeCheck) -> None:
        try:
            removed = ray.get(clean.options(num_cpus=0, max_retries=0, name="bloatlab-clean",
                                            scheduling_strategy=_pinned(ray, node.node_id)).remote(), timeout=60)
        except Exception as e:
            self.say(f"could not clean {node.name} after a failed run: {_first_line(e)}")
            return
        if removed:
            self.say(f"cleaned {node.name} after the failed run: {', '.join(removed)}")

    def _stop(self, ray: Any, running: dict[Any, _Attempt]) -> None:
        if not running:
            return
        for ref in running:
            ray.cancel(ref, force=False)  # KeyboardInterrupt in the run: it takes its network down
        _, late = ray.wait(list(running), num_returns=len(running), timeout=STOP_GRACE_S)
        for ref in late:
            ray.cancel(ref, force=True)
        if late:
            ray.wait(late, num_returns=len(late), timeout=10)
            clean = ray.remote(_clean_here)
            for ref in late:
                self._clean(ray, clean, running[ref].node)


# The sweep's directory ----------------------------------------------------------------------

# What a node may send back: a run writes a few dozen files, and its captures are as large as
# its spec allows, so the size is bounded by the disk, not by a figure of ours.
MAX_MEMBERS = 10_000
DISK_RESERVE_BYTES = 512 << 20  # left free on the sweep's disk


def unpack(archive: bytes, run_dir: Path) -> None:
    """A run's files from its node, into its directory of the sweep; refused (tarfile.TarError)
    when they are more than MAX_MEMBERS or would leave the disk under DISK_RESERVE_BYTES free."""
    import shutil

    run_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        members, size = [], 0
        for member in tar:  # sizes as the headers declare them: extraction writes no more
            members.append(member)
            size += member.size
            if len(members) > MAX_MEMBERS:
                raise tarfile.TarError(f"more than {MAX_MEMBERS} files")
        free = shutil.disk_usage(run_dir).free
        if size > free - DISK_RESERVE_BYTES:
            raise tarfile.TarError(f"{size / 1e6:.0f} MB would leave less than {DISK_RESERVE_BYTES >> 20} MiB free "
                                   f"under {run_dir}")
        tar.extractall(run_dir, members=members, filter="data")  # no path leaves run_dir, no device or link outside


def record_node(run_dir: Path, node: dict[str, Any]) -> None:
    """run.json's `cluster`: where the run ran, and the attempts that failed before it."""
    from bloatlab.results.files import RunDir

    RunDir(run_dir).update_json("run.json", {"cluster": node})


if __name__ == "__main__":  # a run's process on a node (_in_run_process)
    _run_process_main(int(sys.argv[1]), Path(sys.argv[2]))

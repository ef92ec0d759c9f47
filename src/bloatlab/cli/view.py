"""`bloatlab view DIR`: a run's or a sweep's live page in the browser; and `run --live`, which
starts it beside a run (docs/live.md)."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from bloatlab import proc
from bloatlab.cli.common import DIRECTORY, add_command, emit, note
from bloatlab.errors import BloatlabError, MachineError
from bloatlab.interrupts import Interrupts

DEFAULT_LISTEN = "127.0.0.1:0"  # loopback, any free port
START_TIMEOUT_S = 15.0


def cmd_view(args: argparse.Namespace) -> int:
    from bloatlab.live.server import lower_priority, parse_listen, serve

    root: Path = args.dir
    if not args.wait and not ((root / "run.json").is_file() or (root / "sweep.json").is_file()):
        raise BloatlabError(f"{root} is not a bloatlab run or sweep directory (no run.json or sweep.json)", field="DIR")
    host, port = parse_listen(args.listen, "--listen")
    server = serve(root, host, port, allow_remote=args.allow_remote)
    lower_priority()
    print(f"bloatlab view: {server.url}", flush=True)  # the first line: what `run --live` reads
    note(args, f"serving {root}/ read only; Ctrl-C stops it")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.25}, daemon=True,
                              name="bloatlab-view")
    thread.start()
    with Interrupts((signal.SIGINT, signal.SIGTERM, signal.SIGHUP)):
        try:
            while thread.is_alive() and (args.parent is None or proc.alive(args.parent, None)):
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            server.stopping.set()
            server.shutdown()
            server.server_close()
    emit(args, {"url": server.url, "dir": str(root)})
    return 0


# `run --live` -----------------------------------------------------------------------------------

class Live:
    """The view of a run's directory, in a child process at the lowest priority, from before the
    run starts to after it ends (the page then links the report), until Ctrl-C."""

    def __init__(self, out: Path, listen: str, allow_remote: bool):
        from bloatlab.live.server import is_loopback, parse_listen

        try:  # a bad address fails here, before anything is built
            host, _ = parse_listen(listen, "--live")
        except BloatlabError as e:
            if "not ADDR:PORT" not in e.message:
                raise
            raise BloatlabError(f"{e.message}; write --live=ADDR:PORT, or give the spec file before --live",
                                field="--live") from None
        if not is_loopback(host) and not allow_remote:
            raise BloatlabError(f"{host} is not a loopback address: the view would be reachable from other machines; "
                                "add --allow-remote to serve it there (its URL then carries a token)", field="--live")
        argv = [sys.executable, "-m", "bloatlab", "view", str(out), "--wait", "--quiet", "--listen", listen,
                "--parent", str(_pid())] + (["--allow-remote"] if allow_remote else [])
        self.child = proc.spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.url = self._url()

    def _url(self) -> str:
        line = _readline(self.child.stdout, START_TIMEOUT_S)
        if not line.startswith("bloatlab view: "):
            proc.stop(self.child)
            said = (self.child.stderr.read() if self.child.stderr else "").strip().splitlines()
            raise MachineError(f"the live view did not start: {said[-1] if said else line.strip() or 'no answer'}",
                               field="--live")
        return line.removeprefix("bloatlab view: ").strip()

    def linger(self) -> None:
        """Serve on after the run, until Ctrl-C (or SIGTERM, SIGHUP)."""
        if self.child.poll() is not None:
            return
        print(f"bloatlab: the live view stays at {self.url} until Ctrl-C", file=sys.stderr, flush=True)
        with Interrupts():
            try:
                while self.child.poll() is None:
                    time.sleep(0.5)
            except KeyboardInterrupt:
                pass

    def close(self) -> None:
        proc.stop(self.child, signal.SIGTERM)


def _pid() -> int:
    import os

    return os.getpid()


def _readline(stream, timeout_s: float) -> str:
    """A line from a child's pipe, or "" after timeout_s."""
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return got[0] if got else ""


def add_parsers(commands: argparse._SubParsersAction) -> None:
    view = add_command(
        commands, "view", cmd_view, "follow a run or a sweep in the browser, while it runs or after",
        "Serves a page that draws what a run's tools write as they write it: each probe's round trips with\n"
        "the idle baseline, each flow's goodput and congestion window, each probed queue's occupancy,\n"
        "sojourn, drops and marks, the datapath's lateness and CPU, and the warnings the run would print;\n"
        "for a sweep, its runs (done, running, waiting, failed) with each finished run's headline, and\n"
        "the run going on. When the run ends the page says so and links its report.\n\n"
        "It reads the directory (read only, nothing outside it) in a process of its own at the lowest\n"
        "priority, so the run never waits for it. It listens on loopback; another address needs\n"
        "--allow-remote, and its URL then carries a token every request must show (docs/live.md).\n"
        "`bloatlab run --live` starts it beside a run.",
        ["bloatlab view results/cs244-maxq100-20261129-101500",
         "bloatlab view results/qlen --listen 127.0.0.1:8044",
         "bloatlab view results/qlen --listen 0.0.0.0:8044 --allow-remote   # then open the printed URL"])
    view.add_argument("dir", metavar="DIR", type=Path, help="a run's or a sweep's results directory").complete = DIRECTORY
    view.add_argument("--listen", metavar="ADDR:PORT", default=DEFAULT_LISTEN,
                      help="where to serve (default %(default)s: loopback, a free port; the URL is printed)")
    view.add_argument("--allow-remote", action="store_true",
                      help="serve on a non-loopback address; every request must then carry the printed token")
    view.add_argument("--wait", action="store_true", help=argparse.SUPPRESS)  # run --live: DIR comes later
    view.add_argument("--parent", type=int, help=argparse.SUPPRESS)  # run --live: stop when the run's process does

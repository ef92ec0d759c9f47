"""`bloatlab view DIR`: a run's or a sweep's live page in the browser (docs/live.md); `run
--live` starts it beside a run (live/child.py)."""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from pathlib import Path

from bloatlab import proc
from bloatlab.cli.common import DIRECTORY, add_command, emit, note
from bloatlab.errors import BloatlabError
from bloatlab.interrupts import Interrupts
from bloatlab.live.address import DEFAULT_LISTEN

def cmd_view(args: argparse.Namespace) -> int:
    from bloatlab.live.server import lower_priority, serve

    root: Path = args.dir
    if not args.wait and not ((root / "run.json").is_file() or (root / "sweep.json").is_file()):
        raise BloatlabError(f"{root} is not a bloatlab run or sweep directory (no run.json or sweep.json)", field="DIR")
    if _kind(root / "run.json") == "nic":
        raise BloatlabError(f"{root} is a nic run: the live view follows emulated runs and sweeps; its report: "
                            f"bloatlab report {root}", field="DIR")
    server = serve(root, args.listen, allow_remote=args.allow_remote)
    print(f"bloatlab view: {server.url}", flush=True)  # the first line: what `run --live` reads
    lower_priority()
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


def _kind(path: Path) -> str | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc.get("kind") if isinstance(doc, dict) else None


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

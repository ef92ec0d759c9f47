"""The live page's server: the page and its scripts from the package, the results directory
read only, and a stream of updates (server-sent events) that a Follower makes from the files the
run writes.

Safe by default: it listens on loopback and answers only requests addressed to loopback (a web
page elsewhere cannot reach it through a name of its own: DNS rebinding); another address is
served only when asked for, and then every request must carry the token the URL was printed
with. It serves one directory and nothing outside it (paths are resolved, symbolic links too,
before they are opened), and only GET: nothing a request says is written anywhere.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import math
import mimetypes
import os
import secrets
import shutil
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from bloatlab.errors import BloatlabError
from bloatlab.live.address import DEFAULT_LISTEN, check_listen
from bloatlab.live.follow import Follower, SweepFollower

UPDATE_S = 0.5  # how often a page is sent what is new
STATIC = ("index.html", "live.js", "page.css", "uPlot.iife.min.js", "uPlot.min.css", "LICENSE.uPlot")
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def static_file(name: str) -> bytes:
    """The page's own files; its stylesheet is the reports' (one look for both)."""
    if name == "page.css":
        return (resources.files("bloatlab.analysis") / "page.css").read_bytes()
    return (resources.files("bloatlab.live") / "static" / name).read_bytes()


def finite(value: Any) -> Any:
    """The value with NaN and infinities as null (JSON has none; a page's parser would refuse)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    if hasattr(value, "item"):  # a numpy scalar
        return finite(value.item())
    return value


class LiveServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, root: Path, host: str, port: int, token: str | None):
        self.root = root.resolve()
        self.token = token
        self.stopping = threading.Event()
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), Handler)
        self.cookie = f"bloatlab_view_{self.server_address[1]}"  # cookies ignore ports: one per view

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = f"[{host}]" if ":" in str(host) else host
        return f"http://{shown}:{port}/" + (f"?token={self.token}" if self.token else "")

    def follower(self) -> Follower | SweepFollower:
        """A fresh follower for a new page: of a sweep if the directory holds one, else a run."""
        return SweepFollower(self.root) if (self.root / "sweep.json").exists() else Follower(self.root)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line, not socketserver's traceback: the page retries, the view goes on."""
        error = sys.exc_info()[1]
        if not isinstance(error, (ConnectionError, TimeoutError)):
            print(f"bloatlab view: a request from {client_address[0]} failed: {error!r}", file=sys.stderr)


def serve(root: Path, listen: str = DEFAULT_LISTEN, allow_remote: bool = False, field: str = "--listen") -> LiveServer:
    """The server, bound and ready to `serve_forever`; a token when it listens beyond loopback."""
    host, port = check_listen(listen, allow_remote, field)
    token = None if ipaddress.ip_address(host).is_loopback else secrets.token_urlsafe(18)
    try:
        return LiveServer(root, host, port, token)
    except OSError as e:
        raise BloatlabError(f"cannot listen on {host}:{port}: {e.strerror or e}; choose another port (0: any free one)",
                            field=field) from None


class Handler(BaseHTTPRequestHandler):
    server: LiveServer
    protocol_version = "HTTP/1.1"
    set_cookie: str | None = None

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # a request log on the run's terminal would be noise

    def _allowed(self, query: dict[str, list[str]]) -> bool:
        """Loopback: only requests addressed to loopback by name. Otherwise: the token, in the
        URL (the printed one) or in the cookie the page was given with it."""
        port = self.server.server_address[1]
        if self.server.token is None:
            return (self.headers.get("Host") or "") in {f"{name}:{port}" for name in LOOPBACK_NAMES}
        given = (query.get("token") or [""])[0]
        held = ""
        for part in (self.headers.get("Cookie") or "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == self.server.cookie:
                held = value
        ok = any(hmac.compare_digest(t.encode(), self.server.token.encode()) for t in (given, held) if t)
        if ok and given:
            self.set_cookie = f"{self.server.cookie}={self.server.token}; HttpOnly; SameSite=Strict; Path=/"
        return ok

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        url = urlsplit(self.path)
        if not self._allowed(parse_qs(url.query)):
            return self._send(403, b"refused: open the URL the view printed\n", "text/plain")
        path = unquote(url.path)
        if path in ("/", "/index.html"):
            return self._send(200, static_file("index.html"), "text/html; charset=utf-8")
        if path.startswith("/static/") and path[len("/static/"):] in STATIC:
            name = path[len("/static/"):]
            kind = mimetypes.guess_type(name)[0] or "text/plain"
            return self._send(200, static_file(name), kind + ("; charset=utf-8" if kind.startswith("text") or
                                                              kind.endswith("javascript") else ""))
        if path == "/events":
            return self._events()
        if path.startswith("/files/"):
            return self._file(path[len("/files/"):])
        return self._send(404, b"not found\n", "text/plain")

    def _refuse(self) -> None:
        self._send(405, b"read only\n", "text/plain")

    do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815 - read only

    def _headers(self, status: int, kind: str, length: int, sandbox: bool = False) -> None:
        self.send_response(status)
        if sandbox:  # the directory's own files: shown, never run (report.html has no script either)
            self.send_header("Content-Security-Policy", "sandbox")
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(length))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        if self.set_cookie:
            self.send_header("Set-Cookie", self.set_cookie)
        self.end_headers()

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self._headers(status, kind, len(body))
        if self.command != "HEAD":
            self.wfile.write(body)

    def _file(self, relative: str) -> None:
        """A file of the results directory, if the path, resolved, stays inside it; streamed."""
        root = self.server.root
        try:
            target = (root / relative).resolve()
            target.relative_to(root)
            f = target.open("rb")
        except ValueError:
            return self._send(403, b"outside the results directory\n", "text/plain")
        except OSError:
            return self._send(404, b"not found\n", "text/plain")
        with f:
            size = os.fstat(f.fileno()).st_size
            self._headers(200, mimetypes.guess_type(target.name)[0] or "application/octet-stream", size, sandbox=True)
            shutil.copyfileobj(f, self.wfile)

    def _events(self) -> None:
        """Server-sent events: the whole state first, then what is new every UPDATE_S, until the
        page goes away or the server stops. What the follower cannot read is said, one line."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        root = self.server.root
        try:
            while not ((root / "run.json").is_file() or (root / "sweep.json").is_file()):  # `run --live`: soon
                self._event("update", {"status": {"phase": "waiting", "reason": None, "warnings": []}})
                if self.server.stopping.wait(UPDATE_S):
                    return
            follower = self.server.follower()
            self._event("snapshot", follower.snapshot())
            while not self.server.stopping.wait(UPDATE_S):
                try:
                    doc = follower.poll()
                except Exception as e:  # a bug of ours, or a file like no other: said, and the next poll tries
                    doc = {"error": f"{type(e).__name__}: {e}"}
                self._event("update", doc)
        except OSError:
            return  # the page went away
        self.close_connection = True

    def _event(self, kind: str, doc: dict[str, Any]) -> None:
        doc["sent_real_s"] = time.time()
        data = json.dumps(finite(doc), separators=(",", ":"), allow_nan=False, default=str)
        self.wfile.write(f"event: {kind}\ndata: {data}\n\n".encode())
        self.wfile.flush()


def lower_priority() -> None:
    """The view yields to everything else on the machine (SCHED_IDLE): following a run must
    not take a CPU the run's datapath or its tools want."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)

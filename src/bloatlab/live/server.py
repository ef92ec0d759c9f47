"""The live page's server: the page and its scripts from the package, the results directory
read only, and a stream of updates (server-sent events) that a Follower makes from the files the
run writes.

Safe by default: it listens on loopback; another address is served only when asked for, and
then every request must carry the token the URL was printed with. It serves one directory and
nothing outside it (paths are resolved, symbolic links too, before they are opened), and only
GET: nothing a request says is written anywhere.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import mimetypes
import os
import secrets
import socket
import threading
import time
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from bloatlab.errors import BloatlabError
from bloatlab.live.follow import Follower, SweepFollower

UPDATE_S = 0.5  # how often a page is sent what is new
STATIC = ("index.html", "live.js", "page.css", "uPlot.iife.min.js", "uPlot.min.css", "LICENSE.uPlot")
DEFAULT_HOST = "127.0.0.1"
COOKIE = "bloatlab_view"


def parse_listen(text: str, field: str) -> tuple[str, int]:
    """ "ADDR:PORT", "ADDR" or ":PORT" (port 0: any free one) -> (address, port)."""
    host, sep, port = text.rpartition(":") if ":" in text else (text, "", "0")
    host = host.strip("[]") or DEFAULT_HOST
    try:
        number = int(port or 0)
        ipaddress.ip_address(host)
    except ValueError:
        raise BloatlabError(f"{text!r} is not ADDR:PORT (an IP address and a port, like 127.0.0.1:8044)",
                            field=field) from None
    if not 0 <= number <= 65535:
        raise BloatlabError(f"port {number} is out of range (0-65535; 0 takes a free one)", field=field)
    return host, number


def is_loopback(host: str) -> bool:
    return ipaddress.ip_address(host).is_loopback


def static_file(name: str) -> bytes:
    """The page's own files; its stylesheet is the reports' (one look for both)."""
    if name == "page.css":
        return (resources.files("bloatlab.analysis") / "page.css").read_bytes()
    return (resources.files("bloatlab.live") / "static" / name).read_bytes()


class LiveServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, root: Path, host: str, port: int, token: str | None):
        self.root = root.resolve()
        self.token = token
        self.stopping = threading.Event()
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = f"[{host}]" if ":" in str(host) else host
        return f"http://{shown}:{port}/" + (f"?token={self.token}" if self.token else "")

    def follower(self) -> Follower | SweepFollower:
        """A fresh follower for a new page: of a sweep if the directory holds one, else a run."""
        return SweepFollower(self.root) if (self.root / "sweep.json").exists() else Follower(self.root)


def serve(root: Path, host: str = DEFAULT_HOST, port: int = 0, allow_remote: bool = False) -> LiveServer:
    """The server, bound and ready to `serve_forever`; a token when it listens beyond loopback."""
    if not is_loopback(host) and not allow_remote:
        raise BloatlabError(f"{host} is not a loopback address: the view would be reachable from other machines; "
                            "add --allow-remote to serve it there (its URL then carries a token)", field="--listen")
    token = None if is_loopback(host) else secrets.token_urlsafe(18)
    try:
        return LiveServer(root, host, port, token)
    except OSError as e:
        raise BloatlabError(f"cannot listen on {host}:{port}: {e.strerror or e}; choose another port (0: any free one)",
                            field="--listen") from None


class Handler(BaseHTTPRequestHandler):
    server: LiveServer
    protocol_version = "HTTP/1.1"
    cookie: str | None = None

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # a request log on the run's terminal would be noise

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        self.cookie = None
        if self.server.token is not None:
            # The printed URL carries the token; the page's own requests carry it as a cookie.
            given = (query.get("token") or [""])[0]
            cookies = SimpleCookie(self.headers.get("Cookie") or "")
            held = cookies[COOKIE].value if COOKIE in cookies else ""
            if not any(hmac.compare_digest(t.encode(), self.server.token.encode()) for t in (given, held)):
                return self._send(403, b"a token is required: open the URL the view printed\n", "text/plain")
            if given:
                self.cookie = f"{COOKIE}={self.server.token}; HttpOnly; SameSite=Strict; Path=/"
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

    def do_HEAD(self) -> None:  # noqa: N802
        self._send(405, b"", "text/plain")

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD  # noqa: N815 - read only

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        if self.cookie:
            self.send_header("Set-Cookie", self.cookie)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _file(self, relative: str) -> None:
        """A file of the results directory, if the path, resolved, stays inside it."""
        root = self.server.root
        try:
            target = (root / relative).resolve()
            target.relative_to(root)
        except (ValueError, OSError):
            return self._send(403, b"outside the results directory\n", "text/plain")
        if not target.is_file():
            return self._send(404, b"not found\n", "text/plain")
        kind = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        self._send(200, target.read_bytes(), kind)

    def _events(self) -> None:
        """Server-sent events: the whole state first, then what is new every UPDATE_S, until the
        page goes away or the server stops."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Accel-Buffering", "no")
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
                self._event("update", follower.poll())
        except (BrokenPipeError, ConnectionResetError):
            return
        self.close_connection = True

    def _event(self, kind: str, doc: dict[str, Any]) -> None:
        doc["sent_real_s"] = time.time()
        data = json.dumps(doc, separators=(",", ":"), default=_plain)
        self.wfile.write(f"event: {kind}\ndata: {data}\n\n".encode())
        self.wfile.flush()


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return None  # nan, inf: JSON has none
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def lower_priority() -> None:
    """The view yields to everything else on the machine (SCHED_IDLE): following a run must
    not take a CPU the run's datapath or its tools want."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)

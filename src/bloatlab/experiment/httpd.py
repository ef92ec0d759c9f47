"""The web workload's server: Python's http.server, with the congestion control set on the
listening socket (the accepted connections inherit it).

A host's default congestion control (the netns sysctl) can only be set to an algorithm in
the machine's tcp_allowed_congestion_control list, which many machines restrict; the socket
option works for any algorithm the kernel has, as root. The server prints the algorithm it
got, read back from the socket, so run.json's raw logs say what the fetches really used.

    python -m bloatlab.experiment.httpd ADDRESS PORT DIRECTORY CC
"""

from __future__ import annotations

import functools
import http.server
import os
import signal
import socket
import sys


class _Server(http.server.ThreadingHTTPServer):
    cc = "cubic"

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, self.cc.encode())
        super().server_bind()


def _stop(signum: int, frame: object) -> None:
    # The run ends the server with SIGINT (a cleanup with SIGTERM) and it has nothing to finish:
    # leave at once, without a KeyboardInterrupt's traceback in its log or the interpreter's
    # 30 ms of finalisation on the run's way out.
    os._exit(0)


def main(argv: list[str]) -> int:
    address, port, directory, cc = argv
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    _Server.cc = cc
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=directory)
    with _Server((address, int(port)), handler) as server:
        got = server.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode()
        print(f"serving {directory} on {address}:{port}, congestion control {got}", flush=True)
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

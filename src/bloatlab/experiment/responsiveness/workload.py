"""The responsiveness workload: the server (server.py) in the spec's `server` host, the client
(client.py) in its `client` host, for at most the workload's window; the client's JSON read
into the run's results: RPM and its parts, the probes as latency samples, goodput per interval.

The server host's sockets keep at most 16 KiB unsent (net.ipv4.tcp_notsent_lowat in its
namespace), as the draft asks of servers: otherwise the self probes would measure the
server's socket buffer, not the path's queue. nghttpd cannot choose a congestion control, and
a namespace's default may be restricted (tcp_allowed_congestion_control); a route to the
client with `congctl` gives the server's connections the test's `cc` whatever the default
(the spec refuses other TCP flows on that route, which it would override too).
"""

from __future__ import annotations

import json
import signal
import sys
import time

from bloatlab.experiment.record import Collected, ResponsivenessResult
from bloatlab.experiment.responsiveness import server
from bloatlab.experiment.running import Running, last_line, route_congestion_control
from bloatlab.specs.model import Responsiveness

SERVER_NOTSENT_LOWAT = 16384


class ResponsivenessTest(Running):
    w: Responsiveness
    stopping = False

    def prepare(self) -> None:
        address = self.net.address(self.w.server)
        self.site = server.make_site(self.net.state_dir / f"nq-{self.w.name}", address, self.port)
        self.net.exec(self.w.server, ["sysctl", "-qw", f"net.ipv4.tcp_notsent_lowat={SERVER_NOTSENT_LOWAT}"], check=True)
        if self.w.cc:
            route_congestion_control(self.net, self.w.server, self.w.client, self.net.congestion_control(self.w.cc))
        self._spawn(self.w.server, server.argv(self.site, address, self.port), self.raw / f"{self.w.name}.server.txt")
        self.servers.append((self.w.server, self.port, f"HTTP/2 server (nghttpd) of {self.w.name}", False))

    def start(self) -> None:
        argv = [sys.executable, "-m", "bloatlab.experiment.responsiveness.client", "--server",
                self.net.address(self.w.server), "--port", str(self.port), "--out", str(self._result_path()),
                # A second less than the window: it ends by itself and has time to write its results.
                "--direction", self.w.direction, "--duration", f"{self.w.window_s - 1:g}",
                *(["--cc", self.net.congestion_control(self.w.cc)] if self.w.cc else [])]
        self.client = self._spawn(self.w.client, argv, self.raw / f"{self.w.name}.client.txt")
        self.started = True

    def _result_path(self):
        return self.raw / f"{self.w.name}.rpm.json"

    def stop(self) -> None:
        # The client ends by itself once RPM is stable; at the window's end it is told to stop,
        # and writes what it measured.
        if self.started and not self.stopping and self.client.poll() is None:
            self.stopping = True  # once: the schedule may say stop twice
            self.client.send_signal(signal.SIGINT)

    def wait(self, deadline: float) -> None:
        if self.started and self.client.poll() is None:  # the server never ends by itself
            try:
                self.client.wait(timeout=max(0.0, deadline - time.monotonic()))
            except Exception:
                pass

    def end(self) -> None:
        super().end()
        if hasattr(self, "site"):
            server.remove(self.site)

    def collect(self) -> Collected:
        got = Collected()
        if not self.started:
            return got
        try:
            doc = json.loads(self._result_path().read_text())
        except (OSError, ValueError):
            said = last_line(self.raw / f"{self.w.name}.client.txt")
            got.errors.append(f"{self.w.name}: the responsiveness client wrote no results{': ' + said if said else ''}")
            return got
        t0 = self.clock.t0_mono
        # Probes as latency samples: the idle ones (TCP handshakes before the load), the foreign
        # ones' TCP handshakes and the self ones' GETs. A probe that failed is lost; one the end
        # of the test cut short is neither.
        for label, probes in (("idle", doc.get("idle_probes", [])), ("load", doc.get("probes", []))):
            for probe in probes:
                kind = "idle" if label == "idle" else probe["kind"]
                if probe.get("ok"):
                    figure = probe["http_ms"] if kind == "self" else probe["tcp_ms"]
                    got.ping.append((probe["t"] - t0, f"{self.w.name}.{kind}", figure))
        for kind, probes in (("idle", doc.get("idle_probes", [])), ("foreign", doc.get("probes", [])),
                             ("self", doc.get("probes", []))):
            rows = [rtt for _, probe, rtt in got.ping if probe == f"{self.w.name}.{kind}"]
            failed = sum(1 for p in probes if p.get("ok") is False and (kind == "idle" or p["kind"] == kind))
            got.per_ping[f"{self.w.name}.{kind}"] = (rows, failed)
            got.ping_lost += failed
        for interval in doc.get("intervals", []):
            for direction, bps in interval.get("interval_bps", {}).items():
                got.throughput.append((interval["t"] - t0, f"{self.w.name}.{direction}", bps / 1e6))
        result = doc.get("result", {})
        got.responsiveness = ResponsivenessResult.from_json({
            "method": doc.get("method"), "direction": doc.get("direction"), "cc": self.w.cc, "server": "nghttpd",
            "server_notsent_lowat": SERVER_NOTSENT_LOWAT, "parameters": doc.get("parameters"), **result})
        if result.get("rpm") is None:
            got.warnings.append(f"{self.w.name}: no RPM: the load never saturated the path within "
                                f"{self.w.window_s:g} s; give the test more time")
        for error in doc.get("errors", [])[:3]:
            got.warnings.append(f"{self.w.name}: {error}")
        return got

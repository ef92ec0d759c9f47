"""The responsiveness test's client (draft-ietf-ippm-responsiveness-08; the arithmetic is in
method.py), run inside the client's namespace against the server of server.py:

    python -m bloatlab.experiment.responsiveness.client --server ADDRESS --port PORT --out FILE
        [--direction down|up|both] [--duration SECONDS] [--cc CC]

First a few foreign probes on the idle path, one after another (idle latency: the trimmed mean
of their TCP handshakes, the first left out as it resolves the address; the draft leaves the
method open).
Then HTTP/2-over-TLS load-generating connections, one per direction at first and one more
each interval (ID) up to MNP: GETs of an endless object, or POSTs of an endless body. Probe
pairs go out all along: a foreign probe (a new connection: TCP handshake, TLS handshake, GET
of the 1-byte object) and a self probe (that GET on a random load-generating connection).
Once the moving average of goodput is stable ("saturated"), each interval computes RPM over
the probes launched since saturation in the last MAD intervals; the test ends when RPM is
stable too, when the time is up, or on SIGINT/SIGTERM. Both directions at once give one
score, as Apple's networkQuality does by default.

FILE is JSON: every probe and interval with its time.monotonic(), and the result.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import ssl
import struct
import sys
from dataclasses import dataclass, field
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

from bloatlab.experiment.responsiveness import method as m
from bloatlab.experiment.responsiveness.server import AUTHORITY

SMALL, LARGE, UPLOAD = "/small", "/large", "/upload"
# Receive windows. HTTP/2 flow control bounds what the server may have sent and not had
# acknowledged, so it bounds what waits in the server's own buffers: nghttpd keeps up to 64 KiB
# per connection in user space, beyond the kernel's notsent limit, and with fixed 16 MiB windows
# a self probe measured those buffers (500-800 ms at 10 Mbit/s), not the path. So each download
# stream's window follows its bandwidth-delay product, as receive-window autotuning does (Linux,
# Chromium's HTTP/2): WINDOW_GAIN x the bytes it got per second x the loaded RTT (the foreign
# probes' TCP handshakes), between MIN_WINDOW and MAX_WINDOW. The self probes then see the path's
# queue and at most half a BDP more; the queue still fills, as the window always leaves room.
STREAM_WINDOW = 65535  # at the start: HTTP/2's default
MIN_WINDOW = 16 * 1024
MAX_WINDOW = 16 * 1024 * 1024
WINDOW_GAIN = 1.5
CONNECTION_WINDOW = 16 * 1024 * 1024  # all of a connection's streams together: never the limit
UPLOAD_CHUNK = 4096  # an upload's DATA frames: small, so little waits behind each
UPLOAD_UNSENT = 4096  # most unsent bytes an upload leaves in its socket before the next frame
UPLOAD_POLL_S = 0.002
TCPI_BYTES_ACKED, TCPI_NOTSENT_BYTES = 120, 144  # offsets in Linux's struct tcp_info
NOTSENT_LOWAT = 16384  # unsent bytes a socket holds: the client's own buffers stay small
IDLE_PROBES = 5
PROBE_TIMEOUT_S = 10.0


@dataclass
class Stream:
    id: int
    started: float
    done: asyncio.Future
    status: str | None = None
    received: int = 0
    window: int = STREAM_WINDOW  # what the server may still send on it
    window_target: int = STREAM_WINDOW


@dataclass
class Meter:
    """Bytes moved per direction since the start: downloads as received, uploads as TCP saw
    them acknowledged."""

    bytes: dict[str, int] = field(default_factory=lambda: {"down": 0, "up": 0})


class Connection:
    """One HTTP/2 connection over TLS 1.3, its reader a task."""

    def __init__(self, address: str, port: int, cc: str | None, meter: Meter | None):
        self.address, self.port, self.cc, self.meter = address, port, cc, meter
        self.streams: dict[int, Stream] = {}
        self.window_open = asyncio.Event()
        self.closed = asyncio.Event()
        self.error: str | None = None
        self.tasks: list[asyncio.Task] = []
        self.load: Stream | None = None  # a download's endless stream
        self.acked = 0  # tcpi_bytes_acked when last read (uploads)
        self.load_counted = 0  # its bytes at the last interval

    async def open(self) -> tuple[float, float]:
        """Connects; returns the TCP and the TLS handshake's times (ms)."""
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        if self.cc:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, self.cc.encode())
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT, NOTSENT_LOWAT)
        # Without it Nagle holds a request behind the ACK of what went before: a round trip more.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            t = loop.time()
            await loop.sock_connect(sock, (self.address, self.port))
            tcp_ms = (loop.time() - t) * 1000
            t = loop.time()
            self.reader, self.writer = await asyncio.open_connection(sock=sock, ssl=_tls(), server_hostname=AUTHORITY)
            tls_ms = (loop.time() - t) * 1000  # TLS 1.3: one round trip, so no normalising
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self.writer.transport.set_write_buffer_limits(high=2 * UPLOAD_CHUNK)
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.h2 = h2.connection.H2Connection(config=config)
        self.h2.local_settings = h2.settings.Settings(client=True, initial_values={
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW, h2.settings.SettingCodes.ENABLE_PUSH: 0})
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(CONNECTION_WINDOW - 65535)
        self.window = CONNECTION_WINDOW
        self._flush()
        self.tasks.append(asyncio.create_task(self._read()))
        return tcp_ms, tls_ms

    def request(self, method: str, path: str, body: bool = False) -> Stream:
        if self.closed.is_set():
            raise ConnectionError(self.error or "connection closed")
        sid = self.h2.get_next_available_stream_id()
        headers = [(":method", method), (":scheme", "https"), (":authority", AUTHORITY), (":path", path),
                   ("accept-encoding", "identity")]
        if body:
            headers.append(("content-type", "application/octet-stream"))
        stream = Stream(sid, asyncio.get_running_loop().time(), asyncio.get_running_loop().create_future())
        # A stream nobody awaits (an upload's) may end in an error that needs no telling.
        stream.done.add_done_callback(lambda f: f.cancelled() or f.exception())
        self.streams[sid] = stream
        self.h2.send_headers(sid, headers, end_stream=not body)
        self._flush()
        return stream

    async def upload(self, stream: Stream) -> None:
        """Sends an endless body on `stream` as fast as the path takes it, keeping at most
        UPLOAD_UNSENT bytes unsent in the socket (a send() may fill the whole send buffer, past
        TCP_NOTSENT_LOWAT, so the kernel's count is watched): the client's own buffers must not
        be what a self probe on this connection waits behind. Counts the bytes TCP saw
        acknowledged, not those handed to it."""
        chunk = bytes(UPLOAD_CHUNK)
        while not self.closed.is_set() and not stream.done.done():
            room = min(self.h2.local_flow_control_window(stream.id), self.h2.max_outbound_frame_size, UPLOAD_CHUNK)
            if room <= 0:
                self.window_open.clear()
                await self.window_open.wait()
                continue
            self.h2.send_data(stream.id, chunk[:room])
            self._flush()
            await self.writer.drain()
            while not self.closed.is_set() and self._count_acked() > UPLOAD_UNSENT:
                await asyncio.sleep(UPLOAD_POLL_S)

    def _count_acked(self) -> int:
        """Adds what TCP saw acknowledged since the last call to the meter; returns the bytes
        still unsent in the socket (struct tcp_info: tcpi_bytes_acked, tcpi_notsent_bytes)."""
        try:
            info = self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 192)
        except OSError:
            return 0
        acked, = struct.unpack_from("<Q", info, TCPI_BYTES_ACKED)
        unsent, = struct.unpack_from("<I", info, TCPI_NOTSENT_BYTES)
        if self.meter is not None:
            self.meter.bytes["up"] += max(0, acked - self.acked)
        self.acked = acked
        return unsent

    def _flush(self) -> None:
        data = self.h2.data_to_send()
        if data and not self.writer.is_closing():
            self.writer.write(data)

    async def _read(self) -> None:
        try:
            while data := await self.reader.read(65536):
                for event in self.h2.receive_data(data):
                    self._on(event)
                self._flush()
            self.error = self.error or "the server closed the connection"
        except (OSError, ssl.SSLError, h2.exceptions.ProtocolError) as e:
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.closed.set()
            self.window_open.set()
            for stream in self.streams.values():
                if not stream.done.done():
                    stream.done.set_exception(ConnectionError(self.error or "connection closed"))

    def _replenish(self, stream: Stream | None, consumed: int) -> None:
        """Flow control by hand: the connection's window kept wide, a stream's near its target
        (an update once a quarter of it is used, so a window is never far below its target)."""
        self.window -= consumed
        if self.window < CONNECTION_WINDOW // 2:
            self.h2.increment_flow_control_window(CONNECTION_WINDOW - self.window)
            self.window = CONNECTION_WINDOW
        if stream is None or stream.done.done():
            return
        stream.window -= consumed
        deficit = stream.window_target - stream.window
        if deficit >= max(1, stream.window_target // 4):
            self.h2.increment_flow_control_window(deficit, stream_id=stream.id)
            stream.window = stream.window_target

    def _on(self, event: h2.events.Event) -> None:
        stream = self.streams.get(getattr(event, "stream_id", 0) or 0)
        if isinstance(event, h2.events.ResponseReceived) and stream:
            stream.status = dict(event.headers).get(":status")
        elif isinstance(event, h2.events.DataReceived):
            self._replenish(stream, event.flow_controlled_length)
            if stream:
                stream.received += len(event.data)
            if self.meter is not None:
                self.meter.bytes["down"] += len(event.data)
        elif isinstance(event, h2.events.StreamEnded) and stream and not stream.done.done():
            stream.done.set_result(asyncio.get_running_loop().time())
        elif isinstance(event, h2.events.StreamReset) and stream and not stream.done.done():
            stream.done.set_exception(ConnectionError(f"stream reset by the server (error {event.error_code})"))
        elif isinstance(event, h2.events.WindowUpdated):
            self.window_open.set()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.error = f"the server ended the connection (error {event.error_code})"

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        if hasattr(self, "writer"):
            self.writer.close()
            try:
                await asyncio.wait_for(self.writer.wait_closed(), 1)
            except (OSError, ssl.SSLError, asyncio.TimeoutError):
                pass


def _tls() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the run's own self-signed certificate
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.set_alpn_protocols(["h2"])
    # nghttpd takes P-256 key shares only: offering X25519 first costs a HelloRetryRequest, a
    # second round trip in every TLS handshake.
    context.set_ecdh_curve("prime256v1")
    return context


class Test:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.directions = ["down", "up"] if args.direction == "both" else [args.direction]
        self.meter = Meter()
        self.loads: list[tuple[str, Connection]] = []
        self.probes: list[dict[str, Any]] = []
        self.idle: list[dict[str, Any]] = []
        self.intervals: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.result: dict[str, Any] = {"ended": "interrupted"}
        self.goodput_bps = 0.0
        self.goodputs: dict[str, list[float]] = {d: [] for d in self.directions}  # per interval, bit/s
        self.opening = {d: 0 for d in self.directions}
        self.saturated_at: float | None = None
        self.tasks: set[asyncio.Task] = set()

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # Probes ----------------------------------------------------------------------------------

    async def foreign(self, into: list[dict[str, Any]]) -> None:
        loop = asyncio.get_running_loop()
        probe: dict[str, Any] = {"kind": "foreign", "t": loop.time()}
        into.append(probe)
        conn = Connection(self.args.server, self.args.port, self.args.cc, None)
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                probe["tcp_ms"], probe["tls_ms"] = await conn.open()
                stream = conn.request("GET", SMALL)
                await stream.done
                probe["http_ms"] = (loop.time() - stream.started) * 1000
                probe["ok"] = stream.status == "200" and stream.received == 1
        except (OSError, ssl.SSLError, ConnectionError, asyncio.TimeoutError, h2.exceptions.ProtocolError) as e:
            probe["ok"], probe["error"] = False, f"{type(e).__name__}: {e}"
        finally:
            await conn.close()

    async def self_probe(self) -> None:
        loop = asyncio.get_running_loop()
        alive = [(d, c) for d, c in self.loads if not c.closed.is_set()]
        if not alive:
            return
        direction, conn = random.choice(alive)
        probe: dict[str, Any] = {"kind": "self", "t": loop.time(), "direction": direction}
        self.probes.append(probe)
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                stream = conn.request("GET", SMALL)
                await stream.done
                probe["http_ms"] = (loop.time() - stream.started) * 1000
                probe["ok"] = stream.status == "200" and stream.received == 1
        except (OSError, ConnectionError, asyncio.TimeoutError, h2.exceptions.ProtocolError) as e:
            probe["ok"], probe["error"] = False, f"{type(e).__name__}: {e}"

    async def prober(self) -> None:
        """Probe pairs, foreign and self interleaved, at the rate PTC allows."""
        while True:
            self._spawn(self.foreign(self.probes))
            await asyncio.sleep(0.5 / m.probe_rate(self.goodput_bps))
            self._spawn(self.self_probe())
            await asyncio.sleep(0.5 / m.probe_rate(self.goodput_bps))

    # Load ------------------------------------------------------------------------------------

    def connections(self) -> dict[str, int]:
        """Load-generating connections per direction: open ones and those still opening."""
        return {d: self.opening[d] + sum(1 for x, c in self.loads if x == d and not c.closed.is_set())
                for d in self.directions}

    async def add_load(self, direction: str) -> None:
        conn = Connection(self.args.server, self.args.port, self.args.cc, self.meter)
        self.opening[direction] += 1
        try:
            await conn.open()
        except (OSError, ssl.SSLError) as e:
            self.errors.append(f"a load-generating connection ({direction}) failed to open: {e}")
            await conn.close()
            return
        finally:
            self.opening[direction] -= 1
        self.loads.append((direction, conn))
        self._spawn(self.keep_loading(direction, conn))

    async def keep_loading(self, direction: str, conn: Connection) -> None:
        try:
            while not conn.closed.is_set():
                if direction == "down":
                    conn.load, conn.load_counted = conn.request("GET", LARGE), 0
                    await conn.load.done  # 8 GiB: it outlasts any test
                else:
                    stream = conn.request("POST", UPLOAD, body=True)
                    await conn.upload(stream)
        except (OSError, ConnectionError, h2.exceptions.ProtocolError) as e:
            # The draft would abort the test; we say so and let the ramp replace it.
            self.errors.append(f"a load-generating connection ({direction}) ended: {e}")

    # The test --------------------------------------------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        for _ in range(IDLE_PROBES + 1):
            await self.foreign(self.idle)
        # The first resolves the server's address (ARP): it is not the path's latency.
        idle_tcp = [p["tcp_ms"] for p in self.idle[1:] if p.get("ok")]
        self.result["idle_latency_ms"] = m.trimmed_mean(idle_tcp)
        loaded_from = loop.time()
        for direction in self.directions:
            for _ in range(m.INP):
                await self.add_load(direction)
        self._spawn(self.prober())
        rpms: list[float] = []
        moved = dict(self.meter.bytes)
        goodputs = self.goodputs
        averages: list[float] = []
        index = 0
        self.result["ended"] = "time"
        while True:
            index += 1
            await asyncio.sleep(max(0.0, loaded_from + index * m.ID_S - loop.time()))
            now = loop.time()
            for d in self.directions:
                goodputs[d].append((self.meter.bytes[d] - moved[d]) * 8 / m.ID_S)
            moved = dict(self.meter.bytes)
            per_direction = {d: m.moving_average(goodputs[d]) for d in self.directions}
            self.goodput_bps = sum(per_direction.values())
            averages.append(self.goodput_bps)
            interval: dict[str, Any] = {"t": now, "goodput_bps": per_direction,
                                        "interval_bps": {d: goodputs[d][-1] for d in self.directions},
                                        "connections": self.connections()}
            interval["window_bytes"] = self.tune_windows(since=now - m.ID_S)
            if self.saturated_at is None and m.stable(averages):
                self.saturated_at = now
            interval["saturated"] = self.saturated_at is not None
            if self.saturated_at is not None:
                figures = self.figures(since=max(self.saturated_at, now - m.MAD * m.ID_S))
                interval.update(figures)
                if figures["rpm"] is not None:
                    rpms.append(figures["rpm"])
                    self.result.update(figures, intervals_probed=len(rpms))
                    if m.stable(rpms):
                        self.result["ended"] = "stable"
                        self.result["stable_at_s"] = now - start
            self.intervals.append(interval)
            if self.result["ended"] == "stable" or now - start >= self.args.duration - m.ID_S:
                break
            for direction in self.directions:
                for _ in range(min(m.INC, m.MNP - interval["connections"][direction])):
                    self._spawn(self.add_load(direction))

    def tune_windows(self, since: float) -> int | None:
        """Each download stream's window to WINDOW_GAIN x its bandwidth-delay product: its bytes
        of the last interval per second, times the loaded RTT (the foreign probes' handshakes
        since `since`, else the idle latency). Returns the mean window."""
        handshakes = [p["tcp_ms"] for p in self.probes if p["t"] >= since and p.get("ok") and p["kind"] == "foreign"]
        rtt_ms = m.trimmed_mean(handshakes) or self.result.get("idle_latency_ms")
        windows = []
        for _, conn in self.loads:
            stream = conn.load
            if stream is None or rtt_ms is None:
                continue
            rate = (stream.received - conn.load_counted) / m.ID_S
            conn.load_counted = stream.received
            stream.window_target = int(min(MAX_WINDOW, max(MIN_WINDOW, WINDOW_GAIN * rate * rtt_ms / 1000)))
            windows.append(stream.window_target)
        return sum(windows) // len(windows) if windows else None

    def figures(self, since: float) -> dict[str, Any]:
        """RPM and its parts over the probes launched since `since` that are done."""
        done = [p for p in self.probes if p["t"] >= since and p.get("ok")]
        tm = {"tcp_f": m.trimmed_mean([p["tcp_ms"] for p in done if p["kind"] == "foreign"]),
              "tls_f": m.trimmed_mean([p["tls_ms"] for p in done if p["kind"] == "foreign"]),
              "http_f": m.trimmed_mean([p["http_ms"] for p in done if p["kind"] == "foreign"]),
              "http_l": m.trimmed_mean([p["http_ms"] for p in done if p["kind"] == "self"])}
        return {**m.rpm(**tm), "tm_ms": tm,
                "probes": {"foreign": sum(p["kind"] == "foreign" for p in done),
                           "self": sum(p["kind"] == "self" for p in done)}}

    async def stop(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await asyncio.gather(*(conn.close() for _, conn in self.loads), return_exceptions=True)

    def document(self) -> dict[str, Any]:
        probes_run = int(self.result.get("intervals_probed", 0))
        result = {**self.result, "confidence": m.confidence(probes_run, self.result["ended"] == "stable"),
                  "band": m.band(self.result.get("rpm")),
                  "saturated": self.saturated_at is not None,
                  "goodput_mbps": {d: m.moving_average(self.goodputs[d]) / 1e6 for d in self.directions},
                  "connections": {d: sum(1 for x, _ in self.loads if x == d) for d in self.directions},
                  "probes_failed": sum(1 for p in self.probes if p.get("ok") is False),
                  "probes_unfinished": sum(1 for p in self.probes if "ok" not in p)}
        return {"method": m.DRAFT, "direction": self.args.direction, "cc": self.args.cc,
                "parameters": {"MAD": m.MAD, "ID_s": m.ID_S, "TMP": m.TMP, "SDT": m.SDT, "INP": m.INP, "INC": m.INC,
                               "MNP": m.MNP, "MPS": m.MPS, "PTC": m.PTC, "idle_probes": IDLE_PROBES},
                "saturated_at": self.saturated_at,
                "result": result, "errors": self.errors[:20], "idle_probes": self.idle,
                "intervals": self.intervals, "probes": self.probes}


async def _main(args: argparse.Namespace) -> int:
    test = Test(args)
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()

    def interrupt() -> None:
        # Once: a second signal while stopping must not cancel the stopping (and lose the file).
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        main.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, interrupt)
    try:
        await test.run()
    except asyncio.CancelledError:
        if test.result["ended"] != "stable":
            test.result["ended"] = "interrupted"
    finally:
        try:
            await test.stop()
        except asyncio.CancelledError:
            pass
        with open(args.out + ".tmp", "w") as f:
            json.dump(test.document(), f)
        os.replace(args.out + ".tmp", args.out)
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bloatlab.experiment.responsiveness.client")
    parser.add_argument("--server", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--direction", choices=("down", "up", "both"), default="down")
    parser.add_argument("--duration", type=float, default=20.0, help="the most the test may take, s")
    parser.add_argument("--cc", default=None, help="congestion control of the client's sockets")
    args = parser.parse_args(argv)
    return asyncio.run(_main(args))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

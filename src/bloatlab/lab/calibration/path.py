"""A candidate path and the measured test on it: the guess from physics (rates from the
measured totals, the base RTT from the least round trip, a FIFO's limit from the queueing delay
under load), the experiment spec that runs the measurement's test on a path (short or at full
length), and an emulated run read back under the measurement's own names.

The path is one link between `client` (the host that probed) and `server`: a rate each way, a
base RTT (split evenly: round trips cannot tell the two one-way delays apart), a queue
discipline at each bottleneck with its limit (searched for the FIFOs; an AQM keeps the
catalogue's, which it rarely reaches), and, where asked, random loss and jitter each way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bloatlab.errors import BloatlabError
from bloatlab.results.measurement import Measurement, from_run
from bloatlab.specs.disciplines import MTU_FRAME_BYTES

PAYLOAD_BYTES = 1448  # a full TCP segment's payload with timestamps, in a 1514-byte frame
FIFOS = ("droptail", "drophead")  # their limit is what sets the delay under load: searched
STACK_RTT_MS = 0.1  # what the hosts' stacks and serialisation add to an emulated round trip
MIN_LIMIT, MAX_LIMIT = 2, 100_000


@dataclass(frozen=True)
class PathValues:
    """One candidate path."""

    rate_up_bps: float
    rate_down_bps: float
    rtt_ms: float  # base RTT, split evenly between the two directions
    discipline: str
    limit_pkts: int | None  # None: the discipline's default
    loss: float = 0.0  # each way, a probability
    jitter_ms: float = 0.0  # each way

    def rounded(self) -> PathValues:
        """As the spec writes it: rates to 6 digits, the RTT to the microsecond."""
        return replace(self, rate_up_bps=float(f"{self.rate_up_bps:.6g}"), rate_down_bps=float(f"{self.rate_down_bps:.6g}"),
                       rtt_ms=round(self.rtt_ms, 3))

    def describe(self) -> str:
        limit = f" limit {self.limit_pkts}" if self.limit_pkts else ""
        extra = (f" loss {self.loss * 100:.3g}%" if self.loss else "") + \
            (f" jitter {self.jitter_ms:.3g} ms" if self.jitter_ms else "")
        return (f"{self.discipline}{limit}, up {self.rate_up_bps / 1e6:.4g} Mbit/s, down "
                f"{self.rate_down_bps / 1e6:.4g} Mbit/s, base RTT {self.rtt_ms:.3g} ms{extra}")


# The guess ------------------------------------------------------------------------------------

def guess(measurements: list[Measurement], discipline: str, limit_pkts: int | None = None) -> PathValues:
    """The path the measurements point to before any run."""
    bases = [b for b in (m.base_rtt_ms() for m in measurements) if b is not None]
    if not bases:
        raise BloatlabError("no measurement has a round trip to take the base RTT from; give one with a ping",
                            field="MEASUREMENT")
    rtt = max(0.1, min(bases) - STACK_RTT_MS)
    rates: dict[str, float] = {}
    for m in measurements:
        figures = m.figures()
        for d in m.directions():
            total = figures.get(f"{d}.total.p90")
            if total:
                rates[d] = max(rates.get(d, 0.0), total * 1e6 * MTU_FRAME_BYTES / PAYLOAD_BYTES)
    if not rates:
        raise BloatlabError("no measurement has a TCP flow to take the rate from; calibrate needs load",
                            field="MEASUREMENT")
    up = rates.get("up", rates.get("down"))
    down = rates.get("down", up)
    limit = limit_pkts
    if discipline in FIFOS and limit is None:
        limit = _limit_from_delay(measurements, rtt, {"up": up, "down": down})
    return PathValues(up, down, rtt, discipline, limit if discipline in FIFOS or limit_pkts else None)


def _limit_from_delay(measurements: list[Measurement], rtt_ms: float, rates: dict[str, float]) -> int:
    """The packets a full FIFO holds for the queueing delay seen under load: 99th percentile of
    the first probe's round trips above the base, over a packet's time at the slower loaded rate."""
    guesses = []
    for m in measurements:
        figures = m.figures()
        if not m.probes:
            continue
        p99 = figures.get(f"probe.{m.probes[0].name}.load.p99")
        if p99 is None:
            continue
        # As if one queue held all of it: with both ways loaded, the two seldom peak at once.
        seconds_per_packet = max(MTU_FRAME_BYTES * 8 / rates[d] for d in m.directions())
        guesses.append((p99 - rtt_ms) / 1e3 / seconds_per_packet)
    limit = max(guesses) if guesses else 100
    return int(min(MAX_LIMIT, max(MIN_LIMIT, round(limit))))


# The test on a candidate path -------------------------------------------------------------------

def _fmt_s(seconds: float) -> str:
    return f"{round(seconds, 3):g}s"


def timeline(m: Measurement, load_s: float | None) -> tuple[float, float, float]:
    """(idle before, load length, idle after) of the emulated test: the measurement's own, or a
    short one (load_s of load, at most 3 s idle before and 2 s after)."""
    window = m.load_window()
    if window is None:
        length = m.duration_s if load_s is None else min(m.duration_s, load_s)
        return 0.0, length, 0.0
    before, after = window[0], max(0.0, m.duration_s - window[1])
    length = window[1] - window[0]
    if load_s is None or load_s >= length:
        return before, length, after
    return min(before, 3.0), load_s, min(after, 2.0)


def test_spec(m: Measurement, path: PathValues, load_s: float | None = None, seed: int = 1,
              as_params: bool = False) -> dict[str, Any]:
    """The measurement's test on the candidate path, as an experiment spec (data). `as_params`:
    the path's values become [params] with the fitted values as defaults, so `--set` can
    change them in the written file."""
    before, length, after = timeline(m, load_s)
    window = m.load_window()
    scale = length / (window[1] - window[0]) if window and window[1] > window[0] else 1.0
    values = {"rate_up": f"{path.rate_up_bps / 1e6:.6g}mbit", "rate_down": f"{path.rate_down_bps / 1e6:.6g}mbit",
              "delay": f"{path.rtt_ms / 2:.6g}ms", "loss": f"{path.loss * 100:.6g}%",
              "jitter": f"{path.jitter_ms:.6g}ms", "discipline": path.discipline}
    if path.limit_pkts:
        values["limit"] = path.limit_pkts

    def v(name: str) -> Any:
        return f"{{{name}}}" if as_params else values[name]

    queue: dict[str, Any] = {"discipline": v("discipline")}
    if path.limit_pkts:
        queue["packets"] = v("limit")
    direction = {"delay": v("delay"), "loss": v("loss"), "queue": queue}
    if path.jitter_ms:
        direction["jitter"] = v("jitter")
    link = {"name": "path", "ends": ["client", "server"], "forward": {"rate": v("rate_up"), **direction},
            "reverse": {"rate": v("rate_down"), **direction}}
    workloads: list[dict[str, Any]] = []
    for i, p in enumerate(m.probes, 1):
        workloads.append({"kind": p.kind, "name": f"{p.kind}_{i}", "from": "client", "to": "server",
                          "interval": _fmt_s(p.interval_s), "dscp": p.dscp})
    counts = {"up": 0, "down": 0}
    for f in m.flows:
        counts[f.direction] += 1
        start = before + (f.start_s - window[0]) * scale if window else 0.0
        stop = before + (f.stop_s - window[0]) * scale if window else length
        ends = ("client", "server") if f.direction == "up" else ("server", "client")
        flow = {"kind": "bulk", "name": f"{f.direction}_{counts[f.direction]}", "from": ends[0], "to": ends[1],
                "cc": f.cc or "cubic", "dscp": f.dscp, "start": _fmt_s(round(start)), "stop": _fmt_s(round(stop))}
        if f.ecn == "ect1":
            flow["ecn"] = "ect1"
        workloads.append(flow)
    spec: dict[str, Any] = {
        "name": "calibrated", "duration": _fmt_s(before + length + after), "seed": seed,
        "topology": {"hosts": {"client": {}, "server": {}}, "links": [link]},
        "workloads": workloads, "probes": {"tcp": "off", "queue": ["client->server", "server->client"]},
    }
    if as_params:
        spec["params"] = _params(values)
    return spec


def names(m: Measurement) -> dict[str, str]:
    """The emulated test's workload name -> the measurement's flow or probe name."""
    out = {f"{p.kind}_{i}": p.name for i, p in enumerate(m.probes, 1)}
    counts = {"up": 0, "down": 0}
    for f in m.flows:
        counts[f.direction] += 1
        out[f"{f.direction}_{counts[f.direction]}"] = f.name
    return out


def _params(values: dict[str, Any]) -> dict[str, Any]:
    helps = {"rate_up": ("rate", "client to server rate (fitted)"),
             "rate_down": ("rate", "server to client rate (fitted)"),
             "delay": ("duration", "one-way delay each way: half the fitted base RTT"),
             "loss": ("percent", "random loss each way (fitted where asked)"),
             "jitter": ("duration", "delay jitter each way (fitted where asked)"),
             "discipline": ("string", "queue discipline each way (fitted)"),
             "limit": ("int", "queue limit each way, packets (fitted)")}
    return {k: {"default": v, "type": helps[k][0], "help": helps[k][1]} for k, v in values.items()}


def emulated(run_dir: Path, m: Measurement) -> Measurement:
    """An emulated run of `m`'s test, read back with the measurement's own names."""
    got = from_run(run_dir)
    rename = names(m)
    directions = {f.name: f.direction for f in m.flows}
    got.flows = [replace(f, name=rename[f.name], direction=directions[rename[f.name]]) for f in got.flows]
    got.probes = [replace(p, name=rename[p.name]) for p in got.probes]
    got.throughput = got.throughput.assign(flow=got.throughput["flow"].map(rename))
    got.latency = got.latency.assign(probe=got.latency["probe"].map(rename))
    return got

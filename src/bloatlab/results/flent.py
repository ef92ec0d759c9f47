"""A run as a Flent data file (`.flent.gz`, format version 4), so Flent itself plots it and sets
it beside runs made on real routers: `flent -i FILE -f summary`, `flent -i FILE -p all_scaled`.

Flent's file is gzipped JSON: `metadata` (the test's NAME, its TEST_PARAMETERS, times, lengths),
`x_values` (a grid of STEP_SIZE seconds since T0), `results` (each series' values on that grid,
null where it has none) and `raw_values` (each series' samples with their absolute time `t`).
Flent reads the series names from its own test definition, so a run is exported as the Flent
test of the same shape, with Flent's names:

    rrul       four uploads and four downloads marked BE, BK, CS5 and EF ("TCP upload EF"),
               ICMP ping ("Ping (ms) ICMP") and UDP probes ("Ping (ms) UDP EF")
    rrul_be    the same eight flows all marked BE ("TCP upload BE", "TCP upload BE2".."BE4"),
               ICMP ping and up to three BE UDP probes ("Ping (ms) UDP BE1".."BE3")
    tcp_nup    N uploads ("TCP upload::1"..) and a ping; TEST_PARAMETERS upload_streams = N
    tcp_ndown  N downloads ("TCP download::1"..) and a ping; download_streams = N
    ping       pings alone ("Ping (ms) ICMP")

Uploads leave the host that pings (the "client", Flent's local host); downloads come to it.
What Flent's test has no series for (web fetches, a UDP flow) is left out and named in the
metadata (BLOATLAB_LEFT_OUT).
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bloatlab.errors import BloatlabError
from bloatlab.results.reader import Run
from bloatlab.specs import dscp
from bloatlab.version import __version__

FORMAT_VERSION = 4
SUFFIX = ".flent.gz"
STEP_S = 0.2  # Flent's default step
MAX_DURATION_S = 24 * 3600  # the longest run (specs.experiment.MAX_DURATION_NS)
RRUL_MARKS = ("BE", "BK", "CS5", "EF")
RRUL_BE_NAMES = ("BE", "BE2", "BE3", "BE4")  # Flent's rrul_be names its four flows each way so
RRUL_BE_UDP = ("BE1", "BE2", "BE3")  # ... and its three UDP probes so (all CS0)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _workloads(run: Run) -> list[dict[str, Any]]:
    return run.workloads()  # each checked: a damaged run.json is a one-line error, not a KeyError here


def shape(run: Run) -> tuple[str, dict[str, Any], dict[str, str], list[str]]:
    """The Flent test a run matches: its name, TEST_PARAMETERS, bloatlab's series key (a flow or
    a probe) -> Flent's series name, and what is left out. A BloatlabError when none matches."""
    workloads = _workloads(run)
    probes = [w for w in workloads if w.get("kind") in ("ping", "irtt")]
    bulks = [w for w in workloads if w.get("kind") == "bulk"]
    if any(w.get("kind") == "responsiveness" for w in workloads):
        raise BloatlabError("a responsiveness test has no Flent counterpart; export RRUL or TCP runs",
                            field="DIR")
    client = probes[0].get("src") if probes else bulks[0].get("src") if bulks else None
    up = [w for w in bulks if w.get("src") == client]
    down = [w for w in bulks if w.get("dst") == client]
    left_out = [w["name"] for w in workloads if w not in up and w not in down and w not in probes]
    names: dict[str, str] = {}
    marks = {w["name"]: _mark(w) for w in bulks}
    if sorted(marks[w["name"]] for w in up) == sorted(RRUL_MARKS) == sorted(marks[w["name"]] for w in down):
        test, params = "rrul", {}
        names.update({w["name"]: f"TCP upload {marks[w['name']]}" for w in up})
        names.update({w["name"]: f"TCP download {marks[w['name']]}" for w in down})
    elif len(up) == len(down) == len(RRUL_BE_NAMES) and {marks[w["name"]] for w in bulks} == {"BE"}:
        test, params = "rrul_be", {}
        names.update({w["name"]: f"TCP upload {n}" for w, n in zip(up, RRUL_BE_NAMES)})
        names.update({w["name"]: f"TCP download {n}" for w, n in zip(down, RRUL_BE_NAMES)})
    elif up and not down:
        test, params = "tcp_nup", {"upload_streams": len(up)}
        names.update({w["name"]: f"TCP upload::{i}" for i, w in enumerate(up, 1)})
    elif down and not up:
        test, params = "tcp_ndown", {"download_streams": len(down)}
        names.update({w["name"]: f"TCP download::{i}" for i, w in enumerate(down, 1)})
    elif not bulks and any(w.get("kind") == "ping" for w in probes):
        test, params = "ping", {}
    else:
        raise BloatlabError(f"no Flent test has this run's shape ({len(up)} uploads and {len(down)} downloads from "
                            f"{client}); Flent takes RRUL's 4 + 4 flows (marked BE, BK, CS5, EF, or all BE), or uploads only, or "
                            "downloads only",
                            field="DIR")
    icmp = [w for w in probes if w.get("kind") == "ping"]
    if icmp:
        names[icmp[0]["name"]] = "Ping (ms) ICMP"
        left_out += [w["name"] for w in icmp[1:]]
    udp_be = [f"Ping (ms) UDP {n}" for n in RRUL_BE_UDP]  # taken in turn by the BE probes
    for w in (w for w in probes if w.get("kind") == "irtt"):
        series = f"Ping (ms) UDP {_mark(w)}" if test == "rrul" else \
            udp_be.pop(0) if test == "rrul_be" and _mark(w) == "BE" and udp_be else None
        if series is not None and series not in names.values():
            names[w["name"]] = series
        else:
            left_out.append(w["name"])
    return test, params, names, left_out


def _started(started: Any, t0: float) -> float:
    """run.json's started_at as a timestamp; t0 where it holds none that reads (a hand-edited file)."""
    try:
        time = datetime.fromisoformat(started).timestamp() if isinstance(started, str) else t0
        _iso(time)
        return time
    except (ValueError, OverflowError, OSError):
        return t0


def _mark(workload: dict[str, Any]) -> str:
    return dscp.name(int(workload.get("dscp") or 0))


def _grid(t: Sequence[float], values: Sequence[float], steps: int) -> list[float | None]:
    """The mean of the samples in each step (t in (x - STEP_S, x]), None where there are none."""
    sums, counts = [0.0] * steps, [0] * steps
    for ti, v in zip(t, values):
        if not (math.isfinite(ti) and math.isfinite(v)):  # a series cell of "inf" or "nan": no sample
            continue
        k = math.ceil(ti / STEP_S - 1e-9)
        if 0 <= k < steps:
            sums[k] += v
            counts[k] += 1
    return [s / n if n else None for s, n in zip(sums, counts)]


def document(run: Run) -> dict[str, Any]:
    """The Flent data file's JSON document for a run."""
    test, params, names, left_out = shape(run)
    t0 = run.meta.get("t0_realtime_s")
    if not isinstance(t0, (int, float)) or isinstance(t0, bool):
        raise BloatlabError("the run never started its workloads (run.json has no t0); nothing to export",
                            field="DIR")
    try:
        t0_text = _iso(t0)
    except (ValueError, OverflowError, OSError):  # NaN, or beyond the calendar
        raise BloatlabError(f"run.json's t0 ({t0!r}) is no time; the file is damaged", field="DIR") from None
    duration = run.duration_s
    if not 0 <= duration <= MAX_DURATION_S:  # the grid has a point per STEP_S of it
        raise BloatlabError(f"run.json's duration ({duration:g} s) is no run's; the file is damaged", field="DIR")
    steps = int(round(duration / STEP_S)) + 1
    x_values = [round(k * STEP_S, 6) for k in range(steps)]
    results: dict[str, list[float | None]] = {}
    raw: dict[str, list[dict[str, float]]] = {}
    samples: dict[str, tuple[list[float], list[float]]] = {}
    for frame, key, column in ((run.goodput, "flow", "mbps"), (run.ping, "probe", "rtt_ms")):
        if frame.empty:
            continue
        for who, rows in frame.groupby(key, sort=False):
            if who in names:
                samples[names[who]] = (rows["t_s"].tolist(), rows[column].tolist())
    if "Ping (ms) ICMP" in names.values() and "Ping (ms) ICMP" not in samples and not run.ping.empty \
            and set(run.ping["probe"]) == {""}:  # a 0.2.0 file: its one probe is the ping
        samples["Ping (ms) ICMP"] = (run.ping["t_s"].tolist(), run.ping["rtt_ms"].tolist())
    for series in names.values():
        t, values = samples.get(series, ([], []))
        results[series] = _grid(t, values, steps)
        raw[series] = [{"t": t0 + ti, "val": v} for ti, v in zip(t, values) if math.isfinite(ti) and math.isfinite(v)]
    for direction in ("upload", "download"):  # Flent's own aggregates, as its runners compute them
        parts = [s for s in results if s.startswith(f"TCP {direction}")]
        if parts:
            columns = list(zip(*(results[s] for s in parts)))
            present = [[v for v in col if v is not None] for col in columns]
            results[f"TCP {direction} sum"] = [sum(v) if v else None for v in present]
            results[f"TCP {direction} avg"] = [sum(v) / len(v) if v else None for v in present]
    loads = [w for w in _workloads(run) if w.get("kind") == "bulk" and w["name"] in names]
    length = max((w["stop_ns"] - w["start_ns"]) / 1e9 for w in loads) if loads else duration
    time = _started(run.meta.get("started_at"), t0)
    hosts = run.meta.get("hosts") if isinstance(run.meta.get("hosts"), list) else []
    address = {h["name"]: h.get("address") for h in hosts if isinstance(h, dict) and isinstance(h.get("name"), str)}
    client = next((w.get("src") for w in _workloads(run) if w.get("kind") in ("ping", "irtt", "bulk")), None)
    server = next((w.get("dst") for w in _workloads(run) if w.get("kind") in ("ping", "irtt", "bulk")), None)
    cc = {names[w["name"]]: w.get("cc") for w in loads}
    marks = {names[w["name"]]: _mark(w) for w in _workloads(run) if w["name"] in names}
    metadata = {
        "NAME": test, "TITLE": f"bloatlab {run.name} " + " ".join(f"{k}={v}" for k, v in run.params.items()),
        "TIME": _iso(time), "T0": t0_text, "LENGTH": length, "TOTAL_LENGTH": duration, "STEP_SIZE": STEP_S,
        "HOST": address.get(server, server), "HOSTS": [address.get(server, server)],
        "LOCAL_HOST": client, "IP_VERSION": 4, "TEST_PARAMETERS": params, "NOTE": None,
        "FLENT_VERSION": f"bloatlab {__version__}",
        "BATCH_NAME": None, "BATCH_TIME": None, "BATCH_TITLE": None, "BATCH_UUID": None,
        "SERIES_META": {s: {"MARKING": marks.get(s), "CONG_CONTROL": cc.get(s)} for s in names.values()},
        "BLOATLAB_RUN": str(run.path), "BLOATLAB_PARAMS": run.params, "BLOATLAB_LEFT_OUT": left_out,
        "BLOATLAB_COMPLETE": run.complete,
    }
    return {"metadata": metadata, "version": FORMAT_VERSION, "x_values": x_values, "results": results,
            "raw_values": raw}


def export(run: Run, out: Path | None = None) -> Path:
    """Writes the run's Flent data file (default RUN/NAME.flent.gz, after the test's name);
    returns its path."""
    doc = document(run)
    path = Path(out) if out is not None else run.path / f"{doc['metadata']['NAME']}-{run.path.name}{SUFFIX}"
    doc["metadata"]["DATA_FILENAME"] = path.name
    tmp = path.with_name(path.name + ".tmp")
    with gzip.open(tmp, "wt") as f:
        json.dump(doc, f, indent=1)
    tmp.replace(path)
    return path

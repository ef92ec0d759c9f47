"""Test-wide rules (netns tests need root, and no test session leaves a bloatlab namespace), and
synthetic results directories laid out as docs/results.md and docs/sweeps.md say, for the
figure and report tests."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# Let `python3 -m pytest` run from a plain checkout, without `pip install -e`.
if importlib.util.find_spec("bloatlab") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def bloatlab_namespaces() -> set[str]:
    ip = shutil.which("ip", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))
    if ip is None:
        return set()
    out = subprocess.run([ip, "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    # Lines look like "bloatlab.x._dp (id: 3)".
    return {line.split()[0] for line in out.splitlines() if line.startswith("bloatlab")}


@pytest.fixture(autouse=True)
def _netns_tests_need_root(request):
    if request.node.get_closest_marker("netns") and os.geteuid() != 0:
        pytest.skip("needs root for network namespaces")


@pytest.fixture(scope="session", autouse=True)
def _no_namespace_left_behind():
    # Namespaces left before this session (another run's debris) are reported, not blamed on us.
    before = bloatlab_namespaces()
    if before:
        print(f"\nnote: bloatlab namespaces present before the tests: {sorted(before)}")
    yield
    left = bloatlab_namespaces() - before
    if left:
        print(f"\nnamespaces left behind by the tests: {sorted(left)}")
    assert not left, f"tests left namespaces behind: {sorted(left)} (bloatlab clean removes them)"


# Synthetic results directories ------------------------------------------------------------

from bloatlab.analysis.aggregate import write_aggregate

DURATION_S = 10
# Text a report must escape: it would run as script, or break a table, if it were not.
HOSTILE = '<script>document.title="pwned"</script>&<b>'


def _csv(path: Path, header: str, rows) -> None:
    path.write_text(header + "\n" + "".join(",".join(str(c) for c in row) + "\n" for row in rows))


def _direction(name: str, rate_bps: int, packets: int) -> dict:
    return {"direction": name, "rate_bps": rate_bps, "trace_path": None, "delay_ns": 5_000_000, "jitter_ns": 0,
            "loss": 0.0, "queue": {"discipline": "droptail", "packets": packets, "bytes": None}, "seed": 7}


def write_run(run: Path, params: dict, seed: int, *, kind: str = "experiment", web: bool = True,
              complete: bool = True) -> dict:
    """A run directory with run.json, summary.json and series/*.csv whose numbers depend on maxq
    (bigger queue: more delay); returns the summary."""
    rng = np.random.default_rng(seed)
    maxq = float(params.get("maxq", params.get("txqueuelen", 50)))
    (run / "series").mkdir(parents=True, exist_ok=True)
    t = np.round(np.arange(1, DURATION_S * 10 + 1) * 0.1, 3)
    backlog = (np.arange(len(t)) * 3) % (maxq + 1)
    rtt = 20 + backlog * 1.2 + rng.uniform(0, 2, len(t))
    mbps = 9 + rng.uniform(-0.5, 0.5, len(t))
    _csv(run / "series" / "ping.csv", "t_s,probe,rtt_ms", ((ti, "ping", r) for ti, r in zip(t, np.round(rtt, 3))))
    meta = {"bloatlab_version": "0.1.0", "name": f"cs244 {HOSTILE}", "preset": "cs244", "source": "preset cs244",
            "params": params, "started_at": "2026-11-21T10:00:00+00:00", "ended_at": "2026-11-21T10:00:12+00:00",
            "t0_realtime_s": 1.79e9, "complete": complete, "incomplete_reason": None if complete else "interrupted",
            "machine": {"kernel": "6.1.0-test", "hostname": "labhost", "machine": "x86_64", "cpus": 4},
            "tools": {"iperf3": "3.12", "ping": None, "curl": "7.88.1", "tc": "6.1.0"},
            "command": ["bloatlab", "run", "--preset", "cs244", "--set", f"note={HOSTILE}"]}
    if kind == "nic":
        _csv(run / "series" / "throughput.csv", "t_s,flow,mbps",
             [(x, flow, round(m * share, 3)) for x, m in zip(t, mbps) for flow, share in (("tcp", 1), ("udp", 0.5))])
        summary = {"complete": complete, "duration_s": DURATION_S,
                   "tcp": {"receiver_mbps": float(np.mean(mbps)), "sender_mbps": float(np.mean(mbps)) + 0.1,
                           "retransmits": int(rng.integers(0, 50))},
                   "udp": {"receiver_mbps": float(np.mean(mbps)) / 2, "lost_percent": float(rng.uniform(0, 2))},
                   "ping": {"min_ms": float(rtt.min()), "avg_ms": float(rtt.mean()), "max_ms": float(rtt.max()),
                            "mdev_ms": float(rtt.std())}}
        meta.update(kind="nic", flows={}, probes={"tcp": "none", "queue": {}}, links=[])  # as lab/nic.py writes it
    else:
        _csv(run / "series" / "throughput.csv", "t_s,flow,mbps", [(x, "bulk", round(m, 3)) for x, m in zip(t, mbps)])
        _csv(run / "series" / "queue.csv", "t_s,link,backlog_pkts,backlog_bytes,drops",
             [(x, "s0->h2", int(b), int(b) * 1514, k // 20) for k, (x, b) in enumerate(zip(t, backlog))])
        _csv(run / "series" / "cwnd.csv", "t_s,flow,cwnd_pkts,ssthresh_pkts,srtt_ms",
             [(x, "bulk", int(10 + b), "" if k < 10 else 30, round(r, 3))
              for k, (x, b, r) in enumerate(zip(t, backlog, rtt))]
             + ([(1.05, "web#1", 10, "", 25.0)] if web else []))
        summary = {"complete": complete, "duration_s": DURATION_S,
                   "flows": {"bulk": {"kind": "bulk", "goodput_mbps": float(np.mean(mbps)),
                                      "retransmits": int(rng.integers(0, 50))}},
                   "rtt_ms": {"count": len(t), "min": float(rtt.min()), "mean": float(rtt.mean()),
                              "median": float(np.median(rtt)), "p95": float(np.percentile(rtt, 95)),
                              "p99": float(np.percentile(rtt, 99)), "max": float(rtt.max()), "lost": 1},
                   "queue": {"s0->h2": {"mean_pkts": float(backlog.mean()), "max_pkts": int(backlog.max()),
                                        "mean_bytes": float(backlog.mean() * 1514),
                                        "max_bytes": int(backlog.max() * 1514), "drops": int(len(t) // 20)}}}
        link = {"name": "s0-h2", "ends": ["s0", "h2"], "backend": "userspace",
                "forward": _direction("s0->h2", 10_000_000, int(maxq)),
                "reverse": _direction("h2->s0", 10_000_000, int(maxq))}
        meta.update(flows={"bulk": {"kind": "bulk", "src": "h1", "dst": "h2", "cc": "reno"},
                           **({"web": {"kind": "web", "src": "h1", "dst": "h2", "cc": "reno"}} if web else {})},
                    probes={"tcp": "tracepoint", "queue": {"s0->h2": "datapath"}}, links=[link],
                    spec={"duration_s": DURATION_S, "seed": seed, "topology": {"links": [link]}})
        if web:
            fetches = [(k, round(0.2 + maxq / 200 + rng.uniform(0, 0.2), 3), "web", 0 if k == 7 else 1)
                       for k in range(DURATION_S)]
            _csv(run / "series" / "fetch.csv", "t_s,seconds,workload,ok", fetches)
            ok = [s for _, s, _, good in fetches if good]
            summary["fetch_s"] = {"count": len(ok), "mean": float(np.mean(ok)), "stddev": float(np.std(ok, ddof=1)),
                                  "median": float(np.median(ok)), "p95": float(np.percentile(ok, 95)),
                                  "max": float(max(ok)), "failed": 1}
    (run / "run.json").write_text(json.dumps(meta, indent=1))
    (run / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def write_sweep(out: Path, axes=(("maxq", (20, 100)),), repeat: int = 2, *, kind: str = "experiment",
                web: bool = True, failed: tuple[str, ...] = (), aggregate: bool = True) -> Path:
    """OUT/ with sweep.json, aggregate.json/csv and LABEL/repK run dirs; runs named in FAILED
    ("maxq=100/rep2") are left failed with no summary."""
    out.mkdir(parents=True, exist_ok=True)
    combos = [{}]
    for name, values in axes:
        combos = [{**c, name: v} for c in combos for v in values]
    points = []
    for values in combos:
        label = ",".join(f"{k}={v}" for k, v in values.items()) or "all"
        runs, summaries = [], []
        for rep in range(1, repeat + 1):
            rel = f"{label}/rep{rep}"
            params = {"maxq": 100, "duration": "10s", "note": HOSTILE, **values}
            if rel in failed:
                (out / rel).mkdir(parents=True)
                (out / rel / "run.json").write_text(json.dumps({"name": "cs244", "params": params, "complete": False,
                                                                "incomplete_reason": "iperf3 failed: <boom>"}))
                runs.append({"rep": rep, "dir": rel, "status": "failed", "reason": "iperf3 failed: <boom>",
                             "elapsed_s": 3.0})
                continue
            summaries.append(write_run(out / rel, params, seed=len(points) * 10 + rep, kind=kind, web=web))
            runs.append({"rep": rep, "dir": rel, "status": "complete", "reason": None, "elapsed_s": 12.5})
        points.append({"label": label, "values": values, "runs": runs})
    status = "incomplete" if failed else "complete"
    sweep = {
        "format": "bloatlab-sweep/1", "kind": kind, "name": "cs244", "source": "preset cs244",
        "axes": [{"name": n, "values": list(v)} for n, v in axes], "repeat": repeat,
        "fixed": {"duration": "10s", "note": HOSTILE}, "created": "2026-11-21T10:00:00+00:00",
        "updated": "2026-11-21T10:05:00+00:00", "status": status,
        "machine": {"kernel": "6.1.0-test", "hostname": "labhost", "machine": "x86_64", "cpus": 4},
        "command": ["bloatlab", "run", "--preset", "cs244", "--sweep", "maxq=20,100", "--repeat", str(repeat)],
        # As the presets and nic sweeps label their axes.
        "axis_labels": {k: v for k, v in (("maxq", "queue size, packets"), ("aqm", "queue discipline"),
                                          ("txqueuelen", "transmit queue length, packets")) if k in dict(axes)},
        "points": points}
    (out / "sweep.json").write_text(json.dumps(sweep, indent=1))
    if aggregate:
        write_aggregate(sweep, out)
    return out


@pytest.fixture
def make_sweep(tmp_path):
    def make(name: str = "sweep", **kwargs) -> Path:
        return write_sweep(tmp_path / name, **kwargs)
    return make


@pytest.fixture
def make_run(tmp_path):
    def make(name: str = "run", **kwargs) -> Path:
        write_run(tmp_path / name, {"maxq": 100, "duration": "10s", "note": HOSTILE}, seed=3, **kwargs)
        return tmp_path / name
    return make


@pytest.fixture
def hostile() -> str:
    """The text every synthetic run and sweep carries in its name and parameters."""
    return HOSTILE

"""The live view without a network: a recorded 4 s cs244 run (tests/data/run-cs244.tar.xz: its
raw/ as the tools wrote it, its run.json, the series and summary the run made of them) is
replayed into a fresh directory piece by piece, in time order, cutting lines and queue-log
records in two, while a Follower reads it on the replay's clock. What the follower streamed must
be what the run itself made of the same files. Then the server: its page, its stream, its
files, and what it refuses."""

from __future__ import annotations

import csv
import http.client
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest

from bloatlab.errors import BloatlabError
from bloatlab.experiment.parsers import parse_tcp_probe
from bloatlab.live import follow
from bloatlab.live.address import parse_listen
from bloatlab.live.server import finite, serve
from bloatlab.testbed.datapath import QLOG_RECORD_BYTES, qlog_records

ARCHIVE = Path(__file__).parent.parent / "data" / "run-cs244.tar.xz"
STEP_S = 0.25  # the replay's polls, in the run's seconds
RECORDED = Path()  # where the archive is unpacked (the session's fixture below)


@pytest.fixture(scope="module", autouse=True)
def recorded(tmp_path_factory):
    global RECORDED
    RECORDED = tmp_path_factory.mktemp("recorded")
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(RECORDED, filter="data")
    return RECORDED


def _pieces(meta: dict) -> list[tuple[float, str, bytes]]:
    """Every raw file's bytes, in pieces stamped with when the run wrote them (s since t0)."""
    t0_real, t0_mono = meta["t0_realtime_s"], meta["t0_monotonic_s"]
    out = []
    for path in sorted((RECORDED / "raw").rglob("*")):
        if not path.is_file():
            continue
        name = str(path.relative_to(RECORDED))
        data = path.read_bytes()
        if path.suffix == ".qlog":
            t = qlog_records(data)["t_ns"] / 1e9 - t0_mono
            out += [(float(t[i]), name, data[i * QLOG_RECORD_BYTES:(i + 1) * QLOG_RECORD_BYTES]) for i in range(len(t))]
            continue
        last = -math.inf
        for line in data.splitlines(keepends=True):
            text = line.decode(errors="replace")
            if m := re.match(r"\[(\d+\.\d+)\]", text):  # ping -D
                last = float(m[1]) - t0_real
            elif name.endswith("server.txt") and (m := re.match(r"(\d+\.\d+) ", text)):
                last = float(m[1]) - t0_mono
            elif name.endswith("tcp_probe.txt") and (events := parse_tcp_probe(text)):
                last = events[0].t_s - t0_mono
            elif name.endswith("fetches.txt") and len(parts := text.split()) >= 2:
                last = float(parts[0]) + float(parts[1])
            out.append((last, name, line))
    return sorted(out, key=lambda p: p[0])


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    """The recorded run replayed, polled every STEP_S: (everything streamed, the last update)."""
    target = tmp_path_factory.mktemp("replay")
    final = json.loads((RECORDED / "run.json").read_text())
    at_t0 = {**final, "complete": False, "incomplete_reason": "unfinished: started by the replay",
             "owner": {"pid": os.getpid(), "starttime": None}, "warnings": [], "datapath_stats": None}
    (target / "raw" / "qlog").mkdir(parents=True)
    (target / "run.json").write_text(json.dumps(at_t0))
    now = [final["t0_realtime_s"]]
    follower = follow.Follower(target, clock=lambda: now[0])
    streamed: dict[str, dict[str, list]] = {}
    updates = []

    def take(update):
        updates.append(update)
        for chart, lines in update["series"].items():
            for name, points in lines.items():
                streamed.setdefault(chart, {}).setdefault(name, []).extend(points)

    take(follower.snapshot())
    pieces = _pieces(final)
    i, t = 0, 0.0
    end = final["spec"]["duration_s"] + 2.0
    while t < end:
        t += STEP_S
        now[0] = final["t0_realtime_s"] + t
        while i < len(pieces) and pieces[i][0] <= t:
            _, name, data = pieces[i]
            cut = len(data) // 2 if i % 3 == 0 else len(data)  # a line or a record half written...
            with (target / name).open("ab") as f:
                f.write(data[:cut])
            if cut < len(data):
                now[0] = final["t0_realtime_s"] + max(0.0, pieces[i][0])  # polled as it is written
                take(follower.poll())
                now[0] = final["t0_realtime_s"] + t
                with (target / name).open("ab") as f:  # ...and finished after a poll
                    f.write(data[cut:])
            i += 1
        take(follower.poll())
    for _, name, data in pieces[i:]:
        with (target / name).open("ab") as f:
            f.write(data)
    shutil.copy(RECORDED / "summary.json", target / "summary.json")
    (target / "run.json").write_text(json.dumps(final))
    take(follower.poll())
    return streamed, updates


def _series(name: str) -> list[dict[str, str]]:
    with (RECORDED / "series" / f"{name}.csv").open() as f:
        return list(csv.DictReader(f))


def test_the_streamed_round_trips_and_goodput_are_the_runs_series(replayed):
    streamed, _ = replayed
    ping = [(float(r["t_s"]), float(r["rtt_ms"])) for r in _series("ping")]
    assert len(ping) > 20
    assert np.allclose(streamed["rtt"]["ping"], ping, atol=1e-4, rtol=0)
    goodput = [(float(r["t_s"]), float(r["mbps"])) for r in _series("throughput") if r["flow"] == "bulk"]
    assert len(goodput) > 20
    assert np.allclose(streamed["goodput"]["bulk"], goodput, atol=1e-4, rtol=0)


def test_the_streamed_window_and_queue_are_the_runs_per_bin(replayed):
    streamed, _ = replayed
    cwnd = {}
    for r in _series("cwnd"):
        if r["flow"] == "bulk":
            cwnd[math.floor(float(r["t_s"]) / follow.BIN_S)] = float(r["cwnd_pkts"])  # the last in each bin
    got = {round(t / follow.BIN_S) - 1: v for t, v in streamed["cwnd"]["bulk"]}
    assert len(got) > 20 and got == {k: cwnd[k] for k in got}
    assert set(cwnd) - set(got) <= {min(cwnd)}  # every bin (t < 0: before t0, on the series' first row)
    backlog: dict[int, float] = {}
    for r in _series("queue"):
        if r["link"] == "s0->h2":
            k = math.floor(float(r["t_s"]) / follow.BIN_S)
            backlog[k] = max(backlog.get(k, 0.0), float(r["backlog_pkts"]))
    got = {round(t / follow.BIN_S) - 1: v for t, v in streamed["backlog"]["s0->h2"] if t > 0}
    assert len(got) > 20 and all(got[k] == backlog[k] for k in got if k in backlog)
    assert max(got.values()) == max(v for k, v in backlog.items() if k >= 0)


def test_the_figures_at_the_end_are_the_summarys(replayed):
    _, updates = replayed
    last = updates[-1]
    summary = json.loads((RECORDED / "summary.json").read_text())
    assert last["status"]["phase"] == "complete" and last["status"]["remaining_s"] == 0
    rtt = last["figures"]["rtt"]["ping"]
    assert rtt["count"] == summary["rtt_ms"]["count"]
    assert rtt["median"] == pytest.approx(summary["rtt_ms"]["median"])
    assert rtt["least"] == pytest.approx(summary["rtt_ms"]["min"])
    queue = last["figures"]["queue"]["s0->h2"]
    assert queue["drops"] == summary["queue"]["s0->h2"]["drops"] > 0
    assert queue["discipline"] == "droptail"
    # Along the way: the clock ran, and every update carried only what was new.
    running = [u for u in updates if u["status"]["phase"] == "running"]
    assert len(running) > 10 and running[0]["status"]["elapsed_s"] < running[-1]["status"]["elapsed_s"]
    assert updates[0]["run"]["links"][2]["direction"] == "s0->h2" and updates[0]["run"]["links"][2]["probed"]


# The server ------------------------------------------------------------------------------------

@pytest.fixture
def served(tmp_path):
    root = tmp_path / "run"
    shutil.copytree(RECORDED, root)
    (tmp_path / "secret.txt").write_text("not for the page")
    (root / "escape").symlink_to(tmp_path / "secret.txt")
    servers = []

    def start(host="127.0.0.1", allow_remote=False):
        server = serve(root, f"{host}:0", allow_remote=allow_remote)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stopping.set()
        server.shutdown()
        server.server_close()


def _get(server, path, headers=None, method="GET"):
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=10)
    conn.request(method, path, headers=headers or {})  # Host: 127.0.0.1:PORT, as a browser's
    response = conn.getresponse()
    body = response.read() if path.split("?")[0] != "/events" else b""
    return response, body, conn


def test_the_page_its_scripts_and_the_runs_files_are_served_read_only(served):
    server = served()
    assert server.url.startswith("http://127.0.0.1:") and "token" not in server.url
    response, body, _ = _get(server, "/")
    assert response.status == 200 and b"uPlot.iife.min.js" in body and b"live.js" in body
    for name in ("uPlot.iife.min.js", "live.js", "page.css"):
        response, body, _ = _get(server, f"/static/{name}")
        assert response.status == 200 and len(body) > 500, name
    response, body, _ = _get(server, "/files/summary.json")
    assert response.status == 200 and json.loads(body)["rtt_ms"]["count"] > 0
    for path in ("/files/../secret.txt", "/files/%2e%2e/secret.txt", "/files/escape", "/files//etc/passwd",
                 "/static/../../follow.py"):
        response, body, _ = _get(server, path)
        assert response.status in (403, 404) and b"not for the page" not in body and b"root:" not in body, path
    response, _, _ = _get(server, "/files/summary.json", method="POST")
    assert response.status == 405
    # A page of another site that rebinds its own name to 127.0.0.1 is refused: its Host is not loopback's.
    port = server.server_address[1]
    for host in (f"attacker.example:{port}", "127.0.0.1", ""):
        response, _, _ = _get(server, "/files/summary.json", headers={"Host": host})
        assert response.status == 403, host
    response, _, _ = _get(server, "/files/summary.json", headers={"Host": f"localhost:{port}"})
    assert response.status == 200


def test_the_stream_starts_with_the_whole_run(served):
    server = served()
    response, _, conn = _get(server, "/events")
    assert response.status == 200 and response.getheader("Content-Type") == "text/event-stream"
    assert response.readline() == b"event: snapshot\n"
    doc = json.loads(response.readline().removeprefix(b"data: "))
    conn.close()
    assert doc["status"]["phase"] == "complete" and doc["status"]["report"] is None  # no report.html in the data
    assert len(doc["series"]["rtt"]["ping"]) == len(_series("ping"))
    assert doc["run"]["name"] == "cs244" and doc["run"]["queues"] == {"s0->h2": "droptail"}


def test_beyond_loopback_it_asks_for_the_flag_and_then_a_token(served):
    with pytest.raises(BloatlabError, match="--allow-remote"):
        served("0.0.0.0")
    server = served("0.0.0.0", allow_remote=True)
    token = server.url.split("token=")[1]
    assert len(token) >= 20
    for path in ("/", "/events", "/files/summary.json", "/?token=wrong", "/static/live.js"):
        response, _, conn = _get(server, path)
        assert response.status == 403, path
        conn.close()
    response, body, _ = _get(server, f"/?token={token}")
    assert response.status == 200 and b"live.js" in body
    cookie = response.getheader("Set-Cookie").split(";")[0]
    assert cookie.startswith(f"bloatlab_view_{server.server_address[1]}=")  # one per view: cookies ignore ports
    response, _, _ = _get(server, "/files/summary.json", headers={"Cookie": f"other=x;; broken; {cookie}"})
    assert response.status == 200


@pytest.mark.parametrize("text, want", [("127.0.0.1:8044", ("127.0.0.1", 8044)), (":0", ("127.0.0.1", 0)),
                                        ("[::1]:9000", ("::1", 9000)), ("[::1]", ("::1", 0)), ("::1", ("::1", 0)),
                                        ("10.0.0.1", ("10.0.0.1", 0))])
def test_listen_addresses(text, want):
    assert parse_listen(text, "--listen") == want


@pytest.mark.parametrize("text", ["spec.toml", "localhost:80", "127.0.0.1:99999", "1.2.3.4:x"])
def test_bad_listen_addresses_name_the_field(text):
    with pytest.raises(BloatlabError) as e:
        parse_listen(text, "--live")
    assert e.value.field == "--live"


def test_a_qlog_record_cut_in_two_is_read_whole(tmp_path):
    path = tmp_path / "q.qlog"
    record = np.zeros(1, dtype=[("t_ns", "<u8"), ("value", "<u8"), ("b", "<u4"), ("p", "<u4"), ("k", "u1"),
                                ("r", "u1"), ("pad", "V6")])
    record["t_ns"], record["p"], record["k"] = 123, 7, 1
    data = record.tobytes()
    tail = follow.Tail(path)
    path.write_bytes(data[:10])
    assert tail.records(QLOG_RECORD_BYTES) == b""
    with path.open("ab") as f:
        f.write(data[10:] + data[:5])
    got = qlog_records(tail.records(QLOG_RECORD_BYTES))
    assert len(got) == 1 and got["t_ns"][0] == 123 and got["backlog_pkts"][0] == 7


def test_a_file_replaced_is_read_again_from_its_start(tmp_path):
    path = tmp_path / "ping.txt"
    path.write_text("one\ntw")
    tail = follow.Tail(path)
    assert tail.lines() == ["one"]
    path.unlink()  # a sweep resumed: the run's directory made anew, its file longer than before
    path.write_text("first of the new run\nsecond\n")
    assert tail.lines() == ["first of the new run", "second"]


def test_a_run_json_unlike_any_run_is_passed_over(tmp_path):
    follower = follow.Follower(tmp_path)
    for text in ("[1, 2]", '{"spec": {}, "t0_realtime_s": "soon"}', "{not json", '"a string"'):
        (tmp_path / "run.json").write_text(text)
        update = follower.poll()
        assert update["status"]["phase"] == "waiting" and update["series"] == {}, text
    (tmp_path / "run.json").write_text(json.dumps({"spec": {"workloads": [{"name": "p", "kind": "irtt"}]},
                                                   "t0_realtime_s": 1.0, "t0_monotonic_s": 2.0,
                                                   "incomplete_reason": 5, "links": "none", "flows": [3]}))
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "p.client.txt").write_text("seq=0 rtt=20ms rd=10ms sd=10ms ipdv=n/a\n")
    update = follower.poll()  # no start_ns or interval_ns: no times for irtt's replies, and no error
    assert update["status"]["phase"] == "incomplete" and update["series"] == {}


def test_no_nan_reaches_a_page():
    doc = finite({"a": float("nan"), "b": [1.0, float("inf"), np.float64("nan")], "c": np.int64(3)})
    assert doc == {"a": None, "b": [1.0, None, None], "c": 3}
    json.dumps(doc, allow_nan=False)


@pytest.mark.parametrize("content, says", [(None, "not a bloatlab run or sweep directory"),
                                           ('{"kind": "nic"}', "is a nic run")])
def test_view_of_what_it_cannot_follow_is_one_line(tmp_path, content, says):
    if content is not None:
        (tmp_path / "run.json").write_text(content)
    done = subprocess.run([sys.executable, "-m", "bloatlab", "view", str(tmp_path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
    assert done.stderr.startswith("bloatlab: error: DIR: ")

"""The Python side of the datapath contract: config, queue logs, starting, stopping."""

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bloatlab import binaries
from bloatlab.errors import MachineError
from bloatlab.version import __version__
from bloatlab.proc import alive as process_alive, starttime as process_starttime, terminate
from bloatlab.specs.model import DirectionSpec, QueueSpec
from bloatlab.testbed.datapath import KIND_PROB, PROB_ONE, Datapath, direction_config, read_qlog, write_config
from bloatlab.testbed.datapath_stats import read_stats

RECORD = struct.Struct("<QQIIBB6x")  # docs/datapath.md: the 32-byte queue log record


def test_qlog_records_are_read_field_by_field(tmp_path):
    records = [(1_000, 1514, 1514, 1, 1, 0), (2_000, 1_211_200, 0, 0, 2, 0),
               (2**63 + 5, 98, 3028, 2, 3, 2)]
    path = tmp_path / "h1-h2.forward.qlog"
    path.write_bytes(b"".join(RECORD.pack(*r) for r in records) + b"\x01" * 17)  # + a torn record
    log = read_qlog(path)
    assert log.dtype.itemsize == RECORD.size == 32
    assert list(log.dtype.names) == ["t_ns", "value", "backlog_bytes", "backlog_pkts", "kind", "reason"]
    assert [tuple(int(x) for x in row) for row in log] == records


def test_a_probability_record_is_parts_per_2_to_the_32(tmp_path):
    # kind 5: dualpi2's p' (or pie's probability) 3/8, set at 16 ms with 2 packets queued.
    path = tmp_path / "bloatlab-p.qlog"
    path.write_bytes(RECORD.pack(16_000_000, 3 << 29, 3028, 2, KIND_PROB, 0))
    log = read_qlog(path)
    assert log["kind"].tolist() == [5] and log["value"][0] / PROB_ONE == 0.375 and PROB_ONE == 2**32
    assert (int(log["t_ns"][0]), int(log["backlog_pkts"][0])) == (16_000_000, 2)


def test_empty_qlog_is_an_empty_array(tmp_path):
    (tmp_path / "x.qlog").write_bytes(b"")
    assert len(read_qlog(tmp_path / "x.qlog")) == 0


def test_config_follows_the_contract(tmp_path):
    d = DirectionSpec(rate_bps=10_000_000, delay_ns=5_000_000, queue=QueueSpec(packets=100))
    link = {"name": "s0-h2", "a_iface": "l1a", "b_iface": "l1b",
            "forward": direction_config(d, 7), "reverse": direction_config(d, 8)}
    path = tmp_path / "datapath.json"
    write_config(path, netns="bloatlab.t1._dp", stats_path=tmp_path / "stats.json", log_dir=None, links=[link])
    config = json.loads(path.read_text())
    assert config == {
        "netns": "bloatlab.t1._dp", "stats_path": str(tmp_path / "stats.json"), "log_dir": None,
        "links": [{"name": "s0-h2", "a_iface": "l1a", "b_iface": "l1b",
                   "forward": {"rate_bps": 10_000_000, "trace_path": None, "delay_ns": 5_000_000,
                               "jitter_ns": 0, "loss": 0.0, "seed": 7,
                               "queue": {"discipline": "droptail", "packets": 100, "bytes": None}},
                   "reverse": {**config["links"][0]["forward"], "seed": 8}}],
    }
    write_config(path, netns=None, stats_path=tmp_path / "s.json", log_dir=tmp_path, links=[link])
    assert "netns" not in json.loads(path.read_text())  # absent: the current namespace


@pytest.mark.parametrize("name, variable", [("bloatlab-link", "BLOATLAB_LINK"), ("bloatlab-replay", "BLOATLAB_REPLAY")])
def test_binary_from_the_environment(tmp_path, monkeypatch, name, variable):
    monkeypatch.setenv(variable, str(tmp_path / "missing"))
    with pytest.raises(MachineError) as error:
        binaries.find(name)
    assert error.value.field == variable
    monkeypatch.setenv(variable, sys.executable)
    assert str(binaries.find(name)) == sys.executable


def test_missing_binary_says_run_make_setup(tmp_path, monkeypatch):
    monkeypatch.delenv("BLOATLAB_LINK", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(binaries, "REPO_RELEASE", tmp_path / "target/release")
    monkeypatch.setattr(binaries, "PACKAGE_BIN", tmp_path / "_bin")  # an installed wheel's, in CI
    with pytest.raises(MachineError, match="run make setup"):
        binaries.find("bloatlab-link")
    assert binaries.locate("bloatlab-link") is None
    (tmp_path / "bloatlab-link").write_text("#!/bin/sh\n")
    (tmp_path / "bloatlab-link").chmod(0o755)
    assert binaries.find("bloatlab-link") == tmp_path / "bloatlab-link"  # then PATH


def test_read_stats_of_nothing_is_a_clear_error(tmp_path):
    with pytest.raises(MachineError, match="no datapath stats"):
        read_stats(tmp_path / "stats.json")


def test_the_stats_file_is_read_into_records_that_give_back_every_key(tmp_path):
    # What bloatlab-link wrote (cs244's links, a cake queue and a capture on s0->h2), byte for
    # byte as it wrote it once written back out: run.json holds the datapath's own figures.
    path = Path(__file__).parents[1] / "data" / "datapath-stats.json"
    stats = read_stats(path)
    assert json.dumps(stats.to_dict(), indent=2) == path.read_text().rstrip("\n")
    bottleneck = stats.links["s0-h2"].forward
    assert bottleneck.capture.departures.written == bottleneck.departures == 23 and bottleneck.capture.error is None
    assert [t.name for t in bottleneck.tins] == ["Bulk", "Best Effort", "Voice"]
    assert stats.links["s0-h2"].reverse.capture is None and stats.links["s0-h2"].reverse.tins is None
    assert stats.workers[bottleneck.worker].name == "worker1" and "s0-h2.forward" in stats.workers[1].directions
    assert stats.sentinel.rt_priority == 11 and stats.switches["s0"].forwarded == 41 and stats.batching.periods == 5
    assert stats.figures.to_dict() == {key: json.loads(path.read_text())[key] for key in ("workers", "sentinel", "switches")}
    # One of another shape (another version's) is named, not a KeyError three layers up.
    doc = json.loads(path.read_text())
    del doc["links"]["s0-h2"]["forward"]["late_arrivals"]
    (tmp_path / "stats.json").write_text(json.dumps(doc))
    with pytest.raises(MachineError, match="is not a stats file of this bloatlab's datapath .*late_arrivals"):
        read_stats(tmp_path / "stats.json")


def test_a_datapath_that_exits_first_reports_its_last_line(tmp_path):
    try:
        binaries.find("bloatlab-link")
    except MachineError:
        pytest.skip("bloatlab-link is not built")
    config = tmp_path / "datapath.json"
    write_config(config, netns=None, stats_path=tmp_path / "stats.json", log_dir=None, links=[])
    with pytest.raises(MachineError) as error:
        Datapath.start(config, tmp_path / "stats.json", tmp_path / "datapath.log")
    assert "exited with status 2" in error.value.message
    assert "no link to emulate" in error.value.message


def stand_in_link(path, body: str, version: str = __version__):
    """A script in bloatlab-link's place: it says its version, else runs `body`."""
    path.write_text(f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "bloatlab-link {version}"; exit 0; }}\n{body}')
    path.chmod(0o755)
    return path


def test_a_datapath_of_another_version_is_refused(tmp_path, monkeypatch):
    stand_in = stand_in_link(tmp_path / "old-link", f"touch {tmp_path}/ran\n", version="0.1.0")
    monkeypatch.setenv("BLOATLAB_LINK", str(stand_in))
    with pytest.raises(MachineError) as error:
        Datapath.start(tmp_path / "c.json", tmp_path / "stats.json", tmp_path / "log")
    assert str(error.value) == (f"bloatlab-link: {stand_in} is bloatlab-link 0.1.0, but this bloatlab is {__version__}; "
                                "rebuild it (make build) or install bloatlab and its binaries together (pip install)")
    assert not (tmp_path / "ran").exists()


def test_a_datapath_that_never_gets_ready_is_killed(tmp_path, monkeypatch):
    stand_in = tmp_path / "silent-link"
    stand_in_link(stand_in, f"echo $$ > {tmp_path}/pid\necho starting >&2\nexec sleep 30\n")
    monkeypatch.setenv("BLOATLAB_LINK", str(stand_in))
    started = time.monotonic()
    with pytest.raises(MachineError, match=r"no stats file within 0.3 s \(last log line: starting\)"):
        Datapath.start(tmp_path / "c.json", tmp_path / "stats.json", tmp_path / "log", timeout_s=0.3)
    assert time.monotonic() - started < 2
    assert not process_alive(int((tmp_path / "pid").read_text()), None)


def test_terminate_escalates_to_sigkill():
    stubborn = subprocess.Popen([sys.executable, "-c",
                                 "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                 "print('ready', flush=True); time.sleep(30)"], stdout=subprocess.PIPE)
    assert stubborn.stdout.readline() == b"ready\n"
    start = process_starttime(stubborn.pid)
    started = time.monotonic()
    assert terminate([(stubborn.pid, start)], timeout_s=0.2) == [stubborn.pid]
    assert stubborn.wait(timeout=2) == -9
    assert time.monotonic() - started < 2


def test_a_recycled_pid_is_not_ours():
    start = process_starttime(os.getpid())
    assert process_alive(os.getpid(), start)
    assert not process_alive(os.getpid(), start + 1)  # same pid, another process
    assert terminate([(os.getpid(), start + 1)]) == []

"""The cluster executor's own logic, without a cluster: addresses, which node a run goes to,
the node table, and the archive a run comes back in (tests/integration/test_cluster.py runs
sweeps on a real Ray cluster)."""

import collections
import io
import json
import tarfile
from pathlib import Path

import pytest

from bloatlab.errors import BloatlabError
from bloatlab.lab import cluster
from bloatlab.lab.cluster import ClusterExecutor, NodeCheck
from bloatlab.lab.executors import Job


@pytest.mark.parametrize("address", ["nohost", "host:", ":6379", "host:port", "host:70000", "host:0"])
def test_an_address_that_is_not_host_port_is_one_line_naming_the_field(address):
    with pytest.raises(BloatlabError) as error:
        cluster.head(address)
    assert error.value.field == "--cluster" and "HOST:PORT" in str(error.value)


def test_an_address_is_host_and_port():
    assert cluster.head("10.0.0.1:6379") == ("10.0.0.1", 6379)
    assert cluster.head("[fd00::1]:6379") == ("fd00::1", 6379)


def test_nothing_listening_is_said_at_once(monkeypatch):
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: closed now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pytest.importorskip("ray")
    with pytest.raises(BloatlabError) as error:
        cluster.connect(f"127.0.0.1:{port}")
    assert "nothing answers at" in str(error.value) and "ray start --head" in str(error.value)


def nodes(*names):
    return [NodeCheck(f"id-{n}", n, "10.0.0.1", 1.0, {"hostname": n}) for n in names]


def job(name):
    return Job({"maxq": 20}, 1, Path(f"/s/{name}"), name)


def test_a_run_that_failed_waits_for_a_node_it_has_not_failed_on():
    a, b = nodes("a", "b")
    ex = ClusterExecutor("h:1", [a, b], say=lambda _: None)
    tried = {Path("/s/x"): [{"node": "a", "node_id": "id-a", "reason": "its worker died"}]}
    pending = collections.deque([(1, job("x")), (2, job("y"))])
    # Only a is free: x waits for b, y takes a.
    assert ex._pick(pending, [a], tried)[1:] == (job("y"), a)
    assert list(pending) == [(1, job("x"))]
    assert ex._pick(pending, [a], tried) is None
    assert ex._pick(pending, [b, a], tried)[2] is b
    # Failed on every node left: any free one.
    ex.nodes = [a]
    assert ex._pick(collections.deque([(1, job("x"))]), [a], tried)[2] is a


def test_the_node_table_names_each_left_out_node_with_why():
    good, bad = nodes("lab1", "lab2")
    bad.problems = ["not root (euid 1000); run bloatlab as root"]
    text = cluster.render_checks([good, bad], "head:6379")
    assert text.splitlines()[0] == "Ray cluster at head:6379: 1 of 2 node(s) can run bloatlab"
    assert "LEFT OUT" in text and text.splitlines()[-1] == "left out lab2: not root (euid 1000); run bloatlab as root"
    assert bad.to_dict()["ok"] is False and good.to_dict()["hostname"] == "lab1"


def test_a_run_comes_back_whole_and_an_archive_cannot_write_outside_its_run(tmp_path):
    run = tmp_path / "node" / "run"
    (run / "series").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"complete": True}))
    (run / "series" / "ping.csv").write_text("t_s,probe,rtt_ms\n")
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        tar.add(run, arcname=".")
    cluster.unpack(archive.getvalue(), tmp_path / "sweep" / "rep1")
    assert (tmp_path / "sweep" / "rep1" / "series" / "ping.csv").exists()
    cluster.record_node(tmp_path / "sweep" / "rep1", {"node": "lab1", "attempts": []})
    assert json.loads((tmp_path / "sweep" / "rep1" / "run.json").read_text()) == {
        "complete": True, "cluster": {"node": "lab1", "attempts": []}}

    evil = io.BytesIO()
    with tarfile.open(fileobj=evil, mode="w:gz") as tar:
        info = tarfile.TarInfo("../../outside.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    with pytest.raises(tarfile.TarError):
        cluster.unpack(evil.getvalue(), tmp_path / "sweep" / "rep2")
    assert not (tmp_path / "outside.txt").exists()


def _archive(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_an_archive_of_too_many_files_or_more_than_the_disk_keeps_free_is_refused_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster, "MAX_MEMBERS", 5)
    with pytest.raises(tarfile.TarError, match="more than 5 files"):
        cluster.unpack(_archive({f"f{i}": b"x" for i in range(6)}), tmp_path / "many")
    assert not any((tmp_path / "many").iterdir())  # nothing written: refused before extraction
    cluster.unpack(_archive({f"f{i}": b"x" for i in range(5)}), tmp_path / "five")
    assert len(list((tmp_path / "five").iterdir())) == 5

    import shutil
    # 1 MB where the disk must keep all but 0.5 MB of what it has free
    monkeypatch.setattr(cluster, "DISK_RESERVE_BYTES", shutil.disk_usage(tmp_path).free - 500_000)
    with pytest.raises(tarfile.TarError, match="would leave less than"):
        cluster.unpack(_archive({"capture.pcapng": bytes(1_000_000)}), tmp_path / "big")
    assert not any((tmp_path / "big").iterdir())


def _node(address: str) -> NodeCheck:
    return NodeCheck("id", address, address, 1.0)


@pytest.mark.parametrize("env, head_address, nodes, guarded, exposed", [
    ({}, "127.0.0.1:6379", ["127.0.0.1"], False, ()),
    ({"RAY_USE_TLS": "1"}, "10.0.0.1:6379", ["10.0.0.2", "192.168.1.9"], True, ()),
    ({"RAY_USE_TLS": "true"}, "8.8.8.8:6379", ["10.0.0.2"], True, ("8.8.8.8",)),
    ({"RAY_AUTH_MODE": "token"}, "[::1]:6379", ["1.1.1.1", "fd00::2", "203.0.113.5"], True, ("1.1.1.1",)),
    ({"RAY_USE_TLS": "0"}, "localhost:6379", ["?"], False, ()),
])
def test_the_clusters_trust_is_its_guard_and_its_addresses(env, head_address, nodes, guarded, exposed):
    t = cluster.trust(head_address, [_node(a) for a in nodes], env)
    assert t.guarded == guarded and t.exposed == exposed
    line = t.line()
    assert line.startswith("trust: ") and "docs/cluster.md" in line
    assert ("anyone who reaches its ports runs code as root" in line) == (not guarded)
    assert ("reachable from the internet" in line) == bool(exposed)

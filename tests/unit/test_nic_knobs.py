"""The knobs without a real interface: ethtool -k parsing, BQL files in a sysfs tree, snapshot
differences, which root qdiscs can be re-created, and the journal on disk."""

import json
import os
from pathlib import Path

import pytest

from bloatlab.errors import BloatlabError
from bloatlab.nic import journal as journals
from bloatlab.nic import knobs
from bloatlab.nic.knobs import Iface

DATA = Path(__file__).resolve().parents[1] / "data"


def test_ethtool_k_of_a_veth_gives_states_fixed_flags_requests_and_parents():
    features = knobs.parse_features((DATA / "ethtool-k-veth.txt").read_text())
    lro = features["large-receive-offload"]
    assert (lro.active, lro.fixed, lro.parent) == (False, True, None)
    tso_children = [f.name for f in knobs.children(features, "tcp-segmentation-offload")]
    assert tso_children[0] == "tx-tcp-segmentation" and len(tso_children) == 5
    assert features["tx-tcp-segmentation"].parent == "tcp-segmentation-offload"
    # An aggregate line is set through its children; a top-level line without children is a leaf.
    leaf_names = {f.name for f in knobs.leaves(features)}
    assert "tcp-segmentation-offload" not in leaf_names
    assert {"tx-tcp-segmentation", "generic-segmentation-offload", "generic-receive-offload"} <= leaf_names


def test_a_feature_the_kernel_overrode_keeps_what_was_requested():
    text = "Features for x:\ntcp-segmentation-offload: off\n\ttx-tcp-segmentation: off [requested on]\n" \
           "\ttx-tcp6-segmentation: on [requested off]\ngeneric-segmentation-offload: on\n"
    f = knobs.parse_features(text)
    assert (f["tx-tcp-segmentation"].active, f["tx-tcp-segmentation"].requested) == (False, True)
    assert (f["tx-tcp6-segmentation"].active, f["tx-tcp6-segmentation"].requested) == (True, False)
    assert f["generic-segmentation-offload"].requested is True


def sysfs_tree(tmp_path: Path, queues: int, bql: bool = True) -> Iface:
    for q in range(queues):
        d = tmp_path / "class/net/eth9/queues" / f"tx-{q}"
        d.mkdir(parents=True)
        if bql:
            (d / "byte_queue_limits").mkdir()
            (d / "byte_queue_limits/limit_max").write_text(f"{knobs.BQL_MAX}\n")
            (d / "byte_queue_limits/limit_min").write_text("0\n")
    return Iface("eth9", sysfs=str(tmp_path))


def test_bql_is_read_and_written_in_every_tx_queue(tmp_path):
    iface = sysfs_tree(tmp_path, queues=12)
    original = knobs.read_bql(iface)
    assert list(original)[:3] == ["tx-0", "tx-1", "tx-2"] and list(original)[-1] == "tx-11"  # numeric order
    assert original["tx-5"] == {"limit_max": knobs.BQL_MAX, "limit_min": 0}
    knobs.set_bql(iface, "limit_max", 3000, list(original))
    knobs.set_bql(iface, "limit_min", 1500, list(original))
    assert all(v == {"limit_max": 3000, "limit_min": 1500} for v in knobs.read_bql(iface).values())
    knobs.restore_bql(iface, original)
    assert knobs.read_bql(iface) == original


def test_a_driver_without_bql_has_no_limits_to_read(tmp_path):
    assert knobs.read_bql(sysfs_tree(tmp_path, queues=2, bql=False)) == {}


SNAP = {"txqueuelen": 1000, "mtu": 1500,
        "qdisc": {"kind": "noqueue", "handle": "0:", "default": True, "options": {}},
        "bql": {"tx-0": {"limit_max": knobs.BQL_MAX, "limit_min": 0}},
        "offloads": {"generic-segmentation-offload": "off", "tx-tcp-segmentation": "off"}}


def test_differences_name_every_field_that_changed():
    now = json.loads(json.dumps(SNAP))
    assert knobs.differences(SNAP, now) == []
    now["txqueuelen"] = 10
    now["qdisc"] = {"kind": "pfifo", "handle": "8001:", "default": False, "options": {"limit": 10}}
    now["bql"]["tx-0"]["limit_max"] = 0
    now["offloads"]["tx-tcp-segmentation"] = "on"
    assert knobs.differences(SNAP, now) == [
        "txqueuelen 10, was 1000", "root qdisc pfifo 8001: limit 10, was noqueue 0: (the default)",
        "tx-0 limit_max 0, was 1879048192", "offload tx-tcp-segmentation on, was off"]


def test_a_default_root_is_the_same_whatever_its_options():
    before = {**SNAP, "qdisc": {"kind": "pfifo_fast", "handle": "0:", "default": True, "options": {"bands": 3}}}
    after = {**SNAP, "qdisc": {"kind": "pfifo_fast", "handle": "0:", "default": True, "options": {"bands": 3,
                                                                                                  "multiqueue": False}}}
    assert knobs.differences(before, after) == []


@pytest.mark.parametrize("qdisc, args", [
    ({"kind": "pfifo", "handle": "1:", "options": {"limit": 1000}}, ["handle", "1:", "pfifo", "limit", "1000"]),
    ({"kind": "bfifo", "handle": "2:", "options": {"limit": 3000}}, ["handle", "2:", "bfifo", "limit", "3000"]),
    ({"kind": "pfifo_fast", "handle": "3:", "options": {"bands": 3, "priomap": [1, 2, 2, 2, 1, 2, 0, 0, 1, 1, 1, 1, 1,
                                                                                  1, 1, 1]}},
     ["handle", "3:", "pfifo_fast"]),
    ({"kind": "htb", "handle": "1:", "options": {"r2q": 10}}, None),  # classful: its classes would be lost
    ({"kind": "fq_codel", "handle": "1:", "options": {"limit": 10240, "flows": 1024}}, None),
])
def test_only_root_qdiscs_bloatlab_can_recreate_exactly_are_restorable(qdisc, args):
    assert knobs.restorable_qdisc(qdisc) == args


def test_journal_is_written_once_and_refuses_a_second_sweep(tmp_path, monkeypatch):
    monkeypatch.setattr(journals, "JOURNAL_DIR", tmp_path / "nic")
    iface = Iface("eth9", "lab")
    j = journals.create(iface, SNAP)
    assert j.path == tmp_path / "nic" / "eth9@lab.json"
    assert journals.load(j.path).original == SNAP and [x.iface for x in journals.list_journals()] == [iface]
    with pytest.raises(BloatlabError, match=r"another nic sweep \(pid \d+\) is changing eth9"):
        journals.create(iface, SNAP)  # this process owns it and lives
    j.owner = {"pid": 2**22 + 1, "starttime": 1}  # a dead owner: the interface needs a restore first
    j.path.write_text(json.dumps(j.to_dict()))
    with pytest.raises(BloatlabError, match="nic restore --iface eth9 --netns lab") as e:
        journals.create(iface, SNAP)
    assert e.value.field == "--iface"
    journals.remove(j)
    assert not (tmp_path / "nic").exists() and journals.list_journals() == []
    assert journals.journal_path(Iface("eth0")).name == "eth0.json"


def test_a_damaged_journal_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setattr(journals, "JOURNAL_DIR", tmp_path)
    (tmp_path / "eth0.json").write_text("{not json")
    with pytest.raises(BloatlabError, match="not a bloatlab nic journal"):
        journals.list_journals()
    assert os.listdir(tmp_path) == ["eth0.json"]  # kept for the user to look at


@pytest.mark.parametrize("root, says", [
    ({"kind": "noqueue", "options": {}}, "noqueue (the default on a veth)"),
    ({"kind": "pfifo", "options": {"limit": 1000}}, "keeps its limit of 1000"),  # a pfifo made before
    ({"kind": "pfifo", "options": {"limit": 10}}, None),
    ({"kind": "bfifo", "options": {"limit": 15000}}, None),  # 10 packets of 1500 bytes
    ({"kind": "pfifo_fast", "options": {"bands": 3}}, None),
    ({"kind": "fq_codel", "options": {"limit": 10240}}, "has its own limit"),
])
def test_txqueuelen_is_said_to_have_no_effect_where_it_bounds_nothing(root, says):
    from bloatlab.lab.nic import _txqueuelen_notes

    notes = _txqueuelen_notes(Iface("eth9"), root, 10, 1500)
    assert (notes == []) if says is None else (len(notes) == 1 and says in notes[0])

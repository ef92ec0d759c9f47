"""Which networks are orphans: made by a process that has died and not meant to outlive it
(what a cluster node removes after a failed run, lab/clean.py)."""

import os
import subprocess
import time

import pytest

from bloatlab import proc
from bloatlab.errors import SpecError
from bloatlab.testbed import state
from bloatlab.testbed.network import check_name
from bloatlab.testbed.state import NetworkState


def dead_owner():
    child = subprocess.Popen(["true"])
    child.wait()  # reaped: its pid names no process now
    return {"pid": child.pid, "starttime": 1}


def network(**kw):
    return NetworkState(name="run-abc123", topology={}, namespaces=[], **kw)


def test_a_dead_runs_network_is_an_orphan_and_a_live_ones_is_not():
    me = dict(zip(("pid", "starttime"), proc.identify(os.getpid())))
    assert network(owner=dead_owner(), status="up").orphaned
    assert not network(owner=me, status="up").orphaned
    assert not network(owner=None).orphaned  # who made it is not known: spared


def test_a_network_made_to_outlive_its_maker_is_spared_once_built():
    assert not network(owner=dead_owner(), status="up", detached=True).orphaned  # bloatlab up
    assert network(owner=dead_owner(), status="building", detached=True).orphaned  # up was killed midway


def test_only_an_old_directory_without_a_state_file_is_unregistered(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "RUN_DIR", tmp_path)
    left, building, registered = tmp_path / "left", tmp_path / "building", tmp_path / "t1"
    for d in (left, building, registered):
        d.mkdir()
    (registered / state.STATE_FILE).write_text("{}")
    (tmp_path / "a-file").write_text("")
    an_hour_ago = time.time() - 3600
    for d in (left, registered):
        os.utime(d, (an_hour_ago, an_hour_ago))
    assert state.unregistered(older_than_s=60) == [left]
    assert state.unregistered(older_than_s=0) == [building, left]
    monkeypatch.setattr(state, "RUN_DIR", tmp_path / "absent")
    assert state.unregistered(older_than_s=0) == []


def test_no_network_may_take_the_name_of_nics_journals():
    with pytest.raises(SpecError, match="taken by bloatlab nic's journals"):
        check_name("nic")
    assert check_name("nic2") == "nic2"


def test_nics_journal_directory_is_never_unregistered_whatever_its_age(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "RUN_DIR", tmp_path)
    nic = tmp_path / state.NIC_DIR.name
    nic.mkdir()
    (nic / ".eth0.json.42.tmp").write_text("{}")  # a sweep about to link its journal
    an_hour_ago = time.time() - 3600
    os.utime(nic, (an_hour_ago, an_hour_ago))
    assert state.unregistered(older_than_s=60) == []


def test_a_state_directory_a_file_outran_is_a_one_line_error_naming_down(monkeypatch):
    from bloatlab.testbed import network

    def outran(name):
        raise OSError(39, "Directory not empty")
    monkeypatch.setattr(state, "remove", outran)
    errors: list[BaseException] = []
    network._remove_network("gone1", [], errors)
    [e] = errors
    assert isinstance(e, network.BloatlabError) and str(e) == (
        f"could not remove {state.state_dir('gone1')}: Directory not empty; remove what is left with: bloatlab down gone1")

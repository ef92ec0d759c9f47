"""Which networks are orphans: made by a process that has died and not meant to outlive it
(what a cluster node removes after a failed run, lab/clean.py)."""

import os
import subprocess

from bloatlab import proc
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

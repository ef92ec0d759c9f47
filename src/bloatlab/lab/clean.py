"""Removing what bloatlab left on this machine, whichever layer made it: networks (namespaces,
datapath processes, /etc/netns and /run/bloatlab entries, and the BPF congestion control they
registered, once no network holds it) and the TCP probe's tracefs instances. The journals of
`bloatlab nic` are kept: `bloatlab nic restore` needs them.

    clean_orphans  what no live process owns: a killed run's network and probes, a tool's
                   namespace whose process is gone, the temporary directory of a cluster
                   node's run whose worker is gone; the networks of live runs and of
                   `bloatlab up` stay (`bloatlab clean`)
    clean          everything bloatlab made, live or not (`bloatlab clean --all`)
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from bloatlab import proc
from bloatlab.errors import BloatlabError
from bloatlab.experiment.probes.tcp import instance_runs, remove_stale_instances
from bloatlab.testbed import state
from bloatlab.testbed.network import clean_networks, clean_orphaned_networks

# A cluster node's run writes into a temporary directory named for its Ray worker's pid
# (lab/cluster.py), sent back and removed when the run ends.
CLUSTER_TMP_PREFIX = "bloatlab-cluster-"


def clean(errors: list[BloatlabError]) -> list[str]:
    """Remove it all; what was removed. What could not be removed goes to `errors`, once
    everything else is."""
    return clean_networks(errors) + remove_stale_instances()


def clean_orphans(errors: list[BloatlabError]) -> tuple[list[str], list[state.NetworkState]]:
    """Remove what no live process owns, with the TCP probe instances of runs that have no live
    network; (what was removed, the live networks spared). What could not be goes to `errors`."""
    removed, spared = clean_orphaned_networks(errors)
    live = {st.name for st in spared}
    removed += remove_stale_instances(runs=[run for run in instance_runs() if run not in live])
    return removed + _remove_dead_cluster_dirs(), spared


def _remove_dead_cluster_dirs() -> list[str]:
    removed = []
    for path in Path(tempfile.gettempdir()).glob(f"{CLUSTER_TMP_PREFIX}*"):
        pid = path.name[len(CLUSTER_TMP_PREFIX):].split("-")[0]
        if pid.isdigit() and not proc.alive(int(pid), None):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return removed


def describe(st: state.NetworkState) -> str:
    """A live network in a line: its name and who keeps it."""
    owner = (st.owner or {}).get("pid")
    who = "bloatlab up" if st.detached else f"the run of process {owner}" if owner else "an unknown owner"
    return f"{st.name} ({who}, {st.status})"

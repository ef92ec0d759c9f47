"""Removing what bloatlab left on this machine, whichever layer made it: networks (namespaces,
datapath processes, /etc/netns and /run/bloatlab entries, and the BPF congestion control they
registered, once no network holds it) and the TCP probe's tracefs instances. The journals of
`bloatlab nic` are kept: `bloatlab nic restore` needs them.

    clean_orphans  what no live process owns: a killed run's network and probes, a tool's
                   namespace whose process is gone; the networks of live runs and of
                   `bloatlab up` stay (`bloatlab clean`)
    clean          everything bloatlab made, live or not (`bloatlab clean --all`)
"""

from __future__ import annotations

from bloatlab.errors import BloatlabError
from bloatlab.experiment.probes.tcp import instance_runs, remove_stale_instances
from bloatlab.testbed import state
from bloatlab.testbed.network import clean_networks, clean_orphaned_networks


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
    return removed, spared


def describe(st: state.NetworkState) -> str:
    """A live network in a line: its name and who keeps it."""
    owner = (st.owner or {}).get("pid")
    who = "bloatlab up" if st.detached else f"the run of process {owner}" if owner else "an unknown owner"
    return f"{st.name} ({who}, {st.status})"

"""Removing what bloatlab left on this machine, whichever layer made it: networks (namespaces,
datapath processes, /etc/netns and /run/bloatlab entries) and the TCP probe's tracefs
instances. The journals of `bloatlab nic` are kept: `bloatlab nic restore` needs them.

    clean          everything bloatlab made, live or not
    clean_orphans  only what a process that has died left: its networks and their probes,
                   while the networks of live runs and of `bloatlab up` stay
"""

from __future__ import annotations

from bloatlab.errors import BloatlabError
from bloatlab.experiment.probes.tcp import remove_stale_instances
from bloatlab.testbed import state
from bloatlab.testbed.network import clean_networks, remove_network


def clean(errors: list[BloatlabError]) -> list[str]:
    """Remove it all; what was removed. What could not be removed goes to `errors`, once
    everything else is."""
    return clean_networks(errors) + remove_stale_instances()


def clean_orphans(errors: list[BloatlabError]) -> list[str]:
    """Remove the networks whose owner has died (state.NetworkState.orphaned), with their TCP
    probe instances; what was removed. What could not be goes to `errors`."""
    removed: list[str] = []
    for st in state.list_states():
        if not st.orphaned:
            continue
        try:
            removed += remove_network(st.name)
        except BloatlabError as e:
            errors.append(e)
        removed += remove_stale_instances(runs=[st.name])
    return removed

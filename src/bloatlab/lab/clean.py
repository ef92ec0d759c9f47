"""Removing what bloatlab left on this machine, whichever layer made it: networks (namespaces,
datapath processes, /etc/netns and /run/bloatlab entries) and the TCP probe's tracefs
instances. The journals of `bloatlab nic` are kept: `bloatlab nic restore` needs them.
"""

from __future__ import annotations

from bloatlab.errors import BloatlabError
from bloatlab.experiment.probes.tcp import remove_stale_instances
from bloatlab.testbed.network import clean_networks


def clean(errors: list[BloatlabError]) -> list[str]:
    """Remove it all; what was removed. What could not be removed goes to `errors`, once
    everything else is."""
    return clean_networks(errors) + remove_stale_instances()

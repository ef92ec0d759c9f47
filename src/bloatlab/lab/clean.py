"""Removing what bloatlab left on this machine, whichever layer made it: networks (namespaces,
datapath processes, /etc/netns and /run/bloatlab entries) and the TCP probe's tracefs
instances. The journals of `bloatlab nic` are kept: `bloatlab nic restore` needs them.
"""

from __future__ import annotations

from bloatlab.errors import BloatlabError
from bloatlab.experiment.probes.tcp import remove_stale_instances
from bloatlab.testbed.network import clean_networks


def clean() -> list[str]:
    """Remove it all; what was removed. An error is raised once everything else is removed."""
    removed: list[str] = []
    error: BloatlabError | None = None
    try:
        removed += clean_networks()
    except BloatlabError as e:
        error = e
    removed += remove_stale_instances()
    if error is not None:
        raise error
    return removed

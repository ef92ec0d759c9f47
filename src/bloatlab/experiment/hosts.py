"""What the experiment layer needs of a testbed: hosts, by name, that run commands and have
addresses. bloatlab.testbed.network.Network is one; workloads and probes are written against
this, not against how the hosts were built.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol


class Hosts(Protocol):
    name: str  # the network's name: probes key what they leave on the machine by it
    # The network's own directory, removed with it (also by `bloatlab clean` after a crash):
    # where a workload keeps files that must not outlive the network.
    state_dir: Path

    def exec(self, host: str, argv: Sequence[str], *, input: str | None = None, timeout_s: float | None = None,
             check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run argv in `host` to completion, its output captured."""

    def popen(self, host: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """Start argv in `host`; kwargs go to subprocess.Popen."""

    def address(self, host: str) -> str:
        """The host's IP address."""

    def namespace(self, node: str) -> str:
        """The host's network namespace; an error naming the host when there is no such host."""

    def congestion_control(self, cc: str) -> str:
        """The kernel's name for the spec's congestion control `cc` on these hosts (dctcp may be
        bloatlab's BPF stand-in, bloatlab_dctcp): what a tool's socket or a route is given."""

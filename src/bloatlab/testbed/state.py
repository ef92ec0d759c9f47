"""The registry of networks: /run/bloatlab/NAME/state.json.

A network's state file is written before anything is built, so whatever a killed `up` left
behind can be found and removed. Processes are recorded by pid and start time (bloatlab.proc),
so a pid that the kernel has since given to another process is never signalled.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bloatlab import proc
from bloatlab.errors import BloatlabError
from bloatlab.specs.model import Topology

RUN_DIR = Path("/run/bloatlab")
# `bloatlab nic`'s journals live beside the networks' directories: no network may take its name.
NIC_DIR = RUN_DIR / "nic"
STATE_FILE = "state.json"


@dataclass
class NetworkState:
    name: str
    topology: dict[str, Any]  # Topology.to_dict()
    namespaces: list[str]  # every namespace the network has or will have
    status: str = "building"  # "building" until every part is up, then "up"
    topology_path: str | None = None  # the file it came from, if any
    backends: list[str] = field(default_factory=list)  # per link: "kernel" or "userspace"
    host_cc: dict[str, str] = field(default_factory=dict)  # each host's default TCP congestion control
    # The congestion controls its sockets use, by the spec's name, with the kernel's name for each
    # ("" until provided: testbed/congestion.py). Written before the build: a BPF stand-in the
    # network registered stays registered while any state file names it.
    congestion: dict[str, str] = field(default_factory=dict)
    datapath: dict[str, int | None] | None = None  # {"pid", "starttime"} of bloatlab-link
    owner: dict[str, int | None] | None = None  # the process that built it: {"pid", "starttime"}
    detached: bool = False  # made to outlive its owner (bloatlab up); a run's network ends with its run
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))

    @property
    def dir(self) -> Path:
        return state_dir(self.name)

    def save(self) -> None:
        # Write then rename: a reader (or a crash) never sees half a file.
        tmp = self.dir / f".{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(self.dir / STATE_FILE)

    def claim(self) -> None:
        """Create the state directory, failing if the name is taken, and save."""
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        try:
            self.dir.mkdir()  # atomic: of two `up`s with one name, one wins
        except FileExistsError:
            raise BloatlabError(f"a network named {self.name!r} exists already (see bloatlab ls); "
                                f"remove it with: bloatlab down {self.name}", field="name") from None
        self.save()

    @property
    def orphaned(self) -> bool:
        """Its owner is gone and it was not meant to outlive it: a killed run's network, or one
        whose building never finished. An owner that is not recorded counts as alive."""
        if not self.owner or not self.owner.get("pid"):
            return False
        gone = not proc.alive(self.owner["pid"], self.owner.get("starttime"))
        return gone and (not self.detached or self.status == "building")

    def topology_object(self) -> Topology:
        return Topology.from_dict(self.topology)


def state_dir(name: str) -> Path:
    return RUN_DIR / name


def load(name: str) -> NetworkState:
    path = state_dir(name) / STATE_FILE
    try:
        data = json.loads(path.read_text())
        data.setdefault("detached", True)  # written before bloatlab recorded it: spared, as if made by `up`
        return NetworkState(**data)
    except FileNotFoundError:
        raise BloatlabError(f"no network named {name!r} (bloatlab ls lists them)", field="name") from None
    except (json.JSONDecodeError, TypeError):
        raise BloatlabError(f"{path} is damaged; remove the network with: bloatlab down {name}",
                            field="name") from None


def list_states() -> list[NetworkState]:
    states = []
    for path in sorted(RUN_DIR.glob(f"*/{STATE_FILE}")):
        try:
            states.append(load(path.parent.name))
        except BloatlabError:
            continue  # damaged or vanishing: `clean` removes such directories
    return states


def unregistered(older_than_s: float) -> list[Path]:
    """Directories under RUN_DIR with no state file, untouched for `older_than_s`: what a removal
    cut short left (a file written into the directory while it went). Never nic's journals, which
    a sweep may be writing into however old the directory."""
    if not RUN_DIR.exists():
        return []
    now = time.time()
    found = []
    for entry in sorted(RUN_DIR.iterdir()):
        try:
            if entry.name == NIC_DIR.name or entry.is_symlink():
                continue
            if entry.is_dir() and not (entry / STATE_FILE).exists() and now - entry.stat().st_mtime >= older_than_s:
                found.append(entry)
        except FileNotFoundError:
            continue  # removed meanwhile
    return found


def remove(name: str) -> bool:
    """Remove network `name`'s directory; False if it was not there (or another process took it
    meanwhile). An OSError is a file written into it while it went."""
    path = state_dir(name)
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return False
    return True

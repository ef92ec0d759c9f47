"""The registry of networks: /run/bloatlab/NAME/state.json, and process identities.

A network's state file is written before anything is built, so whatever a killed `up` left
behind can be found and removed. Processes are recorded by pid and start time (from
/proc/PID/stat), so a pid that the kernel has since given to another process is never signalled.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .errors import BloatlabError
from .topology import DirectionSpec, HostSpec, LinkSpec, QueueSpec, SwitchSpec, Topology

RUN_DIR = Path("/run/bloatlab")
STATE_FILE = "state.json"


@dataclass
class NetworkState:
    name: str
    topology: dict[str, Any]  # Topology.to_dict()
    namespaces: list[str]  # every namespace the network has or will have
    status: str = "building"  # "building" until every part is up, then "up"
    topology_path: str | None = None  # the file it came from, if any
    backends: list[str] = field(default_factory=list)  # per link: "kernel" or "userspace"
    datapath: dict[str, int | None] | None = None  # {"pid", "starttime"} of bloatlab-link
    owner: dict[str, int | None] | None = None  # the process that built it: {"pid", "starttime"}
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

    def topology_object(self) -> Topology:
        return topology_from_dict(self.topology)


def state_dir(name: str) -> Path:
    return RUN_DIR / name


def load(name: str) -> NetworkState:
    path = state_dir(name) / STATE_FILE
    try:
        data = json.loads(path.read_text())
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


def remove(name: str) -> bool:
    path = state_dir(name)
    if not path.exists():
        return False
    shutil.rmtree(path)
    return True


def topology_from_dict(data: dict[str, Any]) -> Topology:
    """The inverse of Topology.to_dict()."""

    def direction(d: dict[str, Any]) -> DirectionSpec:
        return DirectionSpec(
            rate_bps=d["rate_bps"],
            trace=Path(d["trace_path"]) if d.get("trace_path") else None,
            delay_ns=d["delay_ns"], jitter_ns=d["jitter_ns"], loss=d["loss"],
            queue=QueueSpec.from_dict(d["queue"]),
        )

    links = [LinkSpec(name=link["name"], ends=tuple(link["ends"]), forward=direction(link["forward"]),
                      reverse=direction(link["reverse"]), backend=link["backend"])
             for link in data["links"]]
    return Topology(hosts={h["name"]: HostSpec(h["name"]) for h in data["hosts"]},
                    switches={s["name"]: SwitchSpec(s["name"]) for s in data["switches"]},
                    links=links, seed=data["seed"])


# Processes -------------------------------------------------------------------------------

def process_starttime(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (clock ticks after boot); None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ")".
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[19])


def process_alive(pid: int, starttime: int | None) -> bool:
    """True if `pid` runs and is the process that started at `starttime` (a zombie is dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return False
    return starttime is None or int(fields[19]) == starttime


def identify(pid: int) -> tuple[int, int | None]:
    return pid, process_starttime(pid)


def terminate(processes: list[tuple[int, int | None]], timeout_s: float = 2.0) -> list[int]:
    """SIGTERM each live process, SIGKILL those still alive after timeout_s; return the pids hit."""
    hit = [(pid, start) for pid, start in processes if process_alive(pid, start)]
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 2.0)):
        for pid, start in hit:
            if process_alive(pid, start):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(process_alive(p, s) for p, s in hit):
            time.sleep(0.02)
        if not any(process_alive(p, s) for p, s in hit):
            break
    return [pid for pid, _ in hit]

"""The journal: an interface's original settings, on disk before the first change.

    /run/bloatlab/nic/IF.json        an interface of this namespace
    /run/bloatlab/nic/IF@NS.json     an interface in namespace NS

Written atomically (write, then rename) before anything is changed and removed only after a
restore that checked every field, so a sweep killed with SIGKILL leaves what `bloatlab nic
restore` needs. The journal is also the lock: a second sweep on the same interface is refused
while its owner lives, and told to restore first when the owner is dead.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bloatlab import proc
from bloatlab.errors import BloatlabError
from bloatlab.nic.knobs import Iface
from bloatlab.testbed import state

FORMAT = "bloatlab-nic-journal/1"
JOURNAL_DIR = state.NIC_DIR


@dataclass
class Journal:
    iface: Iface
    original: dict[str, Any]  # knobs.snapshot() before the sweep
    owner: dict[str, int | None]  # {"pid", "starttime"} of the sweep
    created: str
    command: list[str]

    @property
    def path(self) -> Path:
        return journal_path(self.iface)

    def owner_alive(self) -> bool:
        return proc.alive(self.owner["pid"], self.owner["starttime"])

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "iface": self.iface.name, "netns": self.iface.netns, "owner": self.owner,
                "created": self.created, "command": self.command, "original": self.original}


def journal_path(iface: Iface, directory: Path | None = None) -> Path:
    name = f"{iface.name}@{iface.netns}.json" if iface.netns else f"{iface.name}.json"
    return (directory or JOURNAL_DIR) / name


def create(iface: Iface, original: dict[str, Any]) -> Journal:
    """Claim the interface and write its original settings; refuse if a journal is there."""
    journal = Journal(iface, original, dict(zip(("pid", "starttime"), proc.identify(os.getpid()))),
                      datetime.now(timezone.utc).isoformat(timespec="seconds"), list(sys.argv))
    JOURNAL_DIR.mkdir(parents=True, exist_ok=True)
    tmp = journal.path.with_name(f".{journal.path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:  # on disk before the first change, whatever happens next
        f.write(json.dumps(journal.to_dict(), indent=2) + "\n")
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, journal.path)  # atomic, and fails if another sweep got there first
    except FileExistsError:
        tmp.unlink()
        refuse_if_journaled(iface)
        raise  # refuse_if_journaled always raises when the file exists
    tmp.unlink()
    return journal


def refuse_if_journaled(iface: Iface) -> None:
    """A one-line error if an earlier sweep's journal names this interface."""
    path = journal_path(iface)
    if not path.exists():
        return
    journal = load(path)
    where = f" --netns {iface.netns}" if iface.netns else ""
    if journal.owner_alive():
        raise BloatlabError(f"another nic sweep (pid {journal.owner['pid']}) is changing {iface}; wait for it "
                            "or stop it", field="--iface")
    raise BloatlabError(f"a sweep that did not finish ({journal.created}) left {iface} changed; put it back "
                        f"first with: bloatlab nic restore --iface {iface.name}{where}", field="--iface")


def load(path: Path) -> Journal:
    try:
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError("not a journal")
        owner = doc["owner"]
        # What restoring reads of it, of the types create() wrote: damaged, it is refused as a whole.
        if not (isinstance(doc["iface"], str) and isinstance(doc["netns"], (str, type(None)))
                and isinstance(doc["original"], dict) and isinstance(doc["created"], str)
                and isinstance(doc.get("command", []), list) and isinstance(owner, dict)
                and type(owner.get("pid")) is int and "starttime" in owner
                and type(owner["starttime"]) in (int, type(None))):
            raise TypeError("a field not of its type")
        return Journal(Iface(doc["iface"], doc["netns"]), doc["original"], owner, doc["created"],
                       doc.get("command", []))
    except FileNotFoundError:
        raise BloatlabError(f"no journal {path}", field="--iface") from None
    except (ValueError, KeyError, TypeError, RecursionError):
        raise BloatlabError(f"{path} is not a bloatlab nic journal (damaged?); look at it, set the interface "
                            "up by hand and remove the file", field="--iface") from None


def list_journals(damaged: list[str] | None = None) -> list[Journal]:
    """Every readable journal; a damaged one is noted in `damaged` (if given) and skipped, so
    that it does not keep the others' interfaces from being restored."""
    found = []
    for path in sorted(JOURNAL_DIR.glob("*.json")) if JOURNAL_DIR.exists() else []:
        try:
            found.append(load(path))
        except BloatlabError as e:
            if damaged is None:
                raise
            damaged.append(e.message)
    return found


def remove(journal: Journal) -> None:
    journal.path.unlink(missing_ok=True)
    try:
        JOURNAL_DIR.rmdir()  # only when empty
    except OSError:
        pass

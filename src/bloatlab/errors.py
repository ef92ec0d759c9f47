"""Errors a user can cause and fix. The CLI prints them as one line and exits 2 (bad input) or 3
(the machine lacks something)."""

import json


class BloatlabError(Exception):
    """A problem the user can fix. `field` names the input at fault (e.g. "links[1].rate")."""

    exit_status = 2

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field
        self.message = message

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message

    def __reduce__(self):  # pickled with its field (a run's process on a cluster node sends it back)
        return type(self), (self.message, self.field)


class SpecError(BloatlabError):
    """A topology or experiment file (or a --set) that does not validate."""


class MachineError(BloatlabError):
    """The machine lacks something a request needs (root, a qdisc, a tool). The CLI exits 3."""

    exit_status = 3


def show(value: object) -> str:
    """A TOML value as the user would recognise it, on one line ("10 mbps" keeps its quotes)."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):  # dates and times from TOML
        return str(value)

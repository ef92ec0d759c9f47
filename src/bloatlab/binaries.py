"""Where bloatlab's built artefacts are, and whether they are this bloatlab's: the one place that
finds bloatlab-link and bloatlab-replay, and the BPF objects (the BPF DCTCP).

In order: the environment variable that names the binary; in a source checkout (development),
its release build (`make build` writes target/release), so a rebuilt datapath is used at once;
the binaries installed with the package (a wheel carries them in bloatlab/_bin); then PATH.
A binary reports its version (`--version`); one of another version than bloatlab's is refused
with a one-line error, since its config and its stats may differ.

A BPF object is built by `make build` against the running kernel's BTF into target/bpf (a
checkout's), or found in bloatlab/_bin beside the binaries; its variable overrides both.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from bloatlab.errors import MachineError
from bloatlab.version import __version__

_CHECKOUT = Path(__file__).resolve().parents[2]  # src/bloatlab/ -> the checkout, if this is one
REPO_RELEASE = _CHECKOUT / "target" / "release" if (_CHECKOUT / "Cargo.toml").is_file() else None
PACKAGE_BIN = Path(__file__).resolve().parent / "_bin"  # what the wheel installed

# Binary -> (the variable that overrides where it is, what needs it: for the error).
BINARIES = {
    "bloatlab-link": ("BLOATLAB_LINK", "the userspace link backend needs it"),
    "bloatlab-replay": ("BLOATLAB_REPLAY", "bloatlab replay needs it"),
}


# BPF object -> (the variable that overrides where it is, what needs it: for the error).
BPF_OBJECTS = {
    "bloatlab_dctcp.bpf.o": ("BLOATLAB_DCTCP_BPF", 'cc = "dctcp" on a kernel without tcp_dctcp needs it'),
}
REPO_BPF = _CHECKOUT / "target" / "bpf" if REPO_RELEASE is not None else None  # make build writes it


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def locate(name: str) -> Path | None:
    """The binary, or None where there is none; an environment variable that names something
    not executable is an error, not a reason to look elsewhere."""
    env_var, _ = BINARIES[name]
    if env := os.environ.get(env_var):
        if not _executable(Path(env)):
            raise MachineError(f"{env} is not an executable file; fix the variable or unset it", field=env_var)
        return Path(env)
    for place in (REPO_RELEASE, PACKAGE_BIN):
        if place is not None and _executable(place / name):
            return place / name
    on_path = shutil.which(name)
    return Path(on_path) if on_path else None


def find(name: str) -> Path:
    """The binary; a MachineError that says how to get it where there is none."""
    path = locate(name)
    if path is None:
        env_var, needed_by = BINARIES[name]
        raise MachineError(f"{name} not found ({needed_by}); run make setup, install bloatlab with pip, or set "
                           f"{env_var} to its path")
    return path


def version_argv(path: Path) -> list[str]:
    """The command that makes a binary say its version."""
    return [str(path), "--version"]


def reported_version(name: str, printed: str) -> str | None:
    """The version in what `NAME --version` printed ("bloatlab-link 0.2.0"); None for anything else
    (a binary from before versions, which knows no --version)."""
    words = printed.split()
    return words[1] if len(words) == 2 and words[0] == name else None


def check(name: str, path: Path, printed: str) -> None:
    """A one-line error unless the binary at `path`, which printed `printed` for --version, is of
    this bloatlab's version."""
    found = reported_version(name, printed)
    if found != __version__:
        what = f"is {name} {found}" if found else "says no version (it is older than versions)"
        raise MachineError(f"{path} {what}, but this bloatlab is {__version__}; rebuild it (make build) or "
                           "install bloatlab and its binaries together (pip install)", field=name)


_verified: set[Path] = set()


def verified(name: str, output: Callable[[list[str]], str]) -> Path:
    """The binary, once its version is checked (once per process); `output` runs a command and
    returns what it printed (bloatlab.proc.output: this module starts nothing itself)."""
    path = find(name)
    if path not in _verified:
        check(name, path, output(version_argv(path)))
        _verified.add(path)
    return path


def locate_object(name: str) -> Path | None:
    """The BPF object, or None where none is built; a variable that names no file is an error."""
    env_var, _ = BPF_OBJECTS[name]
    if env := os.environ.get(env_var):
        if not Path(env).is_file():
            raise MachineError(f"{env} is not a file; fix the variable or unset it", field=env_var)
        return Path(env)
    for place in (REPO_BPF, PACKAGE_BIN):
        if place is not None and (place / name).is_file():
            return place / name
    return None

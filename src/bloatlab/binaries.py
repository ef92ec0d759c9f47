"""Where bloatlab's Rust binaries are: the one place that finds bloatlab-link and bloatlab-replay.

In order: the environment variable that names the binary, the checkout's release build
(`make setup` writes target/release), then PATH.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from bloatlab.errors import MachineError

REPO_RELEASE = Path(__file__).resolve().parents[2] / "target" / "release"  # a checkout's `make setup`

# Binary -> (the variable that overrides where it is, what needs it: for the error).
BINARIES = {
    "bloatlab-link": ("BLOATLAB_LINK", "the userspace link backend needs it"),
    "bloatlab-replay": ("BLOATLAB_REPLAY", "bloatlab replay needs it"),
}


def locate(name: str) -> Path | None:
    """The binary, or None where there is none; an environment variable that names something
    not executable is an error, not a reason to look elsewhere."""
    env_var, _ = BINARIES[name]
    if env := os.environ.get(env_var):
        if not os.access(env, os.X_OK) or not Path(env).is_file():
            raise MachineError(f"{env} is not an executable file; fix the variable or unset it", field=env_var)
        return Path(env)
    built = REPO_RELEASE / name
    if built.is_file() and os.access(built, os.X_OK):
        return built
    on_path = shutil.which(name)
    return Path(on_path) if on_path else None


def find(name: str) -> Path:
    """The binary; a MachineError that says how to get it where there is none."""
    path = locate(name)
    if path is None:
        env_var, needed_by = BINARIES[name]
        raise MachineError(f"{name} not found ({needed_by}); run make setup, or set {env_var} to its path")
    return path

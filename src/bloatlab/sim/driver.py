"""The ns-3 driver: bloatlab's C++ scenario runner (cxx/bloatlab_ns3.cc), compiled once
against the headers and libraries of the `ns3` wheel (the `sim` extra) and cached.

The wheel's Python bindings are never imported: they take some 20 s and 650 MB to load, where
the compiled driver starts at once. The cache key is the driver's source, the wheel's version
and the compiler's, so an upgrade of any of them builds anew.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from bloatlab import proc
from bloatlab.errors import BloatlabError, MachineError

log = logging.getLogger(__name__)

SOURCE = Path(__file__).parent / "cxx" / "bloatlab_ns3.cc"
LIBRARIES = ("core", "network", "internet", "internet-apps", "applications", "point-to-point",
             "traffic-control", "stats", "bridge", "mobility")
BUILD_TIMEOUT_S = 600
DISTRIBUTION = "ns3"


def ns3_version() -> str | None:
    """The installed ns3 wheel's version, or None."""
    import importlib.metadata  # 30 ms: not on the way to every emulated run

    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def ns3_root() -> Path:
    """Where the wheel keeps ns-3's include/ and lib64/."""
    version = ns3_version()
    if version is None:
        raise MachineError("the ns-3 backend needs the ns3 wheel: pip install 'bloatlab[sim]' (make test installs it)")
    import importlib.metadata

    root = Path(str(importlib.metadata.distribution(DISTRIBUTION).locate_file("ns3")))
    if not (root / "include" / "ns3" / "core-module.h").exists():
        raise MachineError(f"the ns3 wheel at {root} has no headers (include/ns3); reinstall it: "
                           "pip install --force-reinstall 'bloatlab[sim]'")
    return root


def compiler() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise MachineError("the ns-3 backend compiles its driver once and needs a C++ compiler: apt-get install g++")
    return cxx


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/bloatlab (~/.cache/bloatlab): the built drivers."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "bloatlab"


def _key(cxx: str, root: Path) -> str:
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    h = hashlib.sha256(SOURCE.read_bytes())
    h.update(f"{ns3_version()}|{root}|{version}".encode())
    return h.hexdigest()[:16]


def ns3_lib_version(root: Path) -> str:
    """The libraries' version in their names (libns3.44-core.so: 3.44)."""
    for lib in sorted((root / "lib64").glob("libns3*-core*.so")):
        return lib.name.removeprefix("libns").split("-")[0]
    raise MachineError(f"the ns3 wheel at {root} has no libns3*-core.so in lib64/; reinstall it")


def _cached(cxx: str, root: Path) -> Path:
    return cache_dir() / f"ns3-driver-{_key(cxx, root)}" / "bloatlab-ns3"


def status() -> dict[str, str | None]:
    """What the ns-3 backend has here (for bloatlab doctor): the wheel's version, the compiler,
    the built driver if it is cached, and what is missing."""
    out: dict[str, str | None] = {"ns3": ns3_version(), "compiler": None, "driver": None, "problem": None}
    try:
        root = ns3_root()
        out["compiler"] = cxx = compiler()
        cached = _cached(cxx, root)
        out["driver"] = str(cached) if cached.exists() else None
    except MachineError as e:
        out["problem"] = str(e)
    return out


def build(say: bool = True) -> Path:
    """The driver binary: from the cache, or built now (some 20 s on 2 cores, once)."""
    root = ns3_root()
    cxx = compiler()
    out = _cached(cxx, root)
    if out.exists():
        return out
    lib = root / "lib64"
    version = ns3_lib_version(root)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    argv = [cxx, "-std=c++20", "-O2", "-w", f"-I{root / 'include'}", str(SOURCE), "-o", str(tmp),
            f"-L{lib}", f"-Wl,-rpath,{lib}", *[f"-lns{version}-{name}" for name in LIBRARIES]]
    if say:
        print(f"building the ns-3 driver once (g++ against ns-3 {ns3_version()}, some 20 s) into {out.parent}",
              file=sys.stderr, flush=True)
    result = proc.run(argv, timeout_s=BUILD_TIMEOUT_S, check=False)
    if result.returncode != 0:
        tmp.unlink(missing_ok=True)
        errors = [line for line in result.stderr.splitlines() if "error" in line] or result.stderr.splitlines()[-1:]
        raise MachineError(f"the ns-3 driver did not build with {cxx}: {errors[0] if errors else 'no output'}")
    tmp.replace(out)  # atomic: two runs building at once both end with a whole binary
    return out


def start(binary: Path, scenario: Path, out_dir: Path) -> subprocess.Popen:
    """Start simulating `scenario`; the driver writes its files into `out_dir` (see finish)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return proc.spawn([str(binary), str(scenario), str(out_dir)], stdout=subprocess.DEVNULL,
                      stderr=subprocess.PIPE, text=True)


def finish(child: subprocess.Popen, timeout_s: float) -> None:
    """Wait for the driver; a failure is a one-line error. Interrupted, it is ended and reaped."""
    try:
        _, stderr = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.stop(child)
        raise BloatlabError(f"the ns-3 simulation did not end within {timeout_s:g} s") from None
    except BaseException:
        proc.stop(child)
        raise
    if child.returncode != 0:
        last = (stderr.strip().splitlines() or ["(no output)"])[-1]
        raise BloatlabError(f"the ns-3 simulation failed: {last}")


def run(binary: Path, scenario: Path, out_dir: Path, timeout_s: float) -> None:
    """Simulate `scenario` to the end, writing the driver's files into `out_dir`."""
    finish(start(binary, scenario, out_dir), timeout_s)

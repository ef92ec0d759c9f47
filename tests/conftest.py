"""Test-wide rules: netns tests need root, and no test session leaves a bloatlab namespace."""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Let `python3 -m pytest` run from a plain checkout, without `pip install -e`.
if importlib.util.find_spec("bloatlab") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def bloatlab_namespaces() -> set[str]:
    ip = shutil.which("ip", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))
    if ip is None:
        return set()
    out = subprocess.run([ip, "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    # Lines look like "bloatlab.x._dp (id: 3)".
    return {line.split()[0] for line in out.splitlines() if line.startswith("bloatlab")}


@pytest.fixture(autouse=True)
def _netns_tests_need_root(request):
    if request.node.get_closest_marker("netns") and os.geteuid() != 0:
        pytest.skip("needs root for network namespaces")


@pytest.fixture(scope="session", autouse=True)
def _no_namespace_left_behind():
    # Namespaces left before this session (another run's debris) are reported, not blamed on us.
    before = bloatlab_namespaces()
    if before:
        print(f"\nnote: bloatlab namespaces present before the tests: {sorted(before)}")
    yield
    left = bloatlab_namespaces() - before
    if left:
        print(f"\nnamespaces left behind by the tests: {sorted(left)}")
    assert not left, f"tests left namespaces behind: {sorted(left)} (bloatlab clean removes them)"

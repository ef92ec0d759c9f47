"""Fixtures shared by the integration tests."""

import pytest

from bloatlab import binaries
from bloatlab.errors import MachineError
from bloatlab.testbed.network import leftovers, remove_network


@pytest.fixture
def names():
    """Network names for one test; whatever the test leaves of them is removed afterwards."""
    used: list[str] = []

    def new(name: str) -> str:
        used.append(name)
        return name

    yield new
    for name in used:
        if leftovers(name):
            remove_network(name)
        assert not leftovers(name), f"network {name} left traces behind"


@pytest.fixture
def datapath_binary():
    try:
        return binaries.find("bloatlab-link")
    except MachineError:
        pytest.skip("bloatlab-link is not built (make setup)")

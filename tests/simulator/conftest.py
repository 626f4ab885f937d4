"""Every simulated run of these tests is checked at every iteration (invariants.py)."""

import pytest

from tests.simulator.invariants import install


@pytest.fixture(autouse=True)
def simulator_invariants(monkeypatch):
    install(monkeypatch)

"""Server tests run live servers with the real model pair (live_server.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from live_server import LIVE_POLICY, start  # noqa: E402


@pytest.fixture(scope="session")
def live(models):
    """The default server: the adaserve preset without its TPOT door, 32 slots, a queue
    of 1024. The door (refuse_tpot=latest) judges a request by how the last requests as
    tight did, and this server is shared by the whole session: on a slow machine urgent
    requests of earlier tests miss 100 ms and a later test's urgent ones are refused. The
    tests here are about the contract, not the door, which has its own servers
    (test_load.py, tests/scheduler/test_admission_missed.py)."""
    srv, stop = start(models, policy=LIVE_POLICY)
    yield srv
    stop()


@pytest.fixture()
def small(models):
    """A server with 2 slots and a queue of 3: overload in a few requests."""
    srv, stop = start(models, max_batch=2, max_waiting=3)
    yield srv
    stop()

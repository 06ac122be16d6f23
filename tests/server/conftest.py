"""Server tests run live servers with the real model pair (live_server.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from live_server import start  # noqa: E402


@pytest.fixture(scope="session")
def live(models):
    """The default server: adaserve policy, 32 slots, a queue of 1024."""
    srv, stop = start(models)
    yield srv
    stop()


@pytest.fixture()
def small(models):
    """A server with 2 slots and a queue of 3: overload in a few requests."""
    srv, stop = start(models, max_batch=2, max_waiting=3)
    yield srv
    stop()

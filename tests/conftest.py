"""Shared by every test directory. This file puts tests/ on sys.path, so tests import the
helpers beside it (live_server.py: a real server on loopback)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def models():
    """The default model pair (SmolLM2-135M + the distilled draft), loaded once."""
    pytest.importorskip("torch")
    from adaserve.engine import EngineConfig
    from adaserve.engine.loader import load_models

    return load_models(EngineConfig(policy="adaserve"))

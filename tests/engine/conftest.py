"""Engine tests run the real SmolLM2-135M target (converted once into the user cache)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from adaserve.engine import EngineConfig  # noqa: E402
from adaserve.engine.loader import load_models  # noqa: E402


@pytest.fixture(scope="session")
def smollm():
    """Target-only models (no draft); loading also converts the GGUF on first use."""
    return load_models(EngineConfig())


@pytest.fixture(scope="session")
def tokenizer(smollm):
    return smollm.tokenizer

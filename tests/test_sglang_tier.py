"""The SGLang tier (tests/sglang_tier) from the main suite.

sglang 0.5.23 pins torch 2.14.1, so it lives in its own venv (.ci/run builds
.venv-sglang; ADASERVE_SGLANG_PYTHON names another interpreter). This runs that tier there
as one test, so the README's one test command covers it; without such a venv it is
skipped, saying why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def sglang_python() -> str | None:
    for cand in (os.environ.get("ADASERVE_SGLANG_PYTHON"), ROOT / ".venv-sglang/bin/python"):
        if cand and Path(cand).exists():
            return str(cand)
    return None


@pytest.mark.slow
def test_sglang_tier():
    try:
        import sglang  # noqa: F401  # this interpreter has it: tests/sglang_tier runs here already
        pytest.skip("sglang is importable here: tests/sglang_tier is collected directly")
    except ImportError:
        pass
    py = sglang_python()
    if py is None:
        pytest.skip("no sglang venv (.venv-sglang or ADASERVE_SGLANG_PYTHON); .ci/run makes one")
    r = subprocess.run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/sglang_tier"],
                       cwd=ROOT, capture_output=True, text=True, timeout=3600)
    print(r.stdout[-6000:], file=sys.stderr)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert " passed" in r.stdout and " failed" not in r.stdout

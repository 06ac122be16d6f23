"""The SGLang tier: runs where the real sglang 0.5.23 is installed (its own venv: it pins
torch 2.14.1), and is skipped elsewhere (tests/test_sglang_tier.py runs it from the main
suite in that venv). SGLang's Triton tree kernels run here on the CPU through Triton's
interpreter, which has to be chosen before any kernel module is imported."""

import importlib.util
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

if importlib.util.find_spec("sglang") is None:
    collect_ignore_glob = ["test_*.py"]

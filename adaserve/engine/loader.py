"""Builds the target, the draft and the tokenizer an `EngineConfig` names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from adaserve.engine import kernels
from adaserve.engine.config import EngineConfig
from adaserve.engine.model import Llama, ModelConfig
from adaserve.engine.full_vocab import resolve_draft
from adaserve.engine.heap import keep_freed_memory
from adaserve.engine.weights import TOKEN_IDS_KEY, load_config, load_state, resolve_model


@dataclass(frozen=True, slots=True)
class Models:
    target: Llama
    draft: Llama | None
    draft_token_ids: torch.Tensor | None  # [V'] target ids of a reduced draft head
    tokenizer: object  # a transformers tokenizer
    eos_ids: frozenset[int]
    path: Path
    device: str


def pick_device(name: str) -> tuple[str, torch.dtype]:
    """fp32 on CPU (no fast bf16 on the dev machines), bf16 where a GPU supports it."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError("device cuda requested but no CUDA GPU is visible")
        return name, torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return "cpu", torch.float32


def load_models(cfg: EngineConfig) -> Models:
    from transformers import AutoTokenizer

    keep_freed_memory()  # before the weights: a process that runs a model reuses its pages
    device, dtype = pick_device(cfg.device)
    path = resolve_model(cfg.model)
    hf = load_config(path)
    mcfg = ModelConfig.from_hf(hf)
    state = load_state(path)
    # the compiled few-row matmuls (built once per machine); eager when off or unavailable
    skinny = cfg.fast_kernels and device == "cpu" and kernels.load().available
    target = Llama(mcfg, state, dtype=dtype, device=device, skinny=skinny)
    tok = AutoTokenizer.from_pretrained(str(path))
    draft, token_ids = None, None
    if cfg.draft == "target":
        draft = target
    elif cfg.draft is not None and cfg.draft.startswith("layers:"):
        draft = Llama(mcfg, state, layers=int(cfg.draft.split(":")[1]), dtype=dtype,
                      device=device, skinny=skinny)
    elif cfg.draft is not None:
        draft, token_ids = _load_draft(resolve_draft(cfg.draft), mcfg, state, tok, dtype, device,
                                       skinny)
    eos = set(cfg.stop_token_ids)
    for src in (hf.get("eos_token_id"), tok.eos_token_id):
        if isinstance(src, int):
            eos.add(src)
        elif isinstance(src, list):
            eos.update(src)
    return Models(target, draft, token_ids, tok, frozenset(eos), path, device)


def _load_draft(dpath: Path, mcfg: ModelConfig, target_state: dict, tok, dtype: torch.dtype,
                device: str, skinny: bool) -> tuple[Llama, torch.Tensor | None]:
    """A draft directory: any Hugging Face-format Llama-family model with the target's
    tokenizer, or one of ours (adaserve distill-draft) that borrows the target's input
    embeddings and has a head over a vocabulary subset."""
    hf = load_config(dpath)
    dcfg = ModelConfig.from_hf(hf)
    dstate = load_state(dpath)
    if (hf.get("adaserve_draft") or {}).get("shared_embeddings"):
        if dcfg.vocab != mcfg.vocab or dcfg.hidden != mcfg.hidden:
            raise ValueError(f"draft {dpath} shares embeddings of a {dcfg.vocab} x {dcfg.hidden} "
                             f"model, the target's are {mcfg.vocab} x {mcfg.hidden}")
        dstate = dict(dstate, **{"model.embed_tokens.weight": target_state["model.embed_tokens.weight"]})
    _check_tokenizer(dpath, dcfg, mcfg, tok)
    token_ids = None
    if TOKEN_IDS_KEY in dstate:
        token_ids = dstate[TOKEN_IDS_KEY].to(device=device, dtype=torch.int64)
        head = dstate["lm_head.weight"].shape[0]
        if token_ids.shape != (head,) or int(token_ids.min()) < 0 or int(token_ids.max()) >= mcfg.vocab:
            raise ValueError(f"draft {dpath}: {TOKEN_IDS_KEY} must hold {head} target ids in "
                             f"[0, {mcfg.vocab})")
    return Llama(dcfg, dstate, dtype=dtype, device=device, skinny=skinny), token_ids


def _check_tokenizer(dpath: Path, dcfg: ModelConfig, mcfg: ModelConfig, tok) -> None:
    """A draft must speak the target's token ids: same vocabulary size (embedding rows may be
    padded beyond the tokenizer), and the same vocabulary when the draft ships a tokenizer."""
    if dcfg.vocab < len(tok):
        raise ValueError(f"draft {dpath} has {dcfg.vocab} embedding rows, fewer than the "
                         f"target tokenizer's {len(tok)} tokens: it cannot share the tokenizer")
    if (dpath / "tokenizer.json").is_file() or (dpath / "tokenizer_config.json").is_file():
        from transformers import AutoTokenizer

        if AutoTokenizer.from_pretrained(str(dpath)).get_vocab() != tok.get_vocab():
            raise ValueError(f"draft {dpath} has a tokenizer different from the target's")

"""Builds the target, the draft and the tokenizer an `EngineConfig` names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from adaserve.engine.config import EngineConfig
from adaserve.engine.model import Llama, ModelConfig
from adaserve.engine.weights import load_config, load_state, resolve_model


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

    device, dtype = pick_device(cfg.device)
    path = resolve_model(cfg.model)
    hf = load_config(path)
    mcfg = ModelConfig.from_hf(hf)
    state = load_state(path)
    target = Llama(mcfg, state, dtype=dtype, device=device)
    draft, token_ids = None, None
    if cfg.draft == "target":
        draft = target
    elif cfg.draft is not None and cfg.draft.startswith("layers:"):
        draft = Llama(mcfg, state, layers=int(cfg.draft.split(":")[1]), dtype=dtype,
                      device=device)
    elif cfg.draft is not None:
        dpath = resolve_model(cfg.draft)
        dcfg = ModelConfig.from_hf(load_config(dpath))
        dstate = load_state(dpath)
        draft = Llama(dcfg, dstate, dtype=dtype, device=device)
        if "adaserve.token_ids" in dstate:  # a head over a vocabulary subset (issue 4)
            token_ids = dstate["adaserve.token_ids"].to(device=device, dtype=torch.int64)
    tok = AutoTokenizer.from_pretrained(str(path))
    eos = set(cfg.stop_token_ids)
    for src in (hf.get("eos_token_id"), tok.eos_token_id):
        if isinstance(src, int):
            eos.add(src)
        elif isinstance(src, list):
            eos.update(src)
    return Models(target, draft, token_ids, tok, frozenset(eos), path, device)

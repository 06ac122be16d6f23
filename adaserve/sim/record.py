"""The replay recorder: the real pair over real prompts (issue 17, `adaserve sim record`).

The target generates its own greedy continuation of every prompt, run by the engine
itself (incremental, so nothing but the target decides); then the draft reads each whole
sequence in one teacher-forced forward, and its top-K guesses at every continuation
position are kept with their log-probabilities.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence

import numpy as np
import torch

from adaserve.engine.batch import chunk_batch
from adaserve.engine.config import EngineConfig
from adaserve.engine.core import EngineCore
from adaserve.engine.kv_cache import KVCache
from adaserve.engine.loader import Models
from adaserve.engine.sampling import SamplingParams
from adaserve.sim.replay import Recording


def continuations(models: Models, prompts: Sequence[Sequence[int]], max_tokens: int,
                  max_batch: int = 32) -> list[list[int]]:
    """The target's greedy continuation of each prompt, max_tokens long (EOS ignored)."""
    target_only = dataclasses.replace(models, draft=None, draft_token_ids=None)
    longest = max(len(p) for p in prompts) + max_tokens + 1
    core = EngineCore(EngineConfig(policy="incremental", draft=None, max_context=longest,
                                   max_batch=max_batch, max_waiting=len(prompts)),
                      target_only)
    out: dict[str, list[int]] = {}
    for i, p in enumerate(prompts):
        core.add(str(i), list(p), SamplingParams(max_tokens=max_tokens, ignore_eos=True))
        out[str(i)] = []
    while core.has_work:
        for o in core.step():
            out[o.request_id].extend(o.token_ids)
    return [out[str(i)] for i in range(len(prompts))]


@torch.inference_mode()
def draft_guesses(models: Models, tokens: Sequence[int], n_prompt: int, top_k: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The draft's top-K ids and log-probs for tokens[n_prompt:], teacher-forced: [L, K]."""
    d = models.draft
    kv = KVCache(d.n_layers, 1, d.cfg.kv_heads, d.cfg.head_dim, len(tokens) + 1, d.dtype,
                 models.device)
    fb = chunk_batch(slice(0, 1), torch.zeros(1, dtype=torch.int64), [list(tokens[:-1])],
                     kv.trash_col, "all")
    logp = torch.log_softmax(d(kv, fb).float(), dim=-1)[n_prompt - 1:]  # [L, V']
    top = logp.topk(top_k, dim=-1)
    ids = top.indices if models.draft_token_ids is None else models.draft_token_ids[top.indices]
    return ids.cpu().numpy().astype(np.int64), top.values.cpu().numpy().astype(np.float32)


def record(models: Models, prompts: Sequence[Sequence[int]], max_tokens: int,
           top_k: int = 16, max_batch: int = 32, meta: dict | None = None) -> Recording:
    """A Recording of the real pair over ``prompts`` (token ids), max_tokens per prompt;
    record a few more than the simulated requests will output (a tree looks ahead)."""
    if models.draft is None:
        raise ValueError("recording needs a draft model")
    conts = continuations(models, prompts, max_tokens, max_batch)
    tokens, ids, logp = [], [], []
    for p, c in zip(prompts, conts):
        seq = list(p) + c
        i, lp = draft_guesses(models, seq, len(p), top_k)
        tokens.append(np.array(seq, np.int64))
        ids.append(i)
        logp.append(lp)
    info = {"top_k": top_k, "temperature": 0.0, "max_tokens": max_tokens,
            "date": dt.date.today().isoformat(), **(meta or {})}
    return Recording(info, [tuple(p) for p in prompts], tokens, ids, logp)

"""`adaserve bench --experiment context-grid`: speculative decoding against incremental on
a batch x context grid (MagicDec, seed 001: where verification is nearly free because the
KV cache, not the weights, dominates a decode step), for several draft forms, in-process
on the embedded engine.

Each cell (batch b, context c) decodes b requests whose prompts hold c - new tokens, to
``new`` output tokens each (greedy), once per form, round robin over the forms for each
repeat; a form's rate is output tokens / seconds over the iterations that decoded and
prefilled nothing, median over the repeats. Every form must emit incremental's tokens.

The prompts' K/V is computed once per prompt and copied into each cell's slots
(`PrefilledExecutor`): prefilling 16 x 8k tokens for every cell and form would take most
of the run and is not what the grid compares. The bounded distilled draft gets the K/V its
own windowed prefill makes (the prompt fed in pieces of W, as the engine does with a
prefill chunk >= the prompt); the self-draft copies the target's (what the engine does).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from adaserve.engine import EngineConfig, SamplingParams
from adaserve.engine.batch import chunk_batch
from adaserve.engine.core import EngineCore, max_tree_nodes
from adaserve.engine.draft_window import DraftWindow
from adaserve.engine.executor import Drafted, PrefillChunk, VerifyResult
from adaserve.engine.kv_cache import KVCache
from adaserve.engine.loader import Models, load_models
from adaserve.engine.torch_executor import TorchExecutor
from adaserve.engine.weights import DEFAULT_DRAFT
from adaserve.loadgen.long_prompts import long_prompts
from adaserve.scheduler import SchedulerConfig

# the forms the grid compares: name -> (draft, bounded KV?)
FORMS = {"incremental": (None, False), "distilled-full": (DEFAULT_DRAFT, False),
         "distilled-window": (DEFAULT_DRAFT, True), "self-window": ("target", True)}
DISTINCT_PROMPTS = 2  # prompts per context (each 8k one costs minutes to prefill); a batch cycles them


@dataclass(frozen=True, slots=True)
class Donor:
    """The K/V one prompt leaves in each cache (one slot each), computed once."""

    length: int  # prompt tokens prefilled: all but the last (the first tree's root)
    target: KVCache
    draft: KVCache  # the distilled draft, whole context
    ring: KVCache  # the distilled draft through its window


def _cache(m, cols: int) -> KVCache:
    return KVCache(m.n_layers, 1, m.cfg.kv_heads, m.cfg.head_dim, cols, m.dtype, m.device)


def make_donor(models: Models, prompt: list[int], window: DraftWindow, chunk: int = 512) -> Donor:
    n = len(prompt) - 1
    target, draft = _cache(models.target, n + 1), _cache(models.draft, n + 1)
    for s in range(0, n, chunk):
        piece = [prompt[s: min(s + chunk, n)]]
        models.target(target, chunk_batch(slice(0, 1), torch.tensor([s]), piece, n, "none"))
        models.draft(draft, chunk_batch(slice(0, 1), torch.tensor([s]), piece, n, "none"))
    return Donor(n, target, draft, window_donor(models, prompt[:n], window))


def window_donor(models: Models, prefilled: list[int], window: DraftWindow) -> KVCache:
    """The distilled draft's window after its own prefill of ``prefilled`` (the prompt
    but its last token), fed in pieces of W."""
    ring = _cache(models.draft, window.slot_len(1))
    window.feed(models.draft, ring, slice(0, 1), torch.tensor([0]), [prefilled], False)
    return ring


class PrefilledExecutor(TorchExecutor):
    """TorchExecutor whose prefill copies each prompt's K/V from its `Donor`, and which
    times its draft and verify calls."""

    def __init__(self, cfg: EngineConfig, models: Models, max_tree: int, *, use_draft: bool,
                 donors: dict[tuple[int, ...], Donor]) -> None:
        super().__init__(cfg, models, max_tree, use_draft=use_draft)
        self.donors = donors
        self.draft_s: list[tuple[float, int]] = []  # (seconds, draft forwards) per iteration
        self.verify_s: list[float] = []

    def prefill(self, chunks: Sequence[PrefillChunk]) -> None:
        for c in chunks:
            d = self.donors[tuple(c.tokens)]
            if c.start != 0 or len(c.tokens) != d.length:
                raise ValueError("the grid prefills each prompt whole, in one chunk")
            n, i = d.length, c.slot
            _copy(self.kv, i, d.target, n)
            if self.draft_kv is None:
                continue
            if self.window is None:
                _copy(self.draft_kv, i, d.draft, n)
            elif self.models.draft is self.models.target:
                self._copy_from_target([c])
            else:
                _copy(self.draft_kv, i, d.ring, self.window.used(n))
            self.draft_len[i] = n

    def draft(self, reqs, plan) -> Drafted:
        t = time.perf_counter()
        out = super().draft(reqs, plan)
        self.draft_s.append((time.perf_counter() - t, plan.depth))
        return out

    def verify(self, reqs, candidates, mask, drafted) -> VerifyResult:
        t = time.perf_counter()
        out = super().verify(reqs, candidates, mask, drafted)
        self.verify_s.append(time.perf_counter() - t)
        return out


def _copy(dst: KVCache, slot: int, src: KVCache, cols: int) -> None:
    dst.k[:, slot, :, :cols] = src.k[:, 0, :, :cols]
    dst.v[:, slot, :, :cols] = src.v[:, 0, :, :cols]


@dataclass(frozen=True, slots=True)
class GridSettings:
    policy: str  # the speculative forms' policy (a static chain: MagicDec's fixed gamma)
    new: int  # output tokens per request
    window: int
    sinks: int


def run_cell(models: Models, forms: list[str], prompts: list[list[int]], context: int,
             donors: dict, s: GridSettings) -> dict[str, dict]:
    """One run of every form on b = len(prompts) requests; per form: rate, tokens, times."""
    out = {}
    for name in forms:
        draft, bounded = FORMS[name]
        cfg = EngineConfig(policy="incremental" if draft is None else s.policy,
                           draft=draft, max_batch=len(prompts), max_context=context,
                           kv_cache_mb="auto", prefill_chunk=len(prompts) * context,
                           draft_window=s.window if bounded else None, draft_sinks=s.sinks)
        m = models if draft != "target" else dataclasses.replace(
            models, draft=models.target, draft_token_ids=None)
        sched = SchedulerConfig(budget=1, max_depth=cfg.max_depth, max_width=cfg.max_width)
        ex = PrefilledExecutor(cfg, m, max_tree_nodes(sched), use_draft=draft is not None,
                               donors=donors)
        core = EngineCore(cfg, executor=ex)
        if core.n_slots < len(prompts):
            raise RuntimeError(f"{core.n_slots} KV slots for a batch of {len(prompts)}")
        params = SamplingParams(max_tokens=s.new, ignore_eos=True)
        tokens = {}
        for i, p in enumerate(prompts):
            core.add(f"r{i}", p, params)
            tokens[f"r{i}"] = []
        while core.has_work:
            for o in core.step():
                tokens[o.request_id].extend(o.token_ids)
        decode = [st for st in core.stats if st.prefill_tokens == 0]
        secs, emitted = sum(st.seconds for st in decode), sum(st.emitted_tokens for st in decode)
        # MagicDec's reading: throughput at the batch size, while every request decodes (a
        # speculative form's requests finish apart, and its last iterations run fewer)
        full = [st for st in decode if st.running == len(prompts)]
        full_s = sum(st.seconds for st in full)
        steps = sum(st.running for st in core.stats)
        per_step = [t / max(d, 1) for t, d in ex.draft_s if d > 0]
        out[name] = {
            "tok_s": emitted / secs, "tokens": [tokens[f"r{i}"] for i in range(len(prompts))],
            "tok_s_full": sum(st.emitted_tokens for st in full) / full_s if full else None,
            "full_iterations": len(full), "decode_iterations": len(decode),
            "accepted_per_step": sum(st.emitted_tokens for st in core.stats) / steps,
            "draft_step_ms": statistics.median(per_step) * 1e3 if per_step else None,
            "verify_ms": statistics.median(ex.verify_s) * 1e3,
            "iterations": len(core.stats)}
        del core, ex
    return out


def run_grid(batches: list[int], contexts: list[int], forms: list[str], repeats: int,
             seed: int, s: GridSettings, on_cell=None, log=print) -> list[dict]:
    """Every (batch, context) cell: its forms' medians over ``repeats`` round-robin runs;
    ``on_cell(cells so far)`` after each, so a stopped piece keeps what it measured."""
    cfg = EngineConfig(policy=s.policy, draft=DEFAULT_DRAFT)
    models = load_models(cfg)
    window = DraftWindow(s.sinks, s.window)
    cells = []
    for c in contexts:
        t0 = time.perf_counter()
        prompts = long_prompts(models.tokenizer, c - s.new, DISTINCT_PROMPTS, seed)
        donors = {tuple(p[:-1]): make_donor(models, p, window) for p in prompts}
        log(f"[context-grid] context {c}: {len(prompts)} prompts prefilled in "
            f"{time.perf_counter() - t0:.0f} s")
        for b in batches:
            batch = [prompts[i % len(prompts)] for i in range(b)]
            runs = [run_cell(models, forms, batch, c, donors, s) for _ in range(repeats)]
            cell = {"batch": b, "context": c, "forms": {}}
            ref = runs[0][forms[0]]["tokens"]
            for f in forms:
                rs = [r[f] for r in runs]
                cell["forms"][f] = {
                    "tok_s": statistics.median(r["tok_s"] for r in rs),
                    "tok_s_runs": [r["tok_s"] for r in rs],
                    "tok_s_full": _median([r["tok_s_full"] for r in rs]),
                    "tok_s_full_runs": [r["tok_s_full"] for r in rs],
                    "full_iterations": [r["full_iterations"] for r in rs],
                    "decode_iterations": [r["decode_iterations"] for r in rs],
                    "accepted_per_step": statistics.median(r["accepted_per_step"] for r in rs),
                    "draft_step_ms": _median([r["draft_step_ms"] for r in rs]),
                    "verify_ms": statistics.median(r["verify_ms"] for r in rs),
                    "identical": all(r["tokens"] == ref for r in rs)}
            cells.append(cell)
            if on_cell is not None:
                on_cell(cells)
            log(f"[context-grid] batch {b} context {c}: " + ", ".join(
                f"{f} {v['tok_s']:.1f} tok/s{'' if v['identical'] else ' (DIFFERS)'}"
                for f, v in cell["forms"].items()))
        del donors
    return cells


def _median(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def merge(path: Path, meta: dict, cells: list[dict]) -> dict:
    """Add this run's cells to the kept ones in ``path`` (a cell measured again replaces
    its old self), so the grid can be run in pieces that each fit a short exclusive slot."""
    kept = json.loads(path.read_text()) if path.is_file() else {"runs": [], "cells": []}
    # the same run saving again after its next cell replaces its own entry
    kept["runs"] = [r for r in kept["runs"] if r["date"] != meta["date"]]
    for c in cells:
        c["run"] = len(kept["runs"])
    new = {(c["batch"], c["context"]) for c in cells}
    kept["cells"] = [c for c in kept["cells"] if (c["batch"], c["context"]) not in new] + cells
    kept["cells"].sort(key=lambda c: (c["batch"], c["context"]))
    kept["runs"].append(meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(kept, indent=1, default=_plain))
    return kept


def _plain(x):
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(type(x))

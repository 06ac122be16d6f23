"""`adaserve profile`: measure this machine, write the profile the engine and server load.

- B: the largest token count whose target forward costs <= 1.15x a one-token forward
  (scheduler.latency.budget_by_ratio; seed 002 §3 asks for the tokens a forward takes
  before it stops being memory-bound). The hinge knee is recorded beside it, for reading.
- Latency models T = a*N_ctx + g*N_tok + c for one target forward and one draft step
  (seed 000 Eq. 3), fitted on a grid of batch size x tokens per request x context.
- Baseline latency: the minimal per-iteration latency of `incremental` at batch 8,
  input 32, output 128 (seed 002 §6.1).
- The context table (scheduler/context_cost.py): one forward's seconds over requests x
  tokens per request x context per request, up to the engine's max_context, for the target
  and the draft; B at each context by the same ratio rule (docs/engine.md, "The
  context-aware budget"). A draft with a bounded window (EngineConfig.draft_window) is
  timed as it runs: it reads at most sinks + window cached tokens whatever the context.
"""

from __future__ import annotations

import datetime
import itertools
import platform
import statistics
import time
from dataclasses import replace

import numpy as np
import torch

from adaserve.engine.batch import chain_batch
from adaserve.engine.config import EngineConfig, names_a_draft
from adaserve.engine.core import EngineCore
from adaserve.engine.kv_cache import KVCache
from adaserve.engine.loader import Models, load_models
from adaserve.engine.model import Llama
from adaserve.engine.profile_data import Profile, default_profile_path
from adaserve.engine.sampling import SamplingParams
from adaserve.scheduler import (ContextTable, LatencyModel, budget_by_ratio, budget_table,
                                budget_table_text, find_knee)

# Token counts of the budget curve; up to 8 they are requests of one token each, past 8
# eight requests share them (8 x 2, 8 x 3, ...), as a verify batch spreads its budget.
KNEE_TOKENS = (1, 2, 4, 6, 8, 16, 24, 32, 48, 64, 96, 128)


def _chain_batch(kv: KVCache, n: int, q: int, ctx: int):
    """A forward batch of n requests x q chained tokens after ctx cached ones."""
    return chain_batch(n, q, ctx, kv.trash_col)


def _time_once(model: Llama, kv: KVCache, fb) -> float:
    t = time.perf_counter()
    model(kv, fb)
    return time.perf_counter() - t


def time_forward(model: Llama, kv: KVCache, n: int, q: int, ctx: int, repeats: int) -> float:
    """Median seconds of one forward: n requests x q chained tokens after ctx cached ones."""
    fb = _chain_batch(kv, n, q, ctx)
    model(kv, fb)  # warm-up
    return statistics.median(_time_once(model, kv, fb) for _ in range(repeats))


# The context table's grid: requests, tokens per request (a verify's chain), contexts per
# request (capped by max_context). The quick one, at start-up, keeps the short contexts:
# an 8k point costs a second or more per forward on 2 cores; past its 2,048 the table is
# extrapolated along its last segment.
TABLE_GRID = ((1, 4, 8), (1, 2, 4, 8), (64, 512, 2048, 4096, 8192))
QUICK_TABLE_GRID = ((1, 8), (1, 2, 4), (64, 2048))
# Timed repetitions per table point at most: its long forwards vary little against their
# length, and three keep the 8k points of a full profile near a minute on 2 cores.
TABLE_REPEATS = 3


def read_cap(cfg: EngineConfig, model_is_draft: bool) -> int | None:
    """Cached tokens a forward reads at most: a bounded draft's sinks + window, else None."""
    if model_is_draft and cfg.draft_window is not None:
        return cfg.draft_sinks + cfg.draft_window
    return None


def _latency_grid(model: Llama, repeats: int, quick: bool, cap: int | None = None) -> dict:
    """Samples for the linear model; ``cap``: time each point over at most that many cached
    tokens (a bounded draft), recorded at its full context as the engine will ask."""
    ns, qs, ctxs = ((1, 4, 8), (1, 4, 16), (32, 256)) if quick else \
        ((1, 2, 4, 8, 16), (1, 2, 4, 8, 16), (32, 256, 768))
    kv, read = _timing_cache(model, ns, qs, ctxs, cap)
    rows = []
    for n in ns:
        for q in qs:
            for c in ctxs:
                rows.append((n * c, n * q, time_forward(model, kv, n, q, read(c), repeats)))
    ctx, tok, sec = zip(*rows)
    return {"context_tokens": list(ctx), "batch_tokens": list(tok), "seconds": list(sec)}


def _timing_cache(model: Llama, ns, qs, ctxs, cap: int | None):
    """A KV cache for timing a grid of n requests x q tokens over c cached tokens, and the
    cached tokens a point at context c reads: c, or at most ``cap`` (a bounded draft)."""
    read = (lambda c: c) if cap is None else (lambda c: min(c, cap))
    kv = KVCache(model.n_layers, max(ns), model.cfg.kv_heads, model.cfg.head_dim,
                 read(max(ctxs)) + max(qs) + 2, model.dtype, model.device)
    return kv, read


def context_table(model: Llama, repeats: int, max_context: int, quick: bool = False,
                  cap: int | None = None) -> ContextTable:
    """One forward's median seconds over TABLE_GRID (QUICK_TABLE_GRID), contexts capped so
    context + tokens fits ``max_context``; ``cap``: a bounded draft's read (``read_cap``),
    so its points past the window are timed at the window, flat as it runs."""
    ns, qs, cs = QUICK_TABLE_GRID if quick else TABLE_GRID
    ctxs = sorted({max(1, min(c, max_context - max(qs))) for c in cs})
    kv, read = _timing_cache(model, ns, qs, ctxs, cap)
    sec = np.empty((len(ns), len(qs), len(ctxs)))  # [n, q, c]
    for (i, n), (j, q), (k, c) in itertools.product(enumerate(ns), enumerate(qs),
                                                    enumerate(ctxs)):
        sec[i, j, k] = time_forward(model, kv, n, q, read(c), min(repeats, TABLE_REPEATS))
    return ContextTable.measured(ns, qs, ctxs, sec)


def _knee_curve(model: Llama, repeats: int, stop_ratio: float | None = None) -> dict:
    """Median latency of one forward against tokens (KNEE_TOKENS), at 64 context.

    The budget is a ratio against the one-token forward, so every count is timed in
    round robin: a burst of load from elsewhere on the machine lands on all counts alike
    instead of inflating one of them (a slow one-token median once made B = 32 look
    free). stop_ratio: measure no count past the first that costs more than this many
    one-token forwards (the budget rule needs nothing beyond; the start-up profile thus
    skips the slowest forwards).
    """
    kv = KVCache(model.n_layers, 8, model.cfg.kv_heads, model.cfg.head_dim, 64 + 16 + 2,
                 model.dtype, model.device)
    batches = {}
    for k in KNEE_TOKENS:
        n = min(8, k)
        batches[k] = _chain_batch(kv, n, k // n, 64)
        first = _time_once(model, kv, batches[k])  # the warm-up, and where to stop
        if k == KNEE_TOKENS[0]:
            one = first
        if stop_ratio is not None and len(batches) >= 4 and first > stop_ratio * one:
            break
    times: dict[int, list[float]] = {k: [] for k in batches}
    for _ in range(repeats):
        for k, fb in batches.items():
            times[k].append(_time_once(model, kv, fb))
    return {"tokens": list(times), "seconds": [statistics.median(t) for t in times.values()]}


def baseline_latency(cfg: EngineConfig, models: Models, output: int = 128) -> float:
    """Min decode-iteration seconds of incremental: batch 8, input 32, output 128 (fewer
    output tokens give a quicker, slightly noisier estimate: the server's start-up)."""
    core = EngineCore(replace(cfg, policy="incremental", max_batch=8), models)
    for i in range(8):
        core.add(f"b{i}", [100 + i] * 32, SamplingParams(max_tokens=output, ignore_eos=True))
    while core.has_work:
        core.step()
    decode = [s.seconds for s in core.stats if s.prefill_tokens == 0 and s.running == 8]
    return min(decode)


STARTUP_REPEATS = 3  # the start-up profile's timed repetitions per point
# Budget curves a profile takes B from, as their median. On the dev CPU the forward of 4-8
# tokens costs 1.03-1.17x a one-token one, at the rule's 1.15, so one curve gave any B
# from 2 to 8 (results/startup_budget.md); more repeats within a curve did not narrow it,
# the machine drifts between the counts. The median of curves timed apart does.
PROFILE_CURVES = 5


def run_profile(cfg: EngineConfig, repeats: int = 5, quick: bool = False, log=print,
                models: Models | None = None, curves: int = PROFILE_CURVES,
                table_context: int | None = None) -> Profile:
    """Measure a profile. ``quick``: a smaller latency grid, and a budget curve that stops
    once a forward costs twice a one-token one (what `adaserve serve` runs at start-up
    when no profile is saved). ``models``: already loaded ones, else they are loaded.
    B is the median of ``curves`` budget curves' (the lower one of an even count); their
    Bs are kept as ``samples["budget_curves"]``, the spread. ``table_context``: the context
    table's longest context (None: ``cfg.max_context``, what the server will admit)."""
    if curves < 1:
        raise ValueError(f"curves must be >= 1, got {curves}")
    models = models or load_models(cfg)
    log(f"timing target forward against tokens (the budget, {curves} curves)...")
    measured = [_knee_curve(models.target, repeats, stop_ratio=2.0 if quick else None)
                for _ in range(curves)]
    budgets = [budget_by_ratio(c["tokens"], c["seconds"]) for c in measured]
    median = sorted(range(curves), key=lambda i: budgets[i].tokens)[(curves - 1) // 2]
    curve, budget = measured[median], budgets[median]
    knee = find_knee(curve["tokens"], curve["seconds"], min_bend=1.5)
    log("fitting the target latency model...")
    grid = _latency_grid(models.target, repeats, quick)
    target = LatencyModel.fit(grid["context_tokens"], grid["batch_tokens"], grid["seconds"])
    draft_model, draft_grid, draft_table = None, None, None
    if models.draft is not None:
        log("fitting the draft latency model...")
        draft_grid = _latency_grid(models.draft, repeats, quick, read_cap(cfg, True))
        draft_model = LatencyModel.fit(draft_grid["context_tokens"], draft_grid["batch_tokens"],
                                       draft_grid["seconds"])
    longest = table_context or cfg.max_context
    log(f"timing the forward against context, up to {longest} tokens...")
    t0 = time.perf_counter()
    target_table = context_table(models.target, repeats, longest, quick)
    if models.draft is not None:
        draft_table = context_table(models.draft, repeats, longest, quick, read_cap(cfg, True))
    table_s = time.perf_counter() - t0
    out = 16 if quick else 128
    log(f"measuring the baseline latency (incremental, batch 8, in 32, out {out})...")
    base = baseline_latency(cfg, models, output=out)
    return Profile(
        model=cfg.model, draft=cfg.draft, budget=budget.tokens, knee_found=bool(knee.found),
        target=target, draft_model=draft_model, baseline_latency_s=base,
        machine=f"{platform.node()} {platform.machine()} {platform.processor() or ''} "
                f"{torch.get_num_threads()} threads, torch {torch.__version__}, {models.device}",
        date=datetime.date.today().isoformat(),
        samples={"knee": curve, "target": grid, "draft": draft_grid,
                 "target_r2": target.r2(grid["context_tokens"], grid["batch_tokens"],
                                        grid["seconds"]),
                 "budget_ratio": budget.ratio, "hinge_knee_tokens": knee.tokens,
                 "budget_curves": [b.tokens for b in budgets], "context_table_s": table_s,
                 "draft_read_cap": read_cap(cfg, True)},
        budget_rule=f"ratio<={budget.max_ratio:g}", target_table=target_table,
        draft_table=draft_table)


def budget_by_context(prof: Profile) -> str:
    """"B by context: 64: 8, 2048: 4, ..." from the profile's target table; "" without one."""
    return "" if prof.target_table is None else budget_table_text(budget_table(prof.target_table))


def budget_spread(prof: Profile) -> str:
    """How far B moved over the curves it is the median of: "the median of 5 curves,
    B 4-8 (4, 6, 6, 6, 8)"; a profile of one curve (or saved before curves) says so."""
    bs = sorted(prof.samples.get("budget_curves") or [prof.budget])
    if len(bs) == 1:
        return "one curve, no spread measured"
    return (f"the median of {len(bs)} curves, B {bs[0]}-{bs[-1]} "
            f"({', '.join(map(str, bs))})")


def main(args) -> int:
    cfg = EngineConfig(model=args.model, draft=args.draft,
                       policy="adaserve" if names_a_draft(args.model, args.draft) else "incremental",
                       device=args.device, draft_window=args.draft_window,
                       draft_sinks=args.draft_sinks)
    models = load_models(cfg)
    # the context table reaches the model's own context unless told less (the baseline's
    # engine keeps the default max_context: its KV pool must hold 8 requests)
    prof = run_profile(cfg, repeats=args.repeats, quick=args.quick, curves=args.curves,
                       models=models,
                       table_context=args.max_context or models.target.cfg.max_positions)
    out = args.out or default_profile_path(cfg.model, cfg.draft)
    prof.save(out)
    print(f"budget B = {prof.budget} tokens ({budget_spread(prof)}): its forward costs "
          f"{prof.samples['budget_ratio']:.2f}x a one-token forward (rule: {prof.budget_rule}); "
          f"hinge knee at {prof.samples['hinge_knee_tokens']} tokens"
          f"{'' if prof.knee_found else ' (no bend found)'}")
    t = prof.target
    print(f"target forward: {t.alpha * 1e6:.3f} us/context token, {t.gamma * 1e3:.3f} ms/token, "
          f"{t.delta * 1e3:.2f} ms fixed (R^2 {prof.samples['target_r2']:.3f})")
    if prof.draft_model is not None:
        d = prof.draft_model
        print(f"draft step: {d.alpha * 1e6:.3f} us/context token, {d.gamma * 1e3:.3f} ms/token, "
              f"{d.delta * 1e3:.2f} ms fixed")
    print(f"baseline latency: {prof.baseline_latency_s * 1e3:.1f} ms per iteration")
    if prof.target_table is not None:
        print(f"{budget_by_context(prof)} (the ratio rule on the context table, measured in "
              f"{prof.samples['context_table_s']:.0f} s)")
    print(f"wrote {out}")
    return 0

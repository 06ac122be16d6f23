"""Embedded engine throughput against Hugging Face transformers, side by side in one run.

1. Plain decode tokens/s at batch 1, 8, 32: our engine (`incremental`) vs transformers
   `generate` on the same weights, same prompts, greedy, the same number of new tokens.
   Two figures on both sides, measured the same way: end to end (prefill included:
   b * new / T(new)) and decode only (b * (new - 1) / (T(new) - T(1)), i.e. the time the
   new - 1 tokens after the first cost; prefill is the same compute-bound work for both).
2. Batch-1 decode step as a fraction of the memory-bandwidth limit
   (weight bytes / measured read bandwidth).
3. Speculative (`adaserve`, the given draft, the machine's profile for the pair when one
   exists) vs `incremental` at batch 1 and 8, for each budget B in --budgets with the
   cost-aware depth, and with Eq. 8's depth as published (cost_aware_depth off) at the
   largest B, so the effect of pricing the draft shows side by side.
4. Peak resident memory of this process after batch 32.
Interleaved rounds, medians. Prints a table, writes results/engine.{md,json}.

    python benchmarks/engine.py [--rounds 3] [--new-tokens 64] [--budgets 4 16]
"""

from __future__ import annotations

import argparse
import datetime as dt
import resource
import statistics
import sys
import time

import torch
from _common import commit, machine, write_results

from adaserve.engine import EngineConfig, SamplingParams
from adaserve.engine.core import EngineCore
from adaserve.engine.engine import encode_chat, load_profile
from adaserve.engine.loader import load_models
from adaserve.engine.weights import DEFAULT_DRAFT

PROMPTS = [
    "Write a short story about a robot who learns to paint.",
    "Explain how a refrigerator works to a ten year old.",
    "List five ideas for a weekend trip near the mountains.",
    "What are the main differences between Python and C?",
    "Describe the water cycle in a few sentences.",
    "Give me a recipe for a simple tomato soup.",
    "Why is the sky blue? Answer briefly.",
    "Summarize the plot of a detective novel you invent.",
]


def chat_ids(tok, i: int) -> list[int]:
    return encode_chat(tok, [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}])


def run_engine(core: EngineCore, prompts: list[list[int]], new: int) -> tuple[float, list]:
    for i, p in enumerate(prompts):
        core.add(f"q{time.monotonic_ns()}-{i}", p, SamplingParams(max_tokens=new, ignore_eos=True))
    n0 = len(core.stats)
    t = time.perf_counter()
    while core.has_work:
        core.step()
    return time.perf_counter() - t, list(core.stats)[n0:]


def run_hf(hf, tok, prompts: list[list[int]], new: int) -> float:
    width = max(len(p) for p in prompts)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    att = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    t = time.perf_counter()
    with torch.inference_mode():
        out = hf.generate(input_ids=ids, attention_mask=att, max_new_tokens=new,
                          min_new_tokens=new, do_sample=False, pad_token_id=pad)
    dt_ = time.perf_counter() - t
    assert out.shape[1] == width + new
    return dt_


def read_bandwidth() -> float:
    x = torch.ones(128 * 2**20)  # 512 MiB, larger than any cache
    x.sum()
    times = []
    for _ in range(5):
        t = time.perf_counter()
        x.sum()
        times.append(time.perf_counter() - t)
    return x.numel() * 4 / min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--draft", default=DEFAULT_DRAFT)
    ap.add_argument("--budgets", type=int, nargs="+", default=[4, 16])
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM

    inc_cfg = EngineConfig(max_batch=max(args.batches), kv_cache_mb=4096)
    models = load_models(inc_cfg)
    tok = models.tokenizer
    hf = AutoModelForCausalLM.from_pretrained(str(models.path), dtype=torch.float32).eval()
    inc = EngineCore(inc_cfg, models)
    # speculative variants: (label, B, cost-aware depth)
    variants = [(f"B={b}", b, True) for b in args.budgets]
    variants.append((f"B={max(args.budgets)}, Eq. 8 depth", max(args.budgets), False))
    spec_models, prof = None, None
    specs = {}
    for label, b, aware in variants:
        cfg = EngineConfig(policy="adaserve", draft=args.draft, budget=b, max_batch=8,
                           kv_cache_mb=2048, cost_aware_depth=aware)
        spec_models = spec_models or load_models(cfg)
        prof = prof or load_profile(cfg)
        specs[label] = EngineCore(cfg, spec_models, prof)
    new = args.new_tokens
    ours: dict[int, list[float]] = {b: [] for b in args.batches}
    theirs: dict[int, list[float]] = {b: [] for b in args.batches}
    ours_dec: dict[int, list[float]] = {b: [] for b in args.batches}
    theirs_dec: dict[int, list[float]] = {b: [] for b in args.batches}
    spec_t = {(v, b): [] for v in specs for b in (1, 8)}
    inc_t: dict[int, list[float]] = {1: [], 8: []}
    step_b1: list[float] = []
    accepted = {k: [] for k in spec_t}
    depths = {k: [] for k in spec_t}
    for r in range(args.rounds):
        for b in args.batches:
            prompts = [chat_ids(tok, i) for i in range(b)]
            sec, stats = run_engine(inc, prompts, new)
            first, _ = run_engine(inc, prompts, 1)
            ours[b].append(b * new / sec)
            ours_dec[b].append(b * (new - 1) / (sec - first))
            if b == 1:
                step_b1.extend(s.seconds for s in stats if s.prefill_tokens == 0)
            sec, first = run_hf(hf, tok, prompts, new), run_hf(hf, tok, prompts, 1)
            theirs[b].append(b * new / sec)
            theirs_dec[b].append(b * (new - 1) / (sec - first))
            print(f"round {r} batch {b}: ours {ours[b][-1]:.1f} tok/s ({ours_dec[b][-1]:.1f} "
                  f"decode), transformers {theirs[b][-1]:.1f} tok/s ({theirs_dec[b][-1]:.1f} "
                  f"decode)", flush=True)
        for b in (1, 8):
            prompts = [chat_ids(tok, i) for i in range(b)]
            sec, _ = run_engine(inc, prompts, new)
            inc_t[b].append(b * new / sec)
            for v, core in specs.items():
                sec, stats = run_engine(core, prompts, new)
                k = (v, b)
                spec_t[k].append(b * new / sec)
                accepted[k].append(sum(s.emitted_tokens for s in stats) /
                                   sum(s.running for s in stats))
                depths[k].extend(s.depth for s in stats if s.running)
                print(f"round {r} batch {b}: incremental {inc_t[b][-1]:.1f} tok/s, adaserve "
                      f"{v} {spec_t[k][-1]:.1f} tok/s ({accepted[k][-1]:.2f} tokens/step)",
                      flush=True)
    bw = read_bandwidth()
    limit = models.target.weight_bytes() / bw
    med = statistics.median
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows = [{"batch": b, "ours_tok_s": med(ours[b]), "transformers_tok_s": med(theirs[b]),
             "ratio": med(ours[b]) / med(theirs[b]), "ours_decode_tok_s": med(ours_dec[b]),
             "transformers_decode_tok_s": med(theirs_dec[b]),
             "decode_ratio": med(ours_dec[b]) / med(theirs_dec[b])} for b in args.batches]
    spec_rows = [{"batch": b, "variant": v, "incremental_tok_s": med(inc_t[b]),
                  "adaserve_tok_s": med(spec_t[(v, b)]),
                  "speedup": med(spec_t[(v, b)]) / med(inc_t[b]),
                  "tokens_per_step": med(accepted[(v, b)]),
                  "mean_depth": statistics.fmean(depths[(v, b)])}
                 for b in (1, 8) for v in specs]
    result = {
        "command": "python " + " ".join(sys.argv), "machine": machine(),
        "torch": torch.__version__, "date": dt.date.today().isoformat(),
        "commit": commit(),
        "new_tokens": new, "rounds": args.rounds, "draft": args.draft,
        "profile": None if prof is None else {"date": prof.date, "knee_found": prof.knee_found,
                                              "draft_priced": prof.draft_model is not None},
        "decode": rows, "speculative": spec_rows,
        "batch1_step_s": med(step_b1), "read_bandwidth_gb_s": bw / 1e9,
        "weight_bytes": models.target.weight_bytes(), "bandwidth_limit_step_s": limit,
        "bandwidth_fraction": limit / med(step_b1), "peak_rss_mb": peak_mb,
    }
    write(result)
    return 0


def write(res: dict) -> None:
    lines = [
        "# Embedded engine throughput", "",
        f"- command: `{res['command']}`", f"- machine: {res['machine']}, torch {res['torch']}",
        f"- date: {res['date']}, commit {res['commit']}; medians of {res['rounds']} interleaved "
        f"rounds, {res['new_tokens']} new tokens per request, greedy, chat prompts", "",
        "## Plain decode (incremental) vs transformers generate", "",
        "End to end = b * new / T(new), prefill included; decode only = b * (new - 1) / "
        "(T(new) - T(1)), the same definition on both sides.", "",
        "| batch | ours tok/s | transformers tok/s | ratio | ours decode tok/s | "
        "transformers decode tok/s | decode ratio |", "|---|---|---|---|---|---|---|",
    ]
    for r in res["decode"]:
        lines.append(f"| {r['batch']} | {r['ours_tok_s']:.1f} | {r['transformers_tok_s']:.1f} | "
                     f"{r['ratio']:.2f}x | {r['ours_decode_tok_s']:.1f} | "
                     f"{r['transformers_decode_tok_s']:.1f} | {r['decode_ratio']:.2f}x |")
    lines += [
        "", "## Batch-1 decode against the memory-bandwidth limit", "",
        f"- weights {res['weight_bytes'] / 1e6:.0f} MB, measured read bandwidth "
        f"{res['read_bandwidth_gb_s']:.1f} GB/s -> limit {res['bandwidth_limit_step_s'] * 1e3:.1f} ms",
        f"- measured batch-1 decode iteration {res['batch1_step_s'] * 1e3:.1f} ms -> "
        f"{100 * res['bandwidth_fraction']:.0f}% of the bandwidth limit", "",
        f"## Speculative (adaserve, draft `{res['draft']}`) vs incremental", "",
        _profile_line(res["profile"]), "",
        "| batch | adaserve shape | incremental tok/s | adaserve tok/s | speedup | tokens/step "
        "| mean depth |", "|---|---|---|---|---|---|---|",
    ]
    for r in res["speculative"]:
        lines.append(f"| {r['batch']} | {r['variant']} | {r['incremental_tok_s']:.1f} | "
                     f"{r['adaserve_tok_s']:.1f} | {r['speedup']:.2f}x | "
                     f"{r['tokens_per_step']:.2f} | {r['mean_depth']:.1f} |")
    lines += ["", f"Peak resident memory of the benchmark process (engine + transformers model "
                  f"loaded, after batch 32): {res['peak_rss_mb']:.0f} MB", ""]
    text = "\n".join(lines)
    write_results("engine", text, res)


def _profile_line(p: dict | None) -> str:
    if p is None:
        return ("No profile for this pair: every depth is priced the same, so the cost-aware "
                "rows keep Eq. 8's depth (run `adaserve profile` first).")
    return (f"Latency models from the pair's profile ({p['date']}); the cost-aware depth "
            f"prices draft steps with it{'' if p['draft_priced'] else ' (no draft model in it)'}.")


if __name__ == "__main__":
    sys.exit(main())

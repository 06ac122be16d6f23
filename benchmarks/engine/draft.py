"""The distilled draft, measured on held-out prompts (never used in training).

1. Teacher-forced along the target's own held-out continuations (greedy and sampled):
   greedy agreement (draft argmax == target argmax) and mean 1 - TV(p, q) = sum min(p, q),
   the acceptance rate of one speculated token under sampling (seed 003). By prompt kind.
2. Step cost: one draft decode step against one target decode step, batch 1 and 16,
   context 128, interleaved medians; and the size sweep that chose the architecture
   (layers x head tokens: cost and fp16 file size).
3. The engine at batch 1 (`adaserve`, budget from the profile when one exists for the
   pair): accepted tokens per iteration, measured and predicted (1 + sum of selected
   f(v)), tokens/s against `incremental` on the same prompts, and the calibration of
   draft path probabilities against acceptance (the scheduler's reliability bins).
Prints tables, writes results/draft.{md,json}; --render rewrites the page from the kept
JSON, measuring nothing.

    python -m benchmarks.engine.draft [--draft smollm2-135m-distilled] [--work DISTILL_WORK_DIR]
                                      [--render]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from benchmarks.shared.common import Timer
from benchmarks.shared.page import Made, kept, render_flags, write_page

from adaserve.distill.pipeline import DistillConfig, answers, teacher_stage
from adaserve.distill.prompts import phase1, phase2
from adaserve.distill.teacher import TeacherShard, score_sequence
from adaserve.engine import EngineConfig, SamplingParams
from adaserve.engine.batch import chunk_batch
from adaserve.engine.core import EngineCore
from adaserve.engine.engine import encode_chat, load_profile
from adaserve.engine.kv_cache import KVCache
from adaserve.engine.loader import load_models
from adaserve.engine.model import Llama
from adaserve.engine.weights import DEFAULT_DRAFT, load_state, resolve_draft

NAME = "draft"


def heldout_shards(models, cfg: DistillConfig, path: Path | None) -> tuple[list, dict]:
    """The held-out teacher data and its prompts by id: from a distill run's work directory,
    or made again the same way (the held-out phase-1 prompts, then the chats and summaries
    built on the target's answers to them)."""
    if path is not None:  # phase 2 draws its prompts over all phase-1 answers: redo that
        p1 = phase1(cfg.prompts, cfg.seed)
        s1 = [TeacherShard.load(f) for f in sorted((path / "teacher").glob("p1-*.npz"))]
        p2 = phase2(answers(s1, p1, models.tokenizer), cfg.seed)
        return [TeacherShard.load(path / "heldout.npz")], {p.id: p for p in p1 + p2}
    p1 = [p for p in phase1(cfg.prompts, cfg.seed) if p.split == "heldout"]
    with tempfile.TemporaryDirectory() as work:
        s1 = teacher_stage("h1", p1, models, cfg, Path(work))
        p2 = phase2(answers(s1, p1, models.tokenizer), cfg.seed)
        shards = s1 + teacher_stage("h2", p2, models, cfg, Path(work))
    return shards, {p.id: p for p in p1 + p2}


def teacher_forced(model: Llama, tokens: np.ndarray, n_prompt: int,
                   token_ids: torch.Tensor | None, vocab: int) -> torch.Tensor:
    """Next-token probabilities [n_new, vocab] at the positions that predicted each
    continuation token; a reduced head's probabilities scattered to target ids."""
    p = torch.softmax(score_sequence(model, tokens.tolist(), n_prompt).float(), dim=-1)
    if token_ids is None:
        return p
    full = torch.zeros(p.shape[0], vocab)
    full[:, token_ids] = p
    return full


def quality(models, shards, prompts) -> dict:
    vocab = models.target.cfg.vocab
    per_kind: dict[str, list[np.ndarray]] = {}
    agree_all, ovl_all, greedy_rows = [], [], []
    for s in shards:
        for i, pid in enumerate(s.ids):
            toks, n_prompt = s.sequence(i)
            p = teacher_forced(models.target, toks, n_prompt, None, vocab)
            q = teacher_forced(models.draft, toks, n_prompt, models.draft_token_ids, vocab)
            agree = (p.argmax(-1) == q.argmax(-1)).numpy()
            ovl = torch.minimum(p, q).sum(-1).numpy()  # 1 - TV
            per_kind.setdefault(prompts[pid].kind, []).append(np.stack([agree, ovl]))
            agree_all.append(agree)
            ovl_all.append(ovl)
            greedy_rows.append(not prompts[pid].sampled)
    a, o = np.concatenate(agree_all), np.concatenate(ovl_all)
    mode = {}
    for name, want in (("greedy", True), ("sampled", False)):
        pick = [x for x, g in zip(zip(agree_all, ovl_all), greedy_rows) if g == want]
        if pick:
            mode[name] = {"positions": int(sum(x[0].size for x in pick)),
                          "greedy_agreement": float(np.concatenate([x[0] for x in pick]).mean()),
                          "mean_one_minus_tv": float(np.concatenate([x[1] for x in pick]).mean())}
    return {
        "positions": int(a.size), "sequences": len(agree_all),
        "greedy_agreement": float(a.mean()), "mean_one_minus_tv": float(o.mean()),
        "by_continuation": mode,
        "by_kind": {k: {"positions": int(sum(x.shape[1] for x in v)),
                        "greedy_agreement": float(np.concatenate([x[0] for x in v]).mean()),
                        "mean_one_minus_tv": float(np.concatenate([x[1] for x in v]).mean())}
                    for k, v in sorted(per_kind.items())},
    }


def step_costs(models, rounds: int) -> dict:
    def step(model: Llama, b: int, ctx: int = 128):
        c = model.cfg
        kv = KVCache(model.n_layers, b, c.kv_heads, c.head_dim, ctx + 8)
        fb = chunk_batch(slice(0, b), torch.full((b,), ctx), [[5]] * b, kv.trash_col, "last")
        return lambda: model(kv, fb)

    state = load_state(models.path)
    embed = state["model.embed_tokens.weight"]
    t = Timer(repeats=10 * rounds, rounds=rounds)
    sweep = [(layers, head) for layers in (1, 2, 3, 4) for head in (4096, 8192, 16384)]
    for b in (1, 16):
        t.add(("target", b), step(models.target, b))
        t.add(("draft", b), step(models.draft, b))
        for layers, head in sweep:  # the cost does not depend on the values: the target's
            s = dict(state, **{"lm_head.weight": embed[:head]})
            cfg = dataclasses.replace(models.target.cfg, tie_embeddings=False)
            t.add(("sweep", layers, head, b), step(Llama(cfg, s, layers=layers), b))
    ms = t.run()
    c = models.target.cfg
    layer_params = c.hidden * (c.heads + 2 * c.kv_heads) * c.head_dim + c.heads * c.head_dim * \
        c.hidden + 3 * c.hidden * c.intermediate + 2 * c.hidden
    rows = [{"layers": layers, "head_tokens": head,
             "fp16_mb": 2 * (layers * layer_params + head * c.hidden + c.hidden) / 2**20,
             **{f"rel_b{b}": ms[("sweep", layers, head, b)] / ms[("target", b)] for b in (1, 16)}}
            for layers, head in sweep]
    # batch sizes as strings: the keys the kept JSON reads back
    return {"target_ms": {str(b): ms[("target", b)] for b in (1, 16)},
            "draft_ms": {str(b): ms[("draft", b)] for b in (1, 16)},
            "draft_rel": {str(b): ms[("draft", b)] / ms[("target", b)] for b in (1, 16)},
            "sweep": rows}


def engine_batch1(draft: str, prompts: list[list[int]], new: int) -> dict:
    spec_cfg = EngineConfig(policy="adaserve", draft=draft, max_batch=1, kv_cache_mb=512)
    models = load_models(spec_cfg)
    prof = load_profile(spec_cfg)
    spec = EngineCore(spec_cfg, models, prof)
    inc = EngineCore(EngineConfig(max_batch=1, kv_cache_mb=512), models)
    out = {"budget": spec.policy.config.budget, "profile": prof is not None,
           "knee_found": bool(prof is not None and prof.knee_found)}
    for name, core in (("incremental", inc), ("adaserve", spec)):
        t, emitted, steps = 0.0, 0, 0
        for i, p in enumerate(prompts):
            core.add(f"{name}-{i}", p, SamplingParams(max_tokens=new))
            n0 = len(core.stats)
            t0 = time.perf_counter()
            while core.has_work:
                core.step()
            t += time.perf_counter() - t0
            st = list(core.stats)[n0:]
            emitted += sum(s.emitted_tokens for s in st)
            steps += sum(1 for s in st if s.running)
        out[name] = {"tok_s": emitted / t, "tokens_per_iteration": emitted / steps}
    cal = spec.calibration.to_dict()
    tree = spec.calibration.tree_table()
    n = sum(b.count for b in tree)
    out["predicted_tokens_per_iteration"] = sum(b.count * b.mean_predicted for b in tree) / n
    out["calibration"] = cal
    out["speedup"] = out["adaserve"]["tok_s"] / out["incremental"]["tok_s"]
    return out


def measure(args: argparse.Namespace) -> dict:
    made = Made.now("benchmarks.engine.draft").to_dict()
    cfg = DistillConfig()
    models = load_models(EngineConfig(policy="adaserve", draft=args.draft, device="cpu"))
    t0 = time.perf_counter()
    shards, prompts_by_id = heldout_shards(models, cfg, args.work)
    q = quality(models, shards, prompts_by_id)
    print(f"held-out: {q['positions']} positions in {q['sequences']} sequences: greedy agreement "
          f"{q['greedy_agreement']:.3f}, mean 1-TV {q['mean_one_minus_tv']:.3f} "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    cost = step_costs(models, args.rounds)
    print(f"draft step / target step: batch 1 {cost['draft_rel']['1']:.3f}, "
          f"batch 16 {cost['draft_rel']['16']:.3f}", flush=True)
    held = [p for p in phase1(cfg.prompts, cfg.seed) if p.split == "heldout"]
    prompts = [encode_chat(models.tokenizer, [{"role": r, "content": c} for r, c in p.messages])
               for p in held[: args.engine_prompts]]
    del models
    eng = engine_batch1(args.draft, prompts, args.new_tokens)
    print(f"batch 1, B = {eng['budget']}: {eng['adaserve']['tokens_per_iteration']:.2f} tokens per "
          f"iteration (predicted {eng['predicted_tokens_per_iteration']:.2f}), "
          f"{eng['speedup']:.2f}x incremental", flush=True)
    return {**made, "torch": torch.__version__, "threads": torch.get_num_threads(),
            "draft": args.draft, "quality": q, "cost": cost, "engine": eng,
            "engine_prompts": len(prompts), "new_tokens": args.new_tokens}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--draft", default=DEFAULT_DRAFT)
    ap.add_argument("--work", type=Path, default=None,
                    help="a distill run's work directory: measure on its held-out sequences "
                         "(default: generate the held-out set again)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--engine-prompts", type=int, default=24)
    ap.add_argument("--new-tokens", type=int, default=64)
    render_flags(ap, NAME)
    args = ap.parse_args(argv)
    res = kept(NAME, args.out) if args.render else measure(args)
    write_page(NAME, page(res), args.out, None if args.render else res)
    if not args.render and res["draft"] == DEFAULT_DRAFT:
        update_card(res)
    return 0


def page(r: dict) -> list[str]:
    """The page from a measurement's data (measured now, or kept: --render)."""
    q, c, e = r["quality"], r["cost"], r["engine"]
    lines = [
        "# Distilled draft", "",
        f"- command: `{r['command']}`", f"- machine: {r['machine']}, torch {r['torch']}, "
        f"{r['threads']} threads", f"- date: {r['date']}, commit {r['commit']}, draft `{r['draft']}`",
        "", "## Quality on held-out prompts", "",
        f"Teacher-forced along the target's own continuations of the held-out prompts "
        f"({q['sequences']} sequences, {q['positions']} positions, greedy and sampled). "
        "Greedy agreement: the draft's argmax is the target's. 1 - TV = sum min(p, q): the "
        "chance one drafted token survives lossless speculative sampling.", "",
        "| prompts | positions | greedy agreement | mean 1 - TV |", "|---|---|---|---|",
        f"| all | {q['positions']} | {q['greedy_agreement']:.3f} | {q['mean_one_minus_tv']:.3f} |",
    ]
    for k, v in list(q["by_continuation"].items()) + list(q["by_kind"].items()):
        label = f"{k} continuations" if k in ("greedy", "sampled") else k
        lines.append(f"| {label} | {v['positions']} | {v['greedy_agreement']:.3f} | "
                     f"{v['mean_one_minus_tv']:.3f} |")
    lines += [
        "", "## Step cost", "",
        "One decode step (one token per request, context 128), median of interleaved rounds.", "",
        "| batch | target ms | draft ms | draft / target |", "|---|---|---|---|",
    ]
    for b in ("1", "16"):
        lines.append(f"| {b} | {c['target_ms'][b]:.1f} | {c['draft_ms'][b]:.2f} | "
                     f"{c['draft_rel'][b]:.3f} |")
    lines += [
        "", "Sizes considered (the target's layer shapes; fp16 file without the shared "
        "embeddings; cost relative to a target step):", "",
        "| layers | head tokens | fp16 MB | batch 1 | batch 16 |", "|---|---|---|---|---|",
    ]
    for s in c["sweep"]:
        lines.append(f"| {s['layers']} | {s['head_tokens']} | {s['fp16_mb']:.1f} | "
                     f"{s['rel_b1']:.3f} | {s['rel_b16']:.3f} |")
    cal = e["calibration"]
    lines += [
        "", "## In the engine, batch 1", "",
        f"`adaserve` with this draft, budget B = {e['budget']} "
        f"({_budget_source(e)}), "
        f"greedy, {r['engine_prompts']} held-out prompts one at a time, up to "
        f"{r['new_tokens']} new tokens each.", "",
        "| | tokens per iteration | tokens/s |", "|---|---|---|",
        f"| incremental | {e['incremental']['tokens_per_iteration']:.2f} | "
        f"{e['incremental']['tok_s']:.1f} |",
        f"| adaserve, measured | {e['adaserve']['tokens_per_iteration']:.2f} | "
        f"{e['adaserve']['tok_s']:.1f} |",
        f"| adaserve, predicted by the draft (1 + sum f(v)) | "
        f"{e['predicted_tokens_per_iteration']:.2f} | |",
        "", f"Speed-up over incremental: {e['speedup']:.2f}x.", "",
        "### Calibration of draft path probabilities", "",
        f"Every selected node, binned by its draft path probability f(v), against how often "
        f"the target accepted it ({cal['nodes']} nodes; observed / predicted "
        f"{cal['ratio']:.2f}; expected calibration error {cal['expected_calibration_error']:.3f}).",
        "", "| f(v) bin | nodes | mean f(v) | accepted |", "|---|---|---|---|",
    ]
    for b in cal["node_bins"]:
        lines.append(f"| [{b['lo']:.1f}, {b['hi']:.1f}) | {b['count']} | "
                     f"{b['mean_predicted']:.3f} | {b['mean_observed']:.3f} |")
    lines += ["", "Per request and iteration: predicted 1 + sum f(v) against 1 + accepted nodes.",
              "", "| predicted bin | iterations | mean predicted | mean accepted |",
              "|---|---|---|---|"]
    for b in cal["tree_bins"]:
        hi = "inf" if b["hi"] is None else f"{b['hi']:.1f}"
        lines.append(f"| [{b['lo']:.1f}, {hi}) | {b['count']} | {b['mean_predicted']:.2f} | "
                     f"{b['mean_observed']:.2f} |")
    return lines + [""]


def _budget_source(e: dict) -> str:
    if not e["profile"]:
        return "the default: no profile for this pair"
    if not e["knee_found"]:
        return "the default: this pair's profile found no knee in the latency curve"
    return "the profile's knee"


def update_card(r: dict) -> None:
    """Keep the packaged model card's measured results those of the latest run."""
    q, c, e = r["quality"], r["cost"], r["engine"]
    card_path = resolve_draft(DEFAULT_DRAFT) / "README.md"
    card = card_path.read_text()
    head, sep, _ = card.partition("## Measured results")
    if not sep:
        return
    rest = card.split("## Measured results", 1)[1]
    tail = rest[rest.find("\n## ", 1):] if "\n## " in rest[1:] else ""
    b1, b16 = c["draft_rel"]["1"], c["draft_rel"]["16"]
    g, t = q["by_continuation"]["greedy"], q["by_continuation"]["sampled"]
    section = f"""## Measured results
`{r['command']}` on {r['date']} (commit {r['commit']}; {r['machine']}, torch {r['torch']});
full tables in results/draft.md.
- Held-out prompts, teacher-forced along the target's continuations ({q['positions']}
  positions): greedy agreement {q['greedy_agreement']:.3f}, mean 1 - TV {q['mean_one_minus_tv']:.3f};
  on the greedy continuations alone {g['greedy_agreement']:.3f} and {g['mean_one_minus_tv']:.3f},
  on those sampled at temperature 1 {t['greedy_agreement']:.3f} and {t['mean_one_minus_tv']:.3f}.
- Draft step / target step: {b1:.3f} at batch 1, {b16:.3f} at batch 16.
- Engine at batch 1 (`adaserve`, B = {e['budget']}): {e['adaserve']['tokens_per_iteration']:.2f}
  tokens per iteration (draft's prediction {e['predicted_tokens_per_iteration']:.2f}),
  {e['speedup']:.2f}x the tokens/s of `incremental`.
"""
    card_path.write_text(head + section + tail)


if __name__ == "__main__":
    sys.exit(main())

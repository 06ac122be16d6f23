"""`adaserve distill-draft`: prompts -> teacher continuations -> head vocabulary -> forward-KL
training -> export. Every stage leaves its result in the work directory, so an interrupted
run picks up where it stopped; the same arguments on the same machine give the same weights.
"""

from __future__ import annotations

import collections
import json
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from adaserve.distill.prompts import Prompt, phase1, phase2
from adaserve.distill.student import Student, draft_config, save_draft
from adaserve.distill.teacher import TeacherShard, continue_prompts
from adaserve.distill.train import TrainConfig, examples, train


@dataclass(frozen=True, slots=True)
class DistillConfig:
    prompts: int = 1200  # phase-1 prompts; phase 2 adds chats and summaries built on them
    layers: int = 3
    head_tokens: int = 8192
    top_k: int = 32  # teacher probabilities kept per position
    group: int = 48  # prompts per teacher batch
    max_len: int = 640  # training sequence length at most
    seed: int = 0
    train: TrainConfig = field(default_factory=TrainConfig)


def _log(msg: str) -> None:
    print(f"[distill {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def teacher_stage(name: str, prompts: list[Prompt], models, cfg: DistillConfig,
                  work: Path) -> list[TeacherShard]:
    from adaserve.engine.engine import encode_chat

    shards = []
    groups = [prompts[i: i + cfg.group] for i in range(0, len(prompts), cfg.group)]
    t0 = time.perf_counter()
    made = 0
    for g, group in enumerate(groups):
        path = work / "teacher" / f"{name}-{g:04d}.npz"
        if path.is_file():
            shards.append(TeacherShard.load(path))
            continue
        enc = [encode_chat(models.tokenizer, [{"role": r, "content": c} for r, c in p.messages])
               for p in group]
        s = continue_prompts(models.target, group, enc, models.eos_ids, cfg.top_k)
        path.parent.mkdir(parents=True, exist_ok=True)
        s.save(path)
        shards.append(s)
        made += int(s.new_off[-1])
        dt = time.perf_counter() - t0
        _log(f"teacher {name}: group {g + 1}/{len(groups)}, {made} tokens in {dt:.0f} s "
             f"({made / dt:.1f} tok/s)")
    return shards


def answers(shards: list[TeacherShard], prompts: list[Prompt], tokenizer) -> dict:
    """Prompt id -> (prompt, the target's answer text) for the shards' sequences of
    ``prompts`` (others are skipped)."""
    by_id = {p.id: p for p in prompts}
    out = {}
    for s in shards:
        for i, pid in enumerate(s.ids):
            if pid in by_id:
                out[pid] = (by_id[pid], tokenizer.decode(s.continuation(i).tolist(),
                                                         skip_special_tokens=True))
    return out


def split_shards(shards: list[TeacherShard],
                 prompts: list[Prompt]) -> dict[str, list[tuple[int, int]]]:
    """The (shard, row) of every sequence, by split."""
    split = {p.id: p.split for p in prompts}
    out: dict[str, list[tuple[int, int]]] = {"train": [], "heldout": []}
    for si, s in enumerate(shards):
        for i, pid in enumerate(s.ids):
            out[split[pid]].append((si, i))
    return out


def subset(shards: list[TeacherShard], rows: list[tuple[int, int]]) -> TeacherShard:
    """One shard holding the given (shard, row) sequences."""
    picked = [(shards[si], i) for si, i in rows]
    return TeacherShard.from_sequences(
        [s.ids[i] for s, i in picked], [s.sequence(i)[0] for s, i in picked],
        [s.n_prompt[i] for s, i in picked],
        [s.topk_ids[s.new_off[i]: s.new_off[i + 1]] for s, i in picked],
        [s.topk_probs[s.new_off[i]: s.new_off[i + 1]] for s, i in picked])


def head_vocabulary(train: TeacherShard, k: int, eos: frozenset[int], vocab: int) -> torch.Tensor:
    """The k token ids the target emits most often in the training continuations (ties by
    id), EOS always in. Ordered by frequency."""
    counts = np.bincount(train.continuations(), minlength=vocab).astype(np.int64)
    counts[list(eos)] = counts.max() + 1
    order = np.lexsort((np.arange(vocab), -counts))  # by count descending, then id
    return torch.from_numpy(order[: min(k, vocab)].astype(np.int64))


def coverage(shard: TeacherShard, head_ids: torch.Tensor) -> dict[str, float]:
    """How much of what the target emits and predicts the head can represent."""
    ids = head_ids.numpy()
    inside = np.zeros(max(int(ids.max()), int(shard.topk_ids.max())) + 1, bool)
    inside[ids] = True
    p = shard.topk_probs.astype(np.float64)
    return {"tokens": float(inside[shard.continuations()].mean()),
            "teacher_top1": float(inside[shard.topk_ids[:, 0]].mean()),
            "teacher_topk_mass": float((p * inside[shard.topk_ids]).sum() / p.sum())}


def distill(cfg: DistillConfig, out: Path, work: Path, progress: bool = True) -> dict:
    from adaserve.engine.config import EngineConfig
    from adaserve.engine.loader import load_models
    from adaserve.engine.weights import DEFAULT_MODEL, load_config, load_state

    t_start = time.perf_counter()
    # the teacher data depends on these settings only; training checks its own
    teacher_key = {"prompts": cfg.prompts, "seed": cfg.seed, "top_k": cfg.top_k, "group": cfg.group}
    meta = work / "teacher" / "settings.json"
    if meta.is_file() and json.loads(meta.read_text()) != teacher_key:
        raise ValueError(f"{work} holds teacher data made with other settings "
                         f"({meta.read_text().strip()}); use another --work or remove it")
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text(json.dumps(teacher_key))
    torch.manual_seed(cfg.seed)
    models = load_models(EngineConfig(model=DEFAULT_MODEL, draft=None, device="cpu"))
    p1 = phase1(cfg.prompts, cfg.seed)
    s1 = teacher_stage("p1", p1, models, cfg, work)
    p2 = phase2(answers(s1, p1, models.tokenizer), cfg.seed)
    s2 = teacher_stage("p2", p2, models, cfg, work)
    shards, prompts = s1 + s2, p1 + p2
    rows = split_shards(shards, prompts)
    train_set, held = subset(shards, rows["train"]), subset(shards, rows["heldout"])
    vocab = models.target.cfg.vocab
    head_ids = head_vocabulary(train_set, cfg.head_tokens, models.eos_ids, vocab)
    cov = coverage(held, head_ids)
    _log(f"{len(train_set)} train / {len(held)} held-out sequences, "
         f"{int(train_set.new_off[-1])} / {int(held.new_off[-1])} teacher tokens; "
         f"head of {len(head_ids)} covers {cov['tokens']:.4f} of held-out output tokens")
    state = load_state(models.path)
    student = Student(models.target.cfg, state, cfg.layers, head_ids)
    data = examples([train_set], cfg.max_len)
    student_key = {"layers": cfg.layers, "head_tokens": cfg.head_tokens, "max_len": cfg.max_len,
                   "teacher": teacher_key}
    log = train(student, data, cfg.train, work / "train", student_key, progress)
    kinds = collections.Counter(p.kind for p in prompts)
    report = {
        "sequences": {"train": len(train_set), "heldout": len(held)},
        "teacher_tokens": {"train": int(train_set.new_off[-1]), "heldout": int(held.new_off[-1])},
        "prompt_kinds": dict(sorted(kinds.items())),
        "sampled_fraction": float(np.mean([p.sampled for p in prompts])),
        "head_coverage_heldout": cov,
        "steps": len(log),
        "loss_first_25": float(np.mean([r["loss"] for r in log[:25]])),
        "loss_last_25": float(np.mean([r["loss"] for r in log[-25:]])),
        "train_top1_last_25": float(np.mean([r["agree"] for r in log[-25:]])),
        "config": asdict(cfg),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "date": time.strftime("%Y-%m-%d"),
        "wall_minutes": (time.perf_counter() - t_start) / 60,
    }
    held.save(work / "heldout.npz")
    dcfg = draft_config(load_config(models.path), cfg.layers, len(head_ids),
                        {"distilled_from": DEFAULT_MODEL, "recipe": "adaserve distill-draft"})
    save_draft(out, student.export_state(), dcfg, model_card(report))
    (out / "distill_report.json").write_text(json.dumps(report, indent=2) + "\n")
    _log(f"wrote {out} in {report['wall_minutes']:.1f} min")
    return report


def model_card(r: dict) -> str:
    c, t = r["config"], r["config"]["train"]
    cov = r["head_coverage_heldout"]
    kinds = ", ".join(f"{k} {v}" for k, v in r["prompt_kinds"].items())
    return f"""# AdaServe distilled draft for SmolLM2-135M-Instruct

A speculative-decoding draft for the embedded default target, distilled from the target's
own continuations by `adaserve distill-draft` (adaserve/distill/). It is not a language
model to use on its own.

## Architecture
- {c['layers']} Llama decoder layers, hidden 576, 9 query / 3 KV heads, MLP 1536: the
  target's shapes, initialised from the target's first {c['layers']} layers.
- Input embeddings: the target's, frozen and not stored here; the engine passes the
  target's to the draft at load time (`adaserve_draft.shared_embeddings` in config.json).
- Output head over the {c['head_tokens']} tokens the target emits most often in the
  training continuations (`adaserve.token_ids` maps head rows to target ids; other tokens
  get draft probability 0), initialised from the target's tied head rows.
- Weights stored in fp16 (the engine computes in fp32 on CPU).

## Data
- Our own prompts (adaserve/distill/prompts.py): {kinds}; a held-out 10% split by
  prompt id, inherited by the chats and summaries built on a prompt's answer.
- Teacher: the target's continuations, {100 * r['sampled_fraction']:.0f}% sampled at
  temperature 1 and the rest greedy, with the target's top-{c['top_k']} probabilities at
  every generated position. {r['teacher_tokens']['train']} train / {r['teacher_tokens']['heldout']}
  held-out teacher tokens in {r['sequences']['train']} / {r['sequences']['heldout']} sequences.
- Head coverage on held-out: {cov['tokens']:.4f} of output tokens, {cov['teacher_top1']:.4f}
  of the teacher's top-1 tokens, {cov['teacher_topk_mass']:.4f} of its top-{c['top_k']} mass.

## Training
- Forward KL from the teacher's top-{c['top_k']} distribution (seed 004 §4.1), AdamW
  (lr {t['lr']}, cosine to 10%, {t['warmup']} warm-up steps), {t['tokens_per_step']} padded
  tokens per step, {t['epochs']} epochs: {r['steps']} steps, seed {t['seed']}.
- Loss (cross-entropy to the teacher's top-k) {r['loss_first_25']:.3f} over the first 25
  steps, {r['loss_last_25']:.3f} over the last 25; training top-1 agreement over the last 25
  steps {r['train_top1_last_25']:.3f}.
- Made on {r['date']} ({r['machine']}, torch {r['torch']}, {r['threads']} threads); the
  invocation that wrote it took {r['wall_minutes']:.0f} minutes (stages already in its work
  directory, such as teacher data, are reused, not redone).

## Measured results
See results/draft.md in the repository (held-out greedy agreement, 1 - TV, step cost,
accepted tokens per iteration, calibration), made by `python -m benchmarks.engine.draft`.

## Reproduce
`adaserve distill-draft --out DIR` with the defaults, on the same kind of machine and the
same torch, gives these weights; `distill_report.json` holds the full settings.
"""

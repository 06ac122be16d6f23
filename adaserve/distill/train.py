"""Distillation: forward KL from the teacher's top-k distribution to the draft (seed 004
§4.1, teacher sampling with forward KL, its best variant), deterministic and resumable.

Batches are fixed once from the data (length-bucketed, at most ``tokens_per_step`` padded
tokens each); epoch e visits them in a permutation drawn from ``seed + e``. So the batch of
step s is a function of s alone and a run resumed from a checkpoint takes exactly the
steps an uninterrupted run would.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from adaserve.distill.student import Student
from adaserve.distill.teacher import TeacherShard


@dataclass(frozen=True, slots=True)
class TrainConfig:
    epochs: float = 8.0
    tokens_per_step: int = 2048  # padded tokens per batch
    lr: float = 3e-3
    warmup: int = 20
    weight_decay: float = 0.0
    clip: float = 1.0
    seed: int = 0
    checkpoint_every: int = 25


@dataclass(frozen=True, slots=True)
class Example:
    tokens: np.ndarray  # [T] prompt + continuation
    n_prompt: int  # index of the first scored continuation token (the prompt's length)
    topk_ids: np.ndarray  # [T - n_prompt, k] int32
    topk_probs: np.ndarray  # [T - n_prompt, k] float16


def examples(shards: list[TeacherShard], max_len: int) -> list[Example]:
    """Training sequences; a sequence longer than max_len keeps its last max_len tokens
    and the continuation tokens predicted from inside them."""
    out = []
    for s in shards:
        for i in range(len(s)):
            toks, n_prompt = s.sequence(i)
            a, b = s.new_off[i], s.new_off[i + 1]
            cut = max(0, len(toks) - max_len)
            j0 = max(0, cut + 1 - n_prompt)  # first continuation token with its context kept
            out.append(Example(toks[cut:], n_prompt + j0 - cut, s.topk_ids[a + j0:b],
                               s.topk_probs[a + j0:b]))
    return out


def make_batches(data: list[Example], tokens_per_step: int) -> list[list[int]]:
    order = sorted(range(len(data)), key=lambda i: (len(data[i].tokens), i))
    batches, cur, width = [], [], 0
    for i in order:
        w = max(width, len(data[i].tokens))
        if cur and w * (len(cur) + 1) > tokens_per_step:
            batches.append(cur)
            cur, w = [], len(data[i].tokens)
        cur.append(i)
        width = w
    if cur:
        batches.append(cur)
    return batches


def collate(data: list[Example], idx: list[int], head_index: torch.Tensor):
    """tokens [B, T]; flat positions whose next token the teacher scored; teacher top-k
    mapped to head rows (-1 outside the head) and their probabilities."""
    t = max(len(data[i].tokens) for i in idx)
    tokens = torch.zeros(len(idx), t, dtype=torch.int64)
    pos, ids, probs = [], [], []
    for r, i in enumerate(idx):
        e = data[i]
        tokens[r, : len(e.tokens)] = torch.from_numpy(e.tokens.astype(np.int64))
        n_new = len(e.topk_ids)
        # continuation token j sits at n_prompt + j and is predicted from the position before
        pos.append(r * t + e.n_prompt - 1 + np.arange(n_new))
        ids.append(e.topk_ids)
        probs.append(e.topk_probs)
    ids = torch.from_numpy(np.concatenate(ids).astype(np.int64))
    return (tokens, torch.from_numpy(np.concatenate(pos)), head_index[ids],
            torch.from_numpy(np.concatenate(probs).astype(np.float32)))


def kl_loss(student: Student, tokens, pos, head_rows, probs):
    """Forward KL(p || q) over the teacher's top-k, up to the teacher's entropy (a constant):
    -sum_k p_k log q_k per position, averaged. Teacher tokens outside the head are left
    out: the draft cannot propose them whatever it learns."""
    h = student.hidden(tokens).reshape(-1, student.cfg.hidden)[pos]
    logq = torch.log_softmax(student.logits(h), dim=-1)  # [N, K]
    inside = head_rows >= 0
    lq = logq.gather(1, head_rows.clamp(min=0))
    loss = -(probs * lq * inside).sum(-1).mean()
    agree = (logq.argmax(-1) == head_rows[:, 0]).float().mean()  # top-1 agreement
    return loss, agree


def head_index(head_ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """[vocab] target id -> head row, -1 for ids the head does not cover."""
    idx = torch.full((vocab,), -1, dtype=torch.int64)
    idx[head_ids] = torch.arange(head_ids.numel())
    return idx


def lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, total - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def train(student: Student, data: list[Example], cfg: TrainConfig, work: Path,
          identity: dict | None = None, progress: bool = True,
          stop_after: int | None = None) -> list[dict]:
    """Train in place; checkpoints in ``work`` (resumed from when present, if made with the
    same config and ``identity``: what else shaped the student and its data). Returns the
    log: one record per step (loss, top-1 agreement, lr, seconds). ``stop_after`` ends
    this call after that many steps (checkpointed), as an interruption would."""
    torch.manual_seed(cfg.seed)
    batches = make_batches(data, cfg.tokens_per_step)
    total = max(1, round(cfg.epochs * len(batches)))
    hidx = head_index(student.head_ids, student.embed.shape[0])
    params = [p for p in student.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    work.mkdir(parents=True, exist_ok=True)
    ckpt = work / "checkpoint.pt"
    key = {"config": asdict(cfg), "identity": identity or {}, "total": total,
           "examples": len(data)}
    log: list[dict] = []
    step = 0
    if ckpt.is_file():
        saved = torch.load(ckpt, weights_only=False)
        if saved["key"] != key:
            raise ValueError(f"{ckpt} was made with other settings or data; remove it to "
                             "start over")
        student.load_state_dict(saved["student"])
        opt.load_state_dict(saved["optimizer"])
        step, log = saved["step"], saved["log"]
    bar = _bar(total, step, progress)
    end = total if stop_after is None else min(total, step + stop_after)
    while step < end:
        epoch, k = divmod(step, len(batches))
        perm = torch.randperm(len(batches), generator=torch.Generator().manual_seed(cfg.seed + epoch))
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, cfg)
        loss, agree = kl_loss(student, *collate(data, batches[int(perm[k])], hidx))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.clip)
        opt.step()
        step += 1
        log.append({"step": step, "loss": loss.item(), "agree": agree.item(),
                    "lr": opt.param_groups[0]["lr"], "seconds": time.perf_counter() - t0})
        bar.update(log[-1])
        if step % cfg.checkpoint_every == 0 or step == end:
            tmp = ckpt.with_suffix(".tmp")
            torch.save({"key": key, "step": step, "log": log,
                        "student": student.state_dict(), "optimizer": opt.state_dict()}, tmp)
            tmp.rename(ckpt)
    bar.close()
    (work / "train_log.json").write_text(json.dumps(log))
    return log


class _bar:
    """A one-line progress bar on stderr: step, loss and agreement (running means), ETA."""

    def __init__(self, total: int, start: int, enabled: bool) -> None:
        self.total, self.step, self.enabled = total, start, enabled
        self.t0, self.start = time.perf_counter(), start
        self.loss = self.agree = None

    def update(self, rec: dict) -> None:
        self.step = rec["step"]
        a = 0.9 if self.loss is not None else 0.0
        self.loss = a * (self.loss or 0) + (1 - a) * rec["loss"]
        self.agree = a * (self.agree or 0) + (1 - a) * rec["agree"]
        if not self.enabled:
            return
        done = self.step - self.start
        eta = (time.perf_counter() - self.t0) / done * (self.total - self.step) if done else 0
        filled = int(30 * self.step / self.total)
        sys.stderr.write(f"\rtrain [{'#' * filled}{'.' * (30 - filled)}] {self.step}/{self.total}"
                         f" loss {self.loss:.3f} top-1 {self.agree:.3f} eta {eta / 60:.1f} min ")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")

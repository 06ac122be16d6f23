"""What the online trainer reads from served records (docs/draft.md "Online adaptation"):
the training rows of a batch (the buffered misses, and the anchors where the draft was
right) and greedy agreement along served outputs, the held-back check."""

from __future__ import annotations

import math

import numpy as np
import torch

from adaserve.distill.student import Student
from adaserve.engine.online_records import ServedRecord


def _cut(r: ServedRecord, max_len: int) -> int:
    return max(0, len(r.tokens) - max_len)


def _padded(records: list[ServedRecord], max_len: int) -> torch.Tensor:
    """[B, T] each record's last max_len tokens, right-padded with 0."""
    t = max(len(r.tokens) - _cut(r, max_len) for r in records)
    out = torch.zeros(len(records), t, dtype=torch.int64)
    for b, r in enumerate(records):
        toks = r.tokens[_cut(r, max_len):]
        out[b, : len(toks)] = torch.from_numpy(toks.astype(np.int64))
    return out


def collate(records: list[ServedRecord], max_len: int, hidx: torch.Tensor,
            anchor: float = 0.0):
    """tokens [B, T]; flat rows [N] predicting each buffered position; the teacher's top-k
    as head rows [N, k] (-1 outside the head) and probabilities [N, k].

    With ``anchor`` > 0, every other output position is a row too, its target the token
    served there with probability ``anchor`` (the rest of the row 0). Why: a buffer of
    misses only pulls the draft toward where it was wrong and never holds it where it was
    right. The served token is the target's greedy choice, or a sample from the target's
    distribution, so its cross-entropy is a one-sample estimate of the same forward KL."""
    tokens = _padded(records, max_len)
    t = tokens.shape[1]
    pos, ids, probs = [], [], []
    for b, r in enumerate(records):
        c = _cut(r, max_len)
        keep = r.positions - 1 >= c  # the predicting position survived the cut
        pos.append(b * t + r.positions[keep] - 1 - c)
        ids.append(r.topk_ids[keep])
        probs.append(r.topk_probs[keep])
        if anchor > 0:
            j = np.setdiff1d(np.arange(max(r.n_prompt, c + 1), len(r.tokens)), r.positions)
            k = r.topk_ids.shape[1]
            pos.append(b * t + j - 1 - c)
            ids.append(np.repeat(r.tokens[j, None], k, 1).astype(r.topk_ids.dtype))
            one = np.zeros((len(j), k), np.float32)
            one[:, 0] = anchor
            probs.append(one)
    ids_t = torch.from_numpy(np.concatenate(ids).astype(np.int64))
    return (tokens, torch.from_numpy(np.concatenate(pos)), hidx[ids_t],
            torch.from_numpy(np.concatenate(probs).astype(np.float32)))


@torch.no_grad()
def agreement(student: Student, records: list[ServedRecord], max_len: int,
              group: int = 8) -> float:
    """Greedy agreement along served outputs: how often the draft's top token is the
    token the request went on with (the target's greedy choice for a greedy request), over
    every output position. The per-token acceptance of a greedy chain, measured offline."""
    hits = total = 0
    for g in range(0, len(records), group):
        recs = records[g: g + group]
        tokens = _padded(recs, max_len)
        t = tokens.shape[1]
        rows, want = [], []
        for b, r in enumerate(recs):
            c = _cut(r, max_len)
            j = np.arange(max(r.n_prompt, c + 1), len(r.tokens))  # predicted positions
            rows.append(b * t + j - 1 - c)
            want.append(r.tokens[j])
        rows_t = torch.from_numpy(np.concatenate(rows))
        if rows_t.numel() == 0:
            continue
        h = student.hidden(tokens).reshape(-1, student.cfg.hidden)[rows_t]
        pred = student.head_ids[student.logits(h).argmax(-1)]
        hits += int((pred.numpy() == np.concatenate(want)).sum())
        total += rows_t.numel()
    return hits / total if total else math.nan

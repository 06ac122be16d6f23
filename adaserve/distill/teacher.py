"""The teacher: the target's continuations of our prompts, with its top-k next-token
probabilities at every generated position (seed 004 §4.1, teacher sampling).

A static batch per group of prompts, compacted as requests finish, on the engine's own
model and KV cache. Greedy prompts take the argmax; sampled prompts draw at temperature 1
by inverse CDF at a uniform keyed on (prompt seed, position), so a continuation does not
depend on what else was in its batch.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from adaserve.distill.prompts import Prompt
from adaserve.engine.batch import chunk_batch
from adaserve.engine.kv_cache import KVCache
from adaserve.engine.model import Llama
from adaserve.engine.sampling import keyed_uniform


@dataclass(frozen=True, slots=True)
class TeacherShard:
    """Continuations of a group of prompts, flat. Sequence i is tokens[seq_off[i]:seq_off[i+1]]
    (prompt then continuation); its j-th continuation token is predicted at row
    new_off[i] + j of topk_ids / topk_probs, from the position before it."""

    ids: list[str]
    tokens: np.ndarray  # [T] int32
    seq_off: np.ndarray  # [n+1] int64
    n_prompt: np.ndarray  # [n] int64
    new_off: np.ndarray  # [n+1] int64
    topk_ids: np.ndarray  # [N, k] int32, descending probability
    topk_probs: np.ndarray  # [N, k] float16

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, ids=np.array(self.ids), tokens=self.tokens, seq_off=self.seq_off,
                 n_prompt=self.n_prompt, new_off=self.new_off, topk_ids=self.topk_ids,
                 topk_probs=self.topk_probs)
        tmp.rename(path)  # a shard exists whole or not at all (resumable)

    @classmethod
    def load(cls, path: Path) -> TeacherShard:
        z = np.load(path)
        return cls([str(s) for s in z["ids"]], z["tokens"], z["seq_off"], z["n_prompt"],
                   z["new_off"], z["topk_ids"], z["topk_probs"])

    @classmethod
    def from_sequences(cls, ids: list[str], seqs: list, n_prompt: list[int],
                       topk_ids: list[np.ndarray], topk_probs: list[np.ndarray]) -> TeacherShard:
        """One shard from per-sequence pieces: tokens (prompt then continuation) and the
        [n_new, k] teacher rows of each."""
        def offsets(xs) -> np.ndarray:
            return np.concatenate([[0], np.cumsum([len(x) for x in xs])]).astype(np.int64)

        return cls(list(ids), np.concatenate(seqs).astype(np.int32), offsets(seqs),
                   np.array(n_prompt, dtype=np.int64), offsets(topk_ids),
                   np.concatenate(topk_ids).astype(np.int32),
                   np.concatenate(topk_probs).astype(np.float16))

    def __len__(self) -> int:
        return len(self.ids)

    def continuations(self) -> np.ndarray:
        """Every sequence's continuation tokens, concatenated [N]."""
        return np.concatenate([self.continuation(i) for i in range(len(self))])

    def sequence(self, i: int) -> tuple[np.ndarray, int]:
        return self.tokens[self.seq_off[i]: self.seq_off[i + 1]], int(self.n_prompt[i])

    def continuation(self, i: int) -> np.ndarray:
        toks, n_prompt = self.sequence(i)
        return toks[n_prompt:]


def prompt_seed(pid: str) -> int:
    return int.from_bytes(hashlib.sha256(pid.encode()).digest()[:8], "big") >> 1


@torch.inference_mode()
def continue_prompts(model: Llama, prompts: list[Prompt], encoded: list[list[int]],
                     eos: frozenset[int], k: int = 32, prefill_rows: int = 1024) -> TeacherShard:
    """Generate every prompt's continuation in one compacting batch."""
    n = len(prompts)
    order = sorted(range(n), key=lambda i: -len(encoded[i]))  # longest first: prefill slices
    toks = [list(encoded[i]) for i in order]
    n_prompt = [len(t) for t in toks]
    max_new = [prompts[i].max_new for i in order]
    sampled = np.array([prompts[i].sampled for i in order])
    seeds = np.array([prompt_seed(prompts[i].id) for i in order], dtype=np.uint64)
    c = model.cfg
    kv = KVCache(model.n_layers, n, c.kv_heads, c.head_dim, max(n_prompt) + max(max_new) + 2,
                 model.dtype, model.device)
    # prefill all but each prompt's last token, in chunks of at most prefill_rows rows
    done = [0] * n
    while True:
        live = [i for i in range(n) if done[i] < n_prompt[i] - 1]
        if not live:
            break
        m = len(live)  # the longest prompts: slots [0, m)
        w = max(1, prefill_rows // m)
        chunks = [toks[i][done[i]: min(done[i] + w, n_prompt[i] - 1)] for i in range(m)]
        model(kv, chunk_batch(slice(0, m), torch.tensor(done[:m]), chunks, kv.trash_col, "none"))
        for i in range(m):
            done[i] += len(chunks[i])
    top_ids: list[list[np.ndarray]] = [[] for _ in range(n)]
    top_p: list[list[np.ndarray]] = [[] for _ in range(n)]
    active = list(range(n))  # active[s] = the sequence in cache slot s
    while active:
        m = len(active)
        starts = torch.tensor([len(toks[i]) - 1 for i in active])
        fb = chunk_batch(slice(0, m), starts, [[toks[i][-1]] for i in active], kv.trash_col, "last")
        probs = torch.softmax(model(kv, fb).float(), dim=-1)  # [m, V]
        top = probs.topk(k, dim=-1)
        nxt = probs.argmax(-1)
        rows = [s for s, i in enumerate(active) if sampled[i]]
        if rows:
            idx = [active[s] for s in rows]
            u = keyed_uniform(seeds[idx], np.array([len(toks[i]) for i in idx], np.int64))
            cdf = probs[rows].double().cumsum(-1)
            pick = torch.searchsorted(cdf, torch.from_numpy(u)[:, None] * cdf[:, -1:], right=True)
            nxt[rows] = pick.squeeze(1).clamp(max=probs.shape[-1] - 1)
        ids_np, p_np, nxt = top.indices.numpy().astype(np.int32), top.values.numpy(), nxt.tolist()
        keep = []
        for s, i in enumerate(active):
            top_ids[i].append(ids_np[s])
            top_p[i].append(p_np[s].astype(np.float16))
            toks[i].append(nxt[s])
            if nxt[s] not in eos and len(toks[i]) - n_prompt[i] < max_new[i]:
                keep.append(s)
        for dst, src in enumerate(keep):  # compact: survivors move to the front, in order
            kv.copy_slot(src, dst, len(toks[active[src]]) - 1)
        active = [active[s] for s in keep]
    back = np.argsort(order)  # shard rows in the caller's prompt order
    return TeacherShard.from_sequences(
        [p.id for p in prompts], [np.array(toks[j]) for j in back], [n_prompt[j] for j in back],
        [np.stack(top_ids[j]) for j in back], [np.stack(top_p[j]) for j in back])


@torch.inference_mode()
def score_sequence(model: Llama, tokens, first: int) -> torch.Tensor:
    """Teacher-forced logits [len(tokens) - first, V'] of one sequence: row j is what the
    model predicts for tokens[first + j], from the positions before it."""
    c = model.cfg
    kv = KVCache(model.n_layers, 1, c.kv_heads, c.head_dim, len(tokens) + 2, model.dtype,
                 model.device)
    fb = chunk_batch(slice(0, 1), torch.tensor([0]), [list(tokens[:-1])], kv.trash_col, "none")
    return model(kv, dataclasses.replace(fb, out_rows=torch.arange(first - 1, len(tokens) - 1)))

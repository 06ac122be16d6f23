"""The distillation prompt set and the teacher's batched continuations."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pytest
import torch
from tiny_models import TINY, tiny_state

from adaserve.distill.prompts import HELD_OUT_FRACTION, phase1, phase2
from adaserve.distill.teacher import TeacherShard, continue_prompts
from adaserve.engine.batch import chunk_batch
from adaserve.engine.kv_cache import KVCache
from adaserve.engine.model import Llama


def test_prompt_set_is_deterministic_diverse_and_split():
    a, b = phase1(600, seed=0), phase1(600, seed=0)
    assert a == b
    assert phase1(600, seed=1) != a
    assert len({p.id for p in a}) == len(a)
    kinds = collections.Counter(p.kind for p in a)
    assert set(kinds) == {"instruction", "question", "coding", "writing", "reasoning", "article"}
    assert len({p.messages for p in a}) > 0.8 * len(a), "templates repeat too much"
    held = sum(p.split == "heldout" for p in a) / len(a)
    assert abs(held - HELD_OUT_FRACTION) < 0.04
    sampled = sum(p.sampled for p in a if p.kind != "article") / sum(p.kind != "article" for p in a)
    assert 0.35 < sampled < 0.65


def test_phase2_builds_on_answers_and_inherits_the_split():
    p1 = phase1(300, seed=0)
    answers = {p.id: (p, f"An answer of the target to {p.id}. " * 5) for p in p1}
    p2 = phase2(answers, seed=0)
    by_id = {p.id: p for p in p1}
    kinds = collections.Counter(p.kind for p in p2)
    assert kinds["summarize"] == sum(p.kind == "article" for p in p1)
    assert kinds["chat"] > 0
    for p in p2:
        parent = by_id[p.id.split("-", 1)[1]]
        assert p.split == parent.split
        text = answers[parent.id][1].strip()
        if p.kind == "chat":
            assert p.messages[:2] == (parent.messages[0], ("assistant", text))
            assert p.messages[-1][0] == "user"
        else:
            assert text[:200] in p.messages[0][1]
    # an empty answer makes no derived prompt
    assert phase2({p1[0].id: (p1[0], "  ")}) == []


@pytest.fixture(scope="module")
def tiny():
    return Llama(TINY, tiny_state(0))


def _reference(model: Llama, tokens: list[int], n_new: int, eos: frozenset[int]):
    """Greedy, one sequence, the whole prefix recomputed every step."""
    toks, probs = list(tokens), []
    for _ in range(n_new):
        c = model.cfg
        kv = KVCache(model.n_layers, 1, c.kv_heads, c.head_dim, len(toks) + 2)
        logits = model(kv, chunk_batch(slice(0, 1), torch.tensor([0]), [toks], kv.trash_col, "last"))
        p = torch.softmax(logits.float(), -1)[0]
        probs.append(p)
        toks.append(int(p.argmax()))
        if toks[-1] in eos:
            break
    return toks, torch.stack(probs)


def _prompts(n, sampled=False, max_new=12):
    return [dataclasses.replace(p, sampled=sampled, max_new=max_new - (i % 3) * 4)
            for i, p in enumerate(phase1(max(n, 6))[:n])]


def test_teacher_greedy_matches_a_plain_reference(tiny):
    g = torch.Generator().manual_seed(0)
    enc = [torch.randint(3, 64, (int(n),), generator=g).tolist() for n in (5, 9, 2, 7)]
    prompts = _prompts(4)  # different max_new: requests finish at different steps (compaction)
    eos = frozenset({1})
    s = continue_prompts(tiny, prompts, enc, eos, k=8, prefill_rows=6)  # prefill in chunks
    assert s.ids == [p.id for p in prompts]
    for i, p in enumerate(prompts):
        toks, n_prompt = s.sequence(i)
        assert n_prompt == len(enc[i]) and toks[:n_prompt].tolist() == enc[i]
        ref, probs = _reference(tiny, enc[i], p.max_new, eos)
        assert toks.tolist() == ref
        rows = slice(s.new_off[i], s.new_off[i + 1])
        top = probs.topk(8, dim=-1)
        np.testing.assert_array_equal(s.topk_ids[rows], top.indices.numpy())
        np.testing.assert_allclose(s.topk_probs[rows].astype(np.float32), top.values.numpy(),
                                   atol=2e-3)


def test_teacher_stops_at_eos_and_sampling_ignores_the_batch(tiny, tmp_path):
    g = torch.Generator().manual_seed(1)
    enc = [torch.randint(3, 64, (6,), generator=g).tolist() for _ in range(5)]
    prompts = _prompts(5, sampled=True, max_new=16)
    together = continue_prompts(tiny, prompts, enc, frozenset(), k=4)
    alone = continue_prompts(tiny, prompts[2:3], enc[2:3], frozenset(), k=4)
    np.testing.assert_array_equal(together.continuation(2), alone.continuation(0))
    assert len({tuple(together.continuation(i)) for i in range(5)}) > 1
    first = int(together.continuation(0)[0])
    stopped = continue_prompts(tiny, prompts[:1], enc[:1], frozenset({first}), k=4)
    assert stopped.continuation(0).tolist() == [first]
    path = tmp_path / "shard.npz"
    together.save(path)
    back = TeacherShard.load(path)
    assert back.ids == together.ids
    np.testing.assert_array_equal(back.topk_probs, together.topk_probs)
    np.testing.assert_array_equal(back.tokens, together.tokens)

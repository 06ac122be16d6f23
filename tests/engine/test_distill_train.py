"""The draft's training form: export parity with the engine, forward KL, resumable training."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from tiny_models import TINY, tiny_state

from adaserve.distill.student import TOKEN_IDS_KEY, Student
from adaserve.distill.teacher import TeacherShard, score_sequence
from adaserve.distill.train import TrainConfig, examples, head_index, kl_loss, collate, train
from adaserve.engine.model import Llama
from adaserve.engine.weights import load_state


def test_student_export_matches_the_engine_forward(smollm):
    """The trained form and the engine's Llama agree on the exported weights (names,
    Q/K/V fusion, RoPE, GQA, the reduced head): a broken export fails here."""
    state = load_state(smollm.path)
    head_ids = torch.randperm(smollm.target.cfg.vocab, generator=torch.Generator().manual_seed(0))[:512]
    student = Student(smollm.target.cfg, state, 2, head_ids)
    with torch.no_grad():  # move every weight off the target's, so a mixed-up name shows
        for p in student.parameters():
            p.add_(0.01 * torch.randn_like(p))
    exported = student.export_state(torch.float32)
    assert "model.embed_tokens.weight" not in exported
    assert exported[TOKEN_IDS_KEY].tolist() == head_ids.tolist()
    engine_state = dict(exported, **{"model.embed_tokens.weight": state["model.embed_tokens.weight"]})
    cfg = dataclasses.replace(smollm.target.cfg, layers=2, tie_embeddings=False)
    draft = Llama(cfg, engine_state)
    tokens = smollm.tokenizer("The quick brown fox jumps over the lazy dog.")["input_ids"]
    with torch.no_grad():
        ours = student.logits(student.hidden(torch.tensor([tokens])))[0]
    # every position but the last predicts a next token the engine scores
    torch.testing.assert_close(score_sequence(draft, tokens, 1), ours[:-1], atol=2e-3, rtol=1e-3)


def _shard(seed: int, n: int = 12, k: int = 4) -> TeacherShard:
    """Synthetic teacher data over the tiny vocabulary (training mechanics, not quality)."""
    g = torch.Generator().manual_seed(seed)
    toks, n_prompt, ids, probs = [], [], [], []
    for _ in range(n):
        p_len, new = int(torch.randint(2, 8, (1,), generator=g)), int(torch.randint(1, 10, (1,), generator=g))
        toks.append(torch.randint(0, TINY.vocab, (p_len + new,), generator=g).numpy())
        n_prompt.append(p_len)
        ids.append(torch.stack([torch.randperm(TINY.vocab, generator=g)[:k] for _ in range(new)]).numpy())
        pr = torch.softmax(torch.randn(new, k, generator=g) * 2, -1).sort(-1, descending=True).values
        probs.append(pr.numpy().astype(np.float16))
    return TeacherShard.from_sequences([f"s{i}" for i in range(n)], toks, n_prompt, ids, probs)


def _student(head: int = 48) -> Student:
    return Student(TINY, tiny_state(0), 2, torch.arange(head))


def test_forward_kl_is_cross_entropy_to_the_teacher_over_the_head():
    s = _student()
    data = examples([_shard(0)], max_len=64)
    hidx = head_index(s.head_ids, TINY.vocab)
    tokens, pos, rows, probs = collate(data, list(range(4)), hidx)
    loss, _ = kl_loss(s, tokens, pos, rows, probs)
    with torch.no_grad():
        logq = torch.log_softmax(s.logits(s.hidden(tokens)).reshape(-1, 48)[pos], -1)
    manual = []
    for r in range(len(pos)):
        ids = rows[r]
        manual.append(-sum(float(probs[r, j]) * float(logq[r, ids[j]]) for j in range(4) if ids[j] >= 0))
    assert loss.item() == pytest.approx(np.mean(manual), rel=1e-5)
    assert (rows < 0).any(), "the sample should hold teacher tokens outside the head"


def test_examples_cut_long_sequences_keep_their_context():
    shard = _shard(1)
    full = examples([shard], max_len=64)
    cut = examples([shard], max_len=6)
    for f, c in zip(full, cut):
        assert len(c.tokens) <= 6 and c.n_prompt >= 1
        n_new = len(c.topk_ids)
        assert np.array_equal(c.tokens[c.n_prompt:], f.tokens[len(f.tokens) - n_new:])
        assert np.array_equal(c.topk_ids, f.topk_ids[len(f.topk_ids) - n_new:])


def test_training_learns_and_resumes_bit_for_bit(tmp_path):
    data = examples([_shard(2, n=24)], max_len=64)
    cfg = TrainConfig(epochs=3.0, tokens_per_step=64, lr=3e-3, warmup=2, checkpoint_every=4)
    straight = _student()
    log = train(straight, data, cfg, tmp_path / "a", progress=False)
    assert np.mean([r["loss"] for r in log[-4:]]) < np.mean([r["loss"] for r in log[:4]])

    interrupted = _student()
    part = train(interrupted, data, cfg, tmp_path / "b", progress=False, stop_after=5)
    assert len(part) == 5
    resumed = _student()  # a fresh process: weights come back from the checkpoint
    log_b = train(resumed, data, cfg, tmp_path / "b", progress=False)
    assert [r["loss"] for r in log_b] == [r["loss"] for r in log]
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name

    with pytest.raises(ValueError, match="other settings"):
        train(_student(), data, dataclasses.replace(cfg, lr=1e-3), tmp_path / "b", progress=False)

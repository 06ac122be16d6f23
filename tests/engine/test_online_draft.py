"""Online draft adaptation (adaserve/engine/online_draft.py, adaserve/distill/online.py):
the buffer stays bounded, a swap is atomic and leaves the draft cache as the new draft
would have built it, a worse update is rolled back, and greedy output is incremental's
before, during and after swaps (the real SmolLM2 pair); with head_rows, head rows pass to
served tokens outside the head, roll back with a rejected update, and reach the engine."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from adaserve.distill.online import InlineTrainer, OnlineTrainer, student_from_draft
from adaserve.distill.online_data import agreement
from adaserve.engine import EngineConfig, SamplingParams
from adaserve.engine.batch import chunk_batch
from adaserve.engine.core import EngineCore
from adaserve.engine.loader import load_models
from adaserve.engine.online_config import OnlineDraftConfig
from adaserve.engine.online_draft import DisagreementBuffer, OnlineDraft
from adaserve.engine.online_records import ServedRecord
from adaserve.engine.request import Request

from engine_helpers import PROMPTS, make_core, run_workload

CODE = ["def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n",
        "for i in range(10):\n    if i % 2 == 0:\n",
        "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n",
        "import os\n\n\ndef list_files(path):\n    out = []\n"]


def _request(rid: str, n: int) -> Request:
    return Request(rid, list(range(1, n + 1)), SamplingParams(), None, 0)


def test_buffer_stays_bounded_and_holds_back_every_nth():
    cfg = OnlineDraftConfig(buffer_positions=10, top_k=4, heldout_every=3, heldout_requests=2)
    buf = DisagreementBuffer(cfg)
    reqs = [_request(f"r{i}", 5 + i) for i in range(4)]
    logits = torch.randn(4, 50)
    for step in range(6):  # 4 misses a step: 24 offered, never more than 10 kept
        buf.observe(reqs, np.full(4, 3), np.array([0, 1, 2, 0]), logits)
        assert buf.positions <= 10
        for r in reqs:
            r.tokens.append(7)
    assert buf.dropped == 24 - 10 and buf.full
    for r in reqs:
        buf.seal(r.id)
    # the 3rd sealed request went to the held-back slice; the others are training data
    assert len(buf.held) == 1 and len(buf.sealed) == 3
    assert buf.positions == sum(len(r.positions) for r in buf.sealed)
    rec = buf.sealed[0]
    assert rec.topk_ids.shape == (len(rec.positions), 4)
    assert np.all(rec.positions < len(rec.tokens)) and np.all(rec.positions >= rec.n_prompt)
    fresh = buf.take()
    assert len(fresh) == 3 and buf.positions == 0 and not buf.sealed
    # a full buffer makes room by dropping the oldest sealed requests, never in-flight ones
    more = [_request(f"s{i}", 4) for i in range(3)]
    for _ in range(5):
        buf.observe(more, np.full(3, 2), np.zeros(3, np.int64), logits[:3])
        for r in more:
            r.tokens.append(1)
    assert buf.positions <= 10


@pytest.mark.parametrize("bad", [{"replay_share": 1.0}, {"replay_share": -0.1},
                                 {"anchor_weight": -0.5}, {"lr": 0.0}, {"interval": 0}])
def test_config_refuses_what_cannot_train(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        OnlineDraftConfig(**bad)


def test_collate_anchors_every_output_position_it_did_not_buffer():
    from adaserve.distill.online_data import collate

    hidx = (torch.arange(100) - 10).clamp(min=-1)  # ids 0-9 are outside the head (row -1)
    toks = np.array([11, 12, 13, 20, 21, 5, 23, 24], np.int32)  # prompt 3, output 5
    ids = np.array([[30, 31], [40, 41]], np.int32)  # buffered at 4 and 6 (misses)
    rec = ServedRecord(toks, 3, np.array([4, 6]), ids, np.array([[.6, .3], [.9, .1]], np.float16))
    tokens, pos, rows, probs = collate([rec], 512, hidx)
    assert pos.tolist() == [3, 5] and rows.tolist() == [[20, 21], [30, 31]]
    tokens, pos, rows, probs = collate([rec], 512, hidx, anchor=0.25)
    assert tokens[0].tolist() == toks.tolist()
    # the misses as before, then positions 3, 5 and 7 (predicted from 2, 4, 6): the token
    # served there with probability 0.25, nothing else; token 5 is outside the head (-1)
    assert pos.tolist() == [3, 5, 2, 4, 6]
    assert rows[2:, 0].tolist() == [10, -1, 14]
    assert probs[2:].tolist() == [[0.25, 0.0]] * 3
    # a cut keeps only positions whose predicting token survived it: tokens 4-7 stay, so
    # the miss at 6 (from 5) and the anchors at 5 and 7 (from 4 and 6)
    _, pos, rows, _ = collate([rec], 4, hidx, anchor=0.25)
    assert pos.tolist() == [1, 0, 2] and rows[:, 0].tolist() == [30, -1, 14]


@pytest.fixture(scope="module")
def pair():
    cfg = EngineConfig(policy="chain-4")
    return cfg, load_models(cfg)


def _records(models, texts: list[str], k: int = 8) -> list[ServedRecord]:
    """Served-like records: each text's tokens (first 4 as the prompt) and the target's
    top-k at every later position, scored teacher-forced."""
    from adaserve.distill.teacher import score_sequence

    out = []
    for t in texts:
        toks = np.array(models.tokenizer.encode(t), np.int32)
        logits = score_sequence(models.target, toks.tolist(), 4)  # rows predict toks[4:]
        top = torch.softmax(logits.float(), -1).topk(k, -1)
        out.append(ServedRecord(toks, 4, np.arange(4, len(toks)),
                                top.indices.numpy().astype(np.int32),
                                top.values.numpy().astype(np.float16)))
    return out


def test_worse_update_is_rolled_back(pair):
    ecfg, models = pair
    from adaserve.distill.online import _draft_dir

    student = student_from_draft(_draft_dir(ecfg), models.draft.embed.float())
    before = {k: v.clone() for k, v in student.state_dict().items()}
    # lr 3.0 wrecks a 3-layer draft in two steps: held-back agreement falls
    cfg = OnlineDraftConfig(lr=3.0, steps=2, tokens_per_step=256, replay_requests=4)
    trainer = OnlineTrainer(cfg, student)
    held = _records(models, [" ".join(PROMPTS[i: i + 4]) for i in range(6)])
    report, state = trainer.update(_records(models, CODE), held)
    assert not report.swapped and state is None
    assert report.agreement_after < report.agreement_before
    for k, v in student.state_dict().items():
        assert torch.equal(v, before[k]), k  # weights and all: as if it never trained
    assert agreement(student, held, cfg.max_len) == report.agreement_before
    # a slice with no output position has no agreement (not 0, not an error)
    prompt_only = ServedRecord(held[0].tokens[:4], 4, np.zeros(0, np.int64),
                               np.zeros((0, 8), np.int32), np.zeros((0, 8), np.float16))
    assert math.isnan(agreement(student, [prompt_only], cfg.max_len))
    assert len(trainer.replay) == len(CODE)  # what it saw still joins the replay


def _outside_head_records(models, n_rows: int) -> tuple[list[ServedRecord], np.ndarray]:
    """Training records whose outputs serve, twice each, n_rows token ids outside the
    draft's head (beside the CODE records' own)."""
    ids = models.draft_token_ids.numpy()
    outside = np.setdiff1d(np.arange(1000, 1000 + 4 * n_rows), ids)[:n_rows]
    recs = _records(models, CODE)
    r = recs[0]
    toks = np.concatenate([r.tokens, np.repeat(outside, 2).astype(np.int32)])
    return [ServedRecord(toks, r.n_prompt, r.positions, r.topk_ids, r.topk_probs)] + recs[1:], \
        outside


def test_head_follows_the_traffic_and_rolls_back_with_the_update(pair):
    ecfg, models = pair
    from adaserve.distill.online import _draft_dir
    from adaserve.distill.train import head_index

    held = _records(models, [" ".join(PROMPTS[i: i + 4]) for i in range(4)])
    fresh, outside = _outside_head_records(models, 6)
    original = models.draft_token_ids.clone()
    # an update that is kept: the six tokens get rows, taken from the head's end among
    # rows whose tokens nothing served used
    student = student_from_draft(_draft_dir(ecfg), models.draft.embed.float())
    cfg = OnlineDraftConfig(steps=1, tokens_per_step=256, min_gain=-1.0, head_rows=4)
    trainer = OnlineTrainer(cfg, student)
    report, state = trainer.update(fresh, held)
    assert report.swapped and report.head_rows == 4  # at most head_rows per update
    ids = student.head_ids
    moved = torch.nonzero(ids != original).flatten()
    assert len(moved) == 4
    served = set(np.concatenate([r.tokens[r.n_prompt:] for r in fresh]).tolist())
    assert not served & set(original[moved].tolist())  # no served token lost its row
    assert moved.min() > len(original) - 200  # from the end: the rarest offline
    # the most served tokens outside the head come first, ties by id
    cnt = np.bincount(np.concatenate([r.tokens[r.n_prompt:] for r in fresh]),
                      minlength=student.embed.shape[0])
    inside = set(original.tolist())
    want = [t for t in np.argsort(-cnt, kind="stable") if cnt[t] >= 2 and t not in inside][:4]
    assert sorted(ids[moved].tolist()) == sorted(want)
    assert set(want) & set(outside.tolist())  # the planted ones are among them
    assert torch.equal(state["adaserve.token_ids"], ids)
    assert torch.equal(trainer.hidx, head_index(ids, student.embed.shape[0]))
    assert int(trainer.hidx[int(ids[moved[0]])]) == int(moved[0])
    # a rejected update puts the head back as it was, ids and index too
    cfg = OnlineDraftConfig(lr=3.0, steps=2, tokens_per_step=256, head_rows=8)
    student = student_from_draft(_draft_dir(ecfg), models.draft.embed.float())
    trainer = OnlineTrainer(cfg, student)
    report, state = trainer.update(fresh, held)
    assert not report.swapped and state is None and report.head_rows == 0
    assert torch.equal(student.head_ids, original)
    assert torch.equal(trainer.hidx, head_index(original, student.embed.shape[0]))
    assert trainer.served_tokens[outside].tolist() == [2] * len(outside)  # what it saw is counted


def test_swap_is_atomic_and_rebuilds_the_draft_cache(pair):
    ecfg, models = pair
    core = EngineCore(ecfg, models)
    cfg = OnlineDraftConfig(interval=2, heldout_every=2, steps=1, tokens_per_step=256,
                            min_gain=-1.0)  # any finished update is swapped in
    online = OnlineDraft(cfg, core.executor, InlineTrainer.for_models(cfg, ecfg, models))
    ex = core.executor
    seen = []  # (draft at the start, draft at the end) of every draft phase
    inner = ex.draft

    def draft(reqs, plan):
        start = ex.models.draft
        out = inner(reqs, plan)
        seen.append((start, ex.models.draft))
        return out

    ex.draft = draft
    checked = False
    for i, p in enumerate(PROMPTS[:8]):
        core.add(f"r{i}", models.tokenizer.encode(p),
                 SamplingParams(max_tokens=6 + 4 * i, ignore_eos=True))
    while core.has_work:
        outs = core.step()
        online.after_step(outs, len(core.waiting), core.slots)
        if online.version and core.slots and not checked:
            # right after the first swap, with requests in flight: their draft K/V is what
            # the new draft computes from scratch
            checked = True
            for s, r in enumerate(core.slots):
                n = int(ex.draft_len[s])
                if n == 0:
                    continue
                kv = ex.draft_kv
                fresh = type(kv)(ex.models.draft.n_layers, 1, kv.k.shape[2], kv.k.shape[4],
                                 kv.slot_len)
                ex.models.draft(fresh, chunk_batch(slice(0, 1), torch.tensor([0]),
                                                   [r.tokens[:n]], fresh.trash_col, "none"))
                torch.testing.assert_close(kv.k[:, s, :, :n], fresh.k[:, 0, :, :n])
    assert online.version >= 1
    assert all(a is b for a, b in seen)  # no draft phase saw two drafts
    # every draft phase ran one served draft; the last swap may come after the last phase
    assert 2 <= len({id(a) for a, _ in seen}) <= online.version + 1
    assert checked


@pytest.mark.slow
def test_greedy_output_is_incremental_across_swaps(pair, tokenizer):
    ecfg, models = pair
    sched = [(0 if i < 4 else 4 * (i - 3), f"r{i}", tokenizer.encode(p),
              SamplingParams(max_tokens=24 + 3 * (i % 5), ignore_eos=True))
             for i, p in enumerate(PROMPTS[:6] + CODE)]
    want = run_workload(make_core("incremental", max_batch=16), sched)
    core = EngineCore(EngineConfig(policy="chain-4", max_batch=4), models)
    # head rows move too: a swap changes the ids the draft's rows stand for mid-serve
    cfg = OnlineDraftConfig(interval=2, heldout_every=2, steps=2, tokens_per_step=256,
                            min_gain=-1.0, head_rows=32, head_min_count=1)
    online = OnlineDraft(cfg, core.executor, InlineTrainer.for_models(cfg, ecfg, models))
    got: dict[str, list[int]] = {}
    pending = sorted(sched, key=lambda s: s[0])
    step = 0
    while pending or core.has_work:
        while pending and pending[0][0] <= step:
            _, rid, ids, params = pending.pop(0)
            core.add(rid, ids, params)
            got[rid] = []
        outs = core.step()
        for o in outs:
            got[o.request_id].extend(o.token_ids)
        online.after_step(outs, len(core.waiting), core.slots)
        step += 1
    assert online.version >= 2  # swaps happened, with requests in flight
    assert sum(r.head_rows for r in online.reports) > 0
    assert not torch.equal(core.executor.models.draft_token_ids, models.draft_token_ids)
    assert got == want


@pytest.mark.slow
def test_trainer_process_updates_pauses_and_stops(pair):
    """The trainer as `adaserve serve --online-draft` runs it: its own process, niced;
    a job comes back as a report and, when accepted, an engine draft of the same shape."""
    import os

    from adaserve.distill.online import TrainerClient

    ecfg, models = pair
    cfg = OnlineDraftConfig(steps=1, tokens_per_step=256, min_gain=-1.0)
    client = TrainerClient.start(cfg, ecfg, models)
    try:
        client.pause(True)  # stopped: nothing comes back
        client.submit(_records(models, CODE), _records(models, [" ".join(PROMPTS[:4])]))
        assert client.result() is None
        client.pause(False)
        report, draft = client.result(block=True)
        assert report.swapped and report.steps == 1
        assert draft.model.n_layers == models.draft.n_layers
        assert draft.model.lm_head.shape == models.draft.lm_head.shape
        assert torch.equal(draft.token_ids, models.draft_token_ids)  # head_rows is 0 here
        assert os.getpriority(os.PRIO_PROCESS, client.proc.pid) == cfg.nice
    finally:
        client.close()
    assert client.proc.returncode == 0

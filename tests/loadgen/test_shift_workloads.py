"""The long-context and domain-shift prompt sets (loadgen/corpus.py, workload.py) and the
domain-shift experiment's chain replay (loadgen/domain_shift.py)."""

from __future__ import annotations

import numpy as np

from adaserve.loadgen.domain_shift import chain_tokens_per_step
from adaserve.loadgen.workload import (LONGCTX_CONTEXT, LONGCTX_ROOM, LONGCTX_TOKENS,
                                       code_share, prompt_set)


def test_sets_are_deterministic_by_seed():
    for kind in ("longctx", "shift"):
        assert prompt_set(kind, 12, seed=3) == prompt_set(kind, 12, seed=3)
        assert prompt_set(kind, 12, seed=3) != prompt_set(kind, 12, seed=4)


def test_longctx_documents_are_sized_by_the_tokenizer_and_fit_the_context():
    """Each document is as many whole lines as fit the drawn token count (by the target's
    tokenizer, so not over it and at most a line under), and the whole request fits the
    model's context: the char-sized generator this replaces overshot by up to 30%."""
    import random

    from adaserve.engine.engine import encode_chat
    from adaserve.loadgen.tokens import target_tokenizer, text_tokens

    lo, hi = LONGCTX_TOKENS
    tok, count = target_tokenizer(), text_tokens()
    drawn = []
    for seed in (*range(8), 26, 68):  # 26 and 68 draw over the cap
        (p,) = prompt_set("longctx", 1, seed=seed)
        want = min(random.Random(seed).randint(lo, hi),
                   LONGCTX_CONTEXT - p.max_tokens - LONGCTX_ROOM)
        text = p.messages[0][1]
        assert text.startswith("```python\n")
        doc, _, q = text.rpartition("\n```\n\n")
        n = count(doc[len("```python\n"):])
        assert want - 100 <= n <= want, (seed, want, n)
        assert len(encode_chat(tok, p.as_messages())) + p.max_tokens <= LONGCTX_CONTEXT
        assert q.endswith(("?", "each.", "sentences."))
        drawn.append(want)
    assert max(drawn) == LONGCTX_CONTEXT - 96 - LONGCTX_ROOM  # the cap was exercised


def test_shift_stream_moves_from_own_domain_to_code():
    n = 200
    s = prompt_set("shift", n, seed=1)
    kinds = [p.kind for p in s]
    assert set(kinds[: int(0.2 * n)]) == {"short"}  # before the ramp: the draft's own
    assert set(kinds[int(0.6 * n) + 1:]) == {"code"}  # after it: all code
    mid = kinds[int(0.3 * n): int(0.5 * n)]
    assert 0 < mid.count("code") < len(mid)
    assert code_share(0, n) == 0 and code_share(n - 1, n) == 1
    assert len({p.messages for p in s if p.kind == "short"}) == kinds.count("short")


def test_build_plan_gives_the_stream_a_prompt_per_request():
    from types import SimpleNamespace

    from adaserve.loadgen.arrivals import build_plan

    opts = SimpleNamespace(arrival="poisson", mix="urgent=0.6,moderate=0.2,relaxed=0.2",
                           urgent=-1, rate=1.0, cv=1.0, requests=600, seed=0,
                           prompts="shift", max_tokens=32, mix_draw="exact")
    plan = build_plan(opts)
    assert [a.prompt for a in plan] == prompt_set("shift", 600, 0)  # in order, not cycled
    assert plan[-1].prompt.kind == "code" and plan[0].prompt.kind == "short"


def test_chain_replay_counts_steps_like_the_engine():
    agree = np.array([1, 1, 1, 1, 1, 1, 0, 0, 1], bool)
    # step 1 accepts 4 + 1 (positions 0-4); step 2 accepts position 5, position 6 is the
    # target's; step 3: position 7 the target's; step 4: position 8 accepted, output ends
    assert chain_tokens_per_step(agree, 4) == 9 / 4
    assert chain_tokens_per_step(np.zeros(5, bool), 4) == 1.0
    assert chain_tokens_per_step(np.ones(10, bool), 4) == 5.0  # two steps of 4 + 1

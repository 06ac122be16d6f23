"""A separate draft meets a short prompt at its request's first draft, not at prefill
(torch_executor.TorchExecutor._catch_up): what it then holds is what an eager prefill
would have written, a long prompt still prefills the draft chunk by chunk, and a lag is
caught up in forwards of its own, so the roots' forward is not padded to it. A bounded
(windowed) draft takes every prompt lazily and catches up on its sinks and window alone.
Greedy parity with the lazy draft is test_speculative_greedy's (its prompts are all
short), and with the bounded one at 6,000 tokens test_long_context's."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from adaserve.engine.executor import PrefillChunk
from adaserve.engine.torch_executor import LAZY_DRAFT_PROMPT

from engine_helpers import PROMPTS, make_core


def _executor(tokenizer):
    core = make_core("chain-4", draft="auto")
    ids = tokenizer.encode(" ".join(PROMPTS[:6]))  # > CATCH_UP_INLINE tokens
    return core.executor, ids


def test_short_prompt_reaches_the_draft_at_its_first_draft_with_eager_kv(tokenizer):
    ex, ids = _executor(tokenizer)
    body = tuple(ids[:-1])  # the engine leaves the last prompt token for the root
    # slot 0: a long prompt's chunk (eager); slot 1: the same tokens as a short prompt
    ex.prefill([PrefillChunk(0, 0, body, LAZY_DRAFT_PROMPT + 1),
                PrefillChunk(1, 0, body, len(ids))])
    assert ex.draft_len[0] == len(body) and ex.draft_len[1] == 0
    # both slots now decode with the whole prompt committed; the draft catches slot 1 up
    reqs = [SimpleNamespace(tokens=list(ids)), SimpleNamespace(tokens=list(ids))]
    forwards = []
    draft = ex.models.draft
    hook = draft.register_forward_hook(lambda m, a, out: forwards.append(a[1].tokens.shape))
    try:
        ex._catch_up(reqs)
    finally:
        hook.remove()
    assert forwards == [(1, len(body))]  # slot 1 alone, unpadded
    assert ex.draft_len[1] == len(body)
    n = len(body)
    for layer in range(draft.n_layers):
        torch.testing.assert_close(ex.draft_kv.k[layer][1, :, :n], ex.draft_kv.k[layer][0, :, :n],
                                   rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(ex.draft_kv.v[layer][1, :, :n], ex.draft_kv.v[layer][0, :, :n],
                                   rtol=1e-4, atol=1e-4)


def test_short_lags_ride_with_the_roots_and_long_ones_group_by_length(tokenizer):
    ex, ids = _executor(tokenizer)
    base = list(ids) * 12  # long enough for every lag below
    lags = [3, 40, 38, 90]  # tokens each slot's draft has not seen, the root included
    for slot, lag in enumerate(lags):
        ex.draft_len[slot] = 0
    reqs = [SimpleNamespace(tokens=base[: lag + 1]) for lag in lags]
    forwards = []
    hook = ex.models.draft.register_forward_hook(
        lambda m, a, out: forwards.append(tuple(a[1].tokens.shape)))
    try:
        ex._catch_up(reqs)
    finally:
        hook.remove()
    # 90 alone (padding 40 and 38 to it would be more than a third of the tokens), then
    # 40 with 38 in one forward; the lag of 3 is left for draft_trees
    assert forwards == [(1, 90), (2, 40)]
    assert ex.draft_len[:4].tolist() == [0, 40, 38, 90]


def test_a_bounded_draft_catches_up_on_its_sinks_and_window_only(tokenizer):
    core = make_core("chain-4", draft="auto", draft_window=64, draft_sinks=4)
    ex, w = core.executor, core.executor.window
    ids = (tokenizer.encode(" ".join(PROMPTS)) * 8)[:600]
    body = tuple(ids[:-1])
    ex.prefill([PrefillChunk(0, 0, body, len(ids))])  # a long prompt: nothing reaches the draft
    assert ex.draft_len[0] == 0
    forwards = []
    draft = ex.models.draft
    hook = draft.register_forward_hook(lambda m, a, out: forwards.append(
        (tuple(a[1].tokens.shape), int(a[1].positions.min()))))
    try:
        ex._catch_up([SimpleNamespace(tokens=list(ids))])
    finally:
        hook.remove()
    # the 4 sinks, then the 64 tokens before the root; the 531 between are skipped
    assert forwards == [((1, 4), 0), ((1, 64), len(body) - 64)]
    assert ex.draft_len[0] == len(body)
    # slot 1 fed every token, as before: the first layer's K/V depend on a token and its
    # position alone, so they match on every column the window holds (sinks and the ring
    # in its wrapped order); deeper layers saw less context in slot 0, by design
    w.feed(draft, ex.draft_kv, torch.tensor([1]), torch.tensor([0]), [list(body)],
           want_logits=False)
    cols = w.ring_end
    torch.testing.assert_close(ex.draft_kv.k[0][0, :, :cols], ex.draft_kv.k[0][1, :, :cols],
                               rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ex.draft_kv.v[0][0, :, :cols], ex.draft_kv.v[0][1, :, :cols],
                               rtol=1e-4, atol=1e-4)

"""Option prefill=yield (scheduler/prefill_yield.py): the prefill chunk waits only where a
step with it would push more decoding requests off their SLO (that a plain step keeps on
it) than waiting one plain step pushes prompts past their TTFT SLO, and the engine loop
then decodes without prefilling."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adaserve.scheduler import SchedulerConfig, make_policy
from adaserve.scheduler.admission import DEFAULT_TTFT_SLO_S
from adaserve.scheduler.authors import raw_need
from adaserve.scheduler.prefill_yield import PromptQueue, StepTimes, chunk_waits, wait_breaks
from adaserve.scheduler.slo import SLO, BatchView, RequestProgress

RULES = SchedulerConfig(budget=4).rules
T0, T1 = 0.045, 0.5  # the served CPU at 4-8k tokens: a plain step, a step with a chunk
NONE = PromptQueue.empty(128)  # no prompt whose TTFT the wait could break


def _one(latency_s, decoded=20, tpot_ms=70.0):
    return BatchView.from_progress([RequestProgress("r", SLO.from_ms(tpot_ms), latency_s,
                                                    decoded, 4000)])


@pytest.mark.parametrize("latency_s, breaks", [
    (20 * 0.07 - 0.01, True),  # 10 ms ahead of its SLO: the plain step keeps it, the chunk not
    (0.4, False),  # a second ahead: it absorbs the chunk
    (3.0, False),  # already past saving at the plain step: it holds nothing back
])
def test_the_chunk_waits_only_for_a_request_it_would_push_off_its_slo(latency_s, breaks):
    batch = _one(latency_s)
    # the premise of each case, by the formula itself
    held = [float(raw_need(batch, t, RULES)[0]) <= 1.0 for t in (T0, T1)]
    assert held == {True: [True, False], False: held}[breaks]
    assert chunk_waits(batch, NONE, T0, T1, RULES) is breaks


def test_nothing_waits_before_both_steps_are_measured_or_for_best_effort():
    near = _one(20 * 0.07 - 0.01)
    assert not chunk_waits(near, NONE, math.nan, T1, RULES)
    assert not chunk_waits(near, NONE, T0, math.nan, RULES)
    assert not chunk_waits(near, NONE, T1, T0, RULES)  # a chunk that costs nothing extra
    best_effort = BatchView.from_progress([RequestProgress("r", SLO.from_ms(None), 1.39, 20)])
    assert not chunk_waits(best_effort, NONE, T0, T1, RULES)
    times = StepTimes()
    times.observe(0.04, prefilled=0)
    times.observe(0.60, prefilled=128)
    times.observe(0.40, prefilled=128)
    assert times.plain_s == 0.04 and times.prefill_s == pytest.approx(0.55)


def _queue(slack_s, tokens_left, chunk=128):
    return PromptQueue(np.array(slack_s, float), np.array(tokens_left, np.int64), chunk)


def test_waiting_breaks_a_prompt_only_where_one_more_plain_step_makes_it_late():
    # 128 tokens each, one chunk an iteration: the k-th prompt's first token comes out of
    # the k-th iteration of T1 (its last chunk's, where it is promoted and decodes)
    first = [k * T1 for k in (1, 2, 3, 4)]
    prompts = _queue([first[0] - 0.1, first[1] + T0 / 2, first[2] + 2 * T0, first[3] - 0.01],
                     [128] * 4)
    # the first is late even if prefilled now; the second is in time now and late after a
    # wait; the third is in time either way; the fourth is late even if prefilled now
    assert wait_breaks(prompts, T0, T1).tolist() == [False, True, False, False]
    # behind a prompt with nothing left to prefill, a prompt's first chunk is the next one
    assert wait_breaks(_queue([10.0, T1 + T0 / 2], [0, 128]), T0, T1).tolist() == [False, True]


def test_the_chunk_waits_only_for_more_decoders_than_the_wait_makes_prompts_late():
    near = _one(20 * 0.07 - 0.01)
    two_near = BatchView.from_progress([RequestProgress(r, SLO.from_ms(70.0), 20 * 0.07 - 0.01,
                                                        20, 4000) for r in "ab"])
    marginal = _queue([T1 + T0 / 2], [100])  # in time now, late one plain step later
    relaxed = _queue([60.0], [100])  # a minute to spare: waiting costs it nothing
    assert chunk_waits(near, relaxed, T0, T1, RULES)
    assert not chunk_waits(near, marginal, T0, T1, RULES)  # one for one: the prefill goes on
    assert chunk_waits(two_near, marginal, T0, T1, RULES)  # two decoders for one prompt


def test_a_request_the_chunk_sets_back_less_than_speculation_commits_does_not_hold_it():
    # 60 ms of slack for its next token at a 70 ms SLO: a plain step keeps it; a chunk
    # that adds 30 ms (the short-prompt CPU) leaves it 0.27 tokens behind, one that adds
    # 455 ms (4-8k-token contexts) 6.6 tokens
    near = _one(22 * 0.07 - 0.06)
    short_t1 = T0 + 0.030
    needs = [float(raw_need(near, t, RULES)[0]) for t in (T0, short_t1, T1)]
    assert needs[0] <= 1.0 < needs[1] < 1.6 < needs[2]
    assert chunk_waits(near, NONE, T0, short_t1, RULES)  # the root alone cannot make it up
    assert not chunk_waits(near, NONE, T0, short_t1, RULES, commit=1.6)  # a drafted token can
    assert chunk_waits(near, NONE, T0, T1, RULES, commit=1.6)  # nor can it 6.5 tokens
    # the policy prices the commit from the request's acceptance rate
    policy = make_policy("adaserve:prefill=yield", SchedulerConfig(budget=4))
    policy.acceptance.observe(["r"] * 50, np.full(50, 4), np.full(50, 4))  # accepts all
    assert policy.acceptance.alpha("r") > 0.5
    assert not policy.prefill_waits(near, NONE, T0, short_t1)
    assert policy.prefill_waits(near, NONE, T0, T1)


def test_only_the_option_lets_the_chunk_wait():
    near = _one(20 * 0.07 - 0.01)
    for spec in ("adaserve", "adaserve-authors:prefill=yield"):  # the preset carries it
        assert make_policy(spec, SchedulerConfig(budget=4)).prefill_waits(near, NONE, T0, T1)
        # the engine asks only a policy whose chunks may wait
        assert make_policy(spec, SchedulerConfig(budget=4)).prefill == "yield"
    for spec in ("adaserve:prefill=chunk", "adaserve-authors", "incremental", "specinfer"):
        policy = make_policy(spec, SchedulerConfig(budget=4))
        assert not policy.prefill_waits(near, NONE, T0, T1) and policy.prefill == "chunk"
    with pytest.raises(ValueError, match="prefill"):
        make_policy("adaserve:prefill=later", SchedulerConfig(budget=4))


def test_the_engine_decodes_without_prefilling_while_the_chunk_waits():
    """The real engine loop (simulated model): a request decoding, a long prompt waiting.
    While the policy holds the chunk, iterations decode and prefill nothing; released, the
    prompt is prefilled in the same iteration as the decode."""
    from adaserve.engine.sampling import SamplingParams
    from adaserve.sim.driver import build
    from adaserve.sim.setups import Deployment

    setup = Deployment.load("paper-llama3.1-70b").setup("adaserve:prefill=yield", max_batch=2)
    core, _ = build(setup, max_context=8192, max_waiting=8)
    core.add("a", [0] * 16, SamplingParams(max_tokens=64))
    while core.n_decode == 0:
        core.step()
    long = core.add("b", [0] * (4 * core.cfg.prefill_chunk), SamplingParams(max_tokens=8))
    asked, slack = [], []
    hold = True
    core.policy.prefill_waits = lambda batch, prompts, t0, t1: (
        asked.append((batch.request_ids, prompts.tokens_left.tolist()))
        or slack.append(float(prompts.slack_s[0])) or hold)
    for _ in range(3):
        core.step()
    assert long.target_len == 0 and core.stats[-1].prefill_tokens == 0
    # asked with the decoding requests, and the prompt with all its tokens but the last
    # (the root of its first speculation) still to prefill, its TTFT deadline (the
    # default 5 s: the simulator's requests bring none) drawing nearer every iteration
    assert asked == [(("a",), [4 * core.cfg.prefill_chunk - 1])] * 3
    assert DEFAULT_TTFT_SLO_S >= slack[0] > slack[1] > slack[2] > 0
    hold = False
    core.step()
    assert long.target_len == core.cfg.prefill_chunk and core.stats[-1].running == 1


def test_recover_counts_only_the_decoders_the_plain_steps_cannot_bring_back_in_time():
    # 10 ms ahead at a 70 ms SLO after 20 tokens: the 0.5-s chunk leaves it ~5 tokens short,
    # and a 45-ms plain step makes up 1 - 45/70 of a token; so it needs ~14 more tokens
    near = _one(20 * 0.07 - 0.01)
    short = float(raw_need(near, T1, RULES)[0]) - 1.0
    made_up = 1.0 - float(raw_need(near, T0, RULES)[0] - raw_need(near, 0.0, RULES)[0])
    needed = short / made_up  # plain steps, a token each
    assert 10 < needed < 20
    assert chunk_waits(near, NONE, T0, T1, RULES, left=np.array([needed - 2]))
    assert not chunk_waits(near, NONE, T0, T1, RULES, left=np.array([needed + 2]))
    assert chunk_waits(near, NONE, T0, T1, RULES, left=np.array([np.nan]))  # unknown: yield's
    # a plain step slower than the SLO makes nothing up, however long the output
    assert chunk_waits(near, NONE, 0.08, T1, RULES, left=np.array([1e6]))


def test_recover_reads_the_finished_outputs_lengths_not_the_requests_own():
    near = _one(20 * 0.07 - 0.01)
    policy = make_policy("adaserve:prefill=recover", SchedulerConfig(budget=4))
    assert policy.prefill == "recover"
    assert policy.prefill_waits(near, NONE, T0, T1)  # nothing finished yet: yield's verdict
    for i in range(8):  # outputs of 25 tokens: 5 left after the 20th, too few to make it up
        policy.forget(f"short{i}", 25)
    assert policy.prefill_waits(near, NONE, T0, T1)
    for i in range(16):  # outputs of 200 tokens now form the median: time enough
        policy.forget(f"long{i}", 200)
    assert not policy.prefill_waits(near, NONE, T0, T1)
    policy.forget("aborted")  # an abort before its first decoded token teaches nothing
    assert not policy.prefill_waits(near, NONE, T0, T1)
    # yield never reads them
    yielding = make_policy("adaserve:prefill=yield", SchedulerConfig(budget=4))
    for i in range(16):
        yielding.forget(f"long{i}", 200)
    assert yielding.prefill_waits(near, NONE, T0, T1)


def test_the_engine_tells_the_policy_each_finished_outputs_length():
    """The real engine loop (simulated model): at its finish the policy learns how many
    tokens a request decoded after its first; nothing for one that never started."""
    from adaserve.engine.sampling import SamplingParams
    from adaserve.sim.driver import build
    from adaserve.sim.setups import Deployment

    setup = Deployment.load("paper-llama3.1-70b").setup("adaserve:prefill=recover", max_batch=2)
    core, _ = build(setup, max_context=8192, max_waiting=8)
    told = []
    forget = core.policy.forget
    core.policy.forget = lambda rid, decoded=None: told.append((rid, decoded)) or forget(
        rid, decoded)
    core.add("a", [0] * 16, SamplingParams(max_tokens=12))
    core.add("b", [0] * 16, SamplingParams(max_tokens=5))
    while core.n_decode or core.waiting or core.slots:
        core.step()
    assert sorted(told) == [("a", 11), ("b", 4)]  # max_tokens, less the first token

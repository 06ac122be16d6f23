"""Option prefill=yield (scheduler/prefill_yield.py): the prefill chunk waits only where a
step with it would push a decoding request off its SLO that a plain step keeps on it, and
the engine loop then decodes without prefilling."""

from __future__ import annotations

import math

import pytest

from adaserve.scheduler import SchedulerConfig, make_policy
from adaserve.scheduler.authors import raw_need
from adaserve.scheduler.prefill_yield import StepTimes, chunk_breaks
from adaserve.scheduler.slo import SLO, BatchView, RequestProgress

RULES = SchedulerConfig(budget=4).rules
T0, T1 = 0.045, 0.5  # the served CPU at 4-8k tokens: a plain step, a step with a chunk


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
    assert chunk_breaks(batch, T0, T1, RULES) is breaks


def test_nothing_waits_before_both_steps_are_measured_or_for_best_effort():
    near = _one(20 * 0.07 - 0.01)
    assert not chunk_breaks(near, math.nan, T1, RULES)
    assert not chunk_breaks(near, T0, math.nan, RULES)
    assert not chunk_breaks(near, T1, T0, RULES)  # a chunk that costs nothing extra
    best_effort = BatchView.from_progress([RequestProgress("r", SLO.from_ms(None), 1.39, 20)])
    assert not chunk_breaks(best_effort, T0, T1, RULES)
    times = StepTimes()
    times.observe(0.04, prefilled=0)
    times.observe(0.60, prefilled=128)
    times.observe(0.40, prefilled=128)
    assert times.plain_s == 0.04 and times.prefill_s == pytest.approx(0.55)


def test_only_the_option_lets_the_chunk_wait():
    near = _one(20 * 0.07 - 0.01)
    assert make_policy("adaserve:prefill=yield", SchedulerConfig(budget=4)).prefill_waits(near, T0, T1)
    # the engine asks only a policy whose chunks may wait
    assert make_policy("adaserve:prefill=yield", SchedulerConfig(budget=4)).prefill == "yield"
    for spec in ("adaserve", "adaserve-authors", "incremental", "specinfer"):
        policy = make_policy(spec, SchedulerConfig(budget=4))
        assert not policy.prefill_waits(near, T0, T1) and policy.prefill == "chunk"
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
    asked = []
    hold = True
    core.policy.prefill_waits = lambda batch, t0, t1: asked.append(batch.request_ids) or hold
    for _ in range(3):
        core.step()
    assert long.target_len == 0 and core.stats[-1].prefill_tokens == 0
    assert asked == [("a",)] * 3  # asked with the decoding requests only
    hold = False
    core.step()
    assert long.target_len == core.cfg.prefill_chunk and core.stats[-1].running == 1

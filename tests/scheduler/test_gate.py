"""The gate (scheduler/gate.py): a planned draft runs only if it keeps more requests at
pace than the plain step does."""

from __future__ import annotations

import numpy as np
import pytest

from adaserve.scheduler import (
    SLO,
    AcceptanceTracker,
    BatchView,
    IterationLatency,
    LatencyModel,
    RequestProgress,
    SchedulerConfig,
    make_policy,
)
from adaserve.scheduler.authors import AdaServeRules, raw_need
from adaserve.scheduler.gate import drafting_pays

RULES = AdaServeRules()


def _batch(*requests):
    """(SLO ms or None, l seconds, o tokens) per request."""
    return BatchView.from_progress([
        RequestProgress(f"r{i}", SLO.from_ms(slo), l, o, 100, max_tokens_left=50)
        for i, (slo, l, o) in enumerate(requests)])


def test_raw_need_is_the_authors_need_at_the_paced_slo_unclipped():
    b = _batch((100.0, 0.95, 9), (None, 1.0, 9))
    need = raw_need(b, 0.05, RULES, 0.5)
    # (t x correction + l) / (fraction x SLO) - o, the prefill's token counted in o
    assert need[0] == pytest.approx((0.05 * RULES.correction + 0.95) / 0.05 - 10)
    assert np.isnan(need[1])


# a request near its 100 ms SLO: held by one token at a 50 ms plain step, not by the
# 1.5 tokens a chain of 1 at alpha 0.5 is expected to give in a 200 ms drafted step
NEAR = (100.0, 0.95, 9)
# an urgent request past saving: 20 ms against 90 ms a token so far
LOST = (20.0, 0.9, 9)
# a request a draft saves: 40 ms, behind at the plain step (need 1.3), held by 2.7 tokens
BEHIND = (40.0, 0.40, 9)


@pytest.mark.parametrize("requests, alpha, t_draft, pays", [
    ((NEAR, LOST), 0.5, 0.2, False),  # breaks one, saves none: the overload case
    ((LOST,), 0.9, 0.06, False),  # saves nobody, breaks nobody: the plain step is shorter
    ((BEHIND,), 0.9, 0.06, True),  # saves one
    ((BEHIND, NEAR), 0.9, 0.2, False),  # at 200 ms the draft holds neither
    ((BEHIND, (None, 0.1, 9)), 0.9, 0.06, True),  # best effort counts on neither side
])
def test_drafting_pays_counts_requests_saved_against_requests_broken(requests, alpha,
                                                                     t_draft, pays):
    b = _batch(*requests)
    assert drafting_pays(b, np.full(b.n, alpha), 1 if alpha == 0.5 else 2, 0.05, t_draft,
                         1.0, RULES) is pays


def _policy(gate: str, alpha: float):
    target = LatencyModel(alpha=0.0, gamma=3e-3, delta=0.04)
    draft = LatencyModel(alpha=0.0, gamma=0.0, delta=0.004)
    tracker = AcceptanceTracker(prior_alpha=alpha, prior_weight=1e9)
    return make_policy(f"adaserve-authors:gate={gate}", SchedulerConfig(budget=16),
                       IterationLatency(target, draft), tracker)


def test_the_gate_keeps_the_plain_step_where_drafting_saves_nobody_and_drafts_where_it_does():
    """Requests past saving and requests on their SLO at the plain step: the authors'
    scheduler drafts (Eq. 8), the gate keeps the roots alone; a request behind that a
    draft brings back to its SLO is drafted for either way."""
    lost = _batch(LOST, LOST, (150.0, 0.5, 9), (150.0, 0.5, 9))
    behind = _batch((45.0, 0.46, 9), (150.0, 0.5, 9))
    for batch, drafts in ((lost, False), (behind, True)):
        off, on = _policy("off", 0.8).plan(batch), _policy("on", 0.8).plan(batch)
        assert off.speculates
        assert on.speculates is drafts
        if not drafts:
            assert on.depth == 0 and on.t_spec_s < off.t_spec_s


def test_the_gate_is_an_option_of_one_adaserve():
    policy = _policy("on", 0.8)
    assert policy.options.gate and "gate=on" in policy.options.text()
    with pytest.raises(ValueError, match="gate takes on or off"):
        make_policy("adaserve:gate=maybe", SchedulerConfig(budget=16))

"""TTFT-aware admission (scheduler/admission.py, option admit=deadline): requests still in
time for their TTFT SLO are admitted first, earliest deadline first; late ones wait until
nobody in time does, oldest first."""

from __future__ import annotations

import numpy as np
import pytest

from adaserve.scheduler import SchedulerConfig, make_policy, policy_options
from adaserve.scheduler.admission import deadline_order


def test_in_time_requests_first_then_the_late_oldest_first():
    # arrivals at 0, 1, 2, 9, 10 s; now 8 s, TTFT SLO 5 s: deadlines 5, 6, 7 passed
    order = deadline_order(np.array([0.0, 1.0, 2.0, 9.0, 10.0]), now=8.0, ttft_slo_s=5.0)
    assert order.tolist() == [3, 4, 0, 1, 2]
    # with nobody late it is first come, first served
    assert deadline_order(np.array([3.0, 1.0, 2.0]), now=2.5).tolist() == [1, 2, 0]
    # ties keep arrival order
    assert deadline_order(np.array([1.0, 1.0, 1.0]), now=0.0).tolist() == [0, 1, 2]


def test_the_option_reaches_the_policy_and_the_baselines_stay_first_come():
    cfg = SchedulerConfig(budget=8)
    assert make_policy("adaserve:admit=deadline", cfg).admission == "deadline"
    assert make_policy("adaserve-authors", cfg).admission == "fifo"
    assert make_policy("incremental", cfg).admission == "fifo"
    with pytest.raises(ValueError, match="admit"):
        policy_options("adaserve:admit=lifo")


@pytest.mark.parametrize("admit, first", [("fifo", 1), ("deadline", 2)])
def test_the_engine_admits_in_the_order_the_option_says(admit, first):
    """One slot, busy ~12 s with request 0; request 1 arrives at once, request 2 at 9 s.
    When the slot frees, request 1 is 7 s past its 5-s TTFT deadline and request 2 still in
    time: first come admits 1, deadline admits 2 (the real engine loop, simulated model)."""
    from adaserve.sim import SimRequest
    from adaserve.sim.run import run
    from adaserve.sim.setups import Deployment

    setup = Deployment.load("paper-llama3.1-70b").setup(f"adaserve:admit={admit}", max_batch=1)
    reqs = [SimRequest(0, 0.0, "x", 30.0, 100, 600), SimRequest(1, 0.01, "x", 30.0, 100, 64),
            SimRequest(2, 9.0, "x", 30.0, 100, 64)]
    rec = {r.index: r for r in run(setup, reqs).records}
    assert 9.5 < rec[0].last_token_s < 13.5  # busy when request 2 came, which is then in time
    other = 3 - first
    assert rec[first].first_token_s < rec[other].first_token_s

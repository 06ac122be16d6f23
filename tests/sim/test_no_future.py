"""No scheduler sees the future: where an output ends reaches the engine only as the
model's EOS, so two runs whose traces differ only in where outputs end decide alike until
the first EOS that differs comes out."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from adaserve.scheduler import BatchView
from adaserve.sim import SimRequest, build, simulate
from adaserve.sim.executor import SIM_EOS
from adaserve.sim.setups import Deployment

# the shipped policies that read the horizon (triage) and the depth floor, and the paper's
POLICIES = ("adaserve-authors", "adaserve")


def _trace(n: int = 48) -> list[SimRequest]:
    """A loaded burst on the Llama set-up: urgent (x1.2), moderate and relaxed classes at
    ~8 req/s, 256-token caps, so the SLO phase and triage have work to do."""
    rng = np.random.default_rng(7)
    slos = {"urgent": 1.2, "moderate": 2.4, "relaxed": 8.0}
    classes = rng.choice(list(slos), n, p=[0.6, 0.2, 0.2])
    return [SimRequest(i, float(0.125 * i), str(c), slos[str(c)] * 33.6,
                       int(rng.integers(64, 512)), 256, slo_relative=True)
            for i, c in enumerate(classes)]


def _decisions(policy: str, requests: list[SimRequest]
               ) -> tuple[list[tuple], dict[int, int]]:
    """Every iteration's decisions (the batch's requests in order, the depth and width
    planned, the selected nodes per request) and the iteration in which each request
    finished."""
    setup = Deployment.load("paper-llama3.1-70b").setup(policy)
    core, clock = build(setup, max_context=1024, max_waiting=len(requests))
    log: list[tuple] = []
    select = core.policy.select

    def spy(view: BatchView, plan, candidates):
        sel = select(view, plan, candidates)
        log.append((view.request_ids, plan.depth, plan.width,
                    tuple(map(tuple, np.nonzero(sel.mask)))))
        return sel

    core.policy.select = spy  # records what the real policy decided; changes nothing
    ended: dict[int, int] = {}
    seen: set[str] = set()

    def on_step(done: int) -> None:
        seen.update(core.by_id)
        for rid in seen - set(core.by_id):
            ended.setdefault(int(rid), len(log))

    simulate(core, clock, requests, on_step=on_step)
    return log, ended


@pytest.mark.parametrize("policy", POLICIES)
def test_runs_differing_only_where_outputs_end_decide_alike_until_that_eos(policy):
    base = _trace()
    # run A: every output runs to its cap; run B: a third of them end early at the model's
    # EOS, at lengths a client could not have sent
    early = {i: int(120 + 7 * i % 120) for i in range(0, len(base), 3)}
    ended_early = [dataclasses.replace(r, ends_at=early.get(r.index)) for r in base]
    log_a, ended_a = _decisions(policy, base)
    log_b, ended_b = _decisions(policy, ended_early)
    # the first EOS that differs: the first iteration after which the runs have not
    # finished the same requests (a request dropped past its SLO ends in both)
    first_eos = min(min(ended_a[i], ended_b[i]) for i in ended_b if ended_a[i] != ended_b[i])
    assert first_eos > 10, "the EOS came too soon to test anything"
    assert log_a[:first_eos] == log_b[:first_eos]
    # and the runs do part after it (B has requests A still serves), so the check can fail
    assert log_a[first_eos:] != log_b[first_eos:]


def test_the_simulated_model_ends_an_output_with_an_eos_the_engine_reads():
    r = SimRequest(0, 0.0, "c", 50.0, prompt_tokens=8, output_tokens=64, ends_at=21)
    setup = Deployment.load("paper-llama3.1-70b").setup("adaserve-authors")
    core, clock = build(setup, max_context=128, max_waiting=1)
    assert SIM_EOS in core.executor.eos_ids
    (rec,) = simulate(core, clock, [r])
    assert rec.status == "ok" and rec.output_tokens == 21
    # the same request without an end runs to its cap, with the same cap sent
    core, clock = build(setup, max_context=128, max_waiting=1)
    (rec,) = simulate(core, clock, [dataclasses.replace(r, ends_at=None)])
    assert rec.output_tokens == 64


def test_an_end_past_the_cap_is_refused():
    with pytest.raises(ValueError, match="ends_at"):
        SimRequest(0, 0.0, "c", 50.0, prompt_tokens=8, output_tokens=16, ends_at=17)

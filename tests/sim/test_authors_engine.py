"""What the authors' set-up adds around the scheduler: the early-termination flag, outputs
that end at EOS, the deployments, vLLM's graph cap and batch expansion."""

from __future__ import annotations

import numpy as np
import pytest

from adaserve.scheduler import AdaServeRules
from adaserve.sim import SimRequest, SimSetup, build, simulate
from adaserve.sim.hardware import HardwareModel, TableCost
from adaserve.sim.setups import Deployment, available
from adaserve.sim.workload import eos_mean, output_length, stop_at_eos
from sim_models import ChainAcceptance, linear_hardware


def test_a_request_past_its_slo_plus_the_slack_is_dropped_when_the_flag_is_on():
    # one token per iteration (accept 0): with chain depth 3 each iteration is 2 x 3 ms of
    # draft + 10 + 4 ms verify = 20 ms, so a 5 ms SLO falls behind by 3 tokens an
    # iteration: past SLO x (tokens + 6) after a few; the 50 ms one never
    urgent = SimRequest(0, 0.0, "urgent", 5.0, prompt_tokens=3, output_tokens=40)
    easy = SimRequest(1, 0.0, "easy", 50.0, prompt_tokens=3, output_tokens=40)
    setup = SimSetup(linear_hardware(), ChainAcceptance(accept=0), policy="global-greedy",
                     budget=8, max_depth=3, max_width=1, cost_aware_depth=False,
                     slo_drop_slack=6)
    core, clock = build(setup, max_context=64, max_waiting=4)
    ru, re_ = simulate(core, clock, [urgent, easy])
    assert ru.status == "error" and ru.error == "dropped: too far past its TPOT SLO"
    assert 1 < ru.output_tokens < 40 and ru.attained is False
    assert re_.status == "ok" and re_.output_tokens == 40
    # off (the default): both run to the end
    core, clock = build(SimSetup(setup.hardware, setup.acceptance, policy="global-greedy",
                                 budget=8, max_depth=3, max_width=1, cost_aware_depth=False),
                        max_context=64, max_waiting=4)
    assert [r.output_tokens for r in simulate(core, clock, [urgent, easy])] == [40, 40]


def test_outputs_end_at_eos_the_same_way_in_every_run():
    reqs = [SimRequest(i, 0.1 * i, "c", 30.0, 10, 256) for i in range(4000)]
    ended = stop_at_eos(reqs, 0.0016, seed=0)
    # the cap the client sends stays; where the output ends goes to the model alone
    assert all(r.output_tokens == 256 for r in ended)
    lengths = np.array([output_length(r) for r in ended])
    assert lengths.max() <= 256 and lengths.min() >= 1
    assert all((r.ends_at is None) == (output_length(r) == 256) for r in ended)
    # E[min(G, 256)] = (1 - (1 - p)^256) / p = (1 - 0.6637) / 0.0016 = 210.2 at p = 0.0016
    assert eos_mean(0.0016, 256) == pytest.approx(210.2, abs=0.05)
    assert lengths.mean() == pytest.approx(eos_mean(0.0016, 256), rel=0.02)
    assert [output_length(r) for r in stop_at_eos(reqs, 0.0016, seed=0)] == lengths.tolist()
    assert [output_length(r) for r in stop_at_eos(reqs, 0.0016, seed=1)] != lengths.tolist()
    # a request keeps its length when others are dropped (keyed on its index)
    assert output_length(stop_at_eos(reqs[100:101], 0.0016, 0)[0]) == lengths[100]
    assert stop_at_eos(reqs, 0.0) == reqs
    with pytest.raises(ValueError, match="hazard"):
        stop_at_eos(reqs, 1.5)


def test_the_paper_deployments_load_and_give_each_system_its_engine():
    assert {"paper-llama3.1-70b", "paper-qwen2.5-32b"} <= set(available())
    d = Deployment.load("paper-llama3.1-70b")
    ada, vllm, sarathi = d.setup("adaserve-authors"), d.setup("vllm"), d.setup("sarathi")
    assert (ada.budget, ada.max_batch, ada.min_depth, ada.draft_budget) == (256, 64, 4, 96)
    assert ada.rules == AdaServeRules(absolute_in_slo_phase=False)
    assert ada.planning_draft_ms == 70.0 and ada.prefill_mode is None  # the system's own
    assert vllm.max_batch == 512 and vllm.hardware.name.endswith("-vllm")
    assert sarathi.prefill_chunk == 2048 and sarathi.hardware.graph_max_batch == 256
    assert d.setup("adaserve-text").budget == 156  # the text's A100 budget
    assert d.setup("adaserve-authors", budget=128).budget == 128  # an override wins
    with pytest.raises(ValueError, match="unknown settings"):
        Deployment.from_dict({"name": "x", "title": "", "source": "", "hardware": "h",
                              "acceptance": "a", "engine": {"budgett": 1}})


def test_vllm_decodes_eagerly_past_its_graph_cap_and_expands_speculative_batches():
    hw = HardwareModel(name="v", target_model="t", draft_model=None, gpu="g", tp=1,
                       source="test", target=TableCost((1, 1001), (10.0, 110.0), 1.0),
                       draft=None, budget=8, baseline_latency_ms=10.0,
                       graph_max_batch=4, eager_ms=5.0, expands_batch=True)
    # 3 requests, 2 positions each (a 1-token chain): 6 sequences > 4 -> eager; KV read
    # twice: context 1000 x 2 positions -> 2 ms; tokens 6 -> 10.5 ms
    assert hw.verify_s(1000, [2, 2, 2]) * 1e3 == pytest.approx(10.5 + 2.0 + 5.0)
    # plain decode of 3: captured, context read once
    assert hw.verify_s(1000, [1, 1, 1]) * 1e3 == pytest.approx(10.2 + 1.0)


def test_cheapest_segment_start_is_where_a_verified_token_first_costs_least():
    # Llama-like: 25 ms over the first 127 tokens, 30 over the next 128, then 20 per 128
    # (the cheapest) from 256 on. The paper set-ups' B 256 / 128 come from this rule: ours,
    # not the artifact's (it passes --max-tokens-per-batch 1024; docs/sim.md's choice
    # table and the ablation measure both)
    t = TableCost((1, 128, 256, 384, 512), (30.0, 55.0, 85.0, 105.0, 125.0))
    assert t.cheapest_segment_start() == 256
    # a tie goes to the first cheapest segment; a convex table's cheapest is its first
    assert TableCost((1, 11, 21, 31), (5.0, 6.0, 8.0, 9.0)).cheapest_segment_start() == 1
    assert TableCost((1, 11, 21), (5.0, 10.0, 20.0)).cheapest_segment_start() == 1
    assert TableCost((1, 11, 21), (5.0, 25.0, 30.0)).cheapest_segment_start() == 11

"""The paper's systems by name, as a policy and a prefill mode, and the simulator's build."""

from __future__ import annotations

import pytest

from adaserve.engine.systems import SYSTEMS, System, resolve_system
from adaserve.scheduler import POLICIES
from adaserve.sim import SimSetup, build
from sim_models import ChainAcceptance, linear_hardware


@pytest.mark.parametrize("name, policy, mode", [
    ("vllm", "incremental", "first"), ("sarathi", "incremental", "chunked"),
    ("vllm-spec-4", "chain-4", "first"), ("vllm-spec-6", "chain-6", "first"),
    ("vllm-spec-8", "chain-8", "first"),
])
def test_paper_baselines(name, policy, mode):
    s = resolve_system(name)
    assert (s.name, s.policy, s.prefill_mode) == (name, policy, mode)


def test_every_policy_is_a_system_with_chunked_prefill():
    for name in POLICIES:
        assert (resolve_system(name).policy, resolve_system(name).prefill_mode) == (name, "chunked")
    assert set(SYSTEMS) == set(POLICIES) | {"vllm", "sarathi", "vllm-spec-4", "vllm-spec-6",
                                            "vllm-spec-8"}


def test_unknown_name_lists_the_choices():
    with pytest.raises(ValueError, match="unknown system 'vllm-spec-5'.*sarathi.*vllm-spec-8"):
        resolve_system("vllm-spec-5")
    with pytest.raises(ValueError):
        System("x", "chain-5", "first", "")


def test_simulator_builds_a_system():
    hw, acc = linear_hardware(), ChainAcceptance(accept=2)
    core, _ = build(SimSetup(hw, acc, policy="vllm-spec-6"), max_context=64, max_waiting=4)
    assert (core.cfg.policy, core.cfg.prefill_mode) == ("chain-6", "first")
    assert core.cfg.draft is not None and core.executor.with_draft
    core, _ = build(SimSetup(hw, acc, policy="vllm"), max_context=64, max_waiting=4)
    assert (core.cfg.policy, core.cfg.prefill_mode, core.cfg.draft) == ("incremental", "first",
                                                                       None)
    core, _ = build(SimSetup(hw, acc, policy="vllm", prefill_mode="chunked"), max_context=64,
                    max_waiting=4)
    assert core.cfg.prefill_mode == "chunked"
    with pytest.raises(ValueError, match="unknown system"):
        build(SimSetup(hw, acc, policy="vllm-0.8"), max_context=64, max_waiting=4)

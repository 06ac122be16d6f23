"""Prefill modes of the one scheduling loop, on the simulator's executor: chunked (a prefill
chunk, then the running requests decode) and first (an iteration with prompt work only
prefills: vLLM 0.8)."""

from __future__ import annotations

import argparse

import pytest

from adaserve.engine.config import PREFILL_MODES, EngineConfig
from adaserve.engine.sampling import SamplingParams
from adaserve.server.options import add_args
from adaserve.sim import SimSetup, build
from sim_models import ChainAcceptance, linear_hardware


def _core(system: str, prefill_mode: str | None = None):
    setup = SimSetup(linear_hardware(), ChainAcceptance(accept=2), policy=system,
                     prefill_mode=prefill_mode, budget=4, prefill_chunk=4)
    core, _ = build(setup, max_context=64, max_waiting=16)
    return core


def _add(core, rid: str, prompt_tokens: int) -> None:
    core.add(rid, [0] * prompt_tokens, SamplingParams(max_tokens=40, ignore_eos=True, seed=1))


def _decoding(system: str, prefill_mode: str | None = None):
    """A core with request a decoding, and b's 10-token prompt just queued."""
    core = _core(system, prefill_mode)
    _add(core, "a", 2)
    a = core.by_id["a"]
    while not a.output_ids:  # prefill-first: its prefill iteration emits nothing
        core.step()
    assert core.n_decode == 1
    _add(core, "b", 10)
    return core, a


@pytest.mark.parametrize("system", ["vllm", "vllm-spec-4"])
def test_prefill_first_leaves_decoding_requests_untouched(system):
    core, a = _decoding(system)
    assert core.cfg.prefill_mode == "first"
    before = (list(a.tokens), a.target_len, a.steps, len(core.stats))
    # b's 9 prompt tokens to prefill in chunks of 4: three iterations of prefill alone
    for _ in range(3):
        assert core.step() == []
        assert (list(a.tokens), a.target_len, a.steps, len(core.stats)) == before
    assert core.n_decode == 2  # b is prefilled: decode resumes, both requests together
    outs = core.step()
    assert sorted(o.request_id for o in outs) == ["a", "b"]
    assert a.steps == before[2] + 1 and core.stats[-1].prefill_tokens == 0


def test_chunked_decodes_beside_the_prefill_chunk():
    core, a = _decoding("sarathi")
    assert core.cfg.prefill_mode == "chunked"
    steps = a.steps
    for i in range(3):
        outs = core.step()
        assert [o.request_id for o in outs][0] == "a" and a.steps == steps + 1 + i
    assert [s.prefill_tokens for s in core.stats] == [1, 4, 4, 1]


def test_a_policy_can_run_prefill_first():
    core, a = _decoding("adaserve-authors", prefill_mode="first")
    steps = a.steps
    assert core.step() == [] and a.steps == steps


def test_one_token_prompts_have_no_prefill_work_and_decode_at_once():
    core = _core("vllm")
    _add(core, "a", 1)
    assert [o.request_id for o in core.step()] == ["a"]


def test_engine_config_checks_the_mode():
    assert EngineConfig().prefill_mode == "chunked"
    with pytest.raises(ValueError, match="prefill_mode"):
        EngineConfig(prefill_mode="last")


def test_serve_flag_offers_the_engine_modes():
    p = argparse.ArgumentParser()
    add_args(p)
    assert p.parse_args([]).prefill_mode == "chunked"
    assert p.parse_args(["--prefill-mode", "first"]).prefill_mode == "first"
    flag = next(a for a in p._actions if a.dest == "prefill_mode")
    assert tuple(flag.choices) == PREFILL_MODES

"""The simulator's ``context-table`` hardware models (adaserve/sim/hardware.py) and the
writer that makes one from a saved profile (adaserve/sim/from_profile.py): a long-context
workload is priced as the table measured it, not by one slope."""

from __future__ import annotations

import json

import pytest

from adaserve.engine.profile_data import Profile
from adaserve.engine.sampling import SamplingParams
from adaserve.scheduler import ContextTable, LatencyModel
from adaserve.sim import HardwareModel, SimSetup, build
from adaserve.sim.from_profile import hardware_from_profile, main
from sim_models import ChainAcceptance

NS, QS, CS = (1, 4, 8), (1, 2, 4, 8), (64, 2048, 8192)


def cpu_like(n, q, c):
    # 40 ms of weights, 1 ms a token, attention per query token growing with the context
    return 0.04 + 1e-3 * n * q + 2e-3 * n * q * c / 1e3


TABLE = ContextTable.measured(NS, QS, CS, [[[cpu_like(n, q, c) for c in CS] for q in QS]
                                           for n in NS])


def _profile(tables: bool) -> Profile:
    return Profile(model="smollm2-135m", draft="smollm2-135m-distilled", budget=4,
                   knee_found=False, target=LatencyModel(1e-6, 1e-3, 0.05),
                   draft_model=LatencyModel(0.0, 1e-4, 0.005), baseline_latency_s=0.05,
                   machine="m", date="2026-11-25", samples={}, budget_rule="ratio<=1.15",
                   target_table=TABLE if tables else None,
                   draft_table=TABLE if tables else None)


def test_a_profile_with_a_table_writes_a_context_table_model(tmp_path):
    prof = tmp_path / "p.json"
    _profile(tables=True).save(prof)
    out = tmp_path / "cpu-ctx.json"
    assert main([str(prof), str(out)]) == 0
    hw = HardwareModel.load(out)
    assert hw.name == "cpu-ctx" and hw.target == TABLE and hw.draft == TABLE
    assert hw.budget == 4 and hw.baseline_latency_ms == pytest.approx(50.0) and hw.pads_rows
    # priced as measured at the table's points: 8 requests verifying 4 tokens each
    for c in CS:
        assert hw.verify_s(8 * c, [4] * 8) == pytest.approx(cpu_like(8, 4, c))
    assert hw.draft_s(8 * 2048, [8, 8], requests=8) == pytest.approx(2 * cpu_like(8, 1, 2048))
    # a profile saved before the table: its linear models
    old = hardware_from_profile(_profile(tables=False), "old", "tests")
    assert old["target"]["kind"] == "linear"
    assert HardwareModel.from_dict(old).target == LatencyModel(1e-6, 1e-3, 0.05)


def test_an_unknown_cost_kind_names_the_three():
    d = hardware_from_profile(_profile(tables=True), "x", "tests")
    d["target"]["kind"] = "cubic"
    with pytest.raises(ValueError, match="context-table"):
        HardwareModel.from_dict(d)


def _decode_seconds(hw: HardwareModel, prompt: int) -> list[tuple[float, int, int]]:
    """(seconds, running, context) of each decode-only iteration of 4 requests of
    ``prompt`` tokens, incremental (one token a request: a plain decode step)."""
    core, _ = build(SimSetup(hw, ChainAcceptance(accept=1), policy="incremental",
                             prefill_chunk=4096), max_context=8192, max_waiting=8)
    for i in range(4):
        core.add(f"r{i}", [0] * prompt, SamplingParams(max_tokens=8, ignore_eos=True, seed=i))
    while core.has_work:
        core.step()
    return [(s.seconds, s.running, s.context_tokens) for s in core.stats
            if s.prefill_tokens == 0 and s.running == 4]


def test_a_long_context_workload_is_priced_as_the_table_measured_it():
    """Four requests decoding at ~64 and at ~4,000 tokens of context each: every decode
    step costs the table's forward at the batch's mean context, so the long one costs
    what the table says (here 1.7x the short one); a linear model fitted to the same
    forwards prices the context by one slope and gets another ratio."""
    d = hardware_from_profile(_profile(tables=True), "ctx", "tests")
    hw = HardwareModel.from_dict(d)
    short, long = _decode_seconds(hw, 64), _decode_seconds(hw, 4000)
    assert short and long
    for seconds, n, ctx in short + long:
        assert seconds == pytest.approx(TABLE.predict(ctx, n, n))
    ratio = long[0][0] / short[0][0]
    assert ratio == pytest.approx(TABLE.predict(long[0][2], 4, 4)
                                  / TABLE.predict(short[0][2], 4, 4))
    assert ratio > 1.5
    # the same forwards as one linear model (kind linear): another price for long contexts
    ctx, tok, sec = zip(*[(n * c, n * q, cpu_like(n, q, c)) for n in NS for q in QS for c in CS])
    d["target"] = {"kind": "linear", **LatencyModel.fit(ctx, tok, sec).to_dict()}
    lin_short, lin_long = (_decode_seconds(HardwareModel.from_dict(d), p) for p in (64, 4000))
    assert lin_long[0][0] / lin_short[0][0] != pytest.approx(ratio, rel=0.05)


def test_the_simulated_policy_plans_with_the_table():
    hw = HardwareModel.from_dict(hardware_from_profile(_profile(tables=True), "ctx", "tests"))
    core, _ = build(SimSetup(hw, ChainAcceptance(accept=2), policy="adaserve"),
                    max_context=8192, max_waiting=8)
    assert core.latency.base.target == TABLE and core.latency.fit is None
    assert core.profile.target_table == TABLE
    json.dumps(hardware_from_profile(_profile(tables=True), "ctx", "tests"))  # JSON-ready

"""The profile's context table (engine/profiler.py ``context_table``) and how the engine
plans with it (profile_data.profile_latency); a profile saved before the table loads and
plans as it did. On the tiny random Llama; the timings are never asserted on."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from adaserve.engine import profiler
from adaserve.engine.config import EngineConfig
from adaserve.engine.model import Llama
from adaserve.engine.profile_data import Profile, profile_latency
from adaserve.scheduler import ContextTable, IterationLatency, LatencyModel
from tiny_models import TINY, tiny_state


@pytest.fixture(scope="module")
def tiny():
    return Llama(TINY, tiny_state(0))


def _recorded(monkeypatch):
    """time_forward replaced by a recorder whose 'seconds' grow with the work it was given."""
    calls = []

    def fake(model, kv, n, q, ctx, repeats):
        calls.append((n, q, ctx))
        return 1e-3 + 1e-4 * n * q + 1e-7 * n * q * ctx

    monkeypatch.setattr(profiler, "time_forward", fake)
    return calls


def test_the_grid_stops_at_max_context_and_a_bounded_draft_is_timed_at_its_window(
        tiny, monkeypatch):
    calls = _recorded(monkeypatch)
    target = profiler.context_table(tiny, repeats=5, max_context=1024)
    ns, qs, _ = profiler.TABLE_GRID
    assert (target.requests, target.tokens, target.contexts) == (ns, qs, (64, 512, 1016))
    assert max(c for _, _, c in calls) == 1016  # context + 8 tokens fit 1024
    calls.clear()
    cfg = EngineConfig(draft="layers:2", policy="adaserve", draft_window=60, draft_sinks=4)
    cap = profiler.read_cap(cfg, model_is_draft=True)
    assert cap == 64 and profiler.read_cap(cfg, model_is_draft=False) is None
    draft = profiler.context_table(tiny, repeats=5, max_context=1024, cap=cap)
    # the table is indexed by the context the engine will ask about; every point was
    # timed over the 64 columns the bounded draft reads, so its cost is flat past them
    assert draft.contexts == (64, 512, 1016)
    assert {c for _, _, c in calls} == {64}
    assert draft.predict(8 * 1016, 8, 8) == pytest.approx(draft.predict(8 * 64, 8, 8))


def test_the_quick_table_keeps_short_contexts(tiny, monkeypatch):
    calls = _recorded(monkeypatch)
    quick = profiler.context_table(tiny, repeats=3, max_context=8192, quick=True)
    assert (quick.requests, quick.tokens, quick.contexts) == profiler.QUICK_TABLE_GRID
    assert len(calls) == 2 * 3 * 2


def test_a_real_quick_table_has_the_grid_shape(smollm):
    t = profiler.context_table(smollm.target, repeats=1, max_context=256, quick=True)
    assert (t.requests, t.tokens, t.contexts) == ((1, 8), (1, 2, 4), (64, 252))
    assert t.predict(8 * 252, 8 * 4, 8) >= t.predict(64, 1, 1) > 0


def _profile(**tables) -> Profile:
    return Profile(model="smollm2-135m", draft="layers:2", budget=4, knee_found=False,
                   target=LatencyModel(1e-6, 1e-3, 0.05),
                   draft_model=LatencyModel(1e-7, 1e-4, 0.005), baseline_latency_s=0.09,
                   machine="m", date="2026-11-25", samples={}, budget_rule="ratio<=1.15",
                   **tables)


def test_a_profile_saved_before_the_table_loads_and_plans_as_before(tmp_path):
    d = _profile().to_dict()
    del d["target_table"], d["draft_table"]  # written before the table existed
    path = tmp_path / "old.json"
    path.write_text(json.dumps(d))
    prof = Profile.load(path)
    assert prof.target_table is None and prof.draft_table is None and prof == _profile()
    lat = profile_latency(prof, refit=True)
    assert lat.base == IterationLatency(prof.target, prof.draft_model)
    assert lat.fit is not None and not lat.decode_only
    plain = profile_latency(prof, refit=False)
    assert plain.fit is None and plain.base == lat.base
    assert profile_latency(None, refit=True).base is None


def test_a_profile_with_tables_round_trips_and_plans_by_them(tmp_path):
    table = ContextTable.measured((1, 8), (1, 2, 4), (64, 2048),
                                  [[[0.04, 0.05], [0.041, 0.06], [0.042, 0.08]],
                                   [[0.045, 0.1], [0.05, 0.14], [0.06, 0.2]]])
    prof = _profile(target_table=table, draft_table=table)
    path = tmp_path / "p.json"
    prof.save(path)
    assert Profile.load(path) == prof
    lat = profile_latency(prof, refit=True)
    # the table's shape is kept: no linear refit, the scale learnt from decode iterations
    assert lat.base == IterationLatency(table, table) and lat.fit is None and lat.decode_only
    assert lat.predict(8 * 2048, [8], 8 * 4, 8) == pytest.approx(0.2 + 0.1)
    # a profile without a draft model plans no draft cost, whatever tables it holds
    no_draft = replace(prof, draft=None, draft_model=None)
    assert profile_latency(no_draft, refit=True).base == IterationLatency(table, None)
    # the engine's option is off by default: it plans as before, the table only shown
    assert EngineConfig().context_table is False
    off = profile_latency(prof, refit=True, use_table=False)
    assert off.base == IterationLatency(prof.target, prof.draft_model) and off.fit is not None


def test_run_profile_keeps_both_tables_and_times_a_bounded_draft_at_its_window(
        tiny, monkeypatch):
    """run_profile's glue, with every timing replaced: the tables land in the profile, the
    draft's latency grid and table are timed at the window, B by context is printable."""
    from adaserve.engine.loader import Models
    from adaserve.engine.profiler import budget_by_context, run_profile

    calls = _recorded(monkeypatch)
    knee = {"tokens": [1, 2, 4, 6, 8, 16], "seconds": [0.04, 0.041, 0.043, 0.05, 0.06, 0.09]}
    monkeypatch.setattr(profiler, "_knee_curve", lambda *a, **k: knee)
    monkeypatch.setattr(profiler, "baseline_latency", lambda *a, **k: 0.05)
    draft = Llama(TINY, tiny_state(1))
    cfg = EngineConfig(draft="layers:2", policy="adaserve", max_context=1024,
                       draft_window=28, draft_sinks=4)
    prof = run_profile(cfg, repeats=1, quick=True, log=lambda *_: None, curves=1,
                       models=Models(tiny, draft, None, None, frozenset(), None, "cpu"))
    assert prof.target_table.contexts == prof.draft_table.contexts == (64, 1020)
    assert prof.samples["draft_read_cap"] == 32 and prof.samples["context_table_s"] >= 0
    # timed in order: the target's quick latency grid (18 points), the draft's (18), the
    # target's table (12), the draft's (12); the draft never reads past its 32 columns
    assert len(calls) == 60
    assert max(c for _, _, c in calls[18:36] + calls[48:]) == 32
    assert max(c for _, _, c in calls[36:48]) == 1020
    assert budget_by_context(prof).startswith("B by context: 64: ")

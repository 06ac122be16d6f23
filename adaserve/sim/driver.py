"""Runs a workload through the real scheduling loop on a simulated executor and writes what
a client would have measured, in the load generator's record format."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from adaserve.engine.config import EngineConfig
from adaserve.engine.core import EngineCore, QueueFull
from adaserve.engine.profile_data import Profile
from adaserve.engine.request import Output
from adaserve.engine.sampling import SamplingParams
from adaserve.engine.systems import resolve_system
from adaserve.loadgen.records import Record, summarize, write_jsonl
from adaserve.scheduler import (SLO, AdaServeRules, CalibratedLatency, ContextTable,
                                IterationLatency)
from adaserve.sim.acceptance import AcceptanceModel
from adaserve.sim.clock import VirtualClock
from adaserve.sim.executor import SimExecutor
from adaserve.sim.hardware import HardwareModel, linear_fit
from adaserve.sim.workload import SimRequest


@dataclass(frozen=True, slots=True)
class SimSetup:
    """The simulated server: system (policy and prefill mode) and engine limits, hardware,
    acceptance."""

    hardware: HardwareModel
    acceptance: AcceptanceModel
    # a policy or one of the paper's systems (adaserve.engine.systems: vllm, sarathi,
    # vllm-spec-k), which names a prefill mode as well
    policy: str = "adaserve"
    prefill_mode: str | None = None  # None: the system's own (chunked for a policy)
    budget: int | None = None  # None: the hardware model's
    max_batch: int = 64
    prefill_chunk: int = 128
    max_depth: int = 8
    max_width: int = 16
    min_depth: int = 1
    draft_budget: int | None = None  # B2; None: B
    cost_aware_depth: bool = True
    # the policy plans with a fixed draft price in ms plus the hardware's own verify cost,
    # never rescaled (the AdaServe authors' --ssm-spec-latency-ms and verify table); None:
    # what `adaserve profile` would fit on this hardware, kept calibrated as the engine does
    planning_draft_ms: float | None = None
    rules: AdaServeRules = field(default_factory=AdaServeRules)  # adaserve's decisions
    slo_drop_slack: int | None = None  # EngineConfig.slo_drop_slack: None never drops


def build(setup: SimSetup, max_context: int, max_waiting: int
          ) -> tuple[EngineCore, VirtualClock]:
    """An EngineCore over a SimExecutor, with the policy's latency predictor profiled from
    the hardware model as `adaserve profile` would on that machine (a linear fit; a
    context-table model's table itself, as a profile with one plans). ValueError for a
    policy that names no system."""
    hw = setup.hardware
    system = resolve_system(setup.policy)
    draft = None if system.policy == "incremental" else (hw.draft_model or "simulated-draft")
    cfg = EngineConfig(model=hw.target_model, draft=draft, policy=system.policy,
                       prefill_mode=setup.prefill_mode or system.prefill_mode,
                       budget=setup.budget or hw.budget, max_depth=setup.max_depth,
                       max_width=setup.max_width, min_depth=setup.min_depth,
                       draft_budget=setup.draft_budget, rules=setup.rules,
                       slo_drop_slack=setup.slo_drop_slack,
                       cost_aware_depth=setup.cost_aware_depth,
                       max_batch=setup.max_batch, max_context=max_context,
                       prefill_chunk=setup.prefill_chunk, max_waiting=max_waiting,
                       latency_refit=False,
                       # a context-table hardware model plans by its table, as a served
                       # engine with --context-table does; the shipped ones carry none
                       context_table=isinstance(hw.target, ContextTable))
    profile = Profile(model=hw.target_model, draft=hw.draft_model, budget=cfg.budget,
                      knee_found=False, target=linear_fit(hw.target),
                      draft_model=None if hw.draft is None else linear_fit(hw.draft),
                      baseline_latency_s=hw.baseline_latency_ms / 1e3, machine=hw.gpu,
                      date=dt.date.today().isoformat(), samples={}, budget_rule=f"sim:{hw.name}",
                      # a context-table model plans as a served profile with its table does
                      target_table=_table(hw.target), draft_table=_table(hw.draft))
    clock = VirtualClock()
    executor = SimExecutor(hw, setup.acceptance, clock, n_slots=setup.max_batch,
                           with_draft=cfg.draft is not None)
    latency = None if setup.planning_draft_ms is None else CalibratedLatency(
        IterationLatency(hw.target, None, setup.planning_draft_ms / 1e3), adapt=False)
    core = EngineCore(cfg, profile=profile, executor=executor, clock=clock.now,
                      latency=latency)
    # as the real engine does, a draft the policy can never ask for (B = 1) stays idle
    executor.with_draft = executor.with_draft and core.policy.may_draft
    return core, clock


def _table(cost) -> ContextTable | None:
    return cost if isinstance(cost, ContextTable) else None


def simulate(core: EngineCore, clock: VirtualClock, requests: Sequence[SimRequest],
             seed: int = 0, on_step: Callable[[int], None] | None = None) -> list[Record]:
    """Feed the requests at their arrival times and step the core until all are done.

    Arrivals during an iteration are seen when the next one starts, as the engine's inbox
    is drained; an idle engine waits for the next arrival. Request i gets the sampling
    seed (seed << 32) + i, which the acceptance models key on: every policy run with the
    same seed sees the same drafts and target. ``on_step`` gets the number of finished
    requests after every iteration (a progress bar)."""
    order = sorted(requests, key=lambda r: (r.t, r.index))
    records: dict[str, Record] = {}
    done, i = 0, 0
    while i < len(order) or core.has_work:
        while i < len(order) and order[i].t <= clock.now():
            _add(core, order[i], records, seed)
            i += 1
        if not core.has_work:
            clock.advance_to(order[i].t)
            continue
        outputs = core.step()
        now = clock.now()
        for out in outputs:
            done += _update(records[out.request_id], out, now)
        if on_step is not None:
            on_step(done)
    return sorted(records.values(), key=lambda r: r.index)


def _add(core: EngineCore, r: SimRequest, records: dict[str, Record], seed: int) -> None:
    rid = str(r.index)
    records[rid] = Record(r.index, r.slo_class, r.slo_ms, scheduled_s=r.t, sent_s=r.t,
                          prompt_tokens=r.prompt_tokens)
    # without the real prompt, ids are placeholders: the acceptance model decides what the
    # target says. max_tokens is the client's cap; where the output ends only the
    # simulated model knows (SimExecutor.end_at), and says it with an EOS as a model does.
    try:
        core.add(rid, list(r.prompt_ids) if r.prompt_ids is not None else [0] * r.prompt_tokens,
                 SamplingParams(max_tokens=r.output_tokens, seed=(seed << 32) + r.index),
                 SLO.from_ms(r.slo_ms, r.slo_relative))
    except QueueFull as e:  # 503 at the door, as the server answers it: a miss
        rec = records[rid]
        rec.status, rec.finished_s, rec.error = "rejected", r.t, str(e)
        return
    if r.ends_at is not None:
        core.executor.end_at(rid, r.ends_at)


def _update(rec: Record, out: Output, now: float) -> int:
    if out.token_ids:
        rec.first_token_s = rec.first_token_s if rec.first_token_s is not None else now
        rec.last_token_s = now
    if not out.finished:
        return 0
    rec.finished_s = now
    rec.status = "ok" if out.finish_reason in ("stop", "length") else "error"
    rec.error = out.error
    s = out.stats
    if s is not None:
        rec.output_tokens = s.output_tokens
        rec.server = {"slo_class": rec.slo_class, "slo_tpot_ms": rec.slo_ms,
                      "tpot_ms": None if s.tpot_s is None else 1e3 * s.tpot_s,
                      "ttft_ms": None if s.ttft_s is None else 1e3 * s.ttft_s,
                      "slo_attained": s.slo_attained,
                      "accepted_tokens_per_step": s.accepted_tokens_per_step}
    return 1


def write_run(out: Path, records: Sequence[Record], ttft_slo_ms: float, meta: dict) -> dict:
    """records.jsonl and summary.json in the layout `adaserve loadgen` writes, so the bench
    report reads a simulated run like a measured one; returns the summary."""
    write_jsonl(records, out / "records.jsonl")
    rows = summarize(list(records), ttft_slo_ms)
    summary = {**meta, "ttft_slo_ms": ttft_slo_ms, "rows": [asdict(r) for r in rows]}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def engine_meta(setup_name: str | None, acceptance: object, setup) -> dict:
    """What a run's summary.json records of the simulated server: the set-up's name, its
    hardware, its acceptance model (``acceptance``, the flag, where it has no name) and
    every other field of the SimSetup."""
    skip = ("hardware", "acceptance", "policy", "rules")
    return {"setup": setup_name, "hardware": setup.hardware.name,
            "acceptance": getattr(setup.acceptance, "name", str(acceptance)),
            **{f.name: getattr(setup, f.name) for f in fields(setup) if f.name not in skip},
            "rules": asdict(setup.rules)}

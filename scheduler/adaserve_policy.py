"""AdaServe as a policy: the authors' scheduler and the options we added to it
(``options.AdaServeOptions``), and seed 002's text read literally (``adaserve-text``)."""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import replace

import numpy as np

from adaserve.scheduler.acceptance import (AcceptanceTracker, RequestCalibration,
                                           expected_chain_tokens)
from adaserve.scheduler.authors import in_slo_phase, slo_need, slo_token_cap
from adaserve.scheduler.budget import goodput_budget
from adaserve.scheduler.config import SchedulerConfig
from adaserve.scheduler.cost import CalibratedLatency, IterationLatency
from adaserve.scheduler.depth import MeasuredDepth, need_floor
from adaserve.scheduler.gate import drafting_pays
from adaserve.scheduler.lengths import OutputLengths
from adaserve.scheduler.options import PRESETS, AdaServeOptions
from adaserve.scheduler.pacing import pace_cap
from adaserve.scheduler.policy_base import IDLE, BudgetedPolicy, chain_plan, prices_drafting
from adaserve.scheduler.prefill_yield import PromptQueue, chunk_waits
from adaserve.scheduler.selection import Selection, select_slo_customized, top_yield, trim
from adaserve.scheduler.shape import SpecPlan, depth_width
from adaserve.scheduler.slo import SLO_EPS, BatchView, capped_requirement
from adaserve.scheduler.triage import unreachable


class AdaServePolicy(BudgetedPolicy):
    """AdaServe: the authors' scheduler (FlexFlow Serve's request manager;
    scheduler/authors.py has each rule and its source) and the options we added to it
    (``options.AdaServeOptions``; all off is the authors' scheduler, preset
    ``adaserve-authors``).

    The authors' scheduler: Algorithm 2's two phases with the code's choices. The SLO phase
    serves requests in ascending need, each up to n_max = int(1.2 B / n) tokens past its
    root, need being the predicted iteration latency x 1.05 over the SLO plus the catch-up
    (and, as the authors' code does, only requests whose SLO is relative to the baseline
    when ``rules.absolute_in_slo_phase`` is off); depth and width follow the EuroSys Eq. 8-9.
    The throughput phase takes the best remaining nodes across all requests.

    The options, in the order an iteration meets them:
    - ``depth=measured``: the plan drafts at the neighbour of the current depth, within
      Eq. 8's, at which the requests whose SLO is shorter than an iteration committed the
      most tokens per second of predicted latency (``depth.MeasuredDepth``), and with
      ``floor`` never shallower than the median tight request's need per step
      (``depth.need_floor``). Needs a latency predictor that prices draft steps; without
      one every depth costs the same and Eq. 8's stands.
    - ``triage``: a request whose best reachable TPOT, with the most the SLO phase could
      give it (a_max = min(1 + the top n_max f(v) of its tree, d + 1)), is over its SLO
      leaves the SLO phase for the iteration (``triage.unreachable``); it still competes in
      the throughput phase. It reads ``max_tokens_left``, the client's cap, and does
      nothing where that is unknown.
    - ``calibrate``: the SLO phase counts a node as rho_r x f(v), rho_r the request's
      decayed ratio of accepted to predicted tokens (``RequestCalibration``), so a request
      whose drafts over-promise gets more nodes to reach its need.
    - ``lost=roots`` (with ``triage``, where planning prices the draft): a request triage
      gave up verifies its root alone, and neither the depth floor nor the pacing cut of
      the depth counts it. At plan time, before its tree exists, a request is taken as
      given up when its best yield at its last drafted selection cannot reach its SLO at
      this iteration's predicted latency (never drafted: not given up). Its drafted nodes
      save no SLO and lengthen every other request's iteration: on the served CPU, once
      9 or more ran, the preset verified 16-23 tokens for 9-11 requests in steps 1.4-1.8x
      the roots-only ones, for the same tokens per second (docs/results.md).
    - ``gate``: the plan drafts only if the requests its draft is expected to keep at
      pace and the plain step would not outnumber those the plain step keeps and the
      draft would not (``gate.drafting_pays``); else the iteration verifies the roots
      alone. Where planning prices the draft.
    - ``prefill=yield``: the engine's prefill chunk waits in an iteration where a step
      with it would push more decoding requests off their SLO (that a plain step keeps on
      it) than one plain step's wait pushes prompts past their TTFT SLO
      (``prefill_yield.chunk_waits``, from the measured durations of both kinds of step).
    - ``pace``: after both phases each request keeps at most the tokens that bring it to
      ``pace`` x its SLO after this iteration (``pacing.pace_cap``, the need at a tighter
      SLO, so the SLO phase's grant is never cut below the need); the budget given back is
      not spent, so the iteration is shorter for everyone. Best-effort requests are not
      paced.

    With ``depth=measured`` what an iteration yielded reaches ``observe`` with its
    ``Selection``; the depth, the tight requests and the predicted latency are kept beside
    it until then, so an engine that reports an iteration late, or reports only the
    requests still running (the SGLang worker does both), is counted at the depth that
    iteration drafted.
    """

    name = "adaserve"
    summary = "AdaServe: the authors' two-phase scheduler with its options (scheduler/options.py)"

    def __init__(self, config: SchedulerConfig,
                 latency: IterationLatency | CalibratedLatency | None = None,
                 acceptance: AcceptanceTracker | None = None,
                 options: AdaServeOptions = PRESETS["adaserve"]) -> None:
        super().__init__(config, latency, acceptance)
        self.options = options
        self.adapts_budget = options.budget in ("goodput", "kept")
        self.depth = MeasuredDepth() if options.depth == "measured" else None
        self.calibration = RequestCalibration() if options.calibrate else None
        self.lengths = OutputLengths()  # finished outputs' lengths, for prefill=recover
        # request -> the most tokens the SLO phase could give it (a_max) at its last
        # drafted selection, for taking it as given up before this iteration's tree exists
        self._best_yield: dict[Hashable, float] = {}
        # (selection, request ids, depth, tight [n] bool, predicted seconds) of iterations
        # not yet observed, for the measured depth
        self._pending: deque[tuple[Selection, tuple, int, np.ndarray, float]] = deque(maxlen=8)

    @property
    def admission(self) -> str:
        return self.options.admit

    @property
    def refuses(self) -> bool:
        return self.options.refuse

    @property
    def tpot_door(self) -> str:
        return self.options.refuse_tpot

    @property
    def caps_batch(self) -> bool:
        return self.options.cap

    @property
    def prefill(self) -> str:
        return self.options.prefill

    def prefill_waits(self, batch: BatchView, prompts: PromptQueue, t_plain_s: float,
                      t_prefill_s: float) -> bool:
        if self.options.prefill == "chunk":
            return False
        # a step commits the root and, with the request's acceptance rate, a drafted token:
        # a request the chunk sets back by less than that draws even again by speculating
        commit = expected_chain_tokens(self.acceptance.alphas(batch.request_ids), 1)  # [n]
        left = (self.lengths.expected_left(batch.decoded_tokens)
                if self.options.prefill == "recover" else None)  # [n]
        return chunk_waits(batch, prompts, t_plain_s, t_prefill_s, self.config.rules, commit,
                           left)

    @property
    def _roots_lost(self) -> bool:
        """Whether a given-up request verifies its root alone (``lost=roots``, with triage,
        where planning prices the draft)."""
        o = self.options
        return (o.triage and o.lost == "roots" and self.config.cost_aware_depth
                and prices_drafting(self.latency))

    def plan(self, batch):
        plan = self._planned(batch)
        if not (self._gates and plan.speculates):
            return plan
        plain = replace(self._priced(batch, IDLE, self._verify_tokens(batch.n, IDLE, plan.budget)),
                        budget=plan.budget)
        return plan if self._gate_opens(batch, plan, plain.t_spec_s) else plain

    def _planned(self, batch: BatchView) -> SpecPlan:
        """The plan before the gate: Eq. 8-9's shape, the measured depth and its floor,
        the pace and lost caps."""
        base = super().plan(batch)
        lost = self._lost_at_plan(batch, base.t_spec_s) if self._roots_lost else None
        capped = (self.options.pace is not None or lost is not None) and self.config.cost_aware_depth
        # the other depths are priced only for what reads them: the measured depth, the caps
        if (not base.speculates or not prices_drafting(self.latency)
                or (self.depth is None and not capped)):
            return base
        # every depth up to Eq. 8's, priced once: the floor reads their latencies and the
        # chosen one is returned as it is (the last is base's own shape)
        priced = [self._priced(batch, s, self._verify_tokens(batch.n, s, base.budget))
                  for s in (SpecPlan(depth=k, width=base.width, budget=base.budget)
                            for k in range(1, base.depth))]
        priced.append(base)
        plan = base
        if self.depth is not None:
            slo = batch.tpot_slo_s if lost is None else np.where(lost, np.nan, batch.tpot_slo_s)
            floor = (need_floor(slo, [p.t_spec_s for p in priced], self.config.rules.correction)
                     if self.options.floor else 1)
            plan = priced[self.depth.next_depth(base.depth, floor) - 1]
        if capped:
            plan = self._capped_depth(batch, plan, priced, lost)
        return plan

    @property
    def _gates(self) -> bool:
        """Whether the gate judges each planned draft (``gate``, where planning prices the
        draft: with a free draft nothing is lost by drafting)."""
        return (self.options.gate and self.config.cost_aware_depth
                and prices_drafting(self.latency))

    def _gate_opens(self, batch: BatchView, plan: SpecPlan, t_plain_s: float) -> bool:
        """Whether ``plan``'s draft keeps more requests at pace than the plain step of
        predicted latency ``t_plain_s`` (``gate.drafting_pays``); the pace is ``pace`` x
        the SLO, or the SLO unpaced."""
        return drafting_pays(batch, self.acceptance.alphas(batch.request_ids), plan.depth,
                             t_plain_s, plan.t_spec_s, self.options.pace or 1.0,
                             self.config.rules)

    def _lost_at_plan(self, batch: BatchView, t_iter_s: float) -> np.ndarray:
        """[n] bool: requests taken as given up before this iteration's tree exists: their
        a_max at their last drafted selection cannot reach the SLO at ``t_iter_s``
        (``triage.unreachable``); a request never drafted for counts as reachable."""
        a_max = np.array([self._best_yield.get(rid, np.inf) for rid in batch.request_ids])
        return unreachable(batch, a_max, t_iter_s)

    def _caps(self, batch: BatchView, t_iter_s: float, lost: np.ndarray | None) -> np.ndarray:
        """[n] the most tokens, root included, each request keeps: its pace cap (inf
        unpaced), 1 where it was given up and ``lost=roots``."""
        pace = self.options.pace
        caps = (np.full(batch.n, np.inf) if pace is None
                else pace_cap(batch, t_iter_s, pace, self.config.rules))
        return caps if lost is None else np.where(lost, 1.0, caps)

    def _iteration_budget(self, batch: BatchView) -> int:
        """The budget as the base chooses it; with ``budget=kept`` and pacing, the goodput
        budget counts the tokens pacing lets each request keep (``budget.goodput_budget``'s
        ``keeps``)."""
        c, pace = self.config, self.options.pace
        if not self._budget_adapts or pace is None or self.options.budget != "kept":
            return super()._iteration_budget(batch)
        n = batch.n

        def seconds(d: int, verify: int) -> float:
            return self.predict_latency(batch, chain_plan(d), verify)

        def keeps(d: int) -> np.ndarray:  # the caps at the unpaced chain's latency, an upper bound
            t = seconds(d, n * (d + 1))
            caps = pace_cap(batch, t, pace, c.rules) - 1.0  # [n], inf for best effort
            return np.minimum(caps, d)

        return goodput_budget(n, self.acceptance.alphas(batch.request_ids),
                              self._floor_budget(batch), c.max_depth, seconds, keeps)

    def _capped_depth(self, batch: BatchView, plan: SpecPlan, priced: list[SpecPlan],
                      lost: np.ndarray | None) -> SpecPlan:
        """The plan no deeper than any request may keep (``_caps``): pacing cuts a request
        to ``pace_cap`` tokens, its root included, and ``lost=roots`` a given-up one to its
        root, so no selection keeps a node deeper than the largest cap less one, and
        drafting deeper is paid for nothing (a third of the served preset's steps drafted
        and then verified the roots alone: docs/results.md). The pace caps shrink with the
        iteration's latency, so the depth is cut until it holds at its own predicted
        latency; cut to 0, the iteration drafts nothing. Only where planning prices the
        draft (cost_aware_depth): with a free draft depth costs nothing, and the simulated
        paper set-ups keep Eq. 8's."""
        while plan.depth:
            deepest = float(np.max(self._caps(batch, plan.t_spec_s, lost))) - 1.0
            if plan.depth <= deepest:
                return plan
            depth = int(deepest)
            plan = priced[depth - 1] if depth else self._priced(
                batch, IDLE, self._verify_tokens(batch.n, IDLE, plan.budget))
        return replace(plan, budget=priced[-1].budget)

    def _select(self, batch, plan, candidates):
        rules, opts = self.config.rules, self.options
        need = slo_need(batch, plan.t_spec_s, plan.depth, rules)  # [n]
        budget = self._budget_of(plan)
        n_max = slo_token_cap(budget, batch.n, rules) + 1  # the root counts
        served = in_slo_phase(batch, rules) & (need > 1.0 + SLO_EPS)  # [n]
        lost = None
        if opts.triage and batch.max_tokens_left is not None:
            a_max = np.minimum(top_yield(candidates, n_max), plan.depth + 1.0)  # [n]
            lost = unreachable(batch, a_max, plan.t_spec_s)
            served &= ~lost
            if plan.speculates and self._roots_lost:  # read only by lost=roots planning
                self._best_yield.update(zip(batch.request_ids, a_max.tolist()))
        worth = None if self.calibration is None else self.calibration.ratios(batch.request_ids)
        sel = select_slo_customized(candidates, budget, need,
                                    np.where(served, need, 1.0), n_max,
                                    worth=worth, ascending=rules.ascending)
        if opts.pace is not None or (lost is not None and self._roots_lost):
            sel = trim(candidates, sel,
                       self._caps(batch, plan.t_spec_s, lost if self._roots_lost else None))
        if self.depth is not None and plan.speculates and prices_drafting(self.latency):
            seconds = self.predict_latency(batch, plan, sel.tokens)
            with np.errstate(invalid="ignore"):  # best effort (NaN) is never tight
                tight = batch.tpot_slo_s < seconds  # [n]
            self._pending.append((sel, tuple(batch.request_ids), plan.depth, tight, seconds))
        return sel

    def observe(self, request_ids, selection, accepted):
        super().observe(request_ids, selection, accepted)
        if self.calibration is not None:
            self._calibrate(request_ids, selection, accepted)
        if self.depth is not None:
            self._measure_depth(request_ids, selection, accepted)

    def _calibrate(self, request_ids, selection, accepted):
        # only requests that drafted say anything about the draft: a root-only tree
        # predicts 0 and accepts 0, and would just decay the evidence
        predicted = selection.expected_accepted - 1.0  # [n] sum f of non-root nodes
        drafted = np.flatnonzero(selection.counts > 1)
        if drafted.size:
            self.calibration.observe([request_ids[i] for i in drafted], predicted[drafted],
                                     np.asarray(accepted)[drafted])

    def _measure_depth(self, request_ids, selection, accepted):
        for i, (sel, ids, depth, tight, seconds) in enumerate(self._pending):
            rows = _rows_reported(sel, ids, request_ids, selection)
            if rows is None:
                continue
            for _ in range(i + 1):  # this one, and older ones that will never be reported
                self._pending.popleft()
            if tight[rows].any():
                tokens = 1.0 + float(np.mean(np.asarray(accepted)[tight[rows]]))
                self.depth.record(depth, tokens, seconds)
            return

    def forget(self, request_id, decoded=None):
        super().forget(request_id, decoded)
        if decoded is not None:
            self.lengths.finished(decoded)
        self._best_yield.pop(request_id, None)
        if self.calibration is not None:
            self.calibration.forget(request_id)


class AdaServeTextPolicy(BudgetedPolicy):
    """Algorithm 2 as seed 002's text states it: A(r) = (l + t_spec)/t - o for every request
    with an SLO, most behind first, A_cap = min(A, d + 1), n_max twice the even share,
    depth and width by the seed's Eq. 8-9. Kept beside the authors' reading for comparison."""

    name = "adaserve-text"
    summary = "Algorithm 2 as seed 002's text states it (Eq. 8-9, most-behind first)"

    def _shape(self, n, budget):
        c = self.config
        return depth_width(n, budget, c.max_depth, c.max_width)

    def _select(self, batch, plan, candidates):
        requirement = batch.requirements(plan.t_spec_s)
        return select_slo_customized(candidates, self._budget_of(plan), requirement,
                                     capped_requirement(requirement, plan.depth),
                                     self.config.slo_cap(batch.n))


def _rows_reported(kept: Selection, ids: tuple, request_ids: Sequence[Hashable],
                   reported: Selection) -> np.ndarray | None:
    """[m] rows of the kept selection that a report is about: all of them when the report
    carries the same object, the rows of its requests when it carries their sub-selection
    (the same nodes chosen), None when it is about another iteration."""
    if reported is kept:
        return np.arange(kept.n)
    where = {rid: k for k, rid in enumerate(ids)}
    if not all(rid in where for rid in request_ids):
        return None
    rows = np.fromiter((where[rid] for rid in request_ids), np.int64, len(request_ids))
    if not np.array_equal(kept.mask[rows], reported.mask):
        return None
    return rows



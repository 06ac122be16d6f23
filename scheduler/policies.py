"""Speculation policies behind one interface, chosen by name (DESIGN.md "Policies").

Every iteration an engine asks its policy for a ``SpecPlan`` (what to draft), drafts the
candidate trees, then asks it for a ``Selection`` (what to verify). All policies run on
the same engine loop, which is what makes their comparison fair: the six of seed 002's
comparison, and the static chains of the paper's vLLM-Spec(k) baselines.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import ClassVar

import numpy as np

from adaserve.scheduler.acceptance import AcceptanceTracker, RequestCalibration
from adaserve.scheduler.authors import in_slo_phase, slo_need, slo_token_cap, tree_shape
from adaserve.scheduler.budget import chain_rates, goodput_budget
from adaserve.scheduler.config import SchedulerConfig
from adaserve.scheduler.cost import CalibratedLatency, IterationLatency
from adaserve.scheduler.depth import MeasuredDepth, need_floor
from adaserve.scheduler.selection import (
    Selection,
    select_all,
    select_equal_share,
    select_global_greedy,
    select_roots,
    select_slo_customized,
    top_yield,
    trim,
)
from adaserve.scheduler.options import PRESETS, AdaServeOptions, split_spec
from adaserve.scheduler.pacing import pace_cap
from adaserve.scheduler.shape import SpecPlan, depth_width
from adaserve.scheduler.slo import SLO_EPS, BatchView, capped_requirement
from adaserve.scheduler.tree import CandidateBatch
from adaserve.scheduler.triage import unreachable

_IDLE = SpecPlan(depth=0, width=0)


class Policy(ABC):
    """Decides, per iteration, what to speculate and which speculated tokens to verify."""

    name: ClassVar[str]
    summary: ClassVar[str]

    def __init__(self, config: SchedulerConfig,
                 latency: IterationLatency | CalibratedLatency | None = None,
                 acceptance: AcceptanceTracker | None = None) -> None:
        self.config = config
        self.latency = latency  # None: iteration latency is not predicted (t_spec = 0)
        self.acceptance = acceptance if acceptance is not None else AcceptanceTracker()

    @property
    def may_draft(self) -> bool:
        """Whether any plan of this policy can ask for a draft tree. An engine may leave a
        draft that can never be asked for idle (no prefill, no KV)."""
        return True

    @property
    def admission(self) -> str:
        """How the engine picks the next waiting request to admit (admission.ADMISSIONS):
        first come, first served unless a policy's options say otherwise."""
        return "fifo"

    @property
    def refuses(self) -> bool:
        """Whether the engine refuses an arriving request predicted to miss its TTFT SLO
        (admission.predicted_ttft); no policy does unless its options say so."""
        return False

    @abstractmethod
    def plan(self, batch: BatchView) -> SpecPlan:
        """The draft shape for this iteration."""

    @abstractmethod
    def _select(self, batch: BatchView, plan: SpecPlan, candidates: CandidateBatch) -> Selection:
        ...

    def select(self, batch: BatchView, plan: SpecPlan, candidates: CandidateBatch) -> Selection:
        """The nodes of each candidate tree to verify; ancestor-closed, roots included."""
        if candidates.n != batch.n:
            raise ValueError(f"{candidates.n} candidate trees for a batch of {batch.n}")
        return self._select(batch, plan, candidates)

    def observe(self, request_ids: Sequence[Hashable], selection: Selection,
                accepted: np.ndarray) -> None:
        """After verification: request i accepted ``accepted[i]`` ([n] int) of the non-root
        nodes ``selection`` chose for it. Policies that learn from it override this."""

    def forget(self, request_id: Hashable) -> None:
        """Drop a finished or aborted request's state."""
        self.acceptance.forget(request_id)

    def predict_latency(self, batch: BatchView, plan: SpecPlan, verify_tokens: int) -> float:
        if self.latency is None:
            return 0.0
        return self.latency.predict(int(batch.context_tokens.sum()),
                                    plan.draft_step_tokens(batch.n), verify_tokens)

    def _priced(self, batch: BatchView, shape: SpecPlan, verify_tokens: int) -> SpecPlan:
        """The shape with its predicted iteration latency filled in."""
        return replace(shape, t_spec_s=self.predict_latency(batch, shape, verify_tokens))


class _BudgetedPolicy(Policy):
    """Beam-search candidates shaped by Eq. 8-9; selection under budget B."""

    # With cost-aware depth, an iteration that plans no draft because drafting is
    # predicted not to pay drafts one level anyway every PROBE_EVERY such iterations: the
    # acceptance estimate that ruled drafting out is only updated by drafting.
    PROBE_EVERY = 16

    def __init__(self, config: SchedulerConfig,
                 latency: IterationLatency | CalibratedLatency | None = None,
                 acceptance: AcceptanceTracker | None = None) -> None:
        super().__init__(config, latency, acceptance)
        self._undrafted = 0  # iterations in a row that drafting was predicted not to pay

    @property
    def may_draft(self) -> bool:
        # B = 1: one root fills it whatever the batch, unless the budget adapts past B
        return self.config.budget > 1 or self._budget_adapts

    # whether this policy may verify more than B where predicted goodput says so (an
    # AdaServe option, budget=goodput); the baselines keep the configured B
    adapts_budget: bool = False

    @property
    def _budget_adapts(self) -> bool:
        c = self.config
        return self.adapts_budget and c.cost_aware_depth and _prices_drafting(self.latency)

    def plan(self, batch: BatchView) -> SpecPlan:
        n = batch.n
        if n == 0:
            return _IDLE
        budget = self._iteration_budget(batch)
        if n >= budget:  # the roots alone fill the budget: drafting would be thrown away
            shape = _IDLE
        else:
            d, w = self._shape(n, budget)
            depth = self._worthwhile_depth(batch, d, w, budget)
            shape = SpecPlan(depth=depth, width=w) if depth else _IDLE
        return replace(self._priced(batch, shape, self._verify_tokens(n, shape, budget)),
                       budget=budget)

    def _iteration_budget(self, batch: BatchView) -> int:
        """B, or with ``adapts_budget`` and the cost-aware planning (a latency model that
        prices draft steps, cost_aware_depth on) the verify count with the most predicted
        tokens per second (budget.goodput_budget)."""
        c = self.config
        if not self._budget_adapts:
            return c.budget
        return goodput_budget(batch.n, self.acceptance.alphas(batch.request_ids), c.budget,
                              c.max_depth,
                              lambda d, b: self.predict_latency(batch, _chain(d), b))

    def _shape(self, n: int, budget: int) -> tuple[int, int]:
        """Depth and width for n requests: the EuroSys Eq. 8-9 the authors run
        (authors.tree_shape)."""
        c = self.config
        return tree_shape(n, budget, c.spec_budget, c.min_depth, c.max_depth, c.max_width,
                          c.rules)

    def _verify_tokens(self, n: int, shape: SpecPlan, budget: int) -> int:
        return min(max(n, budget), shape.candidate_nodes(n))

    def _budget_of(self, plan: SpecPlan) -> int:
        return plan.budget or self.config.budget

    def _worthwhile_depth(self, batch: BatchView, depth: int, width: int, budget: int) -> int:
        """Eq. 8's depth, cut short where deeper drafting is predicted to lower goodput.

        Eq. 8 takes the draft as free next to the target (a 160M draft beside a 7B target on
        a GPU). Where a draft step costs a sizeable share of a target forward (~13% for our
        3-layer draft on 2 CPU cores), 8 steps cost more than the tokens they add. So the
        depth is the d <= Eq. 8 maximizing predicted tokens per second: the acceptance
        tracker's per-depth rate alpha gives sum_{j<=d} alpha^j tokens per request
        (TurboSpec's chain estimate), the profiled latency model prices d draft steps plus
        verification. Depth 0, no draft at all, is scored too, so where a draft step costs
        more than it yields the policy plans what ``incremental`` would (one probe every
        PROBE_EVERY such iterations keeps the acceptance estimate current). Without a
        profiled draft cost (or with cost_aware_depth off) every depth costs the same and
        Eq. 8 stands.
        """
        if not self.config.cost_aware_depth or not _prices_drafting(self.latency):
            return depth
        def seconds(d: int) -> float:
            shape = SpecPlan(depth=d, width=width) if d else _IDLE
            return self.predict_latency(batch, shape, self._verify_tokens(batch.n, shape, budget))

        # ties keep the shallower tree
        best_d = int(np.argmax(chain_rates(self.acceptance.alphas(batch.request_ids), depth,
                                           seconds)))
        if best_d:
            self._undrafted = 0
            return best_d
        self._undrafted += 1
        return 1 if self._undrafted % self.PROBE_EVERY == 0 else 0


class AdaServePolicy(_BudgetedPolicy):
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
    summary = "AdaServe: the authors' two-phase scheduler with its options (pace, triage, depth, floor, calibrate)"

    def __init__(self, config: SchedulerConfig,
                 latency: IterationLatency | CalibratedLatency | None = None,
                 acceptance: AcceptanceTracker | None = None,
                 options: AdaServeOptions = PRESETS["adaserve"]) -> None:
        super().__init__(config, latency, acceptance)
        self.options = options
        self.adapts_budget = options.budget == "goodput"
        self.depth = MeasuredDepth() if options.depth == "measured" else None
        self.calibration = RequestCalibration() if options.calibrate else None
        # (selection, request ids, depth, tight [n] bool, predicted seconds) of iterations
        # not yet observed, for the measured depth
        self._pending: deque[tuple[Selection, tuple, int, np.ndarray, float]] = deque(maxlen=8)

    @property
    def admission(self) -> str:
        return self.options.admit

    @property
    def refuses(self) -> bool:
        return self.options.refuse

    def plan(self, batch):
        base = super().plan(batch)
        if not base.speculates or not _prices_drafting(self.latency):
            return base
        # every depth up to Eq. 8's, priced once: the floor reads their latencies and the
        # chosen one is returned as it is (the last is base's own shape)
        priced = [self._priced(batch, s, self._verify_tokens(batch.n, s, base.budget))
                  for s in (SpecPlan(depth=k, width=base.width, budget=base.budget)
                            for k in range(1, base.depth))]
        priced.append(base)
        plan = base
        if self.depth is not None:
            floor = (need_floor(batch.tpot_slo_s, [p.t_spec_s for p in priced],
                                self.config.rules.correction) if self.options.floor else 1)
            plan = priced[self.depth.next_depth(base.depth, floor) - 1]
        if self.options.pace is not None and self.config.cost_aware_depth:
            plan = self._paced_depth(batch, plan, priced)
        return plan

    def _paced_depth(self, batch: BatchView, plan: SpecPlan, priced: list[SpecPlan]) -> SpecPlan:
        """The plan no deeper than pacing lets any request keep: a request is cut to
        ``pace_cap`` tokens, its root included, so no selection keeps a node deeper than
        the largest cap less one, and drafting deeper is paid for nothing (a third of the
        served preset's steps drafted and then verified the roots alone: docs/results.md).
        The caps shrink with the iteration's latency, so the depth is cut until it holds
        at its own predicted latency; cut to 0, the iteration drafts nothing. Only where
        planning prices the draft (cost_aware_depth): with a free draft depth costs
        nothing, and the simulated paper set-ups keep Eq. 8's."""
        rules, pace = self.config.rules, self.options.pace
        while plan.depth:
            deepest = float(np.max(pace_cap(batch, plan.t_spec_s, pace, rules))) - 1.0
            if plan.depth <= deepest:
                return plan
            depth = int(deepest)
            plan = priced[depth - 1] if depth else self._priced(
                batch, _IDLE, self._verify_tokens(batch.n, _IDLE, plan.budget))
        return replace(plan, budget=priced[-1].budget)

    def _select(self, batch, plan, candidates):
        rules, opts = self.config.rules, self.options
        need = slo_need(batch, plan.t_spec_s, plan.depth, rules)  # [n]
        budget = self._budget_of(plan)
        n_max = slo_token_cap(budget, batch.n, rules) + 1  # the root counts
        served = in_slo_phase(batch, rules) & (need > 1.0 + SLO_EPS)  # [n]
        if opts.triage and batch.max_tokens_left is not None:
            a_max = np.minimum(top_yield(candidates, n_max), plan.depth + 1.0)  # [n]
            served &= ~unreachable(batch, a_max, plan.t_spec_s)
        worth = None if self.calibration is None else self.calibration.ratios(batch.request_ids)
        sel = select_slo_customized(candidates, budget, need,
                                    np.where(served, need, 1.0), n_max,
                                    worth=worth, ascending=rules.ascending)
        if opts.pace is not None:
            sel = trim(candidates, sel, pace_cap(batch, plan.t_spec_s, opts.pace, rules))
        if self.depth is not None and plan.speculates and _prices_drafting(self.latency):
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

    def forget(self, request_id):
        super().forget(request_id)
        if self.calibration is not None:
            self.calibration.forget(request_id)


class AdaServeTextPolicy(_BudgetedPolicy):
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


class GlobalGreedyPolicy(_BudgetedPolicy):
    name = "global-greedy"
    summary = "highest path probability across all requests, no SLO step (EAGLE-2/TETRIS)"

    def _select(self, batch, plan, candidates):
        return select_global_greedy(candidates, self._budget_of(plan))


class EqualGreedyPolicy(_BudgetedPolicy):
    name = "equal-greedy"
    summary = "budget split evenly over requests, greedy within each tree"

    def _select(self, batch, plan, candidates):
        return select_equal_share(candidates, self._budget_of(plan))


class SpecInferPolicy(Policy):
    name = "specinfer"
    summary = "fixed tree expansion <1,1,3,1,1,1,1,1>, no budget awareness (SpecInfer)"

    def plan(self, batch: BatchView) -> SpecPlan:
        if batch.n == 0:
            return _IDLE
        exp = self.config.specinfer_expansion
        shape = SpecPlan(depth=len(exp), width=int(np.prod(exp)), expansion=exp)
        return self._priced(batch, shape, shape.candidate_nodes(batch.n))

    def _select(self, batch, plan, candidates):
        return select_all(candidates)


class IncrementalPolicy(Policy):
    name = "incremental"
    summary = "no speculation, continuous batching (vLLM-style baseline)"
    may_draft = False

    def plan(self, batch: BatchView) -> SpecPlan:
        if batch.n == 0:
            return _IDLE
        return self._priced(batch, _IDLE, batch.n)

    def _select(self, batch, plan, candidates):
        return select_roots(candidates)


class TurboSpecPolicy(Policy):
    name = "turbospec"
    summary = "chain drafts, per-iteration length k in 0..K maximizing predicted goodput"

    def __init__(self, config, latency=None, acceptance=None):
        # a shape-blind predictor (no profile behind it) cannot rank chain lengths
        if latency is None or isinstance(latency, CalibratedLatency) and latency.base is None:
            raise ValueError("turbospec plans with the profile's latency models and none is "
                             "saved for this model pair: run `adaserve profile` once (a few "
                             "minutes), or serve it with `adaserve serve`, which measures a "
                             "quick profile at start")
        super().__init__(config, latency, acceptance)

    def goodput(self, batch: BatchView) -> np.ndarray:
        """Predicted tokens/s for k = 0..K (seed 000 Listing 2, k = 0 scored as well)."""
        return chain_rates(self.acceptance.alphas(batch.request_ids), self.config.max_chain,
                           lambda k: self.predict_latency(batch, _chain(k), batch.n * (k + 1)))

    def plan(self, batch: BatchView) -> SpecPlan:
        if batch.n == 0:
            return _IDLE
        k = int(np.argmax(self.goodput(batch)))  # ties go to the shorter chain
        return self._priced(batch, _chain(k), batch.n * (k + 1))

    def _select(self, batch, plan, candidates):
        return select_all(candidates)


class StaticChainPolicy(Policy):
    """A chain of k draft tokens for every request, every iteration, all k + 1 verified
    (root + chain), whatever the budget: the paper's vLLM-Spec(k) baseline, which speculates
    a fixed length with no regard for load."""

    k: ClassVar[int]

    def plan(self, batch: BatchView) -> SpecPlan:
        if batch.n == 0:
            return _IDLE
        return self._priced(batch, _chain(self.k), batch.n * (self.k + 1))

    def _select(self, batch, plan, candidates):
        return select_all(candidates)


class Chain4Policy(StaticChainPolicy):
    name = "chain-4"
    k = 4
    summary = "a static chain of 4 draft tokens per request, no budget (vLLM-Spec(4))"


class Chain6Policy(StaticChainPolicy):
    name = "chain-6"
    k = 6
    summary = "a static chain of 6 draft tokens per request, no budget (vLLM-Spec(6))"


class Chain8Policy(StaticChainPolicy):
    name = "chain-8"
    k = 8
    summary = "a static chain of 8 draft tokens per request, no budget (vLLM-Spec(8))"


STATIC_CHAINS: tuple[type[StaticChainPolicy], ...] = (Chain4Policy, Chain6Policy, Chain8Policy)


def _prices_drafting(latency: IterationLatency | CalibratedLatency | None) -> bool:
    """Whether the latency predictor charges for draft steps (a profiled draft model)."""
    if isinstance(latency, CalibratedLatency):
        latency = latency.base
    return latency is not None and latency.draft is not None


def _chain(k: int) -> SpecPlan:
    """A k-token chain draft (k = 0: no draft)."""
    return SpecPlan(depth=k, width=1 if k else 0)


# Every name a spec may start with. ``adaserve`` and ``adaserve-authors`` are presets of one
# class (options.PRESETS); the others are policies of their own and take no options.
POLICIES: dict[str, type[Policy]] = {
    **{name: AdaServePolicy for name in PRESETS},
    **{cls.name: cls
       for cls in (AdaServeTextPolicy, GlobalGreedyPolicy, EqualGreedyPolicy, SpecInferPolicy,
                   TurboSpecPolicy, IncrementalPolicy, *STATIC_CHAINS)},
}

SUMMARIES: dict[str, str] = {
    **{name: cls.summary for name, cls in POLICIES.items()},
    "adaserve": ("AdaServe, the best configuration: paced 0.7, triage, measured depth over a "
                 "need floor, a goodput budget where planning is cost-aware"),
    "adaserve-authors": "AdaServe as its authors' code runs it (FlexFlow Serve): every option off",
}


def policy_options(spec: str) -> tuple[type[Policy], AdaServeOptions | None]:
    """The class a policy spec (``name`` or ``preset:key=value,...``) builds, and its options
    (None for a policy without options); ValueError naming the choices otherwise."""
    name, text = split_spec(spec)
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}") from None
    if name in PRESETS:
        return cls, PRESETS[name].with_text(text)
    if text.strip():
        raise ValueError(f"policy {name!r} takes no options (only "
                         f"{' and '.join(PRESETS)} do), got {text!r}")
    return cls, None


def make_policy(spec: str, config: SchedulerConfig, latency: IterationLatency | None = None,
                acceptance: AcceptanceTracker | None = None) -> Policy:
    """The policy a spec names (``policy_options``)."""
    cls, options = policy_options(spec)
    if options is None:
        return cls(config, latency, acceptance)
    return cls(config, latency, acceptance, options=options)

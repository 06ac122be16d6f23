"""The policy interface (``Policy``), the budgeted base the tree policies share, and the
helpers every policy plans with. The policies themselves: ``adaserve_policy`` (AdaServe)
and ``baselines`` (the paper's comparisons); ``policies`` names them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import ClassVar

import numpy as np

from adaserve.scheduler.acceptance import AcceptanceTracker
from adaserve.scheduler.authors import tree_shape
from adaserve.scheduler.budget import chain_rates, goodput_budget
from adaserve.scheduler.config import SchedulerConfig
from adaserve.scheduler.context_cost import ContextTable, budget_at
from adaserve.scheduler.cost import CalibratedLatency, IterationLatency
from adaserve.scheduler.prefill_yield import PromptQueue
from adaserve.scheduler.selection import Selection
from adaserve.scheduler.shape import SpecPlan
from adaserve.scheduler.slo import BatchView
from adaserve.scheduler.tree import CandidateBatch

IDLE = SpecPlan(depth=0, width=0)


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

    @property
    def tpot_door(self) -> str:
        """Which TPOT door the engine keeps (admission.TPOT_DOORS): "off", or it refuses an
        arriving request whose TPOT SLO is shorter than the time a token has taken its
        decoding requests at least as tight ("pace", admission.tpot_refusal) or that more
        of its recently finished requests that tight missed than kept ("missed",
        admission.missed_refusal); no policy has one unless its options say so."""
        return "off"

    @property
    def caps_batch(self) -> bool:
        """Whether the engine holds a waiting request back while admitting it would make
        the predicted decode step longer than the tightest TPOT SLO it serves
        (admission.past_step_cap); no policy does unless its options say so."""
        return False

    @property
    def prefill(self) -> str:
        """How the engine places prefill chunks (options.PREFILLS): one every iteration
        unless a policy's options say otherwise; the engine asks ``prefill_waits`` only
        where this is ``yield``, so no other policy's iteration pays for the question."""
        return "chunk"

    def prefill_waits(self, batch: BatchView, prompts: PromptQueue, t_plain_s: float,
                      t_prefill_s: float) -> bool:
        """Whether this iteration's prefill chunk waits for the decoding requests ``batch``
        at the cost of the ``prompts`` it would prefill, given the recent measured seconds
        of a plain decode step and of a step that prefilled (prefill_yield.py); no policy
        lets it wait unless its options say so."""
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

    def forget(self, request_id: Hashable, decoded: int | None = None) -> None:
        """Drop a finished or aborted request's state; ``decoded``: the tokens it decoded
        after its first, where it decoded (what policies learn output lengths from)."""
        self.acceptance.forget(request_id)

    def predict_latency(self, batch: BatchView, plan: SpecPlan, verify_tokens: int) -> float:
        if self.latency is None:
            return 0.0
        return self.latency.predict(int(batch.context_tokens.sum()),
                                    plan.draft_step_tokens(batch.n), verify_tokens, batch.n)

    def _priced(self, batch: BatchView, shape: SpecPlan, verify_tokens: int) -> SpecPlan:
        """The shape with its predicted iteration latency filled in."""
        return replace(shape, t_spec_s=self.predict_latency(batch, shape, verify_tokens))


class BudgetedPolicy(Policy):
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
        return self.adapts_budget and c.cost_aware_depth and prices_drafting(self.latency)

    def plan(self, batch: BatchView) -> SpecPlan:
        n = batch.n
        if n == 0:
            return IDLE
        budget = self._iteration_budget(batch)
        if n >= budget:  # the roots alone fill the budget: drafting would be thrown away
            shape = IDLE
        else:
            d, w = self._shape(n, budget)
            depth = self._worthwhile_depth(batch, d, w, budget)
            shape = SpecPlan(depth=depth, width=w) if depth else IDLE
        return replace(self._priced(batch, shape, self._verify_tokens(n, shape, budget)),
                       budget=budget)

    def _iteration_budget(self, batch: BatchView) -> int:
        """B, or with ``adapts_budget`` and the cost-aware planning (a latency model that
        prices draft steps, cost_aware_depth on) the verify count with the most predicted
        tokens per second (budget.goodput_budget)."""
        c = self.config
        if not self._budget_adapts:
            return c.budget
        return goodput_budget(batch.n, self.acceptance.alphas(batch.request_ids),
                              self._floor_budget(batch), c.max_depth,
                              lambda d, b: self.predict_latency(batch, chain_plan(d), b))

    def _floor_budget(self, batch: BatchView) -> int:
        """The least the goodput budget verifies: B, or with a context table the smaller of
        B and the table's B at the batch's mean context (context_cost.budget_at). On a CPU
        extra tokens cost more as the context grows, so B shrinks there, and a floor of the
        short-context B would verify (and Eq. 9 would shape) trees the table prices as
        losing; the table never raises it past B (the goodput count does that)."""
        at = context_budget(self.latency, batch.context_tokens)
        return self.config.budget if at is None else min(self.config.budget, at)

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
        (TurboSpec's chain estimate), of which a budget smaller than the chains is credited
        with its most probable nodes only (``budget.budgeted_chain_tokens``), and the
        profiled latency model prices d draft steps plus the tokens verified. Depth 0, no
        draft at all, is scored too, so where a draft step costs more than it yields the
        policy plans what ``incremental`` would (one probe every
        PROBE_EVERY such iterations keeps the acceptance estimate current). Without a
        profiled draft cost (or with cost_aware_depth off) every depth costs the same and
        Eq. 8 stands.
        """
        if not self.config.cost_aware_depth or not prices_drafting(self.latency):
            return depth

        def verified(d: int) -> int:
            shape = SpecPlan(depth=d, width=width) if d else IDLE
            return self._verify_tokens(batch.n, shape, budget)

        def seconds(d: int) -> float:
            shape = SpecPlan(depth=d, width=width) if d else IDLE
            return self.predict_latency(batch, shape, verified(d))

        # ties keep the shallower tree; a depth is credited with the nodes its budget verifies
        best_d = int(np.argmax(chain_rates(self.acceptance.alphas(batch.request_ids), depth,
                                           seconds, verified)))
        if best_d:
            self._undrafted = 0
            return best_d
        self._undrafted += 1
        return 1 if self._undrafted % self.PROBE_EVERY == 0 else 0



def prices_drafting(latency: IterationLatency | CalibratedLatency | None) -> bool:
    """Whether the latency predictor charges for draft steps (a profiled draft model)."""
    if isinstance(latency, CalibratedLatency):
        latency = latency.base
    return latency is not None and latency.draft is not None


def context_budget(latency: IterationLatency | CalibratedLatency | None,
                   contexts: np.ndarray) -> int | None:
    """B at the mean of ``contexts`` ([n] tokens per request) by the latency's context
    table; None without one."""
    if isinstance(latency, CalibratedLatency):
        latency = latency.base
    target = None if latency is None else latency.target
    if not isinstance(target, ContextTable):
        return None
    budget = budget_at(target, float(np.mean(contexts)))
    return None if budget is None else budget.tokens


def chain_plan(k: int) -> SpecPlan:
    """A k-token chain draft (k = 0: no draft)."""
    return SpecPlan(depth=k, width=1 if k else 0)


# Every name a spec may start with. ``adaserve`` and ``adaserve-authors`` are presets of one

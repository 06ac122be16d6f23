"""The baselines of seed 002's comparison, on the same engine loop as AdaServe: greedy and
equal-share selection under B, SpecInfer, TurboSpec's goodput chains, incremental decoding
and the paper's static chains vLLM-Spec(k)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from adaserve.scheduler.budget import chain_rates
from adaserve.scheduler.cost import CalibratedLatency
from adaserve.scheduler.policy_base import IDLE, BudgetedPolicy, Policy, chain_plan
from adaserve.scheduler.selection import (select_all, select_equal_share, select_global_greedy,
                                          select_roots)
from adaserve.scheduler.shape import SpecPlan
from adaserve.scheduler.slo import BatchView


class GlobalGreedyPolicy(BudgetedPolicy):
    name = "global-greedy"
    summary = "highest path probability across all requests, no SLO step (EAGLE-2/TETRIS)"

    def _select(self, batch, plan, candidates):
        return select_global_greedy(candidates, self._budget_of(plan))


class EqualGreedyPolicy(BudgetedPolicy):
    name = "equal-greedy"
    summary = "budget split evenly over requests, greedy within each tree"

    def _select(self, batch, plan, candidates):
        return select_equal_share(candidates, self._budget_of(plan))


class SpecInferPolicy(Policy):
    name = "specinfer"
    summary = "fixed tree expansion <1,1,3,1,1,1,1,1>, no budget awareness (SpecInfer)"

    def plan(self, batch: BatchView) -> SpecPlan:
        if batch.n == 0:
            return IDLE
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
            return IDLE
        return self._priced(batch, IDLE, batch.n)

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
                           lambda k: self.predict_latency(batch, chain_plan(k), batch.n * (k + 1)))

    def plan(self, batch: BatchView) -> SpecPlan:
        if batch.n == 0:
            return IDLE
        k = int(np.argmax(self.goodput(batch)))  # ties go to the shorter chain
        return self._priced(batch, chain_plan(k), batch.n * (k + 1))

    def _select(self, batch, plan, candidates):
        return select_all(candidates)


class StaticChainPolicy(Policy):
    """A chain of k draft tokens for every request, every iteration, all k + 1 verified
    (root + chain), whatever the budget: the paper's vLLM-Spec(k) baseline, which speculates
    a fixed length with no regard for load."""

    k: ClassVar[int]

    def plan(self, batch: BatchView) -> SpecPlan:
        if batch.n == 0:
            return IDLE
        return self._priced(batch, chain_plan(self.k), batch.n * (self.k + 1))

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


"""What the AdaServe authors' implementation decides where Algorithm 2's text leaves a
choice or states it differently (issue 26; docs/sim.md, "The authors' AdaServe").

Read in FlexFlow Serve's request manager (flexflow/flexflow-serve, branch specscheduler,
src/runtime/request_manager.cc at 9c042f5, Jan. 2025) and the paper's EuroSys version
(AdaServe-EuroSys.pdf in zikun-li/AdaServe-Artifact-Evaluation, §5.2 Eq. 8-9); the facts are
theirs, the code below is ours. Each rule is a field of `AdaServeRules`, so one can be
switched back to the text's reading at a time (benchmarks/paper/ablation.py).

Pure numpy over a `BatchView`: no tensors, no engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from adaserve.scheduler.slo import SLO_EPS, BatchView


@dataclass(frozen=True, slots=True)
class AdaServeRules:
    """The authors' decisions; each field's default is theirs, the comment says where."""

    # need per step = (draft + verify latency) * correction / SLO: prune_token_tree's
    # num_tokens_to_decode_per_step, correction_factor = 1.05 (request_manager.h)
    correction: float = 1.05
    # the SLO phase visits requests in ascending need (prune_token_tree sorts its
    # (need, request) pairs with std::less); the text says most-behind first
    ascending: bool = True
    # n_max: int(1.2 * B / n) tokens beyond the root (add_tokens_toward_slo)
    n_max_factor: float = 1.2
    # False: requests whose SLO was given in milliseconds skip the SLO phase, as the
    # authors' code does (prune_token_tree: `if (slo_ratio < 0) continue`), though they
    # still compete in the throughput phase. The default stays True, the text's reading: the
    # way an SLO was written says nothing about how urgent it is, and a server whose users
    # send X-SLO-TPOT-MS would otherwise never run the SLO phase for them. The paper's
    # set-ups (adaserve/sim/data/setups/paper-*.json) set False; measured on Fig. 8 it
    # moves attainment by under a point (docs/sim.md, the choice table).
    absolute_in_slo_phase: bool = True
    # a request's decoded length counts the token its prefill produced
    # (Request::decode_length = tokens - prefill length); its latency runs from its first
    # decoding iteration, i.e. from that token
    count_prefill_token: bool = True
    # Eq. 8 (EuroSys): d = clip(D_max, D_min, floor(B / (n + c1)) - 1)
    depth_offset: int = 0  # c1
    # Eq. 9 (EuroSys): w = clip(W_max, 1, floor(B2 / n) + c2)
    width_offset: int = 0  # c2

    def __post_init__(self) -> None:
        for name in ("correction", "n_max_factor"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
                    math.isfinite(v) and v > 0):
                raise ValueError(f"AdaServeRules.{name} must be a number > 0, got {v!r}")
        for name in ("ascending", "absolute_in_slo_phase", "count_prefill_token"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"AdaServeRules.{name} must be a bool")
        for name in ("depth_offset", "width_offset"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"AdaServeRules.{name} must be an integer >= 0, got {v!r}")


def tree_shape(n: int, budget: int, draft_budget: int, min_depth: int, max_depth: int,
               max_width: int, rules: AdaServeRules) -> tuple[int, int]:
    """Depth and width (the paper's EuroSys Eq. 8-9, which the artifact's --min-tree-depth
    and --max-tokens-per-ssm-spec-batch flags feed): d = clip(D_max, D_min,
    floor(B / (n + c1)) - 1) keeps a request's chain of d + 1 tokens within its share of
    the verify budget B; w = clip(W_max, 1, floor(B2 / n) + c2) keeps the n * w tokens of a
    draft step within the draft's budget B2."""
    if n <= 0:
        raise ValueError(f"tree_shape needs at least one request, got n={n}")
    d = min(max_depth, max(min_depth, budget // (n + rules.depth_offset) - 1))
    w = min(max_width, max(1, draft_budget // n + rules.width_offset))
    return max(d, 1), w


def raw_need(batch: BatchView, t_iter_s: float, rules: AdaServeRules,
             fraction: float = 1.0) -> np.ndarray:
    """[n] tokens (root included) each request must commit in an iteration of ``t_iter_s``
    to stand at ``fraction`` x its SLO after it, unclipped: (t_iter x correction + l) /
    (fraction x SLO) - o; NaN for best effort. The one formula behind the authors' need
    (``slo_need``), the pace cap (pacing.pace_cap) and the gate (gate.drafting_pays)."""
    o = batch.decoded_tokens + (1 if rules.count_prefill_token else 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (t_iter_s * rules.correction + batch.decode_latency_s) / (
            fraction * batch.tpot_slo_s) - o


def holds(batch: BatchView, t_iter_s: float, rules: AdaServeRules, tokens=1.0,
          fraction: float = 1.0) -> np.ndarray:
    """[n] bool: committing ``tokens`` (a scalar or [n]) in an iteration of ``t_iter_s``
    keeps each request within ``fraction`` x its SLO (``raw_need`` at most that many);
    False for best effort. The test the gate and prefill=yield count requests by."""
    with np.errstate(invalid="ignore"):
        return raw_need(batch, t_iter_s, rules, fraction) <= tokens + SLO_EPS


def slo_need(batch: BatchView, t_iter_s: float, depth: int, rules: AdaServeRules) -> np.ndarray:
    """[n] tokens each request must commit this iteration, root included, to stay on its
    SLO, as the authors compute it (prune_token_tree, add_tokens_toward_slo):

        need = (t_iter * correction + l) / SLO - o,  clipped to [1, d + 1]

    t_iter the predicted iteration latency, l the decode latency so far, o the tokens
    decoded (with the prefill's token if ``count_prefill_token``). A need of 1 asks nothing
    beyond the root; best-effort requests need 1."""
    need = np.clip(raw_need(batch, t_iter_s, rules), 1.0, depth + 1.0)
    return np.where(np.isnan(batch.tpot_slo_s), 1.0, need)  # [n]


def in_slo_phase(batch: BatchView, rules: AdaServeRules) -> np.ndarray:
    """[n] bool: requests the SLO phase may serve: an SLO, and unless
    ``absolute_in_slo_phase`` one stated relative to the baseline (unknown counts as
    relative)."""
    has_slo = ~np.isnan(batch.tpot_slo_s)
    if rules.absolute_in_slo_phase or batch.slo_relative is None:
        return has_slo
    return has_slo & batch.slo_relative


def slo_token_cap(budget: int, n: int, rules: AdaServeRules) -> int:
    """n_max: tokens one request may take in the SLO phase, beyond its root."""
    return int(budget * rules.n_max_factor / max(n, 1))

"""Engine-agnostic AdaServe scheduling (seed 002 §3-5), installed as ``adaserve.scheduler``.

Knows nothing about tensors, GPUs or SGLang: numpy and sortedcontainers only, so the embedded
engine and the SGLang plugin call the same code and tests run on fabricated inputs.
"""

from adaserve.scheduler.acceptance import AcceptanceTracker, Calibration, expected_chain_tokens
from adaserve.scheduler.authors import AdaServeRules
from adaserve.scheduler.config import SchedulerConfig
from adaserve.scheduler.context_cost import ContextTable, budget_table, budget_table_text
from adaserve.scheduler.cost import CalibratedLatency, IterationLatency
from adaserve.scheduler.latency import (BUDGET_MAX_RATIO, Budget, LatencyModel, LatencySample,
                                        budget_by_ratio, find_knee)
from adaserve.scheduler.oracle import OracleResult, algorithm1
from adaserve.scheduler.options import PRESETS, AdaServeOptions, split_specs
from adaserve.scheduler.policies import (POLICIES, STATIC_CHAINS, SUMMARIES, Policy, make_policy,
                                         policy_options)
from adaserve.scheduler.pool import PoolFull, RequestPool
from adaserve.scheduler.selection import (
    Selection,
    select_all,
    select_equal_share,
    select_global_greedy,
    select_roots,
    select_slo_customized,
)
from adaserve.scheduler.shape import SpecPlan, depth_width
from adaserve.scheduler.slo import SLO, BatchView, RequestProgress, capped_requirement
from adaserve.scheduler.tree import CandidateBatch, CandidateTree

__all__ = [
    "AcceptanceTracker", "AdaServeOptions", "AdaServeRules", "BUDGET_MAX_RATIO", "BatchView", "Budget", "CalibratedLatency", "Calibration", "CandidateBatch", "CandidateTree", "ContextTable",
    "IterationLatency", "LatencyModel", "LatencySample", "OracleResult", "POLICIES", "Policy",
    "PRESETS", "PoolFull", "RequestPool", "RequestProgress", "SLO", "STATIC_CHAINS", "SUMMARIES", "SchedulerConfig",
    "Selection",
    "SpecPlan", "algorithm1", "budget_by_ratio", "budget_table", "budget_table_text", "capped_requirement", "depth_width", "expected_chain_tokens",
    "find_knee", "make_policy", "policy_options", "select_all", "select_equal_share", "select_global_greedy",
    "select_roots", "select_slo_customized", "split_specs",
]

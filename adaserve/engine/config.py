"""The engine's one configuration object."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from adaserve.engine.online_config import OnlineDraftConfig
from adaserve.engine.weights import DEFAULT_DRAFT, DEFAULT_MODEL
from adaserve.scheduler import AdaServeRules, policy_options


PREFILL_MODES = ("chunked", "first")


def auto_draft(model: str) -> str | None:
    """The draft "auto" names: our distilled draft for the default target, else none."""
    return DEFAULT_DRAFT if model == DEFAULT_MODEL else None


def names_a_draft(model: str, draft: str | None) -> bool:
    """Whether ``draft`` gives ``model`` a draft (so a speculative policy can run)."""
    return draft is not None and (draft != "auto" or auto_draft(model) is not None)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Everything `Engine` needs; invalid values raise ValueError at construction.

    draft: ``"auto"`` (the packaged distilled draft with the default target when the policy
    speculates, else none; resolved at construction), None (no speculation: only
    ``incremental``), DEFAULT_DRAFT, ``"target"`` (the target drafts for itself: every
    greedy candidate is accepted), ``"layers:N"`` (the target's first N layers and its
    head: a weak draft), or a local Hugging Face directory sharing the tokenizer.
    """

    model: str = DEFAULT_MODEL
    draft: str | None = "auto"
    policy: str = "incremental"
    budget: int | None = None  # B; None: from the profile, else DEFAULT_BUDGET
    max_depth: int = 8  # D_max (seed 002 Eq. 8)
    max_width: int = 16  # W_max (Eq. 9)
    min_depth: int = 1  # D_min (the EuroSys Eq. 8, the AdaServe artifact's --min-tree-depth)
    draft_budget: int | None = None  # B2 (EuroSys Eq. 9): draft tokens per step; None: B
    rules: AdaServeRules = field(default_factory=AdaServeRules)  # scheduler/authors.py
    # Drop a request once it is more than this many of its SLO's tokens behind (its decode
    # latency > SLO x (decoded tokens + slack)): it ends with finish_reason "abort", not
    # attained. The AdaServe authors' --slo-attainment-early-termination (slack 6,
    # request_manager.cc update_llm_verify_results); their artifact does not pass it.
    # None (the default): never drop.
    slo_drop_slack: int | None = None
    cost_aware_depth: bool = True  # cut Eq. 8's depth where the draft's cost outweighs it
    # refit the iteration-latency model's shape online from measured iterations
    # (scheduler/refit.py), not only its scale; the simulator's kept runs predate it and
    # keep the scale alone
    latency_refit: bool = True
    # price iterations by the profile's context table (scheduler/context_cost.py: requests x
    # tokens x context, its B by context bounding the goodput budget) instead of the linear
    # models refitted online; off until a served A/B shows it does not lose (the table path
    # gives up the refit's shape correction, which fixed the served sweep's mispricing)
    context_table: bool = False
    # target + draft KV pools together, allocated at start-up; "auto": KV_MEMORY_FRACTION
    # of the memory available once the weights are loaded (kv_pool.py)
    kv_cache_mb: int | str = 1024
    max_batch: int = 32  # running requests (KV slots) at most; fewer if the pool is smaller
    # prompt + output tokens per request, up to the model's own context (8192 for
    # SmolLM2; checked when the model is loaded)
    max_context: int = 1024
    # The draft's bounded KV (StreamingLLM, seed 001 §4): None keeps the draft's whole
    # context; N keeps draft_sinks first tokens + the N most recent ones per request, so a
    # draft step's cost stays flat in the context (draft_window.py). The target always
    # keeps its full cache, so outputs do not change, only acceptance.
    draft_window: int | None = None
    draft_sinks: int = 4
    prefill_chunk: int = 128  # prompt tokens prefilled per iteration, across requests
    # "chunked": each iteration prefills a chunk, then the running requests decode (Sarathi-
    # Serve's piggybacking); "first": an iteration with prompt work prefills only, and the
    # running requests wait (vLLM 0.8's prefill-first)
    prefill_mode: str = "chunked"
    max_waiting: int = 1024  # queued requests beyond which submit raises QueueFull
    profile: Path | None = None  # None: the default profile path for model + draft, if present
    device: str = "auto"  # "auto": cuda when available, else cpu
    # few-row matmuls through the compiled CPU kernels (adaserve.engine.kernels); off, or
    # ADASERVE_FAST_KERNELS=0, keeps the eager torch matmuls
    fast_kernels: bool = True
    default_slo_ms: float | None = None  # TPOT SLO for requests that bring none
    stop_token_ids: tuple[int, ...] = field(default_factory=tuple)  # beyond the tokenizer's EOS
    # distil the draft again from served traffic and swap it in (online_draft.py); None: off
    online_draft: OnlineDraftConfig | None = None

    def __post_init__(self) -> None:
        policy_options(self.policy)  # ValueError naming the choices for a bad spec
        if self.draft == "auto":
            object.__setattr__(self, "draft", None if self.policy == "incremental"
                               else auto_draft(self.model))
        if self.policy != "incremental" and self.draft is None:
            raise ValueError(f"policy {self.policy!r} speculates and needs a draft model "
                             "(draft='target', 'layers:N' or a model directory)")
        if self.kv_cache_mb != "auto" and (isinstance(self.kv_cache_mb, bool)
                                           or not isinstance(self.kv_cache_mb, int)
                                           or self.kv_cache_mb < 1):
            raise ValueError(f"kv_cache_mb must be 'auto' or an integer >= 1, "
                             f"got {self.kv_cache_mb!r}")
        ints = {"max_depth": 1, "max_width": 1, "min_depth": 1, "max_batch": 1,
                "max_context": 2, "prefill_chunk": 1, "max_waiting": 0, "draft_sinks": 0}
        for name, low in ints.items():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
        if self.prefill_mode not in PREFILL_MODES:
            raise ValueError(f"prefill_mode must be one of {', '.join(PREFILL_MODES)}, "
                             f"got {self.prefill_mode!r}")
        for name in ("cost_aware_depth", "latency_refit", "context_table"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        for name in ("budget", "draft_budget", "slo_drop_slack", "draft_window"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{name} must be None or an integer >= 1, got {v!r}")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ValueError(f"device must be auto, cpu or cuda[:i], got {self.device!r}")
        if self.draft is not None and self.draft.startswith("layers:"):
            n = self.draft.split(":", 1)[1]
            if not n.isdigit() or int(n) < 1:
                raise ValueError(f"draft 'layers:N' needs N >= 1, got {self.draft!r}")
        if self.online_draft is not None and self.draft is None:
            raise ValueError("online_draft adapts a draft: give a speculative policy a draft")
        if self.online_draft is not None and self.draft_window is not None:
            # the swap re-feeds each running request's whole context to the new draft
            # (TorchExecutor.replace_draft), which a bounded draft's ring does not hold
            raise ValueError("online_draft does not work with draft_window yet: give one or "
                             "the other")
        if self.default_slo_ms is not None and not self.default_slo_ms > 0:
            raise ValueError(f"default_slo_ms must be > 0, got {self.default_slo_ms!r}")


# B when no profile says otherwise (library use, `adaserve generate`; `adaserve serve`
# measures B at start-up instead). 1: no speculation. Unmeasured speculation can lose to
# none: on the 2-core dev CPU's eager path a two-token forward cost 1.31x a one-token one
# (budget rule: B = 1), and B = 16 attained 39.8% against incremental's 50.7% on a bursty
# mixed-SLO workload (issue 16); the compiled kernels moved its B to 6. `adaserve profile`
# measures this machine's B.
DEFAULT_BUDGET = 1

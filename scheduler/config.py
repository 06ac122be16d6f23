"""The scheduler's one configuration object."""

from __future__ import annotations

from dataclasses import dataclass, field

from adaserve.scheduler.authors import AdaServeRules


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Knobs of every policy; validated so a bad value fails at start-up, not mid-iteration."""

    budget: int  # B: tokens one target forward can verify while memory-bound (seed 002 §3)
    max_depth: int = 8  # D_max (Eq. 8)
    max_width: int = 16  # W_max (Eq. 9)
    min_depth: int = 1  # D_min (the EuroSys Eq. 8; the artifact's --min-tree-depth)
    # B2 of the EuroSys Eq. 9, draft tokens one draft step may decode (n * w); None: B.
    # The artifact's --max-tokens-per-ssm-spec-batch.
    draft_budget: int | None = None
    # n_max, the most tokens one request may take in the SLO phase (Algorithm 2 line 12).
    # None: twice its even share, max(2, ceil(2B/n)), so one hopeless request cannot drain
    # the budget but an urgent one can claim more than the others.
    slo_max_tokens: int | None = None
    max_chain: int = 8  # K for turbospec: chain lengths 0..K are scored
    specinfer_expansion: tuple[int, ...] = (1, 1, 3, 1, 1, 1, 1, 1)  # seed 002 §6.1
    # Budgeted policies: cut Eq. 8's depth where the profiled draft cost makes deeper trees
    # lower predicted goodput (policy_base.py, _worthwhile_depth). False: Eq. 8 as published.
    cost_aware_depth: bool = True
    # what `adaserve` decides as its authors' code does (scheduler/authors.py)
    rules: AdaServeRules = field(default_factory=AdaServeRules)

    def __post_init__(self) -> None:
        checks = {
            "budget": (self.budget, 1),
            "max_depth": (self.max_depth, 1),
            "max_width": (self.max_width, 1),
            "max_chain": (self.max_chain, 0),
            "min_depth": (self.min_depth, 1),
        }
        for name, (value, low) in checks.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.slo_max_tokens is not None and (
            not isinstance(self.slo_max_tokens, int) or self.slo_max_tokens < 1
        ):
            raise ValueError(f"slo_max_tokens must be None or an integer >= 1, "
                             f"got {self.slo_max_tokens!r}")
        if self.draft_budget is not None and (
                isinstance(self.draft_budget, bool) or not isinstance(self.draft_budget, int)
                or self.draft_budget < 1):
            raise ValueError(f"draft_budget must be None or an integer >= 1, "
                             f"got {self.draft_budget!r}")
        if not isinstance(self.rules, AdaServeRules):
            raise ValueError(f"rules must be an AdaServeRules, got {self.rules!r}")
        if not isinstance(self.cost_aware_depth, bool):
            raise ValueError(f"cost_aware_depth must be a bool, got {self.cost_aware_depth!r}")
        exp = tuple(self.specinfer_expansion)
        if not exp or any(not isinstance(k, int) or k < 1 for k in exp):
            raise ValueError(f"specinfer_expansion needs positive integers, got {exp!r}")
        object.__setattr__(self, "specinfer_expansion", exp)

    @property
    def spec_budget(self) -> int:
        """B2: draft tokens per draft step."""
        return self.budget if self.draft_budget is None else self.draft_budget

    def slo_cap(self, n: int) -> int:
        """n_max for a batch of n requests."""
        if self.slo_max_tokens is not None:
            return self.slo_max_tokens
        return max(2, -(-2 * self.budget // max(n, 1)))

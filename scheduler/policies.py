"""Speculation policies behind one interface, chosen by name (DESIGN.md "Policies").

Every iteration an engine asks its policy for a ``SpecPlan`` (what to draft), drafts the
candidate trees, then asks it for a ``Selection`` (what to verify). All policies run on
the same engine loop, which is what makes their comparison fair: the six of seed 002's
comparison, and the static chains of the paper's vLLM-Spec(k) baselines.
"""

from __future__ import annotations

from adaserve.scheduler.acceptance import AcceptanceTracker
from adaserve.scheduler.adaserve_policy import AdaServePolicy, AdaServeTextPolicy
from adaserve.scheduler.baselines import (STATIC_CHAINS, EqualGreedyPolicy, GlobalGreedyPolicy,
                                          IncrementalPolicy, SpecInferPolicy, TurboSpecPolicy)
from adaserve.scheduler.config import SchedulerConfig
from adaserve.scheduler.cost import IterationLatency
from adaserve.scheduler.options import PRESETS, AdaServeOptions, split_spec
from adaserve.scheduler.policy_base import Policy

__all__ = ["POLICIES", "STATIC_CHAINS", "SUMMARIES", "AdaServePolicy", "Policy",
           "IncrementalPolicy", "make_policy", "policy_options"]

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
                 "need floor, a goodput budget where planning is cost-aware, the prefill chunk "
                 "waiting for decodes, TTFT-deadline admission"),
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


"""The paper's serving systems by name: each is a policy and a prefill mode of this engine.

AdaServe's evaluation compares it with vLLM 0.8 (continuous batching, prefill-first, no
speculation), Sarathi-Serve (chunked prefill piggybacked on decode, no speculation) and
vLLM-Spec(k) (a static chain of k drafts per request, prefill-first), k = 4, 6, 8
(../shared/paper-scale/paper_results.md). Every policy of ours is a system too, with the
engine's default chunked prefill, and so is every AdaServe spec (``adaserve:pace=off``).
"""

from __future__ import annotations

from dataclasses import dataclass

from adaserve.engine.config import PREFILL_MODES
from adaserve.scheduler import SUMMARIES, policy_options


@dataclass(frozen=True, slots=True)
class System:
    """A serving system as this engine runs it."""

    name: str
    policy: str  # a policy spec (adaserve.scheduler.policy_options)
    prefill_mode: str  # one of PREFILL_MODES
    summary: str

    def __post_init__(self) -> None:
        if self.prefill_mode not in PREFILL_MODES:
            raise ValueError(f"system {self.name!r}: unknown prefill mode {self.prefill_mode!r}")
        policy_options(self.policy)  # ValueError naming the choices for a bad spec


_PAPER = (
    System("vllm", "incremental", "first",
           "vLLM 0.8: continuous batching, prefill-first, no speculation"),
    System("sarathi", "incremental", "chunked",
           "Sarathi-Serve: prefill chunks piggybacked on decode, no speculation"),
    *(System(f"vllm-spec-{k}", f"chain-{k}", "first",
             f"vLLM-Spec({k}): a static chain of {k} drafts per request, prefill-first")
      for k in (4, 6, 8)),
)

SYSTEMS: dict[str, System] = {
    **{name: System(name, name, "chunked", summary) for name, summary in SUMMARIES.items()},
    **{s.name: s for s in _PAPER},
}


def resolve_system(name: str) -> System:
    """The policy and prefill mode a system name stands for: one of the paper's baselines
    (``vllm``, ``sarathi``, ``vllm-spec-4/6/8``) or any policy spec (its own policy,
    chunked prefill), options included. ValueError listing the choices for any other name."""
    if name in SYSTEMS:
        return SYSTEMS[name]
    try:
        policy_options(name)
    except ValueError as e:
        raise ValueError(f"unknown system {name!r}: {e}; or one of the paper's "
                         f"{', '.join(s.name for s in _PAPER)}") from None
    return System(name, name, "chunked", SUMMARIES[name.partition(":")[0]])

"""How much to speculate: the draft tree's shape per iteration."""

from __future__ import annotations

import math
from dataclasses import dataclass


def depth_width(n: int, budget: int, max_depth: int, max_width: int) -> tuple[int, int]:
    """Candidate-tree depth and beam width for n requests under budget B (seed 002 Eq. 8, 9).

    d = max(1, min(D_max, ceil(B/n))) bounds any tree that an even share of B can afford;
    w = max(1, min(W_max, floor(B/n))) keeps the n*w tokens of each later draft step under B.
    """
    if n <= 0:
        raise ValueError(f"depth_width needs at least one request, got n={n}")
    if budget < 0 or max_depth < 1 or max_width < 1:
        raise ValueError("budget must be >= 0 and D_max, W_max >= 1")
    return max(1, min(max_depth, math.ceil(budget / n))), max(1, min(max_width, budget // n))


@dataclass(frozen=True, slots=True)
class SpecPlan:
    """What the draft phase should build this iteration, and what it is predicted to cost."""

    depth: int  # draft steps d; 0 = no speculation (roots only)
    width: int  # beam width w: children kept per request at each step after the first
    expansion: tuple[int, ...] | None = None  # fixed children per node per layer (SpecInfer)
    t_spec_s: float = 0.0  # predicted latency of this iteration (draft + verify)
    budget: int = 0  # tokens this iteration may verify; 0: the policy's configured B

    def __post_init__(self) -> None:
        if self.depth < 0 or self.width < 0:
            raise ValueError("depth and width must be >= 0")
        if self.depth > 0 and self.width < 1:
            raise ValueError("a plan that speculates needs width >= 1")
        if self.expansion is not None and len(self.expansion) != self.depth:
            raise ValueError("expansion needs one entry per draft step")
        if self.budget < 0:
            raise ValueError("budget must be >= 0")

    @property
    def speculates(self) -> bool:
        return self.depth > 0

    def layer_sizes(self, n: int) -> list[int]:
        """Nodes per tree layer for n requests, layer 0 being the roots."""
        if self.expansion is None:
            return [n] + [n * self.width] * self.depth
        sizes, per = [n], 1
        for k in self.expansion:
            per *= k
            sizes.append(n * per)
        return sizes

    def draft_step_tokens(self, n: int) -> list[int]:
        """Tokens the draft model decodes at each step: step s decodes layer s-1."""
        return self.layer_sizes(n)[: self.depth]

    def candidate_nodes(self, n: int) -> int:
        return sum(self.layer_sizes(n))

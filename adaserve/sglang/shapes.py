"""Per-iteration draft shapes: the plan's depth d (Eq. 8) and width w (Eq. 9) run by
SGLang's draft loop, inside the compiled D (--speculative-num-steps), W
(--speculative-eagle-topk) and N (--speculative-num-draft-tokens).

SGLang's EAGLE draft of shape (d, w) is d - 1 draft forwards of bs x w tokens, then
``organize_draft_results`` keeps the top N - 1 of its w + (d - 1) w^2 candidates. Only the
draft loop changes shape here; the verify layout [bs, N], the draft extend after verify
and the KV slots the scheduler reserves per decode (``EagleDraftInput.ALLOC_LEN_PER_DECODE``
= max(D x W, N) past each request's length) stay as compiled, so nothing outside the draft
sees a different shape. A (d, w) draft writes d x w of those slots, branch t at offset
t x d: ``prepare_for_draft`` and the multi-step draft attention backend both lay them out
from the worker's ``speculative_num_steps`` / ``topk``, so they must change together. That
is why there is one backend per shape, as SGLang's adaptive speculation keeps one per step
count (``build_adaptive_runtime_state``); SGLang's own adaptive switching is EAGLE/EAGLE3
with topk 1 only, picks steps from an acceptance EMA and also rebuilds N = steps + 1 and
the verify graphs, none of which applies to a standalone tree draft.

Which shapes SGLang can run with a fixed N (checked against its functions in
tests/sglang_tier/test_shapes.py):
- w >= 2: at topk 1 SGLang's draft takes its chain path, which never calls
  ``organize_draft_results`` (no AdaServe selection) and verifies a chain layout;
- w + (d - 1) w^2 >= N - 1: ``organize_draft_results`` takes a top-(N - 1);
- d + 1 <= N: the verify compacts an accepted path of up to d + 1 positions into the
  request's N-position block (with d + 1 > N SGLang's verify fails; it does not refuse
  such a shape at start-up).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class DraftShape:
    depth: int  # draft steps d: SGLang runs d - 1 draft forwards
    width: int  # beam width w: SGLang's topk


@dataclass(frozen=True, slots=True)
class ShapeLimits:
    """The compiled draft shape (D, W) and verify width N, and the shapes within them."""

    max_depth: int
    max_width: int
    num_draft_tokens: int

    def __post_init__(self) -> None:
        compiled = DraftShape(self.max_depth, self.max_width)
        if self.max_width < 2:
            raise ValueError(f"--speculative-eagle-topk {self.max_width}: per-iteration "
                             "shapes need a tree draft (topk >= 2)")
        if self.max_depth < 1:
            raise ValueError(f"--speculative-num-steps {self.max_depth}: need >= 1")
        if not self.feasible(compiled):
            raise ValueError(
                f"--speculative-num-draft-tokens {self.num_draft_tokens} does not fit "
                f"{self.max_depth} steps of top-{self.max_width}: it needs "
                f"{self.max_depth + 1} <= N <= {self.candidates(compiled) + 1}")

    @staticmethod
    def candidates(shape: DraftShape) -> int:
        """Draft tokens a (d, w) draft offers per request: w + (d - 1) w^2."""
        return shape.width + (shape.depth - 1) * shape.width ** 2

    def feasible(self, shape: DraftShape) -> bool:
        return (2 <= shape.width <= self.max_width and 1 <= shape.depth <= self.max_depth
                and self.candidates(shape) >= self.num_draft_tokens - 1
                and shape.depth + 1 <= self.num_draft_tokens)

    def fit(self, depth: int, width: int) -> DraftShape:
        """The smallest runnable shape covering the plan's (d, w): width clamped to
        [2, W] and depth to [1, D], then the depth (then the width) raised until the draft
        offers N - 1 candidates. Deeper positions than the plan's d are still cut from
        verification by ``select.organize``; this only sets how much is drafted."""
        shape = DraftShape(min(max(depth, 1), self.max_depth),
                           min(max(width, 2), self.max_width))
        while not self.feasible(shape):
            if shape.depth < self.max_depth:
                shape = DraftShape(shape.depth + 1, shape.width)
            else:
                shape = DraftShape(shape.depth, shape.width + 1)
        return shape


class DraftShapes:
    """Runs one SGLang draft at a chosen shape on an ``EagleDraftWorker``.

    ``applied(shape, batch)`` sets the worker's ``speculative_num_steps`` and ``topk``
    and the matching draft attention backend for the duration of one ``draft(batch)``,
    and gives the draft the top w of the W first-step candidates the last draft extend
    ranked (``batch.spec_info``, from ``fast_topk``: best first). Everything is restored afterwards,
    so the draft extend after verify ranks W again and batches merge at width W.
    """

    def __init__(self, worker, make_backend: Callable[[DraftShape], object] | None = None):
        self.worker = worker
        self.limits = ShapeLimits(worker.speculative_num_steps, worker.topk,
                                  worker.speculative_num_draft_tokens)
        self.compiled = DraftShape(worker.speculative_num_steps, worker.topk)
        self._make_backend = make_backend or self._sglang_backend
        self._backends: dict[DraftShape, object] = {}

    def _sglang_backend(self, shape: DraftShape):
        """The draft decode backend as ``EagleDraftWorker.init_attention_backend`` builds
        the compiled one; None at one step (SGLang's draft then runs no forward)."""
        from sglang.srt.layers.attention.qsa.config import parse_qsa_profile
        from sglang.srt.speculative.draft_utils import DraftBackendFactory

        w = self.worker
        return DraftBackendFactory(
            w.draft_runner, shape.width, shape.depth,
            seed_dsa_topk_from_draft_extend=w.seed_dsa_topk_from_draft_extend,
            qsa_profile=parse_qsa_profile(w.draft_runner.model_config.hf_config),
        ).create_decode_backend()

    def backend(self, shape: DraftShape):
        if shape == self.compiled:
            return self.worker.draft_attn_backend
        if shape not in self._backends:
            self._backends[shape] = self._make_backend(shape)
        return self._backends[shape]

    @contextlib.contextmanager
    def applied(self, shape: DraftShape, batch) -> Iterator[None]:
        if shape == self.compiled:
            yield
            return
        if not self.limits.feasible(shape):
            raise ValueError(f"{shape} cannot run in SGLang's layout of {self.limits}")
        w, runner, draft_input = self.worker, self.worker.draft_runner, batch.spec_info
        backend = self.backend(shape)
        saved = (w.speculative_num_steps, w.topk, w.draft_attn_backend,
                 runner.draft_attn_backend, draft_input.topk_p, draft_input.topk_index)
        w.speculative_num_steps, w.topk = shape.depth, shape.width
        w.draft_attn_backend = runner.draft_attn_backend = backend
        draft_input.topk_p = draft_input.topk_p[:, :shape.width]  # [bs, w]
        draft_input.topk_index = draft_input.topk_index[:, :shape.width]  # [bs, w]
        try:
            yield
        finally:
            (w.speculative_num_steps, w.topk, w.draft_attn_backend,
             runner.draft_attn_backend, draft_input.topk_p, draft_input.topk_index) = saved

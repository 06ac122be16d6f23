"""Predicted latency of one speculative iteration: draft steps plus one verification."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from adaserve.scheduler.refit import OnlineFit, features


class ForwardLatency(Protocol):
    """Seconds of one forward of ``batch_tokens`` tokens over ``context_tokens`` cached ones
    (sums over the batch's ``requests`` requests): a profiled `LatencyModel` or a measured
    table (adaserve.sim.hardware.TableCost), which price the sums alone, or a
    `context_cost.ContextTable`, which prices the batch's shape (None: one request)."""

    def predict(self, context_tokens: int, batch_tokens: int,
                requests: int | None = None) -> float: ...


@dataclass(frozen=True, slots=True)
class IterationLatency:
    """Seed 000 Eq. 2: T_batch = T_draft + T_target, each from a profiled latency model.

    ``draft=None`` means drafting is free (or not measured): only verification is charged.
    ``draft_fixed_s`` is a draft phase priced as one constant whatever its shape, as the
    AdaServe authors' scheduler prices it (its --ssm-spec-latency-ms; scheduler/authors.py).
    """

    target: ForwardLatency
    draft: ForwardLatency | None = None
    draft_fixed_s: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.draft_fixed_s) and self.draft_fixed_s >= 0):
            raise ValueError(f"draft_fixed_s must be finite and >= 0, got {self.draft_fixed_s!r}")

    def predict(self, context_tokens: int, draft_step_tokens: Sequence[int],
                verify_tokens: int, requests: int | None = None) -> float:
        """``requests``: the batch's request count, for a model that prices its shape."""
        t = float(self.target.predict(context_tokens, verify_tokens, requests))
        if self.draft is not None:
            # the steps of a plan draft alike (n x w tokens each): each size priced once
            price: dict[int, float] = {}
            for k in draft_step_tokens:
                if k not in price:
                    price[k] = float(self.draft.predict(context_tokens, k, requests))
            t += sum(price[k] for k in draft_step_tokens)
        if draft_step_tokens:
            t += self.draft_fixed_s
        return t


class CalibratedLatency:
    """The iteration-latency predictor the engine hands its policy, kept true to the
    machine it runs on (DESIGN.md step 5: update t_spec after each iteration).

    The profile's model predicts how latency varies with the iteration's shape; measured
    iterations correct its scale by an exponentially weighted ratio, sum of measured
    seconds over sum of predicted seconds (a ratio of sums, so one odd iteration cannot
    swing it the way a mean of ratios would). A profile taken on a quieter machine, a
    co-tenant, or the prefill chunks riding along all show up in that ratio. Without a
    profile the prediction is the weighted mean measured iteration, 0 before the first.
    """

    def __init__(self, base: IterationLatency | None = None, halflife: float = 32.0,
                 adapt: bool = True, refit: bool = False, decode_only: bool = False) -> None:
        """``adapt=False``: the base's predictions as they are, never rescaled (a predictor
        of fixed constants, as the AdaServe authors' scheduler uses). ``refit=True`` (the
        served engine's): the iteration's shape is refitted too, not only its scale
        (refit.OnlineFit: measured iterations, prefill chunks apart, with the base as
        prior); it needs a base. ``decode_only``: the scale is learnt from iterations that
        prefilled nothing (the base prices decode and verify forwards only, and a ratio
        fed the prefill chunks riding along over-predicts every decode step: refit.py);
        the engine's choice with a context table, whose shape a linear refit would lose."""
        if not (math.isfinite(halflife) and halflife > 0):
            raise ValueError(f"halflife must be a positive number of iterations, got {halflife!r}")
        if not adapt and base is None:
            raise ValueError("a non-adapting predictor needs a base model")
        if refit and (base is None or not adapt):
            raise ValueError("a refitted predictor needs a base model and adapt on")
        self.base, self.adapt, self.decode_only = base, adapt, decode_only
        self._decay = 0.5 ** (1.0 / halflife)
        self._measured = 0.0
        self._predicted = 0.0
        self.fit = None if not refit else OnlineFit(
            base.predict, _prefill_price(base))

    def _unit(self, context_tokens: int, draft_step_tokens: Sequence[int],
              verify_tokens: int, requests: int | None = None) -> float:
        if self.base is None:
            return 1.0
        return self.base.predict(context_tokens, draft_step_tokens, verify_tokens, requests)

    @property
    def ratio(self) -> float:
        """Measured over profiled (or, without a profile, the mean iteration seconds)."""
        if self._predicted > 0:
            return self._measured / self._predicted
        return 1.0 if self.base is not None else 0.0

    def predict(self, context_tokens: int, draft_step_tokens: Sequence[int],
                verify_tokens: int, requests: int | None = None) -> float:
        """``requests``: the batch's request count (read by a base that prices its shape)."""
        if self.fit is not None:
            # a fit that extrapolates below half the profile's price is not believed
            return max(self.fit.predict(features(context_tokens, draft_step_tokens,
                                                 verify_tokens)),
                       0.5 * self._unit(context_tokens, draft_step_tokens, verify_tokens,
                                        requests))
        return self._unit(context_tokens, draft_step_tokens, verify_tokens, requests) * self.ratio

    def observe(self, context_tokens: int, draft_step_tokens: Sequence[int],
                verify_tokens: int, seconds: float, prefill_tokens: int = 0,
                requests: int | None = None) -> None:
        """Fold in one measured iteration of the given shape; ``prefill_tokens``: the
        prompt tokens prefilled in the same iteration (the refit prices them apart; the
        scale factor takes them as they come, or skips them with ``decode_only``)."""
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"seconds must be finite and >= 0, got {seconds!r}")
        if not self.adapt or (self.decode_only and prefill_tokens):
            return
        if self.fit is not None:
            self.fit.observe(features(context_tokens, draft_step_tokens, verify_tokens,
                                      prefill_tokens), seconds)
        self._measured = self._decay * self._measured + seconds
        self._predicted = self._decay * self._predicted + self._unit(
            context_tokens, draft_step_tokens, verify_tokens, requests)


def _prefill_price(base: IterationLatency) -> float:
    """Seconds per prompt token of a prefill chunk by the base's models: the target's and
    the draft's per-token slope (a chunk runs through both), from 1 to 257 tokens."""
    slope = (float(base.target.predict(0, 257)) - float(base.target.predict(0, 1))) / 256
    if base.draft is not None:
        slope += (float(base.draft.predict(0, 257)) - float(base.draft.predict(0, 1))) / 256
    return max(slope, 0.0)

"""The iteration-latency model refitted online from measured iterations (``CalibratedLatency``
with ``refit=True``, the served engine's default).

One scale factor corrects the profile's level but not its shape, and on a served CPU the
shape was what misled planning: with 5 or more requests running, a drafted iteration
verifying 13 tokens took 2.1x a roots-only one of 7 (85.9 against 40.3 ms, results/
rate-default's iteration logs), where the profile's linear models said 1.45x, so the goodput
budget drafted where drafting lost tokens per second. The measured seconds also carry the
prefill chunks that ride along, which the profile's decode shapes never see, so a single
ratio learnt from them over-predicted every decode step by 15-35%.

So the iteration's seconds are fitted as linear in what the engine varies per iteration:

    seconds = c0 + c1 * context + c2 * verify + c3 * draft steps
              + c4 * draft steps x context + c5 * draft tokens + c6 * prefill tokens

(the profile's two models, target and draft per step, are exactly of this form)

by exponentially forgotten least squares (a half-life in iterations), with a ridge pull
toward the profile's coefficients (its predictions on a grid of shapes, fitted in these
features), so a direction the served traffic never exercised (a draft at a load that never
drafts) keeps the profile's price rather than an extrapolation. The
prediction for planning has no prefill term: by the time a plan is made this iteration's
prefill has run.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

# Feature scales, so the ridge weights compare coefficients in seconds per typical amount:
# 1, 1000 context tokens, 10 verified tokens, one draft step, a draft step over 1000
# context tokens, 10 draft tokens, 100 prefill tokens
_SCALE = np.array([1.0, 1e3, 10.0, 1.0, 1e3, 10.0, 100.0])
# The profile's pseudo-observations: request counts x chain depths x contexts per request
_GRID_N = (1, 2, 4, 8)
_GRID_DEPTH = (0, 1, 2, 4)
_GRID_CONTEXT = (64, 512)


def features(context_tokens: int, draft_step_tokens: Sequence[int], verify_tokens: int,
             prefill_tokens: int = 0) -> np.ndarray:
    """[7] the scaled features of one iteration's shape."""
    steps = len(draft_step_tokens)
    raw = np.array([1.0, context_tokens, verify_tokens, steps, steps * context_tokens,
                    sum(draft_step_tokens), prefill_tokens], dtype=np.float64)
    return raw / _SCALE


class OnlineFit:
    """Forgetting least squares over ``features`` with a ridge pull toward a prior fit."""

    def __init__(self, prior: Callable[[int, Sequence[int], int], float],
                 prefill_prior_s_per_token: float, halflife: float = 256.0,
                 prior_weight: float = 2.0) -> None:
        """``prior``: the profile's prediction for (context, draft step tokens, verify);
        ``prefill_prior_s_per_token``: its price of a prefill token; ``prior_weight``: the
        ridge pull toward the profile's coefficients, in measured iterations of unit
        (scaled) features: a few dozen iterations outweigh it where they vary, and where
        they never vary (a draft that never ran) the profile's coefficient stands as it is.
        """
        if not (math.isfinite(halflife) and halflife > 0):
            raise ValueError(f"halflife must be a positive number of iterations, got {halflife!r}")
        self._decay = 0.5 ** (1.0 / halflife)
        # the profile as coefficients: its predictions on a grid of shapes, fitted exactly
        rows, ys = [], []
        for n, d, ctx in itertools.product(_GRID_N, _GRID_DEPTH, _GRID_CONTEXT):
            steps = [n] * d
            rows.append(features(n * ctx, steps, n * (d + 1))[:6])
            ys.append(prior(n * ctx, steps, n * (d + 1)))
        prior_coef = np.linalg.lstsq(np.array(rows), np.array(ys), rcond=None)[0]  # [6]
        self.prior_coef = np.r_[prior_coef, prefill_prior_s_per_token * _SCALE[6]]  # [7]
        self._ridge = prior_weight * np.eye(7)
        self._xtx = np.zeros((7, 7))
        self._xty = np.zeros(7)
        self._coef: np.ndarray | None = None
        self.observed = 0

    def observe(self, x: np.ndarray, seconds: float) -> None:
        self._xtx = self._decay * self._xtx + np.outer(x, x)
        self._xty = self._decay * self._xty + x * seconds
        self._coef = None
        self.observed += 1

    @property
    def coef(self) -> np.ndarray:
        """[7] the fitted coefficients, seconds per scaled feature."""
        if self._coef is None:
            self._coef = np.linalg.solve(self._ridge + self._xtx,
                                         self._ridge @ self.prior_coef + self._xty)
        return self._coef

    def predict(self, x: np.ndarray) -> float:
        return float(x @ self.coef)

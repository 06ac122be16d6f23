"""Profiled forward latency: TurboSpec's linear model and the hardware token budget (knee)."""

from __future__ import annotations

import itertools
import math
import numbers
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

_COEFFICIENTS = ("alpha", "gamma", "delta")
_SCALARS = (int, float, np.integer, np.floating)


@dataclass(frozen=True, slots=True)
class LatencySample:
    """One profiled target forward: KV tokens read, tokens batched, wall seconds."""

    context_tokens: int
    batch_tokens: int
    seconds: float


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """TurboSpec forward latency (seed 000 §4.1.3, Eq. 3): T = alpha*N_ctx + gamma*N_tok + delta.

    alpha: seconds per context token in the batch (KV cache read), gamma: seconds per
    batched token (compute), delta: constant (weight loading, launch and host overheads).
    """

    alpha: float
    gamma: float
    delta: float

    def __post_init__(self) -> None:
        for name in _COEFFICIENTS:
            value = getattr(self, name)
            if not (isinstance(value, numbers.Real) and math.isfinite(value) and value >= 0):
                raise ValueError(
                    f"LatencyModel.{name} must be a finite number >= 0 (seconds), got {value!r}"
                )

    @classmethod
    def fit(cls, context_tokens: Any, batch_tokens: Any, seconds: Any) -> LatencyModel:
        """Least-squares fit with non-negative coefficients (exact NNLS over the 3 terms)."""
        ctx, tok, sec = _profile_arrays(context_tokens, batch_tokens, seconds)
        design = np.stack([ctx, tok, np.ones_like(ctx)], axis=1)  # (S, 3)
        _check_design(ctx, tok, design)
        # Scale columns to unit max so lstsq sees a well-conditioned problem; ctx is
        # often 1e5 while the constant column is 1.
        scale = np.abs(design).max(axis=0)
        scaled = design / scale
        best_coef, best_sse = np.zeros(3), float(np.sum(sec**2))
        # The NNLS optimum is the unconstrained LS solution on its own support, so trying
        # every support (2^3) and keeping the best non-negative one is exact.
        for support in itertools.product((False, True), repeat=3):
            cols = np.flatnonzero(support)
            if cols.size == 0:
                continue
            sub, *_ = np.linalg.lstsq(scaled[:, cols], sec, rcond=None)
            if np.any(sub < 0):
                continue
            coef = np.zeros(3)
            coef[cols] = sub
            sse = float(np.sum((scaled @ coef - sec) ** 2))
            if sse < best_sse:
                best_coef, best_sse = coef, sse
        alpha, gamma, delta = (best_coef / scale).tolist()
        return cls(alpha=alpha, gamma=gamma, delta=delta)

    @classmethod
    def fit_samples(cls, samples: Sequence[LatencySample]) -> LatencyModel:
        """Fit from a sequence of LatencySample."""
        return cls.fit(
            [s.context_tokens for s in samples],
            [s.batch_tokens for s in samples],
            [s.seconds for s in samples],
        )

    def predict(self, context_tokens: Any, batch_tokens: Any, requests: Any = None) -> Any:
        """Predicted seconds; float for scalar inputs, ndarray for array inputs.
        ``requests`` is not read: the linear model prices the two sums alone (a
        context_cost.ContextTable reads it)."""
        if isinstance(context_tokens, _SCALARS) and isinstance(batch_tokens, _SCALARS):
            # planning prices ~100 scalar shapes an iteration: Python floats do the same
            # IEEE operations in the same order as the array form, ~10x faster
            return (float(self.alpha) * float(context_tokens)
                    + float(self.gamma) * float(batch_tokens) + float(self.delta))
        t = (
            self.alpha * np.asarray(context_tokens, dtype=np.float64)
            + self.gamma * np.asarray(batch_tokens, dtype=np.float64)
            + self.delta
        )
        return float(t) if t.ndim == 0 else t

    def r2(self, context_tokens: Any, batch_tokens: Any, seconds: Any) -> float:
        """Coefficient of determination on the given samples (nan if seconds are all equal)."""
        ctx, tok, sec = _profile_arrays(context_tokens, batch_tokens, seconds, min_samples=1)
        sse = float(np.sum((self.predict(ctx, tok) - sec) ** 2))
        sst = float(np.sum((sec - sec.mean()) ** 2))
        return 1.0 - sse / sst if sst > 0 else float("nan")

    def to_dict(self) -> dict[str, float]:
        """JSON-ready profile entry."""
        return {name: float(getattr(self, name)) for name in _COEFFICIENTS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LatencyModel:
        """Inverse of to_dict."""
        missing = [name for name in _COEFFICIENTS if name not in data]
        if missing:
            raise ValueError(
                f"latency profile is missing {missing}; expected keys {list(_COEFFICIENTS)}"
            )
        return cls(**{name: float(data[name]) for name in _COEFFICIENTS})


def _profile_arrays(
    context_tokens: Any, batch_tokens: Any, seconds: Any, min_samples: int = 3
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    raw = (context_tokens, batch_tokens, seconds)
    arrays = [np.asarray(a, dtype=np.float64).ravel() for a in raw]
    names = ("context_tokens", "batch_tokens", "seconds")
    if len({a.size for a in arrays}) != 1:
        sizes = dict(zip(names, (a.size for a in arrays)))
        raise ValueError(f"latency samples must have equal lengths, got {sizes}")
    if arrays[0].size < min_samples:
        raise ValueError(
            f"need at least {min_samples} latency samples to fit 3 coefficients, "
            f"got {arrays[0].size}; profile more (context, batch) points"
        )
    for name, a in zip(names, arrays):
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name} contains NaN or inf; drop failed profiling runs")
        if np.any(a < 0):
            raise ValueError(f"{name} contains negative values; counts and times must be >= 0")
    return arrays[0], arrays[1], arrays[2]


def _check_design(ctx: np.ndarray, tok: np.ndarray, design: np.ndarray) -> None:
    if np.ptp(ctx) == 0:
        raise ValueError(
            "all samples have the same context length; profile at least two context lengths"
        )
    if np.ptp(tok) == 0:
        raise ValueError(
            "all samples have the same batch token count; profile at least two batch sizes"
        )
    if np.linalg.matrix_rank(design / np.abs(design).max(axis=0)) < 3:
        raise ValueError(
            "context and batch token counts vary together (collinear), so their costs cannot "
            "be separated; profile several batch sizes at each context length"
        )


@dataclass(frozen=True, slots=True)
class Knee:
    """Hardware token budget B read off a latency-vs-tokens profile; slopes in s/token."""

    tokens: int
    latency_s: float
    slope_before: float
    slope_after: float
    found: bool


def find_knee(tokens: Any, latency_s: Any, *, min_bend: float = 2.0) -> Knee:
    """Budget B (seed 002 §3): tokens a target forward takes before it stops being memory-bound.

    Rule: fit a continuous two-segment (hinge) model T = c + s1*N + s2*max(0, N - K) by
    least squares for every candidate breakpoint K among the profiled token counts
    (excluding the two smallest and the largest, so each segment has points) and pick
    the K with minimal squared error (ties: smallest K). Residuals are relative,
    (fit - T) / T, because timing noise scales with latency. That K is a knee only if
    the slope after (s1 + s2) is at least `min_bend` times the slope before (s1), or
    s1 <= 0 and s2 > 0. Otherwise the curve is a straight line (compute-bound from the
    start, no memory-bound plateau) and the smallest profiled token count is returned
    with found=False. Duplicate token counts are averaged; latency_s is the fitted
    latency at the returned token count, slopes are those of the best hinge fit (s/token).
    """
    if not (math.isfinite(min_bend) and min_bend >= 1.0):
        raise ValueError(f"min_bend must be a finite number >= 1, got {min_bend!r}")
    x, y = _knee_points(tokens, latency_s)
    # Normalise both axes so pinv works on O(1) numbers; slopes are rescaled at the end.
    x_scale, y_scale = x[-1], (y.max() if y.max() > 0 else 1.0)
    xs, ys = x / x_scale, y / y_scale
    breaks = xs[2:-1]  # (C,)
    ones = np.ones((breaks.size, xs.size))
    design = np.stack(
        [ones, ones * xs, np.maximum(0.0, xs[None, :] - breaks[:, None])], axis=-1
    )  # (C, P, 3)
    # Timing noise scales with latency, so residuals are taken relative to the measured
    # latency; plain squared error would let the slowest forwards' noise pick the knee.
    # The floor keeps a 0 s sample from dividing by zero.
    w = 1.0 / np.maximum(ys, ys[ys > 0].min(initial=1.0))  # (P,)
    coef = np.linalg.pinv(design * w[:, None]) @ (ys * w)  # (C, 3)
    resid = ((design @ coef[:, :, None])[..., 0] - ys) * w  # (C, P)
    sse = np.sum(resid**2, axis=1)  # (C,)
    best = int(np.argmin(sse))
    c, s1, s2 = coef[best]
    slope_before = float(s1 * y_scale / x_scale)
    slope_after = float((s1 + s2) * y_scale / x_scale)
    bent = (s1 <= 0 and s2 > 0) or (s1 > 0 and s1 + s2 >= min_bend * s1)
    at = best + 2 if bent else 0  # index into the profiled points
    fitted = float((c + s1 * xs[at] + s2 * max(0.0, xs[at] - breaks[best])) * y_scale)
    return Knee(
        tokens=int(round(x[at])),
        latency_s=fitted,
        slope_before=slope_before,
        slope_after=slope_after,
        found=bool(bent),
    )


def _knee_points(tokens: Any, latency_s: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validated, sorted, duplicate-averaged (tokens, latency) points."""
    x = np.asarray(tokens, dtype=np.float64).ravel()
    y = np.asarray(latency_s, dtype=np.float64).ravel()
    if x.size != y.size:
        raise ValueError(f"tokens and latency_s must have equal lengths, got {x.size} and {y.size}")
    if not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError("tokens must be finite and > 0 (token counts of profiled forwards)")
    if not np.all(np.isfinite(y)) or np.any(y < 0):
        raise ValueError("latency_s must be finite and >= 0; drop failed profiling runs")
    ux, inverse = np.unique(x, return_inverse=True)  # sorted
    if ux.size < 4:
        raise ValueError(
            f"need at least 4 distinct token counts to find a knee, got {ux.size}; "
            "profile e.g. 1, 2, 4, ... up to well past the expected budget"
        )
    uy = np.bincount(inverse, weights=y) / np.bincount(inverse)
    return ux, uy


BUDGET_MAX_RATIO = 1.15  # a verify may cost at most 15% more than a plain one-token step


@dataclass(frozen=True, slots=True)
class Budget:
    """Budget B by the ratio rule, with the measurement it was read from."""

    tokens: int
    ratio: float  # latency at `tokens` / latency at the smallest count (after the cummax)
    max_ratio: float


def budget_by_ratio(tokens: Any, latency_s: Any, *, max_ratio: float = BUDGET_MAX_RATIO) -> Budget:
    """Budget B: the largest profiled token count whose forward costs <= max_ratio x the
    forward at the smallest count (one token).

    Why not the hinge knee: on a CPU whose forward grows nearly linearly from one token,
    a hinge fit either finds no bend or finds one far past where verifying stops being
    nearly free, and a B whose verify costs more than the draft's accepted tokens repay
    loses to no speculation. The ratio rule asks the question speculation depends on: how
    many tokens ride almost free. A forward cannot get
    cheaper with more tokens, so the curve is made non-decreasing first (a running max):
    one lucky fast sample at a large count cannot stretch B past a slow one below it.
    """
    if not (math.isfinite(max_ratio) and max_ratio >= 1.0):
        raise ValueError(f"max_ratio must be a finite number >= 1, got {max_ratio!r}")
    x, y = _knee_points(tokens, latency_s)
    if y[0] <= 0:
        raise ValueError("the smallest token count's latency must be > 0 to take ratios")
    ratio = np.maximum.accumulate(y) / y[0]  # (P,)
    at = int(np.flatnonzero(ratio <= max_ratio)[-1])  # index 0 always qualifies
    return Budget(tokens=int(round(x[at])), ratio=float(ratio[at]), max_ratio=float(max_ratio))

"""Online acceptance-rate tracking (TurboSpec) and calibration of draft path probabilities."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Hashable, Sequence

import numpy as np


def expected_chain_tokens(alpha: Any, k: int) -> Any:
    """Tokens emitted by a k-token chain draft, bonus token included (seed 000 Eq. 4).

    l(alpha, k) = (1 - alpha^(k+1)) / (1 - alpha) = sum_{j=0..k} alpha^j, which is k + 1
    at alpha = 1; the power sum is used so no alpha needs a special case or a division.
    """
    if not _is_count(k) or k < 0:
        raise ValueError(f"k (proposed chain length) must be an int >= 0, got {k!r}")
    tokens = np.sum(expected_chain_terms(alpha, k), axis=-1)  # (...,)
    return float(tokens) if tokens.ndim == 0 else tokens


def expected_chain_terms(alpha: Any, k: int) -> np.ndarray:
    """[..., k + 1] alpha^j, j = 0..k, for alpha (...) in [0, 1]: summed over its first
    d + 1 entries, the tokens of a d-deep chain (``expected_chain_tokens`` is that sum), for
    every d <= k from one power table."""
    a = np.asarray(alpha, dtype=np.float64)
    if not np.all((a >= 0) & (a <= 1)):
        raise ValueError("alpha (per-token acceptance rate) must lie in [0, 1]")
    return a[..., None] ** np.arange(k + 1)


class _DecayedRatio:
    """Exponentially decayed sums of a numerator and a denominator, global and per request,
    and their ratio with a prior: the global one shrunk toward ``prior`` by
    ``prior_weight`` pseudo-units of denominator, a request's own shrunk toward the global
    one the same way. One ``_add`` call is one engine iteration: the global sums decay once.
    ``AcceptanceTracker`` and ``RequestCalibration`` are this mechanism over different
    observations."""

    def __init__(self, decay: float, prior: float, prior_weight: float, unit: str) -> None:
        if not (math.isfinite(decay) and 0 < decay <= 1):
            raise ValueError(f"decay must be in (0, 1] (1 = never forget), got {decay!r}")
        if not (math.isfinite(prior_weight) and prior_weight >= 0):
            raise ValueError(
                f"prior_weight must be finite and >= 0 ({unit}), got {prior_weight!r}"
            )
        self.decay = decay
        self.prior_weight = prior_weight
        self._prior = prior
        self._num = 0.0
        self._den = 0.0
        self._per_request: dict[Hashable, tuple[float, float]] = {}

    def _add(self, request_ids: Sequence[Hashable], num: np.ndarray, den: np.ndarray) -> None:
        self._num = self.decay * self._num + float(num.sum())
        self._den = self.decay * self._den + float(den.sum())
        for rid, x, y in zip(request_ids, num.tolist(), den.tolist()):
            old_x, old_y = self._per_request.get(rid, (0.0, 0.0))
            self._per_request[rid] = (self.decay * old_x + x, self.decay * old_y + y)

    def _estimate(self, request_id: Hashable | None) -> float:
        w = self.prior_weight
        denom = self._den + w
        glob = (self._num + self._prior * w) / denom if denom > 0 else self._prior
        if request_id is None or request_id not in self._per_request:
            return float(glob)
        x, y = self._per_request[request_id]
        return float((x + glob * w) / (y + w)) if y + w > 0 else float(glob)

    def forget(self, request_id: Hashable) -> None:
        """Drop a finished or aborted request's history (no-op if unknown)."""
        self._per_request.pop(request_id, None)


class AcceptanceTracker(_DecayedRatio):
    """Exponentially decayed per-token acceptance rate, global and per request (seed 000 §4.1.3).

    A chain draft of length k with a accepted tokens is a geometric observation: a
    successes, plus one failure when a < k (the first rejected token).
    """

    def __init__(
        self, decay: float = 0.9, prior_alpha: float = 0.6, prior_weight: float = 2.0
    ) -> None:
        if not (math.isfinite(prior_alpha) and 0 <= prior_alpha <= 1):
            raise ValueError(f"prior_alpha must be in [0, 1], got {prior_alpha!r}")
        super().__init__(decay, prior_alpha, prior_weight, "pseudo-trials")
        self.prior_alpha = prior_alpha

    def observe(self, request_ids: Sequence[Hashable], proposed: Any, accepted: Any) -> None:
        """Record one iteration: request i drafted proposed[i] chain tokens, accepted[i] passed."""
        prop = np.asarray(proposed).ravel()
        acc = np.asarray(accepted).ravel()
        if not (len(request_ids) == prop.size == acc.size):
            raise ValueError(
                f"request_ids, proposed and accepted must have equal lengths, "
                f"got {len(request_ids)}, {prop.size}, {acc.size}"
            )
        integer = np.issubdtype(prop.dtype, np.integer) and np.issubdtype(acc.dtype, np.integer)
        if prop.size and not integer:
            raise ValueError("proposed and accepted must be integer token counts")
        if np.any(acc < 0) or np.any(acc > prop):
            raise ValueError("need 0 <= accepted <= proposed for every request")
        successes = acc.astype(np.float64)
        self._add(request_ids, successes, successes + (acc < prop))  # trials

    def alpha(self, request_id: Hashable | None = None) -> float:
        """Global estimate, or the request's own counts shrunk toward the global estimate."""
        return self._estimate(request_id)

    def alphas(self, request_ids: Sequence[Hashable]) -> np.ndarray:
        """Per-request estimates, shape (len(request_ids),)."""
        return np.array([self.alpha(rid) for rid in request_ids], dtype=np.float64)


class RequestCalibration(_DecayedRatio):
    """Exponentially decayed ratio of accepted to predicted draft tokens, per request.

    ``Calibration`` below is the engine's report: cumulative and global, for a reliability
    diagram. A scheduler needs what it does not keep: a current estimate per request, since
    how far a draft over-promises varies with the text it drafts. Per iteration a request's
    selected non-root nodes predict sum f(v) accepted tokens and the target accepts some
    number beyond the root; the ratio rho = decayed accepted / decayed predicted. As in
    ``AcceptanceTracker`` (the same decayed sums), a request's own sums are shrunk toward
    the global ratio by ``prior_weight`` predicted tokens, and the global one toward 1 (f
    taken at its word) the same way, so a new request starts at the batch's ratio and a
    request that drafted little stays near it.
    """

    def __init__(self, decay: float = 0.9, prior_weight: float = 2.0) -> None:
        super().__init__(decay, 1.0, prior_weight, "predicted tokens")

    def observe(self, request_ids: Sequence[Hashable], predicted: Any, accepted: Any) -> None:
        """Record one iteration: request i's selected non-root nodes summed to predicted[i]
        in f(v) and accepted[i] of them were accepted."""
        pred = np.asarray(predicted, dtype=np.float64).ravel()
        acc = np.asarray(accepted, dtype=np.float64).ravel()
        if not (len(request_ids) == pred.size == acc.size):
            raise ValueError(
                f"request_ids, predicted and accepted must have equal lengths, "
                f"got {len(request_ids)}, {pred.size}, {acc.size}"
            )
        if not (np.all(np.isfinite(pred)) and np.all(pred >= 0) and np.all(acc >= 0)):
            raise ValueError("predicted and accepted must be finite token counts >= 0")
        self._add(request_ids, acc, pred)

    def ratio(self, request_id: Hashable | None = None) -> float:
        """rho: the global ratio, or the request's own shrunk toward it (1 with no data)."""
        return self._estimate(request_id)

    def ratios(self, request_ids: Sequence[Hashable]) -> np.ndarray:
        """Per-request rho, shape (len(request_ids),)."""
        return np.array([self.ratio(rid) for rid in request_ids], dtype=np.float64)


@dataclass(frozen=True, slots=True)
class CalibrationBin:
    """One reliability-diagram bin: predicted vs observed means of `count` items in [lo, hi)."""

    lo: float
    hi: float
    count: int
    mean_predicted: float
    mean_observed: float


class Calibration:
    """Reliability of draft path probabilities f(v) against what the target accepted.

    Node level: P(node on accepted path) vs f(v). Tree level: expected accepted tokens per
    request, 1 + sum f(v) (the root/bonus token always counts), vs 1 + accepted nodes.
    """

    def __init__(
        self, node_bins: int = 10, tree_bin_width: float = 0.5, max_tree_tokens: float = 16.0
    ) -> None:
        if not _is_count(node_bins) or node_bins < 1:
            raise ValueError(f"node_bins must be an int >= 1, got {node_bins!r}")
        if not (math.isfinite(tree_bin_width) and tree_bin_width > 0):
            raise ValueError(
                f"tree_bin_width must be finite and > 0 (tokens), got {tree_bin_width!r}"
            )
        if not (math.isfinite(max_tree_tokens) and max_tree_tokens > 1):
            raise ValueError(
                f"max_tree_tokens must be finite and > 1 (tokens), got {max_tree_tokens!r}"
            )
        self.node_bins = int(node_bins)
        self.tree_bin_width = float(tree_bin_width)
        self.max_tree_tokens = float(max_tree_tokens)
        # Lower edges 1, 1+w, ... below max_tree_tokens, then one open-ended bin [max, inf).
        lo = 1.0 + self.tree_bin_width * np.arange(
            math.ceil((self.max_tree_tokens - 1.0) / self.tree_bin_width)
        )
        # Filtering guards against a rounding-made edge at or past max (edges must be sorted).
        self._tree_lo = np.append(lo[lo < self.max_tree_tokens], self.max_tree_tokens)  # (bins,)
        self._node = np.zeros((3, self.node_bins))  # rows: count, sum predicted, sum observed
        self._tree = np.zeros((3, self._tree_lo.size))

    def observe(self, path_prob: Any, accepted: Any, request_index: Any, n_requests: int) -> None:
        """Record one batch: M selected non-root nodes, their f(v), accepted flag and request."""
        f = np.asarray(path_prob, dtype=np.float64).ravel()  # (M,)
        acc = np.asarray(accepted).ravel()  # (M,)
        req = np.asarray(request_index).ravel()  # (M,)
        if not (f.size == acc.size == req.size):
            raise ValueError(
                "path_prob, accepted and request_index must have equal lengths, "
                f"got {f.size}, {acc.size}, {req.size}"
            )
        if not _is_count(n_requests) or n_requests < 0:
            raise ValueError(f"n_requests must be an int >= 0, got {n_requests!r}")
        if not np.all((f >= 0) & (f <= 1)):
            raise ValueError("path_prob must be probabilities in [0, 1] (no NaN)")
        if acc.size and acc.dtype != np.bool_:
            raise ValueError("accepted must be a boolean array (True = on the accepted path)")
        in_range = req.size == 0 or (
            np.issubdtype(req.dtype, np.integer) and req.min() >= 0 and req.max() < n_requests
        )
        if not in_range:
            raise ValueError(f"request_index must be integers in [0, {n_requests})")
        obs = acc.astype(np.float64)

        node_bin = np.minimum((f * self.node_bins).astype(np.int64), self.node_bins - 1)  # (M,)
        self._node += _binned(node_bin, f, obs, self.node_bins)

        # The root/bonus token is always emitted, so every tree starts at 1 on both sides.
        req = req.astype(np.int64)
        pred_tree = 1.0 + np.bincount(req, weights=f, minlength=n_requests)  # (n,)
        obs_tree = 1.0 + np.bincount(req, weights=obs, minlength=n_requests)  # (n,)
        tree_bin = np.searchsorted(self._tree_lo, pred_tree, side="right") - 1  # (n,)
        self._tree += _binned(tree_bin, pred_tree, obs_tree, self._tree_lo.size)

    def node_table(self) -> list[CalibrationBin]:
        """Non-empty node bins: equal-width bins of f on [0, 1]."""
        edges = np.arange(self.node_bins + 1) / self.node_bins
        return _table(self._node, edges[:-1], edges[1:])

    def tree_table(self) -> list[CalibrationBin]:
        """Non-empty request bins of predicted accepted tokens; the last bin is open-ended."""
        hi = np.append(self._tree_lo[1:], np.inf)
        return _table(self._tree, self._tree_lo, hi)

    def ratio(self) -> float:
        """Observed / predicted accepted nodes: > 1 the draft under-promises, < 1 over-promises."""
        predicted, observed = self._node[1].sum(), self._node[2].sum()
        return float(observed / predicted) if predicted > 0 else float("nan")

    def expected_calibration_error(self) -> float:
        """Count-weighted mean |observed - predicted| over node bins (nan if empty)."""
        count = self._node[0].sum()
        if count == 0:
            return float("nan")
        # sum over bins of count * |mean_obs - mean_pred| is sum |sum_obs - sum_pred|.
        return float(np.abs(self._node[2] - self._node[1]).sum() / count)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready report; NaN and infinite values become None."""
        return {
            "nodes": int(self._node[0].sum()),
            "requests": int(self._tree[0].sum()),
            "ratio": _json_float(self.ratio()),
            "expected_calibration_error": _json_float(self.expected_calibration_error()),
            "node_bins": [_json_bin(b) for b in self.node_table()],
            "tree_bins": [_json_bin(b) for b in self.tree_table()],
        }


def _binned(
    bins: np.ndarray, predicted: np.ndarray, observed: np.ndarray, n_bins: int
) -> np.ndarray:
    """(3, n_bins) count, sum predicted, sum observed."""
    return np.stack(
        [
            np.bincount(bins, minlength=n_bins).astype(np.float64),
            np.bincount(bins, weights=predicted, minlength=n_bins),
            np.bincount(bins, weights=observed, minlength=n_bins),
        ]
    )


def _table(sums: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> list[CalibrationBin]:
    count, predicted, observed = sums
    return [
        CalibrationBin(
            lo=float(lo[i]),
            hi=float(hi[i]),
            count=int(count[i]),
            mean_predicted=float(predicted[i] / count[i]),
            mean_observed=float(observed[i] / count[i]),
        )
        for i in np.flatnonzero(count > 0)
    ]


def _json_bin(b: CalibrationBin) -> dict[str, Any]:
    return {k: _json_float(v) for k, v in asdict(b).items()}


def _is_count(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _json_float(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value

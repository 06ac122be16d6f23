"""Per-request sampling parameters and the target-token rule of verification.

Every sampled token is drawn by inverse CDF with a uniform keyed on (seed, sequence
position). The walk in verify.py uses one such draw per depth along the path it takes, so
each emitted token is an independent draw from the target's (temperature/top-k/top-p)
distribution given what precedes it: lossless for any tree. A side effect users see: with
a seed, the output is the same whichever policy ran and whatever the batch was.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """What a request asks of decoding; validated at submit so a bad value never reaches
    the engine loop."""

    max_tokens: int = 128
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    seed: int | None = None  # None: a random seed is drawn at submit
    stop: tuple[str, ...] = field(default_factory=tuple)
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        def bad(name: str, why: str) -> ValueError:
            return ValueError(f"{name} {why}, got {getattr(self, name)!r}")

        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) \
                or self.max_tokens < 1:
            raise bad("max_tokens", "must be an integer >= 1")
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise bad("temperature", "must be a finite number >= 0")
        p = self.top_p
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
            raise bad("top_p", "must be in (0, 1]")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) \
                or not 0 <= self.top_k < 1 << 31:
            raise bad("top_k", "must be an integer in [0, 2^31)")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise bad("seed", "must be an integer")
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        if any(not isinstance(s, str) or not s for s in stop):
            raise bad("stop", "must be non-empty strings")
        object.__setattr__(self, "stop", stop)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


# 0-d arrays rather than np.uint64 scalars: numpy takes the array operand's fast path
_GOLDEN = np.array(0x9E3779B97F4A7C15, np.uint64)
_MIX1, _MIX2 = np.array(0xBF58476D1CE4E5B9, np.uint64), np.array(0x94D049BB133111EB, np.uint64)
_S11, _S27, _S30, _S31 = (np.array(s, np.uint64) for s in (11, 27, 30, 31))


def splitmix64(seed: np.ndarray, position: np.ndarray) -> np.ndarray:
    """splitmix64 of (seed, position), elementwise: uint64 and int64 arrays -> uint64."""
    # uint64 ufuncs on arrays wrap around silently (only numpy's scalar arithmetic warns),
    # so x is kept an array, 0-d included, and needs no errstate. In place: the simulator
    # calls this a few dozen times per iteration on small arrays, where each temporary
    # and each context manager costs as much as the arithmetic.
    x = np.asarray(seed.astype(np.uint64, copy=False) ^ (position.astype(np.uint64) * _GOLDEN))
    x += _GOLDEN
    x ^= x >> _S30
    x *= _MIX1
    x ^= x >> _S27
    x *= _MIX2
    x ^= x >> _S31
    return x


def keyed_uniform(seed: np.ndarray, position: np.ndarray) -> np.ndarray:
    """U[0, 1) from (seed, position) by splitmix64; [R] uint64 and [R] int64 -> [R] float64."""
    return (splitmix64(seed, position) >> _S11).astype(np.float64) * (1.0 / (1 << 53))


@dataclass(frozen=True, slots=True)
class RowParams:
    """Sampling parameters per logits row, as tensors (rows of one request repeat)."""

    temperature: torch.Tensor  # [R] float
    top_p: torch.Tensor  # [R] float
    top_k: torch.Tensor  # [R] int64
    uniform: torch.Tensor  # [R] float64


def target_tokens(logits: torch.Tensor, rp: RowParams) -> torch.Tensor:
    """The token the target emits at each row: argmax where temperature is 0, else an
    inverse-CDF draw at rp.uniform from the filtered distribution. [R, V] -> [R]."""
    out = logits.argmax(-1)
    rows = torch.nonzero(rp.temperature > 0).flatten()
    if rows.numel() == 0:
        return out
    # below 1e-3 a temperature is greedy in all but name; dividing by 5e-324 would give
    # infinities and NaN probabilities, so it is floored there
    z = logits[rows].double() / rp.temperature[rows, None].double().clamp(min=1e-3)  # [r, V]
    k = rp.top_k[rows]
    if bool((k > 0).any()):
        kmax = int(k.max().clamp(max=z.shape[-1]))
        kth = z.topk(kmax, dim=-1).values  # [r, kmax] descending
        idx = (torch.where(k > 0, k, kmax).clamp(max=kmax) - 1)[:, None]
        z = z.masked_fill(z < kth.gather(1, idx), -math.inf)
    probs = torch.softmax(z, dim=-1)
    p = rp.top_p[rows]
    if bool((p < 1).any()):
        sp, si = probs.sort(dim=-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (the token crossing it included)
        drop = (sp.cumsum(-1) - sp) >= p[:, None].double()
        probs = probs.scatter(1, si, sp.masked_fill(drop, 0.0))
    cdf = probs.cumsum(-1)  # [r, V]
    u = (rp.uniform[rows] * cdf[:, -1]).unsqueeze(1)
    pick = torch.searchsorted(cdf, u, right=True).squeeze(1)
    # never land on a zero-probability token through rounding at the top end
    pick = torch.minimum(pick, (probs > 0).cumsum(-1).argmax(-1))
    out[rows] = pick
    return out

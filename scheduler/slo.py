"""Per-request SLOs (TPOT, TTFT), decode progress and the requirement A(r) (seed 002 §3, §4.3)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

# Sums of path probabilities within this of a threshold count as reaching it: A(r) is a
# ratio of measured times, and a request that needs 2.0000000001 tokens needs 2.
SLO_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class SLO:
    """A TPOT service-level objective in seconds; ``tpot_s=None`` means best effort.

    ``relative``: the SLO was stated as a multiple of the baseline latency (a class such as
    ``x1.2``) rather than in milliseconds. The AdaServe authors' scheduler serves only such
    requests in its SLO phase (scheduler/authors.py), so the distinction is kept.

    ``ttft_s``: a time-to-first-token objective in seconds, its own objective beside the
    TPOT (a request may have either, both or neither); None: none. ``best_effort`` speaks
    of the TPOT only, which is what the decode policies schedule by."""

    tpot_s: float | None = None
    relative: bool = False
    ttft_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.relative, bool):
            raise ValueError(f"SLO.relative must be a bool, got {self.relative!r}")
        _check_seconds("TPOT", self.tpot_s)
        _check_seconds("TTFT", self.ttft_s)

    @classmethod
    def from_ms(cls, tpot_ms: float | None, relative: bool = False,
                ttft_ms: float | None = None) -> SLO:
        # best effort is never relative: there is no multiple of anything to keep
        return cls(_seconds("TPOT", tpot_ms), relative and tpot_ms is not None,
                   _seconds("TTFT", ttft_ms))

    @property
    def best_effort(self) -> bool:
        return self.tpot_s is None

    def attained(self, tpot_s: float) -> bool:
        """Seed 002's definition: a request attains its SLO when its TPOT is within it."""
        return self.tpot_s is None or tpot_s <= self.tpot_s

    def ttft_attained(self, ttft_s: float | None) -> bool | None:
        """Whether the first token came within the TTFT SLO; None without one. No first
        token at all (``ttft_s`` None) is a miss."""
        return objectives_met(None, None, ttft_s, self.ttft_s)[1]


def objectives_met(tpot: float | None, tpot_slo: float | None, ttft: float | None,
                   ttft_slo: float | None) -> tuple[bool | None, bool | None, bool | None]:
    """A finished request's (TPOT met, TTFT met, every objective met), each None where it
    had no such objective; any one unit for all four (the engine's seconds, SGLang's
    report in ms). No TPOT (one token: no gap) cannot miss; no first token misses a TTFT
    SLO. One rule for both backends' reports."""
    tpot_met = None if tpot_slo is None else (tpot is None or tpot <= tpot_slo)
    ttft_met = None if ttft_slo is None else (ttft is not None and ttft <= ttft_slo)
    met = [m for m in (tpot_met, ttft_met) if m is not None]
    return tpot_met, ttft_met, (all(met) if met else None)


def _check_seconds(what: str, seconds: object) -> None:
    if seconds is None:
        return
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ValueError(f"{what} SLO must be a number of seconds, got {seconds!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{what} SLO must be finite and > 0 seconds, got {seconds!r}")


def _seconds(what: str, ms: object) -> float | None:
    if ms is None:
        return None
    if isinstance(ms, bool) or not isinstance(ms, (int, float)):
        raise ValueError(f"{what} SLO must be a number of milliseconds, got {ms!r}")
    return float(ms) / 1e3


@dataclass(frozen=True, slots=True)
class RequestProgress:
    """One running request as the scheduler sees it at the start of an iteration.

    ``decode_latency_s`` is l, seconds since the request's first output token; ``decoded_tokens``
    is o, output tokens produced after that first one. Counting from the first token makes
    A(r) agree exactly with TPOT = (t_last - t_first) / (output tokens - 1).
    """

    request_id: Hashable
    slo: SLO
    decode_latency_s: float = 0.0
    decoded_tokens: int = 0
    context_tokens: int = 0
    # max_tokens less the tokens produced: a cap the client sent, not where the output will
    # end (an EOS can come first, and nothing tells a server when); None: no cap given
    max_tokens_left: int | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.decode_latency_s) or self.decode_latency_s < 0:
            raise ValueError(f"decode latency must be finite and >= 0, got {self.decode_latency_s}")
        if self.decoded_tokens < 0 or self.context_tokens < 0:
            raise ValueError("decoded and context token counts must be >= 0")
        if self.max_tokens_left is not None and self.max_tokens_left < 0:
            raise ValueError(f"max_tokens_left must be None or >= 0, got {self.max_tokens_left}")

    def requirement(self, t_spec_s: float) -> float:
        """A(r): tokens this iteration must accept for the request to stay on its SLO."""
        if self.slo.tpot_s is None:
            return 0.0
        return (self.decode_latency_s + t_spec_s) / self.slo.tpot_s - self.decoded_tokens


@dataclass(frozen=True, slots=True, eq=False)
class BatchView:
    """The running batch, one entry per request, as arrays the policies vectorize over."""

    request_ids: tuple[Hashable, ...]
    tpot_slo_s: np.ndarray  # [n] float64, NaN for best effort
    decode_latency_s: np.ndarray  # [n] float64, l
    decoded_tokens: np.ndarray  # [n] int64, o
    context_tokens: np.ndarray  # [n] int64, tokens already in the KV cache
    # [n] int64, R: the output tokens max_tokens still allows (max_tokens - generated), the
    # client's cap. Where an output will end is in no field: a server learns it when the EOS
    # comes out, so no policy can read it. None: no cap known (an engine that does not fill
    # it in); policies then never triage.
    max_tokens_left: np.ndarray | None = None
    # [n] bool, SLO.relative per request. None: unknown, every SLO counts as relative (an
    # engine that does not fill it in loses nothing: all its requests reach the SLO phase)
    slo_relative: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.request_ids)
        for name in ("tpot_slo_s", "decode_latency_s", "decoded_tokens", "context_tokens"):
            if np.shape(getattr(self, name)) != (n,):
                raise ValueError(f"BatchView.{name} must have shape ({n},)")
        for name in ("max_tokens_left", "slo_relative"):
            if getattr(self, name) is not None and np.shape(getattr(self, name)) != (n,):
                raise ValueError(f"BatchView.{name} must be None or have shape ({n},)")

    @classmethod
    def from_progress(cls, requests: Sequence[RequestProgress]) -> BatchView:
        """The batch of ``requests``; max_tokens_left is known only if every request has it."""
        known = bool(requests) and all(r.max_tokens_left is not None for r in requests)
        return cls(
            request_ids=tuple(r.request_id for r in requests),
            tpot_slo_s=np.array(
                [np.nan if r.slo.tpot_s is None else r.slo.tpot_s for r in requests], np.float64
            ),
            decode_latency_s=np.array([r.decode_latency_s for r in requests], np.float64),
            decoded_tokens=np.array([r.decoded_tokens for r in requests], np.int64),
            context_tokens=np.array([r.context_tokens for r in requests], np.int64),
            max_tokens_left=(np.array([r.max_tokens_left for r in requests], np.int64)
                              if known else None),
            slo_relative=np.array([r.slo.relative for r in requests], bool),
        )

    @property
    def n(self) -> int:
        return len(self.request_ids)

    def requirements(self, t_spec_s: float) -> np.ndarray:
        """A(r) = (l + t_spec)/t - o for every request (seed 002 §3); 0 for best effort."""
        with np.errstate(invalid="ignore"):
            a = (self.decode_latency_s + t_spec_s) / self.tpot_slo_s - self.decoded_tokens
        return np.where(np.isnan(self.tpot_slo_s), 0.0, a)  # [n]


def capped_requirement(requirement: np.ndarray, depth: int) -> np.ndarray:
    """A_cap = min(A, d + 1): no tree of depth d can yield more than d + 1 tokens (§4.3)."""
    return np.minimum(requirement, depth + 1.0)

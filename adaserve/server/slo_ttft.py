"""The default TTFT SLO of a request that names none (issue 39): reasoned from the engine's
profiled prefill rate and the request's own prompt, and scaled as its class scales its TPOT.

What a first token costs on an idle engine. The request arrives while an iteration runs
and waits for it: at most one forward of a prefill chunk (``prefill_chunk`` prompt tokens,
the most an iteration prefills). Then its prompt is prefilled, chunk by chunk, at the
chunked rate: a chunk's forward per ``prefill_chunk`` prompt tokens (short prompts share a
chunk, so a token costs the chunk's time over its tokens). Its first token comes out of the
iteration that finishes the prompt (the prompt's last token is the root of its first
speculation). With T the profile's target latency model (T = a*N_ctx + g*N_tok + c, seed
000 Eq. 3) at one forward of a chunk, C = ``prefill_chunk`` and n the prompt's tokens:

    floor(n) = T(0, C) + n * T(0, C) / C

Scaled like the TPOT. A class's TPOT SLO is a multiple m of the baseline latency (x1, x2.4,
x8; a class or a request in milliseconds: its milliseconds / the baseline), and its TTFT
takes the same multiple: a class 8x as patient per token is 8x as patient for its first.

With a slack for queueing, QUEUE_SLACK = 2. At x1, floor(n) itself would be missed by any
request that found anything ahead of it: speculation gives decoding headroom at x1,
nothing shortens a prefill. Twice the floor lets an urgent request wait behind one prompt
of its own length (or the decode step a chunked iteration carries beside its prefill), a
moderate one behind about four, a relaxed one about fifteen. It is not derived from
``max_batch``: how many prompts a request waits behind is set by the load, not by the slot
count, and the slots' bound (31 prompts of 64 tokens ahead, 15.5 chunks) would give the
urgent class about 11 floors (7 s here), no objective at all.

    default TTFT(n) = m * QUEUE_SLACK * (T(0, C) + n * T(0, C) / C)

On the dev CPU's profile (2026-11-25; C = 128: T = 416 ms) and a 64-token prompt, the
floor is 624 ms: urgent 1.25 s, moderate 3.0 s, relaxed 10.0 s (docs/contract.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from adaserve.scheduler import LatencyModel

QUEUE_SLACK = 2.0  # the floor's multiple a request may spend queueing (module docstring)
# the prompt length the classes' defaults are listed for (GET /server_info): the load
# generator's short prompts (loadgen/workload.py, short_tokens)
NOMINAL_PROMPT_TOKENS = 64


@dataclass(frozen=True, slots=True)
class PrefillRate:
    """The engine's profiled prefill speed: seconds of one forward of a prefill chunk."""

    chunk_tokens: int  # C, EngineConfig.prefill_chunk
    chunk_s: float  # T(0, C)

    def __post_init__(self) -> None:
        if self.chunk_tokens < 1 or not (math.isfinite(self.chunk_s) and self.chunk_s > 0):
            raise ValueError(f"a prefill rate needs a chunk of >= 1 token and a finite time "
                             f"> 0, got {self.chunk_tokens} tokens in {self.chunk_s!r} s")

    @classmethod
    def of(cls, target: LatencyModel | None, chunk_tokens: int) -> PrefillRate | None:
        """The rate ``target`` (a profile's target latency model) predicts; None without a
        model, or with one that predicts no time for a chunk (nothing to reason from)."""
        if target is None:
            return None
        seconds = float(target.predict(0, chunk_tokens))
        return cls(chunk_tokens, seconds) if seconds > 0 else None


def default_ttft_ms(tpot_ms: float | None, baseline_ms: float | None, prompt_tokens: int,
                    rate: PrefillRate | None) -> float | None:
    """The default TTFT SLO in ms of a request with a TPOT SLO of ``tpot_ms`` and a prompt
    of ``prompt_tokens`` (the rule and its reasons: the module docstring). None where it
    has no TPOT SLO (best effort has no TTFT SLO either) or nothing to reason from (no
    baseline, no profile)."""
    if tpot_ms is None or rate is None or baseline_ms is None or not baseline_ms > 0:
        return None
    floor_s = rate.chunk_s + max(0, prompt_tokens) * rate.chunk_s / rate.chunk_tokens
    return tpot_ms / baseline_ms * QUEUE_SLACK * floor_s * 1e3

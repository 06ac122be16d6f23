"""Option ``prefill=yield``: a prefill chunk waits where it would push a decoding request
off its SLO.

The engine prefills a chunk of prompt tokens every iteration and the running requests
decode in the same iteration (Sarathi-Serve's piggybacking; on the embedded engine two
forwards, prefill then verify, so a chunk also pays a weight read of its own). At short
prompts a chunk adds little. At 2-8k-token contexts on the served CPU a 128-token chunk
over a long prefix took the iteration from ~45 ms to ~0.5 s, prefill took 91-98% of the
servers' time, and every request decoding beside a long prefill got that step as its
TPOT: an urgent request (70 ms) and a moderate one fell off their SLOs whatever the draft
did (results/served-longctx-credit). A drafted tree cannot buy that back; the chunk's
timing can.

So before an iteration prefills, the policy asks, with the recent measured durations of
a plain decode step (t0) and of a step that prefilled (t1), what each choice breaks:
- the chunk breaks a decoding request with a TPOT SLO that stands within it after a step
  of t0 (its need at the SLO at most one token, ``authors.holds``) and that a step of t1
  sets back by more than a speculative step is expected to commit (the root and, at its
  acceptance rate, a drafted token: 1 + alpha); requests already past saving at t0, at
  ease at t1, or set back by less than speculation makes up, and best effort, count on
  neither side;
- waiting breaks a prefilling prompt that would get its first token within its TTFT SLO
  if the prefill went on now (its tokens and those ahead of it, a chunk an iteration of
  t1; the iteration of its last chunk gives its first token) and not one plain step
  later.
The chunk waits when it breaks more requests than the wait does: each is one request lost
to the end-to-end reading. A first token that comes late is final; a decoding request set
back by a fraction of a token draws even again as its next trees are accepted. Counting
every decoder pushed past a need of one token (the root alone) held the chunk for
requests that speculation would have brought back, and at short prompts under overload
the prompts waited seconds for them (results/test-served-yield: TTFT p50 1-3.6 s against
0.3-0.5 s); with 1 + alpha the development set's end-to-end reading was 81.1 / 55.6 /
46.7% at 3 / 4 / 5 req/s, the preset's 65.6 / 47.8 / 38.9% (results/dev-served-yield-
recover; a probe of the root-only count there, not kept, had 65.6 / 54.4 / 35.6%).
Without the second count a prompt waited as long as anybody decoding needed the short
step, and on the short-prompt development set the waiting prompts' TTFT paid what the
decoders' TPOT gained (results/dev-served-yield). At long contexts the option wins on both
readings (results/test-longctx-yield-ttft). Nothing here reads where an output ends: a
decoding request finishes when it finishes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from adaserve.scheduler.authors import AdaServeRules, holds, raw_need
from adaserve.scheduler.slo import SLO_EPS, BatchView

# weight of the newest iteration in a step kind's running mean: the last few iterations
# of a kind (the chunks of one long prompt cost alike; the next prompt's may not)
STEP_WEIGHT = 0.25


class StepTimes:
    """Running means of the measured seconds of decode-only iterations and of iterations
    that prefilled a chunk; NaN until one of the kind is seen."""

    def __init__(self) -> None:
        self.plain_s = math.nan
        self.prefill_s = math.nan

    def observe(self, seconds: float, prefilled: int) -> None:
        if prefilled:
            self.prefill_s = _mean(self.prefill_s, seconds)
        else:
            self.plain_s = _mean(self.plain_s, seconds)


def _mean(old: float, new: float) -> float:
    return new if math.isnan(old) else (1 - STEP_WEIGHT) * old + STEP_WEIGHT * new


@dataclass(frozen=True, slots=True)
class PromptQueue:
    """The prompts the chunked prefill serves, in the order it serves them (the engine's
    ``_prefill_order``): what the wait would cost them."""

    slack_s: np.ndarray  # [m] seconds from now to each one's TTFT deadline (arrival + SLO)
    tokens_left: np.ndarray  # [m] prompt tokens each still has to prefill
    chunk: int  # prompt tokens an iteration prefills

    @staticmethod
    def empty(chunk: int = 1) -> PromptQueue:
        return PromptQueue(np.zeros(0), np.zeros(0, np.int64), chunk)


def chunk_breaks(batch: BatchView, t_plain_s: float, t_prefill_s: float,
                 rules: AdaServeRules, commit: np.ndarray | float = 1.0,
                 left: np.ndarray | None = None) -> np.ndarray:
    """[n] bool: decoding requests a step of ``t_prefill_s`` pushes further off their SLO
    than ``commit`` tokens (a scalar or [n]: what one speculative step is expected to commit)
    make up, that a step of ``t_plain_s`` keeps on it (module docstring). With ``left``
    ([n] tokens each can expect to decode still, NaN: unknown; ``prefill=recover``), only
    those the plain steps after it cannot bring back by then: each plain step commits
    ``commit`` tokens in ``t_plain_s``, so a request decoding faster than its SLO makes up
    ``commit`` - t_plain/SLO tokens of its shortfall a step."""
    keeps = holds(batch, t_plain_s, rules)  # [n]
    if left is None:
        return keeps & ~holds(batch, t_prefill_s, rules, commit)  # [n]
    behind = raw_need(batch, t_prefill_s, rules) - commit  # [n] tokens short after the chunk
    # [n] tokens of pace a plain step costs
    drift = raw_need(batch, t_plain_s, rules) - raw_need(batch, 0.0, rules)
    steps = np.nan_to_num(np.maximum(np.asarray(left, np.float64) - commit, 0.0) / commit)
    with np.errstate(invalid="ignore"):  # NaN (best effort) compares False
        return keeps & (behind > np.maximum(commit - drift, 0.0) * steps + SLO_EPS)  # [n]


def wait_breaks(prompts: PromptQueue, t_plain_s: float, t_prefill_s: float) -> np.ndarray:
    """[m] bool: prompts in time for their TTFT SLO if the prefill goes on now and late if
    it waits one plain step. A prompt is prefilled after the ones ahead of it, and its
    first token comes out of the iteration that prefills its last chunk (the engine
    promotes it to decode in that same iteration)."""
    iterations = np.ceil(np.cumsum(prompts.tokens_left) / max(1, prompts.chunk))  # [m]
    first_token_s = np.maximum(iterations, 1) * t_prefill_s  # [m]
    return (first_token_s <= prompts.slack_s) & (first_token_s + t_plain_s > prompts.slack_s)


def chunk_waits(batch: BatchView, prompts: PromptQueue, t_plain_s: float,
                t_prefill_s: float, rules: AdaServeRules,
                commit: np.ndarray | float = 1.0, left: np.ndarray | None = None) -> bool:
    """Whether the chunk breaks more decoding requests than waiting breaks prompts (module
    docstring; ``left`` as ``chunk_breaks``); False until both steps are measured, or where
    a chunk costs nothing."""
    if math.isnan(t_plain_s) or math.isnan(t_prefill_s) or t_prefill_s <= t_plain_s:
        return False
    broken = int(chunk_breaks(batch, t_plain_s, t_prefill_s, rules, commit, left).sum())
    return broken > int(wait_breaks(prompts, t_plain_s, t_prefill_s).sum())

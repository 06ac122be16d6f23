"""The execution half of an iteration, behind one interface (DESIGN.md "One scheduling loop,
several executors"; vLLM v1's Scheduler / ModelRunner split).

`EngineCore` (core.py) decides: admission, prefill chunking, the BatchView, plan, select,
commit, emit, finish. An `Executor` runs what was decided: the prefill forwards, the draft
forwards that grow the candidate trees, the target verify and its acceptance walk, and the
KV-slot moves that keep the running requests compact. `TorchExecutor` (torch_executor.py)
runs the real models; `adaserve.sim.SimExecutor` advances a virtual clock by a hardware
latency model and decides acceptance by an acceptance model. The loop is the same code.

Requests are handed over read-only: an executor never changes a request's scheduling state
(tokens, target_len, slot, phase); what it needs to remember per slot is its own.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from adaserve.engine.request import Request
from adaserve.scheduler import CandidateBatch, SpecPlan


@dataclass(frozen=True, slots=True)
class PrefillChunk:
    """Prompt tokens [start, start + len(tokens)) of the request in KV slot ``slot``."""

    slot: int
    start: int  # the request's committed target tokens before this chunk
    tokens: tuple[int, ...]
    prompt_len: int  # the request's whole prompt (an executor may defer a short one's draft)


@dataclass(frozen=True, slots=True)
class Drafted:
    """What the draft phase hands selection (candidates) and the later phases (state)."""

    candidates: CandidateBatch  # one tree per decoding request, slots [0, n)
    state: Any  # executor-private: what verify and commit_draft need of this draft


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """The target's verdict on the selected nodes (DESIGN.md step 6)."""

    accepted: list[np.ndarray]  # per request: tree indices of accepted non-root nodes, by depth
    new_tokens: list[list[int]]  # per request: accepted tokens, then the bonus token
    verified: np.ndarray  # [n] int64 tokens each request put through the target
    # [n, V] the target's logits at each request's bonus position (its deepest accepted
    # node), when the caller asked for them (online draft adaptation); else None
    bonus_logits: Any = None


class Executor(ABC):
    """Runs the model work of one iteration for `EngineCore`.

    Decoding requests occupy KV slots [0, n) in batch order; prefilling ones follow.
    """

    n_slots: int  # KV slots: the most requests that can be admitted at once
    vocab: int  # token ids a prompt may use are [0, vocab)
    eos_ids: frozenset[int]
    tokenizer: Any  # detokenizes outputs and finds stop strings; None: token ids only

    def begin_iteration(self) -> None:
        """A new iteration starts: nothing of the last one's shares a forward with this one's
        (the simulator's fused prefill pricing keys on it; the real models need nothing)."""

    @abstractmethod
    def open_slot(self, slot: int) -> None:
        """A request was admitted into ``slot``: forget whatever the slot held."""

    @abstractmethod
    def prefill(self, chunks: Sequence[PrefillChunk]) -> None:
        """Put the chunks' K/V into both models' caches (one forward per model)."""

    @abstractmethod
    def draft(self, reqs: Sequence[Request], plan: SpecPlan) -> Drafted:
        """Grow one candidate tree per decoding request, shaped by ``plan``."""

    @abstractmethod
    def verify(self, reqs: Sequence[Request], candidates: CandidateBatch, mask: np.ndarray,
               drafted: Drafted | None) -> VerifyResult:
        """Verify the selected nodes (mask [n, N], ancestor-closed) in one target forward and
        keep the K/V of each accepted path after the request's committed tokens."""

    @abstractmethod
    def commit_draft(self, reqs: Sequence[Request], drafted: Drafted,
                     result: VerifyResult) -> None:
        """Keep the draft's K/V of the accepted nodes it has already seen."""

    @abstractmethod
    def swap_slots(self, a: int, b: int, len_a: int, len_b: int) -> None:
        """Exchange two slots; len_* are the committed target tokens each holds."""

    @abstractmethod
    def copy_slot(self, src: int, dst: int, length: int) -> None:
        """Move the request in src to dst (src is free afterwards)."""

"""The carriers between online adaptation's two sides: what the engine hands the trainer
(served records) and what comes back (an update's report)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class ServedRecord:
    """One served request as training data: its tokens and the target's distributions at
    the positions where the draft disagreed."""

    tokens: np.ndarray  # [T] int32, prompt then output
    n_prompt: int
    positions: np.ndarray  # [m] int64: row j is the distribution of tokens[positions[j]]
    topk_ids: np.ndarray  # [m, k] int32, descending probability
    topk_probs: np.ndarray  # [m, k] float16


@dataclass(frozen=True, slots=True)
class UpdateReport:
    """One finished update, as the trainer reports it."""

    swapped: bool
    agreement_before: float  # the served draft's greedy agreement on the held-back slice
    agreement_after: float  # the updated draft's
    steps: int
    loss: float
    train_seconds: float
    requests: int  # fresh training requests
    swap_seconds: float = 0.0  # the engine's pause to install it (0 when not swapped)
    head_rows: int = 0  # head rows passed to tokens served outside the head (when swapped)

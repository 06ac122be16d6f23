"""Measured draft depth: draft as deep as the tight requests' tokens per second reward.

Eq. 8 sets the depth from the budget per request (the authors floor it at
``--min-tree-depth`` 3 or 4), as if a draft step were free. It is not: on the paper's
set-ups a draft step costs 4-5 ms of a 50-90 ms iteration, and every request in the batch
pays for it. Fixed by hand, depth 2 on Qwen2.5-32B and 3 on Llama-3.1-70B beat the
authors' depth under adaserve-paced-triage at every rate measured (Qwen RPS 3.8: 97.2%
against 94.3%; results/sim/history-issue26.md), but the best depth is a property of the
draft's cost and alignment, which a server does not know in advance, and predicting it
fails: acceptance measured on the nodes a selection kept overstates what a deeper level
adds once the budget is shared.

So the depth is measured. For each depth it has drafted at, ``MeasuredDepth`` keeps a
decayed mean of the tokens a *tight* request committed per iteration (one whose TPOT SLO
is shorter than the iteration: without speculation it falls behind) and of the
iteration's predicted latency, and drafts at the neighbour (depth - 1, depth, depth + 1)
with the most tokens per second. Requests with slack are left out: pacing trims them to
their root whatever the depth, so their flat one token per step would hide what depth does
for the requests that decide attainment. Neighbours it has not tried are explored: one
iteration in ``period`` drafts one level deeper, another one level shallower.
"""

from __future__ import annotations

# One iteration in 20 explores each neighbour: 10% of iterations off the chosen depth. A
# decay of 0.9 per sample remembers about 10 samples of a neighbour, i.e. the last ~200
# iterations. Neither was fitted: periods 10-40 and decays 0.9-0.97 measured within a
# point of each other on the paper's set-ups (history-issue26.md).
PERIOD = 20
DECAY = 0.9


class MeasuredDepth:
    """The draft depth chosen from measured tokens per second of the tight requests."""

    def __init__(self, period: int = PERIOD, decay: float = DECAY) -> None:
        if period < 2:
            raise ValueError(f"period must be >= 2 (one deeper and one shallower probe), got {period!r}")
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must lie in [0, 1), got {decay!r}")
        self.period, self.decay = period, decay
        self.depth: int | None = None  # the chosen depth; None until the first plan
        self._tokens: dict[int, float] = {}  # depth -> decayed tokens per tight request
        self._seconds: dict[int, float] = {}  # depth -> decayed predicted iteration latency
        self._plans = 0

    def rate(self, depth: int) -> float | None:
        """Measured tokens per second per tight request at ``depth``; None if never drafted."""
        if depth not in self._tokens:
            return None
        return self._tokens[depth] / self._seconds[depth] if self._seconds[depth] > 0 else float("inf")

    def next_depth(self, cap: int) -> int:
        """The depth to draft this iteration, in [1, cap]; ``cap`` is Eq. 8's depth (the
        budget per request bounds it). Starts at the cap, then moves to the measured best of
        its neighbours, the shallower on a tie."""
        if cap < 1:
            raise ValueError(f"cap must be >= 1, got {cap!r}")
        d = cap if self.depth is None else min(self.depth, cap)
        measured = [k for k in (d - 1, d, d + 1) if 1 <= k <= cap and k in self._tokens]
        if measured:
            d = max(measured, key=lambda k: self.rate(k))  # max keeps the first: shallower
        self.depth = d
        self._plans += 1
        phase = self._plans % self.period
        if phase == 0 and d < cap:
            return d + 1
        if phase == self.period // 2 and d > 1:
            return d - 1
        return d

    def record(self, depth: int, tokens: float, seconds: float) -> None:
        """An iteration drafted at ``depth``: a tight request committed ``tokens`` on average
        (root included) in an iteration predicted to take ``seconds``."""
        if depth < 1 or tokens < 1.0 or seconds < 0:
            raise ValueError(f"need depth >= 1, tokens >= 1 and seconds >= 0, got "
                             f"{depth!r}, {tokens!r}, {seconds!r}")
        if depth in self._tokens:
            a = self.decay
            self._tokens[depth] = a * self._tokens[depth] + (1 - a) * tokens
            self._seconds[depth] = a * self._seconds[depth] + (1 - a) * seconds
        else:
            self._tokens[depth], self._seconds[depth] = tokens, seconds

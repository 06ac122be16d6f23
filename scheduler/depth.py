"""Measured draft depth: draft as deep as the tight requests' tokens per second reward.

Eq. 8 sets the depth from the budget per request (the authors floor it at
``--min-tree-depth`` 3 or 4), as if a draft step were free. It is not: on the paper's
set-ups a draft step costs 4-5 ms of a 50-90 ms iteration, and every request in the batch
pays for it. Fixed by hand, depth 2 on Qwen2.5-32B and 3 on Llama-3.1-70B beat the
authors' depth with pacing and triage on (issue 26's adaserve-paced-triage) at every rate measured (Qwen RPS 3.8: 97.2%
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

A rate cannot see a threshold: a request attains only if it commits what its SLO needs per
step, and a tree of depth d commits at most d + 1 tokens. When the tight requests' SLOs are
far below the iteration (Fig. 11's urgent class at 0.6x the baseline: 16.8 ms against
~55 ms iterations on Qwen2.5-32B, 3.3 tokens a step) a shallow tree has the best rate
and cannot keep any of them on their SLO. So the depth never drops below ``need_floor``:
the shallowest depth whose d + 1 tokens hold the median tight request's need per step at
that depth's own iteration latency.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

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

    def next_depth(self, cap: int, floor: int = 1) -> int:
        """The depth to draft this iteration, in [floor, cap]; ``cap`` is Eq. 8's depth (the
        budget per request bounds it) and wins over a higher ``floor``. Starts at the cap,
        then moves to the measured best of its neighbours, the shallower on a tie; the
        probes stay within the range too."""
        if cap < 1 or floor < 1:
            raise ValueError(f"cap and floor must be >= 1, got {cap!r}, {floor!r}")
        floor = min(floor, cap)
        d = cap if self.depth is None else min(max(self.depth, floor), cap)
        measured = [k for k in (d - 1, d, d + 1) if floor <= k <= cap and k in self._tokens]
        if measured:
            d = max(measured, key=lambda k: self.rate(k))  # max keeps the first: shallower
        self.depth = d
        self._plans += 1
        phase = self._plans % self.period
        if phase == 0 and d < cap:
            return d + 1
        if phase == self.period // 2 and d > floor:
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


def need_floor(tpot_slo_s: np.ndarray, t_iter_s: Sequence[float], correction: float) -> int:
    """The shallowest depth d whose d + 1 tokens hold the median tight request's need per
    step at that depth's own predicted iteration latency, ``t_iter_s[d - 1]`` (d = 1 ..
    Eq. 8's depth). Where none does, the depth with the smallest shortfall need - (d + 1),
    the shallower on a tie; usually the deepest, since a level adds a token and lengthens
    the iteration by less than an SLO. need = t_iter x correction / SLO is the authors'
    need without its catch-up term, so one request far behind does not set everyone's
    depth; tight means an SLO shorter than the iteration. 1 when nobody is tight or the
    iteration is unpriced.

    The median, not the tightest: a few very urgent requests among many lenient ones should
    not make every request pay for a deep draft."""
    slo = np.asarray(tpot_slo_s, np.float64)  # [n], NaN best effort
    best, best_short = 1, float("inf")
    for d, t in enumerate(t_iter_s, start=1):
        if t <= 0:
            return 1
        with np.errstate(invalid="ignore"):  # best effort (NaN) is never tight
            tight = slo < t  # [n]
        need = float(np.median(t * correction / slo[tight])) if tight.any() else 0.0
        short = max(need - (d + 1), 0.0)
        if short <= 1e-9:  # held (an exact need of 3 is held by depth 2)
            return d
        if short < best_short:
            best, best_short = d, short
    return best

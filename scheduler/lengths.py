"""What a server has learnt of output lengths: how many more tokens a decoding request can
expect, from the requests that already finished (option ``prefill=recover``).

Where an output ends is unknown until its EOS comes out, and ``max_tokens`` is only a cap,
so no request's own end is read here. What the server has seen is how long the outputs
of the last finished requests were; a request that has decoded o tokens can expect what
the finished outputs longer than o had left after their o-th: the median of L - o over
the recent lengths L > o. Before ``MIN_SEEN`` such outputs finished nothing is said (NaN),
and a policy reads that as no time to make anything up.
"""

from __future__ import annotations

from collections import deque

import numpy as np

WINDOW = 64  # the last finished outputs remembered: half a minute of a served sweep at 2 req/s
MIN_SEEN = 8  # fewer finished outputs longer than o say nothing of what follows o


class OutputLengths:
    """The decoded-token counts of the last ``WINDOW`` finished requests."""

    def __init__(self, window: int = WINDOW) -> None:
        self._lengths: deque[int] = deque(maxlen=window)

    def finished(self, decoded: int) -> None:
        """A request left after decoding ``decoded`` tokens (EOS, its cap or an abort: what
        its client got is its output's length)."""
        self._lengths.append(int(decoded))

    def expected_left(self, decoded: np.ndarray) -> np.ndarray:
        """[n] float: for requests that have decoded ``decoded`` [n] tokens each, the
        median tokens the recently finished outputs longer than that decoded after it (the
        lower median); NaN where fewer than ``MIN_SEEN`` were longer."""
        o = np.asarray(decoded, np.int64)  # [n]
        lengths = np.sort(np.fromiter(self._lengths, np.int64, len(self._lengths)))  # [k]
        first = np.searchsorted(lengths, o, side="right")  # [n] index of the first L > o
        longer = len(lengths) - first  # [n]
        at = np.minimum(first + (longer - 1) // 2, max(len(lengths) - 1, 0))  # [n]
        left = (lengths[at] - o).astype(np.float64) if len(lengths) else np.zeros(o.shape)
        return np.where(longer >= MIN_SEEN, left, np.nan)  # [n]

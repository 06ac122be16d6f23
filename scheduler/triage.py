"""Triage: which requests can no longer attain their TPOT SLO, whatever the SLO phase does.

Algorithm 2 serves the requests most behind first. A request that has fallen so far behind
that it cannot catch up before it ends soaks up budget every iteration and still misses its
SLO, while the requests after it in the order starve. Triage finds those requests, so a
policy can serve them best-effort and give the budget to requests that can still attain.
"""

from __future__ import annotations

import numpy as np

from adaserve.scheduler.slo import BatchView


def unreachable(batch: BatchView, best_yield: np.ndarray, t_iter_s: float) -> np.ndarray:
    """[n] bool: requests whose SLO is out of reach even at the best per-iteration yield.

    With l the decode latency since the first token, o the tokens after the first, R the
    tokens the client's max_tokens still allows (``batch.max_tokens_left``: a cap, since
    where an output ends is unknown until it ends; an earlier end leaves fewer iterations
    to catch up in, so reading the cap gives up fewer requests, never more), a_max =
    ``best_yield`` the most
    tokens per iteration the SLO phase could give the request and t_iter the predicted
    iteration latency, the best TPOT the request can still end with is

        TPOT_best = (l + ceil(R / a_max) * t_iter) / (o + R)

    (every remaining iteration yields a_max tokens and takes t_iter seconds). The request is
    unreachable when TPOT_best > SLO. This is optimistic on purpose: a_max is the whole SLO
    phase share (n_max nodes, or the d + 1 tokens a depth-d tree can give) every iteration,
    so a request is given up only when even that cannot save it.

    Never unreachable: best-effort requests, requests with no tokens ahead or behind
    (o + R = 0: no TPOT to miss), and every request when R is unknown
    (``max_tokens_left`` None). With t_iter = 0 (no latency model) the future is taken to
    be free, TPOT_best = l / (o + R): only requests already lost whatever happens next are
    given up, so without a prediction triage errs toward serving.
    """
    n = batch.n
    if batch.max_tokens_left is None or n == 0:
        return np.zeros(n, bool)
    r = np.maximum(batch.max_tokens_left, 0).astype(np.float64)  # [n]
    a = np.maximum(np.asarray(best_yield, np.float64), 1.0)  # the root is always a token
    iters = np.ceil(r / a)  # [n]
    tokens = batch.decoded_tokens + r  # [n] o + R
    seconds = batch.decode_latency_s + iters * max(t_iter_s, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        best = np.divide(seconds, tokens, out=np.zeros(n), where=tokens > 0)
        lost = best > batch.tpot_slo_s  # NaN SLO (best effort): False
    return lost & (tokens > 0)

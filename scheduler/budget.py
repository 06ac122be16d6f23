"""The verify budget of one iteration, chosen by predicted goodput (option budget=goodput).

AdaServe's B is a hardware constant: the most tokens the target verifies at about the
cost of one (seed 002 §5; the profile's 1.15x rule). On a GPU that knee sits at hundreds
of tokens, so a fixed B seldom binds. Where the forward grows from the first extra token
(this CPU: 8 tokens cost 1.22x one, so B = 4), a fixed B stops all drafting once B
requests run, although a chain per request still adds more tokens than it costs time
(turbospec drafts there and attains more). ``goodput_budget`` instead takes, each
iteration, the verify count among B and n x (d + 1), d = 1..D, that the latency model
predicts to give the most tokens per second, TurboSpec's rule (seed 000 Listing 2) applied
to the whole batch; AdaServe's two phases then spend it SLO first as ever.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from adaserve.scheduler.acceptance import expected_chain_terms, expected_chain_tokens


def chain_rates(alphas: np.ndarray, max_depth: int,
                seconds: Callable[[int], float],
                verified: Callable[[int], int] | None = None) -> np.ndarray:
    """[max_depth + 1] predicted tokens per second with a d-deep chain per request, d = 0..
    max_depth: sum_{j<=d} alpha^j tokens a request (seed 000 Eq. 4) over ``seconds(d)``, the
    predicted iteration latency; where that is not positive, the tokens alone (time then
    costs nothing). One scoring for the chain length (turbospec), the cost-aware depth and
    the goodput budget; ``np.argmax`` of it keeps the shallower of equal rates.

    ``verified(d)``: the tokens the iteration will verify at depth d, roots included, where
    a budget smaller than the n chains cuts them (``budgeted_chain_tokens``); without it
    every request verifies its whole chain."""
    rates = np.empty(max_depth + 1)
    for d in range(max_depth + 1):
        tokens = (float(np.sum(expected_chain_tokens(alphas, d))) if verified is None
                  else budgeted_chain_tokens(alphas, d, verified(d)))
        t = seconds(d)
        rates[d] = tokens / t if t > 0 else tokens
    return rates  # [max_depth + 1]


def budgeted_chain_tokens(alphas: np.ndarray, depth: int, verify: int) -> float:
    """Expected tokens of one iteration that verifies ``verify`` tokens of n d-deep chains:
    the n roots, and of the chains' nodes (request i's j-th is kept with probability
    alpha_i^j) the verify - n most probable, as selection spends a budget. Counting every
    chain where the budget verifies fewer over-promised: at 2-8k-token contexts on the
    served CPU the budget there was 3 tokens for 2 requests, each drafted step was priced
    for its 3 tokens but credited with 2 chains, and `adaserve` drafted at depth 1 for 1.21
    tokens a request in steps 1.3x the plain one (results/served-longctx-gate)."""
    a = np.clip(np.asarray(alphas, np.float64), 0.0, 1.0)  # [n]
    extra = min(max(verify - a.size, 0), a.size * depth)
    if extra == 0:
        return float(a.size)
    nodes = (a[:, None] ** np.arange(1, depth + 1)).ravel()  # [n * depth]
    return float(a.size + np.sum(np.partition(nodes, nodes.size - extra)[nodes.size - extra:]))


def goodput_budget(n: int, alphas: np.ndarray, budget: int, max_depth: int,
                   seconds: Callable[[int, int], float],
                   keeps: Callable[[int], np.ndarray] | None = None) -> int:
    """The verify budget for n requests with per-request acceptance ``alphas`` [n]: B, or
    the n x (d + 1) tokens of a d-deep chain per request, d <= ``max_depth``, whichever
    ``seconds(d, tokens)`` (the predicted iteration latency of d draft steps and that many
    verified tokens) gives the most expected tokens per second; never below B, which by
    the profile's rule costs about what the roots alone cost.

    ``keeps(d)``: [n] the deepest node each request will keep of a d-deep chain (pacing
    cuts a request ahead of its SLO to its cap); its tokens and the verified count then
    follow what selection keeps, while the draft still runs for all n. Without it every
    request keeps its whole chain. Under load most requests run ahead of a lenient SLO, so
    a chain per request predicted tokens that pacing then threw away: on the served CPU
    at 9 or more running, the preset verified 17 tokens for 1.19 a request in steps as long
    as the roots-only ones (docs/results.md, the served sweep re-run)."""
    a = np.asarray(alphas, np.float64)
    if keeps is None:  # every request keeps its whole chain: alpha^j once for all depths
        powers = expected_chain_terms(a, max_depth)  # [n, max_depth + 1]
    rates = np.empty(max_depth + 1)
    for d in range(max_depth + 1):
        if keeps is None:
            tokens, verify = float(np.sum(np.sum(powers[:, : d + 1], axis=-1))), n * (d + 1)
        else:  # requests grouped by the chain they keep
            kept = np.clip(keeps(d), 0, d).astype(np.int64)
            tokens = sum(float(np.sum(expected_chain_tokens(a[kept == k], int(k))))
                         for k in np.unique(kept))
            verify = int(n + kept.sum())
        t = seconds(d, verify)
        rates[d] = tokens / t if t > 0 else tokens
    best = int(np.argmax(rates))  # ties keep the shallower chain
    return max(budget, n * (best + 1))

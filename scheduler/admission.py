"""Which waiting request to admit next when the running batch has room for fewer than
wait (issue 38: the scheduler weighs TTFT).

First come, first served lets a backlog make every request late: under a burst each new
request waits behind all the older ones, so once the queue is longer than a TTFT SLO's
worth of work, no request admitted meets it. ``deadline_order`` admits the requests that
can still meet their TTFT SLO first, earliest deadline first, and defers the ones whose
deadline has passed (they are late whatever happens now) until nobody in time waits;
among themselves those go oldest first, so none starves once the burst is over.
"""

from __future__ import annotations

import numpy as np

# The contract's TTFT SLO for every class (loadgen.records.DEFAULT_TTFT_SLO_MS, which the
# end-to-end reading holds requests to); per-class TTFT SLOs are not in the contract yet.
DEFAULT_TTFT_SLO_S = 5.0
ADMISSIONS = ("fifo", "deadline")


def deadline_order(submitted_s: np.ndarray, now: float,
                   ttft_slo_s: float = DEFAULT_TTFT_SLO_S) -> np.ndarray:
    """[m] the order to admit m waiting requests (``submitted_s`` [m], their arrival times):
    those whose deadline (arrival + ``ttft_slo_s``) is still ahead, earliest first, then
    the late ones, oldest first. Ties keep arrival order (a stable sort)."""
    deadline = np.asarray(submitted_s, float) + ttft_slo_s  # [m]
    late = deadline < now  # [m]
    # in time first (late False sorts before True), then by deadline; stable on arrival
    return np.lexsort((deadline, late))

"""The policy's ``admit=deadline`` inside SGLang: which waiting request SGLang prefills next.

The embedded engine admits the requests still in time for their TTFT SLO first, earliest
deadline first, and defers the late ones (``adaserve.scheduler.admission.deadline_order``).
SGLang orders its waiting queue in ``SchedulePolicy.calc_priority`` every time it builds a
prefill batch (first come first served, or by cached prefix), then admits from the front
while its token and request budgets allow. The AROUND hook here lets SGLang order the
queue as it would, then, on a server running ADASERVE with a policy that admits by
deadline (the preset ``adaserve`` does), re-orders it by ``deadline_order``: the same
function, the same TTFT SLOs (the request's own, else its class's default by the
embedded server's rule, ``slo.default_ttft``, else ``admission.DEFAULT_TTFT_SLO_S``).

SGLang's own priority scheduling (``--enable-priority-scheduling``) was the other seam: a
request's priority could carry its deadline. But it sorts by a fixed number, so a request
whose deadline has passed would stay at the front and make the ones behind it late too
(``deadline_order`` defers it), and it turns on preemption by priority by default, which
the embedded engine does not do.

A request's arrival is SGLang's ``scheduler_recv_time`` (``time.perf_counter`` in the
scheduler process, set once when the request is received and kept across retractions,
where ``wait_queue_entry_time`` is reset), and "now" is read on the same clock. The
tokenizer's queue before that is not counted, as the engine counts its own from submit.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from adaserve.scheduler.admission import deadline_order, ttft_slo_s
from adaserve.scheduler.options import AdaServeOptions
from adaserve.scheduler.policies import policy_options
from adaserve.sglang.slo import adaserve_selected, chunk_of, default_ttft


@lru_cache(maxsize=1)
def served_options() -> AdaServeOptions | None:
    """ADASERVE_POLICY's options, read once per process by the scheduler hooks (this one,
    refusal.py); None for a policy without options (``adaserve-authors``' own class, the
    baselines), whose admission is first come, first served and which refuses nobody. A
    bad spec stops the launch in the worker first, so here it only reads None."""
    try:
        _, options = policy_options(os.environ.get("ADASERVE_POLICY", "adaserve"))
    except ValueError:
        return None
    return options


def admission() -> str:
    """How ADASERVE_POLICY admits: "fifo" or "deadline" (as ``Policy.admission`` says)."""
    options = served_options()
    return "fifo" if options is None else options.admit


def _deadline_server():
    """SGLang's schedule settings where this scheduler process runs ADASERVE with a policy
    that admits by deadline, else None (a plain SGLang server, or one not launched yet)."""
    from sglang.srt.runtime_context import get_schedule, get_spec

    try:
        spec, schedule = get_spec(), get_schedule()
    except ValueError:  # "config namespace ... not published": not a server's scheduler
        return None
    return schedule if adaserve_selected(spec) and admission() == "deadline" else None


def ttft_slos(reqs: Sequence, chunk: int | None) -> np.ndarray:
    """[m] each waiting request's TTFT SLO in seconds: the ``ttft_slo_ms`` the HTTP hooks
    resolved into its ``custom_params``, else its class's default for its prompt's length
    (``default_ttft``), else ``admission.DEFAULT_TTFT_SLO_S``."""
    out = np.empty(len(reqs), np.float64)
    for i, r in enumerate(reqs):
        params = getattr(r.sampling_params, "custom_params", None) or {}
        ms = params.get("ttft_slo_ms")
        if ms is None:
            ms = default_ttft(params.get("tpot_slo_ms"), len(r.origin_input_ids), chunk)
        out[i] = ttft_slo_s(None if ms is None else float(ms) / 1e3)
    return out


def order_by_deadline(waiting_queue: list, now: float, chunk: int | None) -> None:
    """Re-order SGLang's waiting queue in place by ``deadline_order``."""
    arrived = np.array([r.time_stats.scheduler_recv_time for r in waiting_queue], np.float64)
    order = deadline_order(arrived, now, ttft_slos(waiting_queue, chunk))
    waiting_queue[:] = [waiting_queue[i] for i in order]


def calc_priority_hook(original, self, waiting_queue, *args, **kwargs):
    """AROUND ``SchedulePolicy.calc_priority``: SGLang's order (and its prefix matching,
    which the admission that follows reads), then, on an ADASERVE server admitting by
    deadline, the deadline order over it."""
    out = original(self, waiting_queue, *args, **kwargs)
    if len(waiting_queue) > 1:
        schedule = _deadline_server()
        if schedule is not None:
            order_by_deadline(waiting_queue, time.perf_counter(), chunk_of(schedule))
    return out

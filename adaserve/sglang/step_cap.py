"""The policy's ``cap`` inside SGLang: how many waiting requests a prefill round may take.

The embedded engine admits a waiting request only while the decode step predicted with it
stays within the tightest TPOT SLO among the requests held and it
(``admission.past_step_cap``, docs/scheduler.md): where a step grows with the batch, that
keeps a server from tipping into steps past the tight class's SLO, and the overload is paid
for in the queue, by TTFT SLOs, instead of by everyone's TPOT.

SGLang has no latency model of ours, but it has its own rounds. ``rounds.StepSizes`` files
each decode round's seconds by the number of requests it decoded and predicts the step at
n from them: the mean of the last rounds at n where n ran, else the least-squares line
through the sizes that did, else nothing. Nothing is capped until two sizes are measured, as the
engine decides nothing before it has measured. A decode round here is ADASERVE's
speculative round, draft and verify, which commits at least one token per request, so the
step it predicts is the plain step's upper bound and the cap is at least as strict as the
engine's; it reads the batch's size, not its contexts.

SGLang admits from its waiting queue while ``Scheduler.get_num_allocatable_reqs`` says a
request may join. The AROUND hook keeps SGLang's answer and, on an ADASERVE server whose
policy caps, lowers it to the requests that fit (``allowance``): the request part-way
through its chunks (already admitted) and then the waiting ones in the queue's order
(deadline order with ``admit=deadline``), as many as keep the predicted step at the
running requests plus them within the tightest TPOT SLO among the running requests and
them. With none running one is always let in, as the engine's cap does. SGLang marks its
batch full where its answer is reached and clears the mark only when a request leaves; on
a capping server the prefill hook clears it each round (prefill_yield.py), so the cap is
judged every round as the engine judges it every iteration.
"""

from __future__ import annotations

import numpy as np

from adaserve.scheduler.admission import past_step_cap
from adaserve.sglang.admission import served_options
from adaserve.sglang.rounds import StepSizes, rounds_of, tpot_slos_s


def allowance(sizes: StepSizes, running_slos_s: np.ndarray, candidates_slos_s: np.ndarray,
              chunked: bool) -> int:
    """How many of the candidates (``candidates_slos_s`` [m], their TPOT SLOs in SGLang's
    order, NaN: best effort; the first the chunked request where ``chunked``) may join the
    ``running_slos_s`` [n]: the longest prefix whose predicted round stays within the
    tightest SLO among the running and it. The chunked request is admitted already and
    always counts; with none running, one is always let in."""
    running = np.asarray(running_slos_s, np.float64)
    cands = np.asarray(candidates_slos_s, np.float64)
    n, k = running.size, int(chunked)
    if n == 0:
        k = max(k, 1)
    predict = sizes.predictor()
    while k < cands.size:
        step_s = predict(n + k + 1)
        if step_s is not None and past_step_cap(step_s, np.concatenate([running,
                                                                       cands[:k + 1]])):
            break
        k += 1
    return min(k, cands.size)


def caps() -> bool:
    """Whether ADASERVE_POLICY caps the batch (option ``cap``)."""
    options = served_options()
    return options is not None and options.cap


def num_allocatable_reqs_hook(original, self, running_bs: int, beam_width=None,
                              running_batch=None, num_held_rows: int = 0) -> int:
    """AROUND ``Scheduler.get_num_allocatable_reqs``: SGLang's answer, lowered on an
    ADASERVE server whose policy caps to ``allowance`` (module docstring)."""
    free = original(self, running_bs, beam_width, running_batch, num_held_rows)
    if free <= 0 or beam_width is not None or not caps():
        return free
    from adaserve.sglang.worker import adaserve_draft_worker  # imports SGLang's workers

    if adaserve_draft_worker(self) is None:
        return free
    batch = running_batch if running_batch is not None else self.running_batch
    chunked = self.chunked_req
    candidates = [*(() if chunked is None else (chunked,)), *self.waiting_queue][:free]
    if not candidates:  # nothing to admit: SGLang's answer stands
        return free
    return min(free, allowance(rounds_of(self).sizes, tpot_slos_s(batch.reqs),
                               tpot_slos_s(candidates), chunked is not None))

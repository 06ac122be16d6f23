"""The policy's ``prefill=yield`` inside SGLang: whether this round's prefill waits for the
decoding requests.

SGLang does not prefill beside the decodes (``enable_mixed_chunk`` stays off for
ADASERVE: server_args.py). Each round of its loop runs either an extend batch (a chunk of
prompt tokens, prefill first whenever one can be built) or the running requests' decode,
so a prefill round delays every decoding request's next token by the whole extend. Before
it builds one, SGLang asks ``Scheduler._should_defer_prefill`` (its own seam: with
``--prefill-decode-interval`` it defers prefill for that many decode rounds after each
extend). The AROUND hook here keeps SGLang's answer and, on a server running ADASERVE
whose policy has ``prefill=yield`` (the preset ``adaserve`` has), also defers where the
embedded engine's chunk would wait: ``Policy.prefill_waits``, the same rule
(scheduler/prefill_yield.py) on the same inputs:

- the decoding requests: SGLang's running batch, viewed as the draft worker views it
  (``view.view_of``, the worker's first-token times);
- the prompts a prefill would serve, in the order SGLang serves them: the request whose
  prompt is part-way through its chunks first, then the waiting queue (in
  ``deadline_order`` with ``admit=deadline``, as admission.py orders it), as many as
  SGLang has free request slots for; each with its TTFT deadline (``scheduler_recv_time``
  + its TTFT SLO, admission.py's ``ttft_slos``) and the prompt tokens it has left;
- the measured durations of SGLang's own rounds: a decode round (the plain step) and an
  extend round. The decoders' step that prefilled is an extend round and then their
  decode round; a round is timed from one call of the hook to the next (every round of
  SGLang's loop calls it once), filed by the kind of batch that ran (``last_batch``).

Nothing is decided until both kinds of round have been seen, as in the engine. Deferring
while a prompt is part-way through its chunks is safe: SGLang's own interval does it, and
the chunked request stays stashed until the next extend.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from adaserve.scheduler.admission import deadline_order
from adaserve.scheduler.prefill_yield import PromptQueue
from adaserve.sglang.admission import admission, ttft_slos
from adaserve.sglang.refusal import refuses
from adaserve.sglang.rounds import Rounds, rounds_of
from adaserve.sglang.step_cap import caps
from adaserve.sglang.view import view_of


def prompt_queue(chunked_req, waiting: Sequence, free_slots: int, now: float,
                 chunk: int | None, by_deadline: bool) -> PromptQueue:
    """The prompts a prefill would serve, in SGLang's order (module docstring): the chunked
    request, then up to ``free_slots`` waiting ones, in ``deadline_order`` if
    ``by_deadline``. A waiting request's prefix found in SGLang's cache is not counted off
    (it is matched only when the batch is built), so its tokens left are an upper bound.
    Each request's arrival and TTFT SLO are read once, for the order and the slack."""
    reqs = ([] if chunked_req is None else [chunked_req]) + list(waiting)
    if not reqs:
        return PromptQueue.empty(max(1, chunk or 1))
    arrived = np.array([r.time_stats.scheduler_recv_time for r in reqs], np.float64)  # [m]
    slos = ttft_slos(reqs, chunk)  # [m]
    first = 0 if chunked_req is None else 1
    rest = np.arange(first, len(reqs))  # the waiting ones
    if by_deadline and rest.size > 1:
        rest = rest[deadline_order(arrived[rest], now, slos[rest])]
    pick = np.concatenate([np.arange(first), rest[:max(0, free_slots)]])
    left = np.array([max(0, len(reqs[i].origin_input_ids) - reqs[i].prefix_len)
                     for i in pick], np.int64)
    width = chunk if chunk and chunk > 0 else int(left.sum())  # unchunked: one round
    return PromptQueue(arrived[pick] + slos[pick] - now, left, max(1, width))


def prefill_waits(worker, running_reqs: Sequence, prompts: PromptQueue, rounds: Rounds,
                  now: float) -> bool:
    """Whether the ADASERVE draft worker's policy holds this round's prefill back for
    ``running_reqs`` at the cost of ``prompts``: ``Policy.prefill_waits`` (False for a
    policy that does not yield) with a decode round as the plain step and an extend round
    plus a decode round as the step that prefilled. False until both kinds of round are
    measured."""
    if not running_reqs or not len(prompts.slack_s) or not rounds.measured:
        return False
    t, policy = rounds.times, worker.policy
    batch = view_of(running_reqs, worker.classes, worker.default_class,
                    worker.first_token_at, now)
    return policy.prefill_waits(batch, prompts, t.plain_s, t.prefill_s + t.plain_s)


def should_defer_prefill_hook(original, self, running_batch):
    """AROUND ``Scheduler._should_defer_prefill``: SGLang's own deferral, else, on an
    ADASERVE server whose policy yields, the embedded rule's (module docstring)."""
    from adaserve.sglang.worker import adaserve_draft_worker  # imports SGLang's workers

    deferred = original(self, running_batch)
    now = time.perf_counter()
    rounds = rounds_of(self)
    # every round: its kind and length; the departures only where the door reads them
    rounds.tick(now, self.last_batch, running_batch.reqs if refuses() else ())
    if caps() and not running_batch.is_empty():
        # SGLang clears its full mark only when a request leaves; the cap is judged every
        # round (step_cap.py), so the mark it set is cleared for SGLang to ask again
        running_batch.batch_is_full = False
    worker = None if deferred else adaserve_draft_worker(self)
    # only a yielding policy pays for the queue and the view, each round; a decode round is
    # measured only after the first draft, which makes the policy (worker.py)
    if worker is None or running_batch.is_empty() or not rounds.measured or \
            worker.policy.prefill == "chunk":
        return deferred
    free = self.max_running_requests - running_batch.batch_size()
    prompts = prompt_queue(self.chunked_req, self.waiting_queue, free, now,
                           self.chunked_prefill_size, admission() == "deadline")
    waits = prefill_waits(worker, running_batch.reqs, prompts, rounds, now)
    if waits:
        rounds.defer(len(prompts.slack_s))
    return waits

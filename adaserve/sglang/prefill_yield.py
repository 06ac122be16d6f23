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

import logging
import time
from collections.abc import Sequence

import numpy as np

from adaserve.scheduler.admission import deadline_order
from adaserve.scheduler.prefill_yield import PromptQueue, StepTimes
from adaserve.sglang.admission import admission, ttft_slos
from adaserve.sglang.view import view_of

logger = logging.getLogger(__name__)
# a deferral is said in the log at the first and then every this many, with the count, so
# a server's log shows whether the option acts (SGLang's own log lines show prefill rounds)
SAY_EVERY = 100


class Rounds:
    """The durations of one SGLang scheduler's rounds: ``times.plain_s`` of decode rounds,
    ``times.prefill_s`` of extend rounds (running means, scheduler/prefill_yield.py)."""

    def __init__(self) -> None:
        self.times = StepTimes()
        self.began: float | None = None  # when the round now ending was scheduled
        self.deferred = 0  # prefill rounds the policy deferred

    def defer(self, waiting: int) -> None:
        self.deferred += 1
        if self.deferred % SAY_EVERY == 1:
            logger.info("ADASERVE: prefill=yield deferred a prefill round for the decodes "
                        "(%d so far; %d prompts waiting; decode round %.0f ms, extend round "
                        "%.0f ms)", self.deferred, waiting, 1e3 * self.times.plain_s,
                        1e3 * self.times.prefill_s)

    @property
    def measured(self) -> bool:
        """Both kinds of round seen: nothing is decided before (as in the engine)."""
        return not (np.isnan(self.times.plain_s) or np.isnan(self.times.prefill_s))

    def tick(self, now: float, last_batch) -> None:
        """A new round is being scheduled at ``now``; ``last_batch`` is the batch the
        ending round ran (None where it ran nothing: an idle wait is no round)."""
        if self.began is not None and last_batch is not None and \
                not last_batch.forward_mode.is_idle():
            self.times.observe(now - self.began, int(last_batch.forward_mode.is_extend()))
        self.began = now


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


def _adaserve_draft_worker(scheduler):
    """The ADASERVE draft worker of this scheduler process, else None (a plain server, or
    another speculative algorithm)."""
    from adaserve.sglang.worker import AdaServeDraftWorker

    inner = getattr(getattr(scheduler, "draft_worker", None), "_draft_worker", None)
    return inner if isinstance(inner, AdaServeDraftWorker) else None


def should_defer_prefill_hook(original, self, running_batch):
    """AROUND ``Scheduler._should_defer_prefill``: SGLang's own deferral, else, on an
    ADASERVE server whose policy yields, the embedded rule's (module docstring)."""
    deferred = original(self, running_batch)
    now = time.perf_counter()
    rounds = self.__dict__.setdefault("_adaserve_rounds", Rounds())
    rounds.tick(now, self.last_batch)
    worker = None if deferred else _adaserve_draft_worker(self)
    # only a yielding policy pays for the queue and the view, each round; a decode round is
    # measured only after the first draft, which makes the policy (worker.py)
    if worker is None or running_batch.is_empty() or not rounds.measured or \
            worker.policy.prefill != "yield":
        return deferred
    free = self.max_running_requests - running_batch.batch_size()
    prompts = prompt_queue(self.chunked_req, self.waiting_queue, free, now,
                           self.chunked_prefill_size, admission() == "deadline")
    waits = prefill_waits(worker, running_batch.reqs, prompts, rounds, now)
    if waits:
        rounds.defer(len(prompts.slack_s))
    return waits

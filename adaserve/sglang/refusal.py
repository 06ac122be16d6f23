"""The policy's ``refuse=on`` inside SGLang: a request predicted on arrival to get its
first token past its TTFT SLO is refused at the door, 503 with Retry-After, as the
embedded server refuses it (``adaserve.scheduler.admission.refusal``: the same function
on the same inputs). And its TPOT door, ``refuse_tpot`` (``admission.tpot_door``, the
same function): ``pace``, a request whose TPOT SLO is shorter than the time a token has
taken the running requests at least as tight as it (over the pace rounds.py measures from
the tokens SGLang's running requests gained each round); ``missed``, one that more of the
last finished requests at least as tight missed than kept (their TPOTs, as rounds.py saw
their tokens come), while one that tight is running or waiting. It is refused the same
way, its message naming the wait.

SGLang's scheduler, on receiving a request, asks ``Scheduler._abort_on_queued_limit``
before it queues it (its own door: ``--max-queued-requests``, answered 503). The AROUND
hook here keeps SGLang's answer and, on a server running ADASERVE whose policy refuses,
also refuses where ``refusal`` predicts the request late:

- ahead of it: the waiting queue (all of it first come, first served; with
  ``admit=deadline`` the ones still in time whose deadline is no later than its own, as
  admission.py orders them), each with its arrival (``scheduler_recv_time``), its prompt
  and its TTFT SLO (admission.py's ``ttft_slos``); the prompt part-way through its chunks
  has its tokens left to prefill; the free request slots;
- what the scheduler has seen (rounds.py, ticked every round): the mean gap between its
  last departures, and the seconds a prompt token has cost its last extend rounds. SGLang
  sizes an extend to the tokens it takes, so the prediction's unit of prefill is one
  token, not the embedded engine's fixed chunk. Nobody is refused before two requests
  have left and an extend has run, as in the engine.

The refusal is SGLang's own abort with status 503 (its tokenizer answers it as an HTTP
error) and the message the embedded server answers (``late_reason``, ``at_capacity``);
the HTTP process reads the Retry-After back from the message (error_shape.py), and with
``--enable-metrics`` it is counted as the embedded server counts it,
``adaserve_rejected_requests_total{reason="ttft"}`` (``"tpot"`` for the TPOT door). A request
SGLang already refused (its own checks set ``to_finish``) or retracted back to the queue
is never judged again.
"""

from __future__ import annotations

import time
from functools import lru_cache
from http import HTTPStatus

import numpy as np

from adaserve.scheduler.admission import late_reason, refusal, tpot_door
from adaserve.server.errors import at_capacity
from adaserve.sglang.admission import admission, served_options, ttft_slos
from adaserve.sglang.rounds import Rounds, rounds_of, tpot_slo_s, tpot_slos_s


def refuses() -> bool:
    """Whether ADASERVE_POLICY refuses at the door (``refuse=on``, or a ``refuse_tpot``)."""
    options = served_options()
    return options is not None and (options.refuse or options.refuse_tpot != "off")


def refusal_reason(scheduler, req, rounds: Rounds, now: float) -> tuple[str, str] | None:
    """(message, metric reason) where ADASERVE_POLICY's doors refuse ``req`` now: the TTFT
    door first (``refuse=on``), then the TPOT door (``refuse_tpot``); else None."""
    options = served_options()
    if options is None:
        return None
    if options.refuse:
        verdict = predicted_late(scheduler, req, rounds, now)
        if verdict is not None:
            return late_reason(*verdict), "ttft"
    if options.refuse_tpot != "off":
        chunked = scheduler.chunked_req
        held = [*scheduler.running_batch.reqs, *scheduler.waiting_queue,
                *(() if chunked is None else (chunked,))]
        verdict = tpot_door(options.refuse_tpot, tpot_slo_s(req), rounds.flow,
                            tpot_slos_s(held))
        if verdict is not None:
            return verdict[0], "tpot"
    return None


def predicted_late(scheduler, req, rounds: Rounds, now: float) -> tuple[float, float] | None:
    """(seconds past its TTFT SLO, the SLO) that ``req``, arriving at ``scheduler`` now, is
    predicted to wait for its first token, else None (module docstring)."""
    chunk = scheduler.chunked_prefill_size
    waiting = list(scheduler.waiting_queue)
    chunked = scheduler.chunked_req
    prefilling = 0 if chunked is None else max(0, len(chunked.origin_input_ids)
                                              - chunked.prefix_len)
    running = scheduler.running_batch.batch_size() + (chunked is not None)
    own = float(ttft_slos([req], chunk)[0])
    late = refusal(now,
                   np.array([r.time_stats.scheduler_recv_time for r in waiting], np.float64),
                   np.array([len(r.origin_input_ids) for r in waiting], np.int64),
                   prefilling, scheduler.max_running_requests - running, admission(),
                   len(req.origin_input_ids), 1, rounds.flow, own,
                   ttft_slos(waiting, chunk))
    return None if late is None else (late, own)


def abort_on_queued_limit_hook(original, self, recv_req) -> bool:
    """AROUND ``Scheduler._abort_on_queued_limit``: SGLang's own refusal, else, on an
    ADASERVE server whose policy refuses, the embedded door's (module docstring). True:
    the request was refused and SGLang does not queue it."""
    if original(self, recv_req):
        return True
    if not refuses() or recv_req.to_finish is not None or recv_req.is_retracted \
            or recv_req.output_ids:
        return False
    from adaserve.sglang.worker import adaserve_draft_worker  # imports SGLang's workers

    if adaserve_draft_worker(self) is None:
        return False
    rounds = rounds_of(self)
    verdict = refusal_reason(self, recv_req, rounds, time.perf_counter())
    if verdict is None:
        rounds.flow.admitted(tpot_slo_s(recv_req))  # what the door let in (refuse_tpot=probe)
        return False
    from sglang.srt.managers.scheduler import _make_abort_req

    message, reason = at_capacity(verdict[0]), verdict[1]
    self.send_abort_output(_make_abort_req(recv_req, finished_reason={
        "type": "abort", "status_code": HTTPStatus.SERVICE_UNAVAILABLE, "message": message}),
        recv_req)
    recv_req.time_stats.trace_ctx.abort(abort_info={"reason": message})
    if getattr(getattr(self, "metrics_reporter", None), "enable_metrics", False):
        rejected().labels(reason).inc()
    return True


@lru_cache(maxsize=1)
def rejected():
    """The embedded server's ``adaserve_rejected_requests{reason}``, in SGLang's /metrics:
    made at the first refusal (prometheus_client picks multiprocess mode at first import),
    in the scheduler process, whose samples SGLang's Prometheus multiprocess directory
    collects with every other process's."""
    from adaserve.server.slo_metrics import rejected_counter

    return rejected_counter()

"""What one SGLang scheduler has seen of its own rounds: how long its decode and extend
rounds take (``prefill_yield.py`` reads them), its decode rounds by batch size
(``step_cap.py`` reads them), how fast its extends prefill, and how often
its requests leave (``refusal.py`` reads both, as the embedded engine's door reads its
``FlowMeter``).

Every round of SGLang's loop asks ``Scheduler._should_defer_prefill`` once, so the AROUND
hook there ticks this clock: a round is timed from one call to the next and filed by the
kind of batch that ran (``last_batch``), an extend round also by the prompt tokens it
prefilled. Where the policy refuses at the door (the only reader of departures and of the
running requests' pace) the hook also hands it the running requests: a request seen
running counts as a departure when it is seen finished, and the tokens the requests seen
running gained over a round, with their TPOT SLOs, give the pace a token takes each
class (``FlowMeter.token_s``, which ``refuse_tpot=pace`` reads). A departure also files
the TPOT the request got, from the rounds in which it was first seen with a token and last
gained one (``FlowMeter.missed``, which ``refuse_tpot=missed`` reads). One ``Rounds`` lives
on each scheduler (``rounds_of``).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable

import numpy as np

from adaserve.scheduler.admission import FlowMeter
from adaserve.scheduler.prefill_yield import StepTimes

logger = logging.getLogger(__name__)
PER_SIZE = 16  # decode rounds kept per batch size (StepSizes): the recent past
MIN_ROUNDS = 3  # rounds at a size before its mean is read
# a deferral is said in the log at the first and then every this many, with the count, so
# a server's log shows whether the option acts (SGLang's own log lines show prefill rounds)
SAY_EVERY = 100


class StepSizes:
    """Decode rounds' seconds by the number of requests each decoded, and the round predicted
    at a size from them (``predict``): what ``cap`` reads (step_cap.py)."""

    def __init__(self) -> None:
        self._rounds: dict[int, deque[float]] = {}

    def observe(self, n: int, seconds: float) -> None:
        if n > 0:
            self._rounds.setdefault(n, deque(maxlen=PER_SIZE)).append(seconds)

    def predict(self, n: int) -> float | None:
        """Seconds of a decode round of ``n`` requests; None before two sizes are measured
        (and ``n`` itself is not)."""
        return self.predictor()(n)

    def predictor(self) -> Callable[[int], float | None]:
        """``predict`` on the rounds seen now, the means and the line computed once (the
        cap asks it at several sizes in one admission)."""
        means = {k: sum(v) / len(v) for k, v in self._rounds.items() if len(v) >= MIN_ROUNDS}
        line = None
        if len(means) >= 2:
            sizes = sorted(means)
            line = np.polyfit(np.array(sizes, np.float64), [means[k] for k in sizes], 1)

        def at(n: int) -> float | None:
            if n in means:
                return means[n]
            return None if line is None else float(line[1] + line[0] * n)
        return at


class PrefillFlow(FlowMeter):
    """The door's ``FlowMeter`` with SGLang's unit of prefill: an iteration is one prompt
    token. SGLang sizes an extend round to the tokens it takes (several short prompts in
    one round, a long one in chunks), so the seconds a prompt token costs, over the last
    ``window`` extend rounds, is what predicts a queue's prefill; summed over the rounds,
    not averaged per round, so a chunk's few-token remainder (mostly a forward's fixed cost)
    weighs what its tokens weigh."""

    def __init__(self, window: int = 32) -> None:
        super().__init__(window)
        self._extends: deque[tuple[float, int]] = deque(maxlen=window)

    def extended(self, seconds: float, tokens: int) -> None:
        if tokens > 0:
            self._extends.append((seconds, tokens))

    @property
    def iteration_s(self) -> float | None:
        """Seconds per prompt token; None before an extend round."""
        e = self._extends
        return sum(s for s, _ in e) / sum(t for _, t in e) if e else None


class Rounds:
    """The durations of one SGLang scheduler's rounds: ``times.plain_s`` of decode rounds,
    ``times.prefill_s`` of extend rounds (running means, scheduler/prefill_yield.py), and
    ``flow``: the prefill rate and the departures (``PrefillFlow``)."""

    def __init__(self) -> None:
        self.times = StepTimes()
        self.flow = PrefillFlow()
        self.sizes = StepSizes()  # decode rounds by batch size (option cap: step_cap.py)
        self.began: float | None = None  # when the round now ending was scheduled
        self.deferred = 0  # prefill rounds the policy deferred
        self._running: dict[str, object] = {}  # rid -> Req seen running, not yet finished
        self._lengths: dict[str, int] = {}  # rid -> its output tokens when last seen
        # rid -> (when first seen with a token, its tokens then, when it last gained one):
        # its TPOT when it leaves
        self._times: dict[str, tuple[float, int, float]] = {}

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

    def tick(self, now: float, last_batch, running: Iterable = ()) -> None:
        """A new round is being scheduled at ``now``; ``last_batch`` is the batch the
        ending round ran (None where it ran nothing: an idle wait is no round), and
        ``running`` the requests decoding now."""
        if self.began is not None and last_batch is not None and \
                not last_batch.forward_mode.is_idle():
            seconds, extend = now - self.began, last_batch.forward_mode.is_extend()
            self.times.observe(seconds, int(extend))
            if not extend:
                # SGLang has filtered the finished requests out of the batch by now, so a
                # round in which one finished is filed one size smaller than it ran
                self.sizes.observe(last_batch.batch_size(), seconds)
            if extend:
                self.flow.extended(seconds, int(getattr(last_batch, "extend_num_tokens", 0)
                                                or 0))
            if self._running:  # the round's pace: an extend round gave the decoders none
                self.flow.iteration(seconds, *self._gained(now))
        self.began = now
        self._departures(now, running)

    def _gained(self, now: float) -> tuple[np.ndarray, np.ndarray]:
        """([n] TPOT SLOs in seconds, NaN for best effort, [n] output tokens gained) of the
        requests seen running, since they were last seen (those that finished in the round
        too: their last tokens count); a request that gained one was last served ``now``."""
        slos, gained = np.empty(len(self._running)), np.empty(len(self._running))
        for i, (rid, r) in enumerate(self._running.items()):
            n = len(r.output_ids)
            gained[i] = max(0, n - self._lengths.get(rid, n))
            self._lengths[rid] = n
            if gained[i]:
                first, had, _ = self._times.get(rid, (now, n, now))
                self._times[rid] = (first, had, now)
            slo = tpot_slo_s(r)
            slos[i] = np.nan if slo is None else slo
        return slos, gained

    def _departures(self, now: float, running: Iterable) -> None:
        """Requests seen running that have finished (or been aborted) leave; one retracted
        to the waiting queue is not finished and is kept until it is."""
        for rid in [rid for rid, r in self._running.items() if r.finished()]:
            r = self._running.pop(rid)
            self._lengths.pop(rid, None)
            first, had, last = self._times.pop(rid, (now, 0, now))
            n = len(r.output_ids) - had  # tokens gained since first seen with one
            self.flow.finished(now, tpot_slo_s(r), (last - first) / n if n > 0 else None)
        for r in running:
            if not r.finished() and r.rid not in self._running:
                self._running[r.rid] = r
                self._lengths[r.rid] = len(r.output_ids)
                if r.output_ids:  # its first token came in the round that just ended
                    self._times[r.rid] = (now, len(r.output_ids), now)


def tpot_slo_s(req) -> float | None:
    """A request's TPOT SLO in seconds, as the HTTP hooks resolved it into its
    ``custom_params`` (its own or its class's); None: best effort."""
    params = getattr(req.sampling_params, "custom_params", None) or {}
    ms = params.get("tpot_slo_ms")
    return None if ms is None else float(ms) / 1e3


def tpot_slos_s(reqs: Iterable) -> np.ndarray:
    """[m] the requests' TPOT SLOs in seconds (``tpot_slo_s``), NaN for best effort."""
    return np.array([np.nan if (s := tpot_slo_s(r)) is None else s for r in reqs], np.float64)


def rounds_of(scheduler) -> Rounds:
    """The ``Rounds`` of this scheduler process, made at its first round."""
    return scheduler.__dict__.setdefault("_adaserve_rounds", Rounds())

"""Which waiting request to admit next when the running batch has room for fewer than
wait, and which arriving request to refuse (issue 38: the scheduler weighs TTFT).

First come, first served lets a backlog make every request late: under a burst each new
request waits behind all the older ones, so once the queue is longer than a TTFT SLO's
worth of work, no request admitted meets it. ``deadline_order`` admits the requests that
can still meet their TTFT SLO first, earliest deadline first, and defers the ones whose
deadline has passed (they are late whatever happens now) until nobody in time waits;
among themselves those go oldest first, so none starves once the burst is over.

With ``refuse`` on, a request whose predicted first-token time (``predicted_ttft``) is
already past its TTFT SLO when it arrives is refused at the door, 503 with Retry-After, so
its client can go elsewhere or come back, and the queue does not grow with work that
would be late anyway and make later requests late too. A refusal counts as a miss in every
reading of attainment.

With ``refuse_tpot=pace`` (``on``), a request with a TPOT SLO shorter than the time a token has
taken the requests decoding now whose SLO is no looser than its own (``tpot_refusal``:
their recent iterations' seconds over the tokens they got) is refused at the door the same
way, 503 with Retry-After (the mean gap between recent finishes: the batch is one smaller
after the next). Requests like it are missing their pace here now; admitted, it would
miss too, and its prompt and its tokens would lengthen the others' steps besides. Where
one class's SLO is at the machine's one-request step (the served CPU's urgent class: 44.9
ms against 45-65 ms steps with a handful running), admitting it under load buys nobody an
SLO and makes the next class miss too. Judged by the batch's mean pace instead, AdaServe,
which gives tight requests more tokens than loose ones and holds loose ones to a pace,
refused almost every tight request of the simulated Fig. 8 traces at their lowest rate
(21% attainment against 99%). With no request that tight in the window, nothing says it
would miss, and it is admitted. A refusal counts as a miss in every reading, as the TTFT
door's does; the door reads only what the server measured.

With ``refuse_tpot=missed`` the door reads outcomes instead of pace (``missed_refusal``):
a request is refused where more of the last finished requests at least as tight as it
missed its SLO than kept it. A pace over 32 iterations swings with every burst while a
request's TPOT is its whole output's: on the simulated Fig. 8 traces the pace form
refused requests that would have kept their SLO and cost up to 0.9 points, where the tight
classes keep theirs 90-99% of the time; the outcome form cannot act there until most of
them miss. To learn when the tide turns, a request is admitted while nobody that tight is
held (the probe), so a door shut on stale evidence reopens once a probe keeps its SLO.

With ``refuse_tpot=both`` a request is refused only where both say so: most of the last
finished requests at least as tight missed (the outcomes, ``missed_refusal``) and the ones
decoding now still miss their pace (``tpot_refusal``). The outcomes remember a burst long
after it has passed: 32 finishes are ~35 s of a served sweep's urgent class at 1.5 req/s.
On a served run at a quiet hour (results/test-served-intel-warm-163, seed 163) six urgent
requests missed by 0.3-6.4 ms in the run's first burst, and the door then refused 7 urgent
requests over the next 12 s while the probes it let in kept their SLO at 23-34 ms a token:
`adaserve` kept 35 of 48 urgent requests where `incremental`, with no door, kept 42. The
pace is what the server does now, the outcomes what requests like this one got; the
first swings with every burst, the second lags each one, and a refusal on both is a
refusal where the server both was and still is missing that SLO.

With ``refuse_tpot=latest`` a request is refused where most of the last finished requests
at least as tight missed and the latest of them missed too. A majority of 32 outcomes
flips only after as many keeps as there were misses, and with the door shut those come
one probe at a time; the latest outcome is what a request admitted after the misses got,
so one probe that keeps its SLO opens the door until the next miss finishes.

With ``refuse_tpot=probe`` a kept outcome lets in one request, not all of them: a request is
refused where ``latest`` would, and also where, most of the last finished at least as tight
having missed, one at least as tight has been admitted since the latest of them finished
(``FlowMeter.probed``). Under ``latest`` a kept probe opens the door for a whole decode, until
the next miss finishes, and under heavy load what it lets in then misses (on served test
seeds 166-168 at 3 req/s, 86 requests missed their TPOT SLO against 53 under ``missed``).
Each kept outcome admitting one more holds the tight class's number while the evidence says
it misses, and lets it grow by one a kept finish, as acknowledgements clock a sender.

With ``cap`` on, a waiting request is admitted only while the decode step predicted with
it (the engine's latency model, the batch's contexts and its prompt) stays within the
tightest TPOT SLO among the requests held and it (``past_step_cap``). Where a decode step
grows with the batch (this CPU: 26 ms at one request, 51 ms at 14, 82 ms at 32), admitting
every arrival can tip a server into a state it does not leave by itself: the steps grow
past the tight class's SLO, slow steps keep requests longer, the batch grows more. On the
served CPU sweep one seed at 4 req/s held a median of 21 requests with 67.5-ms steps and 3
of 72 urgent requests in SLO, the next a median of 8 with 36-ms steps and 34 of 72
(docs/scheduler.md). Holding the request back queues it instead, where its TTFT SLO, not
everyone's TPOT SLO, pays for the overload.
"""

from __future__ import annotations

import math
import re
from collections import deque

import numpy as np

# The TTFT SLO of a request that brings none (loadgen.records.DEFAULT_TTFT_SLO_MS, which
# the end-to-end reading holds such requests to). The embedded server gives every request
# with a TPOT SLO a TTFT SLO of its own (adaserve/server/slo_ttft.py); the simulator's and
# the library's requests have none and are held to this.
DEFAULT_TTFT_SLO_S = 5.0
ADMISSIONS = ("fifo", "deadline")
# the forms of the TPOT door (option ``refuse_tpot``): none, the running peers' pace, the
# recently finished peers' outcomes, both at once, the outcomes where the latest agrees, or
# that with one probe let in for each kept outcome
TPOT_DOORS = ("off", "pace", "missed", "both", "latest", "probe")


def ttft_slo_s(own: float | None) -> float:
    """The TTFT SLO a request is scheduled by: its own (``SLO.ttft_s``), else the default."""
    return DEFAULT_TTFT_SLO_S if own is None else own


def deadline_order(submitted_s: np.ndarray, now: float,
                   ttft_slo_s: float | np.ndarray = DEFAULT_TTFT_SLO_S) -> np.ndarray:
    """[m] the order to admit m waiting requests (``submitted_s`` [m], their arrival times):
    those whose deadline (arrival + ``ttft_slo_s``, one for all or [m], each its own) is
    still ahead, earliest first, then the late ones, oldest first. Ties keep arrival order
    (a stable sort)."""
    deadline = np.asarray(submitted_s, float) + ttft_slo_s  # [m]
    late = deadline < now  # [m]
    # in time first (late False sorts before True), then by deadline; stable on arrival
    return np.lexsort((deadline, late))


def past_step_cap(step_s: float, tpot_slos_s: np.ndarray) -> bool:
    """Whether a decode step of ``step_s`` seconds is longer than the tightest of
    ``tpot_slos_s`` [n] (NaN: no TPOT SLO, best effort), so admitting the request it was
    predicted with would push a request it serves off its SLO; False where none has one."""
    slos = np.asarray(tpot_slos_s, np.float64)
    slos = slos[~np.isnan(slos)]
    return bool(slos.size) and step_s > float(slos.min())


def predicted_ttft(ahead: int, free_slots: int, queued_tokens: int, prompt_tokens: int,
                   prefill_chunk: int, departure_s: float | None,
                   iteration_s: float | None) -> float | None:
    """The first-token time a request arriving now is predicted to get, from what the engine
    has now and has seen: None where it has not seen enough to say (no two requests have
    left yet, or no iteration has run), so nobody is refused on no evidence.

    ``ahead`` waiting requests are admitted before it (all of them first come, first
    served; with ``deadline_order`` the ones still in time, whose deadlines are all
    earlier). It needs a slot: the requests ahead and it take ``ahead + 1`` of the
    ``free_slots``, the rest come as running requests leave, one every ``departure_s``
    (the mean gap between recent finishes: where outputs end is not known, only how often
    they have ended). Meanwhile the ``queued_tokens`` of the prompts prefilling and ahead
    are prefilled, ``prefill_chunk`` tokens an iteration of ``iteration_s``; its own
    ``prompt_tokens`` follow once it has a slot and they are through, in whole iterations.
    """
    if departure_s is None or iteration_s is None:
        return None
    slot_wait = max(0, ahead + 1 - free_slots) * departure_s
    chunk = max(1, prefill_chunk)
    queue = queued_tokens / chunk * iteration_s
    own = -(-max(1, prompt_tokens) // chunk) * iteration_s  # ceil: whole iterations
    return max(slot_wait, queue) + own


class FlowMeter:
    """The recent past the doors' predictions read: the gaps between the last ``window``
    finishes and the TPOT SLOs and TPOTs of the requests that finished with both, and the
    last ``window`` decoding iterations' durations with each decoding request's TPOT SLO
    and the tokens it got."""

    def __init__(self, window: int = 32) -> None:
        self.window = window
        self._finishes: deque[float] = deque(maxlen=window)
        self._iterations: deque[float] = deque(maxlen=window)
        # per iteration: ([n] TPOT SLOs in seconds, NaN for best effort, [n] tokens got)
        self._paces: deque[tuple[np.ndarray, np.ndarray]] = deque(maxlen=window)
        # per finish with a TPOT SLO and a TPOT (two tokens or more): (SLO s, TPOT s)
        self._outcomes: deque[tuple[float, float]] = deque(maxlen=window)
        # the order of events: each outcome's and each admission's place in it, so the door
        # can tell what was admitted after an outcome without a clock both servers share
        self._seq = 0
        self._outcome_seq: deque[int] = deque(maxlen=window)
        # per admission of a request with a TPOT SLO: (SLO s, place in the order)
        self._admitted: deque[tuple[float, int]] = deque(maxlen=window)

    def finished(self, t: float, tpot_slo_s: float | None = None,
                 tpot_s: float | None = None) -> None:
        """A request that held a slot left at ``t``; with its TPOT SLO and the TPOT it got
        (None: best effort, or fewer than two tokens, so no TPOT) where it had both."""
        self._finishes.append(t)
        if tpot_slo_s is not None and tpot_s is not None:
            self._seq += 1
            self._outcomes.append((tpot_slo_s, tpot_s))
            self._outcome_seq.append(self._seq)

    def admitted(self, tpot_slo_s: float | None) -> None:
        """A request with TPOT SLO ``tpot_slo_s`` (None: best effort, not filed) was let in."""
        if tpot_slo_s is not None:
            self._seq += 1
            self._admitted.append((tpot_slo_s, self._seq))

    def iteration(self, seconds: float, tpot_slos_s: np.ndarray | None = None,
                  tokens: np.ndarray | None = None) -> None:
        """An iteration of ``seconds`` in which the decoding requests, with TPOT SLOs
        ``tpot_slos_s`` [n] (NaN: best effort), got ``tokens`` [n] each."""
        self._iterations.append(seconds)
        empty = np.zeros(0)
        self._paces.append((empty if tpot_slos_s is None else np.asarray(tpot_slos_s, float),
                            empty if tokens is None else np.asarray(tokens, float)))

    @property
    def departure_s(self) -> float | None:
        """Mean seconds between finishes; None before two finishes."""
        f = self._finishes
        return (f[-1] - f[0]) / (len(f) - 1) if len(f) >= 2 else None

    @property
    def iteration_s(self) -> float | None:
        it = self._iterations
        return sum(it) / len(it) if it else None

    def token_s(self, tpot_slo_s: float) -> float | None:
        """Seconds a token took the decoding requests whose TPOT SLO is no looser than
        ``tpot_slo_s`` over the last ``window`` iterations: their iterations' seconds over
        the tokens they got (an iteration that also prefilled counts, since its length is
        theirs too). A scheduler that gives tight requests more tokens than loose ones (the
        SLO phase), or holds loose ones to a pace (``pace``), sets each class its own pace,
        so a request is judged by the pace of those at least as tight as it, never by the
        batch's mean. None until the window is full, and where no such request decoded in
        it: nothing says the server cannot give it its pace."""
        if len(self._iterations) < self.window:
            return None
        busy, got = 0.0, 0.0
        for seconds, (slos, tokens) in zip(self._iterations, self._paces):
            tight = slos <= tpot_slo_s  # NaN (best effort) compares False
            busy += seconds * int(tight.sum())
            got += float(tokens[tight].sum())
        if busy == 0.0:
            return None
        return math.inf if got == 0.0 else busy / got


    def missed(self, tpot_slo_s: float) -> tuple[int, int]:
        """(missed, of): of the last ``window`` finishes, the ``of`` with a TPOT SLO no
        looser than ``tpot_slo_s``, and how many of them had a TPOT longer than it. Judged
        against ``tpot_slo_s``, not their own: a tighter request that missed its own SLO
        but kept this one's is evidence this one can be kept."""
        if not self._outcomes:
            return 0, 0
        slo, tpot = np.array(self._outcomes, np.float64).T  # [k] each
        tight = slo <= tpot_slo_s
        return int((tpot[tight] > tpot_slo_s).sum()), int(tight.sum())

    def latest_missed(self, tpot_slo_s: float) -> bool:
        """Whether the latest finish with a TPOT SLO no looser than ``tpot_slo_s`` had a
        TPOT longer than it (judged as ``missed``); False with none in the window."""
        for slo, tpot in reversed(self._outcomes):
            if slo <= tpot_slo_s:
                return tpot > tpot_slo_s
        return False

    def probed(self, tpot_slo_s: float) -> bool:
        """Whether a request with a TPOT SLO no looser than ``tpot_slo_s`` was admitted
        after the latest finish that tight (of the last ``window`` admissions); with no such
        finish in the window, whether any was admitted at all."""
        latest = next((seq for (slo, _), seq in zip(reversed(self._outcomes),
                                                    reversed(self._outcome_seq))
                       if slo <= tpot_slo_s), 0)
        return any(slo <= tpot_slo_s and seq > latest for slo, seq in self._admitted)


def refusal(now: float, waiting_submitted_s: np.ndarray, waiting_prompt_tokens: np.ndarray,
            prefilling_tokens: int, free_slots: int, admission: str, prompt_tokens: int,
            prefill_chunk: int, flow: FlowMeter,
            ttft_slo_s: float = DEFAULT_TTFT_SLO_S,
            waiting_ttft_slo_s: np.ndarray | None = None) -> float | None:
    """Seconds past its TTFT SLO (``ttft_slo_s``) that a request arriving ``now`` is
    predicted to wait for its first token (``predicted_ttft``), or None where it is
    predicted in time or nothing can be said yet. The waiting requests
    (``waiting_submitted_s`` [m], ``waiting_prompt_tokens`` [m], ``waiting_ttft_slo_s`` [m]
    their TTFT SLOs, None: ``ttft_slo_s`` each) ahead of it are all of them first come,
    first served, and with ``admission`` "deadline" the ones still in time whose deadline
    is no later than its own; ``prefilling_tokens`` are left to prefill in the slots."""
    submitted = np.asarray(waiting_submitted_s, float)  # [m]
    theirs = ttft_slo_s if waiting_ttft_slo_s is None else np.asarray(waiting_ttft_slo_s, float)
    deadline = submitted + theirs  # [m]
    ahead = (np.ones(submitted.shape, bool) if admission != "deadline"
             else (deadline >= now) & (deadline <= now + ttft_slo_s))  # [m]
    queued = prefilling_tokens + int(np.asarray(waiting_prompt_tokens, np.int64)[ahead].sum())
    t = predicted_ttft(int(ahead.sum()), free_slots, queued, prompt_tokens, prefill_chunk,
                       flow.departure_s, flow.iteration_s)
    return None if t is None or t <= ttft_slo_s else t - ttft_slo_s


def tpot_refusal(tpot_slo_s: float | None, flow: FlowMeter) -> float | None:
    """The seconds a token takes the server's decoding requests at least as tight as a
    request (``flow.token_s``) where that is longer than its TPOT SLO (``tpot_slo_s``;
    None: best effort, never refused), else None; also None where the meter has no such
    evidence. Option ``refuse_tpot`` (module docstring): requests like it are missing their
    pace here now, and its own prompt and tokens would only lengthen everyone's steps."""
    if tpot_slo_s is None:
        return None
    token_s = flow.token_s(tpot_slo_s)
    return None if token_s is None or token_s <= tpot_slo_s else token_s


def missed_refusal(tpot_slo_s: float | None, flow: FlowMeter,
                   held_tpot_slos_s: np.ndarray) -> tuple[int, int] | None:
    """(missed, of) (``FlowMeter.missed``) where more of the recently finished requests at
    least as tight as a request (TPOT SLO ``tpot_slo_s``; None: best effort, never
    refused) missed its SLO than kept it, and the server holds (decoding or waiting) a
    request at least as tight (``held_tpot_slos_s`` [m], NaN: best effort); else None.
    Option ``refuse_tpot=missed`` (module docstring): more likely than not it would miss,
    and its prompt and tokens would lengthen everyone's steps. The one held is the probe:
    with none held, nothing new would be learnt while the door is shut, so the request is
    admitted and its outcome is the next evidence."""
    if tpot_slo_s is None:
        return None
    held = np.asarray(held_tpot_slos_s, np.float64)
    if not (held <= tpot_slo_s).any():  # NaN (best effort) compares False
        return None
    missed, of = flow.missed(tpot_slo_s)
    return (missed, of) if 2 * missed > of else None


def tpot_door(door: str, tpot_slo_s: float | None, flow: FlowMeter,
              held_tpot_slos_s: np.ndarray) -> tuple[str, float] | None:
    """(message, seconds to wait) where the TPOT door of form ``door`` (``TPOT_DOORS``)
    refuses a request with TPOT SLO ``tpot_slo_s`` now (``tpot_refusal``, or
    ``missed_refusal`` with the held requests' SLOs ``held_tpot_slos_s`` [m], for ``latest``
    where ``FlowMeter.latest_missed`` too, for ``probe`` where that or ``FlowMeter.probed``),
    else None.
    The one verdict both servers answer with (the engine's 503, SGLang's through the
    plugin)."""
    if door == "pace":
        token_s = tpot_refusal(tpot_slo_s, flow)
        if token_s is None:
            return None
        retry = tpot_retry_s(flow)
        return tpot_reason(token_s, tpot_slo_s, retry), retry
    if door in ("missed", "both", "latest", "probe"):
        verdict = missed_refusal(tpot_slo_s, flow, held_tpot_slos_s)
        if verdict is None or (door == "both" and tpot_refusal(tpot_slo_s, flow) is None) \
                or (door == "latest" and not flow.latest_missed(tpot_slo_s)) \
                or (door == "probe" and not (flow.latest_missed(tpot_slo_s)
                                             or flow.probed(tpot_slo_s))):
            return None
        retry = tpot_retry_s(flow)
        return missed_reason(*verdict, tpot_slo_s, retry), retry
    return None


def tpot_retry_s(flow: FlowMeter) -> float:
    """The wait a TPOT refusal names: the mean gap between recent finishes (the batch is one
    smaller after the next), 1 s before two finishes."""
    return flow.departure_s or 1.0


def tpot_reason(token_s: float, tpot_slo_s: float, retry_s: float) -> str:
    """Why a request was refused by the TPOT door (``tpot_refusal``'s answer), with the
    wait it names (``tpot_retry_s``), which ``late_of`` reads back."""
    return (f"its TPOT SLO of {tpot_slo_s * 1e3:g} ms is shorter than the "
            f"{token_s * 1e3:.1f} ms a token its running requests that tight get now; retry "
            f"after {retry_s:.1f} s")


def missed_reason(missed: int, of: int, tpot_slo_s: float, retry_s: float) -> str:
    """Why a request was refused by the TPOT door's ``missed`` form
    (``missed_refusal``'s answer), with the wait it names, which ``late_of`` reads back."""
    return (f"its TPOT SLO of {tpot_slo_s * 1e3:g} ms was missed by {missed} of the "
            f"{of} requests that tight to finish last; retry after {retry_s:.1f} s")


def late_reason(late_s: float, ttft_slo_s: float) -> str:
    """Why a request was refused at the door (``refusal``'s answer), in the words every
    server answers it with (the embedded one's 503, SGLang's through the plugin)."""
    return (f"its first token is predicted {late_s:.1f} s past the TTFT SLO of "
            f"{ttft_slo_s:g} s")


_LATE = re.compile(r"its first token is predicted (\d+(?:\.\d+)?) s past the TTFT SLO")
_RETRY = re.compile(r"its TPOT SLO of .*; retry after (\d+(?:\.\d+)?) s")


def late_of(message: str) -> float | None:
    """The seconds a refusal's message says to wait: past its TTFT SLO (``late_reason``) or
    the TPOT door's wait (``tpot_reason``), else None. SGLang's scheduler can send its HTTP
    process only the message, so the Retry-After is read back from it there."""
    m = _LATE.search(message) or _RETRY.search(message)
    return None if m is None else float(m.group(1))


def retry_after_s(late_s: float) -> int:
    """The Retry-After of a refusal predicted ``late_s`` past its TTFT SLO: whole seconds, at
    least 1, of the value its message states (so a server that reads the message back
    answers the same)."""
    return max(1, math.ceil(round(late_s, 1)))

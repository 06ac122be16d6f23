"""The scheduling loop: one engine iteration (DESIGN.md "The algorithm"), single-threaded
and synchronous.

admit -> prefill chunk -> plan -> draft trees -> select -> verify -> commit -> emit.
With prefill_mode "first", an iteration that prefilled stops after the prefill.
This module decides; an `Executor` (executor.py) runs the model work it decides on: the
PyTorch models (torch_executor.py) or the simulator's hardware and acceptance models
(adaserve.sim). Time comes from the clock the core is given, never read here directly.
`Engine` (engine.py) runs this in its own thread; tests and the simulator drive it directly.
"""

from __future__ import annotations

import collections
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from adaserve.engine.config import DEFAULT_BUDGET, EngineConfig
from adaserve.engine.executor import Executor, PrefillChunk
from adaserve.engine.loader import Models
from adaserve.engine.profile_data import Profile, profile_latency
from adaserve.engine.request import Output, Phase, Request
from adaserve.engine.sampling import SamplingParams
from adaserve.engine.torch_executor import TorchExecutor
from adaserve.scheduler import (SLO, STATIC_CHAINS, BatchView, CalibratedLatency, Calibration,
                                CandidateBatch, SchedulerConfig, make_policy)
from adaserve.scheduler.admission import (FlowMeter, deadline_order, late_reason, past_step_cap,
                                          refusal, tpot_door, ttft_slo_s)
from adaserve.scheduler.prefill_yield import PromptQueue, StepTimes


class QueueFull(RuntimeError):
    """The waiting queue is at max_waiting, or (a policy that refuses) the request is
    predicted to miss its TTFT SLO, or its TPOT SLO is shorter than the pace the running
    requests at least as tight have had; retry later, after ``retry_after_s`` when it is
    known. ``reason`` names which (the server's rejected-requests metric counts by it)."""

    def __init__(self, message: str, retry_after_s: float | None = None,
                 reason: str = "queue_full") -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.reason = reason


@dataclass(frozen=True, slots=True)
class IterationStats:
    """What one iteration did; the server's metrics and the profiler read these."""

    seconds: float
    predicted_seconds: float  # t_spec the policy planned with (0 before any measurement)
    running: int  # requests verified
    waiting: int
    depth: int
    width: int
    verify_tokens: int  # budget used
    emitted_tokens: int
    prefill_tokens: int
    context_tokens: int


class EngineCore:
    """The scheduling half. Give it ``models`` (the real models, run by a TorchExecutor) or
    an ``executor``; ``clock`` returns seconds (perf_counter, or a simulator's virtual time).
    """

    def __init__(self, cfg: EngineConfig, models: Models | None = None,
                 profile: Profile | None = None, *, executor: Executor | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 latency: CalibratedLatency | None = None) -> None:
        """``latency``: the policy's iteration-latency predictor (default: the profile's
        models, rescaled by every measured iteration)."""
        if (models is None) == (executor is None):
            raise ValueError("give EngineCore exactly one of models and executor")
        self.cfg, self.models, self.profile, self.clock = cfg, models, profile, clock
        # A profile saved under the old knee rule says nothing reliable about B.
        budget = cfg.budget or (profile.budget if profile and profile.budget_trusted
                                else DEFAULT_BUDGET)
        sched = SchedulerConfig(budget=budget, max_depth=cfg.max_depth, max_width=cfg.max_width,
                                min_depth=cfg.min_depth, draft_budget=cfg.draft_budget,
                                rules=cfg.rules,
                                cost_aware_depth=cfg.cost_aware_depth)
        self.max_tree = max_tree_nodes(sched)
        # t_spec: the profile's latency model, rescaled by every measured iteration
        self.latency = latency or profile_latency(profile, cfg.latency_refit, cfg.context_table)
        self.policy = make_policy(cfg.policy, sched, self.latency)
        # A draft the policy can never ask for (B = 1: a root fills the budget) stays idle:
        # no prefill, no KV. The iteration is then incremental's, forward for forward,
        # instead of incremental's plus a draft forward over every prompt chunk.
        self.executor = executor or TorchExecutor(cfg, models, self.max_tree,
                                                  use_draft=self.policy.may_draft)
        self.default_slo = SLO.from_ms(cfg.default_slo_ms)
        self.waiting: collections.deque[Request] = collections.deque()
        self.slots: list[Request] = []  # index = KV slot; [0, n_decode) decode, then prefill
        self.n_decode = 0
        self.by_id: dict[str, Request] = {}
        self.stats: collections.deque[IterationStats] = collections.deque(maxlen=4096)
        self.flow = FlowMeter()  # recent departures and iteration times, for the door
        self.step_times = StepTimes()  # plain and prefilling steps, for prefill=yield
        # how well draft path probabilities f(v) predict what the target accepts
        self.calibration = Calibration()
        # called with each decoding iteration's stats, on the thread that runs step()
        self.on_iteration: Callable[[IterationStats], None] | None = None

    # ---- requests in and out -------------------------------------------------------------

    def add(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
            slo: SLO | None = None, refuse: bool = True) -> Request:
        """Queue a request; ValueError for input the engine cannot serve, QueueFull.
        ``refuse`` False: the door's TTFT prediction was made already (``Engine.submit``)."""
        if request_id in self.by_id:
            raise ValueError(f"request id {request_id!r} is already in use")
        self.check(prompt_ids, params, len(self.waiting), refuse, slo)
        # any int seeds (negative or huge ones too): the sampler keys on it as a uint64
        seed = params.seed % (1 << 64) if params.seed is not None else random.getrandbits(63)
        r = Request(request_id, list(prompt_ids), params, slo or self.default_slo, seed,
                    t_submit=self.clock())
        self.waiting.append(r)
        self.by_id[request_id] = r
        self.flow.admitted(r.slo.tpot_s)  # what the door let in (refuse_tpot=probe)
        return r

    def check(self, prompt_ids: list[int], params: SamplingParams, waiting: int,
              refuse: bool = True, slo: SLO | None = None) -> None:
        """Raise ValueError / QueueFull for a request this engine would refuse; with
        ``refuse`` and a policy that refuses, QueueFull too for one predicted to miss its
        TTFT SLO (``slo.ttft_s``, else the default: scheduler/admission.py), or that its TPOT
        door refuses (``refuse_tpot``: the pace its decoding requests at least as tight have
        had is slower than its TPOT SLO, or most of its finished ones that tight missed
        it)."""
        if not isinstance(params, SamplingParams):
            raise ValueError("params must be a SamplingParams")
        if not prompt_ids:
            raise ValueError("the prompt is empty")
        vocab = self.executor.vocab
        if min(prompt_ids) < 0 or max(prompt_ids) >= vocab:
            raise ValueError(f"prompt token ids must be in [0, {vocab})")
        if len(prompt_ids) + params.max_tokens > self.cfg.max_context:
            raise ValueError(
                f"prompt ({len(prompt_ids)} tokens) + max_tokens ({params.max_tokens}) exceeds "
                f"the context limit of {self.cfg.max_context} tokens")
        if waiting >= self.cfg.max_waiting:
            raise QueueFull(f"{waiting} requests are already waiting")
        if refuse and self.policy.refuses:
            queue = list(self.waiting)
            own = ttft_slo_s((slo or self.default_slo).ttft_s)
            late = refusal(self.clock(), np.array([r.t_submit for r in queue]),
                           np.array([r.n_prompt for r in queue], np.int64),
                           sum(r.n_prompt - 1 - r.target_len for r in self.slots[self.n_decode:]),
                           self.free_slots, self.policy.admission, len(prompt_ids),
                           self.cfg.prefill_chunk, self.flow, own, _ttft_slos(queue))
            if late is not None:
                raise QueueFull(late_reason(late, own), retry_after_s=late, reason="ttft")
        if refuse and self.policy.tpot_door != "off":
            verdict = tpot_door(self.policy.tpot_door, (slo or self.default_slo).tpot_s,
                                self.flow, _tpot_slos([*self.slots, *self.waiting]))
            if verdict is not None:
                raise QueueFull(verdict[0], retry_after_s=verdict[1], reason="tpot")

    def fail_all(self, error: str) -> list[Output]:
        """End every request with finish_reason "error" and free all cache (after a failed
        iteration the cache contents cannot be trusted)."""
        outs = []
        for r in list(self.waiting) + list(self.slots):
            outs.append(self._finish(r, "error", error=error))
        self.waiting.clear()
        for r in self.slots:
            r.slot = -1
        self.slots.clear()
        self.n_decode = 0
        return outs

    def abort(self, request_id: str) -> Output | None:
        """Drop a request wherever it is and free its cache; None if it is unknown."""
        r = self.by_id.get(request_id)
        if r is None:
            return None
        if r.phase is Phase.WAITING:
            self.waiting.remove(r)
        else:
            self._free(r)
        return self._finish(r, "abort")

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.slots)

    @property
    def n_slots(self) -> int:
        return self.executor.n_slots

    @property
    def free_slots(self) -> int:
        return self.n_slots - len(self.slots)

    # ---- one iteration -------------------------------------------------------------------

    def step(self) -> list[Output]:
        t0 = self.clock()
        self.executor.begin_iteration()
        self._admit()
        prefilled = 0 if self._chunk_waits(t0) else self._prefill()
        outputs: list[Output] = []
        reqs = self.slots[: self.n_decode]
        # prefill-first (vLLM 0.8): the running requests wait while any prompt is prefilled
        if not reqs or prefilled and self.cfg.prefill_mode == "first":
            if prefilled:
                self.step_times.observe(self.clock() - t0, prefilled)
            return outputs
        view = self._view(reqs, t0)
        plan = self.policy.plan(view)
        drafted = self.executor.draft(reqs, plan) if plan.speculates else None
        cands = (drafted.candidates if drafted is not None
                 else CandidateBatch.roots([r.tokens[-1] for r in reqs]))
        sel = self.policy.select(view, plan, cands)
        res = self.executor.verify(reqs, cands, sel.mask, drafted)
        for r, nodes in zip(reqs, res.accepted):
            r.target_len += 1 + len(nodes)  # the root and the accepted nodes are committed
        if drafted is not None:
            self.executor.commit_draft(reqs, drafted, res)
            # a tree is a geometric trial per depth: a accepted of its selected depth d,
            # a failure only when a < d (counting nodes instead would log a failure on
            # every fully accepted path of a wide tree)
            accepted = np.array([len(a) for a in res.accepted], np.int64)  # [n]
            self.policy.acceptance.observe([r.id for r in reqs],
                                           np.where(sel.mask, cands.depth, 0).max(1), accepted)
            self.policy.observe(view.request_ids, sel, accepted)
            self._observe_calibration(cands, sel.mask, res.accepted)
        now = self.clock()
        done = []
        got = np.zeros(len(reqs))  # [n] tokens each request got, for the TPOT door
        for i, (r, new) in enumerate(zip(reqs, res.new_tokens)):
            r.steps += 1
            out = self._emit(r, new, now)
            if not out.finished and self._past_slo(r, now):
                out = self._finish(r, "abort", out.token_ids, out.text,
                                   error="dropped: too far past its TPOT SLO")
            got[i] = len(out.token_ids)
            if out.finished:
                done.append(r)
            outputs.append(out)
        for r in done:
            self._free(r)
        seconds = self.clock() - t0
        self.flow.iteration(seconds, view.tpot_slo_s, got)
        self.step_times.observe(seconds, prefilled)
        ctx, verified = int(view.context_tokens.sum()), int(res.verified.sum())
        self.latency.observe(ctx, plan.draft_step_tokens(len(reqs)), verified, seconds,
                             prefilled, len(reqs))
        st = IterationStats(seconds, plan.t_spec_s, len(reqs), len(self.waiting), plan.depth,
                            plan.width, verified, int(got.sum()), prefilled, ctx)
        self.stats.append(st)
        if self.on_iteration is not None:
            self.on_iteration(st)
        return outputs

    def _chunk_waits(self, now: float) -> bool:
        """Whether the policy holds this iteration's prefill chunk back for the decoding
        requests, weighed against the prompts' TTFT SLOs (option prefill=yield or recover:
        scheduler/prefill_yield.py)."""
        if (self.policy.prefill == "chunk" or not self.n_decode
                or len(self.slots) == self.n_decode):
            return False  # chunks every iteration, nobody decodes, or no prompt is left
        prompts = self._prefill_order(now)
        queue = PromptQueue(
            np.array([r.t_submit for r in prompts]) + _ttft_slos(prompts) - now,
            np.array([r.n_prompt - 1 - r.target_len for r in prompts], np.int64),
            self.cfg.prefill_chunk)
        return self.policy.prefill_waits(self._view(self.slots[: self.n_decode], now), queue,
                                         self.step_times.plain_s, self.step_times.prefill_s)

    def _view(self, reqs: list[Request], now: float) -> BatchView:
        n = len(reqs)
        slo = _tpot_slos(reqs)
        lat = np.array([0.0 if r.t_first is None else now - r.t_first for r in reqs])
        dec = np.array([r.decoded for r in reqs], np.int64)
        ctx = np.array([r.target_len for r in reqs], np.int64)
        # R: tokens max_tokens still allows (an upper bound when EOS may end it sooner)
        left = np.array([r.params.max_tokens - (len(r.tokens) - r.n_prompt) for r in reqs],
                        np.int64)
        return BatchView(tuple(r.id for r in reqs), slo.reshape(n), lat.reshape(n), dec, ctx,
                         np.maximum(left, 0), np.array([r.slo.relative for r in reqs], bool))

    def _past_slo(self, r: Request, now: float) -> bool:
        """The authors' early termination (EngineConfig.slo_drop_slack): decode latency
        beyond SLO x (tokens decoded, the first included, + slack)."""
        slack, slo = self.cfg.slo_drop_slack, r.slo.tpot_s
        if slack is None or slo is None or r.t_first is None:
            return False
        return now - r.t_first > slo * (len(r.tokens) - r.n_prompt + slack)

    def _observe_calibration(self, cands: CandidateBatch, selected: np.ndarray,
                             accepted: list[np.ndarray]) -> None:
        hit = np.zeros_like(selected)
        rows = np.repeat(np.arange(len(accepted)), [len(a) for a in accepted])
        hit[rows, np.concatenate(accepted)] = True
        chosen = selected.copy()
        chosen[:, 0] = False  # the root is committed already, not a guess
        rows, cols = np.nonzero(chosen)
        f = np.clip(np.exp(cands.log_prob[rows, cols]), 0.0, 1.0)
        self.calibration.observe(f, hit[rows, cols], rows, selected.shape[0])

    # ---- admission and prefill -----------------------------------------------------------

    def _admit(self) -> None:
        free = self.n_slots - len(self.slots)
        capped = self.policy.caps_batch
        # with the cap, fewer than the free slots may be taken, so the order matters too
        if (self.policy.admission == "deadline" and free > 0
                and len(self.waiting) > (1 if capped else free)):
            # the requests still in time for their TTFT SLO first (scheduler/admission.py)
            waiting = list(self.waiting)
            order = deadline_order(np.array([r.t_submit for r in waiting]), self.clock(),
                                   _ttft_slos(waiting))
            self.waiting = collections.deque(waiting[i] for i in order)
        while self.waiting and len(self.slots) < self.n_slots:
            if capped and self.slots and self._past_cap(self.waiting[0]):
                break  # the next one waits (in order: none overtakes it)
            r = self.waiting.popleft()
            r.slot, r.phase = len(self.slots), Phase.PREFILL
            self.executor.open_slot(r.slot)
            self.slots.append(r)

    def _past_cap(self, r: Request) -> bool:
        """Whether admitting ``r`` makes the predicted decode step, every request held and
        it committing its root over their contexts, longer than the tightest TPOT SLO among
        them (option cap: scheduler/admission.py)."""
        held = [*self.slots, r]
        n = len(held)
        # a prompt not prefilled yet is priced at the context it will have
        step_s = self.latency.predict(sum(max(q.target_len, q.n_prompt) for q in held), (),
                                      n, n)
        return past_step_cap(step_s, _tpot_slos(held))

    def _prefill_order(self, now: float) -> list[Request]:
        """The prompts still prefilling, in the order the chunk serves them: oldest first,
        or with admit=deadline in ``deadline_order``, so a prompt already past its TTFT
        deadline yields the chunk to those in time."""
        prefilling = self.slots[self.n_decode:]
        if self.policy.admission == "deadline" and len(prefilling) > 1:
            order = deadline_order(np.array([r.t_submit for r in prefilling]), now,
                                   _ttft_slos(prefilling))
            prefilling = [prefilling[i] for i in order]
        return prefilling

    def _prefill(self) -> int:
        """Prefill a forward of at most prefill_chunk rows (requests x longest chunk, the
        padded size the matmuls see), oldest request first (with admit=deadline, in
        ``deadline_order``: the prompts still in time for their TTFT SLO first). The first
        sets the chunk width q; later ones join with up to q tokens while the rows fit, so
        padding stays small (cutting a fourth 40-token prompt to 8 tokens padded to 41 made
        164 rows for 128 tokens, and hit a slow MKL shape besides). The last prompt token is
        left out: it is the root of the request's first speculation."""
        budget = self.cfg.prefill_chunk
        batch: list[tuple[Request, list[int]]] = []
        width = rows = 0
        for r in self._prefill_order(self.clock()):
            left = r.n_prompt - 1 - r.target_len
            if left and width and (rows + 1) * width > budget:
                break
            take = min(left, width or budget)
            width, rows = width or take, rows + (take > 0)
            batch.append((r, r.tokens[r.target_len: r.target_len + take]))
        work = [(r, c) for r, c in batch if c]
        if work:
            self.executor.prefill([PrefillChunk(r.slot, r.target_len, tuple(c), r.n_prompt)
                                   for r, c in work])
            for r, c in work:
                r.target_len += len(c)
        for r, _ in batch:
            if r.target_len == r.n_prompt - 1:
                self._promote(r)
        return sum(len(c) for _, c in work)

    def _promote(self, r: Request) -> None:
        """Prefill done: swap r into the first prefill slot and grow the decode range."""
        j, k = r.slot, self.n_decode
        if j != k:
            other = self.slots[k]
            self.executor.swap_slots(j, k, r.target_len, other.target_len)
            self.slots[j], self.slots[k] = other, r
            other.slot, r.slot = j, k
        r.phase = Phase.DECODE
        self.n_decode += 1

    # ---- leaving ------------------------------------------------------------------------

    def _free(self, r: Request) -> None:
        """Release r's slot, keeping decode slots [0, n_decode) and all slots compact."""
        i = r.slot
        if i < self.n_decode:
            self._move(self.n_decode - 1, i)
            self.n_decode -= 1
            self._move(len(self.slots) - 1, self.n_decode)
        else:
            self._move(len(self.slots) - 1, i)
        self.slots.pop()
        r.slot = -1

    def _move(self, src: int, dst: int) -> None:
        if src == dst or src >= len(self.slots):
            return
        m = self.slots[src]
        self.executor.copy_slot(src, dst, m.target_len)
        self.slots[dst], m.slot = m, dst

    def _emit(self, r: Request, new: list[int], now: float) -> Output:
        """Append the iteration's tokens, apply EOS / max_tokens / stop strings."""
        p = r.params
        # at most `room` more tokens (the first is always taken), cut at the first EOS
        room = max(1, p.max_tokens - (len(r.tokens) - len(r.prompt_ids)))
        added = new[:room]
        reason = "length" if len(added) == room else None
        eos = self.executor.eos_ids
        if eos and not p.ignore_eos:
            for j, t in enumerate(added):
                if t in eos:
                    added, reason = added[:j], "stop"
                    break
        r.tokens.extend(added)
        if added:
            r.t_first = r.t_first or now
            r.t_last = now
        tokenizer = self.executor.tokenizer
        if tokenizer is None:  # token ids only (the simulator): no text, no stop strings
            return (Output(r.id, tuple(added), "") if reason is None
                    else self._finish(r, reason, tuple(added)))
        full = tokenizer.decode(r.output_ids, skip_special_tokens=True)
        release = len(full)
        for s in p.stop:
            at = full.find(s, max(0, len(r.text) - len(s)))
            if at >= 0 and at < release:
                release, reason = at, "stop"
        if reason is None:
            # hold back an incomplete UTF-8 sequence and anything a stop string may begin
            hold = max((len(s) - 1 for s in p.stop), default=0)
            release = len(full.rstrip("\ufffd")) - hold
        delta = full[len(r.text): max(release, len(r.text))]
        r.text += delta
        if reason is not None:
            return self._finish(r, reason, tuple(added), delta)
        return Output(r.id, tuple(added), delta)

    def _finish(self, r: Request, reason: str, added: tuple[int, ...] = (),
                delta: str = "", error: str | None = None) -> Output:
        stats = r.stats()
        if r.phase is not Phase.WAITING:  # it held a slot: one more departure, an outcome
            self.flow.finished(self.clock(), stats.slo_tpot_s, stats.tpot_s)
        r.phase, r.finish_reason = Phase.DONE, reason
        self.by_id.pop(r.id, None)
        # what it decoded after its first token, where it decoded: the output lengths the
        # policy learns from (prefill=recover)
        self.policy.forget(r.id, r.decoded if r.t_first is not None else None)
        return Output(r.id, added, delta, finished=True, finish_reason=reason, stats=stats,
                      error=error)


def _tpot_slos(requests: list[Request]) -> np.ndarray:
    """[m] each request's TPOT SLO in seconds, NaN for best effort."""
    return np.array([np.nan if r.slo.tpot_s is None else r.slo.tpot_s for r in requests],
                    np.float64)


def _ttft_slos(requests: list[Request]) -> np.ndarray:
    """[m] each request's TTFT SLO in seconds (its own, else the default)."""
    return np.array([ttft_slo_s(r.slo.ttft_s) for r in requests], np.float64)


def max_tree_nodes(sched: SchedulerConfig) -> int:
    """The most nodes one request's candidate tree can have under any policy."""
    beam = 1 + sched.max_depth * sched.max_width
    exp = sched.specinfer_expansion
    spec = 1 + sum(int(np.prod(exp[: k + 1])) for k in range(len(exp)))
    chains = max(c.k for c in STATIC_CHAINS)
    return max(beam, spec, 1 + sched.max_chain, 1 + chains)

"""The ADASERVE worker: SGLang's StandaloneWorkerV2 with AdaServe's per-request trees.

Per iteration, in the draft worker (scheduler process):
1. ``draft(batch)`` builds the BatchView (each request's TPOT SLO, l, o) from the
   ScheduleBatch and asks the policy for the SpecPlan (Eq. 8-9, depth at most the
   compiled --speculative-num-steps);
2. SGLang drafts at the plan's shape (``shapes.py``: d steps of top-w, within the compiled
   D and W); its ``organize_draft_results`` is wrapped (an AROUND hook) so that, inside an
   ADASERVE draft, ``select.organize`` also records which verify positions AdaServe keeps,
   leaving SGLang's top-(N - 1) layout unchanged;
3. after SGLang builds the verify input over [bs, N], the kept positions are compacted to
   the front of each request's block (``compact.py``) and the verify input becomes a
   ``ragged.RaggedVerifyInput``: the target forward computes only the selected tokens, at
   most the budget B (where the target cannot verify ragged -- another attention backend,
   CUDA graphs -- or with ADASERVE_VERIFY=uniform, the positions not kept are unlinked
   instead and the whole [bs, N] layout is computed: ``links.py``).

In the spec worker, ``verify`` hands SGLang's verify a ``ragged.VerifyTarget`` for its
target worker (the forward expanded back to [bs, N], and timed), and with
ADASERVE_ITERATION_LOG each decoding iteration is logged (``iterations.py``).

The organize hook only sees the draft when it runs eagerly: a captured draft-decode CUDA
graph replays SGLang's uniform selection without calling it, and AdaServe's selection is
host code (the policy) that a graph cannot hold. So the ADASERVE draft worker never uses a
draft-decode graph (``cuda_graph_runner`` is always None, which SGLang's
``prepare_for_draft`` reads as "run eagerly"). Keeping graphs for the draft would need the
graph to output the per-step lists and the selection to run after replay: a patch of
SGLang's draft graph runner, planned, not made (it can only be checked on a GPU).

Never run on a GPU. On this CPU it serves inside SGLang's own server through the CPU
runtime (``adaserve.sglang.cpu``; tests/sglang_tier/test_serve_cpu.py).
"""

from __future__ import annotations

import contextvars
import logging
import os
import time

import numpy as np
import torch
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker, StandaloneWorkerV2

from adaserve.scheduler import BatchView, SchedulerConfig, make_policy
from adaserve.scheduler.selection import Selection
from adaserve.sglang.compact import compact, verify_window
from adaserve.sglang.iterations import IterationLog, IterationRecord
from adaserve.sglang.links import unlink
from adaserve.sglang.ragged import RaggedVerifyInput, VerifyTarget
from adaserve.sglang.select import Organized, organize
from adaserve.sglang.server_args import verify_mode
from adaserve.sglang.shapes import DraftShape, DraftShapes
from adaserve.sglang.slo import configured_classes
from adaserve.sglang.view import view_of

logger = logging.getLogger(__name__)

# the draft worker whose draft() is running in this thread, for the organize hook
_ACTIVE: contextvars.ContextVar[AdaServeDraftWorker | None] = contextvars.ContextVar(
    "adaserve_active_draft", default=None)


def organize_hook(original, score_list, token_list, parents_list, num_draft_token):
    """AROUND hook on ``eagle_utils.organize_draft_results``: SGLang's result, plus
    AdaServe's keep-mask recorded on the active ADASERVE draft worker."""
    worker = _ACTIVE.get()
    if worker is None or worker.plan is None:
        return original(score_list, token_list, parents_list, num_draft_token)
    roots = torch.zeros(score_list[0].shape[0], dtype=torch.long)  # unused by selection
    t0 = time.perf_counter()
    worker.organized = organize(score_list, token_list, parents_list, num_draft_token,
                                roots, worker.policy, worker.view, worker.plan)
    worker.organize_s = time.perf_counter() - t0
    o = worker.organized
    return o.parent_list, o.top_scores_index, o.draft_tokens


def stamp_first_token(req, now: float) -> None:
    """Make the request's first-token time reach the tokenizer manager.

    SGLang stamps ``time_stats.prefill_finished_time`` when the prefill produces the first
    token, but ``SchedulerReqTimeStats.__getstate__`` sends the stats to the tokenizer
    manager only with ``--enable-metrics`` (or ``has_timing_data``); otherwise they arrive
    empty, and for a non-streaming request the tokenizer manager takes the finish as the
    first token: TTFT = the whole request, TPOT 0, every SLO "attained". Marking
    ``has_timing_data`` sends them. A stamp SGLang did not make (0) is filled with the
    time the request first decodes here, when its first token exists."""
    stats = getattr(req, "time_stats", None)
    if stats is None:
        return
    stats.has_timing_data = True
    if not stats.prefill_finished_time:
        stats.set_prefill_finished_time(now)


class AdaServeDraftWorker(StandaloneDraftWorker):
    """StandaloneDraftWorker whose draft() hands selection to adaserve.scheduler."""

    # A data descriptor, so it wins over the instance attribute SGLang set while
    # constructing (and over its adaptive-steps code setting one later): a draft-decode
    # graph would bypass the selection silently.
    @property
    def cuda_graph_runner(self):
        return None

    @cuda_graph_runner.setter
    def cuda_graph_runner(self, runner) -> None:
        pass

    def init_lm_head(self) -> None:
        """``--speculative-token-map``: SGLang's draft loop maps every draft top-k id through
        the map (``hot_token_id``), as for an EAGLE draft whose shared head it cuts to the
        map's rows; its standalone draft keeps its own head and cuts nothing (a no-op here),
        so the ids would be mapped twice. The draft's own head is cut to the map's rows
        instead: our distilled draft's 8,192 trained rows (``hot_tokens.pt``), the head it
        was trained with, at a sixth of the full head's cost per draft step."""
        super().init_lm_head()
        if getattr(self, "hot_token_id", None) is None:
            return
        head = self.draft_runner.model.lm_head
        self.hot_token_id = self.hot_token_id.to(head.weight.device)
        head.weight.data = head.weight.data[self.hot_token_id]  # [K, H]
        logger.info("ADASERVE: the draft's head cut to the %d tokens of "
                    "--speculative-token-map", self.hot_token_id.numel())

    def setup_adaserve(self) -> None:
        captured = self.__dict__.pop("cuda_graph_runner", None)
        if captured is not None:
            logger.warning("ADASERVE: the draft-decode CUDA graph SGLang captured is "
                           "released; the draft runs eagerly so each request's tree is "
                           "selected by the AdaServe policy (see adaserve/sglang/worker.py)")
            del captured
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        self.policy_name = os.environ.get("ADASERVE_POLICY", "adaserve")
        self.budget = int(os.environ.get("ADASERVE_BUDGET", 0)) or None
        self._policy = None
        self.classes, self.default_class = configured_classes()
        self.first_token_at: dict[str, float] = {}
        # rid -> tokens decoded after its first, as the last view had them
        self.decoded: dict[str, int] = {}
        self.view: BatchView | None = None
        self.plan = None
        self.organized: Organized | None = None
        # the last selection, its requests and their output lengths then: the next draft
        # reads what each accepted from how far its output grew (observe_accepted)
        self.verified: tuple[tuple, Selection, np.ndarray] | None = None
        self._shapes: DraftShapes | None | bool = None  # False: a chain draft, no shapes
        self.shape: DraftShape | None = None
        self._verify: str | None = None  # ragged, uniform or alternate (``next_ragged``)
        self.ragged = False  # this iteration's verify
        self._no_spare = False  # the last batch had n >= B (``say_if_no_spare``)
        # this iteration's phases, for the iteration log
        self.draft_s = self.extend_s = self.organize_s = self.steps_s = 0.0
        self.selected_tokens = 0

    @property
    def policy(self):
        """Made at the first draft, not in __init__: the default budget is the verify
        layout at the request pool's size, and SGLang allocates that pool
        (``alloc_memory_pool``) after the worker is constructed."""
        if self._policy is None:
            self.budget = self.budget or self.layout_budget()
            self._policy = make_policy(self.policy_name, SchedulerConfig(
                budget=self.budget, max_depth=self.speculative_num_steps,
                max_width=self.topk))
        return self._policy

    @property
    def shapes(self) -> DraftShapes | None:
        """The per-iteration draft shapes (``shapes.py``), made at the first draft: the
        compiled draft backend exists only after SGLang's ``init_attention_backends``.
        None for a chain draft (top-1), which SGLang runs on a path without selection."""
        if self._shapes is None:
            try:
                self._shapes = DraftShapes(self)
            except ValueError as e:
                logger.warning("ADASERVE: the draft runs its compiled shape every "
                               "iteration: %s", e)
                self._shapes = False
        return self._shapes or None

    def next_ragged(self) -> bool:
        """Does this iteration's target verify only the selected positions? The mode is
        decided at the first draft, when the target's attention backend and verify graphs
        exist (``server_args.verify_mode``), and said once in the log; ``alternate`` turns
        from one to the other each iteration."""
        if self._verify is None:
            from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

            runner = self.target_worker.model_runner
            self._verify, why = verify_mode(
                triton_backend=isinstance(runner.attn_backend, TritonAttnBackend),
                verify_graphs=getattr(runner, "decode_cuda_graph_runner", None) is not None)
            logger.info("ADASERVE: %s verify (%s)", self._verify, why)
        if self._verify == "alternate":
            return not self.ragged
        return self._verify == "ragged"

    def say_if_no_spare(self, n: int) -> None:
        """Algorithm 2 verifies every root first: with n >= B requests nothing is left for
        speculation, every request verifies its root only and the SLO classes cannot steer
        (correct, but silent otherwise). Said when a batch first reaches that point."""
        short = n >= self.budget
        if short and not self._no_spare:
            logger.info("ADASERVE: %d requests and B = %d: no budget beyond the roots; each "
                        "request verifies its root only, whatever its SLO class, until the "
                        "batch shrinks below B (SLO classes steer only while B > n)",
                        n, self.budget)
        self._no_spare = short

    def layout_budget(self) -> int:
        """The default budget B: every position of SGLang's verify layout at the largest
        batch (its request pool), so by default AdaServe decides the depth (Eq. 8) and,
        for best-effort requests, nothing else: they get SGLang's EAGLE-2 top-(N - 1).
        ADASERVE_BUDGET sets a hardware budget below the layout: with ragged verify the
        target then computes at most B tokens per iteration."""
        return self.speculative_num_draft_tokens * int(self.req_to_token_pool.size)

    def observe_accepted(self, batch) -> None:
        """Feed the policy what the last verification accepted (``Policy.observe``:
        adaserve's measured depth and its calibrate option learn from it). SGLang reports
        no per-request accept count to the draft worker, so it is read here, one iteration
        on: a request's output grew by its accepted nodes plus the bonus token. Requests that finished since are skipped.
        With overlap scheduling (off on a CPU) the growth can lag an iteration, which a
        decayed ratio absorbs."""
        if self.verified is None:
            return
        rids, selection, before = self.verified
        self.verified = None
        now = {r.rid: len(r.output_ids) for r in batch.reqs}
        rows = np.array([i for i, rid in enumerate(rids) if rid in now], np.int64)
        if rows.size == 0:
            return
        grown = np.array([now[rids[i]] for i in rows]) - before[rows]
        chosen = selection.counts[rows] - 1  # non-root nodes verified
        accepted = np.clip(grown - 1, 0, chosen)
        sub = Selection(selection.mask[rows], selection.expected_accepted[rows],
                        selection.target[rows])
        self.policy.observe([rids[i] for i in rows], sub, accepted)

    def batch_view(self, batch) -> BatchView:
        # SGLang's clock for request time stats (perf_counter), so the stamp below and
        # the tokenizer manager's times compare
        now = time.perf_counter()
        live = {req.rid for req in batch.reqs}
        for rid in [r for r in self.first_token_at if r not in live]:
            del self.first_token_at[rid]  # finished or aborted
            # its acceptance state, which would otherwise grow; what it decoded by its last
            # round seen here, the output length the policy learns (prefill=recover)
            self.policy.forget(rid, self.decoded.get(rid))
        for req in batch.reqs:
            if req.rid not in self.first_token_at:
                self.first_token_at[req.rid] = now
                stamp_first_token(req, now)
        view = view_of(batch.reqs, self.classes, self.default_class, self.first_token_at, now)
        self.decoded = dict(zip(view.request_ids, view.decoded_tokens.tolist()))
        return view

    def draft(self, batch, *, with_topology: bool = False):
        if batch.forward_mode.is_idle() or not batch.reqs:
            return super().draft(batch, with_topology=with_topology)
        self.observe_accepted(batch)
        self.selected_tokens = 0
        self.view = self.batch_view(batch)
        self.plan = self.policy.plan(self.view)
        self.say_if_no_spare(self.view.n)
        self.organized = None
        shapes = self.shapes
        # the plan's depth and width (Eq. 8-9) as the draft's shape: fewer draft forwards
        # and narrower beams when the budget is short; the verify layout stays [bs, N]
        self.shape = None if shapes is None else shapes.limits.fit(self.plan.depth,
                                                                     self.plan.width)
        token = _ACTIVE.set(self)
        t0 = time.perf_counter()
        try:
            if self.shape is None:
                out = super().draft(batch, with_topology=with_topology)
            else:
                with shapes.applied(self.shape, batch):
                    out = super().draft(batch, with_topology=with_topology)
        finally:
            _ACTIVE.reset(token)
        if self.organized is None:
            self.draft_s = time.perf_counter() - t0
            return out
        self.verified = (self.view.request_ids, self.organized.selection,
                         np.array([len(r.output_ids) for r in batch.reqs]))
        self.selected_tokens = self.organized.selection.tokens
        verify = self.restricted(out[0] if with_topology else out, batch)
        self.draft_s = time.perf_counter() - t0
        return (verify, *out[1:]) if with_topology else verify

    def restricted(self, verify, batch):
        """SGLang's verify input with only the selected positions verifiable: compacted
        and ragged, or unlinked inside the uniform layout."""
        keep = self.organized.keep
        self.ragged = self.next_ragged()
        if not self.ragged:
            verify.retrieve_next_token, verify.retrieve_next_sibling = unlink(
                verify.retrieve_next_token, verify.retrieve_next_sibling, keep)
            return verify
        window = verify_window(self.req_to_token_pool.req_to_token, batch.req_pool_indices,
                               batch.seq_lens, verify.draft_token_num)
        trees = compact(keep, self.organized.parent, verify.retrieve_next_token,
                        verify.retrieve_next_sibling, verify.draft_token, verify.positions,
                        batch.seq_lens, window)
        return RaggedVerifyInput.of(verify, trees)

    def draft_forward(self, forward_batch):
        """SGLang's draft loop (its d - 1 draft forwards and top-k steps, then the
        selection), timed without the selection: ``steps_s``, for the iteration log."""
        self.organize_s = 0.0
        t0 = time.perf_counter()
        out = super().draft_forward(forward_batch)
        self.steps_s = time.perf_counter() - t0 - self.organize_s
        return out

    def _draft_extend_for_decode(self, batch, batch_result, *, kv_loc_plan=None):
        t0 = time.perf_counter()
        super()._draft_extend_for_decode(batch, batch_result, kv_loc_plan=kv_loc_plan)
        self.extend_s = time.perf_counter() - t0


class AdaServeWorker(StandaloneWorkerV2):
    def __init__(self, server_args, gpu_id, nccl_port, target_worker):
        self._verifying: VerifyTarget | None = None
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        # StandaloneWorkerV2 constructs its StandaloneDraftWorker itself; ours only adds
        # methods, so re-classing the built instance avoids loading the draft twice.
        self._draft_worker.__class__ = AdaServeDraftWorker
        self._draft_worker.setup_adaserve()
        self.iteration_log = IterationLog.from_env()
        self.verify_s, self.verify_tokens = 0.0, 0

    @property
    def target_worker(self):
        """SGLang's target worker; during ``verify``, the VerifyTarget standing for it
        (SGLang's verify reads it from here)."""
        return self._verifying or self._target_worker

    def verify(self, batch, pp_proxy_tensors=None, grammar_barrier=None):
        sync = self.iteration_log is not None and torch.cuda.is_available()
        self._verifying = VerifyTarget(self._target_worker, batch, synchronize=sync)
        try:
            return super().verify(batch, pp_proxy_tensors=pp_proxy_tensors,
                                  grammar_barrier=grammar_barrier)
        finally:
            self.verify_s, self.verify_tokens = (self._verifying.forward_s,
                                                 self._verifying.tokens)
            self._verifying = None

    def forward_batch_generation(self, batch, *args, **kwargs):
        if self.iteration_log is None or batch.forward_mode.is_extend() or \
                batch.is_extend_in_batch or batch.forward_mode.is_idle():
            return super().forward_batch_generation(batch, *args, **kwargs)
        t0 = time.perf_counter()
        out = super().forward_batch_generation(batch, *args, **kwargs)
        d = self._draft_worker
        shape = d.shape or DraftShape(d.speculative_num_steps, d.topk)
        self.iteration_log.write(IterationRecord(
            seconds=time.perf_counter() - t0, running=len(batch.reqs), budget=d.budget or 0,
            depth=shape.depth, width=shape.width, selected_tokens=d.selected_tokens,
            verify_tokens=self.verify_tokens,
            layout_tokens=len(batch.reqs) * d.speculative_num_draft_tokens,
            ragged=d.ragged, emitted_tokens=int(out.accept_lens.sum()),
            draft_s=d.draft_s, draft_steps_s=d.steps_s, draft_steps=shape.depth - 1,
            select_s=d.organize_s, verify_s=self.verify_s, extend_s=d.extend_s))
        return out


def adaserve_draft_worker(scheduler) -> AdaServeDraftWorker | None:
    """The ADASERVE draft worker of an SGLang scheduler process, else None (a plain
    server, or another speculative algorithm): the scheduler hooks (prefill_yield.py,
    refusal.py) act only where it is."""
    inner = getattr(getattr(scheduler, "draft_worker", None), "_draft_worker", None)
    return inner if isinstance(inner, AdaServeDraftWorker) else None

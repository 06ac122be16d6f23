"""The ADASERVE worker: SGLang's StandaloneWorkerV2 with AdaServe's per-request trees.

Per iteration, in the draft worker (scheduler process):
1. ``draft(batch)`` builds the BatchView (each request's TPOT SLO, l, o) from the
   ScheduleBatch and asks the policy for the SpecPlan (Eq. 8-9, depth at most the
   compiled --speculative-num-steps);
2. SGLang drafts as usual; its ``organize_draft_results`` is wrapped (an AROUND hook) so
   that, inside an ADASERVE draft, ``select.organize`` also records which verify positions
   AdaServe keeps, leaving SGLang's layout unchanged;
3. after SGLang builds the verify input, the positions not kept are unlinked from
   ``retrieve_next_token`` / ``retrieve_next_sibling``.

The hook only sees the draft when it runs eagerly: a captured draft CUDA graph would skip
it, so ADASERVE runs the draft without CUDA graphs (``validate`` says so).

Not yet run on a GPU: everything above is exercised on CPU only through its parts
(tests/sglang_tier).
"""

from __future__ import annotations

import contextvars
import os
import time

import numpy as np
import torch
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker, StandaloneWorkerV2

from adaserve.scheduler import BatchView, SchedulerConfig, make_policy
from adaserve.server.slo_classes import SLOError
from adaserve.sglang.links import unlink
from adaserve.sglang.select import Organized, organize
from adaserve.sglang.slo import configured_classes, request_slo

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
    worker.organized = organize(score_list, token_list, parents_list, num_draft_token,
                                roots, worker.policy, worker.view, worker.plan)
    o = worker.organized
    return o.parent_list, o.top_scores_index, o.draft_tokens


class AdaServeDraftWorker(StandaloneDraftWorker):
    """StandaloneDraftWorker whose draft() hands selection to adaserve.scheduler."""

    def setup_adaserve(self) -> None:
        budget = int(os.environ.get("ADASERVE_BUDGET", self.speculative_num_draft_tokens))
        self.policy = make_policy(os.environ.get("ADASERVE_POLICY", "adaserve"), SchedulerConfig(
            budget=budget, max_depth=self.speculative_num_steps, max_width=self.topk))
        self.classes, self.default_class = configured_classes()
        self.first_token_at: dict[str, float] = {}
        self.view: BatchView | None = None
        self.plan = None
        self.organized: Organized | None = None

    def batch_view(self, batch) -> BatchView:
        now = time.monotonic()
        live = {req.rid for req in batch.reqs}
        for rid in [r for r in self.first_token_at if r not in live]:
            del self.first_token_at[rid]  # finished or aborted
        slo = np.empty(len(batch.reqs))
        l, o, ctx = (np.zeros(len(batch.reqs)) for _ in range(3))
        for i, req in enumerate(batch.reqs):
            try:
                _, s = request_slo(req.sampling_params.custom_params, self.classes,
                                   self.default_class)
            except SLOError:  # refused at the HTTP layer; never here, but never crash
                s = self.classes[self.default_class].slo
            slo[i] = np.nan if s.tpot_s is None else s.tpot_s
            t0 = self.first_token_at.setdefault(req.rid, now)
            l[i] = now - t0
            o[i] = max(len(req.output_ids) - 1, 0)
            ctx[i] = len(req.origin_input_ids) + len(req.output_ids)
        return BatchView(tuple(r.rid for r in batch.reqs), slo, l, o.astype(np.int64),
                         ctx.astype(np.int64))

    def draft(self, batch, *, with_topology: bool = False):
        if batch.forward_mode.is_idle() or not batch.reqs:
            return super().draft(batch, with_topology=with_topology)
        self.view = self.batch_view(batch)
        self.plan = self.policy.plan(self.view)
        self.organized = None
        token = _ACTIVE.set(self)
        try:
            out = super().draft(batch, with_topology=with_topology)
        finally:
            _ACTIVE.reset(token)
        if self.organized is not None:
            verify = out[0] if with_topology else out
            verify.retrieve_next_token, verify.retrieve_next_sibling = unlink(
                verify.retrieve_next_token, verify.retrieve_next_sibling, self.organized.keep)
        return out


class AdaServeWorker(StandaloneWorkerV2):
    def __init__(self, server_args, gpu_id, nccl_port, target_worker):
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        # StandaloneWorkerV2 constructs its StandaloneDraftWorker itself; ours only adds
        # methods, so re-classing the built instance avoids loading the draft twice.
        self._draft_worker.__class__ = AdaServeDraftWorker
        self._draft_worker.setup_adaserve()

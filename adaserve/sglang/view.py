"""The BatchView of SGLang requests: what the policy reads of each (its TPOT SLO, how long
it has decoded, its tokens so far, its context, what its ``max_new_tokens`` still allows),
built from SGLang's ``Req`` objects alone. The draft worker reads it every iteration
(``worker.batch_view``, which also stamps first tokens) and the scheduler reads it when it
asks whether a prefill waits for the decodes (``prefill_yield.py``): one view, so both ask
the policy the same question."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from adaserve.scheduler import BatchView
from adaserve.server.slo_classes import SLOClass
from adaserve.sglang.slo import scheduled_slo


def view_of(reqs: Sequence, classes: Mapping[str, SLOClass], default_class: str,
            first_token_at: Mapping[str, float], now: float) -> BatchView:
    """The view of ``reqs`` at ``now`` (SGLang's ``time.perf_counter`` clock). A request's
    decode clock starts at ``first_token_at[rid]``, when it first decoded; one not in it
    has not decoded yet (0 s). ``max_new_tokens`` is the client's cap, so a view has the
    remaining tokens only where every request has one (triage reads it as a bound)."""
    n = len(reqs)
    slo, l = np.empty(n), np.zeros(n)
    o, ctx, left = (np.zeros(n, np.int64) for _ in range(3))
    horizon_known = True
    for i, req in enumerate(reqs):
        s = scheduled_slo(req.sampling_params.custom_params, classes, default_class)
        slo[i] = np.nan if s.tpot_s is None else s.tpot_s
        l[i] = now - first_token_at.get(req.rid, now)
        o[i] = max(len(req.output_ids) - 1, 0)
        ctx[i] = len(req.origin_input_ids) + len(req.output_ids)
        cap = getattr(req.sampling_params, "max_new_tokens", None)
        horizon_known = horizon_known and cap is not None
        left[i] = max((cap or 0) - len(req.output_ids), 0)
    return BatchView(tuple(r.rid for r in reqs), slo, l, o, ctx,
                     left if horizon_known else None)

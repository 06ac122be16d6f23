"""Ragged tree verification inside SGLang's verify step.

SGLang's verify (``eagle_worker_common.run_eagle_verify``) prepares a TARGET_VERIFY
forward from the verify input, runs the target over it, samples and walks the trees over
[bs, N], moves the accepted KV and hands the predictions to the draft extend. AdaServe
changes the forward only, and everything after it keeps SGLang's [bs, N] shape:

1. After the draft, ``RaggedVerifyInput.of`` turns SGLang's verify input into one whose
   trees are compacted (``compact.py``) and which presents the ragged view: T = sum L_b
   tokens, their positions and tree mask, the KV slots they write (``prepared_out_cache_loc``,
   which SGLang's prepare takes as is) and SGLang's own ``RaggedVerifyLayout`` (per-request
   verify lengths, qo_indptr). SGLang's ``eagle_prepare_for_verify`` then builds a T-token
   forward batch with its own code.
2. During that verify the ADASERVE worker hands ``run_eagle_verify`` a ``VerifyTarget`` as
   its target worker: SGLang's target worker, whose forward, once done, expands the T rows
   of logits to [bs * N] (``RaggedTrees.expand``) and switches the verify input and the
   batch to the padded view (tokens, positions, the whole verify window as out_cache_loc).
   It also times the forward, for the iteration log.
3. ``triton_metadata_hook`` (an AROUND hook on the triton attention backend's
   ``init_forward_metadata``): SGLang's triton backend builds target-verify metadata for a
   uniform N per request; for a ragged verify its qo_indptr, mask_indptr and longest
   extend come from the layout instead. Its extend kernel already reads every request's
   rows and mask through those offsets.

The target's verify CUDA graphs are uniform too; ragged verify runs without them (on this
CPU there are none). Graphs per token bucket are designed in docs/sglang-internals.md, not built.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields, replace

import torch
from sglang.srt.speculative.eagle_info import EagleVerifyInput
from sglang.srt.speculative.ragged_verify import RaggedVerifyLayout

from adaserve.sglang.compact import RaggedTrees


@dataclass
class RaggedVerifyInput(EagleVerifyInput):
    """SGLang's EAGLE verify input over compacted trees: the ragged view until the target
    forward has run, the padded view after (``padded``)."""

    trees: RaggedTrees | None = None

    @classmethod
    def of(cls, verify: EagleVerifyInput, trees: RaggedTrees) -> RaggedVerifyInput:
        if verify.kv_loc_plan is not None:
            raise ValueError("a verify window planned by the draft (a chain draft's "
                             "kv_loc_plan) cannot be verified ragged")
        given = {f.name: getattr(verify, f.name) for f in fields(EagleVerifyInput) if f.init}
        out = cls(**given, trees=trees)
        out.draft_token, out.positions = trees.tokens, trees.token_positions
        out.custom_mask = trees.custom_mask
        out.prepared_out_cache_loc = trees.out_cache_loc
        out.retrieve_index = trees.retrieve_index
        out.retrieve_next_token = trees.retrieve_next_token
        out.retrieve_next_sibling = trees.retrieve_next_sibling
        lens = trees.lens.tolist()  # the verify's one host read of the lengths
        # no graph tiers here: the bucket is the batch's own token count
        out.ragged_verify_layout = RaggedVerifyLayout.from_verify_lens(
            verify_lens_cpu=lens, device=trees.lens.device, grid=(sum(lens),))
        return out

    def padded(self, batch) -> None:
        """After the target forward: SGLang's [bs, N] view for sampling, acceptance, the
        KV move (which reads the accepted positions' slots from ``batch.out_cache_loc``)
        and the draft extend (which writes the whole window again)."""
        t = self.trees
        self.draft_token, self.positions = t.draft_token, t.positions
        self.prepared_out_cache_loc = None
        batch.input_ids = t.draft_token
        batch.out_cache_loc = t.window


class VerifyTarget:
    """SGLang's target worker as one ``run_eagle_verify`` sees it: the same object in every
    respect but its forward, which is timed and, for a ragged verify, expanded."""

    def __init__(self, worker, batch, synchronize: bool = False) -> None:
        self._worker, self._batch, self._sync = worker, batch, synchronize
        self.forward_s = 0.0
        self.tokens = 0

    def __getattr__(self, name: str):
        return getattr(self._worker, name)

    def forward_batch_generation(self, *args, **kwargs):
        fb = kwargs.get("forward_batch")
        t0 = time.perf_counter()
        out = self._worker.forward_batch_generation(*args, **kwargs)
        if self._sync:  # a GPU forward returns before it is done
            torch.cuda.synchronize()
        self.forward_s = time.perf_counter() - t0
        verify = None if fb is None else fb.spec_info
        self.tokens = 0 if fb is None or fb.input_ids is None else int(fb.input_ids.numel())
        if isinstance(verify, RaggedVerifyInput) and verify.trees is not None:
            logits = out.logits_output
            logits.next_token_logits = verify.trees.expand(logits.next_token_logits)
            if logits.hidden_states is not None:
                logits.hidden_states = verify.trees.expand(logits.hidden_states)
            verify.padded(self._batch)
        return out


def triton_metadata_hook(original, self, forward_batch) -> None:
    """SGLang's triton backend plans a target verify as N tokens per request; a ragged one
    gets its offsets from the layout: request b's queries are rows qo_indptr[b]:[b + 1],
    its mask block of L_b * (s_b + L_b) entries starts at mask_indptr[b]."""
    original(self, forward_batch)
    verify = forward_batch.spec_info
    if not (forward_batch.forward_mode.is_target_verify()
            and isinstance(verify, RaggedVerifyInput)
            and verify.ragged_verify_layout is not None):
        return
    layout = verify.ragged_verify_layout
    bs = layout.bs
    lens = layout.verify_lens.to(torch.int64)
    per_request = lens * (forward_batch.seq_lens[:bs].to(torch.int64) + lens)
    mask_indptr = torch.zeros(bs + 1, dtype=torch.int64, device=lens.device)
    mask_indptr[1:] = torch.cumsum(per_request, 0)
    self.forward_metadata = replace(
        self.forward_metadata, qo_indptr=layout.qo_indptr_device,
        mask_indptr=mask_indptr, custom_mask=verify.custom_mask,
        max_extend_len=layout.max_q_len or max(layout.verify_lens_cpu))

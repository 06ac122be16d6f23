"""A ragged verify attends as the uniform one does, for every token it keeps.

SGLang's own Triton extend kernel (interpreted) and ours (adaserve.sglang.cpu.attention)
run the target-verify attention twice on the same random KV pool and per-token q/k/v:
over SGLang's uniform [bs, N] layout with its FULL_MASK, and over the compacted ragged
layout (``compact.py``: only the positions the scheduler selected, its ragged mask, the
offsets ``ragged.triton_metadata_hook`` gives the triton backend). Each kept token's output
must be the same in both: it sees the same prefix and the same ancestors. And the hook
itself: SGLang's metadata for a uniform verify, rewritten for a ragged one only."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd as sgl_extend
from sglang.srt.layers.attention.triton_backend import ForwardMetadata
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.speculative.eagle_info import EagleVerifyInput
from test_compact import case
from test_cpu_attention import D, TOL, indptr, kv_pool

from adaserve.sglang.cpu.attention import extend_attention_fwd
from adaserve.sglang.ragged import RaggedVerifyInput, triton_metadata_hook

H, HKV = 9, 3


def attend(fn, q, k, v, pool, qo, seq_lens, mask, mask_indptr, max_len):
    k_buf, v_buf, perm = pool
    o = torch.full((q.shape[0], H, D), float("nan"))
    fn(q, k, v, o, k_buf, v_buf, qo, indptr(seq_lens.tolist()), perm[: int(seq_lens.sum())],
       mask, True, mask_indptr, max_len, 1.0, 1.0)
    return o


@pytest.mark.parametrize("seed", range(6))
def test_each_kept_token_attends_as_in_the_uniform_layout(seed):
    bs, n, _, _, o, seq_lens, mask, _, _, _, _, _, trees, gen = case(seed)
    pool = kv_pool(gen, HKV)
    q, k, v = (torch.randn(bs * n, x, D, generator=gen) for x in (H, HKV, HKV))
    uniform = attend(sgl_extend, q, k, v, pool, indptr([n] * bs, torch.int64), seq_lens, mask,
                     indptr((n * (seq_lens + n)).tolist(), torch.int64), n)
    # the verified tokens, compacted: uniform row b * N + order[b, j] for j < L_b
    src = (torch.arange(bs)[:, None] * n + trees.order).flatten()[trees.rows]
    lens = trees.lens
    args = (q[src], k[src], v[src], pool, indptr(lens.tolist(), torch.int64), seq_lens,
            trees.custom_mask, indptr((lens * (seq_lens + lens)).tolist(), torch.int64),
            int(lens.max()))
    for fn in (sgl_extend, extend_attention_fwd):
        ragged = attend(fn, *args)
        torch.testing.assert_close(ragged, uniform[src], **TOL)


def _metadata(qo, mask_indptr, max_len):
    return ForwardMetadata(None, None, max_len, None, torch.zeros(1), torch.zeros(1), qo,
                           torch.ones(1, dtype=torch.bool), mask_indptr, None, None, None, None)


def test_the_triton_metadata_of_a_ragged_verify_comes_from_its_layout():
    bs, n, _, _, o, seq_lens, mask, positions, index, nt, ns, draft, trees, _ = case(1)
    uniform = EagleVerifyInput(draft_token=draft, custom_mask=mask, positions=positions,
                               retrieve_index=index, retrieve_next_token=nt,
                               retrieve_next_sibling=ns, retrieve_cum_len=None, spec_steps=3,
                               topk=2, draft_token_num=n, capture_hidden_mode=None,
                               seq_lens_sum=None, seq_lens_cpu=None)
    ragged = RaggedVerifyInput.of(uniform, trees)

    def sglangs(backend, fb):  # what the backend plans: N tokens per request
        backend.forward_metadata = _metadata(
            indptr([n] * bs), indptr((n * (fb.seq_lens + n)).tolist(), torch.int64), n)

    backend = SimpleNamespace(forward_metadata=None)
    for spec in (uniform, ragged):
        fb = SimpleNamespace(forward_mode=ForwardMode.TARGET_VERIFY, spec_info=spec,
                             seq_lens=seq_lens)
        triton_metadata_hook(sglangs, backend, fb)
        md = backend.forward_metadata
        lens = trees.lens if spec is ragged else torch.full((bs,), n)
        assert md.qo_indptr.tolist() == [0, *torch.cumsum(lens, 0).tolist()]
        assert md.mask_indptr.tolist() == [0, *torch.cumsum(lens * (seq_lens + lens), 0).tolist()]
        assert md.max_extend_len == int(lens.max())
    assert md.custom_mask is trees.custom_mask
    # a draft decode forward of a ragged input is SGLang's own plan
    fb = SimpleNamespace(forward_mode=ForwardMode.DECODE, spec_info=ragged, seq_lens=seq_lens)
    triton_metadata_hook(sglangs, backend, fb)
    assert backend.forward_metadata.max_extend_len == n


def test_the_verify_target_expands_the_ragged_forward_for_what_follows():
    """SGLang's verify reads [bs * N] logits and the batch's whole verify window after the
    forward; VerifyTarget's forward runs the T ragged tokens and hands back that view."""
    from adaserve.sglang.ragged import VerifyTarget

    bs, n, _, _, o, seq_lens, mask, positions, index, nt, ns, draft, trees, _ = case(2)
    verify = RaggedVerifyInput.of(
        EagleVerifyInput(draft_token=draft, custom_mask=mask, positions=positions,
                         retrieve_index=index, retrieve_next_token=nt,
                         retrieve_next_sibling=ns, retrieve_cum_len=None, spec_steps=3,
                         topk=2, draft_token_num=n, capture_hidden_mode=None,
                         seq_lens_sum=None, seq_lens_cpu=None), trees)
    seen = {}

    class Target:  # SGLang's target worker: one logits row per token it is given
        model_runner = "the target's runner"

        def forward_batch_generation(self, batch=None, forward_batch=None, **kw):
            seen["tokens"] = forward_batch.input_ids.clone()
            rows = torch.arange(forward_batch.input_ids.numel(), dtype=torch.float32)
            logits = SimpleNamespace(next_token_logits=rows[:, None].repeat(1, 5),
                                     hidden_states=None)
            return SimpleNamespace(logits_output=logits)

    batch = SimpleNamespace(input_ids=verify.draft_token,
                            out_cache_loc=verify.prepared_out_cache_loc)
    fb = SimpleNamespace(input_ids=verify.draft_token, spec_info=verify)
    target = VerifyTarget(Target(), batch)
    assert target.model_runner == "the target's runner"  # everything else is SGLang's
    out = target.forward_batch_generation(batch=None, forward_batch=fb, is_verify=True)
    assert torch.equal(seen["tokens"], trees.tokens) and target.tokens == trees.total
    logits = out.logits_output.next_token_logits
    assert logits.shape == (bs * n, 5)
    assert torch.equal(logits[:, 0].long(), trees.expand_index)
    assert torch.equal(verify.draft_token, trees.draft_token)
    assert torch.equal(verify.positions, trees.positions)
    assert verify.prepared_out_cache_loc is None
    assert torch.equal(batch.out_cache_loc, trees.window)
    assert torch.equal(batch.input_ids, trees.draft_token)

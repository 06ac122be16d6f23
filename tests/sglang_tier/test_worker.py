"""The ADASERVE draft worker's per-iteration wiring, on the CPU: real SGLang requests in,
the BatchView and plan from them, AdaServe's selection through the organize hook where
SGLang's draft calls it, and the verify links unlinked afterwards.

What cannot run here is SGLang's draft model forward (GPU kernels). In its place stands
the rest of what SGLang's draft does after the forwards: the step lists from its own
select_top_k_tokens (drafts.py), the call to ``organize_draft_results`` exactly as
``EagleDraftWorker.draft_forward`` makes it (through the module global our hook wraps),
and the retrieve links from its real tree-building kernel (Triton, interpreted)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from drafts import random_draft
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.plugins import load_plugins
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.speculative import eagle_worker_v2
from sglang.srt.speculative.standalone_worker_v2 import StandaloneDraftWorker
from test_links import build_links, children

from adaserve.sglang.slo import configured_classes
from adaserve.sglang.worker import AdaServeDraftWorker

TOPK, STEPS, N = 2, 3, 6


def make_worker(monkeypatch, budget: str | None, ragged: bool = False) -> AdaServeDraftWorker:
    load_plugins()
    monkeypatch.setenv("ADASERVE_SLO_CLASSES", "urgent=20,relaxed=400,best-effort")
    monkeypatch.setenv("ADASERVE_DEFAULT_CLASS", "relaxed")
    if budget is None:
        monkeypatch.delenv("ADASERVE_BUDGET", raising=False)
    else:
        monkeypatch.setenv("ADASERVE_BUDGET", budget)
    configured_classes.cache_clear()
    # as AdaServeWorker does: SGLang builds its StandaloneDraftWorker, we re-class it
    w = object.__new__(StandaloneDraftWorker)
    w.speculative_num_draft_tokens, w.speculative_num_steps, w.topk = N, STEPS, TOPK
    w.req_to_token_pool = SimpleNamespace(size=8)  # SGLang's pool: max concurrent requests
    w.cuda_graph_runner = "a captured draft-decode graph"
    w.__class__ = AdaServeDraftWorker
    w.setup_adaserve()
    # what ``next_ragged`` decides from the target (a triton backend, no graphs)
    w._verify = "ragged" if ragged else "uniform"
    # the plan's draft shape needs SGLang's draft runner, absent here (test_shapes.py covers
    # it): the compiled shape runs, as on a server whose plan keeps it
    w._shapes = False
    return w


@pytest.fixture
def worker(monkeypatch):
    yield make_worker(monkeypatch, "7")
    configured_classes.cache_clear()


def _req(rid, custom, prompt, out):
    r = Req(rid, "", list(range(prompt)), SamplingParams(max_new_tokens=64,
                                                          custom_params=custom))
    r.output_ids = list(range(out))
    return r


def _sglang_draft(seen):
    """SGLang's draft from the model's step outputs on (see the module docstring)."""
    gen = torch.Generator().manual_seed(7)

    def draft(self, batch, *, with_topology=False):
        bs = len(batch.reqs)
        lists = random_draft(bs, self.topk, self.speculative_num_steps, gen=gen)
        parent_list, top_scores_index, draft_tokens = eagle_worker_v2.organize_draft_results(
            *lists, self.speculative_num_draft_tokens)
        _, nt, ns = build_links(parent_list, top_scores_index, bs, self.topk,
                                self.speculative_num_steps, self.speculative_num_draft_tokens)
        seen.append((nt.clone(), ns.clone()))
        return SimpleNamespace(retrieve_next_token=nt, retrieve_next_sibling=ns)
    return draft


def test_an_iteration_selects_per_request_and_unlinks_the_rest(worker, monkeypatch):
    """ADASERVE_VERIFY=uniform (or a target that cannot verify ragged): the positions not
    selected are unlinked inside SGLang's [bs, N] layout."""
    seen = []
    monkeypatch.setattr(StandaloneDraftWorker, "draft", _sglang_draft(seen), raising=False)
    reqs = [_req("u", {"slo_class": "urgent", "tpot_slo_ms": 20.0}, 30, 9),
            _req("r", {"slo_class": "relaxed", "tpot_slo_ms": 400.0}, 12, 1),
            _req("n", None, 5, 0)]  # no SLO in custom_params: the default class
    batch = SimpleNamespace(reqs=reqs, forward_mode=ForwardMode.DECODE)

    verify = worker.draft(batch)

    v = worker.view
    assert v.request_ids == ("u", "r", "n")
    np.testing.assert_allclose(v.tpot_slo_s, [0.020, 0.400, 0.400])
    assert v.decoded_tokens.tolist() == [8, 0, 0] and v.context_tokens.tolist() == [39, 13, 5]
    assert worker.plan.depth <= STEPS and worker.plan.width <= TOPK
    keep = worker.organized.keep
    assert keep.shape == (3, N) and keep[:, 0].all()
    assert int(keep.sum()) <= 7  # the budget: ADASERVE_BUDGET verify tokens in all
    assert int(keep.sum()) < keep.numel()  # so something was dropped
    np.testing.assert_array_equal(worker.organized.selection.mask, keep.numpy())
    # the links the verify step walks reach exactly the kept positions
    for b in range(3):
        seen_pos, stack = set(), [0]
        while stack:
            p = stack.pop()
            seen_pos.add(p)
            stack += children(verify.retrieve_next_token, verify.retrieve_next_sibling, b, p)
        assert seen_pos == set(np.flatnonzero(keep[b].numpy()).tolist())
    # and SGLang's own links before unlinking reached more
    nt, ns = seen[0]
    assert sum(len(children(nt, ns, b, p)) for b in range(3) for p in range(N)) == 3 * (N - 1)


def test_outside_an_adaserve_draft_the_hook_is_sglangs_own(worker):
    lists = random_draft(2, TOPK, STEPS, gen=torch.Generator().manual_seed(3))
    ours = eagle_worker_v2.organize_draft_results(*lists, N)
    theirs = eagle_worker_v2.organize_draft_results.__wrapped__(*lists, N)
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)
    assert worker.organized is None


def test_the_draft_never_replays_a_decode_graph(worker):
    # SGLang's prepare_for_draft runs the draft eagerly when this is None
    assert worker.cuda_graph_runner is None
    worker.cuda_graph_runner = "re-captured by SGLang's adaptive steps"
    assert worker.cuda_graph_runner is None
    assert "cuda_graph_runner" not in worker.__dict__


def test_by_default_best_effort_requests_get_sglangs_eagle2_trees(monkeypatch):
    w = make_worker(monkeypatch, None)
    assert w.policy.config.budget == N * 8  # the whole layout at the largest batch
    monkeypatch.setattr(StandaloneDraftWorker, "draft", _sglang_draft([]), raising=False)
    reqs = [_req(f"b{i}", {"slo_class": "best-effort"}, 10, 1) for i in range(3)]
    verify = w.draft(SimpleNamespace(reqs=reqs, forward_mode=ForwardMode.DECODE))
    assert np.isnan(w.view.tpot_slo_s).all()
    assert w.plan.depth == STEPS
    # every one of SGLang's top-(N - 1) positions stays linked: EAGLE-2's tree as is
    assert bool(w.organized.keep.all())
    for b in range(3):
        assert sum(len(children(verify.retrieve_next_token, verify.retrieve_next_sibling,
                                b, p)) for p in range(N)) == N - 1
    configured_classes.cache_clear()


def _sglang_verify_input(seen):
    """SGLang's draft through to its verify input: the step lists, the organize call at
    the worker's call site, the tree (mask, positions, links) from SGLang's builder in the
    FULL_MASK layout the triton backend reads, in SGLang's EagleVerifyInput."""
    from sglang.srt.speculative.eagle_info import EagleVerifyInput
    from test_compact import sglang_tree

    gen = torch.Generator().manual_seed(11)

    def draft(self, batch, *, with_topology=False):
        bs = len(batch.reqs)
        lists = random_draft(bs, self.topk, self.speculative_num_steps, gen=gen)
        parent_list, top, tokens = eagle_worker_v2.organize_draft_results(
            *lists, self.speculative_num_draft_tokens)
        n = self.speculative_num_draft_tokens
        mask, positions, index, nt, ns = sglang_tree(parent_list, top, batch.seq_lens,
                                                     self.topk, self.speculative_num_steps, n)
        roots = torch.arange(bs) + 100
        v = EagleVerifyInput(
            draft_token=torch.cat([roots[:, None], tokens], 1).flatten(), custom_mask=mask,
            positions=positions, retrieve_index=index, retrieve_next_token=nt,
            retrieve_next_sibling=ns, retrieve_cum_len=None,
            spec_steps=self.speculative_num_steps, topk=self.topk, draft_token_num=n,
            capture_hidden_mode=None, seq_lens_sum=None, seq_lens_cpu=None)
        seen.append(v)
        return v
    return draft


def test_a_ragged_iteration_verifies_the_selection_only(monkeypatch):
    """The default where the target can: the verify input the target forward sees holds
    the selected positions only (at most ADASERVE_BUDGET tokens over the batch), each
    request's first L_b slots of its verify window, SGLang's ragged layout of them, and the
    tree over compacted slots for what follows the forward."""
    from adaserve.sglang.ragged import RaggedVerifyInput

    w = make_worker(monkeypatch, "7", ragged=True)
    seen = []
    monkeypatch.setattr(StandaloneDraftWorker, "draft", _sglang_verify_input(seen),
                        raising=False)
    w.req_to_token_pool = SimpleNamespace(
        size=8, req_to_token=torch.arange(8 * 64).view(8, 64) + 5000)
    reqs = [_req("u", {"slo_class": "urgent", "tpot_slo_ms": 20.0}, 30, 9),
            _req("r", {"slo_class": "relaxed", "tpot_slo_ms": 400.0}, 12, 1),
            _req("n", None, 5, 0)]
    seq_lens = torch.tensor([38, 12, 5])
    batch = SimpleNamespace(reqs=reqs, forward_mode=ForwardMode.DECODE,
                            req_pool_indices=torch.tensor([6, 1, 3]), seq_lens=seq_lens)

    verify = w.draft(batch)

    keep = w.organized.keep
    lens = keep.sum(1)
    assert isinstance(verify, RaggedVerifyInput)
    total = int(lens.sum())
    assert w.selected_tokens == total <= 7 < keep.numel()  # the budget bounds the forward
    assert verify.draft_token.numel() == verify.positions.numel() == total
    assert verify.ragged_verify_layout.verify_lens_cpu == lens.tolist()
    assert verify.ragged_verify_layout.qo_indptr_device.tolist() == \
        [0, *torch.cumsum(lens, 0).tolist()]
    before = seen[0]
    window = w.req_to_token_pool.req_to_token[batch.req_pool_indices[:, None],
                                              seq_lens[:, None] + torch.arange(N)]
    at = 0
    for b in range(3):
        kept = torch.nonzero(keep[b]).flatten()
        L = len(kept)
        # the kept tokens at their depths, written to the first L slots of the window
        assert torch.equal(verify.draft_token[at: at + L], before.draft_token[b * N + kept])
        assert torch.equal(verify.positions[at: at + L], before.positions[b * N + kept])
        assert torch.equal(verify.prepared_out_cache_loc[at: at + L], window[b, :L])
        # the links SGLang's verify walks reach compacted slots 0..L-1, nothing else
        reach, stack = set(), [0]
        while stack:
            p = stack.pop()
            reach.add(p)
            stack += children(verify.retrieve_next_token, verify.retrieve_next_sibling, b, p)
        assert reach == set(range(L))
        at += L
    assert verify.custom_mask.numel() == int((lens * (seq_lens + lens)).sum())
    configured_classes.cache_clear()


def test_at_b_no_more_than_n_every_class_verifies_its_root_only(monkeypatch, caplog):
    """Three requests, one urgent (behind its SLO), one relaxed, one best effort, and a
    budget of 3: Algorithm 2 spends B on the roots first, so each request gets exactly one
    position, whatever its class -- and the worker says why. With B = 7 the urgent one is
    served first."""
    import logging
    import time

    reqs = [_req("u", {"slo_class": "urgent", "tpot_slo_ms": 20.0}, 30, 9),
            _req("r", {"slo_class": "relaxed", "tpot_slo_ms": 400.0}, 12, 1),
            _req("b", {"slo_class": "best-effort"}, 5, 0)]
    counts = {}
    for budget in ("3", "7"):
        w = make_worker(monkeypatch, budget, ragged=True)
        w.req_to_token_pool = SimpleNamespace(size=8, req_to_token=torch.arange(8 * 64).view(8, 64))
        # the urgent request first decoded 10 s ago: 8 tokens in 10 s is far behind 20 ms
        w.first_token_at["u"] = time.perf_counter() - 10.0
        monkeypatch.setattr(StandaloneDraftWorker, "draft", _sglang_verify_input([]),
                            raising=False)
        batch = SimpleNamespace(reqs=reqs, forward_mode=ForwardMode.DECODE,
                                req_pool_indices=torch.tensor([0, 1, 2]),
                                seq_lens=torch.tensor([38, 12, 5]))
        with caplog.at_level(logging.INFO, logger="adaserve.sglang.worker"):
            verify = w.draft(batch)
        counts[budget] = w.organized.keep.sum(1).tolist()
        assert verify.ragged_verify_layout.verify_lens_cpu == counts[budget]
    assert counts["3"] == [1, 1, 1]
    assert "3 requests and B = 3: no budget beyond the roots" in caplog.text
    assert counts["7"][0] > counts["7"][1]  # the urgent request is served first
    configured_classes.cache_clear()


def test_alternate_verifies_ragged_and_uniform_in_turn(monkeypatch):
    """ADASERVE_VERIFY=alternate: a benchmark's side-by-side comparison in one server --
    ragged, uniform, ragged, ... -- over the same selection rule."""
    from adaserve.sglang.ragged import RaggedVerifyInput

    w = make_worker(monkeypatch, "7", ragged=True)
    w._verify = "alternate"
    w.req_to_token_pool = SimpleNamespace(size=8, req_to_token=torch.arange(8 * 64).view(8, 64))
    monkeypatch.setattr(StandaloneDraftWorker, "draft", _sglang_verify_input([]), raising=False)
    reqs = [_req("u", {"slo_class": "urgent", "tpot_slo_ms": 20.0}, 30, 9),
            _req("r", {"slo_class": "relaxed", "tpot_slo_ms": 400.0}, 12, 1)]
    batch = SimpleNamespace(reqs=reqs, forward_mode=ForwardMode.DECODE,
                            req_pool_indices=torch.tensor([0, 1]), seq_lens=torch.tensor([38, 12]))
    kinds = []
    for _ in range(4):
        verify = w.draft(batch)
        kinds.append((isinstance(verify, RaggedVerifyInput), w.ragged))
    assert kinds == [(True, True), (False, False), (True, True), (False, False)]
    configured_classes.cache_clear()


def test_a_request_gone_from_the_batch_tells_the_policy_what_it_decoded(worker, monkeypatch):
    """The output lengths prefill=recover reads: a request the worker saw decoding and no
    longer sees is forgotten with the tokens it had after its first at its last round."""
    told = []
    forget = worker.policy.forget
    monkeypatch.setattr(worker.policy, "forget", lambda rid, decoded=None: (
        told.append((rid, decoded)), forget(rid, decoded)))
    a = _req("a", {"slo_class": "urgent", "tpot_slo_ms": 20.0}, 10, 5)
    b = _req("b", {"slo_class": "relaxed", "tpot_slo_ms": 400.0}, 10, 1)
    worker.batch_view(SimpleNamespace(reqs=[a, b]))
    a.output_ids = list(range(9))  # a grew by four tokens in the next round
    worker.batch_view(SimpleNamespace(reqs=[a, b]))
    worker.batch_view(SimpleNamespace(reqs=[b]))  # a finished
    assert told == [("a", 8)]
    worker.batch_view(SimpleNamespace(reqs=[]))
    assert told == [("a", 8), ("b", 0)]
    assert not worker.decoded and not worker.first_token_at

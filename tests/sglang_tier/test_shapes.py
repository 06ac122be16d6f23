"""Per-iteration draft shapes (adaserve/sglang/shapes.py) against SGLang 0.5.23's own
functions: which (d, w) its draft, tree kernel and verify accept at a fixed N, that the top
w of the W first-step candidates are what a width-w draft would rank, and that a shape is
applied to a draft worker for one draft only. Shapes switched on every iteration inside a
real serve-cpu server (greedy parity, timings) are in results/sglang_shapes.md."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch
from drafts import random_draft
from sglang.srt.speculative.eagle_utils import organize_draft_results
from sglang.srt.speculative.eagle_worker_common import _compact_accept_to_front
from sglang.srt.utils.common import fast_topk
from test_links import build_links

from adaserve.sglang.shapes import DraftShape, DraftShapes, ShapeLimits


def _sglang_runs(d: int, w: int, n: int, bs: int = 2) -> bool:
    """SGLang's draft tail, tree kernel and accept compaction at steps d, topk w, N n."""
    lists = random_draft(bs, w, d, gen=torch.Generator().manual_seed(d * 10 + w))
    try:
        parent_list, index, _ = organize_draft_results(*lists, n)
    except RuntimeError:  # torch.topk: fewer candidates than N - 1
        return False
    _, next_token, _ = build_links(parent_list, index, bs, w, d, n)
    assert (next_token[:, 0] >= 0).all()  # the root has a child
    try:  # a verify that accepted a full-depth path of d + 1 positions
        _compact_accept_to_front(torch.arange(bs * n), torch.zeros(bs, d + 1, dtype=torch.long),
                                 bs, num_draft_tokens=n)
    except RuntimeError:
        return False
    return True


@pytest.mark.parametrize("n", [4, 6, 8])
def test_feasible_shapes_are_the_ones_sglang_runs(n):
    limits = ShapeLimits(max_depth=min(5, n - 1), max_width=4, num_draft_tokens=n)
    for d, w in itertools.product(range(1, limits.max_depth + 1), range(2, 5)):
        assert limits.feasible(DraftShape(d, w)) == _sglang_runs(d, w, n), (d, w, n)


@pytest.mark.parametrize("w", [2, 3])
def test_a_compiled_shape_is_accepted_where_sglang_runs_it(w):
    for d, n in itertools.product(range(1, 6), (3, 4, 6)):
        try:
            ShapeLimits(d, w, n)
            accepted = True
        except ValueError:
            accepted = False
        assert accepted == _sglang_runs(d, w, n), (d, w, n)


def test_limits_refuse_what_sglang_cannot_run():
    with pytest.raises(ValueError, match="topk >= 2"):
        ShapeLimits(3, 1, 4)
    with pytest.raises(ValueError, match="4 <= N"):  # verify compaction: N >= D + 1
        ShapeLimits(3, 2, 3)
    with pytest.raises(ValueError, match="N <= 11"):  # more positions than candidates
        ShapeLimits(3, 2, 12)


@pytest.mark.parametrize("d,w", list(itertools.product(range(0, 8), range(0, 6))))
def test_fit_is_the_smallest_runnable_shape_covering_the_plan(d, w):
    limits = ShapeLimits(max_depth=5, max_width=4, num_draft_tokens=8)
    shape = limits.fit(d, w)
    lo_d, lo_w = min(max(d, 1), 5), min(max(w, 2), 4)
    assert limits.feasible(shape) and shape.depth >= lo_d and shape.width >= lo_w
    if shape.width == lo_w:  # the plan's width: the shallowest runnable depth
        assert shape.depth == min(a for a in range(lo_d, 6)
                                  if limits.feasible(DraftShape(a, lo_w)))
    else:  # widened only where no depth would do
        assert shape.depth == 5 and not any(limits.feasible(DraftShape(5, b))
                                            for b in range(lo_w, shape.width))
    assert limits.fit(5, 4) == DraftShape(5, 4)  # the compiled shape stays


def test_the_top_w_of_w_ranked_candidates_are_a_width_w_ranking():
    probs = torch.softmax(3 * torch.randn(16, 200, generator=torch.Generator().manual_seed(0)), -1)
    p4, i4 = fast_topk(probs, 4, dim=-1)  # what SGLang's draft extend leaves at W = 4
    for w in (2, 3):
        p, i = fast_topk(probs, w, dim=-1)
        assert torch.equal(p4[:, :w], p) and torch.equal(i4[:, :w], i)


def _worker():
    runner = SimpleNamespace(draft_attn_backend="compiled backend")
    return SimpleNamespace(speculative_num_steps=5, topk=3, speculative_num_draft_tokens=6,
                           draft_attn_backend="compiled backend", draft_runner=runner)


def _batch(bs=2, width=3):
    """A ScheduleBatch as draft() reads it: the draft input the last draft extend left."""
    return SimpleNamespace(spec_info=SimpleNamespace(
        topk_p=torch.rand(bs, width).sort(-1, descending=True).values,  # [bs, W]
        topk_index=torch.arange(bs * width).view(bs, width)))  # [bs, W]


def test_a_shape_holds_for_one_draft_and_everything_is_restored():
    worker, made = _worker(), []
    shapes = DraftShapes(worker, make_backend=lambda s: made.append(s) or f"backend {s}")
    batch = _batch()
    inp = batch.spec_info
    topk_p, topk_index = inp.topk_p, inp.topk_index
    with shapes.applied(DraftShape(2, 2), batch):
        assert (worker.speculative_num_steps, worker.topk) == (2, 2)
        assert worker.draft_attn_backend == worker.draft_runner.draft_attn_backend \
            == f"backend {DraftShape(2, 2)}"
        assert torch.equal(inp.topk_p, topk_p[:, :2]) and inp.topk_index.shape == (2, 2)
    assert (worker.speculative_num_steps, worker.topk) == (5, 3)
    assert worker.draft_attn_backend == worker.draft_runner.draft_attn_backend \
        == "compiled backend"
    assert inp.topk_p is topk_p and inp.topk_index is topk_index  # batches merge at W
    with pytest.raises(KeyError), shapes.applied(DraftShape(2, 2), batch):
        raise KeyError("a failing draft")
    assert (worker.speculative_num_steps, worker.topk, inp.topk_p) == (5, 3, topk_p)
    assert made == [DraftShape(2, 2)]  # one backend per shape, built once


def test_the_compiled_shape_changes_nothing_and_infeasible_ones_raise():
    worker = _worker()
    shapes = DraftShapes(worker, make_backend=lambda s: pytest.fail("no backend needed"))
    batch = _batch()
    with shapes.applied(DraftShape(5, 3), SimpleNamespace()):  # no draft input read
        assert worker.topk == 3
    with pytest.raises(ValueError, match="cannot run"), shapes.applied(DraftShape(1, 2), batch):
        pass  # 2 candidates for N - 1 = 5 positions
    assert worker.speculative_num_steps == 5

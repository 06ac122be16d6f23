"""adaserve.sglang.cpu.kernels does what SGLang's Triton kernels do. Each case calls one of
SGLang's own wrapper functions twice on copies of the same random inputs: down its Triton
branch (interpreted on the CPU, see conftest.py; same grid and constexprs as on a GPU, by
construction) and down its `if _is_cpu:` branch with our op bound under the name the stub
gives it there, as in a CPU run. Every tensor the call touches must come out identical.
Shapes and dtypes are SGLang's: int32 req_to_token rows, int64 KV slot ids, int32 accept
indices and lengths, index tensors int64 or int32."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import partial

import pytest
import torch
from drafts import random_draft
from sglang.kernels.ops.kvcache import cache_move
from sglang.kernels.ops.speculative import cache_locs, eagle, spec_tree
from sglang.srt.mem_cache import allocation
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.speculative.eagle_utils import build_tree_kernel_efficient, organize_draft_results

from adaserve.sglang.cpu.kernels import OPS

POOL_ROWS, POOL_LEN, SLOTS = 12, 160, 4096  # req_to_token is [POOL_ROWS, POOL_LEN]
SEEDS = range(2)


@pytest.fixture(autouse=True)
def triton_branches():
    """SGLang was imported here without SGLANG_USE_CPU_ENGINE, so its wrappers launch the
    Triton kernels; otherwise both runs of a case would be ours and prove nothing."""
    assert not any(m._is_cpu for m in (allocation, cache_locs, cache_move, eagle, spec_tree))


@contextlib.contextmanager
def cpu_branch(module, *ops: str, prefix: str = ""):
    """SGLang's `module` as on a CPU: `_is_cpu` set and each op bound to ours under the
    name its `from sgl_kernel import ...` gives it (prefixed where SGLang aliases it)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(module, "_is_cpu", True)
        for op in ops:
            mp.setattr(module, prefix + op, OPS[op], raising=False)
        yield


def on_cpu(fn: Callable, module, *ops: str, prefix: str = "") -> Callable:
    """`fn` called with `module` in its CPU state (cpu_branch)."""
    def call(**args):
        with cpu_branch(module, *ops, prefix=prefix):
            return fn(**args)
    return call


def both(triton: Callable, cpu: Callable, **inputs: torch.Tensor) -> tuple[dict, dict]:
    """Each call run on its own copy of `inputs`: the copies after the call, with what it
    returned under "returned"."""
    runs = []
    for call in (triton, cpu):
        args = {k: v.clone() for k, v in inputs.items()}
        args["returned"] = call(**args)
        runs.append(args)
    return runs[0], runs[1]


def assert_same(triton: dict, cpu: dict) -> None:
    for name, want in triton.items():
        got = cpu[name]
        if want is None:
            assert got is None, name
            continue
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert torch.equal(got, want), f"{name}: CPU {got.tolist()} != Triton {want.tolist()}"


def ragged(gen, bs: int, hi: int) -> torch.Tensor:
    """bs lengths in [0, hi], shuffled: one of them hi and, if bs > 1, one 0."""
    lens = torch.randint(0, hi + 1, (bs,), generator=gen)
    lens[0] = hi
    if bs > 1:
        lens[1] = 0
    return lens[torch.randperm(bs, generator=gen)]


def token_pool(gen) -> torch.Tensor:
    return torch.randint(0, SLOTS, (POOL_ROWS, POOL_LEN), generator=gen, dtype=torch.int32)


def rows(gen, bs: int, dtype) -> torch.Tensor:
    return torch.randperm(POOL_ROWS, generator=gen)[:bs].to(dtype)


def slots(gen, n: int) -> torch.Tensor:
    return torch.randperm(SLOTS, generator=gen)[:n]  # distinct int64 KV slot ids


BATCHES = [pytest.param(1, torch.int64, id="bs1-int64"),  # (bs, index dtype)
           pytest.param(3, torch.int32, id="bs3-int32"),
           pytest.param(8, torch.int64, id="bs8-int64")]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("bs,idx", BATCHES)
def test_assign_req_to_token_pool(bs, idx, seed):
    gen = torch.Generator().manual_seed(seed)
    lens = ragged(gen, bs, 70)  # > the kernel's 32-wide block
    start = (torch.rand(bs, generator=gen) * (POOL_LEN - lens + 1)).long()
    inputs = dict(req_pool_indices=rows(gen, bs, idx), req_to_token=token_pool(gen),
                  start_offset=start.to(idx), end_offset=(start + lens).to(idx),
                  out_cache_loc=slots(gen, int(lens.sum())))
    call = partial(allocation.assign_req_to_token_pool_func, batch_size=bs)
    triton, cpu = both(call, on_cpu(call, allocation, "assign_req_to_token_pool_cpu"), **inputs)
    assert not torch.equal(triton["req_to_token"], inputs["req_to_token"])
    assert_same(triton, cpu)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("bs,width", [(1, 5), (4, 8), (6, 37)])
def test_assign_extend_cache_locs_ragged(bs, width, seed):
    """Through fill_front_out_cache_loc_func (its CPU branch passes the window as int32):
    the first num_front[i] slots of each request's verify window, packed."""
    gen = torch.Generator().manual_seed(seed)
    num_front = ragged(gen, bs, width).to(torch.int32)
    inputs = dict(num_front=num_front, out_cache_loc=slots(gen, bs * width),
                  front_out_cache_loc=torch.zeros(bs * width, dtype=torch.int64))
    call = cache_locs.fill_front_out_cache_loc_func
    triton, cpu = both(call, on_cpu(call, cache_locs, "assign_extend_cache_locs_cpu"), **inputs)
    assert triton["front_out_cache_loc"].any()
    assert_same(triton, cpu)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("bs,idx", BATCHES)
def test_assign_extend_cache_locs_uniform(bs, idx, seed):
    """Through assign_extend_cache_locs_func as its callers use it (end = start + n).
    Its Triton launch sits under `if _is_cuda`, so that flag is set for the Triton run."""
    gen = torch.Generator().manual_seed(seed)
    n = 40
    start = torch.randint(0, POOL_LEN - n + 1, (bs,), generator=gen)
    inputs = dict(req_pool_indices=rows(gen, bs, idx), req_to_token=token_pool(gen),
                  start_offset=start.to(idx), end_offset=(start + n).to(idx))
    call = partial(cache_locs.assign_extend_cache_locs_func, batch_size=bs, draft_token_num=n,
                   device="cpu")

    def cuda(**args):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(cache_locs, "_is_cuda", True)
            return call(**args)

    triton, cpu = both(cuda, on_cpu(call, cache_locs, "assign_extend_cache_locs_cpu"), **inputs)
    assert triton["returned"].shape == (bs * n,)
    assert_same(triton, cpu)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("bs,idx,topk,cols", [
    pytest.param(1, torch.int64, 1, 3, id="bs1-int64-chain"),
    pytest.param(3, torch.int32, 4, 2, id="bs3-int32-topk4"),
    pytest.param(5, torch.int64, 4, 40, id="bs5-int64-2blocks")])  # 160 > the 128-wide block
def test_assign_draft_cache_locs_contiguous(bs, idx, topk, cols, seed):
    gen = torch.Generator().manual_seed(seed)
    n = topk * cols
    inputs = dict(req_pool_indices=rows(gen, bs, idx), req_to_token=token_pool(gen),
                  seq_lens=torch.randint(0, POOL_LEN - n + 1, (bs,), generator=gen).to(idx),
                  out_cache_loc=torch.full((bs * n,), -1, dtype=torch.int64))
    call = partial(cache_locs.assign_draft_cache_locs_contiguous_func, topk=topk, num_cols=cols)
    triton, cpu = both(call, on_cpu(call, cache_locs, "assign_draft_cache_locs_contiguous_cpu"),
                       **inputs)
    assert (triton["out_cache_loc"] >= 0).all()
    assert_same(triton, cpu)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("bs,stride,tokens", [pytest.param(1, 2, torch.int32, id="bs1-int32"),
                                              pytest.param(4, 5, torch.int32, id="bs4-int32"),
                                              pytest.param(7, 4, torch.int64, id="bs7-int64")])
def test_fill_bonus_tokens(bs, stride, tokens, seed):
    """accept_tokens = predict[accept_index]: [bs, spec_steps + 1]; accept_lens count the
    bonus token, so they are in [1, stride]."""
    gen = torch.Generator().manual_seed(seed)
    inputs = dict(accept_tokens=torch.randint(0, 32000, (bs, stride), generator=gen).to(tokens),
                  accept_lens=torch.randint(1, stride + 1, (bs,), generator=gen).int(),
                  bonus_tokens=torch.full((bs,), -1, dtype=torch.int32))
    call = partial(eagle.fill_bonus_tokens_func, accept_stride=stride, batch_size=bs)
    triton, cpu = both(call, on_cpu(call, eagle, "fill_bonus_tokens_cpu"), **inputs)
    assert (triton["bonus_tokens"] >= 0).all()
    assert_same(triton, cpu)


def accept_index(gen, bs: int, width: int, n: int, padded_row: bool) -> torch.Tensor:
    """As verify leaves it: row b holds the flat positions b * n + p of its accepted path,
    root first, then -1 (a whole row of -1 if padded_row)."""
    out = torch.full((bs, width), -1, dtype=torch.int32)
    for b in range(bs):
        k = int(torch.randint(1, width + 1, (1,), generator=gen))
        path = torch.randperm(n - 1, generator=gen)[: k - 1].sort().values + 1
        out[b, :k] = b * n + torch.cat([torch.zeros(1, dtype=torch.long), path]).int()
    if padded_row:
        out[-1] = -1
    return out


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("bs,steps,n,padded", [(1, 1, 2, False), (3, 3, 8, True),
                                               (8, 5, 12, False)])
def test_fill_accept_out_cache_loc(bs, steps, n, padded, seed):
    gen = torch.Generator().manual_seed(seed)
    size = bs * (steps + 1)
    inputs = dict(accept_index=accept_index(gen, bs, steps + 1, n, padded),
                  out_cache_loc=slots(gen, bs * n),
                  accept_out_cache_loc=torch.zeros(size, dtype=torch.int64))
    call = partial(eagle.fill_accept_out_cache_loc_func, size=size)
    triton, cpu = both(call, on_cpu(call, eagle, "fill_accept_out_cache_loc_cpu"), **inputs)
    assert triton["accept_out_cache_loc"].any()
    assert_same(triton, cpu)


def kv_pool(dtype, heads: int, dim: int, size: int, seed: int) -> MHATokenToKVPool:
    """SGLang's own KV pool on the CPU (2 layers, k and v): its data_ptrs, data_strides and
    copy tiling config are what its move_kv_cache passes to copy_all_layer_kv_cache_func."""
    pool = MHATokenToKVPool(size=size, page_size=1, dtype=dtype, head_num=heads, head_dim=dim,
                            layer_num=2, device="cpu", enable_memory_saver=False,
                            enable_alt_stream=False, enable_kv_cache_copy=True)
    gen = torch.Generator().manual_seed(seed)
    for buf in pool.k_buffer + pool.v_buffer:
        buf.copy_(torch.randn(buf.shape, generator=gen))
    return pool


def accept_moves(gen, size: int, bs: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """move_accept_tokens' moves: each request's accepted slots (root first) to the front
    of its verify window -- a target is often another move's source."""
    window = torch.randperm(size, generator=gen)[: bs * n].view(bs, n) + 1  # slot 0: padding
    index = accept_index(gen, bs, n, n, False).long()
    keep = index != -1
    tgt = window[torch.arange(n)[None, :].expand(bs, n) < keep.sum(1, keepdim=True)]
    return tgt, window.flatten()[index[keep]]


def cycle_moves(gen, size: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A random permutation of `count` slots: correct only if every source row is read
    before any target row is written."""
    s = torch.randperm(size, generator=gen)[:count] + 1
    return s, s[torch.randperm(count, generator=gen)]


KV_CASES = {  # dtype, heads, head_dim, pool size, moves; the row bytes pick SGLang's tiling
    "fp16-32B-accept": (torch.float16, 2, 8, 64, "accept"),  # 6 requests, windows of 8
    "fp32-1KiB-cycle": (torch.float32, 4, 64, 64, 30),
    "bf16-4KiB-cycle": (torch.bfloat16, 8, 256, 48, 24),
    "fp32-8KiB-chunked": (torch.float32, 16, 128, 160, 130),  # in chunks of 128 moves
}


@pytest.mark.parametrize("case", KV_CASES)
def test_copy_all_layer_kv_cache(case):
    dtype, heads, dim, size, moves = KV_CASES[case]
    gen = torch.Generator().manual_seed(7)
    tgt, src = accept_moves(gen, size, 6, 8) if moves == "accept" else \
        cycle_moves(gen, size, moves)
    triton, cpu = kv_pool(dtype, heads, dim, size, 1), kv_pool(dtype, heads, dim, size, 1)
    before = [b.clone() for b in triton.k_buffer + triton.v_buffer]
    triton.move_kv_cache(tgt, src)
    with cpu_branch(cache_move, "copy_all_layer_kv_cache_cpu"):
        cpu.move_kv_cache(tgt, src)
    for i, (want, got, old) in enumerate(zip(triton.k_buffer + triton.v_buffer,
                                             cpu.k_buffer + cpu.v_buffer, before)):
        assert not torch.equal(want, old), i
        assert torch.equal(got, want), f"buffer {i}"


def draft_tree(seed: int, seq_lens: list[int], topk: int, steps: int, n: int):
    gen = torch.Generator().manual_seed(seed)
    score_list, token_list, parents_list = random_draft(len(seq_lens), topk, steps, gen=gen)
    return organize_draft_results(score_list, token_list, parents_list, n)


@pytest.mark.parametrize("mode", [spec_tree.TreeMaskMode.FULL_MASK,
                                  spec_tree.TreeMaskMode.QLEN_ONLY], ids=lambda m: m.name)
def test_build_tree_through_sglang_cpu_branch(mode):
    """Delegates to SGLang's Triton tree builder; the call is SGLang's own
    (eagle_utils.build_tree_kernel_efficient down its CPU branch)."""
    seq_lens, topk, steps, n = [9, 3, 17], 3, 3, 7
    parent_list, top_scores_index, draft_tokens = draft_tree(0, seq_lens, topk, steps, n)
    bs, lens = len(seq_lens), torch.tensor(seq_lens)
    with cpu_branch(spec_tree, "build_tree_kernel_efficient_cpu", prefix="sgl_"):
        got = build_tree_kernel_efficient(
            torch.zeros(bs, dtype=torch.long), parent_list, top_scores_index, draft_tokens,
            lens, sum(seq_lens), topk, steps, n, mode)[:5]
    mask_len = n * n * bs + (sum(seq_lens) * n if mode == spec_tree.TreeMaskMode.FULL_MASK else 0)
    want = (torch.full((mask_len,), True), torch.empty(bs * n, dtype=torch.long),
            *torch.full((3, bs, n), -1, dtype=torch.long))
    spec_tree.sgl_build_tree_kernel_triton(parent_list, top_scores_index, lens, *want,
                                           topk, steps, n, mode)
    for name, g, w in zip(["tree_mask", "positions", "index", "next_token", "next_sibling"],
                          got, want):
        assert torch.equal(g, w), name


def test_verify_tree_greedy_through_sglang_cpu_branch():
    """Delegates to SGLang's Triton greedy verify; the call is SGLang's wrapper down its
    CPU branch, which passes the op's retrive_* keywords. Targets follow a random child
    at every position, so paths of several tokens are accepted."""
    seq_lens, topk, steps, n = [5, 11, 2, 8], 2, 4, 8
    parent_list, top_scores_index, draft_tokens = draft_tree(1, seq_lens, topk, steps, n)
    bs = len(seq_lens)
    index, next_token, next_sibling = torch.full((3, bs, n), -1, dtype=torch.long)
    spec_tree.sgl_build_tree_kernel_triton(
        parent_list, top_scores_index, torch.tensor(seq_lens), torch.full((n * n * bs,), True),
        torch.empty(bs * n, dtype=torch.long), index, next_token, next_sibling, topk, steps, n,
        spec_tree.TreeMaskMode.QLEN_ONLY)
    gen = torch.Generator().manual_seed(2)
    candidates = torch.cat([torch.randint(0, 40, (bs, 1), generator=gen), draft_tokens], 1)
    target = torch.randint(0, 40, (bs, n), generator=gen)
    for b in range(bs):
        for p in range(n):
            kids, c = [], int(next_token[b, p])
            while c != -1:
                kids.append(c)
                c = int(next_sibling[b, c])
            if kids:
                target[b, p] = candidates[b, kids[int(torch.randint(len(kids), (1,),
                                                                    generator=gen))]]
    fresh = lambda: dict(predicts=torch.zeros(bs * n, dtype=torch.int32),  # noqa: E731
                         accept_index=torch.full((bs, steps + 1), -1, dtype=torch.int32),
                         accept_token_num=torch.empty(bs, dtype=torch.int32))
    links = dict(candidates=candidates, retrieve_index=index, retrieve_next_token=next_token,
                 retrieve_next_sibling=next_sibling, target_predict=target)
    got, want = fresh(), fresh()
    with cpu_branch(spec_tree, "verify_tree_greedy_cpu", prefix="sgl_"):
        spec_tree.verify_tree_greedy_func(**got, **links, topk=topk)
    spec_tree.verify_tree_greedy_triton(**want, **links)
    assert (want["accept_token_num"] > 1).any()
    for name in want:
        assert torch.equal(got[name], want[name]), name

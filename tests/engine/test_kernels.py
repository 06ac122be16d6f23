"""The compiled skinny-matmul kernel: exact enough against float64, refuses what it cannot
take, builds once per cache and falls back to eager with a reason; the real model's
fast-path logits equal its eager logits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from adaserve.engine import kernels
from adaserve.engine.batch import chain_batch
from adaserve.engine.kv_cache import KVCache
from adaserve.engine import model

pytestmark = pytest.mark.skipif(not kernels.load().available,
                                reason=f"fast kernels unavailable: {kernels.load().reason}")


def _ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x.double() @ w.double().T).float()


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 7, 8, 11, 16, 19, 33])
@pytest.mark.parametrize("n,k", [(960, 576), (576, 1536), (7, 576), (13, 13), (9, 8), (1, 3)])
def test_skinny_linear_matches_float64(m, n, k):
    g = torch.Generator().manual_seed(m * 1000 + n + k)
    x, w = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
    y = torch.ops.adaserve.skinny_linear(x, w)
    assert y.shape == (m, n) and y.is_contiguous()
    # fp32 accumulation over k terms of unit variance: error grows like sqrt(k) * eps
    assert (y - _ref(x, w)).abs().max().item() < 1e-5 * k ** 0.5 * 8


wide = pytest.mark.skipif(not (kernels.load().available and torch.ops.adaserve.avx512()),
                          reason="this CPU does not run AVX-512")


@wide
@pytest.mark.parametrize("m", [1, 2, 7, 8, 9, 13, 24, 40, 64])
@pytest.mark.parametrize("n,k", [(960, 576), (576, 1536), (7, 576), (5, 16)])
def test_the_avx512_tiles_match_float64_and_the_avx2_tiles(m, n, k):
    """Both tile shapes (2 weight rows x up to 8 inputs; 4 x chunks of 6), partial tiles of
    weight rows and inputs."""
    g = torch.Generator().manual_seed(m * 1000 + n + k)
    x, w = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
    y, y2 = (torch.ops.adaserve.skinny_linear(x, w, isa) for isa in (1, 0))
    assert y.shape == (m, n) and y.is_contiguous()
    assert (y - _ref(x, w)).abs().max().item() < 1e-5 * k ** 0.5 * 8
    assert (y - y2).abs().max().item() < 1e-5 * k ** 0.5 * 8


def test_the_isa_argument_of_skinny_linear_is_checked():
    x, w = torch.randn(2, 24), torch.randn(4, 24)
    with pytest.raises(RuntimeError, match="isa is -1"):
        torch.ops.adaserve.skinny_linear(x, w, 3)
    if torch.ops.adaserve.avx512():
        with pytest.raises(RuntimeError, match="multiple of 16"):
            torch.ops.adaserve.skinny_linear(x, w, 1)
    else:
        with pytest.raises(RuntimeError, match="does not run"):
            torch.ops.adaserve.skinny_linear(x, w, 1)
    assert (torch.ops.adaserve.skinny_linear(x, w, -1) - _ref(x, w)).abs().max() < 1e-4


def test_skinny_linear_refuses_what_it_cannot_take():
    x, w = torch.randn(2, 16), torch.randn(4, 16)
    with pytest.raises(RuntimeError, match="float32 only"):
        torch.ops.adaserve.skinny_linear(x.double(), w.double())
    with pytest.raises(RuntimeError, match="K differs"):
        torch.ops.adaserve.skinny_linear(x, torch.randn(4, 8))
    with pytest.raises(RuntimeError, match="contiguous"):
        torch.ops.adaserve.skinny_linear(torch.randn(16, 2).t(), w)
    with pytest.raises(RuntimeError, match=r"x \[M, K\]"):
        torch.ops.adaserve.skinny_linear(torch.randn(2, 2, 16), w)


@pytest.mark.parametrize("rows", [1, 5, 300])
def test_small_ops_match_eager(rows):
    """The fused norm (with and without the residual add), gating and rotary against the
    eager expressions the model used before."""
    g = torch.Generator().manual_seed(rows)
    ops = torch.ops.adaserve
    x, r = torch.randn(rows, 576, generator=g), torch.randn(rows, 576, generator=g)
    w = torch.randn(576, generator=g)
    ref_x = x + r
    ref = ref_x * torch.rsqrt(ref_x.pow(2).mean(-1, keepdim=True) + 1e-5) * w
    y = ops.add_rms_norm_(x, r, w, 1e-5)
    assert torch.allclose(x, ref_x) and (y - ref).abs().max().item() < 1e-5
    y = ops.add_rms_norm_(x, None, w, 1e-5)
    assert (y - ref).abs().max().item() < 1e-5 and torch.allclose(x, ref_x)
    for width in (1536, 13):  # vector lanes, and a scalar tail
        gu = torch.randn(rows, 2 * width, generator=g) * 8
        gate, up = gu.chunk(2, dim=-1)
        ref = torch.nn.functional.silu(gate) * up
        assert ((ops.silu_mul(gu) - ref).abs() / (ref.abs() + 1)).max().item() < 1e-5
    heads, kvh, d = 9, 3, 64
    qkv = torch.randn(rows, (heads + 2 * kvh) * d, generator=g)
    ang = torch.rand(rows, d // 2, generator=g) * 100
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    ref = qkv.clone()
    for lo, hi in ((0, heads), (heads, heads + kvh)):
        part = ref[:, lo * d: hi * d].view(rows, hi - lo, d)
        rot = torch.cat([-part[..., d // 2:], part[..., : d // 2]], -1)
        ref[:, lo * d: hi * d] = (part * cos[:, None] + rot * sin[:, None]).reshape(rows, -1)
    ops.rope_qk_(qkv, cos, sin, heads, kvh)
    assert (qkv - ref).abs().max().item() < 1e-5  # v (the last kvh heads) untouched too
    with pytest.raises(RuntimeError, match="heads"):
        ops.rope_qk_(qkv, cos, sin, heads + 1, kvh)


def _chain(kv: KVCache, n: int, q: int, ctx: int):
    toks = torch.randint(100, 1000, (n, q), generator=torch.Generator().manual_seed(n * q))
    return chain_batch(n, q, ctx, kv.trash_col, toks)


@pytest.mark.parametrize("n,q", [(1, 1), (1, 2), (1, 4), (1, 8), (1, 16), (4, 4), (8, 2),
                                 (8, 4), (3, 7), (32, 1), (5, 8), (8, 8), (9, 8)])
def test_fast_path_logits_equal_eager(smollm, n, q, monkeypatch):
    """Token counts the compiled path takes (up to the model's skinny_rows: 32, or 64 on an
    AVX-512 CPU) and past it (40 on AVX2, 72: eager matmuls, compiled attention), after a
    20-token prefix: fast and eager logits within 1e-4; past the bound, with the compiled
    attention off too, bit for bit."""
    m = smollm.target
    assert m.skinny, "the engine loads the fast path by default where the kernels build"
    kv = KVCache(m.n_layers, n, m.cfg.kv_heads, m.cfg.head_dim, 64)
    prefix = _chain(kv, n, 20, 0)
    out = {}
    try:
        for fast in (False, True):
            m.skinny = fast
            m(kv, prefix)
            out[fast] = m(kv, _chain(kv, n, q, 20))
        if n * q > m.skinny_rows:  # past the bound the fast model takes the eager matmuls
            monkeypatch.setattr(model, "ATTENTION_Q", 0)
            m.skinny = False
            m(kv, prefix)  # the eager pass's cache
            m.skinny = True
            out["sdpa"] = m(kv, _chain(kv, n, q, 20))
            assert torch.equal(out["sdpa"], out[False])
    finally:
        m.skinny = True
    assert (out[True] - out[False]).abs().max().item() < 1e-4


def test_the_config_switch_keeps_the_eager_path():
    from adaserve.engine import EngineConfig
    from adaserve.engine.loader import load_models

    m = load_models(EngineConfig(fast_kernels=False))
    assert not m.target.skinny


def _load_in_fresh_process(cache: str, **env: str) -> dict:
    code = textwrap.dedent("""
        import json
        from adaserve.engine import kernels
        s = kernels.load()
        print(json.dumps({"available": s.available, "reason": s.reason,
                          "build_s": s.build_s, "path": str(s.path)}))
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, ADASERVE_CACHE_DIR=cache, **env), timeout=600)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1]) | {"stderr": run.stderr}


@pytest.mark.slow
def test_builds_once_into_an_empty_cache_then_loads_from_it(tmp_path):
    cold = _load_in_fresh_process(str(tmp_path))
    assert cold["available"] and cold["build_s"] is not None
    assert cold["path"].startswith(str(tmp_path / "kernels"))
    warm = _load_in_fresh_process(str(tmp_path))
    assert warm["available"] and warm["build_s"] is None and warm["path"] == cold["path"]


def test_switched_off_it_says_so_and_builds_nothing(tmp_path):
    s = _load_in_fresh_process(str(tmp_path), ADASERVE_FAST_KERNELS="0")
    assert not s["available"] and "ADASERVE_FAST_KERNELS=0" in s["reason"]
    assert not (tmp_path / "kernels").exists()


def test_without_a_compiler_it_falls_back_with_the_reason(tmp_path):
    s = _load_in_fresh_process(str(tmp_path), CXX="no-such-compiler")
    assert not s["available"] and "no C++ compiler" in s["reason"]
    assert "eager matmuls" in s["stderr"]  # the warning the user sees


def test_a_failed_build_falls_back_with_the_compiler_error(tmp_path):
    # a "compiler" that fails the way a broken toolchain does
    cxx = tmp_path / "bad-cxx"
    cxx.write_text("#!/bin/sh\necho 'fatal error: torch/library.h: No such file' >&2\nexit 1\n")
    cxx.chmod(0o755)
    s = _load_in_fresh_process(str(tmp_path), CXX=str(cxx))
    assert not s["available"] and "No such file" in s["reason"]
    assert not list((tmp_path / "kernels").glob("*.so"))  # nothing half-written is kept


def test_the_fma_probe_reports_the_flops_it_did_over_the_time_it_took():
    """kernels/probe.cpp: GFLOP/s = 2 x 8 lanes x 12 chains x iters x threads / its time.
    Its time is inside the call's wall time, so the rate times the wall time is at least
    the flops, and (the call does nothing else) not far above them."""
    import time

    iters = 2 * 10**7
    flops = 2 * 8 * 12 * iters * torch.get_num_threads()
    torch.ops.adaserve.fma_gflops(iters // 10)  # threads spun up
    t = time.perf_counter()
    gflops = torch.ops.adaserve.fma_gflops(iters)
    wall = time.perf_counter() - t
    assert gflops * 1e9 * wall >= flops * 0.999
    assert gflops * 1e9 * wall <= flops * 1.5

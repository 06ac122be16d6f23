// Skinny fp32 matmuls for decoding on AVX2 CPUs: y[M, N] = x[M, K] @ w[N, K]^T for small M
// (on AVX-512 CPUs the tiles of skinny_avx512.cpp, where K is a multiple of 16).
//
// Why: at M <= 32 a transformer forward is a stream of its weights. MKL and oneDNN read
// them at about half the machine's bandwidth for such shapes (results/engine.md), so
// verifying 8 tokens cost almost twice a 1-token step. Here each thread streams its own
// contiguous run of weight rows exactly once and multiplies every loaded weight vector
// by all M inputs while it is in registers: the inputs (M x K floats) stay in L1/L2, the
// weights come from DRAM once, so up to ~8-11 rows cost what one does until the FMAs
// catch up with the memory.
//
// Threads: at::parallel_for over blocks of weight rows, on torch's own OpenMP pool (the
// library links the libgomp torch already loaded), so it never competes with torch's ops.
#include <immintrin.h>

#include <cmath>
#include <optional>

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include "wide.h"

// glibc's libmvec AVX2 expf (8 lanes; 4 ulp), declared here because math.h only exposes it
// to the vectorizer under -ffast-math
extern "C" __m256 _ZGVdN8v_expf(__m256);

namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Software prefetch distance, in floats ahead of the row being read (8 KB): without it
// the FMAs of a tile and the DRAM reads for the next one take turns instead of
// overlapping (8 rows: 37.8 ms -> 31.8 ms for the model's 121 matmuls on the dev CPU).
constexpr int64_t kPrefetch = 2048;

// One tile: R weight rows times C input rows, all K. R * C accumulators live in
// registers (12 of the 16 ymm for 3 x 4; 2 x 8 spills a few and still measured best). `prefetch`: the first
// input chunk pulls the weights in; later chunks find them in L1/L2.
template <int R, int C>
void tile(const float* w, const float* x, float* y, int64_t K, int64_t ldy, bool prefetch) {
  __m256 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    if (prefetch) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(w + r * K + k + kPrefetch), _MM_HINT_T0);
    }
    __m256 xv[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) xv[c] = _mm256_loadu_ps(x + c * K + k);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 wv = _mm256_loadu_ps(w + r * K + k);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(wv, xv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float s = hsum(acc[r][c]);
      for (int64_t j = k; j < K; ++j) s += w[r * K + j] * x[c * K + j];
      y[c * ldy + r] = s;
    }
}

using TileFn = void (*)(const float*, const float*, float*, int64_t, int64_t, bool);

template <int R>
constexpr TileFn row_of(int c) {
  switch (c) {
    case 1: return tile<R, 1>;
    case 2: return tile<R, 2>;
    case 3: return tile<R, 3>;
    case 4: return tile<R, 4>;
    case 5: return tile<R, 5>;
    case 6: return tile<R, 6>;
    case 7: return tile<R, 7>;
    default: return tile<R, 8>;
  }
}

TileFn tile_fn(int r, int c) {
  switch (r) {
    case 1: return row_of<1>(c);
    case 2: return row_of<2>(c);
    default: return row_of<3>(c);
  }
}

// Tile shapes, measured on the model's 121 matrices (dev CPU, 2026-11-22): 3 weight rows x
// chunks of up to 4 inputs ran the FMAs fastest in cache (150 GFLOP/s at 8 inputs, against
// 90-100 for 1 x 4 and 4 x 4) and is best at 1-4 and 9-16 inputs; at 5-8 inputs one chunk of
// 2 rows x all inputs reads each weight vector once instead of twice (8 inputs: 28.5 ->
// 25.9 ms for the 121 products).
struct Shape {
  int rows, chunk;
};
Shape tile_shape(int64_t M) {
  return M > 4 && M <= 8 ? Shape{2, static_cast<int>(M)} : Shape{3, 4};
}

at::Tensor skinny_linear(const at::Tensor& x, const at::Tensor& w, int64_t isa) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2, "skinny_linear: x [M, K] and w [N, K]");
  TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat,
              "skinny_linear: float32 only");
  TORCH_CHECK(x.size(1) == w.size(1), "skinny_linear: K differs: ", x.size(1), " vs ",
              w.size(1));
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous(), "skinny_linear: contiguous inputs");
  adaserve_wide::check_isa(isa, "skinny_linear");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  TORCH_CHECK(isa != 1 || K % 16 == 0, "skinny_linear: the AVX-512 tiles take K a multiple "
              "of 16, not ", K);
  at::Tensor y = at::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  if (isa != 0 && adaserve_wide::runs() && K % 16 == 0) {  // skinny_avx512.cpp
    const int64_t rows = adaserve_wide::skinny_block_rows(M);
    at::parallel_for(0, (N + rows - 1) / rows, 16, [&](int64_t b0, int64_t b1) {
      adaserve_wide::skinny_blocks(wp, xp, yp, M, K, N, b0, b1);
    });
    return y;
  }
  // Inputs in chunks; a tile's weight rows are reused from L1 for every chunk, so DRAM sees
  // each weight once whatever M is.
  const Shape shape = tile_shape(M);
  const int rb = shape.rows, cw = shape.chunk;
  const int64_t blocks = (N + rb - 1) / rb;
  at::parallel_for(0, blocks, 16, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n0 = b * rb;
      const int r = static_cast<int>(N - n0 < rb ? N - n0 : rb);
      for (int64_t m0 = 0; m0 < M; m0 += cw) {
        const int c = static_cast<int>(M - m0 < cw ? M - m0 : cw);
        tile_fn(r, c)(wp + n0 * K, xp + m0 * K, yp + m0 * N + n0, K, N, m0 == 0);
      }
    }
  });
  return y;
}

// ---- the small ops between the matmuls -------------------------------------------------
// At one token a layer's norms, rotary and gating were ~30 eager ops of a few microseconds
// each: ~7 ms of a 34 ms forward. One pass each here; rows in parallel, the inner loops
// left to the compiler's vectorizer (-O3 -mavx2 -mfma).

void check_rows(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.is_contiguous() && t.dim() >= 1, what,
              ": contiguous float32 only");
}

// x += r (when r is given), then y = x / rms(x) * w over the last dimension.
at::Tensor add_rms_norm_(at::Tensor& x, const std::optional<at::Tensor>& r, const at::Tensor& w,
                         double eps) {
  check_rows(x, "add_rms_norm_");
  check_rows(w, "add_rms_norm_ weight");
  const int64_t H = x.size(-1), M = x.numel() / H;
  TORCH_CHECK(w.numel() == H, "add_rms_norm_: weight has ", w.numel(), " values, rows ", H);
  const float* rp = nullptr;
  if (r.has_value()) {
    check_rows(*r, "add_rms_norm_ residual");
    TORCH_CHECK(r->sizes() == x.sizes(), "add_rms_norm_: residual shape differs");
    rp = r->data_ptr<float>();
  }
  at::Tensor y = at::empty_like(x);
  float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const float e = static_cast<float>(eps);
  at::parallel_for(0, M, 64, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      float* xr = xp + m * H;
      if (rp != nullptr) {
        const float* rr = rp + m * H;
        for (int64_t i = 0; i < H; ++i) xr[i] += rr[i];
      }
      float ss = 0.f;
      for (int64_t i = 0; i < H; ++i) ss += xr[i] * xr[i];
      const float inv = 1.f / std::sqrt(ss / static_cast<float>(H) + e);
      float* yr = yp + m * H;
      for (int64_t i = 0; i < H; ++i) yr[i] = xr[i] * inv * wp[i];
    }
  });
  return y;
}

// [.., 2I] gate|up -> [.., I] silu(gate) * up
at::Tensor silu_mul(const at::Tensor& gu) {
  check_rows(gu, "silu_mul");
  const int64_t I2 = gu.size(-1), I = I2 / 2, M = gu.numel() / I2;
  TORCH_CHECK(I2 % 2 == 0, "silu_mul: odd last dimension");
  auto sizes = gu.sizes().vec();
  sizes.back() = I;
  at::Tensor y = at::empty(sizes, gu.options());
  const float* g = gu.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, M, 16, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const float* gr = g + m * I2;
      const float* ur = gr + I;
      float* yr = yp + m * I;
      int64_t i = 0;
      const __m256 one = _mm256_set1_ps(1.f), zero = _mm256_setzero_ps();
      for (; i + 8 <= I; i += 8) {
        const __m256 g8 = _mm256_loadu_ps(gr + i);
        const __m256 e = _ZGVdN8v_expf(_mm256_sub_ps(zero, g8));
        const __m256 s8 = _mm256_div_ps(g8, _mm256_add_ps(one, e));
        _mm256_storeu_ps(yr + i, _mm256_mul_ps(s8, _mm256_loadu_ps(ur + i)));
      }
      for (; i < I; ++i) yr[i] = gr[i] / (1.f + std::exp(-gr[i])) * ur[i];
    }
  });
  return y;
}

// Rotary embedding in place on the q and k heads of a fused qkv row [(H + 2 Hkv) * D]
// (rotate-half layout); cos/sin [M, D] per row. v is left as it is.
void rope_qk_(at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t heads,
              int64_t kv_heads) {
  check_rows(qkv, "rope_qk_");
  check_rows(cos, "rope_qk_ cos");
  check_rows(sin, "rope_qk_ sin");
  const int64_t D = cos.size(-1), W = qkv.size(-1), M = qkv.numel() / W, half = D / 2;
  TORCH_CHECK(W == (heads + 2 * kv_heads) * D, "rope_qk_: rows of ", W, " values are not ",
              heads, " + 2 x ", kv_heads, " heads of ", D);
  TORCH_CHECK(cos.numel() == M * D && sin.numel() == M * D, "rope_qk_: cos/sin need ", M,
              " rows of ", D);
  float* p = qkv.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  const int64_t rotated = heads + kv_heads;
  at::parallel_for(0, M, 16, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const float* c = cp + m * D;
      const float* s = sp + m * D;
      for (int64_t h = 0; h < rotated; ++h) {
        float* a = p + m * W + h * D;
        float* b = a + half;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = a[i], x2 = b[i];
          a[i] = x1 * c[i] - x2 * s[i];
          b[i] = x2 * c[i + half] + x1 * s[i + half];
        }
      }
    }
  });
}

}  // namespace

TORCH_LIBRARY(adaserve, m) {
  // isa: -1 the best this CPU runs, 0 AVX2 only, 1 AVX-512 (tests and benchmarks)
  m.def("skinny_linear(Tensor x, Tensor w, int isa=-1) -> Tensor");
  m.def("add_rms_norm_(Tensor(a!) x, Tensor? r, Tensor w, float eps) -> Tensor");
  m.def("silu_mul(Tensor gu) -> Tensor");
  m.def("rope_qk_(Tensor(a!) qkv, Tensor cos, Tensor sin, int heads, int kv_heads) -> ()");
}
TORCH_LIBRARY_IMPL(adaserve, CPU, m) {
  m.impl("skinny_linear", skinny_linear);
  m.impl("add_rms_norm_", add_rms_norm_);
  m.impl("silu_mul", silu_mul);
  m.impl("rope_qk_", rope_qk_);
}

// Skinny fp32 matmuls for decoding on AVX2 CPUs: y[M, N] = x[M, K] @ w[N, K]^T for small M.
//
// Why: at M <= 16 a transformer forward is a stream of its weights. MKL and oneDNN read
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

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// One tile: R weight rows times C input rows, all K. R * C accumulators live in
// registers (at most 12 of the 16 ymm, leaving room for the loads).
template <int R, int C>
void tile(const float* w, const float* x, float* y, int64_t K, int64_t ldy) {
  __m256 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 xv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) xv[c] = _mm256_loadu_ps(x + c * K + k);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 wv = _mm256_loadu_ps(w + r * K + k);
#pragma GCC unroll 4
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

using TileFn = void (*)(const float*, const float*, float*, int64_t, int64_t);

template <int R>
constexpr TileFn row_of(int c) {
  return c == 1 ? tile<R, 1> : c == 2 ? tile<R, 2> : c == 3 ? tile<R, 3> : tile<R, 4>;
}

TileFn tile_fn(int r, int c) {
  switch (r) {
    case 1: return row_of<1>(c);
    case 2: return row_of<2>(c);
    case 3: return row_of<3>(c);
    case 4: return row_of<4>(c);
    case 5: return row_of<5>(c);
    case 6: return row_of<6>(c);
    case 7: return row_of<7>(c);
    default: return row_of<8>(c);
  }
}

// Weight rows per tile for an input chunk of c rows: enough independent accumulators to
// hide the FMA latency (8 to 12), never more than 12.
int rows_per_tile(int c) { return c == 1 ? 8 : c == 2 ? 4 : c == 3 ? 4 : 3; }

at::Tensor skinny_linear(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2, "skinny_linear: x [M, K] and w [N, K]");
  TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat,
              "skinny_linear: float32 only");
  TORCH_CHECK(x.size(1) == w.size(1), "skinny_linear: K differs: ", x.size(1), " vs ",
              w.size(1));
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous(), "skinny_linear: contiguous inputs");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  at::Tensor y = at::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  // Inputs in chunks of up to 4 rows; a tile's weight rows are reused from L1 for every
  // chunk, so DRAM sees each weight once whatever M is.
  const int first = static_cast<int>(M < 4 ? M : 4);
  const int rb = rows_per_tile(first);
  const int64_t blocks = (N + rb - 1) / rb;
  at::parallel_for(0, blocks, 16, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n0 = b * rb;
      const int r = static_cast<int>(N - n0 < rb ? N - n0 : rb);
      for (int64_t m0 = 0; m0 < M; m0 += 4) {
        const int c = static_cast<int>(M - m0 < 4 ? M - m0 : 4);
        tile_fn(r, c)(wp + n0 * K, xp + m0 * K, yp + m0 * N + n0, K, N);
      }
    }
  });
  return y;
}

}  // namespace

TORCH_LIBRARY(adaserve, m) { m.def("skinny_linear(Tensor x, Tensor w) -> Tensor"); }
TORCH_LIBRARY_IMPL(adaserve, CPU, m) { m.impl("skinny_linear", skinny_linear); }

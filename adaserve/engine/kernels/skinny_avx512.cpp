// Skinny fp32 matmuls on AVX-512 CPUs: the tiles of skinny.cpp at twice the vector width.
//
// Why: past a few input rows the AVX2 tiles are bound by their FMAs, not the weights' read.
// On the Intel Xeon here the model's 121 products took 37 ms at 8 rows against 20 ms at one
// (the read), and at 40 rows (a batch of 8 verifying 5 tokens each) MKL took 72 ms. With
// 16 lanes and 32 registers a tile holds more inputs, so every weight vector loaded feeds
// more FMAs, and the FMAs themselves are twice as wide (~330 GFLOP/s here against ~160).
//
// Same structure as skinny.cpp: a tile of R weight rows x C input rows keeps R x C
// accumulators, streams its weight rows once (prefetched ahead) and reuses them from L1 for
// the next chunk of inputs; one horizontal sum per output at the end.
#include <immintrin.h>

#include "wide.h"

namespace adaserve_wide {
namespace {

#define WIDE __attribute__((target("avx512f")))

// Software prefetch distance in floats ahead of the row being read (8 KB), as skinny.cpp.
constexpr int64_t kPrefetch = 2048;

template <int R, int C>
WIDE void tile(const float* w, const float* x, float* y, int64_t K, int64_t ldy, bool prefetch) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 16) {
    if (prefetch) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(w + r * K + k + kPrefetch), _MM_HINT_T0);
    }
    __m512 xv[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) xv[c] = _mm512_loadu_ps(x + c * K + k);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 wv = _mm512_loadu_ps(w + r * K + k);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(wv, xv[c], acc[r][c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) y[c * ldy + r] = _mm512_reduce_add_ps(acc[r][c]);
}

using TileFn = void (*)(const float*, const float*, float*, int64_t, int64_t, bool);

// A tile of R x C exists where its accumulators fit 24 of the 32 registers.
template <int R, int C>
TileFn if_fits() {
  if constexpr (R * C <= 24) return tile<R, C>; else return nullptr;
}

template <int R>
TileFn row_of(int c) {
  switch (c) {
    case 1: return tile<R, 1>;
    case 2: return tile<R, 2>;
    case 3: return tile<R, 3>;
    case 4: return tile<R, 4>;
    case 5: return if_fits<R, 5>();
    case 6: return if_fits<R, 6>();
    case 7: return if_fits<R, 7>();
    default: return if_fits<R, 8>();
  }
}

TileFn tile_fn(int r, int c) {
  switch (r) {
    case 1: return row_of<1>(c);
    case 2: return row_of<2>(c);
    case 3: return row_of<3>(c);
    case 4: return row_of<4>(c);
    case 5: return row_of<5>(c);
    default: return row_of<6>(c);
  }
}

// Tile shapes: up to 8 inputs, one chunk of 2 weight rows x all inputs (16 accumulators,
// each weight vector loaded once); past 8, 6 rows x chunks of 4 (24 accumulators). Past 8
// the inputs no longer stay in L1 between a tile's weight rows and the next's, so every
// chunk is read again from L2 for each tile: 6 weight rows a tile read them a third fewer
// times than the 4 x 6 tiles before, and the model's 121 products at 32-64 rows took
// 6-8% less time (interleaved builds, twice, 2026-11-29 23:20 UTC; 12-24 rows the same).
struct Shape {
  int rows, chunk;
};
Shape shape_of(int64_t M) {
  return M <= 8 ? Shape{2, static_cast<int>(M)} : Shape{6, 4};
}

}  // namespace

int64_t skinny_block_rows(int64_t M) { return shape_of(M).rows; }

WIDE void skinny_blocks(const float* w, const float* x, float* y, int64_t M, int64_t K,
                        int64_t N, int64_t b0, int64_t b1) {
  const Shape s = shape_of(M);
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t n0 = b * s.rows;
    const int r = static_cast<int>(N - n0 < s.rows ? N - n0 : s.rows);
    for (int64_t m0 = 0; m0 < M; m0 += s.chunk) {
      const int c = static_cast<int>(M - m0 < s.chunk ? M - m0 : s.chunk);
      tile_fn(r, c)(w + n0 * K, x + m0 * K, y + m0 * N + n0, K, N, m0 == 0);
    }
  }
}

}  // namespace adaserve_wide

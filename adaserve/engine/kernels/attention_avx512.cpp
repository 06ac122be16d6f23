// The verify shapes of tree attention (several query tokens a request) on AVX-512 CPUs.
//
// Why: past a few query tokens the AVX2 unit is bound by its FMAs, not the memory. Each KV
// row costs 4 x M x 64 flops for M = Q x G query rows; 8 tokens (M = 24) are ~12 flops a
// byte, above the AVX2 ridge (an Intel Xeon here: 172 GFLOP/s over 21 GB/s), and the unit
// reached ~43% of even that peak, a third of its score phase going to horizontal sums.
// Where the CPU has AVX-512 (twice the FMA width; ~330 GFLOP/s on the same Xeon), this
// unit computes the scores transposed, S^T[c, m] = k[c] . q[m], with the M query rows in
// the vector lanes: the queries are transposed once a unit, a key element is broadcast
// against 16 rows at a time, and no score needs a horizontal sum. The online softmax
// then runs down the columns, lane-wise (each lane is one row's running max and sum), and
// O += P V broadcasts a probability against the V row's four vectors. Rows M..16*MV are
// padding that nothing reads.
//
// Every function here is compiled for AVX-512F by its own target attribute, and none is
// shared with another file, so no AVX-512 code can be linked into the AVX2 paths; the
// driver (attention.cpp) calls run_unit_wide only where adaserve_wide::runs() (wide.h).
#include "attention.h"

#include <immintrin.h>

namespace adaserve_attention {
namespace {

#define WIDE __attribute__((target("avx512f")))

constexpr int64_t D = kWideD;
constexpr int64_t kLine = 16;  // floats in a 64-byte cache line

// e^x for 16 lanes: x = n ln2 + r, |r| <= ln2 / 2, e^r by a degree-6 polynomial (Cephes'
// expf coefficients), then scalef by 2^n; lanes below -87.3 (masked scores: -inf) give 0,
// so no denormal is ever made.
WIDE inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.3f);
  const __mmask16 live = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);
  x = _mm512_max_ps(x, lo);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return _mm512_maskz_scalef_ps(live, p, n);
}

// st[c, :] = k[c] . qt for C columns (key rows of stride D) and 16 MV rows (qt is [D, 16 MV]):
// C x MV accumulators, each key element broadcast against the MV row vectors. The block's
// V rows and the next block's K rows are prefetched meanwhile (pf_v / pf_k lines).
template <int MV, int C>
WIDE void qk_tile(const float* qt, const float* k, float* st, const float* pf_v, int64_t nv,
                  const float* pf_k, int64_t nk) {
  constexpr int64_t SP = 16 * MV;
  __m512 acc[C][MV];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c)
#pragma GCC unroll 8
    for (int j = 0; j < MV; ++j) acc[c][j] = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    if (d < nv) _mm_prefetch(reinterpret_cast<const char*>(pf_v + kLine * d), _MM_HINT_T0);
    if (d < nk) _mm_prefetch(reinterpret_cast<const char*>(pf_k + kLine * d), _MM_HINT_T0);
    __m512 qv[MV];
#pragma GCC unroll 8
    for (int j = 0; j < MV; ++j) qv[j] = _mm512_loadu_ps(qt + d * SP + 16 * j);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const __m512 kb = _mm512_set1_ps(k[c * D + d]);
#pragma GCC unroll 8
      for (int j = 0; j < MV; ++j) acc[c][j] = _mm512_fmadd_ps(qv[j], kb, acc[c][j]);
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c)
#pragma GCC unroll 8
    for (int j = 0; j < MV; ++j) _mm512_storeu_ps(st + c * SP + 16 * j, acc[c][j]);
}

// o[m0 + r, :] += sum_c st[c, m0 + r] v[c, :] for R rows: R x 4 accumulators (the whole
// 64-wide row), each probability broadcast, each V vector loaded once for the R rows.
template <int R>
WIDE void pv_tile(const float* st, int64_t sp, const float* v, int64_t nc, float* o) {
  __m512 acc[R][4];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_loadu_ps(o + r * D + 16 * j);
  for (int64_t c = 0; c < nc; ++c) {
    __m512 vv[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) vv[j] = _mm512_loadu_ps(v + c * D + 16 * j);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 pb = _mm512_set1_ps(st[c * sp + r]);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_fmadd_ps(pb, vv[j], acc[r][j]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(o + r * D + 16 * j, acc[r][j]);
}

using QkFn = void (*)(const float*, const float*, float*, const float*, int64_t, const float*,
                      int64_t);
using PvFn = void (*)(const float*, int64_t, const float*, int64_t, float*);

constexpr int kMaxMV = kWideMaxRows / 16;

// The widest column tile for MV row vectors: C x MV accumulators within 24 of the 32
// registers, the rest for the row vectors and the broadcast.
constexpr int widest(int mv) { return mv == 1 ? 16 : mv <= 3 ? 8 : 4; }

template <int MV>
QkFn qk_of(int c) {
  switch (c) {
    case 16: if constexpr (widest(MV) >= 16) return qk_tile<MV, 16>; else return nullptr;
    case 8: if constexpr (widest(MV) >= 8) return qk_tile<MV, 8>; else return nullptr;
    case 4: return qk_tile<MV, 4>;
    case 2: return qk_tile<MV, 2>;
    default: return qk_tile<MV, 1>;
  }
}

QkFn qk_fn(int mv, int c) {
  switch (mv) {
    case 1: return qk_of<1>(c);
    case 2: return qk_of<2>(c);
    case 3: return qk_of<3>(c);
    case 4: return qk_of<4>(c);
    case 5: return qk_of<5>(c);
    default: return qk_of<6>(c);
  }
}

PvFn pv_fn(int r) {
  switch (r) {
    case 1: return pv_tile<1>;
    case 2: return pv_tile<2>;
    case 3: return pv_tile<3>;
    case 4: return pv_tile<4>;
    case 5: return pv_tile<5>;
    default: return pv_tile<6>;
  }
}

// Folds a block of transposed scores st [nc, SP] into the lanes' running max and sum,
// leaving the probabilities in st and each lane's rescale factor in alpha.
WIDE void softmax_block(float* st, int64_t nc, int64_t mv, float* mrun, float* lrun,
                        float* alpha) {
  const int64_t sp = 16 * mv;
  const __m512 ninf = _mm512_set1_ps(kNegInf), zero = _mm512_setzero_ps();
  for (int64_t j = 0; j < mv; ++j) {
    __m512 mx = ninf;
    for (int64_t c = 0; c < nc; ++c)
      mx = _mm512_max_ps(mx, _mm512_loadu_ps(st + c * sp + 16 * j));
    const __m512 old = _mm512_loadu_ps(mrun + 16 * j);
    const __m512 now = _mm512_max_ps(old, mx);
    // a lane that has seen nothing yet subtracts 0, so its e^-inf is 0, not NaN
    const __m512 sub =
        _mm512_mask_blend_ps(_mm512_cmp_ps_mask(now, ninf, _CMP_EQ_OQ), now, zero);
    __m512 sum = zero;
    for (int64_t c = 0; c < nc; ++c) {
      const __m512 p = exp16(_mm512_sub_ps(_mm512_loadu_ps(st + c * sp + 16 * j), sub));
      _mm512_storeu_ps(st + c * sp + 16 * j, p);
      sum = _mm512_add_ps(sum, p);
    }
    const __m512 a = exp16(_mm512_sub_ps(old, sub));  // 0 where old is -inf
    _mm512_storeu_ps(alpha + 16 * j, a);
    _mm512_storeu_ps(lrun + 16 * j, _mm512_fmadd_ps(_mm512_loadu_ps(lrun + 16 * j), a, sum));
    _mm512_storeu_ps(mrun + 16 * j, now);
  }
}

}  // namespace

int64_t wide_scratch(int64_t M) {
  const int64_t sp = 16 * ((M + 15) / 16);
  return (D + kBlock + 3) * sp;
}

WIDE void run_unit_wide(const Problem& pb, const Unit& u, float* scratch, Partial out) {
  const int64_t G = pb.G, M = pb.Q * G, mv = (M + 15) / 16, sp = 16 * mv;
  float* qt = scratch;  // [D, sp]: the scaled queries, rows in the lanes
  float* st = qt + D * sp;  // [kBlock, sp]: a block's scores, then probabilities
  float* mrun = st + kBlock * sp;  // [sp] each
  float* lrun = mrun + sp;
  float* alpha = lrun + sp;
  for (int64_t x = 0; x < D * sp; ++x) qt[x] = 0.f;
  // rows m = a * G + hh: query token a, query head g * G + hh
  for (int64_t m = 0; m < M; ++m) {
    const float* src = pb.q + u.i * pb.qs_n + (m / G) * pb.qs_q + (u.g * G + m % G) * pb.qs_h;
    for (int64_t d = 0; d < D; ++d) qt[d * sp + m] = src[d] * pb.scale;
  }
  for (int64_t x = 0; x < sp; ++x) mrun[x] = kNegInf, lrun[x] = 0.f;
  for (int64_t x = 0; x < M * D; ++x) out.o[x] = 0.f;
  const int64_t head = (pb.slots[u.i] * pb.Hkv + u.g) * pb.C * D;
  const float* kb = pb.k + head;
  const float* vb = pb.v + head;
  const int64_t prefix = pb.prefix[u.i];
  const bool* tree = pb.tree + u.i * pb.Q * pb.W;
  const int top = widest(static_cast<int>(mv));
  for (int64_t cb = u.c0; cb < u.c1; cb += kBlock) {
    const int64_t nc = u.c1 - cb < kBlock ? u.c1 - cb : kBlock;
    const int64_t ahead = u.c1 - cb - nc < kBlock ? u.c1 - cb - nc : kBlock;  // next block's
    const float* kblk = kb + cb * D;
    const float* vblk = vb + cb * D;
    for (int64_t c0 = 0; c0 < nc;) {
      int c = top;
      while (c > nc - c0) c >>= 1;  // the widest tile that fits what is left
      const int64_t nk = ahead > c0 ? (ahead - c0 < c ? ahead - c0 : c) * D / kLine : 0;
      qk_fn(static_cast<int>(mv), c)(qt, kblk + c0 * D, st + c0 * sp, vblk + c0 * D,
                                     c * D / kLine, kblk + (nc + c0) * D, nk);
      c0 += c;
    }
    // the tree's own columns: each query sees its ancestors only
    mask_tree(tree, pb.W, G, M, prefix, cb, nc, st, 1, sp);
    softmax_block(st, nc, mv, mrun, lrun, alpha);
    for (int64_t m = 0; m < M; ++m) {
      if (alpha[m] == 1.f) continue;
      const __m512 a = _mm512_set1_ps(alpha[m]);
      float* orow = out.o + m * D;
      for (int64_t j = 0; j < D; j += 16)
        _mm512_storeu_ps(orow + j, _mm512_mul_ps(a, _mm512_loadu_ps(orow + j)));
    }
    for (int64_t m0 = 0; m0 < M; m0 += 6) {
      const int r = static_cast<int>(M - m0 < 6 ? M - m0 : 6);
      pv_fn(r)(st + m0, sp, vblk, nc, out.o + m0 * D);
    }
  }
  for (int64_t m = 0; m < M; ++m) out.m[m] = mrun[m], out.l[m] = lrun[m];
}

}  // namespace adaserve_attention

// The verify shapes of tree attention (several query tokens a request) on AVX-512 CPUs.
//
// Why: past a few query tokens the AVX2 unit is bound by its FMAs, not the memory. Each KV
// row costs 4 x M x 64 flops for M = Q x G query rows; 8 tokens (M = 24) are ~12 flops a
// byte, above the AVX2 ridge (an Intel Xeon here: 172 GFLOP/s over 21 GB/s), and the unit
// reached ~43% of even that peak, a third of its score phase going to horizontal sums.
// Where the CPU has AVX-512 (twice the FMA width; ~330 GFLOP/s on the same Xeon), this
// unit puts the query rows in the vector lanes, so no score needs a horizontal sum: a key
// element is broadcast against 16 rows, S^T[c, m] = k[c] . q[m]. Where M leaves a vector
// at most half full (M mod 16 in 1..8: 8 tokens are 24 rows, 16 + 8), the unit pairs
// the columns instead: a vector holds 8 rows for two columns (lane 2i + p: row i, column
// 2c + p), fed by one 64-bit broadcast of the pair's interleaved keys (interleaved once a
// block), so M rows take ceil(M / 8) vectors a pair and 24 rows fill 3, not 4 with a
// quarter of the lanes empty. The online softmax runs lane-wise (paired lanes share their
// row's running max; each sums its own columns, and the two sums meet at the unit's end),
// and O += P V broadcasts a probability against the V row's four vectors. Scores are kept
// in base 2 (the queries carry log2 e), so e^x is one exp2 polynomial.
//
// Every function here is compiled for AVX-512F by its own target attribute, and none is
// shared with another file, so no AVX-512 code can be linked into the AVX2 paths; the
// driver (attention.cpp) calls run_unit_wide only where adaserve_wide::runs() (wide.h).
#include "attention.h"

#include <immintrin.h>

#include <cstring>
#include <utility>

namespace adaserve_attention {
namespace {

#define WIDE __attribute__((target("avx512f")))

constexpr int64_t D = kWideD;
constexpr int64_t kLine = 16;  // floats in a 64-byte cache line
constexpr float kLog2e = 1.44269504088896341f, kLn2 = 0.693147180559945309f;

// Columns a lane group spans (L): 1, 16 rows a vector; or 2, 8 rows a vector for a pair.
// Whether M rows take fewer vectors paired: ceil(M / 8) a pair against 2 ceil(M / 16).
constexpr bool paired(int64_t M) { return (M + 7) / 8 < 2 * ((M + 15) / 16); }

// Where row r's lanes start: r, or (paired) group r / 8, slot r % 8.
template <int L>
constexpr int64_t lane(int64_t r) { return L == 1 ? r : (r / 8) * 16 + (r % 8) * 2; }

// 2^x for 16 lanes: x = n + r, |r| <= 1/2, 2^r by a degree-6 polynomial (Cephes' exp2f
// coefficients), then scalef by 2^n; lanes below -126 (masked scores: -inf) give 0, so no
// denormal is ever made.
WIDE inline __m512 exp2_16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-126.f);
  const __mmask16 live = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);
  x = _mm512_max_ps(x, lo);
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.535336188319500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.339887440266574e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(9.618437357674640e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.550332471162809e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(2.402264791363012e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(6.931472028550421e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  return _mm512_maskz_scalef_ps(live, p, n);
}

// kp[c][d] = (k[2c][d], k[2c + 1][d]) for the nc key rows at k (a missing last odd row
// reads zeros): the pair one 64-bit broadcast loads.
WIDE void interleave(const float* k, int64_t nc, float* kp) {
  const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i hi =
      _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  for (int64_t c = 0; c < nc; c += 2) {
    const float* a = k + c * D;
    float* dst = kp + c * D;
    for (int64_t d = 0; d < D; d += 16) {
      const __m512 x = _mm512_loadu_ps(a + d);
      const __m512 y = c + 1 < nc ? _mm512_loadu_ps(a + D + d) : _mm512_setzero_ps();
      _mm512_storeu_ps(dst + 2 * d, _mm512_permutex2var_ps(x, lo, y));
      _mm512_storeu_ps(dst + 2 * d + 16, _mm512_permutex2var_ps(x, hi, y));
    }
  }
}

// The L keys' element d of column group c, in every lane of its group.
template <int L>
WIDE inline __m512 keys(const float* kx, int64_t c, int64_t d) {
  if constexpr (L == 1) {
    return _mm512_set1_ps(kx[c * D + d]);
  } else {
    double pair;
    std::memcpy(&pair, kx + c * 2 * D + 2 * d, sizeof pair);
    return _mm512_castpd_ps(_mm512_set1_pd(pair));
  }
}

// st[c, :] = the scores of P column groups (keys kx: a block's rows, or its pairs) against
// NV vectors of rows (qd is [D, 16 NV]): P x NV accumulators, each group's keys broadcast
// against the NV row vectors; each lane's largest score joins bmax. V lines (pf_v, nv) and
// the next block's K lines (pf_k, nk) are prefetched meanwhile.
template <int L, int NV, int P>
WIDE void qk_tile(const float* qd, const float* kx, float* st, const float* pf_v, int64_t nv,
                  const float* pf_k, int64_t nk, float* bmax) {
  constexpr int64_t SP = 16 * NV;
  __m512 acc[P][NV];
#pragma GCC unroll 16
  for (int c = 0; c < P; ++c)
#pragma GCC unroll 12
    for (int j = 0; j < NV; ++j) acc[c][j] = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    if (d < nv) _mm_prefetch(reinterpret_cast<const char*>(pf_v + kLine * d), _MM_HINT_T0);
    if (d + D < nv)
      _mm_prefetch(reinterpret_cast<const char*>(pf_v + kLine * (d + D)), _MM_HINT_T0);
    if (d < nk) _mm_prefetch(reinterpret_cast<const char*>(pf_k + kLine * d), _MM_HINT_T0);
    if (d + D < nk)
      _mm_prefetch(reinterpret_cast<const char*>(pf_k + kLine * (d + D)), _MM_HINT_T0);
    __m512 qv[NV];
#pragma GCC unroll 12
    for (int j = 0; j < NV; ++j) qv[j] = _mm512_loadu_ps(qd + d * SP + 16 * j);
#pragma GCC unroll 16
    for (int c = 0; c < P; ++c) {
      const __m512 kb = keys<L>(kx, c, d);
#pragma GCC unroll 12
      for (int j = 0; j < NV; ++j) acc[c][j] = _mm512_fmadd_ps(qv[j], kb, acc[c][j]);
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < P; ++c)
#pragma GCC unroll 12
    for (int j = 0; j < NV; ++j) _mm512_storeu_ps(st + c * SP + 16 * j, acc[c][j]);
#pragma GCC unroll 12
  for (int j = 0; j < NV; ++j) {
    __m512 mx = _mm512_loadu_ps(bmax + 16 * j);
#pragma GCC unroll 16
    for (int c = 0; c < P; ++c) mx = _mm512_max_ps(mx, acc[c][j]);
    _mm512_storeu_ps(bmax + 16 * j, mx);
  }
}

// o[r, :] += sum_c p(r, c) v[c, :] for R consecutive rows whose lanes are L apart (from
// st, which points at the first row's lane): R x 4 accumulators (the whole 64-wide row),
// each probability broadcast, each V vector loaded once for the R rows.
template <int L, int R>
WIDE void pv_tile(const float* st, int64_t sp, const float* v, int64_t nc, float* o) {
  __m512 acc[R][4];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_loadu_ps(o + r * D + 16 * j);
  for (int64_t c = 0; c < nc; ++c) {
    const float* pc = st + (c / L) * sp + c % L;
    __m512 vv[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) vv[j] = _mm512_loadu_ps(v + c * D + 16 * j);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 pb = _mm512_set1_ps(pc[L * r]);
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
                      int64_t, float*);
using PvFn = void (*)(const float*, int64_t, const float*, int64_t, float*);

// Row vectors a unit may need: 16 rows a vector, or 8 paired.
template <int L>
constexpr int kMaxVectors = kWideMaxRows * L / 16;

// The widest tile of column groups for NV row vectors: P x NV accumulators within 24 of
// the 32 registers, the rest for the row vectors and the broadcast.
constexpr int widest(int nv) { return nv == 1 ? 16 : nv <= 3 ? 8 : nv <= 6 ? 4 : nv <= 8 ? 2 : 1; }

template <int L, int NV>
QkFn qk_of(int p) {
  switch (p) {
    case 16: if constexpr (widest(NV) >= 16) return qk_tile<L, NV, 16>; else return nullptr;
    case 8: if constexpr (widest(NV) >= 8) return qk_tile<L, NV, 8>; else return nullptr;
    case 4: if constexpr (widest(NV) >= 4) return qk_tile<L, NV, 4>; else return nullptr;
    case 2: if constexpr (widest(NV) >= 2) return qk_tile<L, NV, 2>; else return nullptr;
    default: return qk_tile<L, NV, 1>;
  }
}

template <int L, int... V>
QkFn qk_pick(int nv, int p, std::integer_sequence<int, V...>) {
  QkFn f = nullptr;
  ((nv == V + 1 ? (f = qk_of<L, V + 1>(p), 0) : 0), ...);
  return f;
}

template <int L>
QkFn qk_fn(int nv, int p) {
  return qk_pick<L>(nv, p, std::make_integer_sequence<int, kMaxVectors<L>>{});
}

// Rows a P V tile takes: 6 consecutive lanes, or (paired: lanes 2 apart within a group of
// 8) 4.
template <int L>
constexpr int kPvRows = L == 1 ? 6 : 4;

template <int L>
PvFn pv_fn(int r) {
  switch (r) {
    case 1: return pv_tile<L, 1>;
    case 2: return pv_tile<L, 2>;
    case 3: return pv_tile<L, 3>;
    case 4: return pv_tile<L, 4>;
    case 5: if constexpr (kPvRows<L> >= 5) return pv_tile<L, 5>; else return nullptr;
    default: if constexpr (kPvRows<L> >= 6) return pv_tile<L, 6>; else return nullptr;
  }
}

// Folds a block of scores st [ng groups, sp] into the lanes' running max and sum, leaving
// the probabilities in st and each lane's rescale factor in alpha. The block's largest
// score a lane is bmax, or (masked: scores set to -inf since) read from st again; paired
// lanes take the larger of their two, so a row has one running max.
template <int L>
WIDE void softmax_block(float* st, int64_t ng, int64_t nv, float* mrun, float* lrun,
                        float* alpha, const float* bmax, bool masked) {
  const int64_t sp = 16 * nv;
  const __m512 ninf = _mm512_set1_ps(kNegInf), zero = _mm512_setzero_ps();
  for (int64_t j = 0; j < nv; ++j) {
    __m512 mx = ninf;
    if (masked)
      for (int64_t c = 0; c < ng; ++c)
        mx = _mm512_max_ps(mx, _mm512_loadu_ps(st + c * sp + 16 * j));
    else
      mx = _mm512_loadu_ps(bmax + 16 * j);
    if constexpr (L == 2) mx = _mm512_max_ps(mx, _mm512_permute_ps(mx, 0xB1));  // swap pairs
    const __m512 old = _mm512_loadu_ps(mrun + 16 * j);
    const __m512 now = _mm512_max_ps(old, mx);
    // a lane that has seen nothing yet subtracts 0, so its 2^-inf is 0, not NaN
    const __m512 sub =
        _mm512_mask_blend_ps(_mm512_cmp_ps_mask(now, ninf, _CMP_EQ_OQ), now, zero);
    __m512 sum = zero;
    for (int64_t c = 0; c < ng; ++c) {
      const __m512 p = exp2_16(_mm512_sub_ps(_mm512_loadu_ps(st + c * sp + 16 * j), sub));
      _mm512_storeu_ps(st + c * sp + 16 * j, p);
      sum = _mm512_add_ps(sum, p);
    }
    const __m512 a = exp2_16(_mm512_sub_ps(old, sub));  // 0 where old is -inf
    _mm512_storeu_ps(alpha + 16 * j, a);
    _mm512_storeu_ps(lrun + 16 * j, _mm512_fmadd_ps(_mm512_loadu_ps(lrun + 16 * j), a, sum));
    _mm512_storeu_ps(mrun + 16 * j, now);
  }
}

// Scores no query row may see become -inf: the tree's own columns a row does not descend
// from (mask_tree, attention.h), and (paired) a missing last odd column.
template <int L>
void mask_block(const bool* tree, int64_t W, int64_t G, int64_t M, int64_t prefix, int64_t cb,
                int64_t nc, int64_t sp, float* st) {
  if (L == 2 && nc % 2)
    for (int64_t r = 0; r < M; ++r) st[(nc / 2) * sp + lane<L>(r) + 1] = kNegInf;
  mask_tree(tree, W, G, M, prefix, cb, nc, [st, sp](int64_t r, int64_t c) -> float& {
    return st[(c / L) * sp + lane<L>(r) + c % L];
  });
}

template <int L>
WIDE void run_unit(const Problem& pb, const Unit& u, float* scratch, Partial out) {
  const int64_t G = pb.G, M = pb.Q * G, nv = (M * L + 15) / 16, sp = 16 * nv;
  float* qd = scratch;  // [D, sp]: the scaled queries, each row in its L lanes
  float* st = qd + D * sp;  // [kBlock / L, sp]: a block's scores, then probabilities
  float* mrun = st + kBlock * sp;  // [sp] each
  float* lrun = mrun + sp;
  float* alpha = lrun + sp;
  float* bmax = alpha + sp;
  float* kp = bmax + sp;  // [kBlock / 2, D, 2] (paired): a block's keys, interleaved
  for (int64_t x = 0; x < D * sp; ++x) qd[x] = 0.f;
  // rows r = a * G + hh: query token a, query head g * G + hh; scores in base 2
  const float scale = pb.scale * kLog2e;
  for (int64_t r = 0; r < M; ++r) {
    const float* src = pb.q + u.i * pb.qs_n + (r / G) * pb.qs_q + (u.g * G + r % G) * pb.qs_h;
    for (int64_t d = 0; d < D; ++d)
      for (int p = 0; p < L; ++p) qd[d * sp + lane<L>(r) + p] = src[d] * scale;
  }
  for (int64_t x = 0; x < sp; ++x) mrun[x] = kNegInf, lrun[x] = 0.f;
  for (int64_t x = 0; x < M * D; ++x) out.o[x] = 0.f;
  const int64_t head = (pb.slots[u.i] * pb.Hkv + u.g) * pb.C * D;
  const float* kb = pb.k + head;
  const float* vb = pb.v + head;
  const int64_t prefix = pb.prefix[u.i];
  const bool* tree = pb.tree + u.i * pb.Q * pb.W;
  const int top = widest(static_cast<int>(nv));
  const QkFn qk_top = qk_fn<L>(static_cast<int>(nv), top);
  for (int64_t cb = u.c0; cb < u.c1; cb += kBlock) {
    const int64_t nc = u.c1 - cb < kBlock ? u.c1 - cb : kBlock, ng = (nc + L - 1) / L;
    const int64_t ahead = u.c1 - cb - nc < kBlock ? u.c1 - cb - nc : kBlock;  // next block's
    const float* kblk = kb + cb * D;
    const float* vblk = vb + cb * D;
    if constexpr (L == 2) interleave(kblk, nc, kp);
    const float* kx = L == 2 ? kp : kblk;
    for (int64_t x = 0; x < sp; ++x) bmax[x] = kNegInf;
    for (int64_t g0 = 0; g0 < ng;) {
      int p = top;
      while (p > ng - g0) p >>= 1;  // the widest tile that fits what is left
      const int64_t c0 = L * g0, cols = L * p < nc - c0 ? L * p : nc - c0;
      const int64_t nk = ahead > c0 ? (ahead - c0 < cols ? ahead - c0 : cols) * D / kLine : 0;
      (p == top ? qk_top : qk_fn<L>(static_cast<int>(nv), p))(
          qd, kx + c0 * D, st + g0 * sp, vblk + c0 * D, cols * D / kLine, kblk + (nc + c0) * D,
          nk, bmax);
      g0 += p;
    }
    const bool masked = cb + nc > prefix || (L == 2 && nc % 2);
    if (masked) mask_block<L>(tree, pb.W, G, M, prefix, cb, nc, sp, st);
    softmax_block<L>(st, ng, nv, mrun, lrun, alpha, bmax, masked);
    for (int64_t r = 0; r < M; ++r) {
      const float a = alpha[lane<L>(r)];
      if (a == 1.f) continue;
      const __m512 av = _mm512_set1_ps(a);
      float* orow = out.o + r * D;
      for (int64_t j = 0; j < D; j += 16)
        _mm512_storeu_ps(orow + j, _mm512_mul_ps(av, _mm512_loadu_ps(orow + j)));
    }
    // paired, a tile's rows stay in one group of 8 (their lanes 2 apart)
    for (int64_t r0 = 0; r0 < M; r0 += kPvRows<L>) {
      const int r = static_cast<int>(M - r0 < kPvRows<L> ? M - r0 : kPvRows<L>);
      pv_fn<L>(r)(st + lane<L>(r0), sp, vblk, nc, out.o + r0 * D);
    }
  }
  for (int64_t r = 0; r < M; ++r) {
    out.m[r] = mrun[lane<L>(r)] * kLn2;
    out.l[r] = L == 2 ? lrun[lane<L>(r)] + lrun[lane<L>(r) + 1] : lrun[lane<L>(r)];
  }
}

}  // namespace

int64_t wide_scratch(int64_t M) {
  const int64_t sp = 16 * (paired(M) ? (M + 7) / 8 : (M + 15) / 16);
  return (D + kBlock + 4) * sp + (paired(M) ? kBlock * D : 0);
}

void run_unit_wide(const Problem& pb, const Unit& u, float* scratch, Partial out) {
  if (paired(pb.Q * pb.G))
    run_unit<2>(pb, u, scratch, out);
  else
    run_unit<1>(pb, u, scratch, out);
}

}  // namespace adaserve_attention

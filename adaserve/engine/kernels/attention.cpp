// Decode and tree-verify attention over a long KV cache on AVX2 CPUs, reading K and V once.
//
// Why: with grouped-query attention, the G query heads of a KV group and every query token
// of a request (a decode token, or the nodes of a draft tree) read the same K and V rows.
// SDPA on the CPU walks them once per query head and in small query blocks, so 8 tree
// tokens cost ~2.5-3x one at 4-8k context (docs/engine.md). Here one work unit takes all
// M = Q x G query rows of a (request, KV head) pair and one run of its cache columns, and
// streams that run once: per block of kBlock columns (kSmallBlock for a decode token's few
// rows), S = Q K^T for all M rows, an online softmax update (flash-decoding), then O += P V,
// while the block is still in L1; the block's V and the next block's K are prefetched
// meanwhile, so the memory does not idle through the softmax.
//
// Visibility: request i's queries all see its columns [0, prefix[i]); column prefix[i] + j
// is seen by query a iff tree[i, a, j]; nothing beyond prefix[i] + W. Long runs of columns
// are split into several units (split-K) so two threads stay busy at batch 1; a second
// pass merges the units' partial softmax states.
//
// Where the CPU runs AVX-512, units of verify shapes (more than kSmallRows query rows) run
// attention_avx512.cpp's unit instead, with the scores transposed (rows in the lanes, no
// horizontal sums) at twice the FMA width; this file keeps the split, the merge, and the
// AVX2 unit every CPU runs.
#include "attention.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

extern "C" __m256 _ZGVdN8v_expf(__m256);  // glibc libmvec, as in skinny.cpp

namespace {

using namespace adaserve_attention;

// ... and for a unit of few query rows, whose scores are cheap, a quarter of that: its K
// and V blocks stay in L1 beside the prefetched next ones. Smaller blocks ran one decode
// token at batch 8, 8k faster (64: 129 ms, 32: 113-119, 16: 111-114) and 4-8 tokens a
// request 4-8% slower, so only a decode token's units take them (2026-11-27, docs/engine.md)
constexpr int kSmallBlock = 16;
constexpr int64_t kSmallRows = 4;  // a decode token: one query row per head of a KV group
constexpr int64_t kLine = 16;  // floats in a 64-byte cache line: what one prefetch asks for
constexpr int64_t kMinSplit = 256;  // fewest columns a unit streams (Q packing, merging)

// [a0..a3] of four vectors' horizontal sums: three hadds instead of four reductions.
inline __m128 hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// s[r, c] = q[r] . k[c] for R query rows (stride D) and C key rows (stride D); 12
// accumulators at 3 x 4, the key vectors folded into the FMAs as memory operands.
template <int R, int C>
void qk_tile(const float* q, const float* k, float* s, int64_t D, int64_t lds) {
  __m256 acc[R][4];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) acc[r][c] = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; d += 8) {
    __m256 qv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) qv[r] = _mm256_loadu_ps(q + r * D + d);
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const __m256 kv = _mm256_loadu_ps(k + c * D + d);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(qv[r], kv, acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m128 v = hsum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    if constexpr (C == 4) {
      _mm_storeu_ps(s + r * lds, v);
    } else {
      alignas(16) float t[4];
      _mm_store_ps(t, v);
      for (int c = 0; c < C; ++c) s[r * lds + c] = t[c];
    }
  }
}

using QkFn = void (*)(const float*, const float*, float*, int64_t, int64_t);

template <int R>
QkFn qk_of(int c) {
  switch (c) {
    case 1: return qk_tile<R, 1>;
    case 2: return qk_tile<R, 2>;
    case 3: return qk_tile<R, 3>;
    default: return qk_tile<R, 4>;
  }
}

QkFn qk_fn(int r, int c) {
  return r == 1 ? qk_of<1>(c) : r == 2 ? qk_of<2>(c) : qk_of<3>(c);
}

// o[r, d0 : d0 + 8J] += sum_c p[r, c] v[c, d0 : d0 + 8J] for R rows: 3 x 4 accumulators,
// the probabilities broadcast, each V vector loaded once for the R rows.
template <int R, int J>
void pv_tile(const float* p, const float* v, float* o, int64_t nc, int64_t D, int64_t ldp) {
  __m256 acc[R][J];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) acc[r][j] = _mm256_loadu_ps(o + r * D + 8 * j);
  for (int64_t c = 0; c < nc; ++c) {
    __m256 pr[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) pr[r] = _mm256_broadcast_ss(p + r * ldp + c);
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) {
      const __m256 vv = _mm256_loadu_ps(v + c * D + 8 * j);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r][j] = _mm256_fmadd_ps(pr[r], vv, acc[r][j]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) _mm256_storeu_ps(o + r * D + 8 * j, acc[r][j]);
}

using PvFn = void (*)(const float*, const float*, float*, int64_t, int64_t, int64_t);

template <int R>
PvFn pv_of(int j) {
  switch (j) {
    case 1: return pv_tile<R, 1>;
    case 2: return pv_tile<R, 2>;
    case 3: return pv_tile<R, 3>;
    default: return pv_tile<R, 4>;
  }
}

PvFn pv_fn(int r, int j) {
  return r == 1 ? pv_of<1>(j) : r == 2 ? pv_of<2>(j) : pv_of<3>(j);
}

struct Scratch {
  std::vector<float> q, s;  // [M, D] packed scaled queries, [M, kBlock] scores
  std::vector<float> wide;  // the AVX-512 unit's (attention.h), where it runs
};

void run_unit(const Problem& pb, const Unit& u, Scratch& sc, Partial out) {
  const int64_t G = pb.G, D = pb.D, M = pb.Q * G;
  float* qp = sc.q.data();
  float* s = sc.s.data();
  // rows m = a * G + hh: query token a, query head g * G + hh
  for (int64_t a = 0; a < pb.Q; ++a)
    for (int64_t hh = 0; hh < G; ++hh) {
      const float* src = pb.q + u.i * pb.qs_n + a * pb.qs_q + (u.g * G + hh) * pb.qs_h;
      float* dst = qp + (a * G + hh) * D;
      for (int64_t d = 0; d < D; ++d) dst[d] = src[d] * pb.scale;
    }
  std::fill(out.m, out.m + M, kNegInf);
  std::fill(out.l, out.l + M, 0.f);
  std::fill(out.o, out.o + M * D, 0.f);
  const int64_t head = (pb.slots[u.i] * pb.Hkv + u.g) * pb.C * D;
  const float* kb = pb.k + head;
  const float* vb = pb.v + head;
  const int64_t prefix = pb.prefix[u.i];
  const bool* tree = pb.tree + u.i * pb.Q * pb.W;
  const int64_t blk = M <= kSmallRows ? kSmallBlock : kBlock;
  for (int64_t cb = u.c0; cb < u.c1; cb += blk) {
    const int64_t nc = std::min<int64_t>(blk, u.c1 - cb);
    const float* kblk = kb + cb * D;
    const float* vblk = vb + cb * D;
    // keep the memory busy through the softmax: while this block's scores are computed,
    // ask for its V rows and the next block's K rows (the hardware prefetcher follows one
    // stream at a time, and stops at the compute between them)
    const int64_t ahead = std::min<int64_t>(blk, std::max<int64_t>(0, u.c1 - cb - nc));
    const float* knext = kblk + nc * D;
    const int64_t klines = ahead * D / kLine;  // this block's V lines all come: c0 < nc
    for (int64_t r0 = 0; r0 < M; r0 += 3) {
      const int r = static_cast<int>(std::min<int64_t>(3, M - r0));
      for (int64_t c0 = 0; c0 < nc; c0 += 4) {
        const int c = static_cast<int>(std::min<int64_t>(4, nc - c0));
        if (r0 == 0) {
          const int64_t l0 = c0 * D / kLine, l1 = (c0 + c) * D / kLine;
          for (int64_t l = l0; l < l1; ++l)
            _mm_prefetch(reinterpret_cast<const char*>(vblk + kLine * l), _MM_HINT_T0);
          for (int64_t l = l0; l < l1 && l < klines; ++l)
            _mm_prefetch(reinterpret_cast<const char*>(knext + kLine * l), _MM_HINT_T0);
        }
        qk_fn(r, c)(qp + r0 * D, kblk + c0 * D, s + r0 * kBlock + c0, D, kBlock);
      }
    }
    // the tree's own columns: each query sees its ancestors only
    mask_tree(tree, pb.W, G, M, prefix, cb, nc,
              [s](int64_t m, int64_t c) -> float& { return s[m * kBlock + c]; });
    // online softmax: fold the block into each row's running max and sum
    const int64_t nv = (nc + 7) / 8;
    for (int64_t m = 0; m < M; ++m) {
      float* sr = s + m * kBlock;
      for (int64_t c = nc; c < nv * 8; ++c) sr[c] = kNegInf;
      __m256 mx = _mm256_set1_ps(kNegInf);
      for (int64_t j = 0; j < nv; ++j) mx = _mm256_max_ps(mx, _mm256_loadu_ps(sr + 8 * j));
      const float old = out.m[m];
      const float now = std::max(old, hmax(mx));
      if (now == kNegInf) {  // nothing visible yet: contributes nothing
        std::fill(sr, sr + nc, 0.f);
        continue;
      }
      const __m256 sub = _mm256_set1_ps(now);
      __m256 sum = _mm256_setzero_ps();
      for (int64_t j = 0; j < nv; ++j) {
        const __m256 p = _ZGVdN8v_expf(_mm256_sub_ps(_mm256_loadu_ps(sr + 8 * j), sub));
        _mm256_storeu_ps(sr + 8 * j, p);
        sum = _mm256_add_ps(sum, p);
      }
      if (now != old) {
        const float alpha = std::exp(old - now);  // 0 when old is -inf
        float* orow = out.o + m * D;
        for (int64_t d = 0; d < D; ++d) orow[d] *= alpha;
        out.l[m] *= alpha;
        out.m[m] = now;
      }
      out.l[m] += hsum(sum);
    }
    for (int64_t r0 = 0; r0 < M; r0 += 3) {
      const int r = static_cast<int>(std::min<int64_t>(3, M - r0));
      for (int64_t d0 = 0; d0 < D; d0 += 32) {
        const int j = static_cast<int>(std::min<int64_t>(4, (D - d0) / 8));
        pv_fn(r, j)(s + r0 * kBlock, vblk + d0, out.o + r0 * D + d0, nc, D, kBlock);
      }
    }
  }
}

at::Tensor tree_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& slots, const at::Tensor& prefix,
                          const at::Tensor& tree, int64_t isa) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
              "tree_attention: q [n, Q, H, D], k and v [S, Hkv, C, D]");
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat &&
                  v.scalar_type() == at::kFloat, "tree_attention: float32 only");
  TORCH_CHECK(k.is_contiguous() && v.is_contiguous() && k.sizes() == v.sizes(),
              "tree_attention: k and v contiguous, of one shape");
  TORCH_CHECK(q.stride(3) == 1, "tree_attention: q needs a unit last stride");
  const int64_t n = q.size(0), Q = q.size(1), H = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), C = k.size(2);
  TORCH_CHECK(k.size(3) == D && D % 8 == 0, "tree_attention: head_dim ", D,
              " must match the cache and be a multiple of 8");
  TORCH_CHECK(Hkv > 0 && H % Hkv == 0, "tree_attention: ", H, " query heads are not groups of ",
              Hkv, " KV heads");
  TORCH_CHECK(slots.scalar_type() == at::kLong && prefix.scalar_type() == at::kLong &&
                  slots.is_contiguous() && prefix.is_contiguous() && slots.numel() == n &&
                  prefix.numel() == n, "tree_attention: slots and prefix are [n] int64");
  TORCH_CHECK(tree.scalar_type() == at::kBool && tree.is_contiguous() && tree.dim() == 3 &&
                  tree.size(0) == n && tree.size(1) == Q, "tree_attention: tree is [n, Q, W] bool");
  adaserve_wide::check_isa(isa, "tree_attention");
  const int64_t W = tree.size(2);
  const int64_t* sp = slots.data_ptr<int64_t>();
  const int64_t* pp = prefix.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(sp[i] >= 0 && sp[i] < k.size(0), "tree_attention: slot ", sp[i], " out of range");
    TORCH_CHECK(pp[i] >= 0 && pp[i] + W <= C, "tree_attention: prefix ", pp[i], " + tree ", W,
                " columns exceed the slot's ", C);
  }
  const Problem pb{q.data_ptr<float>(), q.stride(0), q.stride(1), q.stride(2),
                   k.data_ptr<float>(), v.data_ptr<float>(), sp, pp, tree.data_ptr<bool>(),
                   Q, H, Hkv, H / Hkv, C, D, W, 1.f / std::sqrt(static_cast<float>(D))};
  at::Tensor out = at::empty({n, Q, H * D}, q.options());
  if (n == 0 || Q == 0) return out;

  // split-K: enough units that the threads finish together, none shorter than kMinSplit
  const int threads = at::get_num_threads();
  int64_t total = 0;
  for (int64_t i = 0; i < n; ++i) total += (pp[i] + W) * Hkv;
  const int64_t target = std::max<int64_t>(kMinSplit, total / (8 * threads) + 1);
  std::vector<Unit> units;
  std::vector<int64_t> first(n * Hkv + 1);  // units of pair (i, g): [first[p], first[p + 1])
  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = pp[i] + W;
    const int64_t parts = std::max<int64_t>(1, (len + target - 1) / target);
    const int64_t step = ((len + parts - 1) / parts + kBlock - 1) / kBlock * kBlock;
    for (int64_t g = 0; g < Hkv; ++g) {
      first[i * Hkv + g] = static_cast<int64_t>(units.size());
      for (int64_t c0 = 0; c0 < len; c0 += step)
        units.push_back({i, g, c0, std::min(len, c0 + step)});
    }
  }
  first[n * Hkv] = static_cast<int64_t>(units.size());
  const int64_t U = static_cast<int64_t>(units.size()), M = Q * pb.G;
  at::Tensor part = at::empty({U, M, D + 2}, q.options());  // per unit: o [M, D], m, l
  float* base = part.data_ptr<float>();
  auto partial = [&](int64_t u) {
    float* p = base + u * M * (D + 2);
    return Partial{p + M * D, p + M * D + M, p};
  };

  // verify shapes take the AVX-512 unit where the CPU runs it; a decode token's few rows
  // are bound by the memory, and keep the AVX2 unit tuned for them (its small blocks)
  const bool wide = isa != 0 && adaserve_wide::runs() && D == kWideD && M > kSmallRows &&
                    M <= kWideMaxRows;
  TORCH_CHECK(isa != 1 || wide || M <= kSmallRows, "tree_attention: the AVX-512 unit takes "
              "head_dim ", kWideD, " and at most ", kWideMaxRows, " query rows, not ", D,
              " and ", M);

  // units handed out one at a time: their lengths differ when the prefixes do
  std::atomic<int64_t> next{0};
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    // each unit's scratch only: the AVX2 unit's queries and scores, or the AVX-512 unit's
    Scratch sc{std::vector<float>(wide ? 0 : M * D), std::vector<float>(wide ? 0 : M * kBlock),
               std::vector<float>(wide ? wide_scratch(M) : 0)};
    for (int64_t u; (u = next.fetch_add(1)) < U;) {
      if (wide)
        run_unit_wide(pb, units[u], sc.wide.data(), partial(u));
      else
        run_unit(pb, units[u], sc, partial(u));
    }
  });

  // merge each pair's units: rescale to the common max, then normalize
  float* op = out.data_ptr<float>();
  at::parallel_for(0, n * Hkv, 1, [&](int64_t p0, int64_t p1) {
    std::vector<float> acc(D);
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t i = p / Hkv, g = p % Hkv;
      for (int64_t m = 0; m < M; ++m) {
        float mx = kNegInf;
        for (int64_t u = first[p]; u < first[p + 1]; ++u) mx = std::max(mx, partial(u).m[m]);
        std::fill(acc.begin(), acc.end(), 0.f);
        float l = 0.f;
        if (mx != kNegInf) {
          for (int64_t u = first[p]; u < first[p + 1]; ++u) {
            const Partial pu = partial(u);
            if (pu.m[m] == kNegInf) continue;
            const float w = std::exp(pu.m[m] - mx);
            l += w * pu.l[m];
            const float* o = pu.o + m * D;
            for (int64_t d = 0; d < D; ++d) acc[d] += w * o[d];
          }
        }
        const float inv = l > 0.f ? 1.f / l : 0.f;  // a row that sees nothing reads zeros
        const int64_t a = m / pb.G, h = g * pb.G + m % pb.G;
        float* dst = op + ((i * Q + a) * H + h) * D;
        for (int64_t d = 0; d < D; ++d) dst[d] = acc[d] * inv;
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(adaserve, m) {
  // isa: -1 the best this CPU runs, 0 AVX2 only, 1 AVX-512 for verify shapes (tests and
  // benchmarks set the two side by side)
  m.def("tree_attention(Tensor q, Tensor k, Tensor v, Tensor slots, Tensor prefix, Tensor tree,"
        " int isa=-1) -> Tensor");
}
TORCH_LIBRARY_IMPL(adaserve, CPU, m) { m.impl("tree_attention", tree_attention); }

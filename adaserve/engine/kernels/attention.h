// What attention.cpp (the driver and the AVX2 unit) and attention_avx512.cpp (the AVX-512
// unit of verify shapes) share: the problem flattened to raw pointers, a work unit, and a
// unit's partial softmax state.
#pragma once

#include <cstdint>
#include <limits>

#include "wide.h"

namespace adaserve_attention {

constexpr int64_t kBlock = 64;  // cache columns per block: K and V blocks (2 x 16 KB at D = 64)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The problem, flattened to raw pointers and element strides.
struct Problem {
  const float* q;  // [n, Q, H, D], strides qs_* (last one 1)
  int64_t qs_n, qs_q, qs_h;
  const float* k;  // [S, Hkv, C, D] contiguous
  const float* v;
  const int64_t* slots;  // [n]
  const int64_t* prefix;  // [n]
  const bool* tree;  // [n, Q, W]
  int64_t Q, H, Hkv, G, C, D, W;
  float scale;
};

// One unit: request i, KV head g, cache columns [c0, c1).
struct Unit {
  int64_t i, g, c0, c1;
};

// The partial softmax state of a unit over its columns: running max, sum, and the
// unnormalized output, for M rows.
struct Partial {
  float* m;  // [M]
  float* l;  // [M]
  float* o;  // [M, D]
};

// The tree's own columns in a block of scores: column cb + c (c < nc) past the request's
// prefix is seen by query row m (query token m / G) iff tree[m / G, cb + c - prefix]; a
// score it does not see becomes -inf. at(m, c) is score (m, c) wherever a unit keeps it
// (the AVX2 unit: rows of columns; the AVX-512 unit: rows in the lanes, columns alone or
// in pairs), so both units share the rule.
template <class At>
inline void mask_tree(const bool* tree, int64_t W, int64_t G, int64_t M, int64_t prefix,
                      int64_t cb, int64_t nc, At at) {
  if (cb + nc <= prefix) return;
  const int64_t from = (cb > prefix ? cb : prefix) - cb;
  for (int64_t m = 0; m < M; ++m) {
    const bool* seen = tree + (m / G) * W - prefix;  // indexed by cache column
    for (int64_t c = from; c < nc; ++c)
      if (!seen[cb + c]) at(m, c) = kNegInf;
  }
}

// The AVX-512 unit takes head_dim 64 and up to this many query rows (Q x G): 6 vectors of
// 16 rows' scores a column, or 12 of 8 rows a column pair.
constexpr int64_t kWideMaxRows = 96;
constexpr int64_t kWideD = 64;

// Floats of scratch one thread's AVX-512 unit needs for M query rows.
int64_t wide_scratch(int64_t M);

// One unit on AVX-512: the same result as the AVX2 unit to rounding.
void run_unit_wide(const Problem& pb, const Unit& u, float* scratch, Partial out);

}  // namespace adaserve_attention

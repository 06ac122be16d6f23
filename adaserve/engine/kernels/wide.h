// What the AVX-512 kernels share with the files that call them: whether this CPU runs them,
// and their entry points. Each *_avx512.cpp compiles its functions for AVX-512F by target
// attributes only (no file-wide flag), so no AVX-512 code can be linked into the paths an
// AVX2 machine runs; callers ask runs() first.
#pragma once

#include <cstdint>

#include <c10/util/Exception.h>

namespace adaserve_wide {

// Whether this CPU (and its OS) runs AVX-512F.
inline bool runs() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}

// An op's `isa` argument: -1 the best this CPU runs, 0 AVX2, 1 AVX-512 (refused where the
// CPU lacks it); tests and benchmarks set the two side by side.
inline void check_isa(int64_t isa, const char* op) {
  TORCH_CHECK(isa >= -1 && isa <= 1, op, ": isa is -1 (the best this CPU runs), 0 (AVX2) or 1 "
              "(AVX-512), not ", isa);
  TORCH_CHECK(isa != 1 || runs(), op, ": isa=1 asks for AVX-512, which this CPU does not run");
}

// skinny_avx512.cpp: y[m, n] = x[m, :] . w[n, :] for every m < M and the weight rows of
// blocks [b0, b1) (skinny_block_rows(M) rows a block); K a multiple of 16, y [M, N].
int64_t skinny_block_rows(int64_t M);
void skinny_blocks(const float* w, const float* x, float* y, int64_t M, int64_t K, int64_t N,
                   int64_t b0, int64_t b1);

}  // namespace adaserve_wide

// The machine's fp32 FMA peak, measured: what no kernel built from AVX2 FMAs can beat.
//
// Why: attention for several query tokens per request reads each K and V row once and does
// 4 x (query rows) x 64 flops on it, so past a few tokens it is bound by the FMAs, not the
// memory (docs/engine.md, the attention kernel). A benchmark that sets a cell's flops
// against this peak states the fastest any fp32 kernel could run it here, so a goal below
// that floor is shown out of reach by measurement, not argued.
//
// Each of torch's threads runs `iters` rounds of kChains independent 8-lane FMA chains
// (enough in flight to cover the FMA latency on two FMA ports), all in registers; where the
// CPU runs AVX-512, `fma_gflops_wide` does the same with 16-lane chains (the peak the
// attention kernel's AVX-512 unit is set against: twice the AVX2 one on a Xeon with two
// 512-bit FMA ports).
#include <immintrin.h>

#include <chrono>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/library.h>

#include "wide.h"

namespace {

constexpr int kChains = 12;

// one thread's rounds; the chains' sum goes to `sink` so nothing is optimized away
void chains(int64_t iters, float* sink) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(0.001f * (c + 1));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  __m256 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm256_add_ps(s, acc[c]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  *sink = out[0];
}

// the same on 16 lanes, 16 chains (32 registers)
__attribute__((target("avx512f"))) void chains_wide(int64_t iters, float* sink) {
  constexpr int kWide = 16;
  __m512 acc[kWide];
  for (int c = 0; c < kWide; ++c) acc[c] = _mm512_set1_ps(0.001f * (c + 1));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 16
    for (int c = 0; c < kWide; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  __m512 s = acc[0];
  for (int c = 1; c < kWide; ++c) s = _mm512_add_ps(s, acc[c]);
  *sink = _mm512_reduce_add_ps(s);
}

// GFLOP/s of `fn`'s rounds (flops_per_iter each) on every one of torch's threads
template <typename Fn>
double gflops(int64_t iters, double flops_per_iter, Fn fn) {
  const int64_t threads = at::get_num_threads();
  std::vector<float> sink(threads * 16);
  const auto t0 = std::chrono::steady_clock::now();
  at::parallel_for(0, threads, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) fn(iters, &sink[p * 16]);
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return flops_per_iter * static_cast<double>(iters) * threads / s / 1e9;
}

// GFLOP/s of 16-lane fp32 FMAs over all of torch's threads; 0 where the CPU lacks AVX-512F
double fma_gflops_wide(int64_t iters) {
  if (!adaserve_wide::runs()) return 0.0;
  return gflops(iters, 2.0 * 16.0 * 16, chains_wide);
}

// GFLOP/s of fp32 FMAs over all of torch's threads, `iters` rounds each
double fma_gflops(int64_t iters) { return gflops(iters, 2.0 * 8.0 * kChains, chains); }

}  // namespace

TORCH_LIBRARY_FRAGMENT(adaserve, m) {
  m.def("fma_gflops(int iters) -> float");
  m.def("fma_gflops_wide(int iters) -> float");
  // whether this CPU runs the kernels' AVX-512 paths (attention's verify unit, the skinny
  // tiles): the engine's row bound and the tests and benchmarks ask it
  m.def("avx512() -> bool");
}
TORCH_LIBRARY_IMPL(adaserve, CompositeExplicitAutograd, m) {
  m.impl("fma_gflops", fma_gflops);
  m.impl("fma_gflops_wide", fma_gflops_wide);
  m.impl("avx512", [] { return adaserve_wide::runs(); });
}

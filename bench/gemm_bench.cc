// GEMM GFLOP/s on the shapes of the table and the attention-sized batched products, ours
// (runtime/kernels/gemm) beside OpenBLAS's cblas_sgemm when it was found at configure time
// (libopenblas-dev, a benchmark-only dependency). Both on 2 threads. OpenBLAS picks its kernels
// at load time: run once as is and once with OPENBLAS_CORETYPE=SkylakeX (bench/gemm_compare.py runs
// the three in turn).
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "runtime/kernels/gemm.h"
#include "runtime/thread_pool.h"
#ifdef KILN_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace {
using kiln::kernels::Gemm;
using kiln::kernels::MatrixRef;

// (M, K, N) of the issue; "batch" shapes are the attention products (B*H = 64 heads of T = 128,
// D = 64): scores q k^T and the weighted sum p v. The backward's products of the benchmark GPT
// follow: input gradients dY W (B not transposed) and weight gradients X^T dY (A transposed,
// K = the 2048 tokens).
struct Shape {
  int64_t batch, m, k, n;
  bool tb, ta = false;
};

void setCounters(benchmark::State &state, const Shape &s) {
  double flops = 2.0 * s.batch * s.m * s.n * s.k;
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// bf16: bf16 products (Gemm::bf16) from the same f32 operands.
void ours(benchmark::State &state, Shape s, bool bf16) {
  std::vector<float> a(s.batch * s.m * s.k, 0.5f), b(s.batch * s.k * s.n, 0.25f),
      c(s.batch * s.m * s.n);
  kiln::runtime::ThreadPool pool(2);
  Gemm g;
  g.batch = s.batch, g.m = s.m, g.n = s.n, g.k = s.k;
  g.a = s.ta ? MatrixRef{a.data(), 1, s.m, s.m * s.k} : MatrixRef{a.data(), s.k, 1, s.m * s.k};
  g.b = s.tb ? MatrixRef{b.data(), 1, s.k, s.k * s.n} : MatrixRef{b.data(), s.n, 1, s.k * s.n};
  g.c = c.data(), g.ldc = s.n, g.cBatchStride = s.m * s.n;
  g.bf16 = bf16;
  std::vector<float> scratch(kiln::kernels::gemmScratchFloats(g, 2) + 64);
  for (auto _ : state) {
    kiln::kernels::gemm(g, &pool, scratch.data());
    benchmark::DoNotOptimize(c.data());
  }
  setCounters(state, s);
}

#ifdef KILN_HAVE_OPENBLAS
void openblas(benchmark::State &state, Shape s) {
  std::vector<float> a(s.batch * s.m * s.k, 0.5f), b(s.batch * s.k * s.n, 0.25f),
      c(s.batch * s.m * s.n);
  openblas_set_num_threads(2);
  for (auto _ : state) {
    for (int64_t z = 0; z < s.batch; ++z)
      cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
                  s.m, s.n, s.k, 1.0f, a.data() + z * s.m * s.k, s.ta ? s.m : s.k,
                  b.data() + z * s.k * s.n, s.tb ? s.k : s.n, 0.0f, c.data() + z * s.m * s.n, s.n);
    benchmark::DoNotOptimize(c.data());
  }
  setCounters(state, s);
  state.SetLabel(openblas_get_corename());
}
#endif

const Shape kShapes[] = {{1, 2048, 256, 768, true},
                         {1, 2048, 256, 1024, true},
                         {1, 2048, 1024, 256, true},
                         {1, 2048, 256, 256, true},
                         {1, 1024, 1024, 1024, false},
                         {64, 128, 64, 128, true},
                         {64, 128, 128, 64, false},
                         // the backward's
                         {1, 2048, 256, 256, false},
                         {1, 2048, 1024, 256, false},
                         {1, 2048, 256, 1024, false},
                         {1, 256, 2048, 256, false, true},
                         {1, 256, 2048, 1024, false, true},
                         {1, 1024, 2048, 256, false, true}};

std::string name(const Shape &s) {
  return std::to_string(s.batch) + "x" + std::to_string(s.m) + "x" + std::to_string(s.k) + "x" +
         std::to_string(s.n) + (s.ta ? "_aT" : "") + (s.tb ? "_bT" : "");
}

int registerAll = [] {
  for (const Shape &s : kShapes) {
    benchmark::RegisterBenchmark(("gemm/kiln/" + name(s)).c_str(), ours, s, false)->UseRealTime();
    benchmark::RegisterBenchmark(("gemm/kiln_bf16/" + name(s)).c_str(), ours, s, true)
        ->UseRealTime();
#ifdef KILN_HAVE_OPENBLAS
    benchmark::RegisterBenchmark(("gemm/openblas/" + name(s)).c_str(), openblas, s)->UseRealTime();
#endif
  }
  return 0;
}();

} // namespace

BENCHMARK_MAIN();

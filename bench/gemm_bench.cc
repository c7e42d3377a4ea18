// GEMM GFLOP/s on the shapes of the table and the attention-sized batched products, ours
// (runtime/kernels/gemm, f32 and bf16 products) beside OpenBLAS's cblas_sgemm and oneDNN's bf16
// matmul when they were found at configure time (libopenblas-dev, libdnnl-dev: benchmark-only
// dependencies). All on 2 threads (oneDNN's OpenMP: OMP_NUM_THREADS=2). OpenBLAS picks its kernels
// at load time: run once as is and once with OPENBLAS_CORETYPE=SkylakeX (bench/gemm_compare.py runs
// the three in turn).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "runtime/kernels/gemm.h"
#include "runtime/thread_pool.h"
#ifdef KILN_HAVE_OPENBLAS
#include <cblas.h>
#endif
#ifdef KILN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace {
using kiln::kernels::Gemm;
using kiln::kernels::MatrixRef;

// (M, K, N) of the issue; "batch" shapes are the attention products (B*H = 64 heads of T = 128,
// D = 64): scores q k^T and the weighted sum p v. The backward's products of the benchmark GPT
// follow: input gradients dY W (B not transposed) and weight gradients X^T dY (A transposed,
// K = the 2048 tokens); then GPT-2's, whose products have few rows.
struct Shape {
  int64_t batch, m, k, n;
  bool tb, ta = false;
};

void setCounters(benchmark::State &state, const Shape &s) {
  double flops = 2.0 * s.batch * s.m * s.n * s.k;
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// The operands' values, 0.5 and 0.25, as bf16 bits for the operands stored in bf16.
constexpr uint16_t kHalfBf16 = 0x3f00, kQuarterBf16 = 0x3e80;

// f32 products; bf16 products (Gemm::bf16) from the same f32 operands, rounded as they are
// packed; or from operands stored in bf16 (MatrixRef::bf16), as oneDNN's are below.
enum class Kind { F32, Bf16, Bf16Stored };
void ours(benchmark::State &state, Shape s, Kind kind) {
  std::vector<float> a(s.batch * s.m * s.k, 0.5f), b(s.batch * s.k * s.n, 0.25f),
      c(s.batch * s.m * s.n);
  std::vector<uint16_t> aBits(a.size(), kHalfBf16), bBits(b.size(), kQuarterBf16);
  kiln::runtime::ThreadPool pool(2);
  Gemm g;
  g.batch = s.batch, g.m = s.m, g.n = s.n, g.k = s.k;
  g.a = s.ta ? MatrixRef{a.data(), 1, s.m, s.m * s.k} : MatrixRef{a.data(), s.k, 1, s.m * s.k};
  g.b = s.tb ? MatrixRef{b.data(), 1, s.k, s.k * s.n} : MatrixRef{b.data(), s.n, 1, s.k * s.n};
  g.c = c.data(), g.ldc = s.n, g.cBatchStride = s.m * s.n;
  g.bf16 = kind != Kind::F32;
  if (kind == Kind::Bf16Stored)
    g.a.data = g.b.data = nullptr, g.a.bf16 = aBits.data(), g.b.bf16 = bBits.data();
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

#ifdef KILN_HAVE_DNNL
// oneDNN's matmul primitive on bf16 operands with an f32 result (what PyTorch's autocast calls on
// a CPU), operands in plain layouts as a framework hands them over, the primitive created once.
void onednnBf16(benchmark::State &state, Shape s) {
  using dnnl::memory;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  const memory::dims a = {s.batch, s.m, s.k}, b = {s.batch, s.k, s.n}, c = {s.batch, s.m, s.n};
  const memory::desc aMd(a, memory::data_type::bf16,
                         s.ta ? memory::format_tag::acb : memory::format_tag::abc);
  const memory::desc bMd(b, memory::data_type::bf16,
                         s.tb ? memory::format_tag::acb : memory::format_tag::abc);
  const memory::desc cMd(c, memory::data_type::f32, memory::format_tag::abc);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(aMd, bMd, cMd), eng);
  const dnnl::matmul product(pd);
  memory am(aMd, eng), bm(bMd, eng), cm(cMd, eng);
  // bf16 0.5 and 0.25, the f32 benchmark's values.
  std::fill_n(static_cast<uint16_t *>(am.get_data_handle()), s.batch * s.m * s.k, kHalfBf16);
  std::fill_n(static_cast<uint16_t *>(bm.get_data_handle()), s.batch * s.k * s.n, kQuarterBf16);
  for (auto _ : state) {
    product.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    stream.wait();
  }
  setCounters(state, s);
  state.SetLabel(pd.impl_info_str());
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
                         {1, 1024, 2048, 256, false, true},
                         // GPT-2 124M's (llm.c's T 64 x batch 4: 256 token rows): the MLP's
                         // forward, an input gradient, a weight gradient, the logits and
                         // their input gradient (K: the vocabulary); then the MLP's other input
                         // gradient (dY W2, into GELU's derivative), an attention projection's
                         // forward and input gradient, the MLP's second forward, and the
                         // attention's q, k, v projection forward and input gradient
                         {1, 256, 768, 3072, true},
                         {1, 256, 3072, 768, false},
                         {1, 768, 256, 3072, false, true},
                         {1, 256, 768, 50257, true},
                         {1, 256, 50257, 768, false},
                         {1, 256, 768, 3072, false},
                         {1, 256, 768, 768, true},
                         {1, 256, 768, 768, false},
                         {1, 256, 3072, 768, true},
                         {1, 256, 768, 2304, true},
                         {1, 256, 2304, 768, false}};

std::string name(const Shape &s) {
  return std::to_string(s.batch) + "x" + std::to_string(s.m) + "x" + std::to_string(s.k) + "x" +
         std::to_string(s.n) + (s.ta ? "_aT" : "") + (s.tb ? "_bT" : "");
}

int registerAll = [] {
  for (const Shape &s : kShapes) {
    benchmark::RegisterBenchmark(("gemm/kiln/" + name(s)).c_str(), ours, s, Kind::F32)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("gemm/kiln_bf16/" + name(s)).c_str(), ours, s, Kind::Bf16)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("gemm/kiln_bf16_stored/" + name(s)).c_str(), ours, s,
                                 Kind::Bf16Stored)
        ->UseRealTime();
#ifdef KILN_HAVE_OPENBLAS
    benchmark::RegisterBenchmark(("gemm/openblas/" + name(s)).c_str(), openblas, s)->UseRealTime();
#endif
#ifdef KILN_HAVE_DNNL
    benchmark::RegisterBenchmark(("gemm/onednn_bf16/" + name(s)).c_str(), onednnBf16, s)
        ->UseRealTime();
#endif
  }
  return 0;
}();

} // namespace

BENCHMARK_MAIN();

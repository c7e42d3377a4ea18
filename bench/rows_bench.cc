// Row kernels against memory bandwidth: layer_norm, add_layer_norm and softmax forward on inputs
// larger than L3 (32 MiB here), and fusion regions (a triad, bias + GELU, a row sum and a column
// sum) on the highway backend's interpreter and compiled by the llvm backend, beside a copy, a
// triad and a dot product on the same pool, in one run. Each reports GB/s counted as the bytes
// the kernel must move (every input read once, every output written once); divide by the copy's
// figure (the dot's, for the sums, which write nothing) for the fraction of measured bandwidth.
// The baselines are plain loops split like the kernels (rows dealt to 2 threads), so
// write-allocate traffic counts the same for all.
#include <cstring>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include "codegen/common/program.h"
#include "codegen/highway/backend.h"
#include "codegen/llvm/backend.h"
#include "ir/parser.h"
#include "runtime/kernels/norm.h"
#include "runtime/kernels/softmax.h"
#include "runtime/thread_pool.h"
#include "runtime/weights.h"

namespace {
namespace kernels = kiln::kernels;
namespace ir = kiln::ir;
using kiln::runtime::ThreadPool;

// 16 Ki rows of 1024 floats: 64 MiB per tensor, twice L3.
constexpr int64_t kRows = 16384, kN = 1024, kParts = 64;

void setBytes(benchmark::State &state, double bytes) {
  state.counters["GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}

std::vector<float> filled(int64_t count, float scale) {
  std::vector<float> v(count);
  for (int64_t i = 0; i < count; ++i)
    v[i] = scale * static_cast<float>((i * 7919) % 1000) / 1000.0f;
  return v;
}

void copy(benchmark::State &state) {
  std::vector<float> x = filled(kRows * kN, 1), y(kRows * kN);
  ThreadPool pool(2);
  const int64_t chunk = kRows * kN / kParts;
  for (auto _ : state) {
    pool.run(kParts, [&](int64_t p, int) {
      std::memcpy(y.data() + p * chunk, x.data() + p * chunk, sizeof(float) * chunk);
    });
    benchmark::DoNotOptimize(y.data());
  }
  setBytes(state, 2.0 * sizeof(float) * kRows * kN);
}

// a = b + s c: two streams in, one out.
void triad(benchmark::State &state) {
  std::vector<float> b = filled(kRows * kN, 1), c = filled(kRows * kN, 2), a(kRows * kN);
  ThreadPool pool(2);
  const int64_t chunk = kRows * kN / kParts;
  for (auto _ : state) {
    pool.run(kParts, [&](int64_t p, int) {
      float *out = a.data() + p * chunk;
      const float *in0 = b.data() + p * chunk, *in1 = c.data() + p * chunk;
      for (int64_t i = 0; i < chunk; ++i)
        out[i] = in0[i] + 3.0f * in1[i];
    });
    benchmark::DoNotOptimize(a.data());
  }
  setBytes(state, 3.0 * sizeof(float) * kRows * kN);
}

// s = sum x y over each part, in 16 lanes: two streams in and none out, the traffic of a column
// or row sum (which moves fewer bytes per byte counted than the copy: no write-allocate).
void dot(benchmark::State &state) {
  std::vector<float> x = filled(kRows * kN, 1), y = filled(kRows * kN, 2), s(kParts);
  ThreadPool pool(2);
  const int64_t chunk = kRows * kN / kParts;
  for (auto _ : state) {
    pool.run(kParts, [&](int64_t p, int) {
      const float *a = x.data() + p * chunk, *b = y.data() + p * chunk;
      float lanes[16] = {};
      for (int64_t i = 0; i < chunk; i += 16)
        for (int l = 0; l < 16; ++l)
          lanes[l] += a[i + l] * b[i + l];
      float sum = 0;
      for (float v : lanes)
        sum += v;
      s[p] = sum;
    });
    benchmark::DoNotOptimize(s.data());
  }
  setBytes(state, 2.0 * sizeof(float) * kRows * kN);
}

void layerNorm(benchmark::State &state, bool residual) {
  std::vector<float> a = filled(kRows * kN, 1), b = filled(kRows * kN, 2), y(kRows * kN),
                     sum(residual ? kRows * kN : 0), w = filled(kN, 1), bias = filled(kN, 1),
                     mean(kRows), rstd(kRows);
  ThreadPool pool(2);
  kernels::NormForward f;
  f.rows = kRows, f.n = kN, f.eps = 1e-5f, f.a = a.data(), f.aRows = kRows;
  if (residual)
    f.b = b.data(), f.bRows = kRows, f.sum = sum.data();
  f.weight = w.data(), f.bias = bias.data(), f.y = y.data(), f.mean = mean.data();
  f.rstd = rstd.data();
  for (auto _ : state) {
    kernels::normForward(f, &pool);
    benchmark::DoNotOptimize(y.data());
  }
  // x in, y out; with the residual also b in and the sum out.
  setBytes(state, (residual ? 4.0 : 2.0) * sizeof(float) * kRows * kN);
}

void softmax(benchmark::State &state) {
  std::vector<float> x = filled(kRows * kN, 8), y(kRows * kN);
  ThreadPool pool(2);
  for (auto _ : state) {
    kernels::softmaxRows(x.data(), y.data(), kRows, kN, &pool);
    benchmark::DoNotOptimize(y.data());
  }
  setBytes(state, 2.0 * sizeof(float) * kRows * kN);
}

// One fusion region over f32[kRows, kN] inputs x, y and a bias b[kN], as IR text: `body` holds
// the region's instructions after its inputs %0 (x), %1 (y), %2 (b), ending in %r of type `out`.
struct Region {
  std::string body, out;
  double streams; // kRows x kN tensors read or written
};

void fusion(benchmark::State &state, const std::string &backend, const Region &r) {
  const std::string s = fmt::format("[{},{}]", kRows, kN);
  const std::string text = fmt::format(R"(graph @g {{
  %x = input "x" : f32{0}
  %y = input "y" : f32{0}
  %b = input "b" : f32[{1}]
  %o = fusion(%x, %y, %b) {{body = graph @fusion {{
    %0 = input "in0" : f32{0}
    %1 = input "in1" : f32{0}
    %2 = input "in2" : f32[{1}]
{2}    output "out0" = %r
  }}}} : {3}
  output "o" = %o
}}
)",
                                       s, kN, r.body, r.out);
  ir::ParseResult parsed = ir::parseGraph(text);
  if (!parsed.graph) {
    state.SkipWithError(parsed.errors[0].message.c_str());
    return;
  }
  ir::Graph g = kiln::codegen::withMemoryPlan(*parsed.graph);
  kiln::Expected<std::unique_ptr<kiln::runtime::Executor>> exe = [&] {
    if (backend == "llvm") {
      kiln::llvmgen::Options o;
      o.threads = 2;
      return kiln::llvmgen::compile(g, o);
    }
    kiln::highway::Options o;
    o.threads = 2;
    return kiln::highway::compile(g, o);
  }();
  if (!exe || !kiln::runtime::randomizeInputs(**exe, 1).ok()) {
    state.SkipWithError("compile or inputs failed");
    return;
  }
  for (auto _ : state)
    if (!(*exe)->run().ok())
      state.SkipWithError("run failed");
  setBytes(state, r.streams * sizeof(float) * kRows * kN);
}

const std::string kF = fmt::format("f32[{},{}]", kRows, kN);
const Region kTriad{fmt::format("    %3 = constant() {{value = 3.0}} : f32[]\n"
                                "    %4 = mul(%1, %3) : {0}\n    %r = add(%0, %4) : {0}\n",
                                kF),
                    kF, 3};
const Region kBiasGelu{fmt::format("    %3 = add(%0, %2) : {0}\n    %r = gelu(%3) : {0}\n", kF), kF,
                       2};
const Region kRowSum{fmt::format("    %3 = mul(%0, %1) : {0}\n"
                                 "    %r = reduce_sum(%3) {{axes = [1]}} : f32[{1}]\n",
                                 kF, kRows),
                     fmt::format("f32[{}]", kRows), 2};
const Region kColumnSum{fmt::format("    %3 = mul(%0, %1) : {0}\n"
                                    "    %r = reduce_sum(%3) {{axes = [0]}} : f32[{1}]\n",
                                    kF, kN),
                        fmt::format("f32[{}]", kN), 2};

BENCHMARK(copy)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(triad)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(dot)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(layerNorm, layer_norm, false)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(layerNorm, add_layer_norm, true)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(softmax)->UseRealTime()->Unit(benchmark::kMillisecond);
#define KILN_FUSION(name, region)                                                                  \
  BENCHMARK_CAPTURE(fusion, highway_##name, "highway", region)                                     \
      ->UseRealTime()                                                                              \
      ->Unit(benchmark::kMillisecond);                                                             \
  BENCHMARK_CAPTURE(fusion, llvm_##name, "llvm", region)                                           \
      ->UseRealTime()                                                                              \
      ->Unit(benchmark::kMillisecond)
KILN_FUSION(triad, kTriad);
KILN_FUSION(bias_gelu, kBiasGelu);
KILN_FUSION(row_sum, kRowSum);
KILN_FUSION(column_sum, kColumnSum);

} // namespace

BENCHMARK_MAIN();

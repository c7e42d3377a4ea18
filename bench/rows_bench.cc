// Row kernels against memory bandwidth: layer_norm, add_layer_norm, softmax and log_softmax forward
// on inputs larger than L3 (32 MiB here), and fusion regions (a triad, bias + GELU, a row sum, a
// column sum and an AdamW update) on the highway backend's interpreter and compiled by the llvm
// backend, beside a copy, a triad and a dot product on the same pool, in one run. Each reports GB/s
// counted as the bytes the kernel must move (every input read once, every output written once);
// divide by the copy's figure (the dot's, for the sums, which write nothing) for the fraction of
// measured bandwidth. The baselines are plain loops split like the kernels (rows dealt to 2
// threads), so write-allocate traffic counts the same for all.
#include <cstring>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include "codegen/common/executor_backend.h"
#include "codegen/common/program.h"
#include "codegen/llvm/backend.h"
#include "ir/parser.h"
#include "runtime/host_tensor.h"
#include "runtime/kernels/norm.h"
#include "runtime/kernels/softmax.h"
#include "runtime/thread_pool.h"
#include "runtime/weights.h"

namespace {
namespace kernels = kiln::kernels;

// Buffers as the runtime allocates its regions (runtime::AlignedBytes: zeroed, aligned to a huge
// page and advised MADV_HUGEPAGE from 2 MiB on), so the streams do not cross a 4 KiB page (and
// restart the prefetchers) every row.
struct Floats {
  kiln::runtime::AlignedBytes bytes;
  explicit Floats(int64_t count) : bytes(count * static_cast<int64_t>(sizeof(float))) {}
  float *data() { return reinterpret_cast<float *>(bytes.data()); }
  float &operator[](int64_t i) { return data()[i]; }
};
namespace ir = kiln::ir;
using kiln::runtime::ThreadPool;

// 16 Ki rows of 1024 floats: 64 MiB per tensor, twice L3.
constexpr int64_t kRows = 16384, kN = 1024, kParts = 64;

void setBytes(benchmark::State &state, double bytes) {
  state.counters["GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}

Floats filled(int64_t count, float scale) {
  Floats v(count);
  for (int64_t i = 0; i < count; ++i)
    v[i] = scale * static_cast<float>((i * 7919) % 1000) / 1000.0f;
  return v;
}

void copy(benchmark::State &state) {
  Floats x = filled(kRows * kN, 1), y(kRows * kN);
  ThreadPool pool(2);
  const int64_t chunk = kRows * kN / kParts;
  for (auto _ : state) {
    pool.run(kParts, [&](int64_t p, int) {
      // A loop, not memcpy: glibc's copies this large use non-temporal stores, which skip the
      // write-allocate that every kernel here pays (the copy measured 53 or 87 GB/s by run).
      // + 0.0f keeps the compiler from turning the loop back into a memcpy call.
      const float *from = x.data() + p * chunk;
      float *to = y.data() + p * chunk;
      for (int64_t i = 0; i < chunk; ++i)
        to[i] = from[i] + 0.0f;
    });
    benchmark::DoNotOptimize(y.data());
  }
  setBytes(state, 2.0 * sizeof(float) * kRows * kN);
}

// a = b + s c: two streams in, one out.
void triad(benchmark::State &state) {
  Floats b = filled(kRows * kN, 1), c = filled(kRows * kN, 2), a(kRows * kN);
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
  Floats x = filled(kRows * kN, 1), y = filled(kRows * kN, 2), s(kParts);
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
  Floats a = filled(kRows * kN, 1), b = filled(kRows * kN, 2), y(kRows * kN),
         sum(residual ? kRows * kN : 0), w = filled(kN, 1), bias = filled(kN, 1), mean(kRows),
         rstd(kRows);
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

// A row kernel y = f(x) over `rows` rows of n floats: x read once, y written once.
void rowKernel(benchmark::State &state,
               void (*f)(const float *, float *, int64_t, int64_t, ThreadPool *), int64_t rows,
               int64_t n) {
  Floats x = filled(rows * n, 8), y(rows * n);
  ThreadPool pool(2);
  for (auto _ : state) {
    f(x.data(), y.data(), rows, n, &pool);
    benchmark::DoNotOptimize(y.data());
  }
  setBytes(state, 2.0 * sizeof(float) * rows * n);
}

void softmax(benchmark::State &state) {
  rowKernel(state, &kernels::softmaxRows, kRows, kN);
}

// log_softmax over GPT-2's vocabulary: the 256 token rows of its benchmark step (51 MB, beyond
// L3), each 200 KiB (in L2 for the passes after the first).
void logSoftmax(benchmark::State &state) {
  rowKernel(state, &kernels::logSoftmaxRows, 256, 50257);
}

// One fusion region over `tensors` f32[kRows, kN] inputs (body values %0, %1, ...), then a row
// vector b f32[kN] and a scalar s f32[] (the next two values), as IR text: `body` holds the
// region's instructions, ending in the outputs %r (one) or %r0, %r1, ... of types `out`.
struct Region {
  int tensors;
  std::string body, out;
  double streams; // kRows x kN tensors read or written
  int outputs = 1;
};

void fusion(benchmark::State &state, const std::string &backend, const Region &r) {
  const std::string s = fmt::format("[{},{}]", kRows, kN);
  std::string inputs, operands, bodyInputs, results, outputs, bodyOutputs;
  const int values = r.tensors + 2;
  for (int i = 0; i < values; ++i) {
    const std::string type = i < r.tensors    ? "f32" + s
                             : i == r.tensors ? fmt::format("f32[{}]", kN)
                                              : "f32[]";
    inputs += fmt::format("  %i{0} = input \"i{0}\" : {1}\n", i, type);
    operands += fmt::format("{}%i{}", i ? ", " : "", i);
    bodyInputs += fmt::format("    %{0} = input \"in{0}\" : {1}\n", i, type);
  }
  for (int k = 0; k < r.outputs; ++k) {
    const std::string name = r.outputs == 1 ? "r" : fmt::format("r{}", k);
    results += fmt::format("{}%o{}", k ? ", " : "", k);
    outputs += fmt::format("  output \"o{0}\" = %o{0}\n", k);
    bodyOutputs += fmt::format("    output \"out{}\" = %{}\n", k, name);
  }
  const std::string text =
      fmt::format("graph @g {{\n{}  {} = fusion({}) {{body = graph @fusion {{\n{}{}{}  }}}} : "
                  "{}\n{}}}\n",
                  inputs, results, operands, bodyInputs, r.body, bodyOutputs, r.out, outputs);
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
    kiln::codegen::ExecutorOptions o;
    o.threads = 2;
    return kiln::codegen::compileExecutor(g, o);
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
// a = x + 3 y
const Region kTriad{2,
                    fmt::format("    %5 = constant() {{value = 3.0}} : f32[]\n"
                                "    %6 = mul(%1, %5) : {0}\n    %r = add(%0, %6) : {0}\n",
                                kF),
                    kF, 3};
const Region kBiasGelu{1, fmt::format("    %4 = add(%0, %1) : {0}\n    %r = gelu(%4) : {0}\n", kF),
                       kF, 2};
const Region kRowSum{2,
                     fmt::format("    %5 = mul(%0, %1) : {0}\n"
                                 "    %r = reduce_sum(%5) {{axes = [1]}} : f32[{1}]\n",
                                 kF, kRows),
                     fmt::format("f32[{}]", kRows), 2};
const Region kColumnSum{2,
                        fmt::format("    %5 = mul(%0, %1) : {0}\n"
                                    "    %r = reduce_sum(%5) {{axes = [0]}} : f32[{1}]\n",
                                    kF, kN),
                        fmt::format("f32[{}]", kN), 2};
// The AdamW update of a weight as kiln's optimizer writes it (passes/optimizer.cc): moments m
// (%0) and v (%2) from the gradient (%1), the weight (%3) decayed and stepped; the row vector
// stands in for the bias correction sqrt(1 - beta2^t), the scalar for the step size. Four
// streams in, three out (each output in place of its input in a training step).
const Region kAdamW{4,
                    fmt::format("    %6 = constant() {{value = 0.9}} : f32[]\n"
                                "    %7 = mul(%0, %6) : {0}\n"
                                "    %8 = constant() {{value = 0.1}} : f32[]\n"
                                "    %9 = mul(%1, %8) : {0}\n"
                                "    %r0 = add(%7, %9) : {0}\n"
                                "    %10 = constant() {{value = 0.999}} : f32[]\n"
                                "    %11 = mul(%2, %10) : {0}\n"
                                "    %12 = mul(%1, %1) : {0}\n"
                                "    %13 = constant() {{value = 0.001}} : f32[]\n"
                                "    %14 = mul(%12, %13) : {0}\n"
                                "    %r1 = add(%11, %14) : {0}\n"
                                "    %15 = sqrt(%r1) : {0}\n"
                                "    %16 = div(%15, %4) : {0}\n"
                                "    %17 = constant() {{value = 1e-08}} : f32[]\n"
                                "    %18 = add(%16, %17) : {0}\n"
                                "    %19 = div(%r0, %18) : {0}\n"
                                "    %20 = mul(%5, %19) : {0}\n"
                                "    %21 = constant() {{value = 0.99999}} : f32[]\n"
                                "    %22 = mul(%3, %21) : {0}\n"
                                "    %r2 = sub(%22, %20) : {0}\n",
                                kF),
                    fmt::format("{0}, {0}, {0}", kF), 7, 3};

BENCHMARK(copy)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(triad)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(dot)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(layerNorm, layer_norm, false)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(layerNorm, add_layer_norm, true)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(softmax)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(logSoftmax)->UseRealTime()->Unit(benchmark::kMillisecond);
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
KILN_FUSION(adamw, kAdamW);

} // namespace

BENCHMARK_MAIN();

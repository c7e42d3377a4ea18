// Fused attention against the unfused kernel sequence (Google Benchmark), forward + backward on
// the Highway backend at 2 threads, T = 512 ... 4096. The graph: q, k, v [1, H, T, D] parameters
// (so autodiff yields dq, dk, dv), causal attention with scale 1/sqrt(D), loss = sum(out * w) for
// an input w (so dout = w). Fused, the `default` pipeline turns it into attention and
// attention_backward; unfused, it stays q k^T, scale, mask, softmax, p v and their gradients,
// each a T x T tensor. Counters: the memory plan's total bytes (all a step needs: linear in T when
// fused, quadratic unfused) and GFLOP/s counted as causal attention's work, 2 T^2 D H per product
// (forward 2 products, backward 4; the masked half is not counted, the recomputed scores are).
#include <benchmark/benchmark.h>

#include <cmath>

#include "codegen/common/program.h"
#include "codegen/common/executor_backend.h"
#include "ir/builder.h"
#include "passes/autodiff.h"
#include "passes/memory_plan.h"
#include "passes/stages.h"
#include "runtime/weights.h"

namespace {

using namespace kiln;
using namespace kiln::ir;

constexpr int64_t kHeads = 8, kHeadDim = 64;

Expected<Graph> attentionGraph(int64_t t, bool fused) {
  Graph g("attention");
  const Type qkv{DType::F32, {1, kHeads, t, kHeadDim}};
  ValueId q = g.addParam("q", qkv, ParamInit{ParamInit::Kind::Normal, 1.0});
  ValueId k = g.addParam("k", qkv, ParamInit{ParamInit::Kind::Normal, 1.0});
  ValueId v = g.addParam("v", qkv, ParamInit{ParamInit::Kind::Normal, 1.0});
  ValueId w = g.addInput("w", qkv);
  Builder b(g);
  const double scale = 1 / std::sqrt(double(kHeadDim));
  ValueId logits =
      b.mul(b.emit(OpKind::Matmul, {q, k}, {{"transpose_b", true}}), b.scalar(scale, DType::F32));
  ValueId mask = b.emit(OpKind::Tri, {}, {{"shape", std::vector<int64_t>{t, t}}});
  ValueId masked = b.select(mask, logits, b.scalar(-INFINITY, DType::F32));
  ValueId out = b.emit(OpKind::Matmul, {b.emit(OpKind::Softmax, {masked}), v});
  g.addOutput("loss", b.emit(OpKind::ReduceSum, {b.mul(out, w)}), OutputRole::Loss);
  return passes::runPipeline(std::move(g), fused ? "default,autodiff,cleanup,lower"
                                                 : "cleanup,autodiff,cleanup,lower");
}

// Compiles `planned` for the Highway backend at 2 threads and times its steps; `flops` per step
// gives the GFLOP/s counter. False (the state skipped with the error) if anything failed.
bool timeSteps(benchmark::State &state, const Graph &planned, double flops) {
  codegen::ExecutorOptions options;
  options.threads = 2;
  Expected<std::unique_ptr<runtime::Executor>> exe = codegen::compileExecutor(planned, options);
  if (!exe || !runtime::initWeights(**exe, 1).ok() || !runtime::randomizeInputs(**exe, 2).ok()) {
    state.SkipWithError("compile or init failed");
    return false;
  }
  for (auto _ : state)
    if (Status s = (*exe)->run(); !s) {
      state.SkipWithError(s.error().message.c_str());
      return false;
    }
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9 * double(state.iterations()), benchmark::Counter::kIsRate);
  return true;
}

void attention(benchmark::State &state, bool fused) {
  const int64_t t = state.range(0);
  Expected<Graph> g = attentionGraph(t, fused);
  if (!g) {
    state.SkipWithError(g.error().message.c_str());
    return;
  }
  Graph planned = codegen::withMemoryPlan(*g);
  bool hasFused = false;
  for (const Node &n : planned.nodes())
    hasFused |= n.op == OpKind::AttentionBackward;
  if (hasFused != fused) {
    state.SkipWithError("the pipeline did not fuse as expected");
    return;
  }
  const double flops = 6.0 * 2.0 * double(t) * double(t) / 2 * kHeadDim * kHeads;
  if (!timeSteps(state, planned, flops))
    return;
  state.counters["plan_MiB"] = double(passes::memoryStats(planned).totalBytes) / (1 << 20);
}

// The bench GPT's attention (B 16, H 4, T 128, D 64, causal), forward + backward, with q, k, v
// and out in either layout: [B, H, T, D], or [B, T, H, D] read and written through row strides
// (bthd, what fold-head-transpose gives a model's attention). Counters as above.
Expected<Graph> layoutGraph(bool bthd) {
  constexpr int64_t b = 16, h = 4, t = 128, d = 64;
  Graph g("attention");
  const Type qkv{DType::F32, bthd ? Shape{b, t, h, d} : Shape{b, h, t, d}};
  ValueId q = g.addParam("q", qkv, ParamInit{ParamInit::Kind::Normal, 1.0});
  ValueId k = g.addParam("k", qkv, ParamInit{ParamInit::Kind::Normal, 1.0});
  ValueId v = g.addParam("v", qkv, ParamInit{ParamInit::Kind::Normal, 1.0});
  ValueId w = g.addInput("w", qkv);
  Expected<NodeId> att = g.addNode(
      OpKind::Attention, {q, k, v},
      {{"scale", 0.125}, {"causal", true}, {"q_heads", h}, {"kv_heads", h}, {"bthd", bthd}});
  if (!att)
    return att.error();
  const ValueId out = g.node(*att).results[0];
  Builder bld(g);
  g.addOutput("loss", bld.emit(OpKind::ReduceSum, {bld.mul(out, w)}), OutputRole::Loss);
  return passes::runPipeline(std::move(g), "autodiff,cleanup,lower");
}

void layout(benchmark::State &state, bool bthd) {
  Expected<Graph> g = layoutGraph(bthd);
  if (!g) {
    state.SkipWithError(g.error().message.c_str());
    return;
  }
  timeSteps(state, codegen::withMemoryPlan(*g), 6.0 * 2.0 * 128.0 * 128.0 / 2 * 64 * 16 * 4);
}

void args(benchmark::internal::Benchmark *b) {
  for (int64_t t : {512, 1024, 2048, 4096})
    b->Arg(t);
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK_CAPTURE(attention, fused, true)->Apply(args);
BENCHMARK_CAPTURE(attention, unfused, false)->Apply(args);
BENCHMARK_CAPTURE(layout, bhtd, false)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(layout, bthd, true)->Unit(benchmark::kMillisecond)->UseRealTime();

} // namespace

BENCHMARK_MAIN();

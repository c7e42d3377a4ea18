// The compiler's own speed: a GPT from its raw graph to the optimized forward graph and to the
// whole training step (`kiln dump --stage=optimized|train`), over depth at tiny widths (the time
// is all compiler) and over width at fixed depth (which must not matter). The `per_node` counter
// is the time per node of the raw graph: flat over depth when every pass is linear, so a pass that
// turns superlinear shows at a glance. `kiln bench MODEL --compile` prints the same per pass for
// any model. Run: ./build/kiln_compile_bench [--benchmark_filter=Train]
#include <benchmark/benchmark.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/zoo.h"
#include "passes/optimizer.h"
#include "passes/stages.h"

namespace kiln {
namespace {

ir::Graph tinyGpt(int64_t layers, int64_t dModel, bool loss) {
  std::vector<models::Setting> s = {{"n_layers", std::to_string(layers)},
                                    {"d_model", std::to_string(dModel)},
                                    {"n_heads", "2"},
                                    {"d_ff", std::to_string(dModel)},
                                    {"loss", loss ? "true" : "false"}};
  Expected<ir::Graph> g = models::buildModel("gpt", s);
  if (!g)
    throw std::runtime_error(g.error().message);
  return std::move(*g);
}

// Times raw -> stage on copies of one raw graph (the copy untimed).
void compile(benchmark::State &state, const ir::Graph &raw, bool train) {
  for (auto _ : state) {
    state.PauseTiming();
    ir::Graph g = raw;
    state.ResumeTiming();
    Expected<ir::Graph> out = train ? passes::trainingStep(std::move(g), passes::OptimizerConfig{})
                                    : passes::optimizedForward(std::move(g));
    if (!out)
      state.SkipWithError(out.error().message.c_str());
    benchmark::DoNotOptimize(out);
  }
  auto nodes = static_cast<double>(raw.nodes().size());
  state.counters["nodes"] = nodes;
  state.counters["per_node"] = benchmark::Counter(
      nodes, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_OptimizedOverDepth(benchmark::State &state) {
  compile(state, tinyGpt(state.range(0), 16, false), false);
}
void BM_TrainOverDepth(benchmark::State &state) {
  compile(state, tinyGpt(state.range(0), 16, true), true);
}
void BM_OptimizedOverWidth(benchmark::State &state) {
  compile(state, tinyGpt(12, state.range(0), false), false);
}
void BM_TrainOverWidth(benchmark::State &state) {
  compile(state, tinyGpt(12, state.range(0), true), true);
}

void depths(benchmark::internal::Benchmark *b) {
  b->ArgName("layers")->Unit(benchmark::kMillisecond);
  for (int64_t layers : {12, 48, 96, 192, 1000})
    b->Arg(layers);
}
void widths(benchmark::internal::Benchmark *b) {
  b->ArgName("d_model")->Unit(benchmark::kMillisecond);
  for (int64_t width : {16, 64, 256, 1024})
    b->Arg(width);
}

BENCHMARK(BM_OptimizedOverDepth)->Apply(depths);
BENCHMARK(BM_TrainOverDepth)->Apply(depths);
BENCHMARK(BM_OptimizedOverWidth)->Apply(widths);
BENCHMARK(BM_TrainOverWidth)->Apply(widths);

} // namespace
} // namespace kiln

BENCHMARK_MAIN();

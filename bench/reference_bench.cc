// Speed of the reference interpreter on the zoo's default models (Google Benchmark). The
// reference is the oracle, not a fast path: this measures how long oracle checks take.
#include <benchmark/benchmark.h>

#include "codegen/reference/interpreter.h"
#include "models/zoo.h"

namespace {

void forward(benchmark::State &state, const char *model) {
  kiln::Expected<kiln::ir::Graph> g = kiln::models::buildModel(model, {});
  if (!g) {
    state.SkipWithError(g.error().message.c_str());
    return;
  }
  auto args = kiln::reference::makeArgs<float>(*g, 0);
  for (auto _ : state) {
    auto out = kiln::reference::run<float>(*g, args);
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK_CAPTURE(forward, gpt, "gpt")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(forward, bert, "bert")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(forward, transformer, "transformer")->Unit(benchmark::kMillisecond);

} // namespace

BENCHMARK_MAIN();

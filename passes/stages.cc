// The compilation stages (see stages.h).
#include "passes/stages.h"

#include <chrono>
#include <set>
#include <string>

#include <fmt/format.h>

#include "passes/autodiff.h"
#include "passes/pass_manager.h"
#include "passes/passes.h"

namespace kiln::passes {

Expected<ir::Graph> runPipeline(ir::Graph g, std::string_view spec, PipelineReport *report) {
  Expected<std::vector<const PassInfo *>> list = resolvePasses(spec);
  if (!list)
    return list.error();
  PassManagerOptions options;
  if (report)
    options.onPass = report->onPass;
  Expected<PipelineReport> r = runPasses(g, *list, options);
  if (!r)
    return makeError("pipeline '{}': {}", spec, r.error().message);
  if (report)
    for (PassRun &run : r->runs)
      report->runs.push_back(std::move(run));
  return g;
}

namespace {

// Runs `step` and, with a report, appends it as the run `name`.
template <typename F> auto timed(PipelineReport *report, std::string name, F step) {
  if (report && report->onPass)
    report->onPass(name, 0, 1);
  auto start = std::chrono::steady_clock::now();
  auto result = step();
  if (report)
    report->runs.push_back(
        PassRun{std::move(name), true,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                PassStats{}});
  return result;
}

} // namespace

Expected<bool> runAutodiff(ir::Graph &g, PassStats &stats) {
  Expected<ir::Graph> d = differentiate(g);
  if (!d)
    return d.error();
  stats.count("appended {} backward nodes",
              static_cast<int64_t>(d->nodes().size() - g.nodes().size()));
  stats.count("{} gradient outputs",
              static_cast<int64_t>(d->outputs().size() - g.outputs().size()));
  g = std::move(*d);
  return true;
}

Expected<bool> runAdamW(ir::Graph &g, PassStats &stats) {
  Expected<ir::Graph> step = buildTrainingStep(g, OptimizerConfig{});
  if (!step)
    return step.error();
  stats.count("appended {} update nodes",
              static_cast<int64_t>(step->nodes().size() - g.nodes().size()));
  g = std::move(*step);
  return true;
}

namespace {
// The mixed-precision marks a stage runs before lowering under bf16: the products' marks, and the
// weights that bf16 products read stored in bf16 (for inference the weights themselves, for
// training a copy beside each master weight).
std::string_view bf16Marks(bool inference) {
  return inference ? "bf16-products,bf16-weights" : "bf16-products,bf16-weight-copies";
}
} // namespace

Expected<ir::Graph> optimizedForward(ir::Graph forward, PipelineReport *report,
                                     Precision precision) {
  std::vector<ir::Graph> one;
  one.push_back(std::move(forward));
  Expected<std::vector<ir::Graph>> done = optimizedForwards(std::move(one), precision, report);
  if (!done)
    return done.error();
  return std::move(done->front());
}

Expected<std::vector<ir::Graph>> optimizedForwards(std::vector<ir::Graph> programs,
                                                   Precision precision, PipelineReport *report) {
  // The inference stage, "default,{marks},lower", split where the union of the bf16 weights is
  // taken (one program's union is its own set: it stores nothing more).
  const bool bf16 = precision == Precision::Bf16;
  const std::string marked = bf16 ? fmt::format("default,{}", bf16Marks(true)) : "default";
  std::set<std::string> stored;
  for (ir::Graph &g : programs) {
    Expected<ir::Graph> done = runPipeline(std::move(g), marked, report);
    if (!done)
      return done.error();
    g = std::move(*done);
    for (const ir::Arg &arg : g.args())
      if (bf16 && arg.kind == ir::Arg::Kind::Param && g.type(arg.value).dtype == ir::DType::BF16)
        stored.insert(arg.name);
  }
  for (ir::Graph &g : programs) {
    if (Expected<int64_t> more = storeWeightsInBf16(g, stored); !more)
      return more.error();
    Expected<ir::Graph> lowered = runPipeline(std::move(g), "lower", report);
    if (!lowered)
      return lowered.error();
    g = std::move(*lowered);
  }
  return programs;
}

Expected<ir::Graph> validationForward(ir::Graph forward, PipelineReport *report,
                                      Precision precision) {
  return runPipeline(std::move(forward),
                     precision == Precision::Bf16 ? "no-dropout,default,bf16-products,lower"
                                                  : "no-dropout,default,lower",
                     report);
}

Expected<ir::Graph> trainingStep(ir::Graph forward, const OptimizerConfig &optimizer,
                                 PipelineReport *report, Precision precision,
                                 const DataParallel &dp) {
  // Before autodiff, which would stop at an op of the lowered step with no gradient instead.
  if (Status s = refuseTrainingStep(forward); !s)
    return makeError("training step: {}", s.error().message);
  Expected<ir::Graph> fused = runPipeline(std::move(forward), "default", report);
  if (!fused)
    return fused;
  Expected<ir::Graph> grads = timed(report, "autodiff", [&] { return differentiate(*fused); });
  if (!grads)
    return makeError("differentiate: {}", grads.error().message);
  if (dp.ranks > 1) {
    PassStats stats;
    Expected<bool> averaged =
        timed(report, "data-parallel", [&] { return averageOverRanks(*grads, dp, stats); });
    if (!averaged)
      return averaged.error();
  }
  Expected<ir::Graph> step = timed(report, "optimizer", [&] {
    return buildTrainingStep(*grads, optimizer, dp.shardOptimizer ? dp.ranks : 1);
  });
  if (!step)
    return makeError("training step: {}", step.error().message);
  return runPipeline(std::move(*step),
                     precision == Precision::Bf16
                         ? fmt::format("cleanup,{},lower", bf16Marks(false))
                         : std::string("cleanup,lower"),
                     report);
}

} // namespace kiln::passes

// The one list of passes and pipelines, by name (no static registration).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "passes/passes.h"

namespace kiln::passes {
namespace {

constexpr PassInfo kPasses[] = {
    {"dce", "remove nodes whose results reach no output", &runDce},
    {"cse", "merge nodes with the same op, operands and attributes", &runCse},
    {"fold-constants", "evaluate nodes whose operands are all constants", &runFoldConstants},
    {"simplify",
     "algebraic identities: x*1, x+0, transpose/reshape/broadcast chains, scale folding",
     &runSimplify},
    {"fold-transpose", "matmul(transpose(a), b) => matmul(a, b){transpose_a}", &runFoldTranspose},
    {"fold-batch-sum",
     "reduce_sum(matmul(a, b){transpose_a}) over the batch => one matmul of the stacked rows",
     &runFoldBatchSum},
    {"fold-scatter-add",
     "add(x, scatter_add(indices, updates)) => scatter_add(indices, updates, x), in x's bytes",
     &runFoldScatterAdd},
    {"fuse-attention", "softmax(q k^T * s + mask) v written in primitives => attention",
     &runFuseAttention},
    {"fold-head-transpose",
     "attention(transpose(q), transpose(k), transpose(v)) => transpose(attention(q, k, v){bthd})",
     &runFoldHeadTranspose},
    {"fuse-layer-norm", "mean/variance/rsqrt chains => layer_norm, rms_norm, add_*_norm",
     &runFuseLayerNorm},
    {"fuse-cross-entropy",
     "-reduce_sum(log_softmax(x) * one_hot(t)) over the classes => cross_entropy(x, t)",
     &runFuseCrossEntropy},
    {"fuse-elementwise",
     "pointwise chains (+ trailing reductions, or a leading matmul) => one fusion region",
     &runFuseElementwise},
    {"no-dropout", "evaluation mode (a validation loss): dropout(x) => x, attention's dropout => 0",
     &runNoDropout},
    {"autodiff",
     "append d loss / d P for every float parameter P (output \"loss\" => outputs grad.P)",
     &runAutodiff},
    {"adamw",
     "append the default AdamW update (grad.P => new.P, with its moments and step as state)",
     &runAdamW},
    {"bf16-products",
     "mixed precision: every f32 matmul and attention => bf16 products with f32 sums "
     "(--precision bf16)",
     &runBf16Products},
    {"bf16-weights",
     "inference in mixed precision: a weight read only by bf16 products => stored in bf16",
     &runBf16Weights},
    {"bf16-weight-copies",
     "mixed-precision training: the bf16 products read a bf16 copy of each weight, which the "
     "update writes beside it",
     &runBf16WeightCopies},
    {"bf16-activations",
     "mixed precision: a value only bf16 products read (through reshapes, a region's output) => "
     "stored in bf16",
     &runBf16Activations},
    {"schedule-updates",
     "each optimizer update right after what it reads (a weight's: its gradient's matmul, "
     "which it joined as the epilogue)",
     &runScheduleUpdates},
    {"schedule-collectives",
     "all_reduce_start right after its operand's node, so that reductions overlap the step",
     &runScheduleCollectives},
    {"plan-memory",
     "give every node result an arena offset: liveness, best-fit reuse, in-place, reshape views",
     &runPlanMemory},
};

constexpr std::string_view kCleanup[] = {"fold-constants", "simplify", "fold-transpose", "cse",
                                         "dce"};
constexpr std::string_view kFusion[] = {
    "cleanup",         "fuse-attention",     "fold-head-transpose",
    "fuse-layer-norm", "fuse-cross-entropy", "cleanup"};
constexpr std::string_view kDefault[] = {"fusion"};
// simplify and dce after fold-batch-sum: the reshapes it leaves around a weight's gradient ([1, M,
// N] and back) would keep the gradient's matmul from its update's region (schedule_updates.cc).
constexpr std::string_view kLower[] = {
    "fold-batch-sum",   "simplify", "dce", "fold-scatter-add", "fuse-elementwise",
    "bf16-activations", "cse",      "dce", "schedule-updates", "schedule-collectives",
    "plan-memory"};
constexpr std::string_view kTrain[] = {"default", "autodiff", "adamw", "cleanup", "lower"};

constexpr Pipeline kPipelines[] = {
    {"cleanup", "constant folding, algebraic simplification, transpose folding, CSE, DCE",
     kCleanup},
    {"fusion",
     "cleanup, then attention fusion (in the heads' own layout), norm and cross-entropy fusion, "
     "then cleanup again",
     kFusion},
    {"default",
     "the graph-level pipeline, run before autodiff: attention, norm and cross-entropy fusion",
     kDefault},
    {"lower",
     "the last steps before code generation, on a forward graph or a whole training step: "
     "batch sums folded into matmuls, scatter-adds into their addends, elementwise fusion into "
     "regions, values only bf16 products read stored in bf16, updates moved up to their "
     "gradients, reductions across ranks started early, then the memory plan",
     kLower},
    {"train",
     "a forward graph with a loss => the whole lowered training step, as `kiln dump "
     "--stage=train` shows it (default AdamW)",
     kTrain},
};

Status expand(std::string_view name, std::vector<const PassInfo *> &out, int depth) {
  if (const PassInfo *p = findPass(name)) {
    out.push_back(p);
    return {};
  }
  for (const Pipeline &pl : kPipelines)
    if (pl.name == name) {
      if (depth > 8)
        return makeError("pipeline '{}' nests too deeply", name);
      for (std::string_view step : pl.steps)
        if (Status s = expand(step, out, depth + 1); !s)
          return s;
      return {};
    }
  std::vector<std::string_view> known;
  for (const PassInfo &p : kPasses)
    known.push_back(p.name);
  for (const Pipeline &p : kPipelines)
    known.push_back(p.name);
  return makeError("unknown pass or pipeline '{}' (known: {})", name, fmt::join(known, ", "));
}

} // namespace

void PassStats::count(std::string_view what, int64_t n) {
  for (auto &[name, total] : entries_)
    if (name == what) {
      total += n;
      return;
    }
  entries_.push_back({std::string(what), n});
}

std::span<const PassInfo> allPasses() {
  return kPasses;
}
std::span<const Pipeline> allPipelines() {
  return kPipelines;
}

const PassInfo *findPass(std::string_view name) {
  for (const PassInfo &p : kPasses)
    if (p.name == name)
      return &p;
  return nullptr;
}

Expected<std::vector<const PassInfo *>> resolvePasses(std::string_view spec) {
  std::vector<const PassInfo *> out;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    std::string_view name =
        spec.substr(start, comma == std::string_view::npos ? spec.npos : comma - start);
    if (name.empty())
      return makeError("--passes={}: empty pass name", spec);
    if (Status s = expand(name, out, 0); !s)
      return s.error();
    if (comma == std::string_view::npos)
      break;
    start = comma + 1;
  }
  return out;
}

} // namespace kiln::passes

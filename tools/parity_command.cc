// `kiln parity-dump` (see parity_command.h). The weights are not the models' inits: those
// (normal(0, 0.02), unit gains, zero biases) make every layer nearly linear and every gradient
// tiny, which a comparison at atol 1e-5 could not tell from zero. Here weight matrices and
// embeddings are normal(0, 1/sqrt(fan_in)), gains 1 + 0.1 N and biases 0.1 N, so activations,
// attention patterns and gradients are all O(1)-ish and every parameter matters.
#include "tools/parity_command.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "codegen/reference/interpreter.h"
#include "models/zoo.h"
#include "passes/autodiff.h"
#include "passes/stages.h"
#include "runtime/checkpoint.h"
#include "runtime/output_file.h"
#include "runtime/safetensors.h"
#include "runtime/weights.h"
#include "support/param_init.h"
#include "support/rng.h"
#include "tools/cli_util.h"
#include "tools/train_command.h"

namespace kiln::tools {

namespace {

using Json = nlohmann::ordered_json;
using Tensor = ir::RefTensor<float>;
using TensorMap = std::map<std::string, Tensor>;

// A key the model's config has (every model of the table has those parity-dump reads).
template <class T> T present(std::optional<T> value, std::string_view key) {
  if (!value)
    throw std::logic_error(fmt::format("config key {} missing", key));
  return std::move(*value);
}
std::string lookup(const std::vector<std::pair<std::string, std::string>> &config,
                   std::string_view key) {
  return present(configValue(config, key), key);
}

int64_t toInt(const std::string &s) {
  return std::stoll(s);
}

// A parameter's parity value (see the file comment), from its init kind and shape.
Tensor parityWeight(const ir::Arg &a, const ir::Type &type, uint64_t seed) {
  Tensor t(type);
  uint64_t stream = runtime::streamOf(seed, a.name);
  double scale = type.shape.size() >= 2 ? 1.0 / std::sqrt(double(type.shape.back())) : 0.1;
  double offset = a.init.kind == ir::ParamInit::Kind::Ones ? 1.0 : 0.0;
  for (int64_t k = 0; k < t.size(); ++k)
    t.f[k] = static_cast<float>(offset + scale * rng::normal(stream, uint64_t(k)));
  return t;
}

// A parameter's value in a loaded checkpoint.
Tensor checkpointWeight(const runtime::SafetensorsFile &file, const ir::Arg &a,
                        const ir::Type &type, const std::string &path) {
  const runtime::SafetensorsTensor *t = file.find(a.name);
  if (!t)
    throw UserError(fmt::format("--load {}: tensor \"{}\" is missing", path, a.name));
  // A bf16 bundle's weights (kiln compile --precision bf16) widen to f32 exactly, as every other
  // command loads them (runtime/checkpoint.cc).
  const kiln::DType stored =
      t->dtype == runtime::SafetensorsDtype::BF16 ? kiln::DType::BF16 : kiln::DType::F32;
  Expected<runtime::HostTensor> host = runtime::fromSafetensors(*t, stored, type.shape);
  if (!host)
    throw UserError(fmt::format("--load {}: {}", path, host.error().message));
  Tensor out(type);
  for (int64_t k = 0; k < out.size(); ++k) {
    out.f[k] = static_cast<float>(host->get(k));
    if (!std::isfinite(out.f[k])) // (as every other command loads it: runtime/checkpoint.cc)
      throw UserError(fmt::format("--load {}: parameter \"{}\": element {} = {} is not a finite "
                                  "number",
                                  path, a.name, k, out.f[k]));
  }
  return out;
}

// Refuses a tensor of `file` that is no parameter of `forward` (another model's, a layer more),
// as every other command does; optimizer state is a trained checkpoint's and is not read.
void checkNoOtherTensors(const runtime::SafetensorsFile &file, const ir::Graph &forward,
                         const std::string &path) {
  for (const runtime::SafetensorsTensor &t : file.tensors) {
    if (t.name.starts_with(kOptimizerStatePrefix))
      continue;
    const bool param = std::any_of(forward.args().begin(), forward.args().end(), [&](auto &arg) {
      return arg.kind == ir::Arg::Kind::Param && arg.name == t.name;
    });
    if (!param)
      throw UserError(fmt::format("--load {}: tensor \"{}\" is not a parameter of graph @{}", path,
                                  t.name, forward.name()));
  }
}

// The batch's layout: odd rows of every token input end in padding (the last quarter), so the
// padding masks matter; targets there are ignored, and so are ~30% of the others.
struct BatchPlan {
  int64_t vocab, padId, ignoreId;
  bool padded(int64_t row, int64_t pos, int64_t len) const {
    return row % 2 == 1 && len >= 4 && pos >= len - len / 4;
  }
};

// The batch layout for a resolved config; refuses what PyTorch cannot reproduce.
BatchPlan planFor(const std::vector<std::pair<std::string, std::string>> &config) {
  if (lookup(config, "dtype") != "f32")
    throw UserError("parity-dump: --set dtype: only f32 is compared with PyTorch");
  if (std::stod(lookup(config, "dropout")) != 0)
    throw UserError("parity-dump: --set dropout: must be 0 (kiln's dropout masks come "
                    "from its own counter-based generator)");
  return BatchPlan{.vocab = toInt(lookup(config, "vocab")),
                   .padId = toInt(lookup(config, "pad_id")),
                   .ignoreId = present(ignoreIdIn(config), "ignore_index")};
}

Tensor batchInput(const ir::Arg &a, const ir::Type &type, uint64_t seed, const BatchPlan &p) {
  if (type.dtype != ir::DType::I64 || type.shape.size() != 2)
    throw UserError(fmt::format("input \"{}\" is {}: parity-dump knows only i64 [B, L] inputs",
                                a.name, ir::typeString(type)));
  Tensor t(type);
  uint64_t stream = runtime::streamOf(seed, "batch." + a.name);
  int64_t rows = type.shape[0], len = type.shape[1];
  bool tokens = a.range == p.vocab && a.name != "targets";
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < len; ++i) {
      int64_t k = r * len + i;
      uint64_t draw = rng::bits(stream, uint64_t(k));
      if (a.name == "targets") {
        bool ignored =
            p.padded(r, i, len) || (k > 0 && rng::uniform(stream ^ 1, uint64_t(k)) < 0.3);
        int64_t id = int64_t(draw % uint64_t(p.vocab));
        t.i[k] = ignored ? p.ignoreId : id == p.ignoreId ? (id + 1) % p.vocab : id;
      } else if (tokens) {
        int64_t id = int64_t(draw % uint64_t(p.vocab));
        t.i[k] = p.padded(r, i, len) ? p.padId : id == p.padId ? (id + 1) % p.vocab : id;
      } else {
        t.i[k] = int64_t(draw % uint64_t(a.range > 0 ? a.range : 16));
      }
    }
  return t;
}

// Runs `g` with each argument taken by name from `values` (state absent there starts at zero,
// as torch.optim's does) and returns the outputs by name.
TensorMap runOnValues(const ir::Graph &g, const TensorMap &values) {
  std::vector<Tensor> args;
  for (const ir::Arg &a : g.args()) {
    auto it = values.find(a.name);
    if (it != values.end())
      args.push_back(it->second);
    else if (a.kind == ir::Arg::Kind::State)
      args.emplace_back(g.type(a.value));
    else
      throw std::logic_error("no value for argument " + a.name);
  }
  std::vector<Tensor> outs = orThrow(reference::run<float>(g, args));
  TensorMap byName;
  for (size_t i = 0; i < outs.size(); ++i)
    byName[g.outputs()[i].name] = std::move(outs[i]);
  return byName;
}

// Runs `g` on --backend with each argument taken by name from `values` (the rest, state, zero)
// and returns the outputs by name.
TensorMap runOnBackend(const ParityArgs &a, const ir::Graph &g, const TensorMap &values,
                       const std::string &what) {
  BackendChoice choice;
  choice.name = a.backend;
  std::unique_ptr<runtime::Executable> exe =
      compileChecked(g, choice, false, machineMemoryBytes(), what);
  for (const ir::Arg &arg : g.args())
    if (auto it = values.find(arg.name); it != values.end())
      orThrow(exe->write(arg.name, reference::toHost(it->second)));
  orThrow(exe->run());
  TensorMap byName;
  for (const ir::Output &o : g.outputs())
    byName[o.name] = reference::fromHost<float>(orThrow(exe->read(o.name)));
  return byName;
}

// The gradients' graph with bf16 products, before `lower` (lossAndGradients lowers it).
constexpr const char *kBf16Gradients = "default,autodiff,cleanup,bf16-products";

// The outputs of `forward`'s loss and gradients at `values`, by name: the reference on the graph as
// built, or (--backend other than reference, or --precision bf16) the graph as kiln train compiles
// it -- fused, differentiated, bf16 products if asked for, lowered -- on the chosen backend.
TensorMap lossAndGradients(const ParityArgs &a, const ir::Graph &forward, const TensorMap &values) {
  const bool bf16 = productsOf(a.precision) == passes::Precision::Bf16;
  if (a.backend == "reference" && !bf16)
    return runOnValues(orThrow(passes::differentiate(forward)), values);
  const ir::Graph g = orThrow(passes::runPipeline(
      forward, fmt::format("{},lower", bf16 ? kBf16Gradients : "default,autodiff,cleanup")));
  if (a.backend == "reference")
    return runOnValues(g, values);
  return runOnBackend(a, g, values, "the loss and gradients");
}

// The updated parameters among the outputs `outs` of the training step `step`, by name.
TensorMap updatesOf(const ir::Graph &step, const TensorMap &outs) {
  TensorMap updated;
  for (const ir::Output &o : step.outputs())
    if (o.role == ir::OutputRole::Update && step.args()[o.arg].kind == ir::Arg::Kind::Param)
      updated[step.args()[o.arg].name] = outs.at(o.name);
  return updated;
}

// The parameters after one optimizer step from `values` (state from zero), by parameter name,
// from the gradients lossAndGradients dumps, so that torch_parity.py's step from those compares
// (a gradient that is zero but for rounding, as a key projection's bias's, turns Adam's first
// step by its sign): on the reference, the update after its gradients' graph; on another backend,
// the step as kiln train compiles it (the same products in the same order, the update in their
// epilogues).
TensorMap optimizerStep(const ParityArgs &a, const ir::Graph &forward, const TensorMap &values) {
  const passes::Precision precision = productsOf(a.precision);
  if (a.backend != "reference") {
    const ir::Graph step = orThrow(passes::trainingStep(forward, a.opt, nullptr, precision));
    return updatesOf(step, runOnBackend(a, step, values, "the optimizer step"));
  }
  // The reference's: the update after lossAndGradients' graph (before `lower`).
  const ir::Graph grads = precision == passes::Precision::Bf16
                              ? orThrow(passes::runPipeline(forward, kBf16Gradients))
                              : orThrow(passes::differentiate(forward));
  const ir::Graph step = orThrow(passes::buildTrainingStep(grads, a.opt));
  return updatesOf(step, runOnValues(step, values));
}

Json argsJson(const ir::Graph &g, ir::Arg::Kind kind) {
  Json j = Json::object();
  for (const ir::Arg &a : g.args())
    if (a.kind == kind) {
      const ir::Type &t = g.type(a.value);
      j[a.name] = {{"dtype", ir::dtypeName(t.dtype)}, {"shape", t.shape}};
      if (kind == ir::Arg::Kind::Input)
        j[a.name]["range"] = a.range;
    }
  return j;
}

Json optimizerJson(const ParityArgs &a) {
  if (a.optimizer.empty())
    return nullptr;
  const passes::OptimizerConfig &o = a.opt;
  return {{"kind", a.optimizer},
          {"lr", o.schedule.lr},
          {"momentum", o.momentum},
          {"nesterov", o.nesterov},
          {"weight_decay", o.weightDecay},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"eps", o.eps}};
}

// config.json: the model, the user's settings, every resolved config value and what the graph
// says about its inputs and parameters, so the other side needs no knowledge of kiln's defaults.
Json configJson(const ParityArgs &a, const std::vector<models::Setting> &settings,
                const std::vector<std::pair<std::string, std::string>> &config,
                const ir::Graph &forward) {
  Json cfg;
  cfg["model"] = a.model;
  cfg["seed"] = a.seed;
  Json user = Json::object(), resolved = Json::object();
  for (const models::Setting &s : settings)
    user[s.key] = s.value;
  for (const auto &[k, v] : config)
    resolved[k] = v;
  cfg["settings"] = user;
  cfg["config"] = resolved;
  cfg["optimizer"] = optimizerJson(a);
  cfg["backend"] = a.backend;
  cfg["precision"] = a.precision;
  cfg["graph"] = {{"name", forward.name()},
                  {"inputs", argsJson(forward, ir::Arg::Kind::Input)},
                  {"params", argsJson(forward, ir::Arg::Kind::Param)}};
  cfg["weights"] = "parity init: rank >= 2 normal(0, 1/sqrt(shape[-1])); gains 1 + 0.1 N(0, 1); "
                   "other vectors 0.1 N(0, 1)";
  return cfg;
}

} // namespace

CLI::App *addParityCommand(CLI::App &app, ParityArgs &a) {
  CLI::App *c = app.add_subcommand(
      "parity-dump", "Write a model's config, seeded weights, a batch and kiln's loss, logits, "
                     "gradients (and one optimizer step) for tools/torch_parity.py");
  c->add_option("model", a.model, "Model name (default with --load: the checkpoint's)");
  addSettings(*c, a.sets);
  c->add_option("--seed", a.seed, "Seed for weights and batch")->check(seedValue());
  c->add_option("--load", a.load,
                "The weights (and model and settings) of this checkpoint instead of seeded ones")
      ->check(nonEmpty());
  c->add_option("--backend", a.backend,
                "Where kiln computes the loss and gradients: reference (the graph as built) or "
                "highway, llvm (the graph as kiln train compiles it)")
      ->check(CLI::IsMember({"reference", "highway", "llvm"}));
  addPrecision(*c, a.precision, false);
  c->add_option("--out", a.out, "Output directory")->required();
  c->add_option("--optimizer", a.optimizer,
                "sgd | adam | adamw: also dump one step (state from zero)")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  addOptimizerOptions(*c, a.optimizer, a.opt, nullptr);
  return c;
}

// The files parity-dump writes into --out.
constexpr const char *kWeightsFile = "weights.safetensors", *kBatchFile = "batch.safetensors",
                     *kResultFile = "kiln.safetensors", *kConfigFile = "config.json";
constexpr const char *kParityFiles[] = {kWeightsFile, kBatchFile, kResultFile, kConfigFile};

void runParity(ParityArgs &a) {
  // Before any work: a file it writes must not be the checkpoint it reads.
  const runtime::RunInput load[] = {{"--load", a.load}};
  for (const char *file : kParityFiles)
    orThrow(
        runtime::checkNotAnInput("--out", (std::filesystem::path(a.out) / file).string(), load));
  adoptDescription(a.load, a.model, a.sets);
  const models::ModelEntry *entry = models::findModel(a.model);
  if (!entry) // buildModel's error lists the known names
    orThrow(models::buildModel(a.model, {}));
  std::vector<models::Setting> settings = parseSettings(a.sets); // (a key given twice: refused)
  addLoss(settings, "parity-dump");
  ir::Graph forward = orThrow(entry->build(settings));
  auto config = tools::resolvedConfig(*entry, settings);
  BatchPlan plan = planFor(config);
  TensorMap weights, batch;
  const runtime::SafetensorsFile loaded =
      a.load.empty() ? runtime::SafetensorsFile() : orThrow(runtime::readSafetensors(a.load));
  if (!a.load.empty())
    checkNoOtherTensors(loaded, forward, a.load);
  for (const ir::Arg &arg : forward.args()) {
    const ir::Type &t = forward.type(arg.value);
    if (arg.kind == ir::Arg::Kind::Param && !a.load.empty())
      weights.emplace(arg.name, checkpointWeight(loaded, arg, t, a.load));
    else if (arg.kind == ir::Arg::Kind::Param)
      weights.emplace(arg.name, parityWeight(arg, t, a.seed));
    else if (arg.kind == ir::Arg::Kind::Input)
      batch.emplace(arg.name, batchInput(arg, t, a.seed, plan));
  }

  TensorMap values = weights;
  values.insert(batch.begin(), batch.end());
  TensorMap outs = lossAndGradients(a, forward, values);
  runtime::SafetensorsFile result, weightFile, batchFile;
  for (const auto &[name, t] : weights)
    weightFile.tensors.push_back(runtime::toSafetensors(name, reference::toHost(t)));
  for (const auto &[name, t] : batch)
    batchFile.tensors.push_back(runtime::toSafetensors(name, reference::toHost(t)));
  for (const auto &[name, t] : outs)
    result.tensors.push_back(runtime::toSafetensors(name, reference::toHost(t)));

  if (!a.optimizer.empty()) {
    using Opt = passes::OptimizerConfig::Kind;
    a.opt.kind = a.optimizer == "sgd" ? Opt::Sgd : a.optimizer == "adam" ? Opt::Adam : Opt::AdamW;
    // The updated parameters, as tools/torch_parity.py reads them: "new." + parameter name.
    for (const auto &[name, t] : optimizerStep(a, forward, values))
      result.tensors.push_back(runtime::toSafetensors("new." + name, reference::toHost(t)));
  }

  Json cfg = configJson(a, settings, config, forward);

  std::filesystem::path dir(a.out);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw UserError(fmt::format("{}: cannot create: {}", a.out, ec.message()));
  // The four files replace an earlier dump's together (one run's weights, batch and results).
  runtime::StagedOutputs staged;
  for (const auto &[name, file] :
       {std::pair{kWeightsFile, &weightFile}, std::pair{kBatchFile, &batchFile},
        std::pair{kResultFile, &result}}) {
    const std::vector<uint8_t> bytes = runtime::serializeSafetensors(*file);
    const std::span<const uint8_t> pieces[] = {bytes};
    orThrow(staged.stage((dir / name).string(), pieces));
  }
  orThrow(staged.stage((dir / kConfigFile).string(), cfg.dump(2) + "\n"));
  orThrow(staged.commit());
  fmt::print("parity-dump {}: loss {:.6f}, {} parameters, wrote {}\n", a.model,
             outs.at(forward.findOutput(ir::OutputRole::Loss)->name).f.at(0), weights.size(),
             a.out);
}

} // namespace kiln::tools

// kiln dump and kiln verify (see dump_command.h).
#include "tools/dump_command.h"

#include <algorithm>
#include <fmt/format.h>

#include "codegen/common/program.h"
#include "codegen/llvm/backend.h"
#include "ir/dot.h"
#include "ir/printer.h"
#include "ir/summary.h"
#include "passes/memory_plan.h"
#include "runtime/output_file.h"
#include "tools/cli_util.h"
#include "tools/ir_file.h"
#include "tools/opt_command.h"

namespace kiln::tools {

namespace {

// The graph as --format asks: text (with locations and memory slots unless noLoc), dot, summary.
std::string renderGraph(const ir::Graph &g, const std::string &format, bool noLoc) {
  if (format == "dot")
    return ir::toDot(g);
  if (format == "summary")
    return ir::summary(g);
  return ir::print(g, {.locations = !noLoc, .memory = !noLoc});
}

// Each flag where it means something, never silently ignored.
void checkFlags(const DumpArgs &a, bool machine) {
  if (a.noLoc_->count() > 0 && (machine || a.format != "text" || a.memory))
    throw UserError("--no-loc: shortens the IR text (--format text), not " +
                    std::string(machine    ? "LLVM's output"
                                : a.memory ? "the memory report"
                                           : "--format " + a.format));
  if (!machine)
    for (CLI::Option *o : {a.train_, a.targetCpu_})
      if (o->count() > 0)
        throw UserError(fmt::format("{}: only with --stage=llvm or asm (the LLVM module){}",
                                    o->get_name(),
                                    o == a.targetCpu_ ? ""
                                                      : "; --stage=train is the training "
                                                        "step's IR"));
  for (CLI::Option *o : {a.ranks_, a.dp.bucket, a.dp.shard})
    if (o->count() > 0 && a.stage != "train" && !a.train)
      throw UserError(fmt::format("{}: only for a training step (--stage=train, or --train with "
                                  "--stage=llvm or asm)",
                                  o->get_name()));
  for (CLI::Option *o : {a.dp.bucket, a.dp.shard})
    if (o->count() > 0 && a.ranks < 2)
      throw UserError(fmt::format("{}: only with --ranks 2 or more (one process reduces and shards "
                                  "nothing)",
                                  o->get_name()));
  if (a.memory && a.format_->count() > 0)
    throw UserError("--format: --memory prints the memory plan's report, not the graph");
  if (a.stage == "raw" && a.precision == "bf16")
    throw UserError("--precision bf16: --stage=raw is the graph as built, before any pass; the "
                    "products are marked from --stage=optimized on");
  if (machine)
    for (CLI::Option *o : {a.format_, a.memory_})
      if (o->count() > 0)
        throw UserError(fmt::format("{}: --stage={} prints LLVM's {}, not the IR", o->get_name(),
                                    a.stage, a.stage == "asm" ? "machine code" : "module"));
}

} // namespace

CLI::App *addDumpCommand(CLI::App &app, DumpArgs &a) {
  CLI::App *dump = app.add_subcommand("dump", "Print a model's IR");
  dump->add_option("model", a.model, "Model name")->required();
  CLI::Option *sets = addSettings(*dump, a.sets);
  a.format_ = dump->add_option("--format", a.format, "text | dot | summary")
                  ->check(CLI::IsMember({"text", "dot", "summary"}));
  dump->add_option("-o,--output", a.output, "Output file ('-' = stdout)");
  a.memory_ = dump->add_flag("--memory", a.memory,
                             "Print the memory plan's report (parameters, gradients, "
                             "optimizer state, saved activations, planned peak) instead");
  addPrecision(*dump, a.precision, false);
  dump->add_option("--stage", a.stage,
                   "raw (as built) | optimized (pipelines default, lower; under --precision "
                   "bf16 with bf16-products and bf16-weights before lower) | train (the whole "
                   "training step: loss=true, default, autodiff, AdamW, cleanup, lower) | llvm "
                   "(the whole program's module as kiln compile emits it, after O2: the entry "
                   "point NAME_forward or NAME_train_step calling the kernels, its constants and "
                   "bundle descriptor, a function per fusion region) | asm (its machine code)")
      ->check(CLI::IsMember({"raw", "optimized", "train", "llvm", "asm"}));
  dump->add_flag("--ir", a.fromIr, "Treat MODEL as a .kir file")->excludes(sets);
  a.noLoc_ = dump->add_flag(
      "--no-loc", a.noLoc,
      "Leave out the locations (loc(...)) and the memory plan's slots: the graph alone, to diff");
  a.train_ = dump->add_flag("--train", a.train,
                            "With --stage=llvm or asm: the training step's module instead of the "
                            "forward's");
  a.targetCpu_ = addTargetCpu(*dump, a.targetCpu);
  a.ranks_ =
      dump->add_option("--ranks", a.ranks,
                       "With a training step: the step of one of N data-parallel ranks "
                       "(mpirun -np N kiln train), its gradients and loss averaged over them")
          ->check(integerIn(1, 1 << 20));
  addDataParallel(*dump, a.dp);
  return dump;
}

CLI::App *addVerifyCommand(CLI::App &app, VerifyArgs &a) {
  CLI::App *verify = app.add_subcommand("verify", "Parse and verify an IR file; print it in "
                                                  "canonical form");
  verify->add_option("file", a.file, "IR file ('-' = stdin)")->required();
  verify->add_option("--format", a.format, "text | dot | summary")
      ->check(CLI::IsMember({"text", "dot", "summary"}));
  return verify;
}

void runDump(DumpArgs &a) {
  refuseSetsForIr(a.model, a.fromIr, a.sets);
  if (isIrFile(a.model, a.fromIr) && a.output != "-") {
    const runtime::RunInput inputs[] = {{"the IR file it dumps", a.model}};
    orThrow(runtime::checkNotAnInput("-o", a.output, inputs));
  }
  std::vector<models::Setting> settings = parseSettings(a.sets);
  const bool machine = a.stage == "llvm" || a.stage == "asm";
  checkFlags(a, machine);
  const std::string graphStage = machine ? (a.train ? "train" : "optimized") : a.stage;
  if (graphStage == "train")
    addLoss(settings, "the training step");
  // A model with its loss is a training step's forward: an encoder-decoder's with the target
  // length kiln train gives it (src_len + 1, its tasks' BOS and tokens), so that the dump trains.
  const bool withLoss = std::any_of(settings.begin(), settings.end(), [](const auto &s) {
    return s.key == "loss" && s.value == "true";
  });
  if (withLoss && !isIrFile(a.model, a.fromIr))
    addDefaultTargetLength(a.model, settings);
  ir::Graph built = modelGraph(a.model, a.fromIr, settings);
  if (machine)
    refuseF64(built, fmt::format("the code of --stage={}", a.stage));
  if (graphStage == "train") // (a model has one by the setting above; an IR file may have none)
    requireLoss(built, a.model);
  ir::Graph g = orThrow(toStage(std::move(built), graphStage, productsOf(a.precision),
                                dataParallel(a.ranks, a.dp, false)));
  if (machine) {
    llvmgen::Options options;
    options.cpu = a.targetCpu;
    const std::string entry = a.train ? "train_step" : "forward";
    orThrow(writeOutput(a.output, orThrow(llvmgen::moduleText(codegen::withMemoryPlan(g), options,
                                                              entry, a.stage == "asm"))));
    return;
  }
  orThrow(writeOutput(a.output,
                      a.memory ? passes::memoryReport(g) : renderGraph(g, a.format, a.noLoc)));
}

void runVerify(const VerifyArgs &a) {
  orThrow(writeOutput("-", renderGraph(loadIrFile(a.file), a.format, false)));
}

} // namespace kiln::tools

// The `kiln` command line (see cli.h): build models from the zoo, dump and verify IR, run graphs,
// train, compile, generate. User mistakes (flags, settings, IR files, DSL shapes) print
// `kiln: error: ...` (the program's name) naming the place, exit 1, and write no partial output.
#include "tools/cli.h"

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "codegen/common/program.h"
#include "codegen/llvm/backend.h"
#include "codegen/reference/interpreter.h"
#include "ir/dot.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/summary.h"
#include "models/zoo.h"
#include "passes/memory_plan.h"
#include "runtime/checkpoint.h"
#include "runtime/thread_pool.h"
#include "runtime/weights.h"
#include "tools/attention_command.h"
#include "tools/bench_command.h"
#include "tools/cli_util.h"
#include "tools/compile_command.h"
#include "tools/generate_command.h"
#include "tools/interop_command.h"
#include "tools/opt_command.h"
#include "tools/parity_command.h"
#include "tools/tokenizer_command.h"
#include "tools/train_command.h"

namespace {

using namespace kiln;

using tools::orThrow;

// A forward pass of `g` on a backend: fresh weights (or the checkpoint `load`'s) and inputs from
// `seed`, each output summed.
void runGraph(const ir::Graph &g, const tools::BackendChoice &backend, const std::string &precision,
              uint64_t seed, int64_t budget, const std::string &load) {
  const std::string what = fmt::format("a forward pass of @{}", g.name());
  tools::CompileStatus status(what);
  std::unique_ptr<runtime::Executable> exe =
      tools::compileChecked(g, backend, precision == "f64", budget, what, &status);
  status.phase("initializing the weights and inputs");
  orThrow(runtime::initWeights(*exe, seed));
  orThrow(runtime::randomizeInputs(*exe, seed));
  if (!load.empty()) {
    status.phase("loading " + load);
    orThrow(runtime::loadCheckpoint(*exe, load));
  }
  status.done();
  auto start = std::chrono::steady_clock::now();
  orThrow(exe->run());
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  for (const runtime::Symbol &s : exe->program().symbols)
    if (s.kind == runtime::Symbol::Kind::Output)
      fmt::print("  {:<8} {}\n", s.name, reference::summarize(exe->read(s)));
  fmt::print("  ({} backend, {}, seed {}, {:.1f} ms, {} of memory)\n", exe->backend(), precision,
             seed, ms, ir::bytesString(exe->memoryBytes()));
}

// The README's main job: a character-level GPT trained for about a minute (here) on a text every
// Debian machine has (else the embedded corpus), with the progress bar and a validation loss,
// then samples at three temperatures, the loss curves drawn to DIR/loss.png and the last layer's
// attention maps on a line of the GPL to DIR/attention.png.
void demo(int64_t steps, const std::string &dir) {
  const std::string gpl = "/usr/share/common-licenses/GPL-3";
  std::error_code ec;
  const bool haveGpl = std::filesystem::is_regular_file(gpl, ec);
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw tools::UserError(
        fmt::format("-o {}: cannot create the directory: {}", dir, ec.message()));
  const std::vector<std::string> model = {"n_layers=4",      "d_model=128", "n_heads=4",
                                          "d_ff=512",        "seq_len=64",  "vocab=256",
                                          "activation=gelu", "norm=pre"};
  fmt::print("kiln demo: a character-level GPT ({}) trained on {} for {} steps\n\n",
             fmt::join(model, " "), haveGpl ? gpl : "the embedded corpus", steps);
  tools::TrainArgs t;
  t.model = "gpt";
  for (const std::string &m : model)
    t.sets.push_back(m);
  t.sets.push_back("batch=32");
  t.data = haveGpl ? gpl : "";
  t.steps = steps;
  t.evalEvery = std::max<int64_t>(1, steps / 6);
  t.logEvery = isatty(fileno(stdout)) ? 0 : std::max<int64_t>(1, steps / 12); // else: the bar
  t.schedule = "warmup_cosine";
  t.opt.schedule.lr = 3e-3;
  t.opt.schedule.warmup = std::min<int64_t>(50, steps / 10);
  t.save = (std::filesystem::path(dir) / "demo.safetensors").string();
  t.plot = (std::filesystem::path(dir) / "loss.png").string();
  t.maxMemory = tools::machineMemoryBytes();
  tools::runTrain(t);
  for (double temperature : {0.5, 0.8, 1.0}) {
    fmt::print("\n== a sample at temperature {} ==\n", temperature);
    tools::GenerateArgs g;
    g.model = "gpt";
    g.sets = model;
    g.load = t.save;
    g.prompts = {"The "};
    g.maxNew = 240;
    g.temperature = temperature;
    g.seed = 1;
    g.maxMemory = t.maxMemory;
    tools::runGenerate(g);
  }
  fmt::print("\n");
  tools::AttentionArgs at;
  at.model = "gpt";
  at.sets = model;
  at.load = t.save;
  at.text = "This program is free software: you can";
  at.out = (std::filesystem::path(dir) / "attention.png").string();
  at.maxMemory = t.maxMemory;
  tools::runAttention(at);
}

std::string modelsHelp() {
  std::string s;
  for (const models::ModelEntry &m : models::allModels()) {
    s += fmt::format("{:<12} {}\n", m.name, m.summary);
    for (const std::string &line : m.describe())
      s += fmt::format("    --set {}\n", line);
  }
  return s;
}

std::string opsHelp() {
  std::string s;
  for (const ir::OpInfo *op : ir::allOps()) {
    std::string operands;
    for (size_t i = 0; i < op->operands.size(); ++i)
      operands += fmt::format("{}{}{}", i ? ", " : "", op->operands[i], op->variadic ? "..." : "");
    std::string attrs;
    for (const ir::AttrSpec &a : op->attrs)
      attrs +=
          fmt::format("{}{}: {}{}", attrs.empty() ? " {" : ", ", a.name, ir::attrKindName(a.kind),
                      a.required ? "" : " = " + ir::attrValueString(ir::defaultValue(a)));
    if (!attrs.empty())
      attrs += "}";
    s += fmt::format("{:<12} ({}){}\n    {}\n", op->mnemonic, operands, attrs, op->summary);
  }
  return s;
}

int realMain(int argc, char **argv, const std::string &program) {
  CLI::App app{fmt::format(
      "{}: a compiler for Transformer computation graphs, with reverse-mode "
      "autodiff (kiln).\nModels: {} (see `{} models`).",
      program,
      [] {
        std::string names;
        for (const models::ModelEntry &m : models::allModels())
          names += std::string(names.empty() ? "" : ", ") + std::string(m.name);
        return names;
      }(),
      program)};
  app.require_subcommand(1);
  // Every option's default in --help, as its value is before parsing (subcommands inherit this).
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", fmt::format("{} (kiln {}; LLVM {}, Highway {})", program,
                                                KILN_VERSION, KILN_LLVM_VERSION, KILN_HWY_VERSION));

  std::string model, format = "text", output = "-", precision = "f32", file, stage = "raw";
  std::vector<std::string> sets;
  uint64_t seed = 0;

  CLI::App *dump = app.add_subcommand("dump", "Print a model's IR");
  dump->add_option("model", model, "Model name")->required();
  CLI::Option *dumpSets = dump->add_option("--set", sets, "Config override key=value (repeatable)");
  CLI::Option *dumpFormat = dump->add_option("--format", format, "text | dot | summary")
                                ->check(CLI::IsMember({"text", "dot", "summary"}));
  dump->add_option("-o,--output", output, "Output file ('-' = stdout)");
  bool memory = false;
  CLI::Option *dumpMemory =
      dump->add_flag("--memory", memory,
                     "Print the memory plan's report (parameters, gradients, "
                     "optimizer state, saved activations, planned peak) instead");
  dump->add_option("--stage", stage,
                   "raw (as built) | optimized (pipelines default, lower) | train (the whole "
                   "training step: loss=true, default, autodiff, AdamW, cleanup, lower) | llvm "
                   "(the whole program's module as kiln compile emits it, after O2: the entry "
                   "point NAME_forward or NAME_train_step calling the kernels, its constants and "
                   "bundle descriptor, a function per fusion region) | asm (its machine code)")
      ->check(CLI::IsMember({"raw", "optimized", "train", "llvm", "asm"}));
  bool fromIr = false;
  dump->add_flag("--ir", fromIr, "Treat MODEL as a .kir file")->excludes(dumpSets);
  bool noLoc = false;
  CLI::Option *dumpNoLoc = dump->add_flag(
      "--no-loc", noLoc,
      "Leave out the locations (loc(...)) and the memory plan's slots: the graph alone, to diff");
  bool dumpTrain = false;
  dump->add_flag("--train", dumpTrain,
                 "With --stage=llvm or asm: the training step's module instead of the forward's");
  std::string targetCpu;
  CLI::Option *dumpCpu = tools::addTargetCpu(*dump, targetCpu);

  CLI::App *run = app.add_subcommand("run", "Forward pass on a backend (--backend) with seeded "
                                            "random weights and inputs");
  run->add_option("model", model,
                  "Model name (default with --load: the checkpoint's), or an IR file (.kir, or "
                  "--ir)");
  std::string runLoad;
  run->add_option("--load", runLoad, "The weights of this checkpoint (and its model and settings)")
      ->check(tools::nonEmpty());
  CLI::Option *runSets = run->add_option("--set", sets, "Config override key=value (repeatable)");
  run->add_option("--seed", seed, "Seed for weights and inputs")->check(tools::seedValue());
  int64_t maxMemory = 0;
  tools::addMaxMemory(*run, maxMemory);
  tools::BackendChoice backend;
  tools::addBackend(*run, backend);
  run->add_option("--precision", precision, "f32 | f64")->check(CLI::IsMember({"f32", "f64"}));
  run->add_flag("--ir", fromIr, "Treat MODEL as a .kir file")->excludes(runSets);

  CLI::App *verifyCmd = app.add_subcommand("verify", "Parse and verify an IR file; print it in "
                                                     "canonical form");
  verifyCmd->add_option("file", file, "IR file ('-' = stdin)")->required();
  verifyCmd->add_option("--format", format, "text | dot | summary")
      ->check(CLI::IsMember({"text", "dot", "summary"}));

  CLI::App *demoCmd = app.add_subcommand(
      "demo", "Train a small character-level GPT for about a minute, print samples at three "
              "temperatures, draw the losses (DIR/loss.png) and the attention maps "
              "(DIR/attention.png)");
  int64_t demoSteps = 600;
  std::string demoDir = ".";
  demoCmd->add_option("--steps", demoSteps, "Training steps")
      ->check(tools::integerIn(1, 1'000'000));
  demoCmd
      ->add_option("-o,--output", demoDir,
                   "Directory for loss.png, attention.png and demo.safetensors")
      ->check(tools::nonEmpty());
  tools::OptArgs optArgs;
  CLI::App *optCmd = tools::addOptCommand(app, optArgs);
  tools::TrainArgs trainArgs;
  CLI::App *trainCmd = tools::addTrainCommand(app, trainArgs);
  tools::BenchArgs benchArgs;
  CLI::App *benchCmd = tools::addBenchCommand(app, benchArgs);
  tools::CompileArgs compileArgs;
  CLI::App *compileCmd = tools::addCompileCommand(app, compileArgs);
  tools::GenerateArgs generateArgs;
  CLI::App *generateCmd = tools::addGenerateCommand(app, generateArgs);
  tools::TranslateArgs translateArgs;
  CLI::App *translateCmd = tools::addTranslateCommand(app, translateArgs);
  tools::AttentionArgs attentionArgs;
  CLI::App *attentionCmd = tools::addAttentionCommand(app, attentionArgs);
  tools::TokenizerArgs tokenizerArgs;
  CLI::App *tokenizerCmd = tools::addTokenizerCommand(app, tokenizerArgs);
  tools::ParityArgs parityArgs;
  CLI::App *parityCmd = tools::addParityCommand(app, parityArgs);
  tools::InteropArgs interopArgs;
  tools::addInteropCommands(app, interopArgs);
  CLI::App *modelsCmd = app.add_subcommand("models", "List models and their config keys");
  CLI::App *opsCmd = app.add_subcommand("ops", "List the IR op table");
  CLI::App *passesCmd = app.add_subcommand("passes", "List the passes and pipelines");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    // --help exits 0; a bad flag exits 1, as all bad input does (CLI11's codes were 105, 114...).
    return app.exit(e) == 0 ? 0 : 1;
  }

  auto render = [&](const ir::Graph &g) {
    if (format == "dot")
      return ir::toDot(g);
    if (format == "summary")
      return ir::summary(g);
    return ir::print(g, {.locations = !noLoc, .memory = !noLoc});
  };
  if (*dump) {
    std::vector<models::Setting> settings = tools::parseSettings(sets);
    const bool machine = stage == "llvm" || stage == "asm";
    // Each flag where it means something, never silently ignored.
    if (dumpNoLoc->count() > 0 && (machine || format != "text" || memory))
      throw tools::UserError("--no-loc: shortens the IR text (--format text), not " +
                             std::string(machine  ? "LLVM's output"
                                         : memory ? "the memory report"
                                                  : "--format " + format));
    if (!machine)
      for (CLI::Option *o : {dump->get_option("--train"), dumpCpu})
        if (o->count() > 0)
          throw tools::UserError(fmt::format("{}: only with --stage=llvm or asm (the LLVM "
                                             "module){}",
                                             o->get_name(),
                                             o == dumpCpu ? ""
                                                          : "; --stage=train is the training "
                                                            "step's IR"));
    if (memory && dumpFormat->count() > 0)
      throw tools::UserError("--format: --memory prints the memory plan's report, not the graph");
    if (machine)
      for (CLI::Option *o : {dumpFormat, dumpMemory})
        if (o->count() > 0)
          throw tools::UserError(fmt::format("{}: --stage={} prints LLVM's {}, not the IR",
                                             o->get_name(), stage,
                                             stage == "asm" ? "machine code" : "module"));
    const std::string graphStage = machine ? (dumpTrain ? "train" : "optimized") : stage;
    if (graphStage == "train")
      tools::addDefaultSetting(settings, "loss", "true");
    ir::Graph g = orThrow(tools::toStage(tools::modelGraph(model, fromIr, settings), graphStage));
    if (machine) {
      llvmgen::Options options;
      options.cpu = targetCpu;
      const std::string entry = dumpTrain ? "train_step" : "forward";
      orThrow(
          tools::writeOutput(output, orThrow(llvmgen::moduleText(codegen::withMemoryPlan(g),
                                                                 options, entry, stage == "asm"))));
      return 0;
    }
    orThrow(tools::writeOutput(output, memory ? passes::memoryReport(g) : render(g)));
  } else if (*run) {
    tools::refuseSetsForIr(model, fromIr, sets);
    if (!tools::isIrFile(model, fromIr))
      tools::adoptDescription(runLoad, model, sets);
    ir::Graph g = tools::modelGraph(model, fromIr, tools::parseSettings(sets));
    fmt::print("{}", ir::summary(g));
    runGraph(g, backend, precision, seed, maxMemory, runLoad);
  } else if (*verifyCmd) {
    orThrow(tools::writeOutput("-", render(tools::loadIrFile(file))));
  } else if (*optCmd) {
    return tools::runOpt(optArgs);
  } else if (*trainCmd) {
    tools::runTrain(trainArgs);
  } else if (*benchCmd) {
    tools::runBench(benchArgs);
  } else if (*compileCmd) {
    tools::runCompile(compileArgs);
  } else if (*generateCmd) {
    tools::runGenerate(generateArgs);
  } else if (*translateCmd) {
    tools::runTranslate(translateArgs);
  } else if (*attentionCmd) {
    tools::runAttention(attentionArgs);
  } else if (*tokenizerCmd) {
    tools::runTokenizer(tokenizerArgs);
  } else if (*parityCmd) {
    tools::runParity(parityArgs);
  } else if (tools::runInterop(interopArgs)) {
  } else if (*demoCmd) {
    demo(demoSteps, demoDir);
  } else if (*modelsCmd) {
    fmt::print("{}", modelsHelp());
  } else if (*opsCmd) {
    fmt::print("{}", opsHelp());
  } else if (*passesCmd) {
    fmt::print("{}", tools::passesHelp());
  }
  return 0;
}

} // namespace

namespace kiln::tools {

int runCli(int argc, char **argv, std::span<const models::ModelEntry> models,
           std::string_view installPrefix) {
  const std::string program =
      argc > 0 ? std::filesystem::path(argv[0]).filename().string() : std::string("kiln");
  try {
    if (Status s = models::addModels(models); !s)
      throw UserError(s.error().message);
    if (Expected<std::optional<int>> v = runtime::ThreadPool::threadsVariable(); !v)
      throw UserError(v.error().message);
    if (!installPrefix.empty())
      useInstalledRuntime(std::string(installPrefix));
    return realMain(argc, argv, program);
  } catch (const tools::ReportedError &) {
    return 1;
  } catch (const std::exception &e) {
    // UserError, and the DSL's shape errors (frontend::DslError) when a model is misconfigured.
    std::fflush(stdout);
    fmt::print(stderr, "{}: error: {}\n", program, e.what());
    return 1;
  }
}

} // namespace kiln::tools

// The `kiln` command line (see cli.h): build models from the zoo, dump and verify IR, run graphs,
// train, compile, generate. User mistakes (flags, settings, IR files, DSL shapes) print
// `kiln: error: ...` (the program's name) naming the place, exit 1, and write no partial output.
#include "tools/cli.h"

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <new>
#include <stdexcept>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "codegen/reference/interpreter.h"
#include "ir/parser.h"
#include "ir/summary.h"
#include "models/zoo.h"
#include "runtime/checkpoint.h"
#include "runtime/communicator.h"
#include "runtime/environment.h"
#include "runtime/interrupt.h"
#include "runtime/output_file.h"
#include "runtime/progress.h"
#include "runtime/weights.h"
#include "tools/attention_command.h"
#include "tools/bench_command.h"
#include "tools/cli_util.h"
#include "tools/compile_command.h"
#include "tools/dump_command.h"
#include "tools/generate_command.h"
#include "tools/interop_command.h"
#include "tools/ir_file.h"
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
  std::unique_ptr<runtime::Executable> exe = tools::compileChecked(
      g, backend, precision == "f64", budget, what, &status, {.checkpoint = !load.empty()});
  status.phase("initializing the weights and inputs");
  orThrow(runtime::initWeights(*exe, seed));
  orThrow(runtime::randomizeInputs(*exe, seed));
  if (!load.empty()) {
    status.phase("loading " + load);
    orThrow(runtime::loadCheckpoint(*exe, load));
  }
  status.done();
  // After the flags' checks (compileChecked's) and the load: a bad input says only what is wrong.
  fmt::print("{}", ir::summary(g));
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
  t.logEvery = runtime::onTerminal(stdout) ? 0 : std::max<int64_t>(1, steps / 12); // else: the bar
  t.schedule = "warmup_cosine";
  t.opt.schedule.lr = 3e-3;
  t.opt.schedule.warmup = std::min<int64_t>(50, steps / 10);
  t.save = (std::filesystem::path(dir) / "demo.safetensors").string();
  t.plot = (std::filesystem::path(dir) / "loss.png").string();
  const std::string attention = (std::filesystem::path(dir) / "attention.png").string();
  // The three files, before the minute of training (demo has no --save or --plot to name; the
  // attention map was only tried after it).
  for (const std::string &file : {t.save, t.plot, attention})
    if (Status st = runtime::checkOutputFile(file); !st)
      throw tools::UserError(fmt::format("-o {}: {}", dir, st.error().message));
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
  at.out = attention;
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

// `kiln run`: a forward pass on seeded weights and inputs (or a checkpoint's weights).
struct RunArgs {
  std::string model, load, precision = "f32";
  std::vector<std::string> sets;
  uint64_t seed = 0;
  int64_t maxMemory = 0;
  tools::BackendChoice backend;
  bool fromIr = false;
};

CLI::App *addRunCommand(CLI::App &app, RunArgs &a) {
  CLI::App *run = app.add_subcommand("run", "Forward pass on a backend (--backend) with seeded "
                                            "random weights and inputs");
  run->add_option("model", a.model,
                  "Model name (default with --load: the checkpoint's), or an IR file (.kir, or "
                  "--ir)");
  run->add_option("--load", a.load, "The weights of this checkpoint (and its model and settings)")
      ->check(tools::nonEmpty());
  CLI::Option *sets = tools::addSettings(*run, a.sets);
  run->add_option("--seed", a.seed, "Seed for weights and inputs")->check(tools::seedValue());
  tools::addMaxMemory(*run, a.maxMemory);
  tools::addBackend(*run, a.backend);
  tools::addPrecision(*run, a.precision, true);
  run->add_flag("--ir", a.fromIr, "Treat MODEL as a .kir file")->excludes(sets);
  return run;
}

void runRun(RunArgs &a) {
  tools::refuseSetsForIr(a.model, a.fromIr, a.sets);
  if (!tools::isIrFile(a.model, a.fromIr))
    tools::adoptDescription(a.load, a.model, a.sets);
  ir::Graph g = tools::modelGraph(a.model, a.fromIr, tools::parseSettings(a.sets));
  // A model runs as every command compiles its forward pass (passes/stages.h: the default
  // pipeline; under bf16 the products' marks, after it, and the weights only they read stored in
  // bf16), so that its bits are bench's and those of its `dump --stage=optimized` run as a file.
  // An IR file runs as written, so that `kiln opt` then `kiln run` shows what a pass changed;
  // but under bf16, which takes those same passes (marked before fuse-attention, which takes
  // only f32 products, a model's attention would run as its unfused primitives).
  const passes::Precision precision = tools::productsOf(a.precision);
  if (!tools::isIrFile(a.model, a.fromIr) || precision == passes::Precision::Bf16)
    g = orThrow(passes::optimizedForward(std::move(g), nullptr, precision));
  try {
    runGraph(g, a.backend, a.precision, a.seed, a.maxMemory, a.load);
  } catch (const tools::UserError &e) {
    if (!tools::isIrFile(a.model, a.fromIr))
      throw;
    throw tools::UserError(tools::atIrFile(a.model, e.what()));
  }
}

struct DemoArgs {
  int64_t steps = 600;
  std::string dir = ".";
};

CLI::App *addDemoCommand(CLI::App &app, DemoArgs &a) {
  CLI::App *demoCmd = app.add_subcommand(
      "demo", "Train a small character-level GPT for about a minute, print samples at three "
              "temperatures, draw the losses (DIR/loss.png) and the attention maps "
              "(DIR/attention.png)");
  demoCmd->add_option("--steps", a.steps, "Training steps")->check(tools::integerIn(1, 1'000'000));
  demoCmd
      ->add_option("-o,--output", a.dir,
                   "Directory for loss.png, attention.png and demo.safetensors")
      ->check(tools::nonEmpty());
  return demoCmd;
}

// The top-level help's first lines: what kiln is and which models it has.
std::string appDescription(const std::string &program) {
  std::string names;
  for (const models::ModelEntry &m : models::allModels())
    names += std::string(names.empty() ? "" : ", ") + std::string(m.name);
  return fmt::format("{}: a compiler for Transformer computation graphs, with reverse-mode "
                     "autodiff (kiln).\nModels: {} (see `{} models`).",
                     program, names, program);
}

// Every subcommand's arguments, and which subcommand was given; run() runs it.
struct Commands {
  tools::DumpArgs dump;
  RunArgs forward; // kiln run
  tools::VerifyArgs verify;
  DemoArgs demo;
  tools::OptArgs opt;
  tools::TrainArgs train;
  tools::BenchArgs bench;
  tools::CompileArgs compile;
  tools::GenerateArgs generate;
  tools::TranslateArgs translate;
  tools::AttentionArgs attention;
  tools::TokenizerArgs tokenizer;
  tools::ParityArgs parity;
  tools::InteropArgs interop;
  // Each subcommand with how it runs (the exit status), in the order they were added.
  std::vector<std::pair<CLI::App *, std::function<int()>>> runs;

  void add(CLI::App *cmd, std::function<void()> fn) {
    runs.push_back({cmd, [fn] { return fn(), 0; }});
  }
  void declare(CLI::App &app) {
    add(tools::addDumpCommand(app, dump), [this] { tools::runDump(dump); });
    add(addRunCommand(app, forward), [this] { runRun(forward); });
    add(tools::addVerifyCommand(app, verify), [this] { tools::runVerify(verify); });
    add(addDemoCommand(app, demo), [this] { ::demo(demo.steps, demo.dir); });
    runs.push_back({tools::addOptCommand(app, opt), [this] { return tools::runOpt(opt); }});
    add(tools::addTrainCommand(app, train), [this] { tools::runTrain(train); });
    add(tools::addBenchCommand(app, bench), [this] { tools::runBench(bench); });
    add(tools::addCompileCommand(app, compile), [this] { tools::runCompile(compile); });
    add(tools::addGenerateCommand(app, generate), [this] { tools::runGenerate(generate); });
    add(tools::addTranslateCommand(app, translate), [this] { tools::runTranslate(translate); });
    add(tools::addAttentionCommand(app, attention), [this] { tools::runAttention(attention); });
    add(tools::addTokenizerCommand(app, tokenizer), [this] { tools::runTokenizer(tokenizer); });
    add(tools::addParityCommand(app, parity), [this] { tools::runParity(parity); });
    tools::addInteropCommands(app, interop);
    add(app.add_subcommand("models", "List models and their config keys"),
        [] { fmt::print("{}", modelsHelp()); });
    add(app.add_subcommand("ops", "List the IR op table"), [] { fmt::print("{}", opsHelp()); });
    add(app.add_subcommand("passes", "List the passes and pipelines"),
        [] { fmt::print("{}", tools::passesHelp()); });
  }
  int run() {
    if (tools::runInterop(interop))
      return 0;
    for (auto &[cmd, fn] : runs)
      if (*cmd)
        return fn();
    return 0;
  }
};

int realMain(int argc, char **argv, const std::string &program) {
  CLI::App app{appDescription(program)};
  app.require_subcommand(1);
  // Every option's default in --help, as its value is before parsing (subcommands inherit this).
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", fmt::format("{} (kiln {}; LLVM {}, Highway {})", program,
                                                KILN_VERSION, KILN_LLVM_VERSION, KILN_HWY_VERSION));
  Commands commands;
  commands.declare(app);
  // A word that names no command (CLI11 says only "A subcommand is required").
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    bool known = false;
    for (CLI::App *sub : app.get_subcommands([](CLI::App *) { return true; })) {
      names.push_back(sub->get_name());
      known = known || sub->check_name(argv[1]);
    }
    if (!known)
      throw tools::UserError(fmt::format("unknown command '{}' (the commands: {}; {} --help says "
                                         "what each does)",
                                         argv[1], fmt::join(names, ", "), program));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    // --help and --version answer (CLI11 prints them) and exit 0. A bad flag is said as all bad
    // input is, "kiln: error: ...", and exits 1 (CLI11 said it bare, with codes 105, 114, ...).
    if (e.get_exit_code() == 0)
      return app.exit(e);
    std::string command = program; // with the subcommands parsed, whose --help lists the flags
    for (const CLI::App *sub = &app; !sub->get_subcommands().empty();) {
      sub = sub->get_subcommands().front();
      command += " " + sub->get_name();
    }
    tools::printError(fmt::format("{} ({} --help lists the flags)", e.what(), command));
    return 1;
  }
  // Read after the flags: --version and --help answer whatever the environment says.
  if (Status s = runtime::useEnvironment(); !s)
    throw tools::UserError(s.error().message);
  // Only training joins ranks: N copies of another command would each print the same, or write
  // the same files at once (kiln compile, export).
  if (!runtime::launchedRank().empty())
    for (const CLI::App *sub : app.get_subcommands()) {
      const bool bench = sub->get_name() == "bench"; // (--train excludes --compile)
      if (sub->get_name() != "train" && !(bench && sub->count("--train") > 0))
        throw tools::UserError(fmt::format(
            "{} runs as one process, not on ranks: start it without mpirun (kiln train and kiln "
            "bench --train run on ranks)",
            bench ? "kiln bench without --train" : sub->get_name()));
    }
  return commands.run();
}

} // namespace

namespace kiln::tools {

int runCli(int argc, char **argv, std::span<const models::ModelEntry> models,
           std::string_view installPrefix) {
  runtime::startProcess(argc, argv); // (first of all)
  const std::string program =
      argc > 0 ? std::filesystem::path(argv[0]).filename().string() : std::string("kiln");
  setProgramName(program);
  try {
    if (Status s = models::addModels(models); !s)
      throw UserError(s.error().message);
    if (!installPrefix.empty())
      useInstalledRuntime(std::string(installPrefix));
    const int status = realMain(argc, argv, program);
    if (Status s = runtime::flushStandardOutput(); !s)
      throw UserError(s.error().message);
    return status;
  } catch (const tools::ReportedError &) {
    return 1;
  } catch (const std::bad_alloc &) {
    printError("out of memory: an allocation failed (a model, its weights or its data larger "
               "than this machine's memory; `kiln dump --memory` shows a model's plan)");
    return 1;
  } catch (const std::exception &e) {
    // UserError, and the DSL's shape errors (frontend::DslError) when a model is misconfigured.
    printError(e.what());
    return 1;
  }
}

} // namespace kiln::tools

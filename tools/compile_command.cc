// `kiln compile` (see compile_command.h).
#include "tools/compile_command.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "codegen/backends.h"
#include "codegen/common/executor_backend.h"
#include "codegen/common/program.h"
#include "codegen/llvm/backend.h"
#include "codegen/llvm/program_codegen.h"
#include "models/gpt.h"
#include "models/transformer.h"
#include "models/zoo.h"
#include "passes/stages.h"
#include "runtime/checkpoint.h"
#include "runtime/interrupt.h"
#include "runtime/output_file.h"
#include "runtime/weights.h"
#include "tools/ir_file.h"

namespace kiln::tools {

namespace {

namespace fs = std::filesystem;

// Text for inside a C comment: no "*/" ends it early.
std::string commentSafe(std::string s) {
  for (size_t at = s.find("*/"); at != std::string::npos; at = s.find("*/", at))
    s.replace(at, 2, "* /");
  return s;
}

// A program of the bundle besides the main one: its symbols' prefix after the bundle's name
// ("prefill" gives NAME_prefill_bundle and the entry NAME_prefill_run) and what it is for.
struct ExtraProgram {
  std::string prefix, what;
  std::string member; // the runtime::BundleSet member the executable's main sets to it
  ir::Graph graph;
};

// The C header of bundle `name` for program p (and the declarations of the extra programs).
std::string header(const std::string &name, const std::string &entry, const runtime::Program &p,
                   const std::vector<ExtraProgram> &extras, const std::string &command) {
  std::string h = fmt::format(
      "/* {0}: a model compiled ahead of time by kiln ({1}).\n"
      " * Link {0}.o with the kiln runtime library (or see runtime/bundle_main.h). Every tensor\n"
      " * is at its region's base plus its offset; a run reads the inputs, parameters and state\n"
      " * there and leaves the outputs (and the updated weights) there. */\n"
      "#ifndef {2}_H_\n#define {2}_H_\n\n#include \"runtime/bundle.h\"\n\n",
      name, commentSafe(command), [&] {
        std::string u;
        for (char ch : name)
          u += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        return u;
      }());
  for (MemRegion r : kAllMemRegions)
    h += fmt::format("#define {}_{}_BYTES {}\n", name, std::string(memRegionName(r)), p.bytes(r));
  h += fmt::format("#define {}_ALIGNMENT 64 /* each region's base */\n\n", name);
  // Macro names: a symbol's name made a C identifier, unique (the regions' names taken).
  std::set<std::string> used;
  for (MemRegion r : kAllMemRegions)
    used.insert(std::string(memRegionName(r)));
  for (size_t i = 0; i < p.symbols.size(); ++i) {
    const runtime::Symbol &s = p.symbols[i];
    std::string id = llvmgen::cIdentifier(s.name);
    for (int k = 2; used.count(id); ++k)
      id = fmt::format("{}_{}", llvmgen::cIdentifier(s.name), k);
    used.insert(id);
    h += fmt::format("/* {} {}: {}[{}] in {} */\n", runtime::symbolKindName(s.kind),
                     commentSafe(s.name), dtypeName(s.dtype), fmt::join(s.shape, ","),
                     memRegionName(s.region));
    h += fmt::format("#define {}_{}_REGION {}\n#define {}_{}_OFFSET {}\n#define {}_{}_BYTES {}\n",
                     name, id, static_cast<int>(s.region), name, id, s.offset, name, id, s.bytes);
  }
  h += fmt::format(
      "\n#ifdef __cplusplus\nextern \"C\" {{\n#endif\n"
      "/* The program's description: regions, constants, symbols (runtime/bundle.h). */\n"
      "extern const kiln_bundle {0}_bundle;\n"
      "/* One run over the regions at run->bases: KILN_OK or the failed step's status. */\n"
      "int32_t {0}_{1}(const kiln_run *run, int64_t *failed_step);\n",
      name, entry);
  for (const ExtraProgram &x : extras)
    h += fmt::format("/* {2}: its tensors are in the symbol table of {0}_{1}_bundle. */\n"
                     "extern const kiln_bundle {0}_{1}_bundle;\n"
                     "int32_t {0}_{1}_run(const kiln_run *run, int64_t *failed_step);\n",
                     name, x.prefix, commentSafe(x.what));
  h += "#ifdef __cplusplus\n}\n#endif\n\n#endif\n";
  return h;
}

// Runs `command`; UserError with what it printed if it fails.
void runTool(const std::string &command, const std::string &what) {
  std::string out;
  FILE *p = popen((command + " 2>&1").c_str(), "r");
  if (!p)
    throw UserError(fmt::format("{}: cannot run `{}`", what, command));
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p))
    out.append(buf, n);
  if (int status = pclose(p); status != 0)
    throw UserError(fmt::format("{} failed (`{}`):\n{}", what, command, out));
}

std::string &installPrefix() {
  static std::string prefix;
  return prefix;
}

// The runtime library and headers that an executable links: the installation's that a program
// built on kiln was configured with (useInstalledRuntime), or one beside this binary (../lib/kiln,
// ../include/kiln: an installed kiln), else this build tree's.
std::pair<std::string, std::string> runtimeFiles() {
  auto installed =
      [](const fs::path &prefix) -> std::optional<std::pair<std::string, std::string>> {
    std::error_code ec;
    const fs::path lib = prefix / KILN_INSTALL_LIBDIR / "kiln" / "libkiln_rt.a";
    const fs::path include = prefix / KILN_INSTALL_INCLUDEDIR / "kiln";
    if (fs::exists(lib, ec) && fs::exists(include / "runtime" / "bundle_main.h", ec))
      return std::pair{lib.string(), include.string()};
    return std::nullopt;
  };
  if (!installPrefix().empty())
    if (auto files = installed(installPrefix()))
      return *files;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec)
    if (auto files = installed(self.parent_path().parent_path()))
      return *files;
  return {KILN_RUNTIME_LIBRARY, KILN_RUNTIME_INCLUDE};
}

std::string shellQuoted(const std::string &s) {
  std::string q = "'";
  for (char ch : s)
    q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

// The programs that generate with a forward bundle of a decoder (prefill and decode) or an
// encoder-decoder (encode and decode), at `rows` rows, as kiln generate and kiln translate build
// them; none for other models, or (with a note why) for a configuration they cannot take.
std::vector<ExtraProgram> generationPrograms(const std::string &model,
                                             std::vector<models::Setting> settings, int64_t rows,
                                             passes::Precision precision, CompileStatus &status) {
  settings = inferenceSettings(std::move(settings), rows);
  std::vector<std::pair<std::string, std::string>> names; // prefix, what
  std::vector<Expected<ir::Graph>> graphs;
  if (model == "gpt") {
    const models::GptConfig c = orThrow(models::gptConfig(settings));
    names = {{"prefill", "the prompt into the KV cache (generate)"},
             {"decode", "one token per row with the KV cache (generate)"}};
    graphs.push_back(models::buildGptCached(c, models::GptGraph::Prefill));
    graphs.push_back(models::buildGptCached(c, models::GptGraph::Decode));
  } else if (model == "transformer") {
    const models::TransformerConfig c = orThrow(models::transformerConfig(settings));
    names = {{"encode", "the source into the decoder's cross-attention keys and values "
                        "(translate)"},
             {"decode", "one target token per row with the self-attention cache (translate)"}};
    graphs.push_back(models::buildTransformerCached(c, models::TransformerGraph::Encode));
    graphs.push_back(models::buildTransformerCached(c, models::TransformerGraph::Decode));
  }
  std::vector<ir::Graph> programs;
  for (Expected<ir::Graph> &g : graphs) {
    if (!g) {
      status.done();
      fmt::print("note: no generation programs: {}\n", g.error().message);
      return {};
    }
    programs.push_back(std::move(*g));
  }
  // Optimized together: they store the same weights in bf16 (passes/stages.h).
  programs = orThrow(passes::optimizedForwards(std::move(programs), precision));
  std::vector<ExtraProgram> out;
  for (size_t i = 0; i < programs.size(); ++i) {
    out.push_back({names[i].first, names[i].second, i == 0 ? "prefill" : "decode",
                   codegen::withMemoryPlan(std::move(programs[i]))});
    // A step that only the reference runs (kiln generate runs it) leaves the bundle without them.
    if (Status calls = codegen::checkKernelCalls(orThrow(codegen::lower(out.back().graph, {})));
        !calls) {
      status.done();
      fmt::print("note: no generation programs: {} ({}): {}; {}\n", names[i].first, names[i].second,
                 calls.error().message,
                 model == "gpt" ? "the executable's generate recomputes its window at every "
                                  "step instead (kiln generate runs the cache)"
                                : "the executable cannot translate (kiln translate can)");
      return {};
    }
  }
  return out;
}

} // namespace

CLI::App *addCompileCommand(CLI::App &app, CompileArgs &a) {
  CLI::App *c = app.add_subcommand(
      "compile", "Compile a model ahead of time into a bundle (DIR/NAME.o, NAME.h, "
                 "NAME.safetensors) and, with --exe, a standalone executable");
  c->add_option("model", a.t.model,
                "Model name (default with --load: the checkpoint's), or an IR file (.kir, or "
                "--ir; with --train, one whose graph has a loss output)");
  c->add_flag("--ir", a.t.ir, "Treat MODEL as an IR file");
  addSettings(*c, a.t.sets);
  c->add_flag("--train", a.train,
              "The whole training step (loss, gradients, the optimizer's update) instead of "
              "the forward pass");
  c->add_option("-o,--output-dir", a.out, "Directory for the bundle (created if missing)")
      ->required()
      ->check(nonEmpty());
  c->add_option("--exe", a.exe,
                "Also link a standalone executable here (train/eval/forward/generate/translate/"
                "info; see runtime/bundle_main.h)")
      ->check(nonEmpty());
  c->add_option("--gen-batch", a.genBatch,
                "A forward bundle of gpt or transformer: the rows of its generation programs "
                "(prompts at once, or beams)")
      ->check(integerIn(1, 256))
      ->excludes("--train");
  c->add_option("--seed", a.t.seed, "Seed of the initial weights")->check(seedValue());
  c->add_option("--load", a.t.load, "Initial weights from this checkpoint instead")
      ->check(nonEmpty());
  c->add_option("--steps", a.t.steps,
                "--train: the run's length, for learning-rate schedules that need it")
      ->check(integerIn(1, 1'000'000'000));
  c->add_option("--ranks", a.t.ranks,
                "--train: the step of one of N data-parallel ranks (its gradients and loss "
                "averaged over them); its executable trains under mpirun -np N and links MPI")
      ->check(integerIn(1, 1 << 20));
  addDataParallel(*c, a.t.dp);
  addOptimizerOptions(*c, a.t);
  addTargetCpu(*c, a.t.backend.cpu);
  addPrecision(*c, a.t.precision, false);
  // A forward bundle has no optimizer: its options would be ignored.
  c->parse_complete_callback([c, &a] {
    // (The executable's train takes its own --steps; only a schedule with an end bakes them in.)
    if (a.train && c->count("--steps") > 0 && a.t.schedule != "warmup_cosine")
      throw CLI::ValidationError("--steps", "only --schedule warmup_cosine uses it (the "
                                            "executable's train takes its own --steps)");
    if (a.train)
      return;
    for (const char *flag :
         {"--optimizer", "--lr", "--schedule", "--warmup", "--min-lr", "--momentum", "--nesterov",
          "--beta1", "--beta2", "--eps", "--weight-decay", "--clip-norm", "--steps", "--ranks",
          "--bucket-mb", "--shard-optimizer"})
      if (c->count(flag) > 0)
        throw CLI::ValidationError(flag, "only compile --train uses it (a forward bundle has no "
                                         "optimizer)");
  });
  return c;
}

void useInstalledRuntime(std::string prefix) {
  installPrefix() = std::move(prefix);
}

namespace {

// A directory of the compile's own (the executable's main source and the object it links), gone
// with it.
struct WorkDir {
  fs::path path;
  WorkDir() {
    std::string name = (fs::temp_directory_path() / "kiln-compile-XXXXXX").string();
    if (!::mkdtemp(name.data()))
      throw UserError(fmt::format("cannot create a temporary directory in {}: {}",
                                  fs::temp_directory_path().string(), std::strerror(errno)));
    path = name;
  }
  ~WorkDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// A training step's optimizer and schedule, as the executable's info prints them.
std::string optimizerText(const TrainArgs &t) {
  const passes::OptimizerConfig &o = t.opt;
  const passes::LrSchedule &s = o.schedule;
  std::string text = fmt::format("{}, lr {}", t.optimizer, s.lr);
  if (o.kind == passes::OptimizerConfig::Kind::Sgd)
    text += fmt::format(", momentum {}{}", o.momentum, o.nesterov ? " (nesterov)" : "");
  else
    text += fmt::format(", betas ({}, {}), eps {}", o.beta1, o.beta2, o.eps);
  if (o.weightDecay > 0)
    text += fmt::format(", weight decay {}", o.weightDecay);
  if (o.clipNorm > 0)
    text += fmt::format(", gradients clipped to norm {}", o.clipNorm);
  text += fmt::format("; schedule {}", t.schedule);
  if (s.kind == passes::LrSchedule::Kind::WarmupCosine)
    text += fmt::format(" (warmup {}, down to min_lr {} at step {}, its end)", s.warmup, s.minLr,
                        s.total);
  else if (s.kind == passes::LrSchedule::Kind::InverseSqrt)
    text += fmt::format(" (warmup {}, d_model {})", s.warmup, s.dModel);
  return text;
}

// A string as a C++ literal: escaped, so no text ends it early.
std::string cppString(std::string_view s) {
  std::string out = "\"";
  for (char c : s)
    out += c == '"' || c == '\\' ? std::string{'\\', c} : std::string{c};
  return out + "\"";
}

// What compile says of the CPU its code is for, and how to make it run on more machines.
std::string targetLine(const llvmgen::CpuTarget &cpu, const std::string &asked) {
  const bool host = asked.empty() || asked == "native";
  return fmt::format(
      "code for the CPU {}{} ({} feature{}{}){}", cpu.name, host ? ", this machine's" : "",
      cpu.features.size(), cpu.features.size() == 1 ? "" : "s",
      std::find(cpu.features.begin(), cpu.features.end(), "avx512f") != cpu.features.end()
          ? ", AVX-512 among them"
          : "",
      host ? "; for other machines: --target-cpu x86-64-v3 (any with AVX2) or "
             "x86-64 (any)"
           : "");
}

// What the bundle's descriptors say of its model (runtime/bundle.h: model, settings, defaults):
// the run's description, and the defaults of the settings that fix what the weights mean (not
// the run's, nor those the weights make moot: models::mootWithWeights), against which a
// checkpoint loaded into the bundle is checked. A default of auto is written as the number it
// means in this model (ModelEntry::autoValues), which is what a checkpoint's auto means too where
// its other settings are the bundle's, as they must be: the executable then takes an imported
// checkpoint's norm_eps=1e-06 into a bundle compiled with auto, and the reverse. Nothing for an
// IR file's bundle.
llvmgen::BundleModel bundleModel(const TrainArgs &t) {
  const std::optional<runtime::ModelDescription> d = runDescription(t);
  if (!d)
    return {};
  runtime::ModelDescription defaults{.model = d->model,
                                     .settings = {},
                                     .tokenizerJson = {},
                                     .endTokens = {},
                                     .task = {},
                                     .hfArchitecture = {}};
  const std::vector<models::Setting> settings = settingsOf(*d);
  const auto config = resolvedConfig(d->model, settings);
  const models::ModelEntry *entry = models::findModel(d->model);
  const std::vector<models::Setting> autos = entry && entry->autoValues
                                                 ? orThrow(entry->autoValues(settings))
                                                 : std::vector<models::Setting>{};
  for (auto &[key, value] : resolvedConfig(d->model, {}))
    if (!models::isRunSetting(key) && !models::mootWithWeights(key, config)) {
      auto meant = std::find_if(autos.begin(), autos.end(),
                                [&](const models::Setting &s) { return s.key == key; });
      defaults.settings.emplace_back(key, value == "auto" && meant != autos.end() ? meant->value
                                                                                  : value);
    }
  std::map<std::string, std::string> described, metadata;
  runtime::describeIn(*d, described);
  runtime::describeIn(defaults, metadata);
  return {.model = described["kiln.model"],
          .settings = described["kiln.settings"],
          .defaults = metadata["kiln.settings"]};
}

// The main of a standalone executable: hands the bundle's programs to the runtime's main.
std::string mainSource(const std::string &name, const CompileArgs &a,
                       const std::vector<ExtraProgram> &extras, const llvmgen::CpuTarget &cpu,
                       std::optional<int64_t> ignoreId, std::optional<int64_t> padId) {
  std::string declarations = fmt::format("extern \"C\" const kiln_bundle {}_bundle;\n", name);
  std::string set = fmt::format("  set.main = &{}_bundle;\n", name);
  for (size_t i = 0; i < extras.size(); ++i) {
    declarations +=
        fmt::format("extern \"C\" const kiln_bundle {}_{}_bundle;\n", name, extras[i].prefix);
    set += fmt::format("  set.{} = &{}_{}_bundle;\n", extras[i].member, name, extras[i].prefix);
  }
  if (padId)
    set += fmt::format("  set.padId = {};\n", *padId);
  if (ignoreId)
    set += fmt::format("  set.ignoreId = {};\n", *ignoreId);
  if (a.t.precision == "bf16")
    set += "  set.bf16Products = true;\n";
  set += fmt::format("  set.cpu = {};\n  set.cpuFeatures = {};\n", cppString(cpu.name),
                     cppString(fmt::format("{}", fmt::join(cpu.features, ","))));
  std::string includes = "#include \"runtime/bundle_main.h\"\n";
  if (a.train && a.t.ranks > 1) { // MPI's world, from the library that links MPI
    includes += "#include \"runtime/mpi/mpi_communicator.h\"\n";
    set += "  set.openWorld = &kiln::runtime::mpiWorld;\n";
  }
  if (a.train) {
    set += fmt::format("  set.optimizer = {};\n", cppString(optimizerText(a.t)));
    set += fmt::format("  set.seed = {}ull;\n", a.t.seed);
    if (!a.t.load.empty())
      set += fmt::format(
          "  set.resumes = {};\n",
          cppString(
              fs::absolute(fs::path(a.out) / (name + ".safetensors")).lexically_normal().string()));
    if (a.t.opt.schedule.kind == passes::LrSchedule::Kind::WarmupCosine)
      set += fmt::format("  set.scheduleSteps = {};\n", a.t.opt.schedule.total);
  }
  return fmt::format("// The main of a standalone {0} (kiln compile --exe).\n"
                     "{3}\n{1}\n"
                     "int main(int argc, char **argv) {{\n"
                     "  kiln::runtime::BundleSet set;\n{2}"
                     "  return kiln::runtime::bundleMain(set, argc, argv);\n}}\n",
                     name, declarations, set, includes);
}

// --exe's file (a symbolic link followed, as -o's are), checked before any work: not a device,
// FIFO or directory (the linker writes it), and not one of the bundle's own files.
std::string exeTarget(const std::string &exe, const std::string &base, const std::string &load,
                      const std::string &irFile) {
  Expected<std::string> followed = runtime::followedPath(exe);
  if (!followed)
    throw UserError(fmt::format("--exe {}", followed.error().message));
  const std::string real = *followed;
  std::error_code ec;
  // (-o's directory is made before this check: it would read as a directory that exists.)
  const fs::path dir = fs::path(base).parent_path();
  if (fs::weakly_canonical(real, ec) == fs::weakly_canonical(dir, ec))
    throw UserError(fmt::format("--exe {}: is the bundle's directory (-o); name a file for the "
                                "executable, e.g. {}",
                                exe, (fs::path(exe) / fs::path(base).filename()).string()));
  if (fs::exists(real, ec) && !fs::is_regular_file(real, ec))
    throw UserError(fmt::format("--exe {}: exists and is not a regular file", exe));
  for (const char *part : {".o", ".h", ".safetensors"})
    if (fs::weakly_canonical(real, ec) == fs::weakly_canonical(base + part, ec))
      throw UserError(fmt::format("--exe {}: is the bundle's own {} file", exe, part));
  if (Status s = runtime::checkOutputFile(real); !s)
    throw UserError(fmt::format("--exe {}", s.error().message));
  const runtime::RunInput inputs[] = {
      {"--load", load}, {"the IR file it compiles", irFile}, {"kiln itself", "/proc/self/exe"}};
  orThrow(runtime::checkNotAnInput("--exe", exe, inputs));
  return real;
}

} // namespace

// The standalone executable, linked from a copy of the object in a directory of our own (the
// bundle's is not renamed in yet) beside it, then renamed over `exe` after the bundle's staged
// parts are committed: a failed link leaves the old executable and the old bundle as they were.
// Returns the runtime library it linked.
std::string linkExecutable(const CompileArgs &a, const std::string &name, const std::string &exe,
                           const std::string &object, const std::vector<ExtraProgram> &extras,
                           const llvmgen::CpuTarget &cpu, std::optional<int64_t> ignoreId,
                           std::optional<int64_t> padId, runtime::StagedOutputs &bundle,
                           MadeDirs &madeDirs) {
  WorkDir work;
  const std::string main = (work.path / (name + "_main.cc")).string();
  const std::string linkedObject = (work.path / (name + ".o")).string();
  orThrow(runtime::writeOutputFile(main, mainSource(name, a, extras, cpu, ignoreId, padId)));
  orThrow(runtime::writeOutputFile(linkedObject, object));
  const auto [library, include] = runtimeFiles();
  // A step for several ranks: MPI's world (libkiln_rt_mpi.a, beside the runtime library) and MPI.
  std::string mpi;
  if (a.train && a.t.ranks > 1) {
#if KILN_MPI
    mpi = fmt::format("{} {}",
                      shellQuoted((fs::path(library).parent_path() / "libkiln_rt_mpi.a").string()),
                      KILN_MPI_LINK);
#else
    throw UserError("--ranks: this kiln was built without MPI (KILN_MPI off), which a "
                    "data-parallel executable links");
#endif
  }
  const std::string pid = std::to_string(::getpid()),
                    linked = runtime::nameRoomFor(exe, 5 + pid.size()) + ".tmp-" + pid;
  // Ctrl-C while linking: the link ends (a terminal's signal stops the compiler too), then what
  // was made is removed and nothing replaced (killed outright, kiln left the bundle's staged files
  // and this temporary behind).
  runtime::InterruptGuard interrupt;
  std::error_code ec;
  try {
    try {
      runTool(fmt::format("{} -std=c++20 -O2 {} -I{} {} {} {} {} -lhwy -lfmt -pthread -o {}",
                          KILN_CXX, KILN_EXE_FLAGS, shellQuoted(include), shellQuoted(main),
                          shellQuoted(linkedObject), mpi, shellQuoted(library),
                          shellQuoted(fs::path(linked).is_absolute() ? linked : "./" + linked)),
              "linking " + a.exe);
    } catch (const UserError &) {
      if (!runtime::InterruptGuard::received()) // (the signal stopped the compiler too)
        throw;
    }
    if (int signal = runtime::InterruptGuard::received())
      throw UserError(fmt::format("interrupted by {} while linking {}: the bundle and the "
                                  "executable are as they were",
                                  runtime::InterruptGuard::name(signal), a.exe));
    orThrow(bundle.commit());
    madeDirs.keep = true;
    if (fs::rename(linked, exe, ec); ec)
      throw UserError(
          fmt::format("--exe {}: cannot rename the linked file over it: {}", a.exe, ec.message()));
  } catch (...) {
    fs::remove(linked, ec);
    throw;
  }
  return library;
}

// -o's directory (made where missing) joined with the bundle's name: the stem of its three files,
// each checked to be writable.
std::string bundleBase(const CompileArgs &a, const std::string &name) {
  std::error_code ec;
  fs::create_directories(a.out, ec);
  if (ec)
    throw UserError(fmt::format("-o {}: cannot create the directory: {}", a.out, ec.message()));
  // (A relative path as ./PATH: none starts with '-' on the linker's command line.)
  const fs::path dir = fs::path(a.out).is_absolute() ? fs::path(a.out) : "." / fs::path(a.out);
  const std::string base = (dir / name).string();
  const std::string irFile = irFileOf(a.t);
  for (const char *part : {".o", ".h", ".safetensors"}) {
    if (Status s = runtime::checkOutputFile(base + part); !s)
      throw UserError(fmt::format("-o {}: {}", a.out, s.error().message));
    const runtime::RunInput inputs[] = {{"the IR file it compiles", irFile}};
    orThrow(runtime::checkNotAnInput("-o", base + part, inputs));
  }
  // A forward bundle's weights file holds the weights alone (in bf16 under --precision bf16): over
  // the checkpoint it loads, it would drop that file's optimizer state and step count. (A
  // training bundle's holds them all: rebuilding one over its own checkpoint is a resume.)
  const runtime::RunInput loaded[] = {{"--load", a.t.load}};
  if (!a.train)
    if (Status s = runtime::checkNotAnInput("-o", base + ".safetensors", loaded); !s)
      throw UserError(fmt::format("{} (a forward bundle keeps the weights alone; load a copy, or "
                                  "compile into another directory)",
                                  s.error().message));
  return base;
}

// The bundle's weights in the file format of checkpoints (from the program's own symbol table):
// seeded, or --load's (a training bundle's with the batches it drew: the executable resumes
// from them; a forward bundle's keep no optimizer, and so no batches), with the run's description
// and --load's task.
std::vector<uint8_t> bundleWeights(const CompileArgs &a, const ir::Graph &g,
                                   std::unique_ptr<runtime::Executor> &weights) {
  weights = orThrow(codegen::compileExecutor(g));
  orThrow(runtime::initWeights(*weights, a.t.seed));
  if (!a.t.load.empty())
    orThrow(runtime::loadCheckpoint(*weights, a.t.load));
  std::optional<runtime::ModelDescription> description = runDescription(a.t);
  // (--load's task goes along: an executable resuming these weights continues it.)
  if (description && !a.t.load.empty())
    if (const std::optional<runtime::ModelDescription> loaded =
            orThrow(runtime::readDescription(a.t.load)))
      description->task = loaded->task;
  return runtime::serializeSafetensors(orThrow(runtime::checkpointFile(
      *weights, a.t.load.empty() || !a.train ? -1 : orThrow(runtime::batchesIn(a.t.load)),
      description ? &*description : nullptr)));
}

void runCompile(CompileArgs &a) {
  adoptCheckpoint(a.t, a.train);
  // An IR file is read once, first: the bundle is named after its graph.
  const bool fromIr = isIrFile(a.t.model, a.t.ir);
  const std::optional<ir::Graph> irGraph =
      fromIr ? std::optional<ir::Graph>(loadIrFile(a.t.model)) : std::nullopt;
  if (irGraph) // (a model's dtype is checked below, by its setting)
    refuseF64(*irGraph, "a bundle");
  if (a.genBatch != 1 && (fromIr || (a.t.model != "gpt" && a.t.model != "transformer")))
    throw UserError(fmt::format("--gen-batch: model {} has no generation programs (gpt and "
                                "transformer have)",
                                a.t.model));
  // Everything that can fail is checked or done before anything is written: the directory, every
  // file of the bundle, --exe, the model, the code, the checkpoint to load. Then the parts are
  // written to temporary files and renamed over the old ones together, so that a failure leaves
  // the old bundle whole (its .o used to be replaced before a bad --load failed).
  MadeDirs madeDirs(a.out);
  const std::string name = llvmgen::cIdentifier(irGraph ? irGraph->name() : a.t.model);
  const std::string base = bundleBase(a, name);
  const std::string exe = a.exe.empty() ? "" : exeTarget(a.exe, base, a.t.load, irFileOf(a.t));

  runtime::TaskKind task = runtime::TaskKind::Lm;
  std::vector<models::Setting> settings = parseSettings(a.t.sets);
  if (!fromIr)
    addDefaultTargetLength(a.t.model, settings); // as kiln train and kiln translate take it
  CompileStatus status(fmt::format("the bundle of @{}", name));
  if (a.train && a.t.dp.shardOptimizer && a.t.ranks < 2)
    throw UserError("--shard-optimizer: only with --ranks 2 or more (one process shards nothing)");
  if (a.train && a.t.dp.shardOptimizer && !a.t.load.empty())
    throw UserError("--load: a bundle's weights file is one for all ranks, and a sharded "
                    "optimizer's state is each rank's own; compile without --load and give the "
                    "checkpoint to the executable (train --load), which takes each rank's part");
  if (!fromIr)
    if (const std::optional<std::string> dtype =
            configValue(resolvedConfig(a.t.model, settings), "dtype");
        dtype && *dtype != "f32")
      throw UserError(fmt::format(
          "--set dtype={}: a bundle runs the kernels, which compute on f32 tensors (kiln's "
          "backends run the ops of {} tensors by their reference semantics, which a bundle does "
          "not hold); --precision bf16 multiplies in bf16 with f32 tensors",
          *dtype, *dtype));
  a.t.oneMachine = false; // (where the executable's ranks will run is not known: --bucket-mb auto
                          // takes the buckets a network needs)
  // A forward bundle runs without dropout (forward, eval, generate): a named model's settings
  // leave it out (inferenceSettings), an IR file's nodes are taken out (no-dropout).
  ir::Graph g = a.train
                    ? trainingStepFor(a.t, task, status.report())
                    : orThrow(passes::optimizedForward(
                          irGraph ? orThrow(passes::runPipeline(*irGraph, "no-dropout", nullptr))
                                  : orThrow(models::buildModel(a.t.model, settings)),
                          status.report(), productsOf(a.t.precision)));
  g = codegen::withMemoryPlan(std::move(g));
  // A training step's executable validates (train --eval-every, eval) with kiln train's program:
  // without dropout. (With the step, restoring the weights after it, dropout was on.)
  std::vector<ExtraProgram> extras;
  if (a.train)
    extras.push_back({"eval", "the validation loss: the model with its loss, without dropout",
                      "eval",
                      codegen::withMemoryPlan(evaluationGraph(a.t, task, status.report()))});
  else if (!fromIr)
    extras = generationPrograms(a.t.model, settings, a.genBatch, productsOf(a.t.precision), status);
  const std::string entry = a.train ? "train_step" : "forward";
  llvmgen::Options options;
  options.cpu = a.t.backend.cpu;
  const llvmgen::BundleModel described = bundleModel(a.t);
  std::vector<llvmgen::ObjectPart> parts = {{&g, name + "_", entry, described}};
  for (const ExtraProgram &x : extras)
    parts.push_back({&x.graph, fmt::format("{}_{}_", name, x.prefix), "run", described});
  status.phase(fmt::format("generating code with LLVM ({} program{})", parts.size(),
                           parts.size() == 1 ? "" : "s"));
  const std::string object = orThrow(llvmgen::programObject(parts, options));
  const llvmgen::CpuTarget cpu = orThrow(llvmgen::cpuTarget(options.cpu));
  status.phase("loading the weights");
  std::unique_ptr<runtime::Executor> weights;
  const std::vector<uint8_t> checkpoint = bundleWeights(a, g, weights);
  std::string command = fmt::format(
      "kiln compile {}{}{}{}", a.t.model, a.train ? " --train" : "",
      a.t.sets.empty() ? "" : " --set " + fmt::format("{}", fmt::join(a.t.sets, " --set ")),
      a.genBatch != 1 ? fmt::format(" --gen-batch {}", a.genBatch) : "");

  status.phase("writing the bundle");
  runtime::StagedOutputs bundle;
  const std::span<const uint8_t> bytes(checkpoint);
  orThrow(bundle.stage(base + ".o", object));
  orThrow(bundle.stage(base + ".safetensors", std::span(&bytes, 1)));
  orThrow(bundle.stage(base + ".h", header(name, entry, weights->program(), extras, command)));
  if (exe.empty()) {
    orThrow(bundle.commit());
    madeDirs.keep = true;
    status.done();
    fmt::print("wrote {0}.o ({1} bytes), {0}.h, {0}.safetensors\n", base, object.size());
    fmt::print("{}\n", targetLine(cpu, a.t.backend.cpu));
    return;
  }
  status.phase("linking " + a.exe);
  const std::string library = linkExecutable(
      a, name, exe, object, extras, cpu, ignoreIdOf(g, resolvedConfig(a.t.model, settings)),
      padIdOf(resolvedConfig(a.t.model, settings), irGraph ? &*irGraph : nullptr), bundle,
      madeDirs);
  status.done();
  fmt::print("wrote {0}.o ({1} bytes), {0}.h, {0}.safetensors\n", base, object.size());
  fmt::print("linked {} (runtime {})\n", a.exe, library);
  fmt::print("{}; the executable checks them when it starts\n", targetLine(cpu, a.t.backend.cpu));
}

} // namespace kiln::tools

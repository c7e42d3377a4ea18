// Shared CLI helpers (see cli_util.h).
#include "tools/cli_util.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "codegen/backends.h"
#include "codegen/common/program.h"
#include "ir/printer.h"
#include "models/config.h"
#include "passes/stages.h"
#include "runtime/checkpoint.h"
#include "runtime/environment.h"
#include "runtime/input_file.h"
#include "runtime/kernels/gemm.h"
#include "runtime/output_file.h"

#if KILN_MPI
#include "runtime/mpi/mpi_communicator.h"
#endif

namespace kiln::tools {

namespace {
std::string &programName() {
  static std::string name = "kiln";
  return name;
}
} // namespace

void setProgramName(std::string name) {
  programName() = std::move(name);
}

void printError(std::string_view message) {
  runtime::printError(programName(), message);
}

std::vector<models::Setting> parseSettings(const std::vector<std::string> &raw) {
  std::vector<models::Setting> out;
  for (const std::string &text : raw) {
    models::Setting s = orThrow(models::parseSetting(text));
    for (const models::Setting &earlier : out)
      if (earlier.key == s.key)
        throw UserError(fmt::format("--set {} is given twice ({}={}, then {}={}); give each key "
                                    "once",
                                    s.key, earlier.key, earlier.value, s.key, s.value));
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<models::Setting> inferenceSettings(std::vector<models::Setting> settings,
                                               int64_t rows) {
  std::erase_if(settings, [](const models::Setting &s) {
    return s.key == "batch" || models::isTrainingSetting(s.key);
  });
  settings.push_back({"batch", std::to_string(rows)});
  return settings;
}

void refuseInferenceSettings(const std::vector<std::string> &sets, std::string_view command,
                             std::string_view why) {
  for (const models::Setting &s : parseSettings(sets)) {
    if (s.key == "batch" || s.key == "loss")
      throw UserError(fmt::format("--set {}: {} sets it ({})", s.key, command, why));
    if (models::isTrainingSetting(s.key))
      throw UserError(fmt::format("--set {}: {} runs the model without training it, so without "
                                  "dropout ({} set up training)",
                                  s.key, command, fmt::join(models::kTrainingSettings, ", ")));
  }
}

namespace {
// `s` in place of the setting of its key, or appended.
void putSetting(std::vector<models::Setting> &settings, const models::Setting &s) {
  auto at = std::find_if(settings.begin(), settings.end(),
                         [&](const models::Setting &x) { return x.key == s.key; });
  if (at == settings.end())
    settings.push_back(s);
  else
    *at = s;
}
} // namespace

void addDefaultSetting(std::vector<models::Setting> &settings, std::string key, std::string value) {
  for (const models::Setting &s : settings)
    if (s.key == key)
      return;
  settings.push_back({std::move(key), std::move(value)});
}

void addLoss(std::vector<models::Setting> &settings, std::string_view command) {
  for (const models::Setting &s : settings)
    if (s.key == "loss" && s.value != "true")
      throw UserError(fmt::format("--set loss={}: {} needs the model's loss output (loss=true, "
                                  "which it sets itself)",
                                  s.value, command));
  addDefaultSetting(settings, "loss", "true");
}

void addDefaultTargetLength(const std::string &model, std::vector<models::Setting> &settings) {
  // Read off the config where it has both lengths: a probe model of the default tgt_len is
  // refused where that default does not fit (learned positions of a max_len below it).
  const auto config = resolvedConfig(model, settings);
  if (configValue(config, "tgt_len")) {
    const std::optional<std::string> src = configValue(config, "src_len");
    int64_t length = 0;
    if (src && std::from_chars(src->data(), src->data() + src->size(), length).ec == std::errc() &&
        length > 0 && length < std::numeric_limits<int64_t>::max())
      addDefaultSetting(settings, "tgt_len", std::to_string(length + 1));
    return; // (a bad src_len: the model's build names it)
  }
  const ir::Graph probe = orThrow(models::buildModel(model, settings));
  const ir::Arg *src = probe.findArg("src");
  if (src && src->kind == ir::Arg::Kind::Input && probe.type(src->value).shape.size() == 2)
    addDefaultSetting(settings, "tgt_len", std::to_string(probe.type(src->value).shape[1] + 1));
}

std::string readInputFile(const std::string &path) {
  return orThrow(runtime::readInputText(path));
}

Status writeOutput(const std::string &path, std::string_view text) {
  if (path == "-") {
    if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout))
      return makeError("standard output: cannot write");
    return {};
  }
  return runtime::writeOutputFile(path, text);
}

namespace {
// Whether the integer `text` has a leading zero, which CLI11 reads as octal after our decimal
// check (--max-new 010 made 8 tokens; 08 failed with CLI11's own message).
bool leadingZero(std::string_view text) {
  const std::string_view digits = text.starts_with('-') ? text.substr(1) : text;
  return digits.size() > 1 && digits[0] == '0';
}
} // namespace

CLI::Validator integerIn(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string &text) -> std::string {
        int64_t v = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc() || end != text.data() + text.size() || text.empty() || v < lo ||
            v > hi)
          return fmt::format("{} is not an integer in [{}, {}]", text, lo, hi);
        if (leadingZero(text))
          return fmt::format("{}: write the integer without leading zeros", text);
        return {};
      },
      fmt::format("INT in [{}, {}]", lo, hi));
}

CLI::Validator seedValue() {
  return CLI::Validator(
      [](std::string &text) -> std::string {
        uint64_t v = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc() || end != text.data() + text.size() || text.empty())
          return fmt::format("{} is not a seed (an integer in [0, 2^64))", text);
        if (leadingZero(text))
          return fmt::format("{}: write the seed without leading zeros", text);
        return {};
      },
      "INT in [0, 2^64)");
}

CLI::Validator finiteIn(double lo, double hi, bool openLow, bool openHigh) {
  const std::string range =
      fmt::format("{}{}, {}{}", openLow ? "(" : "[", lo, hi, openHigh ? ")" : "]");
  return CLI::Validator(
      [lo, hi, openLow, openHigh, range](std::string &text) -> std::string {
        double v = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        bool inRange = (openLow ? v > lo : v >= lo) && (openHigh ? v < hi : v <= hi);
        if (ec != std::errc() || end != text.data() + text.size() || text.empty() ||
            !std::isfinite(v))
          return fmt::format("{} is not a finite number in {}", text, range);
        if (!inRange)
          return fmt::format("{} is not in {}", text, range);
        return {};
      },
      "NUMBER in " + range);
}

namespace {
CLI::Validator nonEmptyOf(std::string what, std::string typeName) {
  return CLI::Validator(
      [what](std::string &text) -> std::string {
        return text.empty() ? fmt::format("expected {}, found an empty one", what) : "";
      },
      std::move(typeName));
}
} // namespace

CLI::Validator nonEmpty() {
  return nonEmptyOf("a file name", "PATH");
}

CLI::Validator nonEmptyText() {
  return nonEmptyOf("a text", "TEXT");
}

int64_t machineMemoryBytes() {
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0)
    return std::numeric_limits<int64_t>::max();
  return mulSat(pages, page);
}

namespace {
// "123", "16G", "512MiB", "1.5 GB", "2k" (binary units either way, K to E, k as K) -> bytes,
// unrounded and unbounded (the caller says what is too large); nullopt if not a size.
std::optional<double> parseSize(std::string_view text) {
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || text.empty() || !std::isfinite(v) || v < 0)
    return std::nullopt;
  std::string_view unit(end, text.data() + text.size() - end);
  while (!unit.empty() && unit.front() == ' ')
    unit.remove_prefix(1);
  double scale = 1;
  constexpr std::string_view kPrefixes = "KMGTPE";
  const char prefix = !unit.empty() && unit.front() == 'k' ? 'K'
                      : unit.empty()                       ? ' '
                                                           : unit.front();
  if (kPrefixes.find(prefix) != std::string_view::npos) {
    scale = std::pow(1024.0, static_cast<double>(kPrefixes.find(prefix) + 1));
    unit.remove_prefix(1);
    if (unit == "iB" || unit == "B")
      unit = {};
  } else if (unit == "B") {
    unit = {};
  }
  if (!unit.empty())
    return std::nullopt;
  return v * scale;
}
} // namespace

CLI::Option *addSettings(CLI::App &cmd, std::vector<std::string> &sets, const std::string &help) {
  return cmd.add_option("--set", sets, help)->allow_extra_args(false);
}

CLI::Option *addMaxMemory(CLI::App &cmd, int64_t &budget) {
  budget = machineMemoryBytes();
  return cmd
      .add_option_function<std::string>(
          "--max-memory",
          [&budget](const std::string &text) {
            const std::optional<double> size = parseSize(text);
            if (!size)
              throw CLI::ValidationError("--max-memory",
                                         fmt::format("{} is not a size such as 8G, 512M or a "
                                                     "number of bytes",
                                                     text));
            if (*size < 1 || *size >= 0x1p63)
              throw CLI::ValidationError(
                  "--max-memory",
                  fmt::format("{}: expected at least 1 byte and less than 8 EiB", text));
            budget = static_cast<int64_t>(*size);
          },
          fmt::format("Refuse to run what needs more memory than this (default: the machine's "
                      "RAM, {})",
                      ir::bytesString(budget)))
      ->type_name("SIZE");
}

void addBackend(CLI::App &cmd, BackendChoice &choice) {
  std::vector<std::string> names;
  for (const codegen::BackendInfo &b : codegen::allBackends())
    names.push_back(std::string(b.name));
  cmd.add_option("--backend", choice.name,
                 "Backend: " + codegen::backendNames() +
                     " (default: highway; reference with --precision f64)")
      ->check(CLI::IsMember(names));
  cmd.add_option(
         "--threads", choice.threads,
         "Threads (highway and llvm backends; 0 = KILN_THREADS if set, else every core; at most 8)")
      ->check(integerIn(0, 8))
      ->each([&choice](const std::string &) { choice.threadsGiven = true; });
  addTargetCpu(cmd, choice.cpu);
}

CLI::Option *addTargetCpu(CLI::App &cmd, std::string &cpu) {
  return cmd
      .add_option("--target-cpu", cpu,
                  "The CPU the llvm backend compiles for, by LLVM's name (x86-64-v3, "
                  "znver4, ...; default: this machine's)")
      ->check(nonEmptyOf("a CPU name", "CPU")); // "" would mean the host: leave the flag off
}

CompileStatus::CompileStatus(std::string what) : what_(std::move(what)) {
  if (line_.drawing())
    report_.onPass = [this](std::string_view pass, size_t index, size_t count) {
      phase(count == 1 ? std::string(pass)
                       : fmt::format("pass {} of {} ({})", index + 1, count, pass));
    };
}

void CompileStatus::phase(std::string_view text) {
  line_.show(fmt::format("preparing {}: {}", what_, text));
}

CLI::Option *addPrecision(CLI::App &cmd, std::string &precision, bool f64) {
  const std::vector<std::string> names = f64 ? std::vector<std::string>{"f32", "bf16", "f64"}
                                             : std::vector<std::string>{"f32", "bf16"};
  return cmd
      .add_option("--precision", precision,
                  f64 ? "f32 | bf16 (bf16 products, f32 sums) | f64 (the reference backend)"
                      : "f32 | bf16 (bf16 products, f32 sums)")
      ->check(CLI::IsMember(names));
}

passes::Precision productsOf(const std::string &precision) {
  return precision == "bf16" ? passes::Precision::Bf16 : passes::Precision::F32;
}

CLI::Option *addOverlap(CLI::App &cmd, std::string &overlap) {
  return cmd
      .add_option("--overlap", overlap,
                  "Under mpirun: run the gradients' reductions in the background, beside the "
                  "backward (on), or one after the other at the first wait (off); auto: on where "
                  "each rank leaves a core free for it")
      ->check(CLI::IsMember({"auto", "on", "off"}));
}

bool overlapOn(const std::string &overlap, const runtime::Communicator &world, int threads) {
  return overlap == "auto" ? runtime::backgroundPays(world, threads) : overlap == "on";
}

void addDataParallel(CLI::App &cmd, DataParallelFlags &flags) {
  flags.shard = cmd.add_flag(
      "--shard-optimizer", flags.shardOptimizer,
      "Under mpirun: ZeRO stage 1, each of N ranks keeps and updates 1/N of the optimizer state "
      "(the gradients reduce-scattered, the updated weights all-gathered); the checkpoints are "
      "the same files");
  flags.bucket =
      cmd.add_option("--bucket-mb", flags.bucketMiB,
                     "Under mpirun: gather the gradients, in the order the backward makes them, in "
                     "buckets of this many MiB, one reduction each (0: each gradient on its own); "
                     "auto: 0 where all ranks share one machine, else 25")
          ->check(CLI::Validator(
              [](const std::string &s) -> std::string {
                if (s == "auto")
                  return "";
                // Decimal only (from_chars): CLI11's lexical_cast and stod read 0x10 as 16.
                double v = -1;
                auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
                return ec == std::errc() && end == s.data() + s.size() && v >= 0 && v <= 1024 * 1024
                           ? ""
                           : "expected auto or a number of MiB from 0 to 1048576, got " + s;
              },
              "auto|MIB"))
          ->excludes(flags.shard);
}

passes::DataParallel dataParallel(int64_t ranks, const DataParallelFlags &flags, bool oneMachine) {
  passes::DataParallel dp{.ranks = ranks, .shardOptimizer = flags.shardOptimizer};
  if (flags.bucketMiB != "auto")
    dp.bucketBytes = static_cast<int64_t>(std::stod(flags.bucketMiB) * (1 << 20));
  else if (oneMachine)
    dp.bucketBytes = 0;
  return dp;
}

void noteIfAlone(const DataParallelFlags &flags, int64_t ranks) {
  if (ranks > 1)
    return;
  for (const CLI::Option *o : {flags.shard, flags.bucket})
    if (o && o->count() > 0)
      runtime::printNote(fmt::format(
          "kiln: note: {} changes nothing here: this process trains alone (start it as mpirun "
          "-np N for N data-parallel ranks)\n",
          o->get_name()));
}

std::unique_ptr<runtime::Communicator> openWorld() {
  if (!runtime::launchedByMpi())
    return runtime::aloneCommunicator();
#if KILN_MPI
  return orThrow(runtime::mpiWorld());
#else
  throw UserError("mpirun started this kiln, but it was built without MPI (KILN_MPI off: install "
                  "libopenmpi-dev and reconfigure), so each process would train a model of its "
                  "own");
#endif
}

namespace {

// Whether a product of g rounds its operands to bf16 (an op's bf16_products, which
// passes/bf16_products.cc sets).
bool hasBf16Products(const ir::Graph &g) {
  return std::any_of(g.nodes().begin(), g.nodes().end(), [](const ir::Node &n) {
    const int i = n.attrs.indexOf("bf16_products");
    return !n.erased && i >= 0 && std::get<bool>(n.attrs.values()[i]);
  });
}

} // namespace

std::unique_ptr<runtime::Executable> compileChecked(const ir::Graph &g, const BackendChoice &choice,
                                                    bool f64, int64_t budget, std::string_view what,
                                                    CompileStatus *status, HostNeeds host) {
  // The fast backend by default; the reference for f64, which only it computes.
  const std::string name = choice.name.empty() ? (f64 ? "reference" : "highway") : choice.name;
  const codegen::BackendInfo *backend = codegen::findBackend(name);
  if (!backend)
    throw UserError(fmt::format("unknown backend '{}' (known: {})", name, codegen::backendNames()));
  if (!choice.cpu.empty() && name != "llvm")
    throw UserError(
        fmt::format("--target-cpu {}: only the llvm backend compiles for a chosen "
                    "CPU ({}); use --backend llvm, or drop --target-cpu",
                    choice.cpu,
                    name == "reference"
                        ? "the reference backend is plain C++, compiled with kiln"
                        : fmt::format("the {} backend picks its SIMD code when it runs", name)));
  if (choice.threadsGiven && choice.threads > 1 && name == "reference")
    throw UserError(fmt::format("--threads {}: the reference backend runs on one thread{}",
                                choice.threads,
                                f64 ? " (and only it computes f64); drop --threads"
                                    : "; use --backend highway or llvm, or drop --threads"));
  // A program whose products are bf16 (passes/bf16_products.cc), to run here on a CPU without
  // bf16 instructions: said once, where it runs (kiln compile and dump say nothing: the code may
  // run elsewhere, and an executable says it there).
  static bool said = false;
  if (name != "reference" && hasBf16Products(g))
    if (std::optional<std::string> note = runtime::bf16FallbackNote("kiln", "--precision f32");
        note && !std::exchange(said, true))
      runtime::printNote(*note);
  ir::Graph planned = codegen::withMemoryPlan(g);
  codegen::BackendOptions options{.f64 = f64, .threads = choice.threads, .cpu = choice.cpu};
  // The host copies beside it (HostNeeds): a checkpoint's are its weights region's bytes at most
  // (parameters, optimizer state; bf16 copies and caches, which it does not hold, counted too).
  int64_t largestWeight = 0;
  for (const ir::Arg &a : planned.args())
    if (a.kind != ir::Arg::Kind::Input)
      largestWeight = std::max(largestWeight, planned.type(a.value).bytes());
  const int64_t copies =
      host.checkpoint ? planned.memoryPlan()->bytes(MemRegion::Weights) : largestWeight;
  const int64_t need = backend->estimateBytes(planned, options) + copies + host.others;
  if (need > budget)
    throw UserError(fmt::format(
        "{} on the {} backend needs {} (its memory plan's regions and working space{}{}), over "
        "the memory budget of {}{} (--max-memory)",
        what, name, ir::bytesString(need),
        copies == 0 ? ""
                    : fmt::format(", {}{} of host copies: {}", host.others > 0 ? "" : "and ",
                                  ir::bytesString(copies),
                                  host.checkpoint ? "a checkpoint's tensors"
                                                  : "the largest weight as it is initialized"),
        host.others > 0
            ? fmt::format(", and {} of {}", ir::bytesString(host.others), host.othersAre)
            : "",
        ir::bytesString(budget), budget == machineMemoryBytes() ? ", the machine's RAM" : ""));
  if (status)
    status->phase(fmt::format("generating code ({} backend)", name));
  return orThrow(backend->compile(planned, options));
}

void addTrainedModel(CLI::App &cmd, std::string &model, std::string &load, std::string &tokenizer) {
  cmd.add_option("model", model, "Model name (default: the one the checkpoint names)");
  cmd.add_option("--load", load, "The trained checkpoint (kiln train --save, kiln import)")
      ->required()
      ->check(nonEmpty());
  cmd.add_option("--tokenizer", tokenizer,
                 "The tokenizer.json the model was trained with (default: the checkpoint's, "
                 "else byte tokens)")
      ->check(nonEmpty());
}

std::vector<std::pair<std::string, std::string>>
resolvedConfig(const models::ModelEntry &m, const std::vector<models::Setting> &settings) {
  std::vector<std::pair<std::string, std::string>> config;
  for (const std::string &line : m.describe()) {
    size_t eq = line.find(" = "), help = line.find("  (");
    if (eq == std::string::npos || help == std::string::npos || help < eq)
      throw std::logic_error("unexpected describe() line: " + line);
    config.emplace_back(line.substr(0, eq), line.substr(eq + 3, help - eq - 3));
  }
  for (const models::Setting &s : settings)
    for (auto &[key, value] : config)
      if (key == s.key)
        value = s.value;
  return config;
}

std::optional<std::string>
configValue(const std::vector<std::pair<std::string, std::string>> &config, std::string_view key) {
  for (const auto &[k, v] : config)
    if (k == key)
      return v;
  return std::nullopt;
}

std::vector<models::Setting> settingsOf(const runtime::ModelDescription &d) {
  std::vector<models::Setting> settings;
  for (const auto &[key, value] : d.settings)
    settings.push_back({key, value});
  return settings;
}

std::optional<int64_t> ignoreIdIn(const std::vector<std::pair<std::string, std::string>> &config) {
  std::optional<std::string> ignore = configValue(config, "ignore_index");
  if (ignore == "pad_id")
    ignore = configValue(config, "pad_id");
  if (!ignore)
    return std::nullopt;
  return std::stoll(*ignore);
}

std::optional<int64_t> ignoreIdOf(const ir::Graph &g,
                                  const std::vector<std::pair<std::string, std::string>> &config) {
  for (const ir::Node &n : g.nodes())
    if (!n.erased && n.op == ir::OpKind::CrossEntropy)
      return n.attrs.getInt("ignore_index");
  return ignoreIdIn(config);
}

std::optional<int64_t> padIdOf(const std::vector<std::pair<std::string, std::string>> &config,
                               const ir::Graph *irGraph) {
  if (!irGraph) {
    const std::optional<std::string> pad = configValue(config, "pad_id");
    return pad ? std::optional<int64_t>(std::stoll(*pad)) : std::nullopt;
  }
  const ir::Graph &g = *irGraph;
  auto isTokens = [&](ir::ValueId v) {
    const ir::Value &value = g.value(v);
    if (value.def != ir::kNone)
      return false;
    const ir::Arg &arg = g.args()[static_cast<size_t>(value.index)];
    return arg.kind == ir::Arg::Kind::Input &&
           (arg.name == "tokens" || arg.name == "src" || arg.name == "tgt");
  };
  auto idOf = [&](ir::ValueId v) -> std::optional<int64_t> {
    const ir::NodeId d = g.value(v).def;
    if (d == ir::kNone || g.node(d).op != ir::OpKind::Constant || !isInteger(g.type(v).dtype) ||
        g.type(v).numElements() != 1)
      return std::nullopt;
    return static_cast<int64_t>(g.node(d).attrs.getFloat("value"));
  };
  for (const ir::Node &n : g.nodes())
    if (!n.erased && n.op == ir::OpKind::Ne && n.operands.size() == 2)
      for (int k = 0; k < 2; ++k)
        if (isTokens(n.operands[static_cast<size_t>(k)]))
          if (const std::optional<int64_t> id = idOf(n.operands[static_cast<size_t>(1 - k)]))
            return id;
  return std::nullopt;
}

std::vector<std::pair<std::string, std::string>>
resolvedConfig(const std::string &model, const std::vector<models::Setting> &settings) {
  const models::ModelEntry *entry = models::findModel(model);
  if (!entry || !entry->describe)
    return {};
  return resolvedConfig(*entry, settings);
}

std::optional<int64_t> fittedMaxLen(const models::ModelEntry &m,
                                    const std::vector<models::Setting> &settings) {
  std::optional<models::CommonConfig> c;
  std::vector<models::LengthKey> lengths;
  bool integers = true;
  auto integer = [&](const std::string &text) {
    int64_t v = 0;
    integers = integers && models::parseValue(text, v); // (as the model parses its settings)
    return v;
  };
  for (const auto &[key, value] : resolvedConfig(m, settings)) {
    if (key == "max_len")
      c.emplace().maxLen = integer(value);
    if (models::isLengthSetting(key))
      lengths.push_back({key, integer(value)});
  }
  if (!c || !integers)
    return std::nullopt;
  models::fitMaxLen(*c, settings, lengths);
  return c->maxLen;
}

std::optional<runtime::ModelDescription> adoptDescription(const std::string &load,
                                                          std::string &model,
                                                          std::vector<std::string> &sets,
                                                          bool training) {
  std::optional<runtime::ModelDescription> d =
      load.empty() ? std::nullopt : orThrow(runtime::readDescription(load));
  if (!d) {
    if (model.empty())
      throw UserError(
          load.empty()
              ? "name a model (kiln models lists them)"
              : fmt::format("--load {}: the checkpoint does not say what model it is (no "
                            "\"kiln.model\" metadata: written for an IR file, by parity-dump or "
                            "by an older kiln): name the model, e.g. `gpt`, and its --set "
                            "settings",
                            load));
    return std::nullopt;
  }
  if (!model.empty() && model != d->model)
    throw UserError(
        fmt::format("model {}: the checkpoint {} holds a {} model", model, load, d->model));
  model = d->model;
  // The checkpoint's own settings must build its model (a kiln wrote them; a file edited or
  // written elsewhere may not), so that what is wrong is said of the file, not of a --set.
  const std::vector<models::Setting> saved = settingsOf(*d);
  if (Expected<ir::Graph> g = models::buildModel(model, saved); !g.ok())
    throw UserError(fmt::format("--load {}: the model its metadata describes (\"kiln.model\", "
                                "\"kiln.settings\") does not build: {}",
                                load, g.error().message));
  const std::vector<models::Setting> user = parseSettings(sets);
  // What a run may set anew: the run's settings, and those the weights make moot (init, ...).
  const auto config = resolvedConfig(model, saved);
  auto free = [&](const std::string &key) {
    return models::isRunSetting(key) || models::mootWithWeights(key, config);
  };
  // Whether `s` over the checkpoint's settings builds another model than they do, both with their
  // loss (where pad_id may matter alone): a --set that says a value the weights fix in other
  // words (n_layers=01, norm_eps=1e-5 where auto means it, a default given) changes nothing, and
  // then stands as given. A value that does not build is refused with what building says.
  std::optional<std::string> savedText; // (built only for such a --set)
  auto printed = [&](std::vector<models::Setting> settings) {
    putSetting(settings, {"loss", "true"});
    return ir::print(orThrow(models::buildModel(model, settings)));
  };
  auto changesModel = [&](const models::Setting &s) {
    if (!savedText)
      savedText = printed(saved);
    std::vector<models::Setting> with = saved;
    putSetting(with, s);
    return printed(with) != *savedText;
  };
  std::vector<std::string> merged;
  for (const auto &[key, value] : d->settings) {
    if (!training && models::isTrainingSetting(key))
      continue;
    auto given = std::find_if(user.begin(), user.end(),
                              [&](const models::Setting &s) { return s.key == key; });
    if (given != user.end() && given->value != value && !free(key) && changesModel(*given))
      throw UserError(fmt::format("--set {}={}: the checkpoint {} was saved with {}={}, which "
                                  "its weights fix",
                                  key, given->value, load, key, value));
    if (given == user.end())
      merged.push_back(key + "=" + value);
  }
  for (const models::Setting &s : user) {
    const bool inCheckpoint = std::any_of(d->settings.begin(), d->settings.end(),
                                          [&](const auto &kv) { return kv.first == s.key; });
    if (!inCheckpoint && !free(s.key) && changesModel(s))
      throw UserError(fmt::format("--set {}={}: the checkpoint {} was saved with {} at its "
                                  "default, which its weights fix (a run may set {})",
                                  s.key, s.value, load, s.key,
                                  fmt::join(models::kRunSettings, ", ")));
    merged.push_back(s.key + "=" + s.value);
  }
  // max_len, where the model has it and neither the checkpoint nor the user sets it: fitted to
  // the run's lengths (models/config.h fitMaxLen) it may differ from what the checkpoint's own
  // lengths gave it, which its learned position table ([max_len, d]) holds (a model trained at
  // seq_len 600 could not run at 100); then it is set to the checkpoint's. (A checkpoint of this
  // kiln says such a max_len itself: runDescription; an older one's may not.)
  const models::ModelEntry *entry = models::findModel(model);
  const bool maxLenSet =
      std::any_of(user.begin(), user.end(), [](const auto &s) { return s.key == "max_len"; }) ||
      std::any_of(d->settings.begin(), d->settings.end(),
                  [](const auto &kv) { return kv.first == "max_len"; });
  if (entry && !maxLenSet) {
    const std::optional<int64_t> fixed = fittedMaxLen(*entry, saved);
    if (fixed && fixed != fittedMaxLen(*entry, parseSettings(merged)))
      merged.push_back(fmt::format("max_len={}", *fixed));
  }
  // A run's own setting may not fit what the weights fix (seq_len past a learned position
  // table's max_len): said of the --set, not of a setting the user cannot change. (A --set that
  // builds no model at all, seq_len=abc, is said as building says it, later.)
  if (!user.empty() && models::buildModel(model, user).ok())
    if (Expected<ir::Graph> g = models::buildModel(model, parseSettings(merged)); !g.ok())
      throw UserError(fmt::format("--set {}: does not fit the checkpoint {}, whose weights fix "
                                  "its other settings: {}",
                                  fmt::join(sets, " --set "), load, g.error().message));
  sets = std::move(merged);
  return d;
}

runtime::Tokenizer tokenizerFor(const std::string &path,
                                const std::optional<runtime::ModelDescription> &checkpoint,
                                const std::string &load) {
  return orThrow(runtime::chooseTokenizer(path, checkpoint ? &*checkpoint : nullptr, load));
}

MadeDirs::MadeDirs(const std::filesystem::path &dir) {
  std::error_code ec;
  for (std::filesystem::path p = dir; !p.empty() && !std::filesystem::exists(p, ec);
       p = p.parent_path())
    made.push_back(p);
}

MadeDirs::~MadeDirs() {
  std::error_code ec;
  for (const std::filesystem::path &p : made)
    if (!keep)
      std::filesystem::remove(p, ec); // (fails, leaving it, if anything is in it)
}

runtime::Tokenizer tokenizerOrBytes(const std::string &path) {
  return path.empty() ? runtime::Tokenizer::bytes() : orThrow(runtime::Tokenizer::load(path));
}

std::vector<std::unique_ptr<runtime::Executable>>
compileWithCheckpoint(std::vector<std::pair<ir::Graph, std::string_view>> graphs,
                      const BackendChoice &choice, int64_t budget, const std::string &path,
                      passes::Precision precision) {
  std::vector<ir::Graph> programs;
  std::vector<std::string> names;
  for (auto &[graph, what] : graphs) {
    names.push_back(fmt::format("{} of @{}", what, graph.name()));
    programs.push_back(std::move(graph));
  }
  {
    CompileStatus status(names.size() == 1 ? names[0] : "the programs of @" + programs[0].name());
    programs = orThrow(passes::optimizedForwards(std::move(programs), precision, status.report()));
  }
  // Each program is held beside those before it (generate's prefill and decoding step, each
  // with its own weights): the budget holds them all.
  std::vector<std::unique_ptr<runtime::Executable>> out;
  int64_t before = 0;
  for (size_t i = 0; i < programs.size(); ++i) {
    CompileStatus status(names[i]);
    out.push_back(
        compileChecked(programs[i], choice, false, budget, names[i], &status,
                       {.others = before, .othersAre = "the programs compiled before it"}));
    before += out.back()->memoryBytes();
    status.phase("loading " + path);
    orThrow(runtime::loadCheckpoint(*out.back(), path));
  }
  return out;
}

} // namespace kiln::tools

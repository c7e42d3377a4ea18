// The standalone executable's commands (see bundle_main.h).
#include "runtime/bundle_main.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/bundle_loader.h"
#include "runtime/checkpoint.h"
#include "runtime/generation.h"
#include "runtime/input_file.h"
#include "runtime/output_file.h"
#include "runtime/safetensors.h"
#include "runtime/tasks.h"
#include "runtime/thread_pool.h"
#include "runtime/tokenizer.h"
#include "runtime/trainer.h"
#include "runtime/weights.h"

namespace kiln::runtime {

namespace {

struct Failure {
  std::string message;
};

template <class T> T orFail(Expected<T> e) {
  if (!e)
    throw Failure{e.error().message};
  return std::move(*e);
}
void orFail(const Status &s) {
  if (!s)
    throw Failure{s.error().message};
}

// The options each command takes (each with one value).
std::vector<std::string> optionsOf(const std::string &command) {
  if (command == "train")
    return {"--data", "--val-fraction", "--tokenizer", "--task",      "--steps",
            "--seed", "--load",         "--save",      "--log-every", "--threads"};
  if (command == "eval")
    return {"--weights", "--data", "--tokenizer", "--task", "--batches", "--seed", "--threads"};
  if (command == "forward")
    return {"--weights", "--input", "--output", "--threads"};
  if (command == "generate")
    return {"--weights", "--prompt", "--max-new", "--temperature",    "--top-k",     "--top-p",
            "--seed",    "--stop",   "--beam",    "--length-penalty", "--tokenizer", "--threads"};
  if (command == "translate")
    return {"--weights", "--src", "--max-new", "--length-penalty", "--tokenizer", "--threads"};
  return {"--threads"};
}

// --name value pairs after the command, of the names it takes, each at most once.
std::map<std::string, std::string> parseOptions(int argc, char **argv) {
  const std::string command = argv[1];
  const std::vector<std::string> known = optionsOf(command);
  std::map<std::string, std::string> out;
  for (int i = 2; i < argc; i += 2) {
    const std::string name = argv[i];
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw Failure{fmt::format("{} takes no option '{}' (it takes {})", command, name,
                                fmt::join(known, ", "))};
    if (i + 1 >= argc || std::string_view(argv[i + 1]).starts_with("--"))
      throw Failure{fmt::format("{} needs a value", name)};
    if (!out.emplace(name, argv[i + 1]).second)
      throw Failure{fmt::format("{} is given twice", name)};
  }
  return out;
}

int64_t integer(const std::map<std::string, std::string> &o, const std::string &name,
                int64_t fallback, int64_t lo, int64_t hi) {
  auto it = o.find(name);
  if (it == o.end())
    return fallback;
  const std::string &text = it->second;
  size_t used = 0;
  long long v = 0;
  try {
    if (!text.empty() && std::isdigit(static_cast<unsigned char>(text[0])))
      v = std::stoll(text, &used);
  } catch (const std::exception &) {
    used = 0;
  }
  if (used == 0 || used != text.size() || v < lo || v > hi)
    throw Failure{fmt::format("{} {}: expected an integer in [{}, {}]", name, it->second, lo, hi)};
  return v;
}

// A number in [lo, hi] written plainly (digits and one point, a minus sign first where lo < 0: no
// plus, exponent, inf or nan).
double number(const std::map<std::string, std::string> &o, const std::string &name, double fallback,
              double lo, double hi) {
  auto it = o.find(name);
  if (it == o.end())
    return fallback;
  const std::string &text = it->second;
  const std::string digits = lo < 0 && text.starts_with('-') ? text.substr(1) : text;
  const bool plain = !digits.empty() &&
                     digits.find_first_not_of("0123456789.") == std::string::npos &&
                     std::count(digits.begin(), digits.end(), '.') <= 1 && digits != ".";
  const double v = plain ? std::strtod(text.c_str(), nullptr) : lo - 1;
  if (!plain || v < lo || v > hi)
    throw Failure{fmt::format("{} {}: expected a number in [{}, {}]", name, text, lo, hi)};
  return v;
}

std::string required(const std::map<std::string, std::string> &o, const std::string &name) {
  auto it = o.find(name);
  if (it == o.end() || it->second.empty())
    throw Failure{fmt::format("{} FILE is required", name)};
  return it->second;
}

// generate and forward run a forward program: a training step's run would update the weights in
// place (AdamW) once per token and print other text.
void refuseTrainingStep(const Program &main, const std::string &command) {
  if (main.loss())
    throw Failure{fmt::format("{}: this bundle is a training step: it was compiled with --train "
                              "(compile it without --train to {})",
                              command, command == "forward" ? "run it forward" : command)};
}

// kiln's reader: a directory named as one, the 2 GiB cap (a big sparse file was read until
// bad_alloc), a FIFO or device read to its end.
std::string readText(const std::string &path) {
  return orFail(readInputText(path));
}

Tokenizer tokenizerOf(const std::map<std::string, std::string> &o) {
  auto it = o.find("--tokenizer");
  return it == o.end() ? Tokenizer::bytes() : orFail(Tokenizer::load(it->second));
}

// What the program trains on, as `kiln train` would: for an encoder-decoder ("src" input) the
// source<TAB>target lines of --data (task pairs) or the copy or reverse task (--task), else lm or
// mlm (token_types) windows of the --data text; a text's ids are the tokenizer's, of all but its
// last `heldOut` fraction (whole lines for pairs).
struct Task {
  TaskKind kind = TaskKind::Lm;
  TaskShape shape;
  std::vector<int32_t> ids; // of the text (none for copy and reverse)
};

Task taskOf(const Program &p, const std::map<std::string, std::string> &o, const BundleSet &set,
            double heldOut) {
  if (!p.loss())
    throw Failure{"this bundle has no loss: it was compiled for inference (compile it with "
                  "--train)"};
  auto rows = [](const Symbol &s) {
    if (s.shape.size() != 2)
      throw Failure{fmt::format("the \"{}\" input is not [batch, length]", s.name)};
    return s;
  };
  Task t;
  const Symbol *src = p.argument("src");
  if (src && !o.count("--data")) {
    const std::string name = o.count("--task") ? o.at("--task") : "copy";
    if (name != "copy" && name != "reverse")
      throw Failure{fmt::format("--task {}: expected copy or reverse (or --data FILE of "
                                "source<TAB>target lines)",
                                name)};
    if (o.count("--tokenizer"))
      throw Failure{fmt::format("--tokenizer: task {} makes its own token ids", name)};
    t.kind = name == "copy" ? TaskKind::Copy : TaskKind::Reverse;
    t.shape = {.batch = rows(*src).shape[0], .srcLen = src->shape[1], .vocab = src->range};
    orFail(checkTask(t.kind, t.shape));
    return t;
  }
  if (o.count("--task"))
    throw Failure{src ? "--task: give either --task copy|reverse or --data FILE"
                      : "--task: this model trains on the text of --data"};
  const std::string path = required(o, "--data");
  const std::string text = readText(path);
  const Tokenizer tokenizer = tokenizerOf(o);
  if (src) {
    if (set.padId != kPad)
      throw Failure{fmt::format("task pairs pads sources with id {}: this model's pad_id is {}",
                                kPad, set.padId)};
    t.kind = TaskKind::Pairs;
    t.shape = {.batch = rows(*src).shape[0],
               .srcLen = src->shape[1],
               .vocab = src->range,
               .textVocab = tokenizer.vocabSize(),
               .ignore = set.ignoreId};
    Expected<std::vector<int32_t>> ids =
        pairTokens(splitLines(text, heldOut).train,
                   [&](std::string_view half) { return tokenizer.encode(half); });
    if (!ids)
      throw Failure{fmt::format("--data {}: {}", path, ids.error().message)};
    t.ids = std::move(*ids);
  } else {
    const Symbol *tokens = p.argument("tokens");
    if (!tokens)
      throw Failure{"this program has neither a \"src\" nor a \"tokens\" input to train"};
    t.kind = p.argument("token_types") ? TaskKind::Mlm : TaskKind::Lm;
    t.shape = {.batch = rows(*tokens).shape[0],
               .seqLen = tokens->shape[1],
               .vocab = tokens->range,
               .textVocab = tokenizer.vocabSize()};
    t.ids = tokenizer.encode(splitText(text, heldOut).train);
  }
  if (Status s = checkTask(t.kind, t.shape, t.ids); !s)
    throw Failure{heldOut > 0 ? fmt::format("{}; that is the text without its held-out tail "
                                            "(--val-fraction {})",
                                            s.error().message, heldOut)
                              : s.error().message};
  return t;
}

int train(Executor &exe, const std::map<std::string, std::string> &o, const BundleSet &set) {
  // As kiln train: the text's last --val-fraction is held out (never trained on).
  const Task task = taskOf(exe.program(), o, set, number(o, "--val-fraction", 0.1, 0, 0.5));
  if (auto it = o.find("--save"); it != o.end()) // before the work, as kiln train checks
    if (Status st = checkOutputFile(it->second); !st)
      throw Failure{fmt::format("--save {}", st.error().message)};
  uint64_t first = 0; // batches drawn before (kiln train's runs count skipped updates too)
  if (auto it = o.find("--load"); it != o.end())
    first = static_cast<uint64_t>(orFail(batchesIn(it->second)));
  // A schedule with an end trains up to it by default, and never past it: its steps there would
  // all run at min_lr, silently (a 40-step schedule run for 80 left the weights of step 40).
  const int64_t horizon = set.scheduleSteps, left = horizon - static_cast<int64_t>(first);
  if (horizon > 0 && left <= 0)
    throw Failure{fmt::format("--load {}: its {} steps reach the end of this bundle's "
                              "learning-rate schedule ({} steps): recompile with kiln compile "
                              "--steps N for a longer one",
                              o.at("--load"), first, horizon)};
  const int64_t steps = integer(o, "--steps", horizon > 0 ? left : 100, 1, 1'000'000'000);
  if (horizon > 0 && steps > left)
    throw Failure{fmt::format(
        "--steps {}: this bundle's learning-rate schedule ends at step {} "
        "(kiln compile --steps {}){}; steps past it would all train at its "
        "final rate. Recompile with kiln compile --steps N for a longer run",
        steps, horizon, horizon,
        first > 0 ? fmt::format(", {} steps after the checkpoint's {}", left, first) : "")};
  const int64_t logEvery = integer(o, "--log-every", 1, 1, 1'000'000'000);
  const uint64_t seed = static_cast<uint64_t>(integer(o, "--seed", 0, 0, INT64_MAX));
  orFail(initWeights(exe, seed));
  Trainer trainer = orFail(Trainer::create(exe));
  if (auto it = o.find("--load"); it != o.end())
    fmt::print("loaded {} tensors from {}\n", orFail(loadCheckpoint(exe, it->second)), it->second);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t k = 0; k < steps; ++k) {
    const double loss =
        orFail(trainer.step(makeBatch(task.kind, task.shape, seed, first + k, task.ids)));
    if (!trainer.lastUpdateApplied())
      throw Failure{fmt::format("step {}: the loss ({}) or the gradient norm is not finite; "
                                "stopped, the weights from before it kept",
                                first + k + 1, loss)};
    if ((k + 1) % logEvery == 0 || k == 0 || k + 1 == steps)
      fmt::print("step {:>5}  loss {:.6f}\n", first + k + 1, loss);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("trained {} steps in {:.2f} s ({:.1f} ms/step)\n", steps, s, 1000 * s / double(steps));
  if (auto it = o.find("--save"); it != o.end()) {
    orFail(saveCheckpoint(exe, it->second, static_cast<int64_t>(first) + steps));
    fmt::print("saved parameters and optimizer state to {}\n", it->second);
  }
  return 0;
}

// The mean loss over --batches windows; weights restored before each (a training step's program
// updates them as it runs).
int eval(Executor &exe, const std::map<std::string, std::string> &o, const BundleSet &set) {
  const std::string weights = required(o, "--weights");
  const Task task = taskOf(exe.program(), o, set, 0);
  const int64_t batches = integer(o, "--batches", 10, 1, 1'000'000);
  const uint64_t seed = static_cast<uint64_t>(integer(o, "--seed", 0, 0, INT64_MAX));
  orFail(initWeights(exe, 0));
  orFail(loadCheckpoint(exe, weights));
  std::vector<std::pair<const Symbol *, HostTensor>> kept;
  for (const Symbol &s : exe.program().symbols)
    if (s.isWeight())
      kept.emplace_back(&s, exe.read(s));
  double total = 0;
  for (int64_t k = 0; k < batches; ++k) {
    for (const auto &[s, t] : kept)
      orFail(exe.write(*s, t));
    orFail(writeBatch(exe,
                      makeBatch(task.kind, task.shape, seed, static_cast<uint64_t>(k), task.ids)));
    orFail(exe.run());
    total += exe.read(*exe.program().loss()).get(0);
  }
  fmt::print("loss {:.6f} (mean of {} batches)\n", total / double(batches), batches);
  return 0;
}

// Token rows from the file's bytes, consecutive windows (wrapping around a short file); every
// value output printed (shape, first values) and written to --output as safetensors.
int forward(Executor &exe, const std::map<std::string, std::string> &o) {
  refuseTrainingStep(exe.program(), "forward");
  const std::string weights = required(o, "--weights");
  const std::string text = readText(required(o, "--input"));
  const Symbol *tokens = exe.program().argument("tokens");
  if (!tokens || tokens->shape.size() != 2)
    throw Failure{
        "forward feeds text to a \"tokens\" input [batch, length]; this program has none"};
  if (text.empty())
    throw Failure{fmt::format("{}: empty input", o.at("--input"))};
  orFail(initWeights(exe, 0));
  orFail(loadCheckpoint(exe, weights));
  orFail(randomizeInputs(exe, 0)); // other inputs (token types): seeded
  // Bytes as token ids: each must be one of the model's (else a gather's "index out of range").
  HostTensor t(tokens->dtype, tokens->shape);
  for (int64_t k = 0; k < t.numElements(); ++k) {
    const size_t at = static_cast<size_t>(k) % text.size();
    const auto byte = static_cast<unsigned char>(text[at]);
    if (tokens->range > 0 && byte >= tokens->range)
      throw Failure{fmt::format("{}: byte {} is 0x{:02x}, past the model's vocab of {} (forward "
                                "feeds the file's bytes as token ids)",
                                o.at("--input"), at, byte, tokens->range)};
    t.setInt(k, byte);
  }
  orFail(exe.write(*tokens, t));
  orFail(exe.run());
  SafetensorsFile out;
  for (const Symbol &s : exe.program().symbols)
    if (s.kind == Symbol::Kind::Output && s.role == Symbol::Role::Value) {
      HostTensor v = exe.read(s);
      // Six decimals, as printf's %.6f (what examples/embed prints too).
      fmt::print("{} [{}]: {:.6f}{}\n", s.name, fmt::join(s.shape, ","), v.get(0),
                 v.numElements() > 1 ? fmt::format(", {:.6f}, ...", v.get(1)) : "");
      out.tensors.push_back(toSafetensors(s.name, v));
    }
  if (auto it = o.find("--output"); it != o.end()) {
    orFail(writeSafetensors(it->second, out));
    fmt::print("wrote {} to {}\n", out.tensors.size() == 1 ? "it" : "them", it->second);
  }
  return 0;
}

// A bundle's program with the checkpoint's weights (parameters; not optimizer state or caches).
std::unique_ptr<Executor> loadWith(const kiln_bundle &b, int threads, const std::string &weights) {
  std::unique_ptr<Executor> exe = orFail(loadBundle(b, threads));
  orFail(initWeights(*exe, 0));
  orFail(loadCheckpoint(*exe, weights));
  return exe;
}

// The bundle's two generation programs (prefill or encode, and decode) with the weights.
struct GenerationPair {
  std::unique_ptr<Executor> first, decode;
};
GenerationPair loadGeneration(const BundleSet &set, int threads, const std::string &weights) {
  return {loadWith(*set.prefill, threads, weights), loadWith(*set.decode, threads, weights)};
}

BeamOptions beamOptions(const std::map<std::string, std::string> &o) {
  BeamOptions b;
  b.maxNew = integer(o, "--max-new", 64, 1, 1'000'000);
  b.lengthPenalty = number(o, "--length-penalty", 1.0, -10, 10);
  return b;
}

// The prompt continued as kiln generate does (runtime/generation.h), with the bundle's prefill
// and decode programs (a KV cache) if it holds them, else by the forward program's whole window
// per token; greedy is --top-k 1. --beam N: beam search over the decode program's N rows.
int generateText(const BundleSet &set, int threads, const std::map<std::string, std::string> &o) {
  refuseTrainingStep(orFail(programOf(*set.main)), "generate");
  if (auto it = o.find("--stop"); it != o.end() && it->second.empty())
    throw Failure{"--stop: expected a text (an empty one would stop before the first token)"};
  const std::string weights = required(o, "--weights");
  auto prompt = o.find("--prompt");
  if (prompt == o.end() || prompt->second.empty())
    throw Failure{"--prompt TEXT is required"};
  if (orFail(programOf(*set.main)).argument("src"))
    throw Failure{"--prompt: this bundle generates no text from a prompt (a decoder's forward "
                  "bundle does); an encoder-decoder's translates (translate --src TEXT)"};
  const Tokenizer tokenizer = tokenizerOf(o);
  const bool cached = set.prefill && set.decode;
  if (o.count("--length-penalty") && !o.count("--beam"))
    throw Failure{"--length-penalty: needs --beam N"};
  if (o.count("--beam")) {
    for (const char *sampling : {"--temperature", "--top-k", "--top-p", "--seed"})
      if (o.count(sampling))
        throw Failure{fmt::format("{}: beam search does not sample", sampling)};
    if (!cached)
      throw Failure{"--beam: this bundle holds no prefill and decode programs"};
    const GenerationPair p = loadGeneration(set, threads, weights);
    const Symbol *pos = p.decode->program().argument("pos");
    if (!pos || pos->shape.size() != 1)
      throw Failure{"--beam: this bundle's decode program has no \"pos\" input [rows]"};
    const int64_t rows = pos->shape[0];
    if (integer(o, "--beam", rows, 1, 256) != rows)
      throw Failure{fmt::format("--beam {0}: this bundle decodes {1} row{2} at a time, so its beam "
                                "search runs {1} beam{2} (kiln compile --gen-batch N sets the "
                                "rows)",
                                o.at("--beam"), rows, rows == 1 ? "" : "s")};
    BeamOptions b = beamOptions(o);
    if (auto it = o.find("--stop"); it != o.end())
      b.stop = it->second;
    Generated stats;
    const std::vector<Beam> beams =
        orFail(beamSearch(*p.first, *p.decode, tokenizer, prompt->second, b, &stats));
    fmt::print("{}{}\n", beamsText(beams, prompt->second), speedSummary(stats));
    return 0;
  }
  GenerateOptions g;
  g.maxNew = integer(o, "--max-new", 64, 1, 1'000'000);
  g.temperature = number(o, "--temperature", 1.0, 0, 1e6);
  if (g.temperature <= 0)
    throw Failure{"--temperature: expected a number above 0 (--top-k 1 is greedy)"};
  g.topK = integer(o, "--top-k", 0, 0, 1'000'000'000);
  g.topP = number(o, "--top-p", 1.0, 0, 1);
  if (g.topP <= 0)
    throw Failure{"--top-p: expected a number in (0, 1]"};
  g.seed = static_cast<uint64_t>(integer(o, "--seed", 0, 0, INT64_MAX));
  if (auto it = o.find("--stop"); it != o.end())
    g.stop = it->second;
  Generated out;
  if (cached) {
    const GenerationPair p = loadGeneration(set, threads, weights);
    out = orFail(generateCached(*p.first, *p.decode, tokenizer, {prompt->second}, g));
  } else {
    std::unique_ptr<Executor> exe = loadWith(*set.main, threads, weights);
    out = orFail(generate(*exe, tokenizer, {prompt->second}, g));
  }
  fmt::print("{}{}\n", prompt->second, out.continuations[0]);
  fmt::print("{}\n", speedSummary(out));
  return 0;
}

// The source translated as kiln translate does: the encode program once, then the decode
// program a token per step, a beam per row (one row: greedy).
int translateText(const BundleSet &set, int threads, const std::map<std::string, std::string> &o) {
  const std::string weights = required(o, "--weights");
  auto src = o.find("--src");
  if (src == o.end() || src->second.empty())
    throw Failure{"--src TEXT is required"};
  if (!set.prefill || !set.decode || !orFail(programOf(*set.prefill)).argument("src"))
    throw Failure{"translate needs an encoder-decoder's forward bundle with its encode and decode "
                  "programs (kiln compile transformer, "
                  "without --train)"};
  const GenerationPair p = loadGeneration(set, threads, weights);
  Generated stats;
  const std::vector<Beam> beams =
      orFail(translate(*p.first, *p.decode, tokenizerOf(o), src->second, beamOptions(o), &stats));
  fmt::print("{}{}\n", beamsText(beams, ""), speedSummary(stats));
  return 0;
}

void info(const Program &p, const std::string &what) {
  fmt::print("{} ({}): ", p.name, what);
  for (MemRegion r : kAllMemRegions)
    fmt::print("{} {} bytes{}", memRegionName(r), p.bytes(r),
               r == MemRegion::Scratch ? "\n" : ", ");
  for (const Symbol &s : p.symbols)
    fmt::print("  {:<6} {} {}[{}]\n", symbolKindName(s.kind), s.name, dtypeName(s.dtype),
               fmt::join(s.shape, ","));
}

} // namespace

int bundleMain(const BundleSet &set, int argc, char **argv) {
  const std::string name = set.main && set.main->name ? set.main->name : "model";
  try {
    const std::string command = argc > 1 ? argv[1] : "";
    const std::vector<std::string> commands = {"train",    "eval",      "forward",
                                               "generate", "translate", "info"};
    if (std::find(commands.begin(), commands.end(), command) == commands.end())
      throw Failure{fmt::format(
          "usage: {0} train --data FILE [--val-fraction F] [--tokenizer FILE] | --task "
          "copy|reverse [--steps N] [--seed S] [--load CKPT] [--save CKPT] [--log-every N] "
          "[--threads N]\n"
          "       {0} eval --weights CKPT --data FILE [--tokenizer FILE] | --task copy|reverse "
          "[--batches N] [--seed S]\n"
          "       {0} forward --weights CKPT --input FILE [--output FILE]\n"
          "       {0} generate --weights CKPT --prompt TEXT [--max-new N] [--temperature T] "
          "[--top-k K] [--top-p P] [--seed S] [--stop TEXT] [--beam N] [--length-penalty A] "
          "[--tokenizer FILE]\n"
          "       {0} translate --weights CKPT --src TEXT [--max-new N] [--length-penalty A] "
          "[--tokenizer FILE]\n"
          "       {0} info",
          name)};
    if (!set.main)
      throw Failure{"the executable holds no program"};
    if (Expected<std::optional<int>> v = ThreadPool::threadsVariable(); !v)
      throw Failure{v.error().message};
    const auto options = parseOptions(argc, argv);
    const int threads =
        static_cast<int>(integer(options, "--threads", ThreadPool::defaultThreads(), 1, 256));
    if (command == "generate")
      return generateText(set, threads, options);
    if (command == "translate")
      return translateText(set, threads, options);
    std::unique_ptr<Executor> exe = orFail(loadBundle(*set.main, threads));
    if (command == "train")
      return train(*exe, options, set);
    if (command == "eval")
      return eval(*exe, options, set);
    if (command == "forward")
      return forward(*exe, options);
    info(exe->program(), exe->program().loss() ? "training step" : "forward");
    if (set.optimizer)
      fmt::print("  optimizer: {}\n", set.optimizer);
    if (set.prefill && set.decode) {
      const Program prefill = orFail(programOf(*set.prefill));
      info(prefill, prefill.argument("src") ? "encode, to translate" : "prefill, to generate");
      info(orFail(programOf(*set.decode)),
           prefill.argument("src") ? "decode, to translate" : "decode, to generate");
    }
    return 0;
  } catch (const Failure &f) {
    std::fprintf(stderr, "%s: error: %s\n", name.c_str(), f.message.c_str());
    return 1;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s: error: %s\n", name.c_str(), e.what());
    return 1;
  }
}

} // namespace kiln::runtime

// The standalone executable's commands (see bundle_main.h).
#include "runtime/bundle_main.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/bundle_loader.h"
#include "runtime/checkpoint.h"
#include "runtime/generation.h"
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
    return {"--data", "--val-fraction", "--task",      "--steps",  "--seed",
            "--load", "--save",         "--log-every", "--threads"};
  if (command == "eval")
    return {"--weights", "--data", "--task", "--batches", "--seed", "--threads"};
  if (command == "forward")
    return {"--weights", "--input", "--output", "--threads"};
  if (command == "generate")
    return {"--weights", "--prompt", "--max-new", "--temperature", "--top-k",
            "--top-p",   "--seed",   "--stop",    "--tokenizer",   "--threads"};
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

// A number in [lo, hi] written plainly (digits and one point: no sign, exponent, inf or nan).
double number(const std::map<std::string, std::string> &o, const std::string &name, double fallback,
              double lo, double hi) {
  auto it = o.find(name);
  if (it == o.end())
    return fallback;
  const std::string &text = it->second;
  const bool plain = !text.empty() && text.find_first_not_of("0123456789.") == std::string::npos &&
                     std::count(text.begin(), text.end(), '.') <= 1 && text != ".";
  const double v = plain ? std::strtod(text.c_str(), nullptr) : -1;
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

std::string readText(const std::string &path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Failure{fmt::format("{}: is a directory, not a text file", path)};
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Failure{fmt::format("{}: cannot open it", path)};
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad())
    throw Failure{fmt::format("{}: read error", path)};
  return text;
}

// What the program trains on, as `kiln train` would: the copy or reverse task (--task) for an
// encoder-decoder ("src" input), else lm or mlm (token_types) windows of the --data text.
struct Task {
  TaskKind kind = TaskKind::Lm;
  TaskShape shape;
  std::string text;
};

Task taskOf(const Program &p, const std::map<std::string, std::string> &o) {
  if (!p.loss())
    throw Failure{"this bundle has no loss: it was compiled for inference (compile it with "
                  "--train)"};
  Task t;
  auto rows = [](const Symbol &s) {
    if (s.shape.size() != 2)
      throw Failure{fmt::format("the \"{}\" input is not [batch, length]", s.name)};
    return s;
  };
  if (const Symbol *src = p.argument("src")) {
    if (o.count("--data"))
      throw Failure{"--data: this encoder-decoder trains on a synthetic task (--task copy | "
                    "reverse), not on text"};
    const std::string name = o.count("--task") ? o.at("--task") : "copy";
    if (name != "copy" && name != "reverse")
      throw Failure{fmt::format("--task {}: expected copy or reverse", name)};
    t.kind = name == "copy" ? TaskKind::Copy : TaskKind::Reverse;
    t.shape = {.batch = rows(*src).shape[0], .srcLen = src->shape[1], .vocab = src->range};
    orFail(checkTask(t.kind, t.shape));
    return t;
  }
  if (o.count("--task"))
    throw Failure{"--task: this model trains on the text of --data"};
  const Symbol *tokens = p.argument("tokens");
  if (!tokens)
    throw Failure{"this program has neither a \"src\" nor a \"tokens\" input to train"};
  t.kind = p.argument("token_types") ? TaskKind::Mlm : TaskKind::Lm;
  t.text = readText(required(o, "--data"));
  t.shape = {.batch = rows(*tokens).shape[0], .seqLen = tokens->shape[1], .vocab = tokens->range};
  orFail(checkTask(t.kind, t.shape, t.text));
  return t;
}

int train(Executor &exe, const std::map<std::string, std::string> &o) {
  const Task task = taskOf(exe.program(), o);
  // As kiln train: the text's last --val-fraction is held out (never trained on).
  // (Its bytes as token ids once, not on every step.)
  const std::vector<int32_t> text =
      byteTokens(splitText(task.text, number(o, "--val-fraction", 0.1, 0, 0.5)).train);
  if (!task.text.empty())
    orFail(checkTask(task.kind, task.shape, text));
  const int64_t steps = integer(o, "--steps", 100, 1, 1'000'000'000);
  const int64_t logEvery = integer(o, "--log-every", 1, 1, 1'000'000'000);
  const uint64_t seed = static_cast<uint64_t>(integer(o, "--seed", 0, 0, INT64_MAX));
  orFail(initWeights(exe, seed));
  Trainer trainer = orFail(Trainer::create(exe));
  if (auto it = o.find("--load"); it != o.end())
    fmt::print("loaded {} tensors from {}\n", orFail(loadCheckpoint(exe, it->second)), it->second);
  const uint64_t first = static_cast<uint64_t>(trainer.stepsDone());
  const auto start = std::chrono::steady_clock::now();
  for (int64_t k = 0; k < steps; ++k) {
    const double loss =
        orFail(trainer.step(makeBatch(task.kind, task.shape, seed, first + k, text)));
    if (!trainer.lastUpdateApplied())
      throw Failure{fmt::format("step {}: the loss ({}) or the gradient norm is not finite; "
                                "stopped, the weights from before it kept",
                                k + 1, loss)};
    if ((k + 1) % logEvery == 0 || k == 0 || k + 1 == steps)
      fmt::print("step {:>5}  loss {:.6f}\n", first + k + 1, loss);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("trained {} steps in {:.2f} s ({:.1f} ms/step)\n", steps, s, 1000 * s / double(steps));
  if (auto it = o.find("--save"); it != o.end()) {
    orFail(saveCheckpoint(exe, it->second));
    fmt::print("saved parameters and optimizer state to {}\n", it->second);
  }
  return 0;
}

// The mean loss over --batches windows; weights restored before each (a training step's program
// updates them as it runs).
int eval(Executor &exe, const std::map<std::string, std::string> &o) {
  const std::string weights = required(o, "--weights");
  const Task task = taskOf(exe.program(), o);
  const int64_t batches = integer(o, "--batches", 10, 1, 1'000'000);
  const uint64_t seed = static_cast<uint64_t>(integer(o, "--seed", 0, 0, INT64_MAX));
  orFail(initWeights(exe, 0));
  orFail(loadCheckpoint(exe, weights));
  std::vector<std::pair<const Symbol *, HostTensor>> kept;
  for (const Symbol &s : exe.program().symbols)
    if (s.isWeight())
      kept.emplace_back(&s, exe.read(s));
  const std::vector<int32_t> tokens = byteTokens(task.text);
  double total = 0;
  for (int64_t k = 0; k < batches; ++k) {
    for (const auto &[s, t] : kept)
      orFail(exe.write(*s, t));
    orFail(
        writeBatch(exe, makeBatch(task.kind, task.shape, seed, static_cast<uint64_t>(k), tokens)));
    orFail(exe.run());
    total += exe.read(*exe.program().loss()).get(0);
  }
  fmt::print("loss {:.6f} (mean of {} batches)\n", total / double(batches), batches);
  return 0;
}

// Token rows from the file's bytes, consecutive windows (wrapping around a short file); every
// value output printed (shape, first values) and written to --output as safetensors.
int forward(Executor &exe, const std::map<std::string, std::string> &o) {
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
  HostTensor t(tokens->dtype, tokens->shape);
  for (int64_t k = 0; k < t.numElements(); ++k)
    t.setInt(k, static_cast<unsigned char>(text[static_cast<size_t>(k) % text.size()]));
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

// The prompt continued as kiln generate does (runtime/generation.h), in the first batch row of a
// forward bundle; --top-k 1 is greedy.
int generateText(Executor &exe, const std::map<std::string, std::string> &o) {
  const std::string weights = required(o, "--weights");
  auto prompt = o.find("--prompt");
  if (prompt == o.end() || prompt->second.empty())
    throw Failure{"--prompt TEXT is required"};
  orFail(initWeights(exe, 0));
  orFail(loadCheckpoint(exe, weights));
  const Tokenizer tokenizer =
      o.count("--tokenizer") ? orFail(Tokenizer::load(o.at("--tokenizer"))) : Tokenizer::bytes();
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
  const Generated out = orFail(generate(exe, tokenizer, {prompt->second}, g));
  fmt::print("{}{}\n", prompt->second, out.continuations[0]);
  fmt::print("{}\n", speedSummary(out));
  return 0;
}

void info(const Program &p) {
  fmt::print("{}: ", p.name);
  for (MemRegion r : kAllMemRegions)
    fmt::print("{} {} bytes{}", memRegionName(r), p.bytes(r),
               r == MemRegion::Scratch ? "\n" : ", ");
  for (const Symbol &s : p.symbols)
    fmt::print("  {:<6} {} {}[{}]\n", symbolKindName(s.kind), s.name, dtypeName(s.dtype),
               fmt::join(s.shape, ","));
}

} // namespace

int bundleMain(const kiln_bundle &bundle, int argc, char **argv) {
  const std::string name = bundle.name ? bundle.name : "model";
  try {
    const std::string command = argc > 1 ? argv[1] : "";
    if (command != "train" && command != "eval" && command != "forward" && command != "generate" &&
        command != "info")
      throw Failure{"usage: " + name +
                    " train --data FILE [--val-fraction F] | --task copy|reverse [--steps N] "
                    "[--seed S] [--load CKPT] [--save CKPT] [--log-every N] [--threads N]\n"
                    "       " +
                    name +
                    " eval --weights CKPT --data FILE | --task copy|reverse [--batches N] [--seed "
                    "S]\n       " +
                    name + " forward --weights CKPT --input FILE [--output FILE]\n       " + name +
                    " generate --weights CKPT --prompt TEXT [--max-new N] [--temperature T] "
                    "[--top-k K] [--top-p P] [--seed S] [--stop TEXT] [--tokenizer FILE]\n"
                    "       " +
                    name + " info"};
    const auto options = parseOptions(argc, argv);
    const int threads =
        static_cast<int>(integer(options, "--threads", ThreadPool::hardwareThreads(), 1, 256));
    std::unique_ptr<Executor> exe = orFail(loadBundle(bundle, threads));
    if (command == "train")
      return train(*exe, options);
    if (command == "eval")
      return eval(*exe, options);
    if (command == "forward")
      return forward(*exe, options);
    if (command == "generate")
      return generateText(*exe, options);
    info(exe->program());
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

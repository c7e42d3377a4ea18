// The standalone executable's command line (see bundle_args.h).
#include "runtime/bundle_args.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <ranges>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln::runtime {

namespace {

using Kind = BundleOption::Kind;

constexpr int64_t kMaxSteps = 1'000'000'000;

BundleOption integer(std::string_view name, int64_t min, int64_t max, std::string_view fallback,
                     std::string_view help) {
  return {name, Kind::Integer, 0, 0, false, min, max, fallback, help};
}
BundleOption number(std::string_view name, double lo, double hi, std::string_view fallback,
                    std::string_view help) {
  return {name, Kind::Number, lo, hi, false, 0, 0, fallback, help};
}
// A number in (lo, hi]: above lo (a temperature, a probability mass).
BundleOption numberAbove(std::string_view name, double lo, double hi, std::string_view fallback,
                         std::string_view help) {
  return {name, Kind::Number, lo, hi, true, 0, 0, fallback, help};
}
BundleOption text(std::string_view name, std::string_view fallback, std::string_view help) {
  return {name, Kind::Text, 0, 0, false, 0, 0, fallback, help};
}
BundleOption file(std::string_view name, std::string_view fallback, std::string_view help) {
  return {name, Kind::File, 0, 0, false, 0, 0, fallback, help};
}
// The option `o`, which may be given more than once.
BundleOption repeated(BundleOption o) {
  o.repeated = true;
  return o;
}

const BundleOption kThreads =
    integer("--threads", 0, 8, "0: KILN_THREADS, else every core, at most 8", "worker threads");
// --seed, of what it seeds.
BundleOption seedOf(std::string_view what, std::string_view fallback = "0") {
  return {.name = "--seed", .kind = Kind::Seed, .fallback = fallback, .help = what};
}
const BundleOption kTokenizer = file("--tokenizer", "the checkpoint's, else bytes",
                                     "a tokenizer.json (Hugging Face's BPE; kiln tokenizer train)");
const BundleOption kWeights = file("--weights", "", "the checkpoint to run (required)");
const BundleOption kMaxNew = integer("--max-new", 1, 1'000'000, "64", "tokens to generate at most");
// (generate samples without it, translate decodes greedily)
BundleOption beam(std::string_view fallback) {
  return integer("--beam", 1, 256, fallback,
                 "beam search of N beams, N the bundle's rows (kiln compile --gen-batch N)");
}
const BundleOption kPenalty =
    number("--length-penalty", -10, 10, "1", "beam search: scores are log p / length^A");

} // namespace

const std::vector<BundleCommand> &bundleCommands() {
  static const std::vector<BundleCommand> commands = {
      {"train",
       "--data FILE | --task copy|reverse [options]",
       "train the bundle's training step on a text file (or an encoder-decoder's task)",
       {file("--data", "", "the text (an encoder-decoder's: source<TAB>target lines)"),
        number("--val-fraction", 0, 0.5, "0.1", "the text's tail held out for --eval-every"),
        kTokenizer,
        text("--task", "--load's task, else copy",
             "an encoder-decoder without --data: copy | reverse"),
        integer("--steps", 1, kMaxSteps, "100, or up to the schedule's end",
                "training steps (after --load: more)"),
        seedOf("seed of the batches (and of fresh weights), an integer in [0, 2^64)",
               "the one kiln compile was given (--seed), else 0"),
        file("--load", "", "resume from this checkpoint"),
        file("--save", "", "write parameters and optimizer state here (also on Ctrl-C)"),
        integer("--log-every", 1, kMaxSteps, "every step, or a progress bar on a terminal",
                "print the loss every N steps"),
        integer("--eval-every", 0, kMaxSteps, "never",
                "print the validation loss every N steps and after the last"),
        integer("--eval-batches", 1, 10000, "8", "validation batches per evaluation"),
        integer("--save-every", 0, kMaxSteps, "only --save",
                "also save STEM.stepK.safetensors (beside --save STEM.safetensors; NAME.stepK "
                "beside another NAME) every N steps, keeping the two latest"),
        text("--on-nan", "stop",
             "a step whose loss or gradient norm is not finite: stop (saving the weights from "
             "before it to --save) | skip"),
        kThreads}},
      {"eval",
       "--weights CKPT --data FILE | --task copy|reverse [options]",
       "the mean loss of a checkpoint on the text train validates on (or a task's batches)",
       {kWeights, file("--data", "", "the text"),
        number("--val-fraction", 0, 0.5, "0.1",
               "the text's tail scored, as train --eval-every holds it out; 0: the whole text"),
        kTokenizer,
        text("--task", "the checkpoint's task, else copy",
             "an encoder-decoder without --data: copy | reverse"),
        integer("--batches", 1, 1'000'000, "8", "batches to average (train's --eval-batches)"),
        seedOf("seed of the batches, an integer in [0, 2^64)",
               "the one kiln compile was given (--seed), else 0"),
        kThreads}},
      {"forward",
       "--weights CKPT --input FILE [--output FILE]",
       "run the forward pass on a file's bytes; print and save the outputs",
       {kWeights, file("--input", "", "the bytes fed as token ids (required)"),
        file("--output", "", "write the outputs here (safetensors)"), kThreads}},
      {"generate",
       "--weights CKPT --prompt TEXT [options]",
       "continue a prompt (a decoder's forward bundle)",
       {kWeights,
        repeated(text("--prompt", "",
                      "the text to continue (required; again for more prompts at once, up to "
                      "the bundle's rows: kiln compile --gen-batch N)")),
        kMaxNew,
        numberAbove("--temperature", 0, 1e6, "1", "sampling temperature (--top-k 1 is greedy)"),
        integer("--top-k", 0, 1'000'000'000, "all", "sample from the K likeliest tokens"),
        numberAbove("--top-p", 0, 1, "1", "sample from the likeliest tokens of mass P"),
        seedOf("seed of the sampling, an integer in [0, 2^64)"),
        text("--stop", "", "stop after this text"), beam("none: sampling"), kPenalty, kTokenizer,
        kThreads}},
      {"translate",
       "--weights CKPT --src TEXT [options]",
       "translate a source (an encoder-decoder's forward bundle)",
       {kWeights, text("--src", "", "the source text (required)"), kMaxNew, beam("none: greedy"),
        kPenalty, kTokenizer, kThreads}},
      {"info",
       "",
       "the programs, their memory and tensors, and a training step's optimizer",
       {kThreads}},
  };
  return commands;
}

namespace {

const BundleCommand *findCommand(std::string_view name) {
  for (const BundleCommand &c : bundleCommands())
    if (c.name == name)
      return &c;
  return nullptr;
}

std::string range(const BundleOption &o) {
  return o.kind == Kind::Integer ? fmt::format("[{}, {}]", o.min, o.max)
                                 : fmt::format("{}{}, {}]", o.openLo ? "(" : "[", o.lo, o.hi);
}

// The value checked as its option's kind says; the error names the option.
Status check(const BundleOption &o, std::string_view value) {
  switch (o.kind) {
  case Kind::Integer: {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size() || v < o.min ||
        v > o.max)
      return makeError("{} {}: expected an integer in {}", o.name, value, range(o));
    return {};
  }
  case Kind::Seed: {
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size())
      return makeError("{} {}: expected an integer in [0, 2^64)", o.name, value);
    return {};
  }
  case Kind::Number: {
    double v = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size() ||
        !std::isfinite(v) || v < o.lo || (o.openLo && v == o.lo) || v > o.hi)
      return makeError("{} {}: expected a number in {}", o.name, value, range(o));
    return {};
  }
  case Kind::Text:
    if (value.empty())
      return makeError("{}: expected a text", o.name);
    return {};
  case Kind::File:
    if (value.empty())
      return makeError("{}: expected a file name", o.name);
    return {};
  }
  return {};
}

} // namespace

std::optional<std::string> BundleArgs::text(std::string_view name) const {
  auto it = given.find(name);
  return it == given.end() ? std::nullopt : std::optional(it->second);
}

std::vector<std::string> BundleArgs::texts(std::string_view name) const {
  auto it = repeated.find(name);
  return it == repeated.end() ? std::vector<std::string>() : it->second;
}

namespace {

// A value parse checked (whole, in range): read back as T.
template <class T> T checkedValue(const BundleArgs &a, std::string_view name, T fallback) {
  auto it = a.given.find(name);
  if (it == a.given.end())
    return fallback;
  T v{};
  std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  return v;
}

} // namespace

int64_t BundleArgs::integer(std::string_view name, int64_t fallback) const {
  return checkedValue(*this, name, fallback);
}

uint64_t BundleArgs::seed(std::string_view name) const {
  return checkedValue(*this, name, uint64_t{0});
}

double BundleArgs::number(std::string_view name, double fallback) const {
  return checkedValue(*this, name, fallback);
}

Expected<BundleArgs> parseBundleArgs(std::span<const std::string> args,
                                     std::span<const std::string_view> offered) {
  auto isHelp = [](std::string_view a) { return a == "--help" || a == "-h"; };
  auto names = [](const auto &items, auto member) {
    return fmt::format("{}", fmt::join(items | std::views::transform(member), ", "));
  };
  // The commands this executable runs, else every command.
  const std::string commands = offered.empty() ? names(bundleCommands(), &BundleCommand::name)
                                               : fmt::format("{}", fmt::join(offered, ", "));
  BundleArgs out;
  if (args.empty() || isHelp(args[0])) {
    out.help = !args.empty();
    if (out.help) { // (--help train: train's)
      if (args.size() > 1 && findCommand(args[1]))
        out.command = args[1];
      return out;
    }
    return makeError("expected a command: {}", commands);
  }
  const BundleCommand *command = findCommand(args[0]);
  if (!command)
    return makeError("unknown command '{}' (expected {}; --help shows them)", args[0], commands);
  out.command = command->name;
  for (size_t i = 1; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (isHelp(arg)) {
      out.help = true;
      return out;
    }
    std::string_view name = arg, value;
    const size_t eq = arg.find('=');
    const bool joined = arg.starts_with("--") && eq != std::string_view::npos;
    if (joined)
      name = arg.substr(0, eq), value = arg.substr(eq + 1);
    auto option = std::find_if(command->options.begin(), command->options.end(),
                               [&](const BundleOption &o) { return o.name == name; });
    if (option == command->options.end())
      return makeError("{} takes no option '{}' (it takes {})", command->name, name,
                       names(command->options, &BundleOption::name));
    if (!joined) {
      // The next argument is the value, unless it is another option (a value that starts with
      // "--" is written --option=--text).
      if (i + 1 >= args.size() || std::string_view(args[i + 1]).starts_with("--"))
        return makeError("{} needs a value (one that starts with -- is written {}=--text)", name,
                         name);
      value = args[++i];
    }
    if (Status s = check(*option, value); !s)
      return s.error();
    if (option->repeated)
      out.repeated[std::string(name)].emplace_back(value);
    if (!out.given.emplace(std::string(name), std::string(value)).second && !option->repeated)
      return makeError("{} is given twice", name);
  }
  return out;
}

std::string bundleHelp(std::string_view name, std::string_view only,
                       std::span<const std::string_view> offered) {
  auto isOffered = [&](std::string_view c) {
    return offered.empty() || std::find(offered.begin(), offered.end(), c) != offered.end();
  };
  if (!isOffered(only))
    only = {};
  std::string out;
  for (const BundleCommand &c : bundleCommands()) {
    if ((!only.empty() && c.name != only) || !isOffered(c.name))
      continue;
    out += fmt::format("{} {}{}{}\n  {}\n", name, c.name, c.args.empty() ? "" : " ", c.args,
                       c.summary);
    for (const BundleOption &o : c.options) {
      std::string what = o.kind == Kind::Integer || o.kind == Kind::Seed ? "N"
                         : o.kind == Kind::Number                        ? "X"
                         : o.kind == Kind::Text                          ? "TEXT"
                                                                         : "FILE";
      std::string limits =
          o.kind == Kind::Integer || o.kind == Kind::Number ? fmt::format(" in {}", range(o)) : "";
      out += fmt::format("    {:<22} {}{}{}\n", fmt::format("{} {}", o.name, what), o.help, limits,
                         o.fallback.empty() ? "" : fmt::format(" (default: {})", o.fallback));
    }
  }
  if (only.empty())
    out += fmt::format("{} COMMAND --help: one command's options. Options take a value as "
                       "--option VALUE or --option=VALUE.\n",
                       name);
  return out;
}

} // namespace kiln::runtime

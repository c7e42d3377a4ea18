// The standalone executable's command line (runtime/bundle_main.h), read with kiln's conventions:
// `NAME COMMAND --option value` or `--option=value`, each option at most once, numbers strictly
// (the whole text, finite, in range), texts and file names not empty, and --help (or -h) anywhere
// asks for the help instead (exit 0). One table of commands and their options makes both the
// checks and the help text, defaults included, so the two cannot disagree. Every value is
// checked here, before any work: a command reads them back through the typed getters.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace kiln::runtime {

struct BundleOption {
  enum class Kind : uint8_t { Integer, Seed, Number, Text, File }; // Seed: [0, 2^64), as kiln's
  std::string_view name;                                           // "--steps"
  Kind kind;
  double lo = 0, hi = 0;     // Number: the range, hi included, lo unless openLo
  bool openLo = false;       // Number: values must be above lo
  int64_t min = 0, max = 0;  // Integer: the range, both ends included
  std::string_view fallback; // what it is when left off ("" : nothing, or required)
  std::string_view help;
  bool repeated = false; // may be given again (--prompt A --prompt B): texts() has every value
};

struct BundleCommand {
  std::string_view name, args, summary; // "train", "--data FILE ...", one line
  std::vector<BundleOption> options;
};

// The commands in the order --help lists them.
const std::vector<BundleCommand> &bundleCommands();

struct BundleArgs {
  std::string command; // empty with help and no command
  bool help = false;
  std::map<std::string, std::string, std::less<>> given; // option -> its checked (first) value
  std::map<std::string, std::vector<std::string>, std::less<>> repeated; // a repeated option's

  bool has(std::string_view name) const { return given.count(name) > 0; }
  std::optional<std::string> text(std::string_view name) const;
  std::vector<std::string> texts(std::string_view name) const; // a repeated option's values
  int64_t integer(std::string_view name, int64_t fallback) const;
  uint64_t seed(std::string_view name) const; // 0 if not given
  double number(std::string_view name, double fallback) const;
};

// `args` are argv[1..]. Errors name the option and what was expected, or the command, and list
// the commands `offered` (the ones this executable runs; empty: every command).
Expected<BundleArgs> parseBundleArgs(std::span<const std::string> args,
                                     std::span<const std::string_view> offered = {});

// The help of every command, or of one, for the program `name`: of those in `offered` (the ones
// its bundles can run; empty: all). A command it cannot run asked for: the help of those it can.
std::string bundleHelp(std::string_view name, std::string_view command = {},
                       std::span<const std::string_view> offered = {});

} // namespace kiln::runtime

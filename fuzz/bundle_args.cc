// Fuzz target: the standalone executable's command line (runtime/bundle_args.h). The input is the
// arguments, separated by NUL bytes. They parse or are an error, never a crash; what parses reads
// back through the typed getters within each option's range, and written out again as
// --option=value it parses to the same options; the help of its command is made.
#include <string>
#include <vector>

#include "fuzz/fuzz.h"
#include "runtime/bundle_args.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace kiln::runtime;
  const std::string_view in = kiln::fuzz::text(data, size);
  std::vector<std::string> args;
  for (size_t from = 0; from <= in.size();) {
    const size_t end = std::min(in.find('\0', from), in.size());
    args.emplace_back(in.substr(from, end - from));
    from = end + 1;
  }
  if (in.empty())
    args.clear();
  kiln::Expected<BundleArgs> parsed = parseBundleArgs(args);
  if (!parsed)
    return 0;
  if (parsed->help) {
    (void)bundleHelp("model", parsed->command);
    return 0;
  }
  std::vector<std::string> again = {parsed->command};
  for (const BundleCommand &c : bundleCommands()) {
    if (c.name != parsed->command)
      continue;
    for (const BundleOption &o : c.options) {
      if (!parsed->has(o.name))
        continue;
      const int64_t i = parsed->integer(o.name, 0);
      const double x = parsed->number(o.name, 0);
      if ((o.kind == BundleOption::Kind::Integer && (i < o.min || i > o.max)) ||
          (o.kind == BundleOption::Kind::Number && (x < o.lo || x > o.hi)))
        kiln::fuzz::fail("a value read back outside its option's range", std::string(o.name));
      again.push_back(std::string(o.name) + "=" + *parsed->text(o.name));
    }
  }
  kiln::Expected<BundleArgs> reparsed = parseBundleArgs(again);
  if (!reparsed || reparsed->given != parsed->given)
    kiln::fuzz::fail("the options written as --option=value do not parse back", std::string(in));
  return 0;
}

// Fuzz target: IR text (kiln verify/opt/run --ir read it from users). Whatever the bytes, the
// parser returns a graph or diagnostics, never crashes; a graph that parses (and so verifies)
// prints to text that parses again and prints the same: print . parse is a fixed point.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz.h"
#include "ir/parser.h"
#include "ir/printer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace kiln;
  ir::ParseResult r = ir::parseGraph(kiln::fuzz::text(data, size));
  if (!r.graph)
    return 0;
  const std::string printed = ir::print(*r.graph);
  ir::ParseResult again = ir::parseGraph(printed);
  if (!again.graph)
    kiln::fuzz::fail("the printed graph does not parse: " + again.errors.front().message, printed);
  if (ir::print(*again.graph) != printed)
    kiln::fuzz::fail("print(parse(print(g))) differs from print(g)", printed);
  return 0;
}

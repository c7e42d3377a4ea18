// Fuzz target: the pass pipeline (kiln opt) on any graph that parses. The pipelines either
// report an error or return a graph that verifies: a pass that crashes, hangs or produces an
// invalid graph is a bug. Graphs with a loss also go through autodiff and the training step.
#include <string>

#include "fuzz/fuzz.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/stages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace kiln;
  ir::ParseResult r = ir::parseGraph(kiln::fuzz::text(data, size));
  if (!r.graph || !kiln::fuzz::smallEnough(*r.graph))
    return 0;
  bool hasLoss = false;
  for (const ir::Output &o : r.graph->outputs())
    hasLoss |= o.role == ir::OutputRole::Loss;
  for (const char *spec : {"cleanup", "default,lower", "default,autodiff,cleanup,lower"}) {
    if (!hasLoss && std::string(spec).find("autodiff") != std::string::npos)
      continue;
    Expected<ir::Graph> g = passes::runPipeline(*r.graph, spec);
    if (!g)
      continue;
    if (std::vector<Error> errors = ir::verify(*g); !errors.empty())
      kiln::fuzz::fail(std::string(spec) +
                           " made a graph that does not verify: " + errors.front().message,
                       ir::print(*r.graph));
  }
  return 0;
}

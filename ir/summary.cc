// Graph statistics and the one-screen summary.
#include "ir/summary.h"

#include <vector>

#include <fmt/format.h>

#include "support/bytes_string.h"

namespace kiln::ir {

GraphStats statsOf(const Graph &g) {
  GraphStats s;
  s.nodes = static_cast<int64_t>(g.nodes().size());
  for (const Node &n : g.nodes())
    ++s.opCounts[static_cast<int>(n.op)];
  for (const Arg &a : g.args()) {
    if (a.kind != Arg::Kind::Param)
      continue;
    ++s.params;
    s.paramElements += g.type(a.value).numElements();
    s.paramBytes += g.type(a.value).bytes();
  }
  return s;
}

std::string summary(const Graph &g) {
  GraphStats s = statsOf(g);
  std::string out = fmt::format("graph @{}: {} nodes\n", g.name(), s.nodes);
  for (const Arg &a : g.args())
    if (a.kind == Arg::Kind::Input)
      out += fmt::format("  input  {:<14} {}{}\n", a.name, typeString(g.type(a.value)),
                         a.range ? fmt::format("  values in [0, {})", a.range) : "");
  out += fmt::format("  params {} tensors, {} scalars, {}\n", s.params, s.paramElements,
                     bytesString(s.paramBytes));
  for (const Output &o : g.outputs())
    out += fmt::format("  output {:<14} {}\n", o.name, typeString(g.type(o.value)));
  std::string ops;
  for (int k = 0; k < kNumOps; ++k)
    if (s.opCounts[k])
      ops += fmt::format("{}{} {}", ops.empty() ? "" : ", ", mnemonic(OpKind(k)), s.opCounts[k]);
  out += fmt::format("  ops    {}\n", ops);
  // What the regions hold, by op: the work a backend runs as fused loop nests.
  std::vector<int64_t> inside(kNumOps, 0);
  int64_t regions = 0;
  for (const Node &n : g.nodes())
    for (const AttrValue &v : n.attrs.values())
      if (const Region *r = std::get_if<Region>(&v); r && r->graph) {
        ++regions;
        for (const Node &b : r->graph->nodes())
          ++inside[static_cast<int>(b.op)];
      }
  if (regions > 0) {
    std::string held;
    for (int k = 0; k < kNumOps; ++k)
      if (inside[k] && OpKind(k) != OpKind::Constant)
        held += fmt::format("{}{} {}", held.empty() ? "" : ", ", mnemonic(OpKind(k)), inside[k]);
    out += fmt::format("  in {} regions: {}\n", regions, held);
  }
  return out;
}

} // namespace kiln::ir

// Common subexpression elimination:
//   a = op(x, y){attrs} ... b = op(x, y){attrs}  =>  b's uses read a
// A plain walk in node order: a node equal to an earlier one (same op, same operands after the
// earlier merges, same attributes) is replaced by it. IR ops are pure functions of operands and
// attributes, dropout included (its mask is a function of its seed), so equal nodes compute equal
// values; two dropouts with different seeds differ in an attribute and stay apart. The earlier
// node is kept, with its location. Commutative ops (OpInfo::commutative) match with their
// operands swapped.
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "passes/passes.h"

namespace kiln::passes {
namespace {

// Everything that makes two nodes compute the same thing, as one string: op, operands,
// attributes (their text form is exact: floats print in their shortest round-trip form).
std::string keyOf(const ir::Node &n) {
  std::vector<ir::ValueId> operands = n.operands;
  if (ir::opInfo(n.op).commutative && operands.size() == 2 && operands[1] < operands[0])
    std::swap(operands[0], operands[1]);
  std::string key = fmt::format("{}(", static_cast<int>(n.op));
  for (ir::ValueId v : operands)
    key += fmt::format("{},", v);
  key += "){";
  for (const ir::AttrValue &a : n.attrs.values())
    key += ir::attrValueString(a) + ";";
  // Result count too: ops with optional results (set by attributes) are covered by the attrs, but
  // a node written by hand could differ here alone.
  return key + fmt::format("}}{}", n.results.size());
}

} // namespace

Expected<bool> runCse(ir::Graph &g, PassStats &stats) {
  // repl[v]: the value v's uses read instead (v itself if not merged). Nodes are visited in
  // topological order, so a node's operands are final when it is reached.
  std::vector<ir::ValueId> repl(g.numValues());
  for (ir::ValueId v = 0; v < g.numValues(); ++v)
    repl[v] = v;
  std::unordered_map<std::string, ir::NodeId> seen; // lookups only: order cannot leak out
  int64_t merged = 0;
  for (ir::NodeId id = 0; id < static_cast<ir::NodeId>(g.nodes().size()); ++id) {
    ir::Node &n = g.node(id);
    for (ir::ValueId &v : n.operands)
      v = repl[v];
    auto [it, inserted] = seen.try_emplace(keyOf(n), id);
    if (inserted)
      continue;
    const ir::Node &first = g.node(it->second);
    for (size_t r = 0; r < n.results.size(); ++r)
      repl[n.results[r]] = first.results[r];
    g.eraseNode(id, it->second);
    ++merged;
  }
  if (merged == 0)
    return false;
  std::vector<ir::Output> outputs(g.outputs().begin(), g.outputs().end());
  for (ir::Output &o : outputs)
    o.value = repl[o.value];
  g.setOutputs(std::move(outputs));
  stats.count("merged {} nodes", merged);
  g.compact();
  return true;
}

} // namespace kiln::passes

// Program descriptions from planned graphs (see program.h).
#include "codegen/common/program.h"

#include <algorithm>
#include <cassert>

#include "ir/op.h"
#include "passes/memory_plan.h"

namespace kiln::codegen {
using namespace kiln::ir;
using runtime::Symbol;

runtime::Program programOf(const Graph &g) {
  assert(g.memoryPlan() && "programOf needs a planned graph");
  const MemoryPlan &plan = *g.memoryPlan();
  runtime::Program p;
  p.name = g.name();
  p.regionBytes = plan.regionBytes;
  for (const Node &n : g.nodes())
    if (!n.erased && opInfo(n.op).collective)
      p.ranks = std::max(p.ranks, n.attrs.getInt("ranks"));
  auto placed = [&](Symbol s, ValueId v) {
    const MemorySlot &slot = plan.slots[v];
    const Type &t = g.type(v);
    s.dtype = t.dtype;
    s.shape = t.shape;
    s.region = slot.region;
    s.offset = slot.offset;
    s.bytes = slot.bytes;
    p.symbols.push_back(std::move(s));
  };
  for (const Arg &a : g.args()) {
    Symbol s;
    s.name = a.name;
    s.kind = a.kind == Arg::Kind::Input   ? Symbol::Kind::Input
             : a.kind == Arg::Kind::Param ? Symbol::Kind::Param
                                          : Symbol::Kind::State;
    s.init = a.init;
    s.domain = a.domain;
    s.range = a.range;
    placed(std::move(s), a.value);
  }
  for (const Output &o : g.outputs()) {
    Symbol s;
    s.name = o.name;
    s.kind = Symbol::Kind::Output;
    s.role = o.role == OutputRole::Loss       ? Symbol::Role::Loss
             : o.role == OutputRole::Gradient ? Symbol::Role::Gradient
             : o.role == OutputRole::Update   ? Symbol::Role::Update
                                              : Symbol::Role::Value;
    s.of = o.arg; // arguments come first: an argument's index is its symbol's
    placed(std::move(s), o.value);
  }
  return p;
}

Graph withMemoryPlan(Graph g) {
  if (g.memoryPlan())
    return g;
  g.compact();
  g.setMemoryPlan(passes::planMemory(g));
  return g;
}

} // namespace kiln::codegen

// The fusion passes' index of uses (see use_index.h).
#include "passes/use_index.h"

#include <algorithm>

namespace kiln::passes {
using namespace kiln::ir;

namespace {

// A node's rank is kLevel times its depth (longest path from the arguments) in the graph the pass
// started from; a node the pass appends ranks one above its highest operand. The room between
// levels keeps the glue a rewrite emits (reshapes, casts, the fused op) below the nodes that then
// read it, so redirecting their uses rarely breaks the order.
constexpr int64_t kLevel = int64_t{1} << 16;

} // namespace

UseIndex::UseIndex(Graph &g) : g_(g) {
  outputUses_.assign(g.numValues(), 0);
  for (const Output &o : g.outputs())
    ++outputUses_[o.value];
  sync();
  // The graph's own nodes by depth; a node before one of its operands' (not compacted) has none.
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()); ++id) {
    int64_t depth = 1;
    for (ValueId v : g.node(id).operands)
      if (NodeId d = g.value(v).def; d != kNone) {
        ordered_ = ordered_ && d < id;
        depth = std::max(depth, d < id ? rank_[d] / kLevel + 1 : depth);
      }
    rank_[id] = depth * kLevel;
  }
}

void UseIndex::sync() {
  auto count = static_cast<NodeId>(g_.nodes().size());
  if (synced_ == count)
    return;
  size_t values = static_cast<size_t>(g_.numValues());
  users_.resize(values);
  liveUses_.resize(values, 0);
  outputUses_.resize(values, 0);
  seen_.resize(values, 0);
  rank_.resize(count, 0);
  for (NodeId id = synced_; id < count; ++id) {
    int64_t rank = 0;
    for (ValueId v : g_.node(id).operands) {
      users_[v].push_back(id);
      liveUses_[v] += !g_.node(id).erased;
      if (NodeId d = g_.value(v).def; d != kNone && d < id)
        rank = std::max(rank, rank_[d] + 1);
    }
    rank_[id] = rank;
  }
  synced_ = count;
}

void UseIndex::dropErased(ValueId v) {
  std::erase_if(users_[v], [&](NodeId u) { return g_.node(u).erased; });
}

std::span<const NodeId> UseIndex::users(ValueId v) {
  sync();
  dropErased(v);
  return users_[v];
}

// Counted, not filtered from users_: a value many nodes read (a shared mask or constant) would
// cost its whole user list each time a rewrite looks at it.
int32_t UseIndex::useCount(ValueId v) {
  sync();
  return liveUses_[v] + outputUses_[v];
}

bool UseIndex::isOutput(ValueId v) {
  sync();
  return outputUses_[v] > 0;
}

void UseIndex::replaceAllUses(ValueId from, ValueId to) {
  sync();
  if (from == to)
    return;
  dropErased(from);
  NodeId def = g_.value(to).def;
  for (size_t i = 0; i < users_[from].size(); ++i) {
    NodeId u = users_[from][i];
    if (i > 0 && users_[from][i - 1] == u)
      continue; // read twice: both operands were rewritten at the first
    for (ValueId &v : g_.node(u).operands)
      if (v == from)
        v = to;
    if (def != kNone && rank_[def] >= rank_[u])
      ordered_ = false;
  }
  std::vector<NodeId> merged;
  merged.reserve(users_[from].size() + users_[to].size());
  std::merge(users_[from].begin(), users_[from].end(), users_[to].begin(), users_[to].end(),
             std::back_inserter(merged));
  users_[to] = std::move(merged);
  users_[from].clear();
  liveUses_[to] += liveUses_[from];
  liveUses_[from] = 0;
  if (outputUses_[from] > 0) {
    std::vector<Output> outputs(g_.outputs().begin(), g_.outputs().end());
    for (Output &o : outputs)
      if (o.value == from)
        o.value = to;
    g_.setOutputs(std::move(outputs));
    outputUses_[to] += outputUses_[from];
    outputUses_[from] = 0;
  }
  g_.dropMemoryPlan();
}

void UseIndex::eraseDead(std::span<const NodeId> seeds) {
  sync();
  std::vector<NodeId> work(seeds.begin(), seeds.end());
  while (!work.empty()) {
    NodeId id = work.back();
    work.pop_back();
    if (g_.node(id).erased)
      continue;
    bool used = false;
    for (ValueId r : g_.node(id).results)
      used = used || useCount(r) > 0;
    if (used)
      continue;
    g_.eraseNode(id);
    for (ValueId o : g_.node(id).operands) {
      --liveUses_[o];
      if (NodeId d = g_.value(o).def; d != kNone)
        work.push_back(d);
    }
  }
}

bool UseIndex::dependsOn(ValueId from, ValueId target) {
  sync();
  if (++stamp_ == 0) { // wrapped: clear the marks once
    std::fill(seen_.begin(), seen_.end(), 0);
    stamp_ = 1;
  }
  // Nothing ranked at or below target's node is computed from it.
  NodeId targetDef = g_.value(target).def;
  int64_t floor = ordered_ && targetDef != kNone ? rank_[targetDef] : -1;
  std::vector<ValueId> stack{from};
  while (!stack.empty()) {
    ValueId v = stack.back();
    stack.pop_back();
    if (v == target)
      return true;
    if (seen_[v] == stamp_)
      continue;
    seen_[v] = stamp_;
    NodeId d = g_.value(v).def;
    if (d == kNone || g_.node(d).erased || rank_[d] <= floor)
      continue;
    for (ValueId o : g_.node(d).operands)
      stack.push_back(o);
  }
  return false;
}

} // namespace kiln::passes

// Common subexpression elimination:
//   a = op(x, y){attrs} ... b = op(x, y){attrs}  =>  b's uses read a
// A plain walk in node order: a node equal to an earlier one (same op, same operands after the
// earlier merges, same attributes) is replaced by it. IR ops are pure functions of operands and
// attributes, dropout included (its mask is a function of its seed and its step operand), so equal
// nodes compute equal values; two dropouts with different seeds differ in an attribute and stay
// apart. The earlier node is kept, with its location. Commutative ops (OpInfo::commutative) match
// with their operands swapped.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <variant>
#include <vector>

#include "passes/passes.h"

namespace kiln::passes {
namespace {

// Two nodes compute the same thing when they have the same op, operands (commutative ops in
// either order), result count and attributes, compared as their text forms would be (floats
// print in their shortest round-trip form, so bit for bit, but every NaN as "nan"; a region's
// body as its text). Compared in place, field by field: no key is built per node.
struct SameNode {
  const ir::Graph *g;

  // Operand i, a commutative binary op's operands taken in ascending order.
  static ir::ValueId operand(const ir::Node &n, size_t i) {
    if (ir::opInfo(n.op).commutative && n.operands.size() == 2)
      return i == 0 ? std::min(n.operands[0], n.operands[1])
                    : std::max(n.operands[0], n.operands[1]);
    return n.operands[i];
  }
  static uint64_t floatBits(double d) {
    double canonical = std::isnan(d) ? std::numeric_limits<double>::quiet_NaN() : d;
    uint64_t bits;
    std::memcpy(&bits, &canonical, sizeof bits);
    return bits;
  }
  static bool sameAttr(const ir::AttrValue &x, const ir::AttrValue &y) {
    if (x.index() != y.index())
      return false;
    if (const double *d = std::get_if<double>(&x))
      return floatBits(*d) == floatBits(std::get<double>(y));
    if (const ir::Region *r = std::get_if<ir::Region>(&x))
      return *r == std::get<ir::Region>(y); // their bodies print the same
    return x == y;
  }

  bool operator()(ir::NodeId a, ir::NodeId b) const {
    const ir::Node &x = g->node(a), &y = g->node(b);
    if (x.op != y.op || x.operands.size() != y.operands.size() ||
        x.results.size() != y.results.size() || x.attrs.values().size() != y.attrs.values().size())
      return false;
    for (size_t i = 0; i < x.operands.size(); ++i)
      if (operand(x, i) != operand(y, i))
        return false;
    for (size_t i = 0; i < x.attrs.values().size(); ++i)
      if (!sameAttr(x.attrs.values()[i], y.attrs.values()[i]))
        return false;
    return true;
  }
};

// A hash of what SameNode compares (region bodies left out: they only ever decide between nodes
// equal in everything else).
struct NodeHash {
  const ir::Graph *g;

  static void mix(uint64_t &h, uint64_t x) { h = (h ^ x) * 0x100000001b3ull; }

  uint64_t operator()(ir::NodeId id) const {
    const ir::Node &n = g->node(id);
    uint64_t h = 0xcbf29ce484222325ull;
    mix(h, static_cast<uint64_t>(n.op));
    mix(h, n.results.size());
    for (size_t i = 0; i < n.operands.size(); ++i)
      mix(h, static_cast<uint32_t>(SameNode::operand(n, i)));
    for (const ir::AttrValue &a : n.attrs.values()) {
      mix(h, a.index());
      if (const double *d = std::get_if<double>(&a))
        mix(h, SameNode::floatBits(*d));
      else if (const int64_t *i = std::get_if<int64_t>(&a))
        mix(h, static_cast<uint64_t>(*i));
      else if (const auto *ints = std::get_if<std::vector<int64_t>>(&a))
        for (int64_t v : *ints)
          mix(h, static_cast<uint64_t>(v));
      else if (const bool *flag = std::get_if<bool>(&a))
        mix(h, *flag);
      else if (const DType *t = std::get_if<DType>(&a))
        mix(h, static_cast<uint64_t>(*t));
    }
    // The table indexes by the low bits, which the multiplications above leave depending on the
    // low bits of the input only: fold the high half in.
    return h ^ (h >> 29) ^ (h >> 47);
  }
};

// The nodes kept, each the first of the nodes equal to it: open addressing in one flat table
// (linear probing, at most half full) instead of a node allocated per entry, since a lookup per
// node of a deep model is the whole pass. Lookups only: no order of the table leaks out.
class KeptNodes {
public:
  KeptNodes(const ir::Graph &g, size_t expected) : hash_{&g}, same_{&g} {
    size_t size = 16;
    while (size < 2 * expected)
      size *= 2;
    slots_.assign(size, {0, ir::kNone});
  }

  // The kept node equal to `id`, or kNone after keeping `id`.
  ir::NodeId findOrKeep(ir::NodeId id) {
    uint64_t h = hash_(id);
    size_t mask = slots_.size() - 1;
    for (size_t i = static_cast<size_t>(h) & mask;; i = (i + 1) & mask) {
      auto &[slotHash, slotId] = slots_[i];
      if (slotId == ir::kNone) {
        slots_[i] = {h, id};
        if (2 * ++count_ > slots_.size())
          grow();
        return ir::kNone;
      }
      if (slotHash == h && same_(slotId, id))
        return slotId;
    }
  }

private:
  void grow() {
    std::vector<std::pair<uint64_t, ir::NodeId>> old(2 * slots_.size(), {0, ir::kNone});
    old.swap(slots_);
    size_t mask = slots_.size() - 1;
    for (const auto &[h, id] : old)
      if (id != ir::kNone) {
        size_t i = static_cast<size_t>(h) & mask;
        while (slots_[i].second != ir::kNone)
          i = (i + 1) & mask;
        slots_[i] = {h, id};
      }
  }

  NodeHash hash_;
  SameNode same_;
  std::vector<std::pair<uint64_t, ir::NodeId>> slots_; // (hash, node) or (0, kNone)
  size_t count_ = 0;
};

} // namespace

Expected<bool> runCse(ir::Graph &g, PassStats &stats) {
  // repl[v]: the value v's uses read instead (v itself if not merged). Nodes are visited in
  // topological order, so a node's operands are final when it is reached.
  std::vector<ir::ValueId> repl(g.numValues());
  for (ir::ValueId v = 0; v < g.numValues(); ++v)
    repl[v] = v;
  KeptNodes kept(g, g.nodes().size());
  int64_t merged = 0;
  for (ir::NodeId id = 0; id < static_cast<ir::NodeId>(g.nodes().size()); ++id) {
    ir::Node &n = g.node(id);
    for (ir::ValueId &v : n.operands)
      v = repl[v];
    ir::NodeId same = kept.findOrKeep(id);
    if (same == ir::kNone)
      continue;
    const ir::Node &first = g.node(same);
    for (size_t r = 0; r < n.results.size(); ++r)
      repl[n.results[r]] = first.results[r];
    g.eraseNode(id, same);
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

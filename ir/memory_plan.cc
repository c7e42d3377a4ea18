// The memory plan's rules: liveness, which results may share an operand's bytes, and the
// plan's verifier (see ir/graph.h).
#include <algorithm>

#include <fmt/format.h>

#include "ir/graph.h"

namespace kiln::ir {

bool mayWriteOver(const Node &n, int result, ValueId operand) {
  const OpInfo &op = opInfo(n.op);
  bool any = false;
  for (size_t j = 0; j < n.operands.size(); ++j) {
    if (n.operands[j] != operand)
      continue;
    any = true;
    if (!op.writesOver || !op.writesOver(n, result, static_cast<int>(j)))
      return false;
  }
  return any;
}

std::vector<int32_t> lastUses(const Graph &g) {
  std::vector<int32_t> last(g.numValues(), kNone);
  int32_t count = static_cast<int32_t>(g.nodes().size());
  for (int32_t n = 0; n < count; ++n) {
    if (g.node(n).erased)
      continue;
    for (ValueId r : g.node(n).results)
      last[r] = n; // raised by any later use
    for (ValueId v : g.node(n).operands)
      last[v] = n;
  }
  for (const Output &o : g.outputs())
    last[o.value] = count;
  return last;
}

std::vector<Error> verifyMemoryPlan(const Graph &g) {
  std::vector<Error> errors;
  auto report = [&](const std::string &where, std::string what) {
    errors.push_back(Error{fmt::format("{}: memory plan: {}", where, what)});
  };
  const MemoryPlan &plan = *g.memoryPlan();
  if (plan.slots.size() != static_cast<size_t>(g.numValues())) {
    report("graph", fmt::format("has {} slots for {} values", plan.slots.size(), g.numValues()));
    return errors;
  }
  if (plan.arenaBytes < 0 || plan.arenaBytes % kArenaAlignment != 0)
    report("graph", fmt::format("arena_bytes must be a non-negative multiple of {}, found {}",
                                kArenaAlignment, plan.arenaBytes));
  for (const Arg &a : g.args())
    if (plan.slots[a.value] != MemorySlot{})
      report(fmt::format("argument \"{}\"", a.name),
             "an argument is caller-owned and has no place in the arena");

  // Buffers: a value that shares (in place, view) joins its operand's buffer, whose lifetime then
  // runs from its first value's node to the last use of any of its values.
  struct Buffer {
    int32_t start, end;
    int64_t offset, bytes;
    NodeId node;
    size_t result;
  };
  std::vector<Buffer> buffers;
  std::vector<int32_t> bufferOf(g.numValues(), kNone);
  std::vector<int32_t> last = lastUses(g);
  // An operand of `node` in buffer b (the value written over, or a view of it) that the op reads
  // other than element for element; kNone if there is none.
  auto aliasReadElsewhere = [&](const Node &node, size_t result, int32_t b) {
    for (ValueId u : node.operands)
      if (bufferOf[u] == b && !mayWriteOver(node, static_cast<int>(result), u))
        return u;
    return ValueId{kNone};
  };
  int32_t count = static_cast<int32_t>(g.nodes().size());
  for (NodeId n = 0; n < count; ++n) {
    const Node &node = g.node(n);
    std::string where = fmt::format("{}: {}", placeOf(node, n), mnemonic(node.op));
    for (size_t i = 0; i < node.results.size(); ++i) {
      ValueId r = node.results[i];
      const MemorySlot &s = plan.slots[r];
      bool ok = true;
      if (s.bytes != g.type(r).bytes()) {
        report(where, fmt::format("result {} is {} ({} bytes), but its slot has {} bytes", i,
                                  typeString(g.type(r)), g.type(r).bytes(), s.bytes));
        ok = false;
      }
      if (s.offset < 0 || s.offset % kArenaAlignment != 0) {
        report(where,
               fmt::format("result {}: offset must be a non-negative multiple of {}, found {}", i,
                           kArenaAlignment, s.offset));
        ok = false;
      } else if (ok && (plan.arenaBytes < 0 || s.bytes > plan.arenaBytes - s.offset)) {
        // Compared without adding: offsets read from text may be anywhere below 2^63.
        report(where, fmt::format("result {} ends at byte {}, past arena_bytes {}", i,
                                  addSat(s.offset, s.bytes), plan.arenaBytes));
        ok = false;
      }
      if (s.share != MemorySlot::Share::None) {
        bool inPlace = s.share == MemorySlot::Share::InPlace;
        std::string_view how = inPlace ? "in place of" : "a view of";
        bool isOperand =
            std::find(node.operands.begin(), node.operands.end(), s.of) != node.operands.end();
        int32_t b = isOperand ? bufferOf[s.of] : kNone;
        bool takenBefore = false; // by an earlier result of the same node
        for (size_t j = 0; j < i; ++j)
          takenBefore = takenBefore || (plan.slots[node.results[j]].share == s.share &&
                                        plan.slots[node.results[j]].of == s.of);
        if (inPlace && isOperand && !mayWriteOver(node, static_cast<int>(i), s.of))
          report(where, fmt::format("result {} cannot be in place of %{}: the op reads it "
                                    "other than element for element",
                                    i, s.of));
        else if (inPlace && takenBefore)
          report(where, fmt::format("result {} is in place of %{}, which an earlier result "
                                    "already took",
                                    i, s.of));
        else if (!inPlace && !opInfo(node.op).view)
          report(where, fmt::format("result {} cannot be a view: only reshape's can", i));
        else if (!isOperand)
          report(where, fmt::format("result {} is {} %{}, which is not an operand", i, how, s.of));
        else if (g.value(s.of).def == kNone)
          report(where, fmt::format("result {} is {} an argument, which is caller-owned", i, how));
        else if (plan.slots[s.of].offset != s.offset)
          report(where, fmt::format("result {} is {} its operand but at offset {}, not the "
                                    "operand's {}",
                                    i, how, s.offset, plan.slots[s.of].offset));
        else if (inPlace && (g.type(s.of).numElements() != g.type(r).numElements() ||
                             plan.slots[s.of].bytes != s.bytes))
          report(where, fmt::format("result {} is in place of an operand of another size ({}), "
                                    "which it does not read element for element",
                                    i, typeString(g.type(s.of))));
        else if (b != kNone && inPlace && buffers[b].end > n)
          report(where, fmt::format("result {} overwrites an operand that is still needed ({})", i,
                                    buffers[b].end == count
                                        ? std::string("a graph output")
                                        : fmt::format("used at {}", placeOf(g.node(buffers[b].end),
                                                                            buffers[b].end))));
        else if (ValueId alias = inPlace && b != kNone ? aliasReadElsewhere(node, i, b) : kNone;
                 alias != kNone)
          report(where, fmt::format("result {} overwrites bytes that the op also reads as %{} "
                                    "other than element for element",
                                    i, alias));
        else if (b != kNone) {
          bufferOf[r] = b;
          buffers[b].end = std::max(buffers[b].end, last[r]);
        }
        continue; // shared (or wrongly shared: reported once, not again as an overlap)
      }
      if (ok) {
        bufferOf[r] = static_cast<int32_t>(buffers.size());
        buffers.push_back({n, last[r], s.offset, s.bytes, n, i});
      }
    }
  }

  // Two buffers that are live at one node must not share a byte. Buffers start in node order, so
  // a sweep keeps those still live.
  std::vector<const Buffer *> live;
  for (const Buffer &b : buffers) {
    std::erase_if(live, [&](const Buffer *a) { return a->end < b.start; });
    for (const Buffer *a : live)
      if (a->bytes > 0 && b.bytes > 0 && a->offset < b.offset + b.bytes &&
          b.offset < a->offset + a->bytes)
        report(fmt::format("{}: {}", placeOf(g.node(b.node), b.node), mnemonic(g.node(b.node).op)),
               fmt::format("result {} at bytes [{}, {}) overlaps result {} of {} at bytes [{}, "
                           "{}), which is still live",
                           b.result, b.offset, b.offset + b.bytes, a->result,
                           placeOf(g.node(a->node), a->node), a->offset, a->offset + a->bytes));
    live.push_back(&b);
  }
  return errors;
}

} // namespace kiln::ir

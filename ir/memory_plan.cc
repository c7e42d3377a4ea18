// The memory plan's rules (see ir/memory_plan.h): liveness, which values belong in which region,
// which results may share an operand's bytes, which updates are written back by a copy, and the
// plan's verifier.
#include <algorithm>
#include <functional>
#include <map>
#include <queue>

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

std::vector<bool> loadTimeConstants(const Graph &g) {
  std::vector<bool> constant(g.numValues(), false);
  for (const Node &n : g.nodes()) {
    bool all = !n.erased && !opInfo(n.op).collective;
    for (ValueId v : n.operands)
      all = all && constant[v];
    for (ValueId r : n.results)
      constant[r] = all;
  }
  return constant;
}

std::vector<ValueId> updateValues(const Graph &g) {
  std::vector<ValueId> update(g.args().size(), kNone);
  for (const Output &o : g.outputs())
    if (o.role == OutputRole::Update && o.arg >= 0 && o.arg < static_cast<int32_t>(update.size()))
      update[o.arg] = o.value;
  return update;
}

std::vector<UpdateCopy> updateCopies(const Graph &g, const MemoryPlan &plan) {
  std::vector<UpdateCopy> copies;
  std::vector<ValueId> update = updateValues(g);
  for (size_t a = 0; a < update.size(); ++a) {
    ValueId u = update[a], arg = g.args()[a].value;
    if (u == kNone || u == arg)
      continue;
    const MemorySlot &to = plan.slots[arg], &from = plan.slots[u];
    if (from.region != to.region || from.offset != to.offset)
      copies.push_back({u, static_cast<int32_t>(a)});
  }
  return copies;
}

namespace {

// Which region a value must be in, and why a slot elsewhere is wrong ("" if anywhere is fine).
struct Placement {
  std::vector<bool> constant;  // load-time constants
  std::vector<bool> output;    // values that are outputs
  std::vector<int32_t> update; // per value: the argument it is the update of, or kNone
};

Placement placementOf(const Graph &g) {
  Placement p{loadTimeConstants(g), std::vector<bool>(g.numValues(), false),
              std::vector<int32_t>(g.numValues(), kNone)};
  for (const Output &o : g.outputs()) {
    p.output[o.value] = true;
    if (o.role == OutputRole::Update && o.arg >= 0)
      p.update[o.value] = o.arg;
  }
  return p;
}

// A run of bytes that one or more values occupy in turn, with the node positions it is live over
// (-1: before the first node, from load or from the caller; count: after the last, into the
// next step or to the caller).
struct Buffer {
  MemRegion region;
  int32_t start, end;
  int64_t offset, bytes;
  ValueId first; // the value that opened it, for messages
};

class PlanVerifier {
public:
  explicit PlanVerifier(const Graph &g)
      : g_(g), plan_(*g.memoryPlan()), count_(static_cast<int32_t>(g.nodes().size())),
        last_(lastUses(g)), place_(placementOf(g)), bufferOf_(g.numValues(), kNone) {}

  std::vector<Error> run() {
    if (plan_.slots.size() != static_cast<size_t>(g_.numValues()) ||
        plan_.scratch.size() != g_.nodes().size()) {
      report("graph", fmt::format("has {} slots for {} values and {} scratch sizes for {} nodes",
                                  plan_.slots.size(), g_.numValues(), plan_.scratch.size(),
                                  g_.nodes().size()));
      return std::move(errors_);
    }
    for (MemRegion r : kAllMemRegions)
      if (plan_.bytes(r) < 0 || plan_.bytes(r) % kMemAlignment != 0)
        report("graph", fmt::format("{} bytes must be a non-negative multiple of {}, found {}",
                                    memRegionName(r), kMemAlignment, plan_.bytes(r)));
    overwritten_ = overwrittenArgs();
    for (const Arg &a : g_.args())
      checkArg(a);
    for (NodeId n = 0; n < count_; ++n)
      checkNode(n);
    checkOverlaps();
    return std::move(errors_);
  }

private:
  void report(const std::string &where, std::string what) {
    errors_.push_back(Error{fmt::format("{}: memory plan: {}", where, what)});
  }
  std::string nodePlace(NodeId n) const {
    return fmt::format("{}: {}", placeOf(g_.node(n), n), mnemonic(g_.node(n).op));
  }

  // Bytes, alignment and bounds of v's slot; false if they are wrong (reported as `what`).
  bool checkExtent(const std::string &where, const std::string &what, ValueId v) {
    const MemorySlot &s = plan_.slots[v];
    const Type &t = g_.type(v);
    if (s.bytes != t.bytes()) {
      report(where, fmt::format("{} is {} ({} bytes), but its slot has {} bytes", what,
                                typeString(t), t.bytes(), s.bytes));
      return false;
    }
    if (s.region == MemRegion::Scratch) {
      report(where, fmt::format("{} is in the scratch region, which holds no values", what));
      return false;
    }
    if (s.offset < 0 || s.offset % kMemAlignment != 0) {
      report(where, fmt::format("{}: offset must be a non-negative multiple of {}, found {}", what,
                                kMemAlignment, s.offset));
      return false;
    }
    int64_t size = plan_.bytes(s.region);
    if (size < 0 || s.bytes > size - s.offset) { // compared without adding: offsets may be huge
      report(where, fmt::format("{} ends at byte {}, past {} bytes {}", what,
                                addSat(s.offset, s.bytes), memRegionName(s.region), size));
      return false;
    }
    return true;
  }

  void checkArg(const Arg &a) {
    std::string where = fmt::format("argument \"{}\"", a.name);
    const MemorySlot &s = plan_.slots[a.value];
    MemRegion want = a.kind == Arg::Kind::Input ? MemRegion::IO : MemRegion::Weights;
    if (s.region != want || s.share != MemorySlot::Share::None) {
      report(where, fmt::format("{} belongs in {}, with bytes of its own",
                                a.kind == Arg::Kind::Input ? "an input" : "a parameter or state",
                                memRegionName(want)));
      return;
    }
    if (!checkExtent(where, "it", a.value))
      return;
    // An input is the caller's until the run ends; a parameter or state holds its value into the
    // next step, unless its update takes its bytes (then it is free after its last reader).
    int32_t arg = static_cast<int32_t>(&a - g_.args().data());
    open(a.value, -1, overwritten_[arg] ? last_[a.value] : count_);
  }

  // Per argument: whether its update takes its bytes (one pass over the values, not one per
  // argument).
  std::vector<bool> overwrittenArgs() const {
    std::vector<bool> out(g_.args().size(), false);
    for (ValueId v = 0; v < g_.numValues(); ++v)
      if (int32_t arg = place_.update[v]; arg != kNone) {
        const MemorySlot &home = plan_.slots[g_.args()[arg].value];
        out[arg] = out[arg] || (v != g_.args()[arg].value && plan_.slots[v].region == home.region &&
                                plan_.slots[v].offset == home.offset);
      }
    return out;
  }

  // The region rules of node result r; false if broken (reported).
  bool checkRegion(const std::string &where, size_t i, ValueId r) {
    const MemorySlot &s = plan_.slots[r];
    switch (s.region) {
    case MemRegion::Constants:
      if (place_.constant[r])
        return true;
      report(where, fmt::format("result {} is in constants, but it is not computed from "
                                "attributes alone (it cannot be filled at load)",
                                i));
      return false;
    case MemRegion::Weights: {
      int32_t arg = place_.update[r];
      if (arg != kNone && plan_.slots[g_.args()[arg].value].offset == s.offset)
        return true;
      report(where, fmt::format("result {} is in weights, but it is not the update of the "
                                "argument whose bytes it takes",
                                i));
      return false;
    }
    case MemRegion::IO:
      if (place_.output[r])
        return true;
      report(where, fmt::format("result {} is in io, but it is not an output", i));
      return false;
    case MemRegion::Arena:
    case MemRegion::Scratch:
      return true;
    }
    return true;
  }

  void checkNode(NodeId n) {
    const Node &node = g_.node(n);
    std::string where = nodePlace(n);
    const OpInfo &op = opInfo(node.op);
    int64_t need = op.scratchBytes ? op.scratchBytes(g_, node) : 0;
    if (plan_.scratch[n] < need || plan_.scratch[n] > plan_.bytes(MemRegion::Scratch))
      report(where, fmt::format("scratch of {} bytes, but the op needs {} and the region has {}",
                                plan_.scratch[n], need, plan_.bytes(MemRegion::Scratch)));
    for (size_t i = 0; i < node.results.size(); ++i) {
      ValueId r = node.results[i];
      const MemorySlot &s = plan_.slots[r];
      if (!checkExtent(where, fmt::format("result {}", i), r) || !checkRegion(where, i, r))
        continue;
      if (s.share == MemorySlot::Share::None) {
        // Outputs and constants live to the end; updates into the next step.
        bool toEnd = place_.output[r] || s.region == MemRegion::Constants;
        open(r, s.region == MemRegion::Constants ? -1 : n, toEnd ? count_ : last_[r]);
      } else {
        checkShared(where, node, n, i);
      }
    }
  }

  // A result that takes an operand's bytes (in place, or as a view).
  void checkShared(const std::string &where, const Node &node, NodeId n, size_t i) {
    ValueId r = node.results[i];
    const MemorySlot &s = plan_.slots[r];
    bool inPlace = s.share == MemorySlot::Share::InPlace;
    std::string_view how = inPlace ? "in place of" : "a view of";
    bool isOperand =
        std::find(node.operands.begin(), node.operands.end(), s.of) != node.operands.end();
    int32_t b = isOperand ? bufferOf_[s.of] : kNone;
    bool takenBefore = false; // by an earlier result of the same node
    for (size_t j = 0; j < i; ++j)
      takenBefore = takenBefore || (plan_.slots[node.results[j]].share == s.share &&
                                    plan_.slots[node.results[j]].of == s.of);
    const Value *of = isOperand ? &g_.value(s.of) : nullptr;
    bool argOk = of && of->def == kNone && g_.args()[of->index].kind != Arg::Kind::Input &&
                 place_.update[r] == of->index;
    if (!isOperand)
      report(where, fmt::format("result {} is {} %{}, which is not an operand", i, how, s.of));
    else if (inPlace && !mayWriteOver(node, static_cast<int>(i), s.of))
      report(where, fmt::format("result {} cannot be in place of %{}: the op reads it other than "
                                "element for element",
                                i, s.of));
    else if (inPlace && takenBefore)
      report(where,
             fmt::format("result {} is in place of %{}, which an earlier result already took", i,
                         s.of));
    else if (!inPlace && !opInfo(node.op).view)
      report(where, fmt::format("result {} cannot be a view: only reshape's can", i));
    else if (of->def == kNone && !(inPlace && argOk))
      report(where, fmt::format("result {} is {} argument \"{}\", whose bytes only its own "
                                "update may take",
                                i, how, g_.args()[of->index].name));
    else if (plan_.slots[s.of].region != s.region || plan_.slots[s.of].offset != s.offset)
      report(where, fmt::format("result {} is {} its operand but at {} offset {}, not the "
                                "operand's {} offset {}",
                                i, how, memRegionName(s.region), s.offset,
                                memRegionName(plan_.slots[s.of].region), plan_.slots[s.of].offset));
    else if (inPlace && (g_.type(s.of).numElements() != g_.type(r).numElements() ||
                         plan_.slots[s.of].bytes != s.bytes))
      report(where, fmt::format("result {} is in place of an operand of another size ({}), which "
                                "it does not read element for element",
                                i, typeString(g_.type(s.of))));
    else if (b != kNone && inPlace && buffers_[b].end > n)
      report(where, fmt::format("result {} overwrites an operand that is still needed ({})", i,
                                buffers_[b].end == count_
                                    ? std::string("an output, or a value kept for the next step")
                                    : fmt::format("used at {}", placeOf(g_.node(buffers_[b].end),
                                                                        buffers_[b].end))));
    else if (ValueId alias = inPlace && b != kNone ? aliasReadElsewhere(node, i, b) : kNone;
             alias != kNone)
      report(where, fmt::format("result {} overwrites bytes that the op also reads as %{} other "
                                "than element for element",
                                i, alias));
    else if (b != kNone) {
      bufferOf_[r] = b;
      bool toEnd = place_.output[r];
      buffers_[b].end = std::max(buffers_[b].end, toEnd ? count_ : last_[r]);
    }
  }

  // An operand of `node` in buffer b (the value written over, or a view of it) that the op reads
  // other than element for element; kNone if there is none.
  ValueId aliasReadElsewhere(const Node &node, size_t result, int32_t b) const {
    for (ValueId u : node.operands)
      if (bufferOf_[u] == b && !mayWriteOver(node, static_cast<int>(result), u))
        return u;
    return kNone;
  }

  void open(ValueId v, int32_t start, int32_t end) {
    const MemorySlot &s = plan_.slots[v];
    bufferOf_[v] = static_cast<int32_t>(buffers_.size());
    buffers_.push_back({s.region, start, end, s.offset, s.bytes, v});
  }

  std::string valuePlace(ValueId v) const {
    const Value &val = g_.value(v);
    if (val.def == kNone)
      return fmt::format("argument \"{}\"", g_.args()[val.index].name);
    return fmt::format("result {} of {}", val.index, placeOf(g_.node(val.def), val.def));
  }

  // Whether two buffers of one region share a byte while both are live. Sorted by start, a sweep
  // keeps the live buffers of each region by offset; until two overlap they are disjoint, so a new
  // buffer overlaps one of them exactly when it overlaps the one starting last below its end:
  // O(log n) per buffer, where comparing with every live one would be quadratic in depth (a
  // training step keeps a layer's saved values live across the whole backward pass).
  bool anyOverlap(const std::vector<const Buffer *> &order) const {
    std::map<std::pair<MemRegion, int64_t>, int64_t> live; // (region, offset) -> end offset
    using Expiry = std::pair<int32_t, std::pair<MemRegion, int64_t>>; // (last node, key)
    std::priority_queue<Expiry, std::vector<Expiry>, std::greater<>> expiry;
    for (const Buffer *b : order) {
      while (!expiry.empty() && expiry.top().first < b->start) {
        live.erase(expiry.top().second);
        expiry.pop();
      }
      if (b->bytes == 0)
        continue;
      auto next = live.lower_bound({b->region, b->offset + b->bytes});
      if (next != live.begin() && std::prev(next)->first.first == b->region &&
          std::prev(next)->second > b->offset)
        return true;
      live.emplace(std::pair(b->region, b->offset), b->offset + b->bytes);
      expiry.push({b->end, {b->region, b->offset}});
    }
    return false;
  }

  // Two buffers of one region that are live at one node must not share a byte. Sorted by start,
  // a sweep keeps those still live and reports every pair that does (only run when one does).
  void checkOverlaps() {
    std::vector<const Buffer *> order;
    for (const Buffer &b : buffers_)
      order.push_back(&b);
    std::stable_sort(order.begin(), order.end(),
                     [](const Buffer *x, const Buffer *y) { return x->start < y->start; });
    if (!anyOverlap(order))
      return;
    std::vector<const Buffer *> live;
    for (const Buffer *b : order) {
      std::erase_if(live, [&](const Buffer *a) { return a->end < b->start; });
      for (const Buffer *a : live)
        if (a->region == b->region && a->bytes > 0 && b->bytes > 0 &&
            a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes) {
          const Value &v = g_.value(b->first);
          std::string where = v.def == kNone ? valuePlace(b->first) : nodePlace(v.def);
          report(where, fmt::format("{} at {} bytes [{}, {}) overlaps {} at bytes [{}, {}), which "
                                    "is still live",
                                    v.def == kNone ? "it" : fmt::format("result {}", v.index),
                                    memRegionName(b->region), b->offset, b->offset + b->bytes,
                                    valuePlace(a->first), a->offset, a->offset + a->bytes));
        }
      live.push_back(b);
    }
  }

  const Graph &g_;
  const MemoryPlan &plan_;
  int32_t count_;
  std::vector<int32_t> last_;
  Placement place_;
  std::vector<bool> overwritten_; // per argument: its update takes its bytes
  std::vector<Buffer> buffers_;
  std::vector<int32_t> bufferOf_;
  std::vector<Error> errors_;
};

} // namespace

std::vector<Error> verifyMemoryPlan(const Graph &g) {
  return PlanVerifier(g).run();
}

} // namespace kiln::ir

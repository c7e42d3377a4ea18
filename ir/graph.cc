// Graph construction and the verifier.
#include "ir/graph.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/lexer.h"
#include "support/utf8.h"

namespace kiln::ir {

std::string paramInitString(const ParamInit &init) {
  AttrValue scale = init.scale;
  switch (init.kind) {
  case ParamInit::Kind::Zeros:
    return "zeros";
  case ParamInit::Kind::Ones:
    return "ones";
  case ParamInit::Kind::Normal:
    return fmt::format("normal({})", attrValueString(scale));
  case ParamInit::Kind::Uniform:
    return fmt::format("uniform({})", attrValueString(scale));
  case ParamInit::Kind::XavierUniform:
    return fmt::format("xavier_uniform({})", attrValueString(scale));
  }
  return "?";
}

std::string_view domainName(Domain d) {
  switch (d) {
  case Domain::Real:
    return "real";
  case Domain::NonNegative:
    return "nonnegative";
  case Domain::Count:
    return "count";
  }
  return "?";
}

Status checkParamInit(const ParamInit &init) {
  if (!(std::isfinite(init.scale) && init.scale >= 0))
    return makeError("init {}: the scale must be a finite number >= 0", paramInitString(init));
  return {};
}

ValueId Graph::newValue(Type type, NodeId def, int32_t index) {
  plan_.reset(); // every new argument or node result: the plan has no slot for it
  values_.push_back(Value{std::move(type), def, index});
  return static_cast<ValueId>(values_.size() - 1);
}

ValueId Graph::addInput(std::string name, Type type, int64_t range) {
  ValueId v = newValue(std::move(type), kNone, static_cast<int32_t>(args_.size()));
  args_.push_back(Arg{Arg::Kind::Input, std::move(name), v, {}, range});
  return v;
}

ValueId Graph::addParam(std::string name, Type type, ParamInit init, Domain domain) {
  ValueId v = newValue(std::move(type), kNone, static_cast<int32_t>(args_.size()));
  args_.push_back(Arg{Arg::Kind::Param, std::move(name), v, init, 0, domain});
  return v;
}

ValueId Graph::addState(std::string name, Type type, ParamInit init, Domain domain) {
  ValueId v = newValue(std::move(type), kNone, static_cast<int32_t>(args_.size()));
  args_.push_back(Arg{Arg::Kind::State, std::move(name), v, init, 0, domain});
  return v;
}

Expected<NodeId> Graph::addNode(OpKind op, std::span<const ValueId> operands, Attrs attrs,
                                SourceLoc loc) {
  std::vector<Type> types;
  for (ValueId v : operands) {
    assert(v >= 0 && v < numValues() && "operand is not a value of this graph");
    types.push_back(type(v));
  }
  Expected<std::vector<Type>> results = inferTypes(op, types, attrs);
  if (!results)
    return results.error();
  return addNodeUnchecked(op, {operands.begin(), operands.end()}, std::move(attrs), *results,
                          std::move(loc));
}

Expected<NodeId> Graph::addNode(OpKind op, std::initializer_list<ValueId> operands,
                                std::initializer_list<AttrInit> attrs, SourceLoc loc) {
  Attrs a(opInfo(op).attrs);
  for (const AttrInit &init : attrs)
    if (Status s = a.set(init.first, init.second); !s)
      return s.error();
  return addNode(op, std::span<const ValueId>(operands.begin(), operands.size()), std::move(a),
                 std::move(loc));
}

NodeId Graph::addNodeUnchecked(OpKind op, std::vector<ValueId> operands, Attrs attrs,
                               std::span<const Type> resultTypes, SourceLoc loc, TextPos pos) {
  plan_.reset();
  NodeId id = static_cast<NodeId>(nodes_.size());
  Node n{op, std::move(operands), {}, std::move(attrs), std::move(loc), pos, kNone};
  for (size_t i = 0; i < resultTypes.size(); ++i)
    n.results.push_back(newValue(resultTypes[i], id, static_cast<int32_t>(i)));
  nodes_.push_back(std::move(n));
  return id;
}

void Graph::addOutput(std::string name, ValueId value) {
  outputs_.push_back({std::move(name), value});
  plan_.reset();
}

const Arg *Graph::findArg(std::string_view name) const {
  for (const Arg &a : args_)
    if (a.name == name)
      return &a;
  return nullptr;
}

const Output *Graph::findOutput(std::string_view name) const {
  for (const Output &o : outputs_)
    if (o.name == name)
      return &o;
  return nullptr;
}

ValueId Graph::result(NodeId n) const {
  assert(nodes_[n].results.size() == 1);
  return nodes_[n].results[0];
}

void Graph::replaceAllUses(ValueId from, ValueId to) {
  plan_.reset();
  for (Node &n : nodes_)
    for (ValueId &v : n.operands)
      if (v == from)
        v = to;
  for (Output &o : outputs_)
    if (o.value == from)
      o.value = to;
}

std::vector<std::vector<NodeId>> Graph::users() const {
  std::vector<std::vector<NodeId>> u(values_.size());
  for (NodeId id = 0; id < static_cast<NodeId>(nodes_.size()); ++id)
    if (!nodes_[id].erased)
      for (ValueId v : nodes_[id].operands)
        u[v].push_back(id);
  return u;
}

std::vector<int32_t> Graph::useCounts() const {
  std::vector<int32_t> c(values_.size(), 0);
  for (const Node &n : nodes_)
    if (!n.erased)
      for (ValueId v : n.operands)
        ++c[v];
  for (const Output &o : outputs_)
    ++c[o.value];
  return c;
}

void Graph::compact() {
  // Order: visit live nodes in their current order; before emitting a node, emit (depth first,
  // iteratively) the not-yet-emitted nodes that define its operands. A valid order stays as it
  // is; a node appended by a pass moves to just before its first user.
  NodeId count = static_cast<NodeId>(nodes_.size());
  std::vector<NodeId> order;
  std::vector<uint8_t> state(count, 0); // 0 new, 1 on the stack, 2 emitted
  for (NodeId root = 0; root < count; ++root) {
    if (nodes_[root].erased || state[root] == 2)
      continue;
    std::vector<std::pair<NodeId, size_t>> stack{{root, 0}};
    state[root] = 1;
    while (!stack.empty()) {
      auto &[n, next] = stack.back();
      if (next < nodes_[n].operands.size()) {
        NodeId d = values_[nodes_[n].operands[next++]].def;
        assert((d == kNone || state[d] != 1) && "a rewrite created a cycle");
        if (d != kNone && state[d] == 0) {
          assert(!nodes_[d].erased && "a live node uses the result of an erased node");
          state[d] = 1;
          stack.push_back({d, 0});
        }
        continue;
      }
      state[n] = 2;
      order.push_back(n);
      stack.pop_back();
    }
  }
  // Already compact (no erased node, order kept, values numbered canonically): nothing changes,
  // so the memory plan (indexed by value) stays; the pass manager compacts after every pass.
  bool same = order.size() == static_cast<size_t>(count);
  ValueId expected = 0;
  for (size_t a = 0; same && a < args_.size(); ++a)
    same = args_[a].value == expected++;
  for (NodeId i = 0; same && i < count; ++i) {
    same = order[i] == i;
    for (ValueId r : nodes_[i].results)
      same = same && r == expected++;
  }
  if (same && expected == numValues())
    return;
  plan_.reset();
  // New ids: nodes by position in `order`; values canonically.
  std::vector<NodeId> newNode(count, kNone);
  for (size_t i = 0; i < order.size(); ++i)
    newNode[order[i]] = static_cast<NodeId>(i);
  std::vector<ValueId> newValue(values_.size(), kNone);
  std::vector<Value> values;
  for (size_t a = 0; a < args_.size(); ++a) {
    newValue[args_[a].value] = static_cast<ValueId>(values.size());
    values.push_back(Value{values_[args_[a].value].type, kNone, static_cast<int32_t>(a)});
  }
  std::vector<Node> nodes;
  for (NodeId old : order) {
    Node n = std::move(nodes_[old]);
    for (size_t r = 0; r < n.results.size(); ++r) {
      newValue[n.results[r]] = static_cast<ValueId>(values.size());
      values.push_back(Value{values_[n.results[r]].type, static_cast<NodeId>(nodes.size()),
                             static_cast<int32_t>(r)});
    }
    nodes.push_back(std::move(n));
  }
  for (Node &n : nodes) {
    for (ValueId &v : n.operands)
      v = newValue[v];
    for (ValueId &v : n.results)
      v = newValue[v];
    // A backward node whose forward node was erased follows it to its replacement (a merged
    // duplicate, a region), or keeps no link if it has none.
    NodeId f = n.gradOf;
    for (int hops = 0; f != kNone && nodes_[f].erased && hops < count; ++hops)
      f = nodes_[f].replacedBy;
    n.gradOf = f == kNone || nodes_[f].erased ? kNone : newNode[f];
    if (n.gradOf == static_cast<NodeId>(&n - nodes.data()))
      n.gradOf = kNone; // replaced by itself (a region holding both ends): no link
  }
  for (Arg &a : args_)
    a.value = newValue[a.value];
  for (Output &o : outputs_)
    o.value = newValue[o.value];
  nodes_ = std::move(nodes);
  values_ = std::move(values);
}

std::string placeOf(const Node &n, NodeId id) {
  if (!n.pos.empty())
    return fmt::format("{}:{}", n.pos.line, n.pos.col);
  if (!n.loc.empty())
    return fmt::format("{}:{}", n.loc.file, n.loc.line);
  return fmt::format("node #{}", id);
}

std::vector<Error> verify(const Graph &g) {
  std::vector<Error> errors;
  auto report = [&](std::string where, std::string what) {
    errors.push_back(Error{fmt::format("{}: {}", where, what)});
  };

  // Names go on into safetensors and C headers: UTF-8, without NUL bytes.
  auto checkName = [&](std::string_view what, const std::string &name) {
    if (name.find('\0') != std::string::npos || !isValidUtf8(name))
      report(fmt::format("{} {}", what, quoteString(name)),
             "the name must be valid UTF-8 without NUL bytes");
  };
  checkName("graph", g.name());
  std::set<std::string> names;
  for (const Arg &a : g.args()) {
    checkName("argument", a.name);
    if (a.name.empty())
      report("graph arguments",
             fmt::format("{} has an empty name",
                         a.kind == Arg::Kind::Input ? "an input" : "a parameter"));
    else if (!names.insert(a.name).second)
      report("graph arguments", fmt::format("the name \"{}\" is used twice", a.name));
    if (Status s = checkType(g.type(a.value)); !s)
      report(fmt::format("argument \"{}\"", a.name), s.error().message);
    if (Status s = checkParamInit(a.init); !s)
      report(fmt::format("argument \"{}\"", a.name), s.error().message);
    if (a.range < 0 || (a.range > 0 && isFloat(g.type(a.value).dtype)))
      report(fmt::format("argument \"{}\"", a.name),
             "range must be positive and is only for integer inputs");
  }

  // A value is defined once it is an argument or the result of an earlier node.
  std::vector<bool> defined(g.numValues(), false);
  for (const Arg &a : g.args())
    defined[a.value] = true;

  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()); ++id) {
    const Node &n = g.node(id);
    const OpInfo &op = opInfo(n.op);
    std::string where = fmt::format("{}: {}", placeOf(n, id), op.mnemonic);
    bool operandsOk = true;
    std::vector<Type> types;
    for (ValueId v : n.operands) {
      if (v < 0 || v >= g.numValues() || !defined[v]) {
        report(where, fmt::format("operand %{} is not defined before its use", v));
        operandsOk = false;
      } else {
        types.push_back(g.type(v));
      }
    }
    if (n.attrs.spec().data() != op.attrs.data() || n.attrs.values().size() != op.attrs.size()) {
      report(where, "attributes do not match the op's declaration");
      operandsOk = false;
    } else {
      for (size_t i = 0; i < op.attrs.size(); ++i)
        if (kindOf(n.attrs.values()[i]) != op.attrs[i].kind)
          report(where, fmt::format("attribute '{}' must be of kind {}", op.attrs[i].name,
                                    attrKindName(op.attrs[i].kind)));
    }
    if (operandsOk) {
      Expected<std::vector<Type>> inferred = inferTypes(n.op, types, n.attrs);
      if (!inferred) {
        report(where, inferred.error().message);
      } else if (inferred->size() != n.results.size()) {
        report(where,
               fmt::format("has {} results, expected {}", n.results.size(), inferred->size()));
      } else {
        for (size_t i = 0; i < n.results.size(); ++i) {
          const Type &have = g.type(n.results[i]);
          if (have != (*inferred)[i])
            report(where, fmt::format("result {} is declared {} but the operands give {}", i,
                                      typeString(have), typeString((*inferred)[i])));
        }
      }
    }
    if (n.gradOf != kNone && (n.gradOf < 0 || n.gradOf >= static_cast<NodeId>(g.nodes().size())))
      report(where, fmt::format("grad_of names node #{}, which does not exist", n.gradOf));
    else if (n.gradOf == id)
      report(where, "grad_of names the node itself");
    for (ValueId r : n.results)
      if (r >= 0 && r < g.numValues())
        defined[r] = true;
  }

  std::set<std::string> outNames;
  for (const Output &o : g.outputs()) {
    checkName("output", o.name);
    if (o.value < 0 || o.value >= g.numValues() || !defined[o.value])
      report(fmt::format("output \"{}\"", o.name),
             fmt::format("value %{} is not defined", o.value));
    if (!outNames.insert(o.name).second)
      report(fmt::format("output \"{}\"", o.name), "the name is used twice");
  }
  if (g.outputs().empty())
    report(fmt::format("graph @{}", g.name()), "has no outputs");
  // A plan is only meaningful for a graph that is otherwise sound (its checks index by operand).
  if (errors.empty() && g.memoryPlan())
    errors = verifyMemoryPlan(g);
  return errors;
}

// ---- Memory plan ----

bool mayRunInPlace(OpKind op) {
  // Element i of the result needs only element i of each operand, so writing it over operand i is
  // safe.
  return kElementwiseFamily[static_cast<size_t>(op)];
}
bool mayWriteOver(const Node &n, int result, ValueId operand) {
  const OpInfo &op = opInfo(n.op);
  bool any = false;
  for (size_t j = 0; j < n.operands.size(); ++j) {
    if (n.operands[j] != operand)
      continue;
    any = true;
    bool ok = mayRunInPlace(n.op) ? n.results.size() == 1
                                  : op.writesOver && op.writesOver(n, result, static_cast<int>(j));
    if (!ok)
      return false;
  }
  return any;
}

bool mayBeView(OpKind op) {
  return op == OpKind::Reshape;
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
        else if (!inPlace && !mayBeView(node.op))
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

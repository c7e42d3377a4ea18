// Graph construction and rewriting (the verifier is ir/verify.cc, the memory plan's rules
// ir/memory_plan.cc).
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

std::string_view outputRoleName(OutputRole r) {
  switch (r) {
  case OutputRole::Value:
    return "value";
  case OutputRole::Loss:
    return "loss";
  case OutputRole::Gradient:
    return "gradient";
  case OutputRole::Update:
    return "update";
  }
  return "?";
}

ValueId operandOf(const Node &n, std::string_view name) {
  std::optional<size_t> at = operandIndex(opInfo(n.op), n.attrs, name);
  return at && *at < n.operands.size() ? n.operands[*at] : kNone;
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

void Graph::addOutput(std::string name, ValueId value, OutputRole role, int32_t arg) {
  outputs_.push_back({std::move(name), value, role, arg});
  plan_.reset();
}

const Output *Graph::findOutput(OutputRole role, int32_t arg) const {
  for (const Output &o : outputs_)
    if (o.role == role && o.arg == arg)
      return &o;
  return nullptr;
}

int32_t Graph::argIndex(std::string_view name) const {
  for (size_t i = 0; i < args_.size(); ++i)
    if (args_[i].name == name)
      return static_cast<int32_t>(i);
  return kNone;
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

void Graph::replaceUses(std::span<const ValueId> to) {
  plan_.reset();
  auto target = [&](ValueId v) {
    while (v >= 0 && v < static_cast<ValueId>(to.size()) && to[v] != kNone)
      v = to[v];
    return v;
  };
  for (Node &n : nodes_)
    for (ValueId &v : n.operands)
      v = target(v);
  for (Output &o : outputs_)
    o.value = target(o.value);
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

bool Graph::isCompact() const {
  // Values numbered canonically (arguments, then node results in order) make "defined before
  // node i" the same as "numbered below node i's first result": one sequential pass.
  ValueId expected = 0;
  for (size_t a = 0; a < args_.size(); ++a)
    if (args_[a].value != expected++)
      return false;
  for (const Node &n : nodes_) {
    if (n.erased)
      return false;
    for (ValueId v : n.operands)
      if (v < 0 || v >= expected)
        return false;
    for (ValueId r : n.results)
      if (r != expected++)
        return false;
  }
  return expected == numValues();
}

namespace {

// The live nodes in their current order, each after the (not yet placed) nodes that define its
// operands, depth first and iteratively: a valid order stays as it is; a node appended by a pass
// moves to just before its first user.
std::vector<NodeId> definitionOrder(const std::vector<Node> &nodes,
                                    const std::vector<Value> &values) {
  const NodeId count = static_cast<NodeId>(nodes.size());
  std::vector<NodeId> order;
  order.reserve(count);
  std::vector<uint8_t> state(count, 0); // 0 new, 1 on the stack, 2 emitted
  std::vector<std::pair<NodeId, size_t>> stack;
  for (NodeId root = 0; root < count; ++root) {
    if (nodes[root].erased || state[root] == 2)
      continue;
    stack.assign(1, {root, 0});
    state[root] = 1;
    while (!stack.empty()) {
      auto &[n, next] = stack.back();
      if (next < nodes[n].operands.size()) {
        NodeId d = values[nodes[n].operands[next++]].def;
        assert((d == kNone || state[d] != 1) && "a rewrite created a cycle");
        if (d != kNone && state[d] == 0) {
          assert(!nodes[d].erased && "a live node uses the result of an erased node");
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
  return order;
}

// Whether `order` keeps every node where it is and the values are numbered canonically (the
// arguments', then each node's results in order): then compacting changes nothing.
bool keepsNumbering(const std::vector<NodeId> &order, const std::vector<Arg> &args,
                    const std::vector<Node> &nodes, size_t numValues) {
  const NodeId count = static_cast<NodeId>(nodes.size());
  bool same = order.size() == static_cast<size_t>(count);
  ValueId expected = 0;
  for (size_t a = 0; same && a < args.size(); ++a)
    same = args[a].value == expected++;
  for (NodeId i = 0; same && i < count; ++i) {
    same = order[i] == i;
    for (ValueId r : nodes[i].results)
      same = same && r == expected++;
  }
  return same && static_cast<size_t>(expected) == numValues;
}

} // namespace

void Graph::compact() {
  // Nothing to do (the pass manager compacts after every pass): the order below would keep
  // every node where it is. Checked without the walk, which chases every operand's definition.
  if (isCompact())
    return;
  applyOrder(definitionOrder(nodes_, values_));
}

void Graph::reorder(std::span<const NodeId> order) {
  std::vector<uint8_t> placed(nodes_.size(), 0);
  for (NodeId n : order) {
    assert(!nodes_[n].erased && !placed[n] && "reorder: each live node once");
    for (ValueId v : nodes_[n].operands)
      assert((values_[v].def == kNone || placed[values_[v].def]) && "reorder: operands first");
    placed[n] = 1;
  }
  assert(order.size() == static_cast<size_t>(std::count(placed.begin(), placed.end(), 1)));
  applyOrder(std::vector<NodeId>(order.begin(), order.end()));
}

void Graph::applyOrder(const std::vector<NodeId> &order) {
  const NodeId count = static_cast<NodeId>(nodes_.size());
  // Already compact: nothing changes, so the memory plan (indexed by value) stays.
  if (keepsNumbering(order, args_, nodes_, values_.size()))
    return;
  plan_.reset();
  // New ids: nodes by position in `order`; values canonically.
  std::vector<NodeId> newNode(count, kNone);
  for (size_t i = 0; i < order.size(); ++i)
    newNode[order[i]] = static_cast<NodeId>(i);
  std::vector<ValueId> newValue(values_.size(), kNone);
  std::vector<Value> values;
  values.reserve(values_.size());
  for (size_t a = 0; a < args_.size(); ++a) {
    newValue[args_[a].value] = static_cast<ValueId>(values.size());
    values.push_back(
        Value{std::move(values_[args_[a].value].type), kNone, static_cast<int32_t>(a)});
  }
  std::vector<Node> nodes;
  nodes.reserve(order.size());
  for (NodeId old : order) {
    Node n = std::move(nodes_[old]);
    for (size_t r = 0; r < n.results.size(); ++r) {
      newValue[n.results[r]] = static_cast<ValueId>(values.size());
      values.push_back(Value{std::move(values_[n.results[r]].type),
                             static_cast<NodeId>(nodes.size()), static_cast<int32_t>(r)});
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

} // namespace kiln::ir

// Graph construction and the verifier.
#include "ir/graph.h"

#include <cassert>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln::ir {

std::string paramInitString(const ParamInit &init) {
  AttrValue scale = init.scale;
  switch (init.kind) {
  case ParamInit::Kind::Zeros: return "zeros";
  case ParamInit::Kind::Ones: return "ones";
  case ParamInit::Kind::Normal: return fmt::format("normal({})", attrValueString(scale));
  case ParamInit::Kind::Uniform: return fmt::format("uniform({})", attrValueString(scale));
  case ParamInit::Kind::XavierUniform: return fmt::format("xavier_uniform({})", attrValueString(scale));
  }
  return "?";
}

ValueId Graph::newValue(Type type, NodeId def, int32_t index) {
  values_.push_back(Value{std::move(type), def, index});
  return static_cast<ValueId>(values_.size() - 1);
}

ValueId Graph::addInput(std::string name, Type type, int64_t range) {
  ValueId v = newValue(std::move(type), kNone, static_cast<int32_t>(args_.size()));
  args_.push_back(Arg{Arg::Kind::Input, std::move(name), v, {}, range});
  return v;
}

ValueId Graph::addParam(std::string name, Type type, ParamInit init) {
  ValueId v = newValue(std::move(type), kNone, static_cast<int32_t>(args_.size()));
  args_.push_back(Arg{Arg::Kind::Param, std::move(name), v, init, 0});
  return v;
}

ValueId Graph::addState(std::string name, Type type, ParamInit init) {
  ValueId v = newValue(std::move(type), kNone, static_cast<int32_t>(args_.size()));
  args_.push_back(Arg{Arg::Kind::State, std::move(name), v, init, 0});
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
  NodeId id = static_cast<NodeId>(nodes_.size());
  Node n{op, std::move(operands), {}, std::move(attrs), std::move(loc), pos, kNone};
  for (size_t i = 0; i < resultTypes.size(); ++i)
    n.results.push_back(newValue(resultTypes[i], id, static_cast<int32_t>(i)));
  nodes_.push_back(std::move(n));
  return id;
}

void Graph::addOutput(std::string name, ValueId value) { outputs_.push_back({std::move(name), value}); }

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

  std::set<std::string> names;
  for (const Arg &a : g.args()) {
    if (a.name.empty())
      report("graph arguments", fmt::format("{} has an empty name",
                                            a.kind == Arg::Kind::Input ? "an input" : "a parameter"));
    else if (!names.insert(a.name).second)
      report("graph arguments", fmt::format("the name \"{}\" is used twice", a.name));
    for (int64_t d : g.type(a.value).shape)
      if (d < 0) {
        report(fmt::format("argument \"{}\"", a.name),
               fmt::format("type {} has a negative dimension", typeString(g.type(a.value))));
        break;
      }
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
        report(where, fmt::format("has {} results, expected {}", n.results.size(), inferred->size()));
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
    for (ValueId r : n.results)
      if (r >= 0 && r < g.numValues())
        defined[r] = true;
  }

  std::set<std::string> outNames;
  for (const Output &o : g.outputs()) {
    if (o.value < 0 || o.value >= g.numValues() || !defined[o.value])
      report(fmt::format("output \"{}\"", o.name), fmt::format("value %{} is not defined", o.value));
    if (!outNames.insert(o.name).second)
      report(fmt::format("output \"{}\"", o.name), "the name is used twice");
  }
  if (g.outputs().empty())
    report(fmt::format("graph @{}", g.name()), "has no outputs");
  return errors;
}

} // namespace kiln::ir

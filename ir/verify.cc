// The verifier: every problem of a graph, each with its place (see ir/graph.h verify).
#include <string_view>
#include <unordered_set>

#include <fmt/format.h>

#include "ir/graph.h"
#include "ir/lexer.h"
#include "support/utf8.h"

namespace kiln::ir {
std::string placeOf(const Node &n, NodeId id) {
  if (!n.pos.empty())
    return fmt::format("{}:{}", n.pos.line, n.pos.col);
  if (!n.loc.empty())
    return n.loc.scope.empty() ? fmt::format("{}:{}", n.loc.file, n.loc.line)
                               : fmt::format("{}:{} (in {})", n.loc.file, n.loc.line, n.loc.scope);
  return fmt::format("node #{}", id);
}

Status checkOutputRole(const Graph &g, const Output &o, bool defined) {
  bool ofArg = o.arg >= 0 && o.arg < static_cast<int32_t>(g.args().size());
  switch (o.role) {
  case OutputRole::Value:
  case OutputRole::Loss:
    if (o.arg != kNone)
      return makeError("a {} output names no argument", outputRoleName(o.role));
    if (o.role == OutputRole::Loss && defined &&
        !(isFloat(g.type(o.value).dtype) && g.type(o.value).numElements() == 1))
      return makeError("the loss must be a float scalar, it is {}", typeString(g.type(o.value)));
    return {};
  case OutputRole::Gradient:
  case OutputRole::Update: {
    std::string_view role = outputRoleName(o.role);
    if (!ofArg)
      return makeError("a {} output names argument #{}, which does not exist", role, o.arg);
    const Arg &a = g.args()[o.arg];
    if (o.role == OutputRole::Update && a.kind == Arg::Kind::Input)
      return makeError("an update is of a parameter or state, but \"{}\" is an input", a.name);
    if (defined && g.type(o.value) != g.type(a.value))
      return makeError("the {} of \"{}\" is {}, but \"{}\" is {}", role, a.name,
                       typeString(g.type(o.value)), a.name, typeString(g.type(a.value)));
    return {};
  }
  }
  return {};
}

namespace {

// verify's checks, each part of the graph in turn; every problem is reported, none stops it.
struct Verifier {
  const Graph &g;
  std::vector<Error> errors;
  // A value is defined once it is an argument or the result of an earlier node.
  std::vector<bool> defined;

  explicit Verifier(const Graph &graph) : g(graph), defined(graph.numValues(), false) {}

  void report(std::string where, std::string what) {
    errors.push_back(Error{fmt::format("{}: {}", where, what)});
  }
  // Names go on into safetensors and C headers: UTF-8, without NUL bytes.
  void checkName(std::string_view what, const std::string &name) {
    if (name.find('\0') != std::string::npos || !isValidUtf8(name))
      report(fmt::format("{} {}", what, quoteString(name)),
             "the name must be valid UTF-8 without NUL bytes");
  }

  void arguments() {
    checkName("graph", g.name());
    std::unordered_set<std::string_view> names; // lookups only; views of the graph's names
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
      defined[a.value] = true;
    }
    for (const Arg &a : g.args())
      if (const std::string_view of = bf16CopySource(a.name);
          a.kind == Arg::Kind::State && !of.empty()) {
        // the runtime writes it from its parameter (support/param_init.h): there must be one
        const Arg *p = g.findArg(of);
        if (!p || p->kind != Arg::Kind::Param || g.type(p->value).dtype != DType::F32 ||
            g.type(a.value) != Type{DType::BF16, g.type(p->value).shape})
          report(fmt::format("state \"{}\"", a.name),
                 fmt::format("a bf16 copy must be bf16 of the shape of the f32 parameter \"{}\"",
                             of));
      }
  }

  // The node's attributes against its op's declaration; false where they cannot be read.
  bool attributes(const Node &n, const OpInfo &op, const std::string &where) {
    if (n.attrs.spec().data() != op.attrs.data() || n.attrs.values().size() != op.attrs.size()) {
      report(where, "attributes do not match the op's declaration");
      return false;
    }
    for (size_t i = 0; i < op.attrs.size(); ++i)
      if (kindOf(n.attrs.values()[i]) != op.attrs[i].kind)
        report(where, fmt::format("attribute '{}' must be of kind {}", op.attrs[i].name,
                                  attrKindName(op.attrs[i].kind)));
    return true;
  }

  // The result types against what the op's inference gives for the operands' types.
  void results(const Node &n, const std::vector<Type> &types, const std::string &where) {
    Expected<std::vector<Type>> inferred = inferTypes(n.op, types, n.attrs);
    if (!inferred) {
      report(where, inferred.error().message);
      return;
    }
    if (inferred->size() != n.results.size()) {
      report(where, fmt::format("has {} results, expected {}", n.results.size(), inferred->size()));
      return;
    }
    for (size_t i = 0; i < n.results.size(); ++i) {
      const Type &have = g.type(n.results[i]);
      if (have != (*inferred)[i])
        report(where, fmt::format("result {} is declared {} but the operands give {}", i,
                                  typeString(have), typeString((*inferred)[i])));
    }
  }

  void node(NodeId id) {
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
    if (attributes(n, op, where) && operandsOk)
      results(n, types, where);
    if (n.gradOf != kNone && (n.gradOf < 0 || n.gradOf >= static_cast<NodeId>(g.nodes().size())))
      report(where, fmt::format("grad_of names node #{}, which does not exist", n.gradOf));
    else if (n.gradOf == id)
      report(where, "grad_of names the node itself");
    for (ValueId r : n.results)
      if (r >= 0 && r < g.numValues())
        defined[r] = true;
  }

  void outputs() {
    std::unordered_set<std::string_view> outNames;
    std::vector<int> updates(g.args().size(), 0);
    int losses = 0;
    for (const Output &o : g.outputs()) {
      checkName("output", o.name);
      std::string where = fmt::format("output \"{}\"", o.name);
      bool isDefined = o.value >= 0 && o.value < g.numValues() && defined[o.value];
      if (!isDefined)
        report(where, fmt::format("value %{} is not defined", o.value));
      if (!outNames.insert(o.name).second)
        report(where, "the name is used twice");
      if (Status s = checkOutputRole(g, o, isDefined); !s)
        report(where, s.error().message);
      bool ofArg = o.arg >= 0 && o.arg < static_cast<int32_t>(g.args().size());
      if (o.role == OutputRole::Loss && ++losses == 2)
        report(where, "a second loss output: a graph has at most one");
      if (o.role == OutputRole::Update && ofArg && ++updates[o.arg] == 2)
        report(where, fmt::format("a second update of \"{}\": an argument has at most one",
                                  g.args()[o.arg].name));
    }
    if (g.outputs().empty())
      report(fmt::format("graph @{}", g.name()), "has no outputs");
  }
};

} // namespace

std::vector<Error> verify(const Graph &g) {
  Verifier v(g);
  v.arguments();
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()); ++id)
    v.node(id);
  v.outputs();
  // A plan is only meaningful for a graph that is otherwise sound (its checks index by operand).
  if (v.errors.empty() && g.memoryPlan())
    return verifyMemoryPlan(g);
  return std::move(v.errors);
}

} // namespace kiln::ir

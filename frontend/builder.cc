// The Builder: graph arguments, attribute-only values, node insertion with the DSL place, and
// the error messages that put the user's line first.
#include "frontend/builder.h"

#include <fmt/format.h>

#include "frontend/tensor.h"

namespace kiln::frontend {

ir::SourceLoc toSourceLoc(const std::source_location &loc) {
  return ir::SourceLoc{loc.file_name(), static_cast<uint32_t>(loc.line())};
}

Builder::Builder(std::string graphName, ir::DType dtype, int64_t seed)
    : graph_(std::move(graphName)), dtype_(dtype), nextSeed_(seed) {}

ir::Graph Builder::finish(std::source_location loc) {
  if (graph_.outputs().empty())
    fail("finish", loc, "the graph has no outputs: give it one with output() or loss()");
  return std::move(graph_);
}

Tensor Builder::input(std::string name, ir::Type type, int64_t range, std::source_location loc) {
  if (name.empty() || argNames_.contains(name))
    fail("input", loc, fmt::format("the name \"{}\" is empty or used twice", name));
  if (Status s = ir::checkType(type); !s)
    fail("input", loc, fmt::format("\"{}\": {}", name, s.error().message));
  if (range < 0 || (range > 0 && ir::isFloat(type.dtype)))
    fail("input", loc,
         fmt::format("\"{}\": range {}: a range is positive, and only an integer input has one",
                     name, range));
  argNames_.insert(name);
  return Tensor(*this, graph_.addInput(std::move(name), std::move(type), range));
}

Tensor Builder::param(std::string name, ir::Shape shape, ir::ParamInit init,
                      std::source_location loc) {
  if (name.empty() || argNames_.contains(name))
    fail("parameter", loc, fmt::format("the name \"{}\" is empty or used twice", name));
  for (int64_t d : shape)
    if (d <= 0)
      fail("parameter", loc,
           fmt::format("\"{}\" has shape {}: dimensions must be positive", name,
                       ir::shapeString(shape)));
  if (Status s = ir::checkType(ir::Type{dtype_, shape}); !s)
    fail("parameter", loc, fmt::format("\"{}\": {}", name, s.error().message));
  argNames_.insert(name);
  return Tensor(*this, graph_.addParam(std::move(name), ir::Type{dtype_, std::move(shape)}, init));
}

Tensor Builder::state(std::string name, ir::Type type, std::source_location loc) {
  if (name.empty() || argNames_.contains(name))
    fail("state", loc, fmt::format("the name \"{}\" is empty or used twice", name));
  if (Status s = ir::checkType(type); !s)
    fail("state", loc, fmt::format("\"{}\": {}", name, s.error().message));
  argNames_.insert(name);
  return Tensor(*this, graph_.addState(std::move(name), std::move(type), ir::ParamInit{}));
}

void Builder::update(const Tensor &state, const Tensor &next, std::source_location loc) {
  const ir::Value &v = graph_.value(use(state, "update", loc));
  if (v.def != ir::kNone || graph_.args()[v.index].kind != ir::Arg::Kind::State)
    fail("update", loc, "the tensor updated is not a state");
  ir::Output o{"new." + graph_.args()[v.index].name, use(next, "update", loc),
               ir::OutputRole::Update, v.index};
  if (outputNames_.contains(o.name))
    fail("update", loc, fmt::format("\"{}\" is updated twice", graph_.args()[v.index].name));
  if (Status s = ir::checkOutputRole(graph_, o); !s)
    fail("update", loc, s.error().message);
  outputNames_.insert(o.name);
  graph_.addOutput(std::move(o.name), o.value, o.role, o.arg);
}

void Builder::probe(std::string name, const Tensor &value, std::source_location loc) {
  if (probing_)
    probes_.emplace_back(std::move(name), use(value, "probe", loc));
}

void Builder::output(std::string name, const Tensor &value, std::source_location loc) {
  if (name.empty() || !outputNames_.insert(name).second)
    fail("output", loc, fmt::format("the name \"{}\" is empty or used twice", name));
  graph_.addOutput(std::move(name), use(value, "output", loc));
}

void Builder::loss(std::string name, const Tensor &value, std::source_location loc) {
  if (name.empty() || outputNames_.contains(name))
    fail("loss", loc, fmt::format("the name \"{}\" is empty or used twice", name));
  if (graph_.findOutput(ir::OutputRole::Loss))
    fail("loss", loc, "the graph has a loss already");
  ir::Output o{std::move(name), use(value, "loss", loc), ir::OutputRole::Loss};
  if (Status s = ir::checkOutputRole(graph_, o); !s)
    fail("loss", loc, s.error().message);
  outputNames_.insert(o.name);
  graph_.addOutput(std::move(o.name), o.value, o.role);
}

Tensor Builder::constant(double value, ir::Shape shape, ir::DType dtype, std::source_location loc) {
  return op(ir::OpKind::Constant, {}, {{"value", value}, {"shape", shape}, {"dtype", dtype}}, loc);
}

Tensor Builder::scalar(double value, ir::DType dtype, std::source_location loc) {
  return constant(value, {}, dtype, loc);
}

Tensor Builder::iota(ir::Shape shape, int64_t axis, ir::DType dtype, std::source_location loc) {
  return op(ir::OpKind::Iota, {}, {{"shape", shape}, {"axis", axis}, {"dtype", dtype}}, loc);
}

Tensor Builder::tri(ir::Shape shape, int64_t diagonal, bool lower, ir::DType dtype,
                    std::source_location loc) {
  return op(ir::OpKind::Tri, {},
            {{"shape", shape}, {"diagonal", diagonal}, {"lower", lower}, {"dtype", dtype}}, loc);
}

ir::SourceLoc Builder::nodeLoc(const std::source_location &loc) const {
  if (frames_.empty())
    return toSourceLoc(loc);
  // The user's line (the outermost module call) in the module that made the node.
  ir::SourceLoc at = frames_.front().loc;
  at.scope = frames_.back().module;
  return at;
}

ir::ValueId Builder::use(const Tensor &t, std::string_view op,
                         const std::source_location &loc) const {
  if (!t.valid())
    fail(op, loc, fmt::format("an operand is {}", kEmptyTensor));
  if (&t.builder() != this) // (compared, not read: that Builder may be gone)
    fail(op, loc,
         fmt::format("an operand is a value of another Builder, not of graph @{} (a Tensor "
                     "belongs to the Builder that made it)",
                     graph_.name()));
  return t.id();
}

std::vector<Tensor> Builder::opMulti(ir::OpKind kind, std::span<const ir::ValueId> operands,
                                     std::initializer_list<ir::AttrInit> attrs,
                                     const std::source_location &loc) {
  ir::Attrs a(ir::opInfo(kind).attrs);
  for (const ir::AttrInit &init : attrs)
    if (Status s = a.set(init.first, init.second); !s)
      fail(ir::mnemonic(kind), loc, s.error().message);
  Expected<ir::NodeId> n = graph_.addNode(kind, operands, std::move(a), nodeLoc(loc));
  if (!n)
    fail(ir::mnemonic(kind), loc, n.error().message);
  std::vector<Tensor> results;
  for (ir::ValueId v : graph_.node(*n).results)
    results.emplace_back(*this, v);
  return results;
}

Tensor Builder::op(ir::OpKind kind, std::span<const ir::ValueId> operands,
                   std::initializer_list<ir::AttrInit> attrs, const std::source_location &loc) {
  std::vector<Tensor> results = opMulti(kind, operands, attrs, loc);
  assert(results.size() == 1);
  return results[0];
}

void Builder::fail(std::string_view what, const std::source_location &loc,
                   std::string_view detail) const {
  ir::SourceLoc here = toSourceLoc(loc);
  std::string place = fmt::format("{}:{}", here.file, here.line);
  if (!frames_.empty()) {
    // The user's line first (the outermost module call), then the module and the op's own line.
    const Frame &outer = frames_.front(), &inner = frames_.back();
    std::string in = inner.module.empty() ? "" : fmt::format("in {}: ", inner.module);
    place = fmt::format("{}:{}: {}{}", outer.loc.file, outer.loc.line, in, place);
  }
  throw DslError(fmt::format("{}: {}: {}", place, what, detail));
}

Builder::CallFrame::CallFrame(Builder &b, std::string module, const std::source_location &loc)
    : b_(b) {
  b_.frames_.push_back(Frame{std::move(module), toSourceLoc(loc)});
}

Builder::CallFrame::~CallFrame() {
  b_.frames_.pop_back();
}

Scope Scope::child(std::string_view name) const {
  return Scope(*b_, path_.empty() ? std::string(name) : fmt::format("{}.{}", path_, name));
}

std::string Scope::qualify(std::string_view leaf) const {
  return child(leaf).path();
}

} // namespace kiln::frontend

// The compiler-internal IR builder (see builder.h).
#include "ir/builder.h"

#include <cassert>

namespace kiln::ir {

ValueId Builder::emit(OpKind op, std::span<const ValueId> operands, Attrs attrs) {
  Expected<NodeId> n = graph.addNode(op, operands, std::move(attrs), loc_);
  assert(n.ok() && "the compiler built an ill-typed node");
  if (!n.ok())
    return kNone;
  graph.node(*n).gradOf = gradOf_;
  return graph.result(*n);
}

ValueId Builder::emit(OpKind op, std::initializer_list<ValueId> operands,
                      std::initializer_list<AttrInit> attrs) {
  Attrs a(opInfo(op).attrs);
  for (const AttrInit &init : attrs) {
    [[maybe_unused]] Status s = a.set(init.first, init.second);
    assert(s.ok() && "the compiler set a bad attribute");
  }
  return emit(op, std::span<const ValueId>(operands.begin(), operands.size()), std::move(a));
}

ValueId Builder::scalar(double value, DType t) {
  return emit(OpKind::Constant, {}, {{"value", value}, {"dtype", t}});
}

ValueId Builder::full(double value, const Type &t) {
  return emit(OpKind::Constant, {}, {{"value", value}, {"shape", t.shape}, {"dtype", t.dtype}});
}

ValueId Builder::concat(std::span<const ValueId> parts, int64_t axis) {
  Attrs attrs(opInfo(OpKind::Concat).attrs);
  [[maybe_unused]] Status set = attrs.set("axis", axis);
  return emit(OpKind::Concat, parts, std::move(attrs));
}

ValueId Builder::sumToShape(ValueId v, Shape shape) {
  Shape from = type(v).shape; // a copy: emit() below may move the graph's values
  if (from == shape)
    return v;
  // Leading axes that broadcasting added, then axes where the operand had size 1.
  assert(from.size() >= shape.size() && "sumToShape cannot add dimensions");
  size_t lead = from.size() - shape.size();
  std::vector<int64_t> axes;
  for (size_t i = 0; i < from.size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && from[i] != 1))
      axes.push_back(static_cast<int64_t>(i));
  ValueId summed = axes.empty() ? v : sum(v, axes, true);
  return type(summed).shape == shape ? summed : reshape(summed, shape);
}

} // namespace kiln::ir

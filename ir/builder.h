// Emitting IR from C++ inside the compiler: gradient rules, optimizer updates, decompositions.
// (Model authors use the DSL in frontend/, which reports their mistakes at their own lines; the
// compiler builds well-typed IR by construction, so here an ill-typed node is a bug: asserted.)
#pragma once

#include <initializer_list>
#include <span>

#include "ir/graph.h"

namespace kiln::ir {

class Builder {
public:
  // Every node emitted gets `loc`, and `gradOf` when it is part of a node's gradient.
  explicit Builder(Graph &g, SourceLoc loc = {}, NodeId gradOf = kNone)
      : graph(g), loc_(std::move(loc)), gradOf_(gradOf) {}

  Graph &graph;
  const Type &type(ValueId v) const { return graph.type(v); }

  ValueId emit(OpKind op, std::span<const ValueId> operands, Attrs attrs);
  ValueId emit(OpKind op, std::initializer_list<ValueId> operands,
               std::initializer_list<AttrInit> attrs = {});

  ValueId scalar(double value, DType t); // constant of shape []
  ValueId full(double value, const Type &t);
  ValueId add(ValueId a, ValueId b) { return emit(OpKind::Add, {a, b}); }
  ValueId sub(ValueId a, ValueId b) { return emit(OpKind::Sub, {a, b}); }
  ValueId mul(ValueId a, ValueId b) { return emit(OpKind::Mul, {a, b}); }
  ValueId div(ValueId a, ValueId b) { return emit(OpKind::Div, {a, b}); }
  ValueId neg(ValueId a) { return emit(OpKind::Neg, {a}); }
  ValueId select(ValueId p, ValueId a, ValueId b) { return emit(OpKind::Select, {p, a, b}); }
  ValueId cast(ValueId a, DType t) { return emit(OpKind::Cast, {a}, {{"dtype", t}}); }
  ValueId reshape(ValueId a, const Shape &s) { return emit(OpKind::Reshape, {a}, {{"shape", s}}); }
  ValueId concat(std::span<const ValueId> parts, int64_t axis);
  ValueId sum(ValueId a, std::vector<int64_t> axes, bool keepdims) {
    return emit(OpKind::ReduceSum, {a}, {{"axes", std::move(axes)}, {"keepdims", keepdims}});
  }
  // Undoes numpy broadcasting: sums `v` over the axes broadcasting added or stretched, so that
  // the result has `shape`. (Shapes are taken by value: emitting nodes grows the graph's value
  // list, which would invalidate a reference into it.)
  ValueId sumToShape(ValueId v, Shape shape);

private:
  SourceLoc loc_;
  NodeId gradOf_;
};

} // namespace kiln::ir

// Matcher and rewriting helpers shared by the fusion passes (fuse_attention.cc,
// fuse_layer_norm.cc): what a value is made of (a uniform constant, a reduction over the last
// axis, an elementwise product or sum) and emitting the glue (reshape, broadcast, transpose) a
// fused op's operands need. What uses what, and dropping what died: use_index.h.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "ir/builder.h"
#include "ir/graph.h"

namespace kiln::passes::pattern {

// The live node defining `v`, or nullptr for a graph argument.
const ir::Node *defOf(const ir::Graph &g, ir::ValueId v);
// The defining node if it is of kind `op`, else nullptr.
const ir::Node *defIs(const ir::Graph &g, ir::ValueId v, ir::OpKind op);

// If every element of `v` is one known number, that number as `v` holds it (bf16-rounded for
// bf16): a constant, or casts, broadcasts, reshapes and elementwise math of such.
std::optional<double> uniformValue(const ir::Graph &g, ir::ValueId v);
bool isUniform(const ir::Graph &g, ir::ValueId v, double value);

// Whether numpy broadcasting `small` against `shape` gives `shape` (it adds nothing).
bool broadcastsInto(std::span<const int64_t> small, std::span<const int64_t> shape);

// If `v` scales x by a uniform constant without changing x's shape -- mul(x, c), mul(c, x),
// div(x, c), neg(x) -- returns x and multiplies `factor` by c (1/c, -1).
std::optional<ir::ValueId> peelScalar(const ir::Graph &g, ir::ValueId v, double &factor);

// Whether a reduction node reduces exactly the last axis of its operand.
bool reducesLastAxis(const ir::Graph &g, const ir::Node &n);

// Elementwise products and sums, flattened through their nodes:
//   v = prod_i f_i^(e_i)  (mul and div; e = +1 or -1),   v = sum_i s_i t_i  (add, sub, neg).
// Only nodes whose result has v's dtype take part; productFactors keeps `stop` whole.
struct Factor {
  ir::ValueId v;
  int exponent;
};
struct Term {
  ir::ValueId v;
  double coef;
};
std::vector<Factor> productFactors(const ir::Graph &g, ir::ValueId v, ir::ValueId stop = ir::kNone);
std::vector<Term> sumTerms(const ir::Graph &g, ir::ValueId v);
// Whether at most `most` of the terms sumTerms(g, v) reads fail `keep`. Visits the sum breadth
// first and stops at the first term too many, so a long chain of sums (a residual stream, a sum
// over every layer) is not walked down to its far end for each of its nodes.
bool fewTermsFail(const ir::Graph &g, ir::ValueId v, int most,
                  const std::function<bool(ir::ValueId)> &keep);

// ---- Emitting ----
// Each returns `v` itself when nothing needs doing; reshapeTo and transposed also look through a
// reshape / transpose that defines `v` rather than stacking a second one on it.
ir::ValueId reshapeTo(ir::Builder &b, ir::ValueId v, const ir::Shape &shape);
ir::ValueId broadcastTo(ir::Builder &b, ir::ValueId v, const ir::Shape &shape);
ir::ValueId castTo(ir::Builder &b, ir::ValueId v, ir::DType dtype);
// transpose(v, perm); if v is itself a transpose, one transpose of its operand (or the operand).
ir::ValueId transposed(ir::Builder &b, ir::ValueId v, std::vector<int64_t> perm);
// The permutation of a rank-r tensor that swaps its last two dims.
std::vector<int64_t> swapLastTwo(int64_t rank);
// Appends a node with several results (Builder::emit is for single-result ops) at `loc`.
std::vector<ir::ValueId> emitMulti(ir::Builder &b, ir::OpKind op, std::span<const ir::ValueId> ops,
                                   std::initializer_list<ir::AttrInit> attrs,
                                   const ir::SourceLoc &loc);

} // namespace kiln::passes::pattern

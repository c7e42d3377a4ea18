// The DSL's value handle: a Tensor is (builder, SSA value); its operators and methods append IR
// nodes. Every call takes a defaulted std::source_location, so each node records the user's
// line and a shape mistake throws a DslError naming that line.
//
// Binary operators cannot take default arguments, so their right operand (an Operand: a Tensor
// or a scalar) captures the location in its converting constructor; a scalar becomes a rank-0
// constant of the other side's dtype, which then broadcasts: `x * 0.5`, `1.0 - p`.
#pragma once

#include <cstdint>
#include <source_location>
#include <vector>

#include "frontend/builder.h"
#include "ir/graph.h"

namespace kiln::frontend {

class Operand;

struct MatmulFlags {
  bool transposeA = false; // a is stored [..., K, M]
  bool transposeB = false; // b is stored [..., N, K] (a Linear weight)
};

class Tensor {
public:
  Tensor() = default;
  Tensor(Builder &b, ir::ValueId id) : b_(&b), id_(id) {}

  bool valid() const { return b_ != nullptr; }
  Builder &builder() const { return *b_; }
  // The same, where the tensor is used at `loc`: an empty Tensor (default-constructed, never given
  // a value) has none, and is a DslError there (it was a null dereference).
  Builder &builder(const std::source_location &loc) const;
  ir::ValueId id() const { return id_; }
  // (Of an empty Tensor: a DslError without a place, where the methods give the caller's.)
  const ir::Type &type() const;
  const ir::Shape &shape() const { return type().shape; }
  ir::DType dtype() const { return type().dtype; }
  int64_t rank() const { return type().rank(); }
  // Size of `axis` (negative counts from the end).
  int64_t dim(int64_t axis, std::source_location loc = std::source_location::current()) const;

  // ---- Linear algebra ----
  // [..., M, K] x [..., K, N] -> [..., M, N], batch dims broadcast.
  Tensor matmul(const Tensor &b, MatmulFlags flags = {},
                std::source_location loc = std::source_location::current()) const;

  // ---- Data movement ----
  // One dimension may be -1: it is whatever makes the element count match.
  Tensor reshape(ir::Shape shape, std::source_location loc = std::source_location::current()) const;
  // Swaps two dimensions.
  Tensor transpose(int64_t a, int64_t b,
                   std::source_location loc = std::source_location::current()) const;
  // Result dim i is this tensor's dim perm[i].
  Tensor permute(std::vector<int64_t> perm,
                 std::source_location loc = std::source_location::current()) const;
  Tensor broadcastTo(ir::Shape shape,
                     std::source_location loc = std::source_location::current()) const;
  // Inserts / removes a size-1 dimension.
  Tensor unsqueeze(int64_t axis, std::source_location loc = std::source_location::current()) const;
  Tensor squeeze(int64_t axis, std::source_location loc = std::source_location::current()) const;
  // x[start:end:step] along `axis`; negative start/end count from the end, as in Python.
  Tensor slice(int64_t axis, int64_t start, int64_t end, int64_t step = 1,
               std::source_location loc = std::source_location::current()) const;
  // this[..., indices, ...] along `axis`; an embedding lookup is table.gather(ids).
  Tensor gather(const Tensor &indices, int64_t axis = 0,
                std::source_location loc = std::source_location::current()) const;

  // ---- Reductions (empty axes = all) ----
  Tensor sum(std::vector<int64_t> axes = {}, bool keepdims = false,
             std::source_location loc = std::source_location::current()) const;
  Tensor mean(std::vector<int64_t> axes = {}, bool keepdims = false,
              std::source_location loc = std::source_location::current()) const;
  Tensor max(std::vector<int64_t> axes = {}, bool keepdims = false,
             std::source_location loc = std::source_location::current()) const;
  Tensor softmax(int64_t axis = -1,
                 std::source_location loc = std::source_location::current()) const;
  Tensor logSoftmax(int64_t axis = -1,
                    std::source_location loc = std::source_location::current()) const;

  // ---- Elementwise ----
  Tensor exp(std::source_location loc = std::source_location::current()) const;
  Tensor log(std::source_location loc = std::source_location::current()) const;
  Tensor sqrt(std::source_location loc = std::source_location::current()) const;
  Tensor rsqrt(std::source_location loc = std::source_location::current()) const;
  Tensor tanh(std::source_location loc = std::source_location::current()) const;
  Tensor sigmoid(std::source_location loc = std::source_location::current()) const;
  Tensor relu(std::source_location loc = std::source_location::current()) const;
  Tensor gelu(std::source_location loc = std::source_location::current()) const;
  Tensor geluTanh(std::source_location loc = std::source_location::current()) const;
  Tensor silu(std::source_location loc = std::source_location::current()) const;
  Tensor softplus(std::source_location loc = std::source_location::current()) const;
  Tensor sin(std::source_location loc = std::source_location::current()) const;
  Tensor cos(std::source_location loc = std::source_location::current()) const;
  Tensor abs(std::source_location loc = std::source_location::current()) const;
  Tensor maximum(const Operand &o,
                 std::source_location loc = std::source_location::current()) const;
  Tensor minimum(const Operand &o,
                 std::source_location loc = std::source_location::current()) const;
  Tensor pow(const Operand &o, std::source_location loc = std::source_location::current()) const;
  // clip to [lo, hi]
  Tensor clamp(double lo, double hi,
               std::source_location loc = std::source_location::current()) const;

  // ---- Comparisons (-> bool) and logic ----
  Tensor eq(const Operand &o, std::source_location loc = std::source_location::current()) const;
  Tensor ne(const Operand &o, std::source_location loc = std::source_location::current()) const;
  Tensor lt(const Operand &o, std::source_location loc = std::source_location::current()) const;
  Tensor le(const Operand &o, std::source_location loc = std::source_location::current()) const;
  Tensor gt(const Operand &o, std::source_location loc = std::source_location::current()) const;
  Tensor ge(const Operand &o, std::source_location loc = std::source_location::current()) const;
  Tensor logicalNot(std::source_location loc = std::source_location::current()) const;

  // ---- Conversions and noise ----
  Tensor cast(ir::DType dtype, std::source_location loc = std::source_location::current()) const;
  // Zeroes each element with probability p and scales the rest by 1/(1-p). p = 0 adds no node.
  // The rng stream is the builder's next dropout seed, unless given.
  Tensor dropout(double p, std::source_location loc = std::source_location::current()) const;
  Tensor dropout(double p, int64_t seed,
                 std::source_location loc = std::source_location::current()) const;

  // ---- Used by the operators below ----
  Tensor unary(ir::OpKind kind, const std::source_location &loc) const;
  Tensor binary(ir::OpKind kind, const Operand &o, const std::source_location &loc) const;

private:
  Tensor reduce(ir::OpKind kind, std::vector<int64_t> axes, bool keepdims,
                const std::source_location &loc) const;

  Builder *b_ = nullptr;
  ir::ValueId id_ = ir::kNone;
};

// The right-hand side of a binary op: a Tensor or a scalar, with the place it was written.
class Operand {
public:
  Operand(const Tensor &t, std::source_location loc = std::source_location::current())
      : tensor_(t), isTensor_(true), loc_(loc) {}
  Operand(double value, std::source_location loc = std::source_location::current())
      : value_(value), loc_(loc) {}

  // (An empty Tensor is a tensor operand, refused where it is used: it was read as the scalar 0.)
  bool isScalar() const { return !isTensor_; }
  double value() const { return value_; }
  const std::source_location &loc() const { return loc_; }
  // The operand as a tensor: a scalar becomes a rank-0 constant of `like`'s dtype.
  Tensor resolve(const Tensor &like) const;

private:
  Tensor tensor_;
  bool isTensor_ = false;
  double value_ = 0;
  std::source_location loc_;
};

// A Tensor with the place it was written: the operand of unary operators and the right side
// of `scalar OP tensor`.
class Located {
public:
  Located(const Tensor &t, std::source_location loc = std::source_location::current())
      : tensor(t), loc(loc) {}
  Tensor tensor;
  std::source_location loc;
};

// ---- Operators ----
Tensor operator+(const Tensor &a, const Operand &b);
Tensor operator-(const Tensor &a, const Operand &b);
Tensor operator*(const Tensor &a, const Operand &b);
Tensor operator/(const Tensor &a, const Operand &b);
Tensor operator+(double a, const Located &b);
Tensor operator-(double a, const Located &b);
Tensor operator*(double a, const Located &b);
Tensor operator/(double a, const Located &b);
Tensor operator-(const Located &x);
Tensor &operator+=(Tensor &a, const Operand &b);
Tensor &operator-=(Tensor &a, const Operand &b);
Tensor &operator*=(Tensor &a, const Operand &b);
Tensor &operator/=(Tensor &a, const Operand &b);
// Logic on bool tensors.
Tensor operator&(const Tensor &a, const Operand &b);
Tensor operator|(const Tensor &a, const Operand &b);
Tensor operator!(const Located &x);

// ---- Free-function spellings, for code that reads like the paper ----
Tensor matmul(const Tensor &a, const Tensor &b, MatmulFlags flags = {},
              std::source_location loc = std::source_location::current());
// cond ? onTrue : onFalse, broadcasting all three; a scalar branch takes the other's dtype.
Tensor where(const Tensor &cond, const Operand &onTrue, const Operand &onFalse,
             std::source_location loc = std::source_location::current());
Tensor concat(const std::vector<Tensor> &xs, int64_t axis,
              std::source_location loc = std::source_location::current());
// base with, for each i along axis 0, its slice at index[i] along `axis` replaced by update's
// (update_slice: a KV cache's write, in place, of only those slices).
Tensor updateSlice(const Tensor &base, const Tensor &update, const Tensor &index, int64_t axis,
                   std::source_location loc = std::source_location::current());
Tensor softmax(const Tensor &x, int64_t axis = -1,
               std::source_location loc = std::source_location::current());
Tensor maximum(const Tensor &a, const Operand &b,
               std::source_location loc = std::source_location::current());
Tensor minimum(const Tensor &a, const Operand &b,
               std::source_location loc = std::source_location::current());

#define KILN_DSL_UNARY_FN(name)                                                                    \
  inline Tensor name(const Tensor &x,                                                              \
                     std::source_location loc = std::source_location::current()) {                 \
    return x.name(loc);                                                                            \
  }
KILN_DSL_UNARY_FN(exp)
KILN_DSL_UNARY_FN(log)
KILN_DSL_UNARY_FN(sqrt)
KILN_DSL_UNARY_FN(rsqrt)
KILN_DSL_UNARY_FN(tanh)
KILN_DSL_UNARY_FN(sigmoid)
KILN_DSL_UNARY_FN(relu)
KILN_DSL_UNARY_FN(gelu)
KILN_DSL_UNARY_FN(geluTanh)
KILN_DSL_UNARY_FN(silu)
KILN_DSL_UNARY_FN(sin)
KILN_DSL_UNARY_FN(cos)
KILN_DSL_UNARY_FN(abs)
#undef KILN_DSL_UNARY_FN

} // namespace kiln::frontend

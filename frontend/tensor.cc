// Tensor methods and operators: each appends one IR node (plus, for a scalar operand, one
// rank-0 constant) at the caller's place. The IR's inference checks shapes and dtypes; the DSL
// only resolves conveniences the IR does not have (reshape's -1, negative axes and bounds).
#include "frontend/tensor.h"

#include <numeric>

#include <fmt/format.h>

namespace kiln::frontend {

using ir::OpKind;

namespace {
// Maps a possibly negative axis into [0, rank), or fails at the caller's place.
int64_t axisOrFail(const Tensor &t, std::string_view op, int64_t axis, int64_t rank,
                   const std::source_location &loc) {
  Expected<int64_t> a = ir::normalizeAxis(axis, rank);
  if (!a)
    t.builder(loc).fail(
        op, loc, fmt::format("{} (operand {})", a.error().message, ir::typeString(t.type())));
  return *a;
}
} // namespace

Builder &Tensor::builder(const std::source_location &loc) const {
  if (!b_) // (no builder to ask: the message is made here)
    throw DslError(
        fmt::format("{}:{}: {} is used", toSourceLoc(loc).file, loc.line(), kEmptyTensor));
  return *b_;
}

const ir::Type &Tensor::type() const {
  if (!b_)
    throw DslError(fmt::format("{} is used", kEmptyTensor));
  return b_->graph().type(id_);
}

int64_t Tensor::dim(int64_t axis, std::source_location loc) const {
  return shape()[axisOrFail(*this, "dim", axis, rank(), loc)];
}

// ---- Linear algebra ----

Tensor Tensor::matmul(const Tensor &b, MatmulFlags flags, std::source_location loc) const {
  ir::ValueId ops[] = {id_, builder(loc).use(b, "matmul", loc)};
  return builder(loc).op(OpKind::Matmul, ops,
                         {{"transpose_a", flags.transposeA}, {"transpose_b", flags.transposeB}},
                         loc);
}

// ---- Data movement ----

Tensor Tensor::reshape(ir::Shape shape, std::source_location loc) const {
  int64_t known = 1, inferred = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1 && inferred >= 0)
      builder(loc).fail("reshape", loc,
                        fmt::format("more than one -1 in {}", ir::shapeString(shape)));
    if (shape[i] == -1)
      inferred = static_cast<int64_t>(i);
    else if (shape[i] < 0)
      builder(loc).fail("reshape", loc,
                        fmt::format("negative dimension in {}", ir::shapeString(shape)));
    else
      known = mulSat(known, shape[i]);
  }
  if (inferred >= 0) {
    int64_t total = type().numElements();
    if (known <= 0 || total % known != 0)
      builder(loc).fail("reshape", loc,
                        fmt::format("cannot reshape {} ({} elements) into {}",
                                    ir::typeString(type()), total, ir::shapeString(shape)));
    shape[inferred] = total / known;
  }
  ir::ValueId ops[] = {id_};
  return builder(loc).op(OpKind::Reshape, ops, {{"shape", shape}}, loc);
}

Tensor Tensor::transpose(int64_t a, int64_t b, std::source_location loc) const {
  std::vector<int64_t> perm(rank());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[axisOrFail(*this, "transpose", a, rank(), loc)],
            perm[axisOrFail(*this, "transpose", b, rank(), loc)]);
  return permute(std::move(perm), loc);
}

Tensor Tensor::permute(std::vector<int64_t> perm, std::source_location loc) const {
  ir::ValueId ops[] = {id_};
  return builder(loc).op(OpKind::Transpose, ops, {{"perm", std::move(perm)}}, loc);
}

Tensor Tensor::broadcastTo(ir::Shape shape, std::source_location loc) const {
  ir::ValueId ops[] = {id_};
  return builder(loc).op(OpKind::Broadcast, ops, {{"shape", std::move(shape)}}, loc);
}

Tensor Tensor::unsqueeze(int64_t axis, std::source_location loc) const {
  ir::Shape s = shape();
  int64_t a = axisOrFail(*this, "unsqueeze", axis, rank() + 1, loc);
  s.insert(s.begin() + a, 1);
  return reshape(std::move(s), loc);
}

Tensor Tensor::squeeze(int64_t axis, std::source_location loc) const {
  ir::Shape s = shape();
  int64_t a = axisOrFail(*this, "squeeze", axis, rank(), loc);
  if (s[a] != 1)
    builder(loc).fail(
        "squeeze", loc,
        fmt::format("dimension {} of {} is {}, expected 1", axis, ir::typeString(type()), s[a]));
  s.erase(s.begin() + a);
  return reshape(std::move(s), loc);
}

Tensor Tensor::slice(int64_t axis, int64_t start, int64_t end, int64_t step,
                     std::source_location loc) const {
  int64_t a = axisOrFail(*this, "slice", axis, rank(), loc);
  int64_t n = shape()[a];
  start = start < 0 ? start + n : start;
  end = end < 0 ? end + n : end;
  ir::ValueId ops[] = {id_};
  return builder(loc).op(OpKind::Slice, ops,
                         {{"axis", a}, {"start", start}, {"end", end}, {"step", step}}, loc);
}

Tensor Tensor::gather(const Tensor &indices, int64_t axis, std::source_location loc) const {
  ir::ValueId ops[] = {id_, builder(loc).use(indices, "gather", loc)};
  return builder(loc).op(OpKind::Gather, ops, {{"axis", axis}}, loc);
}

// ---- Reductions ----

Tensor Tensor::reduce(OpKind kind, std::vector<int64_t> axes, bool keepdims,
                      const std::source_location &loc) const {
  ir::ValueId ops[] = {id_};
  return builder(loc).op(kind, ops, {{"axes", std::move(axes)}, {"keepdims", keepdims}}, loc);
}

Tensor Tensor::sum(std::vector<int64_t> axes, bool keepdims, std::source_location loc) const {
  return reduce(OpKind::ReduceSum, std::move(axes), keepdims, loc);
}
Tensor Tensor::mean(std::vector<int64_t> axes, bool keepdims, std::source_location loc) const {
  return reduce(OpKind::ReduceMean, std::move(axes), keepdims, loc);
}
Tensor Tensor::max(std::vector<int64_t> axes, bool keepdims, std::source_location loc) const {
  return reduce(OpKind::ReduceMax, std::move(axes), keepdims, loc);
}

Tensor Tensor::softmax(int64_t axis, std::source_location loc) const {
  ir::ValueId ops[] = {id_};
  return builder(loc).op(OpKind::Softmax, ops, {{"axis", axis}}, loc);
}
Tensor Tensor::logSoftmax(int64_t axis, std::source_location loc) const {
  ir::ValueId ops[] = {id_};
  return builder(loc).op(OpKind::LogSoftmax, ops, {{"axis", axis}}, loc);
}

// ---- Elementwise ----

Tensor Tensor::unary(OpKind kind, const std::source_location &loc) const {
  ir::ValueId ops[] = {id_};
  return builder(loc).op(kind, ops, {}, loc);
}

Tensor Tensor::binary(OpKind kind, const Operand &o, const std::source_location &loc) const {
  Tensor rhs = o.resolve(*this);
  ir::ValueId ops[] = {id_, builder(loc).use(rhs, ir::mnemonic(kind), loc)};
  return builder(loc).op(kind, ops, {}, loc);
}

Tensor Tensor::exp(std::source_location loc) const {
  return unary(OpKind::Exp, loc);
}
Tensor Tensor::log(std::source_location loc) const {
  return unary(OpKind::Log, loc);
}
Tensor Tensor::sqrt(std::source_location loc) const {
  return unary(OpKind::Sqrt, loc);
}
Tensor Tensor::rsqrt(std::source_location loc) const {
  return unary(OpKind::Rsqrt, loc);
}
Tensor Tensor::tanh(std::source_location loc) const {
  return unary(OpKind::Tanh, loc);
}
Tensor Tensor::sigmoid(std::source_location loc) const {
  return unary(OpKind::Sigmoid, loc);
}
Tensor Tensor::relu(std::source_location loc) const {
  return unary(OpKind::Relu, loc);
}
Tensor Tensor::gelu(std::source_location loc) const {
  return unary(OpKind::Gelu, loc);
}
Tensor Tensor::geluTanh(std::source_location loc) const {
  return unary(OpKind::GeluTanh, loc);
}
Tensor Tensor::silu(std::source_location loc) const {
  return unary(OpKind::Silu, loc);
}
Tensor Tensor::softplus(std::source_location loc) const {
  return unary(OpKind::Softplus, loc);
}
Tensor Tensor::sin(std::source_location loc) const {
  return unary(OpKind::Sin, loc);
}
Tensor Tensor::cos(std::source_location loc) const {
  return unary(OpKind::Cos, loc);
}
Tensor Tensor::abs(std::source_location loc) const {
  return unary(OpKind::Abs, loc);
}
Tensor Tensor::logicalNot(std::source_location loc) const {
  return unary(OpKind::LogicalNot, loc);
}

Tensor Tensor::maximum(const Operand &o, std::source_location loc) const {
  return binary(OpKind::Max, o, loc);
}
Tensor Tensor::minimum(const Operand &o, std::source_location loc) const {
  return binary(OpKind::Min, o, loc);
}
Tensor Tensor::pow(const Operand &o, std::source_location loc) const {
  return binary(OpKind::Pow, o, loc);
}
Tensor Tensor::clamp(double lo, double hi, std::source_location loc) const {
  return maximum(Operand(lo, loc), loc).minimum(Operand(hi, loc), loc);
}

Tensor Tensor::eq(const Operand &o, std::source_location loc) const {
  return binary(OpKind::Eq, o, loc);
}
Tensor Tensor::ne(const Operand &o, std::source_location loc) const {
  return binary(OpKind::Ne, o, loc);
}
Tensor Tensor::lt(const Operand &o, std::source_location loc) const {
  return binary(OpKind::Lt, o, loc);
}
Tensor Tensor::le(const Operand &o, std::source_location loc) const {
  return binary(OpKind::Le, o, loc);
}
Tensor Tensor::gt(const Operand &o, std::source_location loc) const {
  return binary(OpKind::Gt, o, loc);
}
Tensor Tensor::ge(const Operand &o, std::source_location loc) const {
  return binary(OpKind::Ge, o, loc);
}

// ---- Conversions and noise ----

Tensor Tensor::cast(ir::DType dtype, std::source_location loc) const {
  ir::ValueId ops[] = {id_};
  return builder(loc).op(OpKind::Cast, ops, {{"dtype", dtype}}, loc);
}

Tensor Tensor::dropout(double p, std::source_location loc) const {
  if (p == 0)
    return *this;
  return dropout(p, builder(loc).nextDropoutSeed(), loc);
}

Tensor Tensor::dropout(double p, int64_t seed, std::source_location loc) const {
  if (p == 0)
    return *this;
  ir::ValueId ops[] = {id_};
  return builder(loc).op(OpKind::Dropout, ops, {{"p", p}, {"seed", seed}}, loc);
}

// ---- Operands and operators ----

Tensor Operand::resolve(const Tensor &like) const {
  if (!isScalar())
    return tensor_;
  return like.builder(loc_).scalar(value_, like.dtype(), loc_);
}

Tensor operator+(const Tensor &a, const Operand &b) {
  return a.binary(OpKind::Add, b, b.loc());
}
Tensor operator-(const Tensor &a, const Operand &b) {
  return a.binary(OpKind::Sub, b, b.loc());
}
Tensor operator*(const Tensor &a, const Operand &b) {
  return a.binary(OpKind::Mul, b, b.loc());
}
Tensor operator/(const Tensor &a, const Operand &b) {
  return a.binary(OpKind::Div, b, b.loc());
}

namespace {
// `scalar OP tensor`: the scalar becomes a constant of the tensor's dtype, on the left.
Tensor scalarLeft(OpKind kind, double a, const Located &b) {
  Tensor lhs = b.tensor.builder(b.loc).scalar(a, b.tensor.dtype(), b.loc);
  return lhs.binary(kind, Operand(b.tensor, b.loc), b.loc);
}
} // namespace

Tensor operator+(double a, const Located &b) {
  return scalarLeft(OpKind::Add, a, b);
}
Tensor operator-(double a, const Located &b) {
  return scalarLeft(OpKind::Sub, a, b);
}
Tensor operator*(double a, const Located &b) {
  return scalarLeft(OpKind::Mul, a, b);
}
Tensor operator/(double a, const Located &b) {
  return scalarLeft(OpKind::Div, a, b);
}
Tensor operator-(const Located &x) {
  return x.tensor.unary(OpKind::Neg, x.loc);
}

Tensor &operator+=(Tensor &a, const Operand &b) {
  return a = a + b;
}
Tensor &operator-=(Tensor &a, const Operand &b) {
  return a = a - b;
}
Tensor &operator*=(Tensor &a, const Operand &b) {
  return a = a * b;
}
Tensor &operator/=(Tensor &a, const Operand &b) {
  return a = a / b;
}

Tensor operator&(const Tensor &a, const Operand &b) {
  return a.binary(OpKind::LogicalAnd, b, b.loc());
}
Tensor operator|(const Tensor &a, const Operand &b) {
  return a.binary(OpKind::LogicalOr, b, b.loc());
}
Tensor operator!(const Located &x) {
  return x.tensor.unary(OpKind::LogicalNot, x.loc);
}

// ---- Free functions ----

Tensor matmul(const Tensor &a, const Tensor &b, MatmulFlags flags, std::source_location loc) {
  return a.matmul(b, flags, loc);
}

Tensor where(const Tensor &cond, const Operand &onTrue, const Operand &onFalse,
             std::source_location loc) {
  if (onTrue.isScalar() && onFalse.isScalar())
    cond.builder(loc).fail("select", loc, "at least one branch must be a tensor (for its dtype)");
  Tensor t = onTrue.isScalar() ? onTrue.resolve(onFalse.resolve(cond)) : onTrue.resolve(cond);
  Tensor f = onFalse.resolve(t);
  Builder &b = cond.builder(loc);
  ir::ValueId ops[] = {b.use(cond, "select", loc), b.use(t, "select", loc),
                       b.use(f, "select", loc)};
  return b.op(OpKind::Select, ops, {}, loc);
}

Tensor updateSlice(const Tensor &base, const Tensor &update, const Tensor &index, int64_t axis,
                   std::source_location loc) {
  Builder &b = base.builder(loc);
  ir::ValueId ops[] = {b.use(base, "update_slice", loc), b.use(update, "update_slice", loc),
                       b.use(index, "update_slice", loc)};
  return b.op(OpKind::UpdateSlice, ops, {{"axis", axis}}, loc);
}

Tensor concat(const std::vector<Tensor> &xs, int64_t axis, std::source_location loc) {
  if (xs.empty()) // no builder to ask: the message is made here
    throw DslError(fmt::format("{}:{}: concat: expected at least one operand",
                               toSourceLoc(loc).file, loc.line()));
  Builder &b = xs.front().builder(loc);
  std::vector<ir::ValueId> ops;
  for (const Tensor &x : xs)
    ops.push_back(b.use(x, "concat", loc));
  return b.op(OpKind::Concat, ops, {{"axis", axis}}, loc);
}

Tensor softmax(const Tensor &x, int64_t axis, std::source_location loc) {
  return x.softmax(axis, loc);
}
Tensor maximum(const Tensor &a, const Operand &b, std::source_location loc) {
  return a.maximum(b, loc);
}
Tensor minimum(const Tensor &a, const Operand &b, std::source_location loc) {
  return a.minimum(b, loc);
}

} // namespace kiln::frontend

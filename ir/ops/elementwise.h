// Elementwise ops: unary math, binary arithmetic with numpy broadcasting, comparisons, select,
// cast, dropout and stop_gradient. The scalar math of each op is a functor here (its meaning, in
// one place); the records below tie it to shape inference, the reference loops in elementwise.cc
// and the gradient rules in elementwise_grad.cc.
#pragma once

#include <cmath>
#include <cstdint>

#include "ir/op.h"
#include "ir/ops/ref_util.h"

namespace kiln::ir {

// ---- Scalar math. T is float or double (the interpreter's precision). ----
// One op per line reads as a table:
// clang-format off
namespace scalar {
struct Neg { template <class T> static T f(T x) { return -x; } };
struct Abs { template <class T> static T f(T x) { return x < 0 ? -x : x; } };
struct Exp { template <class T> static T f(T x) { return std::exp(x); } };
struct Log { template <class T> static T f(T x) { return std::log(x); } };
struct Sqrt { template <class T> static T f(T x) { return std::sqrt(x); } };
struct Rsqrt { template <class T> static T f(T x) { return T(1) / std::sqrt(x); } };
struct Tanh { template <class T> static T f(T x) { return std::tanh(x); } };
// 1/(1+e^-x), evaluated so that neither branch overflows.
struct Sigmoid {
  template <class T> static T f(T x) {
    if (x >= 0)
      return T(1) / (T(1) + std::exp(-x));
    T e = std::exp(x);
    return e / (T(1) + e);
  }
};
// max(x, 0), NaN propagating as in PyTorch.
struct Relu { template <class T> static T f(T x) { return std::isnan(x) ? x : (x > 0 ? x : T(0)); } };
// x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))   (Hendrycks & Gimpel; PyTorch approximate='none')
struct Gelu {
  template <class T> static T f(T x) { return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440))); }
};
// gelu'(x) = Phi(x) + x phi(x),  Phi(x) = (1 + erf(x / sqrt 2)) / 2,  phi(x) = e^(-x^2/2) / sqrt(2
// pi): gelu's derivative, which its gradient multiplies by dy. One op, so that a backend computes
// it in registers; each step rounds as written (the bits of these operations one by one).
struct GeluGrad {
  template <class T> static T f(T x) {
    const T cdf = T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440)));
    const T pdf = T(0.39894228040143267794) * std::exp(T(-0.5) * (x * x));
    return cdf + x * pdf;
  }
};
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   (PyTorch approximate='tanh', GPT-2)
struct GeluTanh {
  template <class T> static T f(T x) {
    return T(0.5) * x * (T(1) + std::tanh(T(0.79788456080286535588) * (x + T(0.044715) * x * x * x)));
  }
};
// gelu_tanh'(x) = (1 + t)/2 + x/2 (1 - t^2) u',  t = tanh(u),  u = s (x + a x^3),
// u' = s (1 + 3 a x^2)  (s = sqrt(2/pi), a = 0.044715): as GeluGrad, one op of the operations
// gelu_tanh's gradient rule emitted.
struct GeluTanhGrad {
  template <class T> static T f(T x) {
    const T s = T(0.79788456080286535588), x2 = x * x;
    const T t = std::tanh(s * (x + T(0.044715) * (x2 * x)));
    const T du = s * (T(1) + T(3 * 0.044715) * x2);
    return T(0.5) * (T(1) + t) + (T(0.5) * x) * ((T(1) - t * t) * du);
  }
};
struct Silu { template <class T> static T f(T x) { return x * Sigmoid::f(x); } };
// silu'(x) = s (1 + x (1 - s)),  s = sigmoid(x): as GeluGrad, one op of the operations silu's
// gradient rule emitted.
struct SiluGrad {
  template <class T> static T f(T x) {
    const T s = Sigmoid::f(x);
    return s * (T(1) + x * (T(1) - s));
  }
};
struct Sin { template <class T> static T f(T x) { return std::sin(x); } };
struct Cos { template <class T> static T f(T x) { return std::cos(x); } };
// erf(x) = 2/sqrt(pi) int_0^x e^(-t^2) dt
struct Erf { template <class T> static T f(T x) { return std::erf(x); } };
// The identity: stop_gradient's value (its meaning is for autodiff only).
struct Identity { template <class T> static T f(T x) { return x; } };
struct LogicalNot { template <class T> static T f(T x) { return x == 0 ? T(1) : T(0); } };

struct Add { template <class T> static T f(T a, T b) { return a + b; } };
struct Sub { template <class T> static T f(T a, T b) { return a - b; } };
struct Mul { template <class T> static T f(T a, T b) { return a * b; } };
struct Div { template <class T> static T f(T a, T b) { return a / b; } };
// Elementwise maximum/minimum; a NaN operand gives NaN (torch.maximum / torch.minimum).
struct Max {
  template <class T> static T f(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(a) || std::isnan(b))
        return a + b;
    return a > b ? a : b;
  }
};
struct Min {
  template <class T> static T f(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(a) || std::isnan(b))
        return a + b;
    return a < b ? a : b;
  }
};
struct Pow { template <class T> static T f(T a, T b) { return std::pow(a, b); } };
struct LogicalAnd { template <class T> static T f(T a, T b) { return (a != 0 && b != 0) ? T(1) : T(0); } };
struct LogicalOr { template <class T> static T f(T a, T b) { return (a != 0 || b != 0) ? T(1) : T(0); } };

struct Eq { template <class T> static bool f(T a, T b) { return a == b; } };
struct Ne { template <class T> static bool f(T a, T b) { return a != b; } };
struct Lt { template <class T> static bool f(T a, T b) { return a < b; } };
struct Le { template <class T> static bool f(T a, T b) { return a <= b; } };
struct Gt { template <class T> static bool f(T a, T b) { return a > b; } };
struct Ge { template <class T> static bool f(T a, T b) { return a >= b; } };
} // namespace scalar
// clang-format on

// ---- Shape/dtype inference ----
// Which dtypes an elementwise op accepts.
enum class Accepts : uint8_t { Float, Numeric, Bool, Any };
template <Accepts A>
Expected<std::vector<Type>> inferUnary(std::span<const Type> in, const Attrs &attrs);
// Binary: operands of one dtype, broadcast shapes; result of that dtype.
template <Accepts A>
Expected<std::vector<Type>> inferBinary(std::span<const Type> in, const Attrs &attrs);
// Comparison: like binary, result bool.
template <Accepts A>
Expected<std::vector<Type>> inferCompare(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferSelect(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferCast(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferDropout(std::span<const Type> in, const Attrs &attrs);

// ---- Reference loops ----
// Integer and bool elements are computed in int64, floating ones in F.
template <class F, class Op> KILN_REF_FN(refUnary) {
  (void)attrs;
  const RefTensor<F> &x = *in[0];
  RefTensor<F> &y = out[0];
  if (x.isFloatStorage())
    for (int64_t k = 0; k < x.size(); ++k)
      y.f[k] = Op::f(x.f[k]);
  else
    for (int64_t k = 0; k < x.size(); ++k)
      y.i[k] = Op::f(x.i[k]);
  return {};
}

template <class F, class Op> KILN_REF_FN(refBinary) {
  (void)attrs;
  const RefTensor<F> &a = *in[0], &b = *in[1];
  RefTensor<F> &y = out[0];
  std::vector<int64_t> ia = broadcastIndexMap(a.type.shape, y.type.shape);
  std::vector<int64_t> ib = broadcastIndexMap(b.type.shape, y.type.shape);
  if (a.isFloatStorage())
    for (int64_t k = 0; k < y.size(); ++k)
      y.f[k] = Op::f(a.f[ia[k]], b.f[ib[k]]);
  else
    for (int64_t k = 0; k < y.size(); ++k)
      y.i[k] = Op::f(a.i[ia[k]], b.i[ib[k]]);
  return {};
}

template <class F, class Op> KILN_REF_FN(refCompare) {
  (void)attrs;
  const RefTensor<F> &a = *in[0], &b = *in[1];
  RefTensor<F> &y = out[0]; // bool
  std::vector<int64_t> ia = broadcastIndexMap(a.type.shape, y.type.shape);
  std::vector<int64_t> ib = broadcastIndexMap(b.type.shape, y.type.shape);
  for (int64_t k = 0; k < y.size(); ++k)
    y.i[k] = a.isFloatStorage() ? Op::f(a.f[ia[k]], b.f[ib[k]]) : Op::f(a.i[ia[k]], b.i[ib[k]]);
  return {};
}

template <class F> KILN_REF_FN(refSelect);
template <class F> KILN_REF_FN(refCast);
template <class F> KILN_REF_FN(refDropout);

// ---- Gradient rules (elementwise_grad.cc), one per differentiable op ----
Status gradNeg(GradContext &c);
Status gradAbs(GradContext &c);
Status gradExp(GradContext &c);
Status gradLog(GradContext &c);
Status gradSqrt(GradContext &c);
Status gradRsqrt(GradContext &c);
Status gradTanh(GradContext &c);
Status gradSigmoid(GradContext &c);
Status gradRelu(GradContext &c);
Status gradGelu(GradContext &c);
Status gradGeluTanh(GradContext &c);
Status gradGeluGrad(GradContext &c);
Status gradGeluTanhGrad(GradContext &c);
Status gradSilu(GradContext &c);
Status gradSiluGrad(GradContext &c);
Status gradSin(GradContext &c);
Status gradCos(GradContext &c);
Status gradErf(GradContext &c);
Status gradAdd(GradContext &c);
Status gradSub(GradContext &c);
Status gradMul(GradContext &c);
Status gradDiv(GradContext &c);
Status gradMax(GradContext &c);
Status gradMin(GradContext &c);
Status gradPow(GradContext &c);
Status gradSelect(GradContext &c);
Status gradCast(GradContext &c);
Status gradDropout(GradContext &c);

// ---- Decompositions into primitives ----
Expected<std::vector<int32_t>> decomposeSigmoid(Graph &g, const Node &n); // 1 / (1 + exp(-x))
Expected<std::vector<int32_t>> decomposeSilu(Graph &g, const Node &n);    // x * sigmoid(x)

// ---- Records ----
inline constexpr std::string_view kUnaryOperands[] = {"x"};
inline constexpr std::string_view kBinaryOperands[] = {"lhs", "rhs"};
inline constexpr std::string_view kSelectOperands[] = {"cond", "on_true", "on_false"};
inline constexpr AttrSpec kCastAttrs[] = {{"dtype", AttrKind::DType, true}};
// p: probability of zeroing an element; seed: the rng stream (support/rng.h). Element k is kept
// iff rng::uniform(seed, k) >= p, and kept elements are scaled by 1/(1-p).
inline constexpr AttrSpec kDropoutAttrs[] = {{"p", AttrKind::Float, true},
                                             {"seed", AttrKind::Int, true}};

// The traits of an op of this family (see OpInfo): pointwise, may write over any operand, and a
// pointwise member of fusion regions. Dropout alone differs (its mask depends on the position).
#define KILN_POINTWISE_TRAITS                                                                      \
  .pointwise = true, .writesOver = &writesOverElementwise, .regionRole = RegionRole::Pointwise

#define KILN_UNARY_RECORD(Name, mnem, accepts, diff, gradFn, summaryText)                          \
  inline constexpr OpInfo k##Name##Op {                                                            \
    .kind = OpKind::Name, .mnemonic = mnem, .summary = summaryText, .operands = kUnaryOperands,    \
    .infer = &inferUnary<accepts>, .ref32 = &refUnary<float, scalar::Name>,                        \
    .ref64 = &refUnary<double, scalar::Name>, .differentiable = diff, .grad = gradFn,              \
    KILN_POINTWISE_TRAITS                                                                          \
  }
#define KILN_BINARY_RECORD(Name, mnem, accepts, diff, gradFn, commutes, summaryText)               \
  inline constexpr OpInfo k##Name##Op {                                                            \
    .kind = OpKind::Name, .mnemonic = mnem, .summary = summaryText, .operands = kBinaryOperands,   \
    .infer = &inferBinary<accepts>, .ref32 = &refBinary<float, scalar::Name>,                      \
    .ref64 = &refBinary<double, scalar::Name>, .differentiable = diff, .grad = gradFn,             \
    .commutative = commutes, KILN_POINTWISE_TRAITS                                                 \
  }
#define KILN_COMPARE_RECORD(Name, mnem, accepts, commutes, summaryText)                            \
  inline constexpr OpInfo k##Name##Op {                                                            \
    .kind = OpKind::Name, .mnemonic = mnem, .summary = summaryText, .operands = kBinaryOperands,   \
    .infer = &inferCompare<accepts>, .ref32 = &refCompare<float, scalar::Name>,                    \
    .ref64 = &refCompare<double, scalar::Name>, .differentiable = Differentiable::No,              \
    .commutative = commutes, KILN_POINTWISE_TRAITS                                                 \
  }

constexpr Differentiable kYes = Differentiable::Yes, kNo = Differentiable::No;
KILN_UNARY_RECORD(Neg, "neg", Accepts::Numeric, kYes, &gradNeg, "-x");
KILN_UNARY_RECORD(Abs, "abs", Accepts::Numeric, kYes, &gradAbs, "|x|");
KILN_UNARY_RECORD(Exp, "exp", Accepts::Float, kYes, &gradExp, "e^x");
KILN_UNARY_RECORD(Log, "log", Accepts::Float, kYes, &gradLog, "natural logarithm");
KILN_UNARY_RECORD(Sqrt, "sqrt", Accepts::Float, kYes, &gradSqrt, "square root");
KILN_UNARY_RECORD(Rsqrt, "rsqrt", Accepts::Float, kYes, &gradRsqrt, "1 / sqrt(x)");
KILN_UNARY_RECORD(Tanh, "tanh", Accepts::Float, kYes, &gradTanh, "hyperbolic tangent");
KILN_UNARY_RECORD(Relu, "relu", Accepts::Float, kYes, &gradRelu, "max(x, 0)");
KILN_UNARY_RECORD(Gelu, "gelu", Accepts::Float, kYes, &gradGelu, "x * Phi(x), exact (erf) form");
KILN_UNARY_RECORD(GeluTanh, "gelu_tanh", Accepts::Float, kYes, &gradGeluTanh,
                  "GELU, tanh approximation");
KILN_UNARY_RECORD(GeluGrad, "gelu_grad", Accepts::Float, kYes, &gradGeluGrad,
                  "gelu's derivative, Phi(x) + x phi(x)");
KILN_UNARY_RECORD(GeluTanhGrad, "gelu_tanh_grad", Accepts::Float, kYes, &gradGeluTanhGrad,
                  "gelu_tanh's derivative");
KILN_UNARY_RECORD(Sin, "sin", Accepts::Float, kYes, &gradSin, "sine");
KILN_UNARY_RECORD(Cos, "cos", Accepts::Float, kYes, &gradCos, "cosine");
KILN_UNARY_RECORD(Erf, "erf", Accepts::Float, kYes, &gradErf, "error function");
KILN_UNARY_RECORD(LogicalNot, "logical_not", Accepts::Bool, kNo, nullptr, "not x (bool)");
inline constexpr OpInfo kSigmoidOp{.kind = OpKind::Sigmoid,
                                   .mnemonic = "sigmoid",
                                   .summary = "1 / (1 + e^-x)",
                                   .operands = kUnaryOperands,
                                   .infer = &inferUnary<Accepts::Float>,
                                   .ref32 = &refUnary<float, scalar::Sigmoid>,
                                   .ref64 = &refUnary<double, scalar::Sigmoid>,
                                   .grad = &gradSigmoid,
                                   .decompose = &decomposeSigmoid,
                                   KILN_POINTWISE_TRAITS};
inline constexpr OpInfo kSiluOp{.kind = OpKind::Silu,
                                .mnemonic = "silu",
                                .summary = "x * sigmoid(x) (swish)",
                                .operands = kUnaryOperands,
                                .infer = &inferUnary<Accepts::Float>,
                                .ref32 = &refUnary<float, scalar::Silu>,
                                .ref64 = &refUnary<double, scalar::Silu>,
                                .grad = &gradSilu,
                                .decompose = &decomposeSilu,
                                KILN_POINTWISE_TRAITS};
KILN_UNARY_RECORD(SiluGrad, "silu_grad", Accepts::Float, kYes, &gradSiluGrad,
                  "silu's derivative, s (1 + x (1 - s))");

KILN_BINARY_RECORD(Add, "add", Accepts::Numeric, kYes, &gradAdd, true, "lhs + rhs");
KILN_BINARY_RECORD(Sub, "sub", Accepts::Numeric, kYes, &gradSub, false, "lhs - rhs");
KILN_BINARY_RECORD(Mul, "mul", Accepts::Numeric, kYes, &gradMul, true, "lhs * rhs");
KILN_BINARY_RECORD(Div, "div", Accepts::Float, kYes, &gradDiv, false, "lhs / rhs");
KILN_BINARY_RECORD(Max, "max", Accepts::Numeric, kYes, &gradMax, true,
                   "elementwise maximum, NaN propagating");
KILN_BINARY_RECORD(Min, "min", Accepts::Numeric, kYes, &gradMin, true,
                   "elementwise minimum, NaN propagating");
KILN_BINARY_RECORD(Pow, "pow", Accepts::Float, kYes, &gradPow, false, "lhs ^ rhs");
KILN_BINARY_RECORD(LogicalAnd, "logical_and", Accepts::Bool, kNo, nullptr, true,
                   "lhs and rhs (bool)");
KILN_BINARY_RECORD(LogicalOr, "logical_or", Accepts::Bool, kNo, nullptr, true, "lhs or rhs (bool)");

KILN_COMPARE_RECORD(Eq, "eq", Accepts::Any, true, "lhs == rhs");
KILN_COMPARE_RECORD(Ne, "ne", Accepts::Any, true, "lhs != rhs");
KILN_COMPARE_RECORD(Lt, "lt", Accepts::Numeric, false, "lhs < rhs");
KILN_COMPARE_RECORD(Le, "le", Accepts::Numeric, false, "lhs <= rhs");
KILN_COMPARE_RECORD(Gt, "gt", Accepts::Numeric, false, "lhs > rhs");
KILN_COMPARE_RECORD(Ge, "ge", Accepts::Numeric, false, "lhs >= rhs");

inline constexpr OpInfo kSelectOp{.kind = OpKind::Select,
                                  .mnemonic = "select",
                                  .summary = "cond ? on_true : on_false, broadcasting all three",
                                  .operands = kSelectOperands,
                                  .infer = &inferSelect,
                                  .ref32 = &refSelect<float>,
                                  .ref64 = &refSelect<double>,
                                  .grad = &gradSelect,
                                  KILN_POINTWISE_TRAITS};
inline constexpr OpInfo kCastOp{.kind = OpKind::Cast,
                                .mnemonic = "cast",
                                .summary =
                                    "convert to `dtype` (float->int truncates, ->bool is x != 0)",
                                .operands = kUnaryOperands,
                                .attrs = kCastAttrs,
                                .infer = &inferCast,
                                .ref32 = &refCast<float>,
                                .ref64 = &refCast<double>,
                                .grad = &gradCast,
                                KILN_POINTWISE_TRAITS};
inline constexpr OpInfo kDropoutOp{
    .kind = OpKind::Dropout,
    .mnemonic = "dropout",
    .summary = "zero each element with probability p, scale the rest by 1/(1-p)",
    .operands = kUnaryOperands,
    .attrs = kDropoutAttrs,
    .infer = &inferDropout,
    .ref32 = &refDropout<float>,
    .ref64 = &refDropout<double>,
    .grad = &gradDropout,
    // Element k of its mask is drawn at k: not pointwise (nor a region member, whose loop nest
    // runs over another layout), but it reads x element for element, so it may run in place.
    .writesOver = &writesOverElementwise};
// The identity on values; autodiff sends no gradient through it (Differentiable::No), so what
// flows out of it is a constant as far as the loss is concerned.
inline constexpr OpInfo kStopGradientOp{.kind = OpKind::StopGradient,
                                        .mnemonic = "stop_gradient",
                                        .summary =
                                            "x, as a constant to autodiff (no gradient flows)",
                                        .operands = kUnaryOperands,
                                        .infer = &inferUnary<Accepts::Any>,
                                        .ref32 = &refUnary<float, scalar::Identity>,
                                        .ref64 = &refUnary<double, scalar::Identity>,
                                        .differentiable = Differentiable::No,
                                        KILN_POINTWISE_TRAITS};

#undef KILN_UNARY_RECORD
#undef KILN_BINARY_RECORD
#undef KILN_COMPARE_RECORD
#undef KILN_POINTWISE_TRAITS

} // namespace kiln::ir

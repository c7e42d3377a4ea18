// Elementwise ops: unary math, binary arithmetic with numpy broadcasting, comparisons, select,
// cast, dropout and stop_gradient. The scalar math of each op is a functor here (its meaning, in
// one place); the records below tie it to shape inference, the reference loops in elementwise.cc
// and the gradient rules in elementwise_grad.cc.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <utility>

#include "ir/op.h"
#include "ir/ops/math.h"
#include "ir/ops/ref_util.h"

namespace kiln::ir {

// ---- Formulas: each pointwise op's math, once ----
// Written over the math interface of ir/ops/math.h, which the reference instantiates with
// scalars (ScalarMath<float/double/int64_t>) and each vector backend with its registers, so every
// backend runs these operations in this order. One op per line reads as a table:
// clang-format off
namespace formula {
struct Neg { template <class M, class V> static V f(const M &m, V x) { return m.neg(x); } };
// x < 0 ? -x : x, so -0 stays -0.
struct Abs { template <class M, class V> static V f(const M &m, V x) { return m.select(m.lt(x, m.c(0)), m.neg(x), x); } };
struct Exp { template <class M, class V> static V f(const M &m, V x) { return m.exp(x); } };
struct Log { template <class M, class V> static V f(const M &m, V x) { return m.log(x); } };
struct Sqrt { template <class M, class V> static V f(const M &m, V x) { return m.sqrt(x); } };
struct Rsqrt { template <class M, class V> static V f(const M &m, V x) { return m.div(m.c(1), m.sqrt(x)); } };
struct Tanh { template <class M, class V> static V f(const M &m, V x) { return m.tanh(x); } };
// 1/(1+e^-x): 0 where e^-x overflows, 1 where it underflows.
struct Sigmoid { template <class M, class V> static V f(const M &m, V x) { return m.div(m.c(1), m.add(m.c(1), m.exp(m.neg(x)))); } };
// max(x, 0), NaN propagating as in PyTorch.
struct Relu { template <class M, class V> static V f(const M &m, V x) { return m.select(m.isnan(x), x, m.select(m.gt(x, m.c(0)), x, m.c(0))); } };
// x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))   (Hendrycks & Gimpel; PyTorch approximate='none')
struct Gelu {
  template <class M, class V> static V f(const M &m, V x) {
    return m.mul(m.mul(m.c(0.5), x), m.add(m.c(1), m.erf(m.mul(x, m.c(0.70710678118654752440)))));
  }
};
// gelu'(x) = Phi(x) + x phi(x),  Phi(x) = (1 + erf(x / sqrt 2)) / 2,  phi(x) = e^(-x^2/2) / sqrt(2
// pi): gelu's derivative, which its gradient multiplies by dy. One op, so that a backend computes
// it in registers.
struct GeluGrad {
  template <class M, class V> static V f(const M &m, V x) {
    const V cdf = m.mul(m.c(0.5), m.add(m.c(1), m.erf(m.mul(x, m.c(0.70710678118654752440)))));
    const V pdf = m.mul(m.c(0.39894228040143267794), m.exp(m.mul(m.c(-0.5), m.mul(x, x))));
    return m.add(cdf, m.mul(x, pdf));
  }
};
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   (PyTorch approximate='tanh', GPT-2)
struct GeluTanh {
  template <class M, class V> static V f(const M &m, V x) {
    const V inner = m.mul(m.c(0.79788456080286535588), m.add(x, m.mul(m.c(0.044715), m.mul(m.mul(x, x), x))));
    return m.mul(m.mul(m.c(0.5), x), m.add(m.c(1), m.tanh(inner)));
  }
};
// gelu_tanh'(x) = (1 + t)/2 + x/2 (1 - t^2) u',  t = tanh(u),  u = s (x + a x^3),
// u' = s (1 + 3 a x^2)  (s = sqrt(2/pi), a = 0.044715): as GeluGrad, gelu_tanh's derivative.
struct GeluTanhGrad {
  template <class M, class V> static V f(const M &m, V x) {
    const V s = m.c(0.79788456080286535588), x2 = m.mul(x, x);
    const V t = m.tanh(m.mul(s, m.add(x, m.mul(m.c(0.044715), m.mul(x2, x)))));
    const V du = m.mul(s, m.add(m.c(1), m.mul(m.c(3 * 0.044715), x2)));
    return m.add(m.mul(m.c(0.5), m.add(m.c(1), t)), m.mul(m.mul(m.c(0.5), x), m.mul(m.sub(m.c(1), m.mul(t, t)), du)));
  }
};
struct Silu { template <class M, class V> static V f(const M &m, V x) { return m.mul(x, Sigmoid::f(m, x)); } };
// silu'(x) = s (1 + x (1 - s)),  s = sigmoid(x): as GeluGrad, silu's derivative.
struct SiluGrad {
  template <class M, class V> static V f(const M &m, V x) {
    const V s = Sigmoid::f(m, x);
    return m.mul(s, m.add(m.c(1), m.mul(x, m.sub(m.c(1), s))));
  }
};
// log(1 + e^x), and x above PyTorch's threshold 20 (where the two agree to within f32's rounding
// and e^x would soon overflow).
struct Softplus {
  template <class M, class V> static V f(const M &m, V x) {
    return m.select(m.gt(x, m.c(20)), x, m.log1p(m.exp(x)));
  }
};
struct Sin { template <class M, class V> static V f(const M &m, V x) { return m.sin(x); } };
struct Cos { template <class M, class V> static V f(const M &m, V x) { return m.cos(x); } };
// erf(x) = 2/sqrt(pi) int_0^x e^(-t^2) dt
struct Erf { template <class M, class V> static V f(const M &m, V x) { return m.erf(x); } };
// The identity: stop_gradient's value (its meaning is for autodiff only).
struct Identity { template <class M, class V> static V f(const M &, V x) { return x; } };
using StopGradient = Identity;
// Bools are the values 0 and 1.
struct LogicalNot { template <class M, class V> static V f(const M &m, V x) { return m.select(m.eq(x, m.c(0)), m.c(1), m.c(0)); } };
// x != 0 as a bool: a cast to bool (an attribute's choice, so not an op's formula of its own).
struct NonZero { template <class M, class V> static V f(const M &m, V x) { return m.select(m.ne(x, m.c(0)), m.c(1), m.c(0)); } };
// The nearest bf16 value: a cast to bf16 (a value stored in bf16, computed in f32 until then).
struct RoundBf16 { template <class M, class V> static V f(const M &m, V x) { return m.roundBf16(x); } };

struct Add { template <class M, class V> static V f(const M &m, V a, V b) { return m.add(a, b); } };
struct Sub { template <class M, class V> static V f(const M &m, V a, V b) { return m.sub(a, b); } };
struct Mul { template <class M, class V> static V f(const M &m, V a, V b) { return m.mul(a, b); } };
struct Div { template <class M, class V> static V f(const M &m, V a, V b) { return m.div(a, b); } };
// Elementwise maximum/minimum; a NaN operand gives NaN (torch.maximum / torch.minimum).
struct Max { template <class M, class V> static V f(const M &m, V a, V b) { return m.select(m.either(m.isnan(a), m.isnan(b)), m.add(a, b), m.select(m.gt(a, b), a, b)); } };
struct Min { template <class M, class V> static V f(const M &m, V a, V b) { return m.select(m.either(m.isnan(a), m.isnan(b)), m.add(a, b), m.select(m.lt(a, b), a, b)); } };
struct Pow { template <class M, class V> static V f(const M &m, V a, V b) { return m.pow(a, b); } };
struct LogicalAnd { template <class M, class V> static V f(const M &m, V a, V b) { return m.select(m.both(m.ne(a, m.c(0)), m.ne(b, m.c(0))), m.c(1), m.c(0)); } };
struct LogicalOr { template <class M, class V> static V f(const M &m, V a, V b) { return m.select(m.either(m.ne(a, m.c(0)), m.ne(b, m.c(0))), m.c(1), m.c(0)); } };

// Comparisons give a condition (M::B), which a backend stores as its bools.
struct Eq { template <class M, class V> static auto f(const M &m, V a, V b) { return m.eq(a, b); } };
struct Ne { template <class M, class V> static auto f(const M &m, V a, V b) { return m.ne(a, b); } };
struct Lt { template <class M, class V> static auto f(const M &m, V a, V b) { return m.lt(a, b); } };
struct Le { template <class M, class V> static auto f(const M &m, V a, V b) { return m.le(a, b); } };
struct Gt { template <class M, class V> static auto f(const M &m, V a, V b) { return m.gt(a, b); } };
struct Ge { template <class M, class V> static auto f(const M &m, V a, V b) { return m.ge(a, b); } };

// cond ? on_true : on_false, cond a bool (0 or 1).
struct Select { template <class M, class V> static V f(const M &m, V c, V a, V b) { return m.select(m.ne(c, m.c(0)), a, b); } };
} // namespace formula
// clang-format on

// A formula on the reference's scalars.
template <class Formula, class T, class... Ts> auto scalarFormula(T x, Ts... rest) {
  return Formula::f(ScalarMath<T>{}, x, rest...);
}

// Each pointwise op's formula by kind (FormulaOf<K>::type), which is how the backends find it:
// every record below with a formula declares it here, and op_table.cc checks that every
// pointwise op has one (cast excepted: its target dtype, an attribute, decides its formula).
template <OpKind K> struct FormulaOf {};
template <OpKind K>
concept HasFormula = requires {
  typename FormulaOf<K>::type;
};

// A table indexed by OpKind: entry K is make.template operator()<FormulaOf<K>::type>() where op K
// has a formula, Entry{} elsewhere. How a backend builds its pointwise lowering, whole by
// construction.
template <class Entry, class Make> constexpr std::array<Entry, kNumOps> formulaTable(Make make) {
  return [&]<size_t... K>(std::index_sequence<K...>) {
    return std::array<Entry, kNumOps>{[&]<OpKind Kind>() -> Entry {
      if constexpr (HasFormula<Kind>)
        return make.template operator()<typename FormulaOf<Kind>::type>();
      else
        return Entry{};
    }.template operator()<static_cast<OpKind>(K)>()...};
  }
  (std::make_index_sequence<kNumOps>{});
}

// What a backend runs for one pointwise instruction of a fusion region: its op's formula, except
// where an attribute decides (a cast, by CastTo) or the region's indexing does (a broadcast: the
// identity on values). Built once per backend from its `make` (as formulaTable); Entry{} for an op
// without one.
template <class Entry> struct RegionFormulas {
  std::array<Entry, kNumOps> byOp;
  Entry nonZero, identity, roundBf16;

  Entry operator()(OpKind op, CastTo to) const {
    if (op == OpKind::Cast)
      return to == CastTo::Bool ? nonZero : to == CastTo::Bf16 ? roundBf16 : identity;
    return op == OpKind::Broadcast ? identity : byOp[static_cast<size_t>(op)];
  }
};
template <class Entry, class Make> constexpr RegionFormulas<Entry> regionFormulas(Make make) {
  return {formulaTable<Entry>(make), make.template operator()<formula::NonZero>(),
          make.template operator()<formula::Identity>(),
          make.template operator()<formula::RoundBf16>()};
}

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
// A step operand (dropout's, attention's): a scalar number, else the Error.
Status checkStepOperand(const Type &step);
// dropout's result may be written over x (not over its step).
bool dropoutWritesOver(const Node &node, int result, int operand);

// ---- Reference loops ----
// Integer and bool elements are computed in int64, floating ones in F.
template <class F, class Op> KILN_REF_FN(refUnary) {
  (void)attrs;
  const RefTensor<F> &x = *in[0];
  RefTensor<F> &y = out[0];
  if (x.isFloatStorage())
    for (int64_t k = 0; k < x.size(); ++k)
      y.f[k] = scalarFormula<Op>(x.f[k]);
  else
    for (int64_t k = 0; k < x.size(); ++k)
      y.i[k] = scalarFormula<Op>(x.i[k]);
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
      y.f[k] = scalarFormula<Op>(a.f[ia[k]], b.f[ib[k]]);
  else
    for (int64_t k = 0; k < y.size(); ++k)
      y.i[k] = scalarFormula<Op>(a.i[ia[k]], b.i[ib[k]]);
  return {};
}

template <class F, class Op> KILN_REF_FN(refCompare) {
  (void)attrs;
  const RefTensor<F> &a = *in[0], &b = *in[1];
  RefTensor<F> &y = out[0]; // bool
  std::vector<int64_t> ia = broadcastIndexMap(a.type.shape, y.type.shape);
  std::vector<int64_t> ib = broadcastIndexMap(b.type.shape, y.type.shape);
  for (int64_t k = 0; k < y.size(); ++k)
    y.i[k] = a.isFloatStorage() ? scalarFormula<Op>(a.f[ia[k]], b.f[ib[k]])
                                : scalarFormula<Op>(a.i[ia[k]], b.i[ib[k]]);
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
Status gradSoftplus(GradContext &c);
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
// dropout(x [, step]): p: probability of zeroing an element; seed: the rng stream
// (support/rng.h); step: a scalar count, the training step the mask is drawn for (the optimizer
// pass gives every dropout of a training step its step counter: a fresh mask each step). Element
// k is kept iff rng::uniform(rng::stepSeed(seed, step), k) >= p (no step: step 0, the seed's own
// stream), and kept elements are scaled by 1/(1-p). On rank r of a data-parallel run, whose x is
// its rows of the global batch, k counts from r numel(x): the ranks draw one process's masks.
inline constexpr std::string_view kDropoutOperands[] = {"x", "step"};
inline constexpr AttrSpec kDropoutAttrs[] = {{"p", AttrKind::Float, true},
                                             {"seed", AttrKind::Int, true}};

// The traits of an op of this family (see OpInfo): pointwise, may write over any operand, and a
// pointwise member of fusion regions. Dropout alone differs (its mask depends on the position).
#define KILN_POINTWISE_TRAITS                                                                      \
  .pointwise = true, .writesOver = &writesOverElementwise, .regionRole = RegionRole::Pointwise

#define KILN_FORMULA(Name)                                                                         \
  template <> struct FormulaOf<OpKind::Name> { using type = formula::Name; }
// (Traits after regionRole may follow the summary: .exactOnIntegers = true.)
#define KILN_UNARY_RECORD(Name, mnem, accepts, diff, gradFn, summaryText, ...)                     \
  inline constexpr OpInfo k##Name##Op{.kind = OpKind::Name,                                        \
                                      .mnemonic = mnem,                                            \
                                      .summary = summaryText,                                      \
                                      .operands = kUnaryOperands,                                  \
                                      .infer = &inferUnary<accepts>,                               \
                                      .ref32 = &refUnary<float, formula::Name>,                    \
                                      .ref64 = &refUnary<double, formula::Name>,                   \
                                      .differentiable = diff,                                      \
                                      .grad = gradFn,                                              \
                                      KILN_POINTWISE_TRAITS __VA_OPT__(, ) __VA_ARGS__};           \
  KILN_FORMULA(Name)
#define KILN_BINARY_RECORD(Name, mnem, accepts, diff, gradFn, commutes, summaryText, ...)          \
  inline constexpr OpInfo k##Name##Op{.kind = OpKind::Name,                                        \
                                      .mnemonic = mnem,                                            \
                                      .summary = summaryText,                                      \
                                      .operands = kBinaryOperands,                                 \
                                      .infer = &inferBinary<accepts>,                              \
                                      .ref32 = &refBinary<float, formula::Name>,                   \
                                      .ref64 = &refBinary<double, formula::Name>,                  \
                                      .differentiable = diff,                                      \
                                      .grad = gradFn,                                              \
                                      .commutative = commutes,                                     \
                                      KILN_POINTWISE_TRAITS __VA_OPT__(, ) __VA_ARGS__};           \
  KILN_FORMULA(Name)
#define KILN_COMPARE_RECORD(Name, mnem, accepts, commutes, summaryText)                            \
  inline constexpr OpInfo k##Name##Op{.kind = OpKind::Name,                                        \
                                      .mnemonic = mnem,                                            \
                                      .summary = summaryText,                                      \
                                      .operands = kBinaryOperands,                                 \
                                      .infer = &inferCompare<accepts>,                             \
                                      .ref32 = &refCompare<float, formula::Name>,                  \
                                      .ref64 = &refCompare<double, formula::Name>,                 \
                                      .differentiable = Differentiable::No,                        \
                                      .commutative = commutes,                                     \
                                      .comparison = true,                                          \
                                      KILN_POINTWISE_TRAITS};                                      \
  KILN_FORMULA(Name)

constexpr Differentiable kYes = Differentiable::Yes, kNo = Differentiable::No;
KILN_UNARY_RECORD(Neg, "neg", Accepts::Numeric, kYes, &gradNeg, "-x", .exactOnIntegers = true);
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
                                   .ref32 = &refUnary<float, formula::Sigmoid>,
                                   .ref64 = &refUnary<double, formula::Sigmoid>,
                                   .grad = &gradSigmoid,
                                   .decompose = &decomposeSigmoid,
                                   KILN_POINTWISE_TRAITS};
KILN_FORMULA(Sigmoid);
inline constexpr OpInfo kSiluOp{.kind = OpKind::Silu,
                                .mnemonic = "silu",
                                .summary = "x * sigmoid(x) (swish)",
                                .operands = kUnaryOperands,
                                .infer = &inferUnary<Accepts::Float>,
                                .ref32 = &refUnary<float, formula::Silu>,
                                .ref64 = &refUnary<double, formula::Silu>,
                                .grad = &gradSilu,
                                .decompose = &decomposeSilu,
                                KILN_POINTWISE_TRAITS};
KILN_FORMULA(Silu);
KILN_UNARY_RECORD(SiluGrad, "silu_grad", Accepts::Float, kYes, &gradSiluGrad,
                  "silu's derivative, s (1 + x (1 - s))");
KILN_UNARY_RECORD(Softplus, "softplus", Accepts::Float, kYes, &gradSoftplus,
                  "log(1 + e^x), x above 20 (PyTorch's threshold)");

KILN_BINARY_RECORD(Add, "add", Accepts::Numeric, kYes, &gradAdd, true, "lhs + rhs",
                   .exactOnIntegers = true);
KILN_BINARY_RECORD(Sub, "sub", Accepts::Numeric, kYes, &gradSub, false, "lhs - rhs",
                   .exactOnIntegers = true);
KILN_BINARY_RECORD(Mul, "mul", Accepts::Numeric, kYes, &gradMul, true, "lhs * rhs");
KILN_BINARY_RECORD(Div, "div", Accepts::Float, kYes, &gradDiv, false, "lhs / rhs");
KILN_BINARY_RECORD(Max, "max", Accepts::Numeric, kYes, &gradMax, true,
                   "elementwise maximum, NaN propagating", .exactOnIntegers = true);
KILN_BINARY_RECORD(Min, "min", Accepts::Numeric, kYes, &gradMin, true,
                   "elementwise minimum, NaN propagating", .exactOnIntegers = true);
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
KILN_FORMULA(Select);
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
    .operands = kDropoutOperands,
    .optionalOperands = 1,
    .attrs = kDropoutAttrs,
    .infer = &inferDropout,
    .ref32 = &refDropout<float>,
    .ref64 = &refDropout<double>,
    .grad = &gradDropout,
    // Element k of its mask is drawn at k: not pointwise (nor a region member, whose loop nest
    // runs over another layout), but it reads x element for element, so it may run in place.
    .writesOver = &dropoutWritesOver};
// The identity on values; autodiff sends no gradient through it (Differentiable::No), so what
// flows out of it is a constant as far as the loss is concerned.
inline constexpr OpInfo kStopGradientOp{.kind = OpKind::StopGradient,
                                        .mnemonic = "stop_gradient",
                                        .summary =
                                            "x, as a constant to autodiff (no gradient flows)",
                                        .operands = kUnaryOperands,
                                        .infer = &inferUnary<Accepts::Any>,
                                        .ref32 = &refUnary<float, formula::StopGradient>,
                                        .ref64 = &refUnary<double, formula::StopGradient>,
                                        .differentiable = Differentiable::No,
                                        KILN_POINTWISE_TRAITS};
KILN_FORMULA(StopGradient);

#undef KILN_FORMULA
#undef KILN_UNARY_RECORD
#undef KILN_BINARY_RECORD
#undef KILN_COMPARE_RECORD
#undef KILN_POINTWISE_TRAITS

} // namespace kiln::ir

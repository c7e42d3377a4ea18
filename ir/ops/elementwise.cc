// Shape/dtype inference, reference loops and decompositions of the elementwise ops (their
// gradient rules are in elementwise_grad.cc).
#include "ir/ops/elementwise.h"

#include "ir/builder.h"
#include "support/bf16.h"
#include "support/rng.h"

namespace kiln::ir {
namespace {

// `subject` is the start of the sentence: "operand has" or "operands have".
Status checkAccepts(Accepts a, DType t, std::string_view subject) {
  bool ok = a == Accepts::Any || (a == Accepts::Float && isFloat(t)) ||
            (a == Accepts::Numeric && t != DType::Bool) || (a == Accepts::Bool && t == DType::Bool);
  if (ok)
    return {};
  std::string_view want = a == Accepts::Float     ? "a float dtype (f32, f64, bf16)"
                          : a == Accepts::Numeric ? "a numeric dtype (not bool)"
                                                  : "bool";
  return makeError("{} dtype {}, expected {}", subject, dtypeName(t), want);
}

Status checkSameDType(const Type &a, const Type &b) {
  if (a.dtype != b.dtype)
    return makeError("operand dtypes differ: {} vs {} (insert a cast)", typeString(a),
                     typeString(b));
  return {};
}

} // namespace

template <Accepts A>
Expected<std::vector<Type>> inferUnary(std::span<const Type> in, const Attrs &) {
  if (Status s = checkAccepts(A, in[0].dtype, "operand has"); !s)
    return s.error();
  return std::vector<Type>{in[0]};
}

template <Accepts A>
Expected<std::vector<Type>> inferBinary(std::span<const Type> in, const Attrs &) {
  if (Status s = checkSameDType(in[0], in[1]); !s)
    return s.error();
  if (Status s = checkAccepts(A, in[0].dtype, "operands have"); !s)
    return s.error();
  Expected<Shape> shape = broadcastShapes(in[0].shape, in[1].shape);
  if (!shape)
    return shape.error();
  return std::vector<Type>{Type{in[0].dtype, std::move(*shape)}};
}

template <Accepts A>
Expected<std::vector<Type>> inferCompare(std::span<const Type> in, const Attrs &a) {
  Expected<std::vector<Type>> t = inferBinary<A>(in, a);
  if (t)
    (*t)[0].dtype = DType::Bool;
  return t;
}

#define KILN_INSTANTIATE_INFER(fn)                                                                 \
  template Expected<std::vector<Type>> fn<Accepts::Float>(std::span<const Type>, const Attrs &);   \
  template Expected<std::vector<Type>> fn<Accepts::Numeric>(std::span<const Type>, const Attrs &); \
  template Expected<std::vector<Type>> fn<Accepts::Bool>(std::span<const Type>, const Attrs &);    \
  template Expected<std::vector<Type>> fn<Accepts::Any>(std::span<const Type>, const Attrs &)
KILN_INSTANTIATE_INFER(inferUnary);
KILN_INSTANTIATE_INFER(inferBinary);
KILN_INSTANTIATE_INFER(inferCompare);
#undef KILN_INSTANTIATE_INFER

Expected<std::vector<Type>> inferSelect(std::span<const Type> in, const Attrs &) {
  if (in[0].dtype != DType::Bool)
    return makeError("condition has dtype {}, expected bool", dtypeName(in[0].dtype));
  if (Status s = checkSameDType(in[1], in[2]); !s)
    return s.error();
  Expected<Shape> s1 = broadcastShapes(in[0].shape, in[1].shape);
  if (!s1)
    return s1.error();
  Expected<Shape> s2 = broadcastShapes(*s1, in[2].shape);
  if (!s2)
    return s2.error();
  return std::vector<Type>{Type{in[1].dtype, std::move(*s2)}};
}

Expected<std::vector<Type>> inferCast(std::span<const Type> in, const Attrs &attrs) {
  return std::vector<Type>{Type{attrs.getDType("dtype"), in[0].shape}};
}

Expected<std::vector<Type>> inferDropout(std::span<const Type> in, const Attrs &attrs) {
  double p = attrs.getFloat("p");
  if (!(p >= 0 && p < 1))
    return makeError("p = {} is outside [0, 1)", attrValueString(p));
  if (in.size() == 2)
    if (Status s = checkStepOperand(in[1]); !s)
      return s.error();
  return inferUnary<Accepts::Float>(in, attrs);
}

Status checkStepOperand(const Type &step) {
  if (step.rank() != 0 || step.dtype == DType::Bool)
    return makeError("step is {}, expected a number (a scalar: the training step's count)",
                     typeString(step));
  return {};
}

bool dropoutWritesOver(const Node &, int result, int operand) {
  return result == 0 && operand == 0;
}

template <class F> KILN_REF_FN(refSelect) {
  (void)attrs;
  const RefTensor<F> &c = *in[0], &a = *in[1], &b = *in[2];
  RefTensor<F> &y = out[0];
  std::vector<int64_t> ic = broadcastIndexMap(c.type.shape, y.type.shape);
  std::vector<int64_t> ia = broadcastIndexMap(a.type.shape, y.type.shape);
  std::vector<int64_t> ib = broadcastIndexMap(b.type.shape, y.type.shape);
  for (int64_t k = 0; k < y.size(); ++k) {
    bool take = c.i[ic[k]] != 0;
    if (y.isFloatStorage())
      y.f[k] = take ? a.f[ia[k]] : b.f[ib[k]];
    else
      y.i[k] = take ? a.i[ia[k]] : b.i[ib[k]];
  }
  return {};
}
KILN_REF_INSTANTIATE(refSelect);

template <class F> KILN_REF_FN(refCast) {
  (void)attrs;
  const RefTensor<F> &x = *in[0];
  RefTensor<F> &y = out[0];
  DType to = y.type.dtype;
  for (int64_t k = 0; k < x.size(); ++k) {
    if (to == DType::Bool)
      y.i[k] = x.get(k) != 0;
    else if (isFloat(to))
      y.f[k] = x.isFloatStorage() ? x.f[k] : static_cast<F>(x.i[k]); // bf16: rounded by the caller
    else if (x.isFloatStorage())
      y.i[k] = static_cast<int64_t>(x.f[k]); // truncation toward zero
    else
      y.i[k] = to == DType::I32 ? static_cast<int32_t>(x.i[k]) : x.i[k]; // i64 -> i32 wraps
  }
  return {};
}
KILN_REF_INSTANTIATE(refCast);

template <class F> KILN_REF_FN(refDropout) {
  double p = attrs.getFloat("p");
  uint64_t seed = static_cast<uint64_t>(attrs.getInt("seed"));
  if (in.size() == 2)
    seed = rng::stepSeed(seed, rng::stepCount(in[1]->get(0)));
  F scale = F(1) / F(1 - p);
  const RefTensor<F> &x = *in[0];
  for (int64_t k = 0; k < x.size(); ++k)
    out[0].f[k] = rng::uniform(seed, static_cast<uint64_t>(k)) >= p ? x.f[k] * scale : F(0);
  return {};
}
KILN_REF_INSTANTIATE(refDropout);

// The decompositions copy what they need from `n` before appending: `n` may be a node of `g`,
// which appending can move. Their nodes keep n's location and, for a backward node, its gradOf.

// sigmoid(x) = 1 / (1 + exp(-x))
Expected<std::vector<int32_t>> decomposeSigmoid(Graph &g, const Node &n) {
  ValueId x = n.operands[0];
  Builder b(g, n.loc, n.gradOf);
  ValueId one = b.scalar(1.0, g.type(x).dtype);
  return std::vector<int32_t>{b.div(one, b.add(one, b.emit(OpKind::Exp, {b.neg(x)})))};
}

// silu(x) = x * sigmoid(x)
Expected<std::vector<int32_t>> decomposeSilu(Graph &g, const Node &n) {
  ValueId x = n.operands[0];
  Builder b(g, n.loc, n.gradOf);
  return std::vector<int32_t>{b.mul(x, b.emit(OpKind::Sigmoid, {x}))};
}

} // namespace kiln::ir

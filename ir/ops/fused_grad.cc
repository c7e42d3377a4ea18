// Gradient rules of the fused ops (see ir/grad.h) and the decompositions of attention, layer_norm
// and rms_norm into primitives. A forward rule emits the op's fused backward op, which recomputes
// what it needs from the saved statistics (lse, mean, rstd); the decompositions are the unfused
// graphs the fusion passes start from, and what "fused == unfused" is tested against.
#include <cassert>
#include <cmath>
#include <limits>

#include "ir/grad.h"
#include "ir/ops/fused.h"
#include "ir/ops/reduce.h"

namespace kiln::ir {
using K = OpKind;

namespace {

// Emits a node that may have several results (Builder::emit is for single-result ops) as part of
// the gradient of c's forward node, and returns its results.
std::vector<ValueId> emitAll(GradContext &c, OpKind op, std::vector<ValueId> operands,
                             Attrs attrs) {
  Expected<NodeId> n = c.graph.addNode(op, operands, std::move(attrs), c.forward.loc);
  assert(n.ok() && "a fused gradient rule built an ill-typed node");
  if (!n.ok())
    return {};
  c.graph.node(*n).gradOf = c.forwardId;
  return c.graph.node(*n).results;
}

// The statistics results (lse, mean, rstd) are saved for the backward op, not outputs to
// differentiate: each backward op treats them as constants of the forward pass. That is exact
// only while no gradient flows into them, which is the case for every graph the fusion passes
// make (nothing but the backward op reads them); a graph that uses one (say lse in a z-loss) must
// be differentiated unfused, and gets this error rather than a silently wrong gradient.
Status expectNoStatGradient(GradContext &c, int result, std::string_view name) {
  if (isZeroConstant(c.graph, c.dy[result]))
    return {};
  return makeError("gradient flows into the statistic '{}', which the fused backward treats as "
                   "a constant (differentiate the unfused graph to use it in a loss)",
                   name);
}

// A norm's y stored in bf16 is a lowering's decision, made after differentiation.
Status expectF32Y(GradContext &c) {
  if (!c.forward.attrs.getBool("bf16_y"))
    return {};
  return makeError("{} with bf16_y has no gradient: y is stored in bf16 after differentiation "
                   "(passes/bf16_activations.cc); differentiate the graph without it",
                   mnemonic(c.forward.op));
}

Attrs normBackwardAttrs(bool hasWeight) {
  Attrs a(kNormBackwardAttrs);
  [[maybe_unused]] Status s = a.set("has_weight", hasWeight);
  assert(s.ok());
  return a;
}

// The norm part of layer_norm / rms_norm / add_*_norm: the normalised value x, its saved
// statistics (mean only for layer_norm), dy of the norm's y, and the optional weight and bias
// operand indices in c (kNone if absent).
struct NormGrad {
  ValueId x, mean, rstd, dy;
  int weightAt, biasAt;
};

// dx of the norm, and the weight's and bias's gradients set in c:
//   dx, dweight = <norm>_backward(x, [mean,] rstd, dy [, weight])
//   dbias = sum over rows of dy           (dy summed to [N])
// Returns kNone for dx when dy is a zero constant (only the residual sum is used): then the norm
// adds nothing, and weight and bias get no gradient.
ValueId buildNormBackward(GradContext &c, const NormGrad &n, OpKind backwardOp) {
  if (isZeroConstant(c.graph, n.dy))
    return kNone;
  bool hasWeight = n.weightAt != kNone;
  std::vector<ValueId> operands = {n.x};
  if (n.mean != kNone)
    operands.push_back(n.mean);
  operands.push_back(n.rstd);
  operands.push_back(n.dy);
  if (hasWeight)
    operands.push_back(c.x(n.weightAt));
  std::vector<ValueId> r = emitAll(c, backwardOp, operands, normBackwardAttrs(hasWeight));
  if (hasWeight)
    c.dx[n.weightAt] = r[1];
  if (n.biasAt != kNone)
    c.setGrad(n.biasAt, n.dy); // sums dy over the leading (row) axes down to [N]
  return r[0];
}

// Where the forward node has operand `name`, its index, else kNone.
int operandAt(const Node &forward, std::string_view name) {
  std::optional<size_t> at = operandIndex(opInfo(forward.op), forward.attrs, name);
  return at ? static_cast<int>(*at) : kNone;
}

} // namespace

// attention(q, k, v [, mask] [, bias] [, step]) -> out, lse:
//   dq, dk, dv [, dbias] = attention_backward(q, k, v, out, lse, dout [, mask] [, bias] [, step])
// dk and dv come back summed over the query heads that share each kv head (GQA), dbias summed to
// bias's shape; the mask is bool and the step a count: they get no gradient.
Status gradAttention(GradContext &c) {
  if (Status s = expectNoStatGradient(c, 1, "lse"); !s)
    return s;
  const Node &f = c.forward;
  std::vector<ValueId> operands = {c.x(0), c.x(1), c.x(2), c.y(0), c.y(1), c.dy[0]};
  for (std::string_view name : {"mask", "bias", "step"})
    if (ValueId v = operandOf(f, name); v != kNone)
      operands.push_back(v);
  std::vector<ValueId> r = emitAll(c, K::AttentionBackward, operands, f.attrs);
  c.dx[0] = r[0];
  c.dx[1] = r[1];
  c.dx[2] = r[2];
  if (int biasAt = operandAt(f, "bias"); biasAt != kNone)
    c.dx[biasAt] = r[3];
  return {};
}

// layer_norm(x [, weight] [, bias]) -> y, mean, rstd
Status gradLayerNorm(GradContext &c) {
  if (Status s = expectF32Y(c); !s)
    return s;
  if (Status s = expectNoStatGradient(c, 1, "mean"); !s)
    return s;
  if (Status s = expectNoStatGradient(c, 2, "rstd"); !s)
    return s;
  NormGrad n{.x = c.x(0),
             .mean = c.y(1),
             .rstd = c.y(2),
             .dy = c.dy[0],
             .weightAt = operandAt(c.forward, "weight"),
             .biasAt = operandAt(c.forward, "bias")};
  c.dx[0] = buildNormBackward(c, n, K::LayerNormBackward); // kNone (no gradient) if dy is zero
  return {};
}

// rms_norm(x [, weight]) -> y, rstd
Status gradRmsNorm(GradContext &c) {
  if (Status s = expectF32Y(c); !s)
    return s;
  if (Status s = expectNoStatGradient(c, 1, "rstd"); !s)
    return s;
  NormGrad n{.x = c.x(0),
             .mean = kNone,
             .rstd = c.y(1),
             .dy = c.dy[0],
             .weightAt = operandAt(c.forward, "weight"),
             .biasAt = kNone};
  c.dx[0] = buildNormBackward(c, n, K::RmsNormBackward); // kNone (no gradient) if dy is zero
  return {};
}

namespace {

// add_*_norm: sum = a + b feeds both the result `sum` and the norm, so
//   dsum = dy[sum] + dx of the norm,   da = dsum summed to a's shape,   db likewise.
// A zero term (a result nothing uses) is left out.
Status gradAddNorm(GradContext &c, ValueId dxNorm) {
  ValueId dsum = c.dy[0];
  if (dxNorm != kNone)
    dsum = isZeroConstant(c.graph, dsum) ? dxNorm : c.add(dsum, dxNorm);
  c.setGrad(0, dsum);
  c.setGrad(1, dsum);
  return {};
}

} // namespace

// add_layer_norm(a, b [, weight] [, bias]) -> sum, y, mean, rstd
Status gradAddLayerNorm(GradContext &c) {
  if (Status s = expectF32Y(c); !s)
    return s;
  if (Status s = expectNoStatGradient(c, 2, "mean"); !s)
    return s;
  if (Status s = expectNoStatGradient(c, 3, "rstd"); !s)
    return s;
  NormGrad n{.x = c.y(0),
             .mean = c.y(2),
             .rstd = c.y(3),
             .dy = c.dy[1],
             .weightAt = operandAt(c.forward, "weight"),
             .biasAt = operandAt(c.forward, "bias")};
  return gradAddNorm(c, buildNormBackward(c, n, K::LayerNormBackward));
}

// add_rms_norm(a, b [, weight]) -> sum, y, rstd
Status gradAddRmsNorm(GradContext &c) {
  if (Status s = expectF32Y(c); !s)
    return s;
  if (Status s = expectNoStatGradient(c, 2, "rstd"); !s)
    return s;
  NormGrad n{.x = c.y(0),
             .mean = kNone,
             .rstd = c.y(2),
             .dy = c.dy[1],
             .weightAt = operandAt(c.forward, "weight"),
             .biasAt = kNone};
  return gradAddNorm(c, buildNormBackward(c, n, K::RmsNormBackward));
}

// The fused backward ops are leaves of differentiation: their math is the first derivative only.
namespace {
Status noDoubleBackward(std::string_view op) {
  return makeError("{} has no gradient: double backward through a fused backward op is not "
                   "supported (differentiate the unfused graph twice instead)",
                   op);
}
} // namespace
Status gradAttentionBackward(GradContext &) {
  return noDoubleBackward("attention_backward");
}
Status gradLayerNormBackward(GradContext &) {
  return noDoubleBackward("layer_norm_backward");
}
Status gradRmsNormBackward(GradContext &) {
  return noDoubleBackward("rms_norm_backward");
}

// ---- Decompositions ----
// They copy what they need from `n` before appending: `n` may be a node of `g`, which appending
// can move. Their nodes keep n's location and, for a backward node, its gradOf.

namespace {
std::vector<int64_t> lastAxis() {
  return {-1};
}

// A statistic of the decomposition, from its keepdims form [..., 1] to x.shape[:-1] in the stat
// dtype (f64 for f64, else f32: a bf16 graph's statistics are cast up).
ValueId asRowStat(Builder &b, ValueId v) {
  Type t = b.type(v);
  Shape rows(t.shape.begin(), t.shape.end() - 1);
  ValueId r = b.reshape(v, rows);
  return t.dtype == DType::BF16 ? b.cast(r, DType::F32) : r;
}
} // namespace

// With c = h / g the kv head of query head h (g = Hq / Hkv):
//   k', v' = k, v with each kv head repeated g times      reshape [B,Hkv,1,T,D], broadcast
//                                                          [B,Hkv,g,T,D], reshape [B,Hq,T,D]
//   l   = matmul(q, k'^T) * scale  (+ bias)                 [B, Hq, Tq, Tk]
//   l   = select(allowed, l, -inf),  allowed = mask and tri(Tq, Tk)   (as present)
//   m   = reduce_max(l, -1, keepdims) (0 if -inf);  e = exp(l - m);  s = reduce_sum(e, -1, ..)
//   out = matmul(e / max(s, 1), v');   lse = m + log(s)    (= log sum exp l, without overflow)
// (bf16_products: both matmuls marked, and out = matmul(e, v') / max(s, 1))
// (softmax's guards: a fully masked row gives out = 0 and lse = -inf.)
Expected<std::vector<int32_t>> decomposeAttention(Graph &g, const Node &n) {
  ValueId q = n.operands[0], k = n.operands[1], v = n.operands[2];
  Attrs attrs = n.attrs;
  size_t next = 3;
  ValueId mask = attrs.getBool("has_mask") ? n.operands[next++] : kNone;
  ValueId bias = attrs.getBool("has_bias") ? n.operands[next++] : kNone;
  ValueId step = attrs.getBool("has_step") ? n.operands[next++] : kNone;
  Builder b(g, n.loc, n.gradOf);
  // bthd: the [B, T, H, D] operands as [B, H, T, D], and out back.
  const bool bthd = attrs.getBool("bthd");
  auto swapHeads = [&](ValueId x) {
    return bthd ? b.emit(K::Transpose, {x}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}}) : x;
  };
  q = swapHeads(q), k = swapHeads(k), v = swapHeads(v);
  Shape qs = b.type(q).shape;
  DType t = b.type(q).dtype;
  int64_t hq = qs[1], hkv = b.type(k).shape[1], tq = qs[2], tk = b.type(k).shape[2];

  auto repeatHeads = [&](ValueId x) { // [B, Hkv, T, D] -> [B, Hq, T, D], head h = x's h / g
    if (hkv == hq)
      return x;
    Shape s = b.type(x).shape;
    ValueId r = b.reshape(x, {s[0], hkv, 1, s[2], s[3]});
    r = b.emit(K::Broadcast, {r}, {{"shape", Shape{s[0], hkv, hq / hkv, s[2], s[3]}}});
    return b.reshape(r, {s[0], hq, s[2], s[3]});
  };
  ValueId kr = repeatHeads(k), vr = repeatHeads(v);

  const bool bf16 = attrs.getBool("bf16_products");
  ValueId logits = b.emit(K::Matmul, {q, kr}, {{"transpose_b", true}, {"bf16_products", bf16}});
  logits = b.mul(logits, b.scalar(attrs.getFloat("scale"), t));
  if (bias != kNone)
    logits = b.add(logits, bias);
  ValueId allowed = mask;
  auto allow = [&](ValueId m) {
    allowed = allowed == kNone ? m : b.emit(K::LogicalAnd, {allowed, m});
  };
  if (attrs.getBool("causal"))
    allow(b.emit(K::Tri, {}, {{"shape", Shape{tq, tk}}}));
  if (int64_t w = attrs.getInt("window"); w > 0) { // j - i >= 1 - w and j - i <= w - 1
    allow(b.emit(K::Tri, {}, {{"shape", Shape{tq, tk}}, {"diagonal", 1 - w}, {"lower", false}}));
    if (!attrs.getBool("causal"))
      allow(b.emit(K::Tri, {}, {{"shape", Shape{tq, tk}}, {"diagonal", w - 1}}));
  }
  if (allowed != kNone)
    logits = b.select(allowed, logits, b.scalar(-std::numeric_limits<double>::infinity(), t));

  ValueId m = b.emit(K::ReduceMax, {logits}, {{"axes", lastAxis()}, {"keepdims", true}});
  m = softmaxShift(b, m);
  ValueId e = b.emit(K::Exp, {b.sub(logits, m)});
  ValueId s = b.sum(e, lastAxis(), true);
  ValueId denom = b.emit(K::Max, {s, b.scalar(1, t)});
  // bf16 products round e, and the sum divides the product (ir/ops/fused.h); else p = e / denom.
  ValueId p = bf16 ? e : b.div(e, denom);
  if (double r = attrs.getFloat("dropout"); r > 0)
    p = step == kNone ? b.emit(K::Dropout, {p}, {{"p", r}, {"seed", attrs.getInt("seed")}})
                      : b.emit(K::Dropout, {p, step}, {{"p", r}, {"seed", attrs.getInt("seed")}});
  ValueId out = b.emit(K::Matmul, {p, vr}, {{"bf16_products", bf16}});
  if (bf16)
    out = b.div(out, denom);
  out = swapHeads(out);
  ValueId lse = b.add(m, b.emit(K::Log, {s}));
  return std::vector<int32_t>{out, asRowStat(b, lse)};
}

// mean = reduce_mean(x, -1);  d = x - mean;  var = reduce_mean(d * d, -1)   (keepdims)
// rstd = rsqrt(var + eps);  y = d * rstd (* weight) (+ bias)  (bf16_y: then cast to bf16)
Expected<std::vector<int32_t>> decomposeLayerNorm(Graph &g, const Node &n) {
  ValueId x = n.operands[0];
  Attrs attrs = n.attrs;
  size_t next = 1;
  ValueId weight = attrs.getBool("has_weight") ? n.operands[next++] : kNone;
  ValueId bias = attrs.getBool("has_bias") ? n.operands[next++] : kNone;
  Builder b(g, n.loc, n.gradOf);
  DType t = b.type(x).dtype;
  auto meanLast = [&](ValueId v) {
    return b.emit(K::ReduceMean, {v}, {{"axes", lastAxis()}, {"keepdims", true}});
  };
  ValueId mean = meanLast(x);
  ValueId d = b.sub(x, mean);
  ValueId var = meanLast(b.mul(d, d));
  ValueId rstd = b.emit(K::Rsqrt, {b.add(var, b.scalar(attrs.getFloat("eps"), t))});
  ValueId y = b.mul(d, rstd);
  if (weight != kNone)
    y = b.mul(y, weight);
  if (bias != kNone)
    y = b.add(y, bias);
  if (attrs.getBool("bf16_y"))
    y = b.emit(K::Cast, {y}, {{"dtype", DType::BF16}});
  return std::vector<int32_t>{y, asRowStat(b, mean), asRowStat(b, rstd)};
}

// rstd = rsqrt(reduce_mean(x * x, -1, keepdims) + eps);  y = x * rstd (* weight)
Expected<std::vector<int32_t>> decomposeRmsNorm(Graph &g, const Node &n) {
  ValueId x = n.operands[0];
  ValueId weight = n.attrs.getBool("has_weight") ? n.operands[1] : kNone;
  double eps = n.attrs.getFloat("eps");
  const bool bf16 = n.attrs.getBool("bf16_y");
  Builder b(g, n.loc, n.gradOf);
  DType t = b.type(x).dtype;
  ValueId ms = b.emit(K::ReduceMean, {b.mul(x, x)}, {{"axes", lastAxis()}, {"keepdims", true}});
  ValueId rstd = b.emit(K::Rsqrt, {b.add(ms, b.scalar(eps, t))});
  ValueId y = b.mul(x, rstd);
  if (weight != kNone)
    y = b.mul(y, weight);
  if (bf16)
    y = b.emit(K::Cast, {y}, {{"dtype", DType::BF16}});
  return std::vector<int32_t>{y, asRowStat(b, rstd)};
}

} // namespace kiln::ir

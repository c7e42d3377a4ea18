// Shape/dtype inference and reference loops of the fused ops (see fused.h for their semantics):
// attention, the norms and their backward ops. The attention loops walk one query row (b, h, i)
// at a time and never hold a Tq x Tk buffer: the forward keeps one row of logits, the backward
// recomputes each probability from the saved lse where it needs it. The norm loops go row by row
// over the last axis. (Gradient rules and decompositions: fused_grad.cc.)
#include "ir/ops/fused.h"

#include <array>
#include <cmath>
#include <limits>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/graph.h"
#include "ir/ops/elementwise.h"
#include "support/bf16.h"
#include "support/rng.h"
#include "support/workspace.h"

namespace kiln::ir {
namespace {

// ---- Inference ----

DType statDType(DType t) {
  return t == DType::F64 ? DType::F64 : DType::F32;
}

Status expectFloat(std::string_view name, const Type &t) {
  if (!isFloat(t.dtype))
    return makeError("{} has dtype {}, expected a float dtype (f32, f64, bf16)", name,
                     dtypeName(t.dtype));
  return {};
}

// "q is f32[2,3], expected rank 4 [B, H, T, D]"
Status expectRank4(std::string_view name, const Type &t, std::string_view layout) {
  if (t.rank() != 4)
    return makeError("{} is {}, expected rank 4 {}", name, typeString(t), layout);
  return {};
}

Status expectType(std::string_view name, const Type &t, const Type &want, std::string_view why) {
  if (t != want)
    return makeError("{} is {}, expected {} ({})", name, typeString(t), typeString(want), why);
  return {};
}

// Whether numpy broadcasting stretches `from` to exactly `to`.
bool broadcastsTo(std::span<const int64_t> from, std::span<const int64_t> to) {
  if (from.size() > to.size())
    return false;
  size_t lead = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d)
    if (from[d] != 1 && from[d] != to[lead + d])
      return false;
  return true;
}

// The operand count the record and its has_* flags call for (ir/op.h presentOperands):
// "expects 4 operands (q, k, v, bias) with has_mask = false, has_bias = true; got 5"
Status checkOperandCount(const OpInfo &op, size_t got, const Attrs &attrs) {
  std::vector<std::string_view> names = presentOperands(op, attrs);
  if (got == names.size())
    return {};
  std::vector<std::string> settings;
  for (size_t i = op.operands.size() - op.optionalOperands; i < op.operands.size(); ++i) {
    const std::string flag = fmt::format("has_{}", op.operands[i]);
    settings.push_back(fmt::format("{} = {}", flag, attrs.getBool(flag)));
  }
  return makeError("expects {} operand{} ({}) with {}; got {}", names.size(),
                   names.size() == 1 ? "" : "s", fmt::join(names, ", "), fmt::join(settings, ", "),
                   got);
}

// The operand `name` of an op of record `op` among `in`, or null where it is absent.
template <class T>
const T *operandIn(const OpInfo &op, std::span<T const> in, const Attrs &attrs,
                   std::string_view name) {
  std::optional<size_t> at = operandIndex(op, attrs, name);
  return at ? &in[*at] : nullptr;
}

// An attention's dimensions with the types they imply.
struct AttnDims : AttentionDims {
  DType dtype;
  Shape logits() const { return {b, hq, tq, tk}; }
  Type out() const { return {dtype, bthd ? Shape{b, tq, hq, dv} : Shape{b, hq, tq, dv}}; }
  Type lse() const { return {statDType(dtype), {b, hq, tq}}; }
};

// The dimensions as they stand (checked by checkAttention).
AttnDims dimsOf(const Type &q, const Type &k, const Type &v, bool bthd) {
  return {attentionDims(q, k, v, bthd), q.dtype};
}

int64_t scratchOf(const Graph &g, const Node &n, bool backward) {
  AttentionDims a = attentionDims(g, n);
  return workspace::attentionBytes(a.tq, a.tk, a.d, a.dv, backward,
                                   n.attrs.getBool("bf16_products"));
}

// Checks q, k, v (in[0..2]), the attributes, and mask and bias where present (`op`: attention or
// attention_backward); the operand count was checked by the caller.
Expected<AttnDims> checkAttention(const OpInfo &op, std::span<const Type> in, const Attrs &attrs) {
  const Type &q = in[0], &k = in[1], &v = in[2];
  const bool bthd = attrs.getBool("bthd");
  const std::string_view layout = bthd ? "[B, T, H, D] (bthd)" : "[B, H, T, D]";
  for (auto [name, t] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}}) {
    if (Status s = expectFloat(name, *t); !s)
      return s.error();
    if (Status s = expectRank4(name, *t, layout); !s)
      return s.error();
  }
  if (k.dtype != q.dtype || v.dtype != q.dtype)
    return makeError("q, k and v must have one dtype, got {}, {}, {}", typeString(q), typeString(k),
                     typeString(v));
  AttnDims a = dimsOf(q, k, v, bthd);
  if (k.shape[0] != a.b || v.shape[0] != a.b)
    return makeError("batch sizes differ: q {}, k {}, v {}", typeString(q), typeString(k),
                     typeString(v));
  if (k.shape[3] != a.d)
    return makeError("k's head dim {} differs from q's {} (q {}, k {})", k.shape[3], a.d,
                     typeString(q), typeString(k));
  const Shape &vs = v.shape;
  if ((bthd ? vs[2] : vs[1]) != a.hkv || (bthd ? vs[1] : vs[2]) != a.tk)
    return makeError("v {} must have k's {} [{}, {}] (k {})", typeString(v),
                     bthd ? "length and heads" : "heads and length", bthd ? a.tk : a.hkv,
                     bthd ? a.hkv : a.tk, typeString(k));
  if (a.hkv == 0 || a.hq % a.hkv != 0)
    return makeError("q's {} heads are not a multiple of k's {} (each kv head serves Hq / Hkv "
                     "query heads)",
                     a.hq, a.hkv);
  if (attrs.getInt("q_heads") != a.hq)
    return makeError("q_heads = {} but q has {} heads ({})", attrs.getInt("q_heads"), a.hq,
                     typeString(q));
  if (attrs.getInt("kv_heads") != a.hkv)
    return makeError("kv_heads = {} but k and v have {} heads ({})", attrs.getInt("kv_heads"),
                     a.hkv, typeString(k));
  if (double s = attrs.getFloat("scale"); !std::isfinite(s))
    return makeError("scale = {} is not finite", attrValueString(s));
  if (double r = attrs.getFloat("dropout"); !(r >= 0 && r < 1))
    return makeError("dropout = {} is outside [0, 1)", attrValueString(r));
  if (int64_t w = attrs.getInt("window"); w < 0)
    return makeError("window = {} is negative (0: no sliding window)", w);
  if (const Type *step = operandIn(op, in, attrs, "step"))
    if (Status s = checkStepOperand(*step); !s)
      return s.error();

  Shape logits = a.logits();
  if (const Type *mask = operandIn(op, in, attrs, "mask")) {
    const Type &m = *mask;
    if (m.dtype != DType::Bool)
      return makeError("mask has dtype {}, expected bool (true = may attend)", dtypeName(m.dtype));
    if (!broadcastsTo(m.shape, logits))
      return makeError("mask {} does not broadcast to [B, Hq, Tq, Tk] = {}", typeString(m),
                       shapeString(logits));
  }
  if (const Type *bias = operandIn(op, in, attrs, "bias")) {
    const Type &b = *bias;
    if (b.dtype != q.dtype)
      return makeError("bias has dtype {}, expected q's dtype {}", dtypeName(b.dtype),
                       dtypeName(q.dtype));
    if (!broadcastsTo(b.shape, logits))
      return makeError("bias {} does not broadcast to [B, Hq, Tq, Tk] = {}", typeString(b),
                       shapeString(logits));
  }
  return a;
}

// The normalised operand of a norm: float, at least one axis (the last is normalised).
Status checkNormed(std::string_view name, const Type &x) {
  if (Status s = expectFloat(name, x); !s)
    return s;
  if (x.rank() == 0)
    return makeError("{} is {}, expected rank >= 1 (the last axis is normalised)", name,
                     typeString(x));
  return {};
}

// weight and bias, where the op (`op`) has them: [N] in the dtype of x (the normalised value,
// called `xName`).
Status checkAffine(const OpInfo &op, std::span<const Type> in, const Attrs &attrs, const Type &x,
                   std::string_view xName = "x") {
  Type want{x.dtype, {x.shape.back()}};
  std::string why = fmt::format("[N] in {}'s dtype", xName);
  for (std::string_view name : {"weight", "bias"})
    if (const Type *t = operandIn(op, in, attrs, name))
      if (Status s = expectType(name, *t, want, why); !s)
        return s;
  return {};
}

Status checkEps(const Attrs &attrs) {
  if (double eps = attrs.getFloat("eps"); !(eps >= 0 && std::isfinite(eps)))
    return makeError("eps = {} must be finite and >= 0", attrValueString(eps));
  return {};
}

// A norm's y: x's type (the normalised value's, called `xName`), or bf16 of its shape under
// bf16_y, which rounds f32 only.
Expected<Type> normedY(const Type &x, const Attrs &attrs, std::string_view xName = "x") {
  if (!attrs.getBool("bf16_y"))
    return x;
  if (x.dtype != DType::F32)
    return makeError("bf16_y rounds an f32 y, but {} is {}", xName, typeString(x));
  return Type{DType::BF16, x.shape};
}

// A statistic of each row of x: x.shape[:-1] in the stat dtype.
Type rowStat(const Type &x) {
  return {statDType(x.dtype), Shape(x.shape.begin(), x.shape.end() - 1)};
}

// sum = a + b of add_layer_norm / add_rms_norm: one float dtype, numpy broadcasting.
Expected<Type> checkResidualSum(const Type &a, const Type &b) {
  if (Status s = expectFloat("a", a); !s)
    return s.error();
  if (a.dtype != b.dtype)
    return makeError("a and b must have one dtype, got {} and {}", typeString(a), typeString(b));
  Expected<Shape> shape = broadcastShapes(a.shape, b.shape);
  if (!shape)
    return makeError("a + b: {}", shape.error().message);
  Type sum{a.dtype, std::move(*shape)};
  if (Status s = checkNormed("a + b", sum); !s)
    return s.error();
  return sum;
}

// ---- Reference ----

// Element strides of a mask or bias operand read at logits index [b, h, i, j]: 0 where the
// operand broadcasts (a missing leading dim or a dim of size 1).
std::array<int64_t, 4> broadcastStrides(std::span<const int64_t> shape) {
  std::array<int64_t, 4> s{0, 0, 0, 0};
  std::vector<int64_t> own = stridesOf(shape);
  size_t lead = 4 - shape.size();
  for (size_t d = 0; d < shape.size(); ++d)
    s[lead + d] = shape[d] == 1 ? 0 : own[d];
  return s;
}

// One attention's operands and dimensions, as the reference loops read them. Flat offsets of the
// row-major tensors: q and out at [b, h, i, :], k and v at [b, c, j, :] (c = h / group, the kv
// head query head h reads; [b, i, h, :] and [b, j, c, :] with bthd), mask and bias at
// [b, h, i, j] through their broadcast strides.
template <class F> struct Attn {
  const RefTensor<F> &q, &k, &v;
  const RefTensor<F> *mask = nullptr, *bias = nullptr;
  AttnDims n;
  int64_t group;
  F scale;
  bool causal;
  int64_t window;
  double dropout;
  uint64_t seed;
  F keepScale;
  bool bf16; // bf16_products: r() rounds each product's operands
  std::array<int64_t, 4> maskStrides{}, biasStrides{};

  Attn(const OpInfo &op, const Attrs &attrs, std::span<const RefTensor<F> *const> in)
      : q(*in[0]), k(*in[1]), v(*in[2]), n(dimsOf(q.type, k.type, v.type, attrs.getBool("bthd"))),
        group(n.hq / n.hkv), scale(F(attrs.getFloat("scale"))), causal(attrs.getBool("causal")),
        window(attrs.getInt("window")), dropout(attrs.getFloat("dropout")),
        seed(static_cast<uint64_t>(attrs.getInt("seed"))), keepScale(F(1) / F(1 - dropout)),
        bf16(attrs.getBool("bf16_products")) {
    if (auto *m = operandIn(op, in, attrs, "mask")) {
      mask = *m;
      maskStrides = broadcastStrides(mask->type.shape);
    }
    if (auto *b = operandIn(op, in, attrs, "bias")) {
      bias = *b;
      biasStrides = broadcastStrides(bias->type.shape);
    }
    if (auto *s = operandIn(op, in, attrs, "step"))
      seed = rng::stepSeed(seed, rng::stepCount((*s)->get(0)));
  }

  int64_t qRow(int64_t b, int64_t h, int64_t i) const { return n.row(n.hq, n.tq, n.d, b, h, i); }
  int64_t outRow(int64_t b, int64_t h, int64_t i) const { return n.row(n.hq, n.tq, n.dv, b, h, i); }
  int64_t kRow(int64_t b, int64_t c, int64_t j) const { return n.row(n.hkv, n.tk, n.d, b, c, j); }
  int64_t vRow(int64_t b, int64_t c, int64_t j) const { return n.row(n.hkv, n.tk, n.dv, b, c, j); }
  int64_t lseAt(int64_t b, int64_t h, int64_t i) const { return (b * n.hq + h) * n.tq + i; }
  static int64_t at(const std::array<int64_t, 4> &s, int64_t b, int64_t h, int64_t i, int64_t j) {
    return b * s[0] + h * s[1] + i * s[2] + j * s[3];
  }
  int64_t biasAt(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return at(biasStrides, b, h, i, j);
  }

  // The dropout factor of p[b,h,i,j]: the dropout op's draw for that element of [B, Hq, Tq, Tk].
  F keep(int64_t b, int64_t h, int64_t i, int64_t j) const {
    if (dropout == 0)
      return F(1);
    uint64_t k = static_cast<uint64_t>(((b * n.hq + h) * n.tq + i) * n.tk + j);
    return rng::uniform(seed, k) >= dropout ? keepScale : F(0);
  }

  // allowed(i, j) = mask[b,h,i,j] (if any) and j <= i (if causal) and |i - j| < window (if any).
  bool allowed(int64_t b, int64_t h, int64_t i, int64_t j) const {
    if (causal && j > i)
      return false;
    if (window > 0 && (i - j >= window || j - i >= window))
      return false;
    return mask == nullptr || mask->i[at(maskStrides, b, h, i, j)] != 0;
  }

  // A product's operand: x, or x rounded to bf16 under bf16_products.
  F r(F x) const { return bf16 ? static_cast<F>(roundToBf16(static_cast<float>(x))) : x; }

  // logits[b,h,i,j] = s <q[b,h,i], k[b,c,j]> + bias[b,h,i,j]   (whether or not j is allowed)
  F logit(int64_t b, int64_t h, int64_t i, int64_t j) const {
    int64_t qr = qRow(b, h, i), kr = kRow(b, h / group, j);
    F dot = 0;
    for (int64_t e = 0; e < n.d; ++e)
      dot += r(q.f[qr + e]) * r(k.f[kr + e]);
    F l = scale * dot;
    if (bias != nullptr)
      l += bias->f[biasAt(b, h, i, j)];
    return l;
  }
};

} // namespace

AttentionDims attentionDims(const Type &q, const Type &k, const Type &v, bool bthd) {
  const size_t h = bthd ? 2 : 1, t = bthd ? 1 : 2;
  return {q.shape[0], q.shape[h], k.shape[h], q.shape[t], k.shape[t], q.shape[3], v.shape[3], bthd};
}

AttentionDims attentionDims(const Graph &g, const Node &n) {
  return attentionDims(g.type(n.operands[0]), g.type(n.operands[1]), g.type(n.operands[2]),
                       n.attrs.getBool("bthd"));
}

int64_t scratchAttention(const Graph &g, const Node &n) {
  return scratchOf(g, n, false);
}
int64_t scratchAttentionBackward(const Graph &g, const Node &n) {
  return scratchOf(g, n, true);
}

Expected<std::vector<Type>> inferAttention(std::span<const Type> in, const Attrs &attrs) {
  if (Status s = checkOperandCount(kAttentionOp, in.size(), attrs); !s)
    return s.error();
  Expected<AttnDims> a = checkAttention(kAttentionOp, in, attrs);
  if (!a)
    return a.error();
  return std::vector<Type>{a->out(), a->lse()};
}

Expected<std::vector<Type>> inferAttentionBackward(std::span<const Type> in, const Attrs &attrs) {
  if (Status s = checkOperandCount(kAttentionBackwardOp, in.size(), attrs); !s)
    return s.error();
  Expected<AttnDims> a = checkAttention(kAttentionBackwardOp, in, attrs);
  if (!a)
    return a.error();
  if (Status s = expectType("out", in[3], a->out(),
                            a->bthd ? "attention's out: [B, Tq, Hq, Dv]"
                                    : "attention's out: [B, Hq, Tq, Dv]");
      !s)
    return s.error();
  if (Status s = expectType("lse", in[4], a->lse(), "[B, Hq, Tq] in the stat dtype"); !s)
    return s.error();
  if (Status s = expectType("dout", in[5], a->out(), "out's type"); !s)
    return s.error();
  std::vector<Type> r = {in[0], in[1], in[2]};
  if (const Type *bias = operandIn(kAttentionBackwardOp, in, attrs, "bias"))
    r.push_back(*bias); // dbias: bias's type
  return r;
}

// For each query row: logits over the allowed keys (-inf elsewhere), m = max_j l_j (0 if -inf),
//   p_j = exp(l_j - m) / max(sum, 1),  sum = sum_j exp(l_j - m),  lse = m + log(sum),
//   out = sum_j p_j v_j
// exactly softmax's algorithm with its guards (reduce.cc), so a row with no allowed key (all
// -inf: a sequence that is all padding) gives out = 0 and lse = -inf instead of NaN, and a +inf
// logit gives NaN, as softmax does. With no keys at all (Tk = 0) the same holds.
template <class F> KILN_REF_FN(refAttention) {
  Attn<F> a(kAttentionOp, attrs, in);
  RefTensor<F> &y = out[0], &lse = out[1];
  const AttnDims &n = a.n;
  const F inf = std::numeric_limits<F>::infinity();
  std::vector<F> row(n.tk); // this row's logits, then exp(l - m)
  for (int64_t b = 0; b < n.b; ++b)
    for (int64_t h = 0; h < n.hq; ++h)
      for (int64_t i = 0; i < n.tq; ++i) {
        F m = -inf;
        for (int64_t j = 0; j < n.tk; ++j) {
          row[j] = a.allowed(b, h, i, j) ? a.logit(b, h, i, j) : -inf;
          if (std::isnan(row[j]) || row[j] > m) // NaN propagating; once m is NaN it stays
            m = row[j];
        }
        m = m == -inf ? F(0) : m;
        F sum = 0;
        for (int64_t j = 0; j < n.tk; ++j) {
          row[j] = std::exp(row[j] - m);
          sum += row[j];
        }
        lse.f[a.lseAt(b, h, i)] = m + std::log(sum);
        F denom = scalarFormula<formula::Max>(sum, F(1));
        int64_t o = a.outRow(b, h, i);
        for (int64_t j = 0; j < n.tk; ++j) {
          // bf16 products: the unnormalised d(exp(l - m)) is rounded, the sum divided after
          F p = a.bf16 ? a.r(row[j] * a.keep(b, h, i, j)) : row[j] / denom * a.keep(b, h, i, j);
          int64_t vr = a.vRow(b, h / a.group, j);
          for (int64_t e = 0; e < n.dv; ++e)
            y.f[o + e] += p * a.r(a.v.f[vr + e]);
        }
        if (a.bf16)
          for (int64_t e = 0; e < n.dv; ++e)
            y.f[o + e] /= denom;
      }
  return {};
}
KILN_REF_INSTANTIATE(refAttention);

// For each query row i (one (b, h, i) at a time) and each allowed key j, recomputing
//   p = exp(l_ij - lse_i)                  (the forward's probability, from the saved lse)
//   dp = <dout_i, v_j>,   dl = p (dp - delta_i),   delta_i = <dout_i, out_i> = sum_j p_ij dp_ij
//   dv_j += p dout_i,   dq_i += s dl k_j,   dk_j += s dl q_i,   dbias_ij += dl
// where k_j, v_j, dk_j, dv_j belong to kv head h / group: the GQA sum over the query heads that
// share a kv head happens here, by accumulation. Keys that are not allowed have p = 0 and add
// nothing; so a row with no allowed key (out = 0, lse = -inf) contributes no gradient at all,
// nor does one whose allowed keys all have -inf logits (exp(-inf - lse) would be NaN).
template <class F> KILN_REF_FN(refAttentionBackward) {
  Attn<F> a(kAttentionBackwardOp, attrs, in);
  const RefTensor<F> &o = *in[3], &lse = *in[4], &dout = *in[5];
  RefTensor<F> &dq = out[0], &dk = out[1], &dv = out[2];
  RefTensor<F> *dbias = a.bias != nullptr ? &out[3] : nullptr;
  const AttnDims &n = a.n;
  for (int64_t b = 0; b < n.b; ++b)
    for (int64_t h = 0; h < n.hq; ++h)
      for (int64_t i = 0; i < n.tq; ++i) {
        int64_t c = h / a.group, qr = a.qRow(b, h, i), orow = a.outRow(b, h, i);
        F delta = 0;
        for (int64_t e = 0; e < n.dv; ++e)
          delta += dout.f[orow + e] * o.f[orow + e];
        if (lse.f[a.lseAt(b, h, i)] == -std::numeric_limits<F>::infinity())
          continue; // a fully masked row: the forward gave zeros
        for (int64_t j = 0; j < n.tk; ++j) {
          if (!a.allowed(b, h, i, j))
            continue;
          int64_t kr = a.kRow(b, c, j), vr = a.vRow(b, c, j);
          F p = std::exp(a.logit(b, h, i, j) - lse.f[a.lseAt(b, h, i)]);
          F m = a.keep(b, h, i, j), dp = 0, mp = a.r(m * p);
          for (int64_t e = 0; e < n.dv; ++e) {
            dp += a.r(dout.f[orow + e]) * a.r(a.v.f[vr + e]);
            dv.f[vr + e] += mp * a.r(dout.f[orow + e]);
          }
          dp *= m;
          F dl = p * (dp - delta), sdl = a.r(a.scale * dl);
          for (int64_t e = 0; e < n.d; ++e) {
            dq.f[qr + e] += sdl * a.r(a.k.f[kr + e]);
            dk.f[kr + e] += sdl * a.r(a.q.f[qr + e]);
          }
          if (dbias != nullptr)
            dbias->f[a.biasAt(b, h, i, j)] += dl;
        }
      }
  return {};
}
KILN_REF_INSTANTIATE(refAttentionBackward);

// ---- Norms ----

Expected<std::vector<Type>> inferLayerNorm(std::span<const Type> in, const Attrs &attrs) {
  if (Status s = checkOperandCount(kLayerNormOp, in.size(), attrs); !s)
    return s.error();
  const Type &x = in[0];
  if (Status s = checkNormed("x", x); !s)
    return s.error();
  if (Status s = checkAffine(kLayerNormOp, in, attrs, x); !s)
    return s.error();
  if (Status s = checkEps(attrs); !s)
    return s.error();
  Expected<Type> y = normedY(x, attrs);
  if (!y)
    return y.error();
  return std::vector<Type>{*y, rowStat(x), rowStat(x)};
}

Expected<std::vector<Type>> inferRmsNorm(std::span<const Type> in, const Attrs &attrs) {
  if (Status s = checkOperandCount(kRmsNormOp, in.size(), attrs); !s)
    return s.error();
  const Type &x = in[0];
  if (Status s = checkNormed("x", x); !s)
    return s.error();
  if (Status s = checkAffine(kRmsNormOp, in, attrs, x); !s)
    return s.error();
  if (Status s = checkEps(attrs); !s)
    return s.error();
  Expected<Type> y = normedY(x, attrs);
  if (!y)
    return y.error();
  return std::vector<Type>{*y, rowStat(x)};
}

Expected<std::vector<Type>> inferAddLayerNorm(std::span<const Type> in, const Attrs &attrs) {
  if (Status s = checkOperandCount(kAddLayerNormOp, in.size(), attrs); !s)
    return s.error();
  Expected<Type> sum = checkResidualSum(in[0], in[1]);
  if (!sum)
    return sum.error();
  if (Status s = checkAffine(kAddLayerNormOp, in, attrs, *sum, "sum"); !s)
    return s.error();
  if (Status s = checkEps(attrs); !s)
    return s.error();
  Expected<Type> y = normedY(*sum, attrs, "sum");
  if (!y)
    return y.error();
  return std::vector<Type>{*sum, *y, rowStat(*sum), rowStat(*sum)};
}

Expected<std::vector<Type>> inferAddRmsNorm(std::span<const Type> in, const Attrs &attrs) {
  if (Status s = checkOperandCount(kAddRmsNormOp, in.size(), attrs); !s)
    return s.error();
  Expected<Type> sum = checkResidualSum(in[0], in[1]);
  if (!sum)
    return sum.error();
  if (Status s = checkAffine(kAddRmsNormOp, in, attrs, *sum, "sum"); !s)
    return s.error();
  if (Status s = checkEps(attrs); !s)
    return s.error();
  Expected<Type> y = normedY(*sum, attrs, "sum");
  if (!y)
    return y.error();
  return std::vector<Type>{*sum, *y, rowStat(*sum)};
}

namespace {
// layer_norm_backward(x, mean, rstd, dy [, weight]) and rms_norm_backward(x, rstd, dy [, weight])
// (`op`): x, the saved statistics, dy, then the weight where present.
Expected<std::vector<Type>> inferNormBackward(const OpInfo &op, std::span<const Type> in,
                                              const Attrs &attrs) {
  if (Status s = checkOperandCount(op, in.size(), attrs); !s)
    return s.error();
  const Type &x = in[0];
  if (Status s = checkNormed("x", x); !s)
    return s.error();
  const size_t dyAt = *operandIndex(op, attrs, "dy");
  for (size_t k = 1; k < dyAt; ++k)
    if (Status s = expectType(op.operands[k], in[k], rowStat(x), "x.shape[:-1] in the stat dtype");
        !s)
      return s.error();
  if (Status s = expectType("dy", in[dyAt], x, "x's type"); !s)
    return s.error();
  if (Status s = checkAffine(op, in, attrs, x); !s)
    return s.error();
  std::vector<Type> r = {x};
  if (const Type *weight = operandIn(op, in, attrs, "weight"))
    r.push_back(*weight); // dweight: weight's type
  return r;
}
} // namespace

Expected<std::vector<Type>> inferLayerNormBackward(std::span<const Type> in, const Attrs &attrs) {
  return inferNormBackward(kLayerNormBackwardOp, in, attrs);
}

Expected<std::vector<Type>> inferRmsNormBackward(std::span<const Type> in, const Attrs &attrs) {
  return inferNormBackward(kRmsNormBackwardOp, in, attrs);
}

namespace {

// The rows of a norm: `count` rows of n = x.shape[-1] contiguous elements; weight and bias
// (nullptr if absent) are read per column.
template <class F> struct NormRows {
  int64_t count, n;
  const std::vector<F> *weight = nullptr, *bias = nullptr;

  // Rows of x's shape; weight and bias from the operands `in` of an op of record `op`, where it
  // has them.
  NormRows(const Shape &x, const OpInfo &op, std::span<const RefTensor<F> *const> in,
           const Attrs &attrs)
      : count(numElements(std::span(x).first(x.size() - 1))), n(x.back()) {
    if (auto *w = operandIn(op, in, attrs, "weight"))
      weight = &(*w)->f;
    if (auto *b = operandIn(op, in, attrs, "bias"))
      bias = &(*b)->f;
  }
  F w(int64_t j) const { return weight ? (*weight)[j] : F(1); }
  F b(int64_t j) const { return bias ? (*bias)[j] : F(0); }
};

// For each row r of x (layer_norm, or rms_norm when !centered):
//   mean = sum_j x_j / N  (0 when !centered);  var = sum_j (x_j - mean)^2 / N;
//   rstd = 1 / sqrt(var + eps);  y_j = (x_j - mean) * rstd * w_j + b_j
// (For rms_norm "var" is the mean square of x.) mean is written only when `meanOut` is given.
template <class F>
void normForward(const std::vector<F> &x, const NormRows<F> &rows, F eps, bool centered,
                 std::vector<F> &y, std::vector<F> *meanOut, std::vector<F> &rstdOut) {
  for (int64_t r = 0; r < rows.count; ++r) {
    const F *xr = x.data() + r * rows.n;
    F mean = 0;
    if (centered) {
      for (int64_t j = 0; j < rows.n; ++j)
        mean += xr[j];
      mean /= F(rows.n);
    }
    F var = 0;
    for (int64_t j = 0; j < rows.n; ++j)
      var += (xr[j] - mean) * (xr[j] - mean);
    var /= F(rows.n);
    F rstd = F(1) / std::sqrt(var + eps);
    for (int64_t j = 0; j < rows.n; ++j)
      y[r * rows.n + j] = (xr[j] - mean) * rstd * rows.w(j) + rows.b(j);
    if (meanOut)
      (*meanOut)[r] = mean;
    rstdOut[r] = rstd;
  }
}

// For each row, with xhat_j = (x_j - mean) rstd and g_j = dy_j w_j:
//   dx_j = rstd (g_j - mean_N(g) - xhat_j mean_N(g xhat))      (layer_norm)
//   dx_j = rstd (g_j - xhat_j mean_N(g xhat))                  (rms_norm: mean = 0, no centring)
//   dweight_j += dy_j xhat_j                                   (summed over rows)
template <class F>
void normBackward(const std::vector<F> &x, const std::vector<F> *mean, const std::vector<F> &rstd,
                  const std::vector<F> &dy, const NormRows<F> &rows, std::vector<F> &dx,
                  std::vector<F> *dweight) {
  std::vector<F> xhat(rows.n), g(rows.n); // one row
  for (int64_t r = 0; r < rows.count; ++r) {
    int64_t at = r * rows.n;
    F meanG = 0, meanGX = 0;
    for (int64_t j = 0; j < rows.n; ++j) {
      xhat[j] = (x[at + j] - (mean ? (*mean)[r] : F(0))) * rstd[r];
      g[j] = dy[at + j] * rows.w(j);
      meanG += g[j];
      meanGX += g[j] * xhat[j];
    }
    meanG /= F(rows.n);
    meanGX /= F(rows.n);
    for (int64_t j = 0; j < rows.n; ++j) {
      F centred = mean ? g[j] - meanG : g[j];
      dx[at + j] = rstd[r] * (centred - xhat[j] * meanGX);
      if (dweight)
        (*dweight)[j] += dy[at + j] * xhat[j];
    }
  }
}

// sum = a + b, numpy broadcasting, into `sum` (already of the broadcast shape).
template <class F>
void residualSum(const RefTensor<F> &a, const RefTensor<F> &b, RefTensor<F> &sum) {
  std::vector<int64_t> ia = broadcastIndexMap(a.type.shape, sum.type.shape);
  std::vector<int64_t> ib = broadcastIndexMap(b.type.shape, sum.type.shape);
  for (int64_t k = 0; k < sum.size(); ++k)
    sum.f[k] = a.f[ia[k]] + b.f[ib[k]];
}

} // namespace

// out: y, mean, rstd
template <class F> KILN_REF_FN(refLayerNorm) {
  const RefTensor<F> &x = *in[0];
  NormRows<F> rows(x.type.shape, kLayerNormOp, in, attrs);
  normForward<F>(x.f, rows, F(attrs.getFloat("eps")), true, out[0].f, &out[1].f, out[2].f);
  return {};
}
KILN_REF_INSTANTIATE(refLayerNorm);

// out: y, rstd
template <class F> KILN_REF_FN(refRmsNorm) {
  const RefTensor<F> &x = *in[0];
  NormRows<F> rows(x.type.shape, kRmsNormOp, in, attrs);
  normForward<F>(x.f, rows, F(attrs.getFloat("eps")), false, out[0].f, nullptr, out[1].f);
  return {};
}
KILN_REF_INSTANTIATE(refRmsNorm);

// out: sum = a + b, then layer_norm(sum): y, mean, rstd
template <class F> KILN_REF_FN(refAddLayerNorm) {
  RefTensor<F> &sum = out[0];
  residualSum(*in[0], *in[1], sum);
  NormRows<F> rows(sum.type.shape, kAddLayerNormOp, in, attrs);
  normForward<F>(sum.f, rows, F(attrs.getFloat("eps")), true, out[1].f, &out[2].f, out[3].f);
  return {};
}
KILN_REF_INSTANTIATE(refAddLayerNorm);

// out: sum = a + b, then rms_norm(sum): y, rstd
template <class F> KILN_REF_FN(refAddRmsNorm) {
  RefTensor<F> &sum = out[0];
  residualSum(*in[0], *in[1], sum);
  NormRows<F> rows(sum.type.shape, kAddRmsNormOp, in, attrs);
  normForward<F>(sum.f, rows, F(attrs.getFloat("eps")), false, out[1].f, nullptr, out[2].f);
  return {};
}
KILN_REF_INSTANTIATE(refAddRmsNorm);

// in: x, mean, rstd, dy [, weight];  out: dx [, dweight]
template <class F> KILN_REF_FN(refLayerNormBackward) {
  NormRows<F> rows(in[0]->type.shape, kLayerNormBackwardOp, in, attrs);
  const bool hasWeight = rows.weight != nullptr;
  normBackward<F>(in[0]->f, &in[1]->f, in[2]->f, in[3]->f, rows, out[0].f,
                  hasWeight ? &out[1].f : nullptr);
  return {};
}
KILN_REF_INSTANTIATE(refLayerNormBackward);

// in: x, rstd, dy [, weight];  out: dx [, dweight]
template <class F> KILN_REF_FN(refRmsNormBackward) {
  NormRows<F> rows(in[0]->type.shape, kRmsNormBackwardOp, in, attrs);
  const bool hasWeight = rows.weight != nullptr;
  normBackward<F>(in[0]->f, nullptr, in[1]->f, in[2]->f, rows, out[0].f,
                  hasWeight ? &out[1].f : nullptr);
  return {};
}
KILN_REF_INSTANTIATE(refRmsNormBackward);

} // namespace kiln::ir

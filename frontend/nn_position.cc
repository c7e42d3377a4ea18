// Masks and position encodings from iota/tri and elementwise math. Angle and slope tables are
// computed in f32 (f64 for f64 models) and cast afterwards: bf16 cannot even count past 256.
#include "frontend/nn_position.h"

#include <bit>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace kiln::frontend::nn {

namespace {
// The dtype position tables are computed in before casting to the model's dtype.
ir::DType tableDType(ir::DType dtype) {
  return dtype == ir::DType::F64 ? ir::DType::F64 : ir::DType::F32;
}

Tensor castTo(const Tensor &x, ir::DType dtype,
              std::source_location loc = std::source_location::current()) {
  return x.dtype() == dtype ? x : x.cast(dtype, loc);
}

// PE at positions pos [..., 1, 1] (in the table dtype) -> [..., d/2, 2]: sin, cos interleaved.
Tensor sinusoidalPairs(const Tensor &pos, int64_t d) {
  ir::DType ct = pos.dtype();
  Tensor i = pos.builder().iota({1, d / 2, 1}, 1, ct);                 // [1, d/2, 1]: i
  Tensor invFreq = (i * (-2.0 * std::log(10000.0) / double(d))).exp(); // 10000^(-2i/d)
  Tensor angle = pos * invFreq;                                        // [..., d/2, 1]
  // Interleave: [..., 0] = sin (even dims), [..., 1] = cos (odd dims).
  return concat({angle.sin(), angle.cos()}, angle.rank() - 1);
}

// yarn's ramp ends lo and hi (see RopeScaling) for R turned dimensions of base `base`.
std::pair<double, double> yarnRamp(const RopeScaling &s, double base, int64_t r) {
  auto index = [&](double turns) { // c(n): the index of the frequency that turns n times over L
    return double(r) * std::log(double(s.originalMaxLen) / (turns * 2 * std::numbers::pi)) /
           (2 * std::log(base));
  };
  double lo = index(s.betaFast), hi = index(s.betaSlow);
  if (s.truncate)
    lo = std::floor(lo), hi = std::ceil(hi);
  lo = std::max(lo, 0.0), hi = std::min(hi, double(r - 1));
  return {lo, hi == lo ? hi + 0.001 : hi};
}

// RoPE with the angles of positions pos (in the table dtype) shaped to broadcast against x without
// its last axis: [T, 1] or [B, 1, T, 1] for x [B, H, T, D]; [T, 1, 1] or [B, T, 1, 1] for
// [B, T, H, D]. D below is the dimensions it turns, the first R = rotatedDims of x's.
Tensor ropeAt(const Tensor &x, const Tensor &pos, const Rope &rope) {
  Builder &b = x.builder();
  const int64_t full = x.dim(3), d = rotatedDims(full, rope.fraction), half = d / 2;
  Tensor i = b.iota({1, half}, 1, pos.dtype());                        // [1, D/2]
  Tensor theta = (i * (-2.0 * std::log(rope.base) / double(d))).exp(); // base^(-2i/D)
  double magnitude = 1;
  if (rope.scaling && rope.scaling->kind == RopeScalingKind::Llama3) { // (L/λ_i = L θ_i / 2π)
    const RopeScaling &s = *rope.scaling;
    const double low = s.lowFreqFactor, high = s.highFreqFactor, slow = 1 / s.factor;
    Tensor fits = theta * (double(s.originalMaxLen) / (2 * std::numbers::pi)); // L/λ_i
    Tensor blend = ((fits - low) * (1 / (high - low))).clamp(0.0, 1.0);        // s_i
    theta = theta * (blend * (1 - slow) + slow);                               // θ_i ((1-s)/f + s)
  } else if (rope.scaling && rope.scaling->kind == RopeScalingKind::Linear) {
    theta = theta * (1 / rope.scaling->factor); // θ_i / factor
  } else if (rope.scaling && rope.scaling->kind == RopeScalingKind::Yarn) {
    const RopeScaling &s = *rope.scaling;
    const auto [lo, hi] = yarnRamp(s, rope.base, d);
    Tensor ramp = ((i - lo) * (1 / (hi - lo))).clamp(0.0, 1.0); // r_i
    theta = theta * (ramp * (1 / s.factor - 1) + 1);            // θ_i ((1 - r) + r / factor)
  } else if (rope.scaling) { // longrope: θ_i / f_i, the f_i a table of constants [1, D/2]
    const RopeScaling &s = *rope.scaling;
    const std::vector<double> &f = rope.context > s.originalMaxLen ? s.longFactor : s.shortFactor;
    std::vector<Tensor> inverse;
    for (double fi : f)
      inverse.push_back(b.constant(1 / fi, {1, 1}, pos.dtype()));
    theta = theta * concat(inverse, 1);
  }
  if (rope.scaling)
    magnitude = ropeMagnitude(*rope.scaling);
  Tensor angle = pos * theta;                            // [.., T, D/2]
  Tensor emb = concat({angle, angle}, angle.rank() - 1); // [.., T, D]
  Tensor cos = emb.cos(), sin = emb.sin();
  if (magnitude != 1)
    cos = cos * magnitude, sin = sin * magnitude;
  cos = castTo(cos, x.dtype()), sin = castTo(sin, x.dtype());
  const Tensor turned = d == full ? x : x.slice(3, 0, d);              // [B, H, T, D]
  Tensor x1 = turned.slice(3, 0, half), x2 = turned.slice(3, half, d); // [B, H, T, D/2]
  Tensor rotated = concat({-x2, x1}, 3);                               // rotate_half(x)
  Tensor xCos = turned * cos;                                          // [B, H, T, D]
  Tensor out = xCos + rotated * sin;                                   // x cos + rotate_half(x) sin
  return d == full ? out : concat({out, x.slice(3, d, full)}, 3); // (partial: the rest as it is)
}

// ALiBi's slopes m_h (see alibiBias), [H, 1, 1] in dtype ct.
Tensor alibiSlopes(Builder &b, int64_t heads, ir::DType ct) {
  // The paper's reference get_slopes(H), with m = 2^floor(log2 H) the largest power of two <= H:
  //   get_slopes(H) = get_slopes_power_of_2(m) + get_slopes_power_of_2(2m)[0::2][:H - m],
  //   get_slopes_power_of_2(n)[k] = start^(k + 1),  start = 2^(-8/n),  i.e. 2^(-8 (k + 1) / n).
  // The entries k = 2i of the 2m sequence are 2^(-8 (2i + 1) / 2m) = 2^(-(8i + 4) / m): the
  // exponents halfway between the first sequence's. For H a power of two the second part is
  // empty and the slopes are 2^(-8h/H), h = 1..H.
  int64_t m = int64_t(std::bit_floor(uint64_t(heads)));
  double ln2m = std::log(2.0) / double(m);   // 2^(-x/m) = exp(-x ln2m)
  Tensor h = b.iota({m, 1, 1}, 0, ct) + 1.0; // [m, 1, 1]: 1..m
  Tensor slope = (h * (-8.0 * ln2m)).exp();  // 2^(-8h/m)
  if (heads > m) {
    Tensor i = b.iota({heads - m, 1, 1}, 0, ct);      // [H - m, 1, 1]: 0..H-m-1
    Tensor between = ((i * 8.0 + 4.0) * -ln2m).exp(); // 2^(-(8i + 4)/m)
    slope = concat({slope, between}, 0);              // [H, 1, 1]
  }
  return slope;
}

// A decoding step's positions pos i64 [B, T] in dtype ct (exact below 2^24), as ropeAt takes them
// for x with its positions on `axis`: [B, 1, T, 1] (axis 2, as alibiBiasAt takes them too) or
// [B, T, 1, 1] (axis 1).
Tensor queryPositions(const Tensor &pos, ir::DType ct, int64_t axis) {
  Tensor p = pos.cast(ct);
  return axis == 2 ? p.reshape({pos.dim(0), 1, pos.dim(1), 1})
                   : p.reshape({pos.dim(0), pos.dim(1), 1, 1});
}

// RoPE's checks: x [B, H, T, D] or [B, T, H, D] as positionAxis (2 or 1) says, D even.
void checkRope(const Tensor &x, const Rope &rope, int64_t positionAxis, std::source_location loc) {
  Builder &b = x.builder(loc);
  if (positionAxis != 1 && positionAxis != 2)
    b.fail(
        "rope", loc,
        fmt::format("positionAxis {} must be 2 ([B, H, T, D]) or 1 ([B, T, H, D])", positionAxis));
  if (std::string fault = ropeFault(rope, x.dim(3, loc)); !fault.empty())
    b.fail("rope", loc, fault);
}
} // namespace

int64_t rotatedDims(int64_t d, double fraction) {
  assert(ropeFractionInRange(fraction)); // (else the product may not fit: a cast's UB)
  return static_cast<int64_t>(double(d) * fraction);
}

bool ropeFractionInRange(double fraction) {
  return fraction > 0 && fraction <= 1;
}

bool ropeTurnsEvenPart(int64_t d, double fraction) {
  if (!ropeFractionInRange(fraction))
    return false;
  const int64_t r = rotatedDims(d, fraction);
  return r % 2 == 0 && r >= 2;
}

std::string ropeFault(const Rope &rope, int64_t d) {
  if (!ropeFractionInRange(rope.fraction))
    return fmt::format("the fraction of a head it turns must be in (0, 1], got {}", rope.fraction);
  const int64_t r = rotatedDims(d, rope.fraction);
  // (Said of the head where RoPE turns all of it.)
  const std::string turned = r == d ? fmt::format("the head dimension {}", d)
                                    : fmt::format("the {} dimensions it turns of a head of {} "
                                                  "(fraction {})",
                                                  r, d, rope.fraction);
  if (!ropeTurnsEvenPart(d, rope.fraction))
    return turned + (r == d ? " must be even" : " must be even and at least 2");
  if (std::string fault = rope.scaling ? ropeScalingFault(*rope.scaling) : ""; !fault.empty())
    return "scaling: " + fault;
  if (const RopeScaling *s = rope.scaling ? &*rope.scaling : nullptr;
      s && s->kind == RopeScalingKind::LongRope && int64_t(s->shortFactor.size()) * 2 != r)
    return fmt::format("scaling: longrope has {} factors a list, expected one per frequency: {} "
                       "(half {})",
                       s->shortFactor.size(), r / 2, turned);
  return "";
}

std::string ropeScalingFault(const RopeScaling &s) {
  if (s.originalMaxLen < 1)
    return fmt::format("expected an original length >= 1, got {}", s.originalMaxLen);
  if (s.kind == RopeScalingKind::LongRope) {
    if (s.originalMaxLen < 2) // (a's ln L divides)
      return fmt::format("expected an original length >= 2, got {}", s.originalMaxLen);
    if (!(s.factor > 0) || !std::isfinite(s.factor))
      return fmt::format("expected a finite factor > 0, got {}", s.factor);
    if (s.shortFactor.empty() || s.shortFactor.size() != s.longFactor.size())
      return fmt::format("expected as many short as long factors, and some, got {} and {}",
                         s.shortFactor.size(), s.longFactor.size());
    for (const std::vector<double> *list : {&s.shortFactor, &s.longFactor})
      for (double f : *list)
        if (!(f > 0) || !std::isfinite(f))
          return fmt::format("expected finite factors > 0, got {}", f);
    return "";
  }
  if (!(s.factor >= 1) || !std::isfinite(s.factor))
    return fmt::format("expected a finite factor >= 1, got {}", s.factor);
  if (s.kind == RopeScalingKind::Linear)
    return "";
  if (s.kind == RopeScalingKind::Yarn) {
    if (!(s.betaSlow > 0) || !(s.betaFast >= s.betaSlow) || !std::isfinite(s.betaFast))
      return fmt::format("expected finite turns beta_fast >= beta_slow > 0, got beta_fast {} and "
                         "beta_slow {}",
                         s.betaFast, s.betaSlow);
    if (!(s.attentionFactor >= 0) || !std::isfinite(s.attentionFactor))
      return fmt::format("expected an attention factor > 0, or 0 for the paper's 0.1 ln(factor) "
                         "+ 1, got {}",
                         s.attentionFactor);
    return "";
  }
  if (!(s.lowFreqFactor > 0) || !(s.highFreqFactor > s.lowFreqFactor) ||
      !std::isfinite(s.highFreqFactor))
    return fmt::format("expected finite frequency factors 0 < low < high, got low {} and high {}",
                       s.lowFreqFactor, s.highFreqFactor);
  return "";
}

double ropeMagnitude(const RopeScaling &s) {
  if (s.kind == RopeScalingKind::Yarn && s.attentionFactor != 0)
    return s.attentionFactor;
  if (s.factor <= 1 || (s.kind != RopeScalingKind::LongRope && s.kind != RopeScalingKind::Yarn))
    return 1;
  return s.kind == RopeScalingKind::Yarn
             ? 0.1 * std::log(s.factor) + 1
             : std::sqrt(1 + std::log(s.factor) / std::log(double(s.originalMaxLen)));
}

// The helpers below open a call frame like a module call: their nodes record their own lines,
// and an error still starts with the caller's.
Tensor causalMask(Builder &b, int64_t t, std::source_location loc) {
  Builder::CallFrame f(b, "causalMask", loc);
  return b.tri({t, t}, /*diagonal=*/0, /*lower=*/true, ir::DType::Bool); // j - i <= 0
}

Tensor paddingMask(const Tensor &tokens, int64_t padId, std::source_location loc) {
  Builder::CallFrame f(tokens.builder(loc), "paddingMask", loc);
  Tensor keep = tokens.ne(double(padId));                    // [B, S]
  return keep.reshape({tokens.dim(0), 1, 1, tokens.dim(1)}); // [B, 1, 1, S]
}

Tensor windowMask(Builder &b, int64_t t, int64_t window, bool causal, std::source_location loc) {
  Builder::CallFrame f(b, "windowMask", loc);
  if (window < 1)
    b.fail("windowMask", loc, fmt::format("window {} must be positive", window));
  // j - i >= 1 - window (i - j < window), and j - i <= 0 (causal) or <= window - 1.
  Tensor back = b.tri({t, t}, 1 - window, /*lower=*/false, ir::DType::Bool);
  Tensor ahead = b.tri({t, t}, causal ? 0 : window - 1, /*lower=*/true, ir::DType::Bool);
  return back & ahead;
}

std::vector<int64_t> t5BucketEdges(int64_t sideBuckets, int64_t maxDistance) {
  // Hugging Face: bucket(a) = e + (int)(log(a / e) / log(maxDistance / e) * (n - e)) for a >= e,
  // e = n / 2, capped at n - 1, in its arithmetic: a / e, the log and the rest in f32 (a tensor's),
  // log(maxDistance / e) in double (Python's math.log) rounded to f32. Where the exact value is a
  // whole number (18 buckets, 128: log(2) / log(32) * 5 = 1), double's 0.99999999999999989 and
  // f32's 1 fall on two sides of it. It grows with a, so each later bucket starts at the least a
  // that reaches it (found by doubling, then bisection).
  const int64_t n = sideBuckets, e = n / 2;
  const auto span = static_cast<float>(std::log(double(maxDistance) / double(e)));
  auto bucket = [&](int64_t a) {
    const float x = std::log(float(a) / float(e)) / span * float(n - e);
    return std::min<int64_t>(n - 1, e + static_cast<int64_t>(std::min(x, float(n))));
  };
  std::vector<int64_t> edges;
  for (int64_t k = e + 1; k < n; ++k) {
    int64_t hi = std::max<int64_t>(e, 1);
    while (bucket(hi) < k && hi < (int64_t{1} << 40))
      hi *= 2;
    int64_t lo = e; // bucket(lo) < k <= bucket(hi)
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (bucket(mid) >= k ? hi : lo) = mid;
    }
    edges.push_back(hi);
  }
  return edges;
}

Tensor t5Buckets(Builder &b, int64_t t, int64_t s, bool bidirectional, int64_t buckets,
                 int64_t maxDistance, std::source_location loc) {
  Builder::CallFrame f(b, "t5Buckets", loc);
  const int64_t n = bidirectional ? buckets / 2 : buckets;
  if (n < 2 || maxDistance <= n / 2)
    b.fail("t5Buckets", loc,
           fmt::format("{} buckets and max distance {}: need at least 2 buckets a side and a max "
                       "distance over half of them",
                       buckets, maxDistance));
  Tensor i = b.iota({t, s}, 0, ir::DType::I64); // query position
  Tensor j = b.iota({t, s}, 1, ir::DType::I64); // key position
  Tensor rel = j - i;
  // The distance: |j - i|, or (causal) how far back, keys after the query sharing bucket 0.
  Tensor a = bidirectional ? rel.abs() : (-rel).maximum(0.0);
  // min(a, n/2) counts the exact buckets; each log bucket edge passed adds one.
  Tensor bucket = a.minimum(double(n / 2));
  for (int64_t edge : t5BucketEdges(n, maxDistance))
    bucket = bucket + a.ge(double(edge)).cast(ir::DType::I64);
  if (bidirectional) // keys after the query: the second half
    bucket = bucket + rel.gt(0.0).cast(ir::DType::I64) * double(n);
  return bucket;
}

Tensor cacheMask(const Tensor &pos, int64_t length, int64_t window, std::source_location loc) {
  Builder::CallFrame f(pos.builder(loc), "cacheMask", loc);
  Tensor key = pos.builder(loc).iota({1, 1, 1, length}, 3); // [1, 1, 1, L]: j
  Tensor at = pos.reshape({pos.dim(0), 1, 1, 1});           // [B, 1, 1, 1]: pos
  Tensor seen = key.le(at);                                 // [B, 1, 1, L]
  if (window <= 0)
    return seen;
  Tensor near = (at - key).lt(double(window)); // pos - j < window
  return seen & near;
}

Tensor sinusoidalTable(Builder &b, int64_t t, int64_t d, ir::DType dtype,
                       std::source_location loc) {
  if (d % 2 != 0)
    b.fail("sinusoidal", loc, fmt::format("the model width {} must be even", d));
  Builder::CallFrame f(b, "sinusoidalTable", loc);
  Tensor pos = b.iota({t, 1, 1}, 0, tableDType(dtype)); // [T, 1, 1]: t
  return castTo(sinusoidalPairs(pos, d).reshape({t, d}), dtype);
}

Tensor sinusoidalAt(const Tensor &pos, int64_t d, ir::DType dtype, std::source_location loc) {
  Builder &b = pos.builder(loc);
  if (d % 2 != 0)
    b.fail("sinusoidal", loc, fmt::format("the model width {} must be even", d));
  Builder::CallFrame f(b, "sinusoidalAt", loc);
  int64_t rows = pos.dim(0), t = pos.dim(1);
  Tensor p = pos.cast(tableDType(dtype)).reshape({rows, t, 1, 1}); // [B, T, 1, 1]
  return castTo(sinusoidalPairs(p, d).reshape({rows, t, d}), dtype);
}

AbsolutePosition::AbsolutePosition(Scope scope, PositionKind kind, int64_t maxLen, int64_t d,
                                   std::source_location loc)
    : Module(std::move(scope)), kind_(kind), d_(d) {
  if (kind == PositionKind::Learned)
    weight = param("weight", {maxLen, d}, normalInit(), loc);
}

Tensor AbsolutePosition::operator()(const Tensor &x, std::source_location loc) const {
  auto f = frame(loc);
  int64_t t = x.dim(1);
  if (kind_ == PositionKind::Learned)
    return x + weight->slice(0, 0, t); // [B, T, d] + [T, d]
  if (kind_ == PositionKind::Sinusoidal)
    return x + sinusoidalTable(builder(), t, d_, x.dtype());
  return x;
}

Tensor AbsolutePosition::at(const Tensor &x, const Tensor &pos, std::source_location loc) const {
  auto f = frame(loc);
  if (kind_ == PositionKind::Learned)
    return x + weight->gather(pos); // [B, T, d] + [B, T, d]
  if (kind_ == PositionKind::Sinusoidal)
    return x + sinusoidalAt(pos, d_, x.dtype());
  return x;
}

Tensor relativeIndex(Builder &b, int64_t t, int64_t s, int64_t k, std::source_location loc) {
  Builder::CallFrame f(b, "relativeIndex", loc);
  Tensor i = b.iota({t, s}, 0, ir::DType::I64); // query position
  Tensor j = b.iota({t, s}, 1, ir::DType::I64); // key position
  return (j - i).clamp(double(-k), double(k)) + double(k);
}

Tensor relativeIndexAt(const Tensor &pos, int64_t s, int64_t k, std::source_location loc) {
  Builder::CallFrame f(pos.builder(loc), "relativeIndexAt", loc);
  Tensor j = pos.builder(loc).iota({1, 1, s}, 2, ir::DType::I64); // key position
  Tensor i = pos.reshape({pos.dim(0), pos.dim(1), 1});            // query position
  return (j - i).clamp(double(-k), double(k)) + double(k);        // [B, T, S]
}

Tensor applyRope(const Tensor &x, const Rope &rope, int64_t positionAxis,
                 std::source_location loc) {
  Builder &b = x.builder(loc);
  checkRope(x, rope, positionAxis, loc);
  const int64_t t = x.dim(positionAxis, loc);
  Builder::CallFrame f(b, "applyRope", loc);
  const ir::Shape positions = positionAxis == 2 ? ir::Shape{t, 1} : ir::Shape{t, 1, 1};
  return ropeAt(x, b.iota(positions, 0, tableDType(x.dtype())), rope);
}

Tensor applyRopeAt(const Tensor &x, const Tensor &pos, const Rope &rope, int64_t positionAxis,
                   std::source_location loc) {
  checkRope(x, rope, positionAxis, loc);
  Builder::CallFrame f(x.builder(loc), "applyRopeAt", loc);
  return ropeAt(x, queryPositions(pos, tableDType(x.dtype()), positionAxis), rope);
}

Tensor alibiBias(Builder &b, int64_t heads, int64_t t, int64_t s, bool causal, ir::DType dtype,
                 std::source_location loc) {
  if (heads < 1)
    b.fail("alibi", loc, fmt::format("expected at least one head, got {}", heads));
  Builder::CallFrame f(b, "alibiBias", loc);
  ir::DType ct = tableDType(dtype);
  Tensor slope = alibiSlopes(b, heads, ct);                    // [H, 1, 1]
  Tensor key = b.iota({1, t, s}, 2, ct);                       // [1, T, S]: j
  Tensor query = b.iota({1, t, s}, 1, ct);                     // [1, T, S]: i
  Tensor dist = key - query;                                   // j - i
  Tensor bias = causal ? slope * dist : -(slope * dist.abs()); // [H, T, S]
  return castTo(bias, dtype);
}

Tensor alibiBiasAt(const Tensor &pos, int64_t heads, int64_t s, bool causal, ir::DType dtype,
                   std::source_location loc) {
  Builder &b = pos.builder(loc);
  if (heads < 1)
    b.fail("alibi", loc, fmt::format("expected at least one head, got {}", heads));
  Builder::CallFrame f(b, "alibiBiasAt", loc);
  ir::DType ct = tableDType(dtype);
  Tensor slope = alibiSlopes(b, heads, ct).reshape({1, heads, 1, 1}); // [1, H, 1, 1]
  Tensor key = b.iota({1, 1, 1, s}, 3, ct);                           // [1, 1, 1, S]: j
  Tensor dist = key - queryPositions(pos, ct, 2);                     // [B, 1, T, S]: j - i
  Tensor bias = causal ? slope * dist : -(slope * dist.abs());        // [B, H, T, S]
  return castTo(bias, dtype);
}

} // namespace kiln::frontend::nn

// Row primitives (see rows.h). Every element goes through the SIMD path: the last n mod lanes
// through a vector loaded and stored masked (vm::loadFirst), with the same operations as the
// others (so every element gets the same exp). Sums: one vector accumulator, the tail's lanes
// added into it, then its lanes summed.
#include "runtime/kernels/rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/kernels/rows.cc"
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"

// After highway.h (clang-format must not sort it above foreach_target.h).
#include "runtime/kernels/vmath-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = vm::D;
using V = vm::V;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Max of the lanes of m, or NaN if any lane saw one.
HWY_ATTR float finishMax(D d, V m, hn::Mask<D> sawNaN) {
  if (!hn::AllFalse(d, sawNaN))
    return std::numeric_limits<float>::quiet_NaN();
  return hn::GetLane(hn::MaxOfLanes(d, m));
}

HWY_ATTR float RowMax(const float *x, int64_t n) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  V m = hn::Set(d, kNegInf);
  auto nan = hn::FirstN(d, 0);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const V v = hn::LoadU(d, x + j);
    nan = hn::Or(nan, hn::IsNaN(v));
    m = hn::Max(m, v);
  }
  if (j < n) {
    const V v = vm::loadFirst(d, x + j, static_cast<size_t>(n - j), kNegInf);
    nan = hn::Or(nan, hn::IsNaN(v));
    m = hn::Max(m, v);
  }
  return finishMax(d, m, nan);
}

// scale s + bias (bias may be null), -inf where mask is 0 (mask may be null): attention's logits
// of the vector s, read at j.
HWY_ATTR V logits(D d, V s, V scale, const float *bias, const uint8_t *mask, int64_t j) {
  V v = hn::Mul(s, scale);
  if (bias)
    v = hn::Add(v, hn::LoadU(d, bias + j));
  if (mask) { // bytes to a lane mask: widen through u32
    const hn::Rebind<uint8_t, D> d8;
    const hn::RebindToSigned<D> di;
    const auto keep = hn::Ne(hn::PromoteTo(di, hn::LoadU(d8, mask + j)), hn::Zero(di));
    v = hn::IfThenElse(hn::RebindMask(d, keep), v, hn::Set(d, kNegInf));
  }
  return v;
}

// logits() of a row's last n mod lanes elements, from j on: the first `count` lanes of s; bias
// and mask are read no further than that.
HWY_ATTR V tailLogits(D d, V s, V scale, const float *bias, const uint8_t *mask, int64_t j,
                      size_t count) {
  if (!bias && !mask)
    return logits(d, s, scale, nullptr, nullptr, 0);
  HWY_ALIGN float bb[hn::MaxLanes(D())] = {};
  HWY_ALIGN uint8_t mb[hn::MaxLanes(D())] = {};
  if (bias)
    std::memcpy(bb, bias + j, sizeof(float) * count);
  if (mask)
    std::memcpy(mb, mask + j, count);
  return logits(d, s, scale, bias ? bb : nullptr, mask ? mb : nullptr, 0);
}

HWY_ATTR float ScoreRow(float *s, int64_t n, float scale, const float *bias, const uint8_t *mask,
                        int64_t allowed) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const V vs = hn::Set(d, scale);
  const int64_t live = std::min(n, std::max<int64_t>(allowed, 0));
  V m = hn::Set(d, kNegInf);
  auto nan = hn::FirstN(d, 0);
  int64_t j = 0;
  for (; j + N <= live; j += N) {
    const V v = logits(d, hn::LoadU(d, s + j), vs, bias, mask, j);
    hn::StoreU(v, d, s + j);
    nan = hn::Or(nan, hn::IsNaN(v));
    m = hn::Max(m, v);
  }
  if (j < live) {
    const size_t tail = static_cast<size_t>(live - j);
    const V v = tailLogits(d, vm::loadFirst(d, s + j, tail), vs, bias, mask, j, tail);
    vm::storeFirst(v, d, s + j, tail);
    const auto in = hn::FirstN(d, tail);
    nan = hn::Or(nan, hn::And(in, hn::IsNaN(v)));
    m = hn::Max(m, hn::IfThenElse(in, v, hn::Set(d, kNegInf)));
    j = live;
  }
  std::fill(s + j, s + n, kNegInf);
  return finishMax(d, m, nan);
}

// The exponentials of a row of logits, y_j = exp(l_j - shift), their sum returned. The logits are
// x itself, or (kLogits) scale x + bias, -inf where mask is 0 (logits(): ScoreRow's operations,
// so the same bits as ScoreRow then ExpRow). exp is vExp, or vExpNonPositive where that gives the
// same bits: a finite shift at or above every logit leaves each l_j - shift in [-inf, 0].
// kStore false: the sum alone (log_softmax's and cross_entropy's), its bits, y not written.
template <bool kNonPositive, bool kLogits, bool kStore = true>
HWY_ATTR float ExpRowOf(const float *x, float *y, int64_t n, float shift, float scale,
                        const float *bias, const uint8_t *mask) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const V vshift = hn::Set(d, shift), vs = hn::Set(d, scale);
  auto exp = [d](V v) { return kNonPositive ? vm::vExpNonPositive(d, v) : vm::vExp(d, v); };
  auto logit = [&](V v, const float *b, const uint8_t *m, int64_t at) {
    return kLogits ? logits(d, v, vs, b, m, at) : v;
  };
  V sum = hn::Zero(d);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const V e = exp(hn::Sub(logit(hn::LoadU(d, x + j), bias, mask, j), vshift));
    if constexpr (kStore)
      hn::StoreU(e, d, y + j);
    sum = hn::Add(sum, e);
  }
  if (j < n) {
    const size_t tail = static_cast<size_t>(n - j);
    const V x0 = vm::loadFirst(d, x + j, tail, kNegInf);
    const V e = exp(hn::Sub(kLogits ? tailLogits(d, x0, vs, bias, mask, j, tail) : x0, vshift));
    if constexpr (kStore)
      vm::storeFirst(e, d, y + j, tail);
    sum = hn::Add(sum, hn::IfThenElseZero(hn::FirstN(d, tail), e));
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

template <bool kLogits, bool kStore = true>
HWY_ATTR float ExpRowAt(const float *x, float *y, int64_t n, float shift, float scale,
                        const float *bias, const uint8_t *mask) {
  return std::isfinite(shift) ? ExpRowOf<true, kLogits, kStore>(x, y, n, shift, scale, bias, mask)
                              : ExpRowOf<false, kLogits, kStore>(x, y, n, shift, scale, bias, mask);
}

HWY_ATTR void ScoreExpRow(float *s, int64_t n, float scale, const float *bias, const uint8_t *mask,
                          float shift) {
  ExpRowAt<true>(s, s, n, shift, scale, bias, mask);
}

HWY_ATTR float ExpRow(const float *x, float shift, float *y, int64_t n) {
  return y ? ExpRowAt<false>(x, y, n, shift, 1.0f, nullptr, nullptr)
           : ExpRowAt<false, false>(x, y, n, shift, 1.0f, nullptr, nullptr);
}

HWY_ATTR void LogSoftmaxRow(const float *x, float max, float logSum, float *y, int64_t n) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const V vmax = hn::Set(d, max), vlog = hn::Set(d, logSum);
  int64_t j = 0;
  for (; j + N <= n; j += N)
    hn::StoreU(hn::Sub(hn::Sub(hn::LoadU(d, x + j), vmax), vlog), d, y + j);
  if (j < n) {
    const size_t tail = static_cast<size_t>(n - j);
    vm::storeFirst(hn::Sub(hn::Sub(vm::loadFirst(d, x + j, tail), vmax), vlog), d, y + j, tail);
  }
}

HWY_ATTR void AffineRow(const float *x, float a, float b, float *y, int64_t n) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const V va = hn::Set(d, a), vb = hn::Set(d, b);
  int64_t j = 0;
  for (; j + N <= n; j += N)
    hn::StoreU(hn::MulAdd(hn::LoadU(d, x + j), va, vb), d, y + j);
  if (j < n) {
    const size_t tail = static_cast<size_t>(n - j);
    vm::storeFirst(hn::MulAdd(vm::loadFirst(d, x + j, tail), va, vb), d, y + j, tail);
  }
}

HWY_ATTR void Bf16Row(float *x, int64_t n) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t j = 0;
  for (; j + N <= n; j += N)
    hn::StoreU(vm::roundBf16(hn::LoadU(d, x + j)), d, x + j);
  if (j < n) {
    const size_t tail = static_cast<size_t>(n - j);
    vm::storeFirst(vm::roundBf16(vm::loadFirst(d, x + j, tail)), d, x + j, tail);
  }
}

HWY_ATTR float DotRow(const float *a, const float *b, int64_t n) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  V sum = hn::Zero(d);
  int64_t j = 0;
  for (; j + N <= n; j += N)
    sum = hn::MulAdd(hn::LoadU(d, a + j), hn::LoadU(d, b + j), sum);
  if (j < n) {
    const size_t tail = static_cast<size_t>(n - j);
    sum = hn::MulAdd(vm::loadFirst(d, a + j, tail), vm::loadFirst(d, b + j, tail), sum);
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

HWY_ATTR void SoftmaxGradRow(const float *p, float delta, float scale, float *dp, int64_t n) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const V vd = hn::Set(d, delta), vs = hn::Set(d, scale);
  int64_t j = 0;
  auto grad = [&](V pj, V dpj) { return hn::Mul(hn::Mul(pj, hn::Sub(dpj, vd)), vs); };
  for (; j + N <= n; j += N)
    hn::StoreU(grad(hn::LoadU(d, p + j), hn::LoadU(d, dp + j)), d, dp + j);
  if (j < n) {
    const size_t tail = static_cast<size_t>(n - j);
    vm::storeFirst(grad(vm::loadFirst(d, p + j, tail), vm::loadFirst(d, dp + j, tail)), d, dp + j,
                   tail);
  }
}

HWY_ATTR RowKernels Kernels() {
  return {&ScoreRow, &ScoreExpRow, &ExpRow, &AffineRow, &DotRow, &SoftmaxGradRow, &Bf16Row};
}

} // namespace kiln::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::kernels {

HWY_EXPORT(RowMax);
HWY_EXPORT(ScoreRow);
HWY_EXPORT(ScoreExpRow);
HWY_EXPORT(ExpRow);
HWY_EXPORT(AffineRow);
HWY_EXPORT(LogSoftmaxRow);
HWY_EXPORT(DotRow);
HWY_EXPORT(SoftmaxGradRow);
HWY_EXPORT(Kernels);

float rowMax(const float *x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(RowMax)(x, n);
}
float scoreRow(float *s, int64_t n, float scale, const float *bias, const uint8_t *mask,
               int64_t allowed) {
  return HWY_DYNAMIC_DISPATCH(ScoreRow)(s, n, scale, bias, mask, allowed);
}
void scoreExpRow(float *s, int64_t n, float scale, const float *bias, const uint8_t *mask,
                 float shift) {
  HWY_DYNAMIC_DISPATCH(ScoreExpRow)(s, n, scale, bias, mask, shift);
}
float expRow(const float *x, float shift, float *y, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(ExpRow)(x, shift, y, n);
}
void affineRow(const float *x, float a, float b, float *y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AffineRow)(x, a, b, y, n);
}
void logSoftmaxRow(const float *x, float max, float logSum, float *y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(LogSoftmaxRow)(x, max, logSum, y, n);
}
float dotRow(const float *a, const float *b, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotRow)(a, b, n);
}
void softmaxGradRow(const float *p, float delta, float scale, float *dp, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SoftmaxGradRow)(p, delta, scale, dp, n);
}
RowKernels rowKernels() {
  return HWY_DYNAMIC_DISPATCH(Kernels)();
}

} // namespace kiln::kernels
#endif

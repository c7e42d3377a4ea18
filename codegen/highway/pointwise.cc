// The pointwise loops of pointwise.h, compiled once per SIMD target (Highway's foreach_target:
// inside HWY_BEFORE_NAMESPACE the compiler targets that instruction set, so it vectorizes these
// plain loops with its registers) and dispatched at run time to the best one the CPU has.
// Vectorizing changes no element's value: every lane computes the same IEEE operations as the
// scalar function (no fast-math; this file is built with -fno-math-errno so that sqrt needs no
// libm call to set errno, which changes errno only).
#include <algorithm>
#include <cassert>
#include <cmath>

#include "codegen/highway/pointwise.h"
#include "ir/ops/elementwise.h"
#include "runtime/kernels/vmath.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "codegen/highway/pointwise.cc"
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::highway::HWY_NAMESPACE {
using ir::OpKind;

template <class Op> void unary(float *d, const float *a, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    d[j] = Op::template f<float>(a[j]);
}
template <class Op> void binary(float *d, const float *a, const float *b, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    d[j] = Op::template f<float>(a[j], b[j]);
}
// A comparison's bool as 1 or 0, selected rather than converted: the conversion does not
// vectorize (GPT-2's loss region fusion{eq cast mul reduce_sum}: 14.4 -> 8.1 ms a step).
template <class Op> void compare(float *d, const float *a, const float *b, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    d[j] = Op::template f<float>(a[j], b[j]) ? 1.0f : 0.0f;
}

void runPointwise(OpKind op, bool toBool, float *d, const float *a, const float *b, const float *c,
                  int64_t n) {
  namespace s = ir::scalar;
  using kernels::MathFn;
  switch (op) {
  case OpKind::Neg:
    return unary<s::Neg>(d, a, n);
  case OpKind::Abs:
    return unary<s::Abs>(d, a, n);
  case OpKind::Exp:
    return kernels::mathFn(MathFn::Exp, a, d, n);
  case OpKind::Log:
    return kernels::mathFn(MathFn::Log, a, d, n);
  case OpKind::Sqrt:
    return unary<s::Sqrt>(d, a, n);
  case OpKind::Rsqrt:
    return unary<s::Rsqrt>(d, a, n);
  case OpKind::Tanh:
    return kernels::mathFn(MathFn::Tanh, a, d, n);
  case OpKind::Sigmoid:
    return kernels::mathFn(MathFn::Sigmoid, a, d, n);
  case OpKind::Relu:
    return unary<s::Relu>(d, a, n);
  case OpKind::Gelu:
    return kernels::mathFn(MathFn::Gelu, a, d, n);
  case OpKind::GeluTanh:
    return kernels::mathFn(MathFn::GeluTanh, a, d, n);
  case OpKind::GeluGrad:
    return kernels::mathFn(MathFn::GeluGrad, a, d, n);
  case OpKind::GeluTanhGrad:
    return kernels::mathFn(MathFn::GeluTanhGrad, a, d, n);
  case OpKind::Silu:
    return kernels::mathFn(MathFn::Silu, a, d, n);
  case OpKind::SiluGrad:
    return kernels::mathFn(MathFn::SiluGrad, a, d, n);
  case OpKind::Sin:
    return unary<s::Sin>(d, a, n);
  case OpKind::Cos:
    return unary<s::Cos>(d, a, n);
  case OpKind::Erf:
    return kernels::mathFn(MathFn::Erf, a, d, n);
  case OpKind::LogicalNot:
    return unary<s::LogicalNot>(d, a, n);
  case OpKind::StopGradient:
  case OpKind::Broadcast:
    return unary<s::Identity>(d, a, n);
  // f32 <-> bool: a bool is 0 or 1 here; to bool is x != 0.
  case OpKind::Cast:
    for (int64_t j = 0; j < n; ++j)
      d[j] = toBool ? (a[j] != 0 ? 1.0f : 0.0f) : a[j];
    return;
  case OpKind::Add:
    return binary<s::Add>(d, a, b, n);
  case OpKind::Sub:
    return binary<s::Sub>(d, a, b, n);
  case OpKind::Mul:
    return binary<s::Mul>(d, a, b, n);
  case OpKind::Div:
    return binary<s::Div>(d, a, b, n);
  case OpKind::Max:
    return binary<s::Max>(d, a, b, n);
  case OpKind::Min:
    return binary<s::Min>(d, a, b, n);
  case OpKind::Pow:
    return binary<s::Pow>(d, a, b, n);
  case OpKind::LogicalAnd:
    return binary<s::LogicalAnd>(d, a, b, n);
  case OpKind::LogicalOr:
    return binary<s::LogicalOr>(d, a, b, n);
  case OpKind::Eq:
    return compare<s::Eq>(d, a, b, n);
  case OpKind::Ne:
    return compare<s::Ne>(d, a, b, n);
  case OpKind::Lt:
    return compare<s::Lt>(d, a, b, n);
  case OpKind::Le:
    return compare<s::Le>(d, a, b, n);
  case OpKind::Gt:
    return compare<s::Gt>(d, a, b, n);
  case OpKind::Ge:
    return compare<s::Ge>(d, a, b, n);
  case OpKind::Select:
    for (int64_t j = 0; j < n; ++j)
      d[j] = a[j] != 0 ? b[j] : c[j];
    return;
  default: // the fusion lowering admits only the pointwise ops above
    assert(false && "a pointwise op without a case in runPointwise");
    return;
  }
}

// Each lane's sum in its own order (j ascending), kept in a local array the compiler holds in a
// register (lanes may alias nothing of x, but the compiler cannot know it).
void accumulateSum(float *lanes, const float *x, int64_t n) {
  float acc[kSumLanes];
  std::copy(lanes, lanes + kSumLanes, acc);
  int64_t j = 0;
  for (; j + kSumLanes <= n; j += kSumLanes)
    for (int64_t l = 0; l < kSumLanes; ++l)
      acc[l] += x[j + l];
  for (int64_t l = 0; j + l < n; ++l)
    acc[l] += x[j + l];
  std::copy(acc, acc + kSumLanes, lanes);
}

void combineInto(kernels::Reduce kind, float *out, const float *x, int64_t n) {
  if (kind != kernels::Reduce::Max) {
    for (int64_t j = 0; j < n; ++j)
      out[j] += x[j];
    return;
  }
  for (int64_t j = 0; j < n; ++j)
    out[j] = kernels::reduceCombine(kind, out[j], x[j]);
}

void intsToFloats(float *d, const int64_t *s, int64_t stride, int64_t n) {
  if (stride == 1) {
    for (int64_t j = 0; j < n; ++j)
      d[j] = static_cast<float>(s[j]);
    return;
  }
  for (int64_t j = 0; j < n; ++j)
    d[j] = static_cast<float>(s[j * stride]);
}

void boolsToFloats(float *d, const uint8_t *s, int64_t stride, int64_t n) {
  if (stride == 1) {
    for (int64_t j = 0; j < n; ++j)
      d[j] = s[j] ? 1.0f : 0.0f;
    return;
  }
  for (int64_t j = 0; j < n; ++j)
    d[j] = s[j * stride] ? 1.0f : 0.0f;
}

} // namespace kiln::highway::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::highway {

HWY_EXPORT(runPointwise);
HWY_EXPORT(accumulateSum);
HWY_EXPORT(combineInto);
HWY_EXPORT(intsToFloats);
HWY_EXPORT(boolsToFloats);

void runPointwise(ir::OpKind op, bool toBool, float *d, const float *a, const float *b,
                  const float *c, int64_t n) {
  HWY_DYNAMIC_DISPATCH(runPointwise)(op, toBool, d, a, b, c, n);
}

void accumulateSum(float *lanes, const float *x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(accumulateSum)(lanes, x, n);
}

void combineInto(kernels::Reduce kind, float *out, const float *x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(combineInto)(kind, out, x, n);
}

void intsToFloats(float *d, const int64_t *s, int64_t stride, int64_t n) {
  HWY_DYNAMIC_DISPATCH(intsToFloats)(d, s, stride, n);
}

void boolsToFloats(float *d, const uint8_t *s, int64_t stride, int64_t n) {
  HWY_DYNAMIC_DISPATCH(boolsToFloats)(d, s, stride, n);
}

} // namespace kiln::highway
#endif

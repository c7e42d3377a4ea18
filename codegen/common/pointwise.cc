// The pointwise loops of pointwise.h, compiled once per SIMD target (Highway's foreach_target)
// and dispatched at run time to the best one the CPU has. Each op's loop runs its formula
// (ir/ops/elementwise.h) on Highway vectors through VectorMath below, the instance of ir/ops/math.h
// that the LLVM backend's IrMath mirrors operation for operation: the two backends compute the
// same bits. This file is built with -fno-math-errno so that sqrt needs no libm call.
#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>

#include "codegen/common/pointwise.h"
#include "ir/ops/elementwise.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "codegen/common/pointwise.cc"
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"

// After highway.h (clang-format must not sort it above foreach_target.h).
#include "runtime/kernels/vmath-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::codegen::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace vm = kernels::HWY_NAMESPACE::vm;
namespace formula = ir::formula;
using ir::OpKind;

// ir/ops/math.h's interface on Highway vectors of f32. exp, tanh and erf are the vector math of
// runtime/kernels/vmath-inl.h; log, log1p, sin, cos and pow call libm lane by lane (as the LLVM
// backend does), so that both backends give the same bits for them too.
struct VectorMath {
  using D = vm::D;
  using V = vm::V;
  using B = hn::Mask<D>;
  D d;

  V c(double v) const { return hn::Set(d, static_cast<float>(v)); }
  V neg(V x) const { return hn::Neg(x); }
  V add(V a, V b) const { return hn::Add(a, b); }
  V sub(V a, V b) const { return hn::Sub(a, b); }
  V mul(V a, V b) const { return hn::Mul(a, b); }
  V div(V a, V b) const { return hn::Div(a, b); }
  B eq(V a, V b) const { return hn::Eq(a, b); }
  B ne(V a, V b) const { return hn::Not(hn::Eq(a, b)); } // Highway's Ne is false on NaN
  B lt(V a, V b) const { return hn::Lt(a, b); }
  B le(V a, V b) const { return hn::Le(a, b); }
  B gt(V a, V b) const { return hn::Gt(a, b); }
  B ge(V a, V b) const { return hn::Ge(a, b); }
  B isnan(V x) const { return hn::IsNaN(x); }
  B both(B a, B b) const { return hn::And(a, b); }
  B either(B a, B b) const { return hn::Or(a, b); }
  V select(B c, V a, V b) const { return hn::IfThenElse(c, a, b); }
  V sqrt(V x) const { return hn::Sqrt(x); }
  V exp(V x) const { return vm::vExp(d, x); }
  V tanh(V x) const { return vm::vTanh(d, x); }
  V erf(V x) const { return vm::vErf(d, x); }
  V log(V x) const {
    return perLane([](float a, float) { return std::log(a); }, x, x);
  }
  V log1p(V x) const {
    return perLane([](float a, float) { return std::log1p(a); }, x, x);
  }
  V sin(V x) const {
    return perLane([](float a, float) { return std::sin(a); }, x, x);
  }
  V cos(V x) const {
    return perLane([](float a, float) { return std::cos(a); }, x, x);
  }
  V pow(V a, V b) const {
    return perLane([](float x, float y) { return std::pow(x, y); }, a, b);
  }
  V roundBf16(V x) const { return vm::roundBf16(x); }

  template <class F> V perLane(F f, V a, V b) const {
    HWY_ALIGN float x[hn::MaxLanes(D())], y[hn::MaxLanes(D())];
    hn::Store(a, d, x), hn::Store(b, d, y);
    for (size_t l = 0; l < hn::Lanes(d); ++l)
      x[l] = f(x[l], y[l]);
    return hn::Load(d, x);
  }
  V value(V v) const { return v; }
  V value(B b) const { return select(b, c(1), c(0)); } // a comparison's bool as 1 or 0
};

// The formula's operand count, from the calls it accepts.
template <class F> constexpr int arity() {
  using V = VectorMath::V;
  if constexpr (requires(VectorMath m, V v) { F::f(m, v, v, v); })
    return 3;
  else if constexpr (requires(VectorMath m, V v) { F::f(m, v, v); })
    return 2;
  else
    return 1;
}

// d[j] = F(a[j], b[j], c[j]) for j < n, whole vectors and then the last n mod lanes through one
// loaded and stored masked (every element computed by the same code). Flattened: the formula is
// a template defined outside this target's region (ir/ops/elementwise.h), so compiled on its own
// it would have the baseline's ABI and pass 512-bit vectors as the baseline does (garbage on
// AVX-512, seen); inlined here, it is compiled for this target.
template <class F>
HWY_FLATTEN void pointwiseLoop(float *d, const float *a, const float *b, const float *c,
                               int64_t n) {
  const VectorMath m;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(m.d));
  constexpr int kArity = arity<F>();
  auto apply = [&](auto load) {
    if constexpr (kArity == 3)
      return m.value(F::f(m, load(a), load(b), load(c)));
    else if constexpr (kArity == 2)
      return m.value(F::f(m, load(a), load(b)));
    else
      return m.value(F::f(m, load(a)));
  };
  int64_t j = 0;
  for (; j + lanes <= n; j += lanes)
    hn::StoreU(apply([&](const float *p) { return hn::LoadU(m.d, p + j); }), m.d, d + j);
  if (j < n) {
    const size_t tail = static_cast<size_t>(n - j);
    vm::storeFirst(apply([&](const float *p) { return vm::loadFirst(m.d, p + j, tail); }), m.d,
                   d + j, tail);
  }
}

using Loop = void (*)(float *, const float *, const float *, const float *, int64_t);
// Every op with a formula (the op table checks that every pointwise op has one), and the casts.
constexpr ir::RegionFormulas<Loop> kLoops =
    ir::regionFormulas<Loop>([]<class F>() -> Loop { return &pointwiseLoop<F>; });

void runPointwise(OpKind op, ir::CastTo cast, float *d, const float *a, const float *b,
                  const float *c, int64_t n) {
  const Loop loop = kLoops(op, cast);
  assert(loop && "the fusion lowering admits only ops with a formula");
  loop(d, a, b, c, n);
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

void storeBf16Halves(uint16_t *d, const float *s, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    d[j] = static_cast<uint16_t>(std::bit_cast<uint32_t>(s[j]) >> 16);
}

} // namespace kiln::codegen::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::codegen {

HWY_EXPORT(runPointwise);
HWY_EXPORT(accumulateSum);
HWY_EXPORT(intsToFloats);
HWY_EXPORT(boolsToFloats);
HWY_EXPORT(storeBf16Halves);

void runPointwise(ir::OpKind op, ir::CastTo cast, float *d, const float *a, const float *b,
                  const float *c, int64_t n) {
  HWY_DYNAMIC_DISPATCH(runPointwise)(op, cast, d, a, b, c, n);
}

void accumulateSum(float *lanes, const float *x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(accumulateSum)(lanes, x, n);
}

void intsToFloats(float *d, const int64_t *s, int64_t stride, int64_t n) {
  HWY_DYNAMIC_DISPATCH(intsToFloats)(d, s, stride, n);
}

void boolsToFloats(float *d, const uint8_t *s, int64_t stride, int64_t n) {
  HWY_DYNAMIC_DISPATCH(boolsToFloats)(d, s, stride, n);
}

void storeBf16Halves(uint16_t *d, const float *s, int64_t n) {
  HWY_DYNAMIC_DISPATCH(storeBf16Halves)(d, s, n);
}

} // namespace kiln::codegen
#endif

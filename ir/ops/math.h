// The math interface the pointwise formulas (ir/ops/elementwise.h `formula::`) are written over,
// and its scalar instance, which the reference interpreter runs. Every backend instantiates the
// same formula with its own instance, so all of them run the same operations in the same order:
//   ScalarMath<T>        T = float or double (the reference), or int64_t (integer elements)
//   codegen::VectorMath  Highway vectors (codegen/common/pointwise.cc)
//   llvmgen::IrMath      LLVM IR values on vectors (codegen/llvm/tile_codegen.cc)
//
// An instance M has a value type V and a condition type B (a bool, a mask, an i1 vector) and:
//   V c(double)                       a constant, rounded once to the element type
//   V neg(V); add, sub, mul, div(V, V)   IEEE, each rounded; no contraction into multiply-adds
//   B eq, ne, lt, le, gt, ge(V, V)    C++'s comparisons: ordered, except ne (true on NaN)
//   B isnan(V); B both(B, B); B either(B, B)
//   V select(B, V on_true, V on_false)
//   V sqrt(V)                         correctly rounded
//   V exp, log, log1p, tanh, erf, sin, cos(V); V pow(V, V)
//   V roundBf16(V)                    the nearest bf16 value (support/bf16.h: ties to even, a NaN
//                                     stays a NaN): a value stored in bf16
// The transcendental functions are the one place where instances differ: the reference calls
// <cmath>; the vector backends share their own exp, tanh and erf (runtime/kernels/vmath-inl.h
// and its IR twin, codegen/llvm/vector_math.h) and call libm lane by lane for the others (log,
// log1p, sin, cos, pow), so the two vector backends agree bit for bit and the reference stays
// the exact meaning.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "support/bf16.h"

namespace kiln::ir {

template <class T> struct ScalarMath {
  using V = T;
  using B = bool;

  static constexpr bool kFloat = std::is_floating_point_v<T>;
  // Integer elements only meet the ops that accept them (neg, add, max, comparisons, ...), but
  // every formula compiles for them; the float functions go through double.
  template <class F> static T viaDouble(F f, T x) {
    if constexpr (kFloat)
      return f(x);
    else
      return static_cast<T>(f(static_cast<double>(x)));
  }

  T c(double v) const { return static_cast<T>(v); }
  T neg(T x) const { return -x; }
  T add(T a, T b) const { return a + b; }
  T sub(T a, T b) const { return a - b; }
  T mul(T a, T b) const { return a * b; }
  T div(T a, T b) const { return a / b; }
  bool eq(T a, T b) const { return a == b; }
  bool ne(T a, T b) const { return a != b; }
  bool lt(T a, T b) const { return a < b; }
  bool le(T a, T b) const { return a <= b; }
  bool gt(T a, T b) const { return a > b; }
  bool ge(T a, T b) const { return a >= b; }
  bool isnan(T x) const {
    if constexpr (kFloat)
      return std::isnan(x);
    else
      return false;
  }
  bool both(bool a, bool b) const { return a && b; }
  bool either(bool a, bool b) const { return a || b; }
  T select(bool c, T a, T b) const { return c ? a : b; }
  T sqrt(T x) const {
    return viaDouble([](auto v) { return std::sqrt(v); }, x);
  }
  T exp(T x) const {
    return viaDouble([](auto v) { return std::exp(v); }, x);
  }
  T log(T x) const {
    return viaDouble([](auto v) { return std::log(v); }, x);
  }
  T log1p(T x) const {
    return viaDouble([](auto v) { return std::log1p(v); }, x);
  }
  T tanh(T x) const {
    return viaDouble([](auto v) { return std::tanh(v); }, x);
  }
  T erf(T x) const {
    return viaDouble([](auto v) { return std::erf(v); }, x);
  }
  T sin(T x) const {
    return viaDouble([](auto v) { return std::sin(v); }, x);
  }
  T cos(T x) const {
    return viaDouble([](auto v) { return std::cos(v); }, x);
  }
  T pow(T a, T b) const {
    if constexpr (kFloat)
      return std::pow(a, b);
    else
      return static_cast<T>(std::pow(static_cast<double>(a), static_cast<double>(b)));
  }
  T roundBf16(T x) const {
    if constexpr (kFloat)
      return static_cast<T>(roundToBf16(static_cast<float>(x)));
    else
      return x;
  }
};

} // namespace kiln::ir

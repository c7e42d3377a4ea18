// Helpers for the op tests: run one op's inference and reference semantics directly (no graph,
// no interpreter) in f32 and f64, and compare the results with hand-computed values.
#pragma once

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "ir/op.h"
#include "tests/util/ir_types.h"

namespace kiln::ir::optest {

// One operand: its type and its elements in row-major order, as doubles (ints and bools exact).
struct Arg {
  Type type;
  std::vector<double> values;
};
inline Arg f32(Shape s, std::vector<double> v) {
  return {{DType::F32, std::move(s)}, std::move(v)};
}
inline Arg f64(Shape s, std::vector<double> v) {
  return {{DType::F64, std::move(s)}, std::move(v)};
}
inline Arg i32(Shape s, std::vector<double> v) {
  return {{DType::I32, std::move(s)}, std::move(v)};
}
inline Arg i64(Shape s, std::vector<double> v) {
  return {{DType::I64, std::move(s)}, std::move(v)};
}
inline Arg boolean(Shape s, std::vector<double> v) {
  return {{DType::Bool, std::move(s)}, std::move(v)};
}

inline constexpr double kInf = INFINITY;
inline constexpr double kNaN = NAN;

// The op's attributes: its defaults with `inits` set (an Error for a bad name or kind).
inline Expected<Attrs> makeAttrs(OpKind k, const std::vector<AttrInit> &inits) {
  Attrs attrs(opInfo(k).attrs);
  for (const AttrInit &a : inits)
    if (Status s = attrs.set(a.first, a.second); !s)
      return s.error();
  return attrs;
}

template <class F> RefTensor<F> makeTensor(const Arg &a) {
  RefTensor<F> t(a.type);
  EXPECT_EQ(static_cast<int64_t>(a.values.size()), t.size())
      << "test operand of " << typeString(a.type);
  for (int64_t k = 0; k < t.size() && k < static_cast<int64_t>(a.values.size()); ++k) {
    if (t.isFloatStorage())
      t.f[k] = static_cast<F>(a.values[k]);
    else
      t.i[k] = static_cast<int64_t>(a.values[k]);
  }
  return t;
}

// Infers the result types of op k on `args`, then runs its reference semantics in precision F.
template <class F>
Expected<std::vector<RefTensor<F>>> runOp(OpKind k, const std::vector<Arg> &args,
                                          const std::vector<AttrInit> &inits = {}) {
  Expected<Attrs> attrs = makeAttrs(k, inits);
  if (!attrs)
    return attrs.error();
  std::vector<Type> types;
  std::vector<RefTensor<F>> ins;
  for (const Arg &a : args) {
    types.push_back(a.type);
    ins.push_back(makeTensor<F>(a));
  }
  Expected<std::vector<Type>> resultTypes = inferTypes(k, types, *attrs);
  if (!resultTypes)
    return makeError("inference: {}", resultTypes.error().message);
  std::vector<const RefTensor<F> *> inPtrs;
  for (const RefTensor<F> &t : ins)
    inPtrs.push_back(&t);
  std::vector<RefTensor<F>> outs;
  for (const Type &t : *resultTypes)
    outs.emplace_back(t);
  RefFn<F> fn;
  if constexpr (std::is_same_v<F, float>)
    fn = opInfo(k).ref32;
  else
    fn = opInfo(k).ref64;
  if (Status s = fn(*attrs, inPtrs, outs); !s)
    return s.error();
  return outs;
}

// Whether `got` is `want` within a relative tolerance; NaN matches NaN, inf matches inf.
inline bool closeTo(double got, double want, double tol) {
  if (std::isnan(want) || std::isnan(got))
    return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got))
    return got == want;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

template <class F>
::testing::AssertionResult tensorMatches(const RefTensor<F> &t, const Type &type,
                                         const std::vector<double> &want, double tol) {
  if (t.type != type)
    return ::testing::AssertionFailure()
           << "type " << typeString(t.type) << ", expected " << typeString(type);
  if (static_cast<int64_t>(want.size()) != t.size())
    return ::testing::AssertionFailure()
           << "test expects " << want.size() << " values for " << typeString(type);
  std::vector<double> got;
  for (int64_t k = 0; k < t.size(); ++k)
    got.push_back(t.get(k));
  for (size_t k = 0; k < want.size(); ++k)
    if (!closeTo(got[k], want[k], tol))
      return ::testing::AssertionFailure()
             << "element " << k << " is " << fmt::format("{}", got[k]) << ", expected "
             << fmt::format("{}", want[k]) << "\n  got:      " << fmt::format("{}", got)
             << "\n  expected: " << fmt::format("{}", want);
  return ::testing::AssertionSuccess();
}

inline constexpr double kTol32 = 2e-6, kTol64 = 1e-12;

// Runs op k in f32 and in f64 mode; each must give one result of `type` equal to `want`.
inline ::testing::AssertionResult refIs(OpKind k, const std::vector<Arg> &args,
                                        const std::vector<AttrInit> &inits, const Type &type,
                                        const std::vector<double> &want, double tol32 = kTol32,
                                        double tol64 = kTol64) {
  auto check = [&](auto r, const char *mode, double tol) -> ::testing::AssertionResult {
    if (!r)
      return ::testing::AssertionFailure() << mode << ": " << r.error().message;
    if (r->size() != 1)
      return ::testing::AssertionFailure() << mode << ": " << r->size() << " results";
    ::testing::AssertionResult m = tensorMatches((*r)[0], type, want, tol);
    if (!m)
      return ::testing::AssertionFailure() << mode << ": " << m.message();
    return m;
  };
  ::testing::AssertionResult r32 = check(runOp<float>(k, args, inits), "ref32", tol32);
  if (!r32)
    return r32;
  return check(runOp<double>(k, args, inits), "ref64", tol64);
}

// The reference error of op k on `args`, in both precisions (which must agree), or "<ok>".
inline std::string refError(OpKind k, const std::vector<Arg> &args,
                            const std::vector<AttrInit> &inits = {}) {
  auto r32 = runOp<float>(k, args, inits);
  auto r64 = runOp<double>(k, args, inits);
  std::string e32 = r32 ? "<ok>" : r32.error().message;
  std::string e64 = r64 ? "<ok>" : r64.error().message;
  return e32 == e64 ? e32 : "ref32 says '" + e32 + "' but ref64 says '" + e64 + "'";
}

// The inference error of op k on operand types (or "<ok>", or the attribute error).
inline std::string inferError(OpKind k, std::vector<Type> types,
                              const std::vector<AttrInit> &inits = {}) {
  Expected<Attrs> attrs = makeAttrs(k, inits);
  if (!attrs)
    return "attrs: " + attrs.error().message;
  Expected<std::vector<Type>> r = inferTypes(k, types, *attrs);
  return r ? "<ok>" : r.error().message;
}

// The single inferred result type (or an invalid-looking placeholder on error, reported).
inline Type inferOne(OpKind k, std::vector<Type> types, const std::vector<AttrInit> &inits = {}) {
  Expected<Attrs> attrs = makeAttrs(k, inits);
  if (!attrs) {
    ADD_FAILURE() << attrs.error().message;
    return {};
  }
  Expected<std::vector<Type>> r = inferTypes(k, types, *attrs);
  if (!r || r->size() != 1) {
    ADD_FAILURE() << (r ? "not one result" : r.error().message);
    return {};
  }
  return (*r)[0];
}

} // namespace kiln::ir::optest

// Short spellings of IR value types in tests: T(f32, {2, 3}) and f32t({2, 3}) are f32[2,3].
#pragma once

#include <utility>

#include "ir/types.h"

namespace kiln::ir {

inline Type T(DType d, Shape s) {
  return {d, std::move(s)};
}
inline Type f32t(Shape s) {
  return {DType::F32, std::move(s)};
}
inline Type f64t(Shape s) {
  return {DType::F64, std::move(s)};
}
inline Type boolt(Shape s) {
  return {DType::Bool, std::move(s)};
}
inline constexpr DType f32 = DType::F32, f64 = DType::F64, bf16 = DType::BF16, i32 = DType::I32,
                       i64 = DType::I64, b1 = DType::Bool;

} // namespace kiln::ir

// Element types, shared by the IR (value types), the runtime (host tensors, program symbols) and
// every backend: one enum, one set of names and sizes.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

enum class DType : uint8_t { F32, F64, BF16, I32, I64, Bool };
inline constexpr DType kAllDTypes[] = {DType::F32, DType::F64, DType::BF16,
                                       DType::I32, DType::I64, DType::Bool};

// "f32", "bool", ...
constexpr std::string_view dtypeName(DType t) {
  switch (t) {
  case DType::F32:
    return "f32";
  case DType::F64:
    return "f64";
  case DType::BF16:
    return "bf16";
  case DType::I32:
    return "i32";
  case DType::I64:
    return "i64";
  case DType::Bool:
    return "bool";
  }
  return "?";
}

constexpr std::optional<DType> parseDType(std::string_view s) {
  for (DType t : kAllDTypes)
    if (dtypeName(t) == s)
      return t;
  return std::nullopt;
}

// Bytes per element of the storage (bf16: its 16 bits; bool: one byte, 0 or 1).
constexpr int64_t dtypeBytes(DType t) {
  switch (t) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::F64:
  case DType::I64:
    return 8;
  case DType::BF16:
    return 2;
  case DType::Bool:
    return 1;
  }
  return 0;
}

constexpr bool isFloat(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::BF16;
}
constexpr bool isInteger(DType t) {
  return t == DType::I32 || t == DType::I64;
}

} // namespace kiln

// One element of a tensor in its dtype's storage, as bytes: read as a double or an int64, written
// from one (f32 and bf16 rounded to nearest even, integers truncated toward zero as a cast, bool
// as 0/1). Host tensors and every backend that reads and writes its memory use these, so all
// agree on the bytes of a value.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "support/bf16.h"
#include "support/dtype.h"

namespace kiln::element {

template <class T> T load(const uint8_t *p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T> void store(uint8_t *p, T v) {
  std::memcpy(p, &v, sizeof v);
}

inline int64_t getInt(DType t, const uint8_t *p) {
  switch (t) {
  case DType::I32:
    return load<int32_t>(p);
  case DType::I64:
    return load<int64_t>(p);
  case DType::Bool:
    return load<uint8_t>(p) != 0;
  case DType::F32:
    return static_cast<int64_t>(load<float>(p));
  case DType::F64:
    return static_cast<int64_t>(load<double>(p));
  case DType::BF16:
    return static_cast<int64_t>(fromBf16Bits(load<uint16_t>(p)));
  }
  return 0;
}

inline double get(DType t, const uint8_t *p) {
  switch (t) {
  case DType::F32:
    return load<float>(p);
  case DType::F64:
    return load<double>(p);
  case DType::BF16:
    return fromBf16Bits(load<uint16_t>(p));
  default:
    return static_cast<double>(getInt(t, p));
  }
}

inline void setInt(DType t, uint8_t *p, int64_t v) {
  switch (t) {
  case DType::I32:
    return store(p, static_cast<int32_t>(v));
  case DType::I64:
    return store(p, v);
  case DType::Bool:
    return store(p, static_cast<uint8_t>(v != 0));
  case DType::F32:
    return store(p, static_cast<float>(v));
  case DType::F64:
    return store(p, static_cast<double>(v));
  case DType::BF16:
    return store(p, toBf16Bits(static_cast<float>(v)));
  }
}

inline void set(DType t, uint8_t *p, double v) {
  switch (t) {
  case DType::F32:
    return store(p, static_cast<float>(v));
  case DType::F64:
    return store(p, v);
  case DType::BF16:
    return store(p, toBf16Bits(static_cast<float>(v)));
  case DType::Bool:
    return store(p, static_cast<uint8_t>(v != 0));
  default:
    return setInt(t, p, std::isfinite(v) ? static_cast<int64_t>(v) : 0);
  }
}

} // namespace kiln::element

// The host tensor that reference semantics read and write. `F` is the precision every floating
// value is computed and held in (float or double: the interpreter's f32 or f64 mode); integer and
// bool elements are held exactly as int64 whatever F is. bf16 values are held in F, already
// rounded to bf16 (the interpreter rounds every bf16 result; see support/bf16.h).
#pragma once

#include <cstdint>
#include <vector>

#include "ir/types.h"

namespace kiln::ir {

template <class F> struct RefTensor {
  Type type;
  std::vector<F> f;       // elements when isFloat(type.dtype), row-major
  std::vector<int64_t> i; // elements otherwise (bool: 0 or 1), row-major

  RefTensor() = default;
  explicit RefTensor(Type t) : type(std::move(t)) {
    if (isFloat(type.dtype))
      f.assign(type.numElements(), F(0));
    else
      i.assign(type.numElements(), 0);
  }

  bool isFloatStorage() const { return isFloat(type.dtype); }
  int64_t size() const { return type.numElements(); }
  // Element k as a double, whatever the storage.
  double get(int64_t k) const { return isFloatStorage() ? double(f[k]) : double(i[k]); }
};

} // namespace kiln::ir

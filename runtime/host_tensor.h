// A tensor in host memory: dtype, shape and its own 64-byte aligned storage, holding the elements
// row-major in the dtype's storage (f32 as float, bf16 as its 16 bits, bool as one byte 0/1).
// What the runtime hands in and out of an Executable, and what checkpoints and batches are made of.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "support/dtype.h"

namespace kiln::runtime {

class HostTensor {
public:
  HostTensor() = default;
  // Zero-filled. The shape's dimensions are >= 0 and its size is the caller's to have checked.
  HostTensor(DType dtype, std::vector<int64_t> shape);
  HostTensor(const HostTensor &other);
  HostTensor &operator=(const HostTensor &other);
  HostTensor(HostTensor &&) = default;
  HostTensor &operator=(HostTensor &&) = default;

  DType dtype() const { return dtype_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  int64_t numElements() const { return elements_; }
  int64_t bytes() const { return elements_ * dtypeBytes(dtype_); }

  std::span<uint8_t> raw() { return {data_.get(), static_cast<size_t>(bytes())}; }
  std::span<const uint8_t> raw() const { return {data_.get(), static_cast<size_t>(bytes())}; }

  // Element k as a double (bf16 widened, integers and bools as their values).
  double get(int64_t k) const;
  // Stores v as element k in the dtype: rounded to f32 or bf16, integers truncated toward zero
  // (as a cast), bool as v != 0.
  void set(int64_t k, double v);
  // Integer elements exactly (int64 covers i32, i64 and bool).
  int64_t getInt(int64_t k) const;
  void setInt(int64_t k, int64_t v);

  bool operator==(const HostTensor &other) const; // same dtype, shape and bytes

private:
  struct Free {
    void operator()(uint8_t *p) const;
  };
  DType dtype_ = DType::F32;
  std::vector<int64_t> shape_;
  int64_t elements_ = 0;
  std::unique_ptr<uint8_t[], Free> data_;
};

// 64-byte aligned, zeroed bytes that free themselves (region storage of backends).
struct AlignedBytes {
  AlignedBytes() = default;
  explicit AlignedBytes(int64_t bytes);
  uint8_t *data() const { return ptr.get(); }
  int64_t size = 0;
  struct Free {
    void operator()(uint8_t *p) const;
  };
  std::unique_ptr<uint8_t[], Free> ptr;
};

} // namespace kiln::runtime

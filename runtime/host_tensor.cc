// Host tensors (see host_tensor.h).
#include "runtime/host_tensor.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/mman.h>

#include "support/checked.h"
#include "support/element.h"

namespace kiln::runtime {
namespace {

// Buffers of at least a huge page are aligned to one and ask the kernel for huge pages (where
// transparent huge pages are "madvise", as here, it gives them only to such regions).
constexpr size_t kHugePage = size_t{2} << 20;

uint8_t *allocateZeroed(int64_t bytes) {
  // aligned_alloc wants a multiple of the alignment, and at least one byte.
  const size_t want = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  const size_t align = want >= kHugePage ? kHugePage : 64;
  const size_t size = (want + align - 1) / align * align;
  void *p = std::aligned_alloc(align, size);
  if (!p)
    throw std::bad_alloc();
  if (align == kHugePage)
    madvise(p, size, MADV_HUGEPAGE); // advice: on failure the pages are ordinary ones
  std::memset(p, 0, size);
  return static_cast<uint8_t *>(p);
}

} // namespace

void HostTensor::Free::operator()(uint8_t *p) const {
  std::free(p);
}
void AlignedBytes::Free::operator()(uint8_t *p) const {
  std::free(p);
}

AlignedBytes::AlignedBytes(int64_t bytes) : size(bytes), ptr(allocateZeroed(bytes)) {}

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)), elements_(1) {
  for (int64_t d : shape_)
    elements_ = mulSat(elements_, d);
  data_.reset(allocateZeroed(bytes()));
}

HostTensor::HostTensor(const HostTensor &other)
    : dtype_(other.dtype_), shape_(other.shape_), elements_(other.elements_),
      data_(other.data_ ? allocateZeroed(other.bytes()) : nullptr) {
  if (data_)
    std::memcpy(data_.get(), other.data_.get(), static_cast<size_t>(bytes()));
}

HostTensor &HostTensor::operator=(const HostTensor &other) {
  if (this != &other)
    *this = HostTensor(other);
  return *this;
}

double HostTensor::get(int64_t k) const {
  return element::get(dtype_, data_.get() + k * dtypeBytes(dtype_));
}
void HostTensor::set(int64_t k, double v) {
  element::set(dtype_, data_.get() + k * dtypeBytes(dtype_), v);
}
int64_t HostTensor::getInt(int64_t k) const {
  return element::getInt(dtype_, data_.get() + k * dtypeBytes(dtype_));
}
void HostTensor::setInt(int64_t k, int64_t v) {
  element::setInt(dtype_, data_.get() + k * dtypeBytes(dtype_), v);
}

bool HostTensor::operator==(const HostTensor &other) const {
  return dtype_ == other.dtype_ && shape_ == other.shape_ &&
         std::memcmp(data_.get(), other.data_.get(), static_cast<size_t>(bytes())) == 0;
}

} // namespace kiln::runtime

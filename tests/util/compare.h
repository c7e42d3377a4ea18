// Comparing a fast backend's tensor with the reference's, element by element.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/host_tensor.h"

namespace kiln::test_util {

// |x - y| <= rtol |y| + atol max|y| + 1e-7 for every element, max over the finite |y| (NaN
// matches NaN, an infinity itself).
inline ::testing::AssertionResult closeTo(const runtime::HostTensor &got,
                                          const runtime::HostTensor &want, const std::string &name,
                                          double rtol = 1e-4, double atol = 1e-5) {
  if (got.numElements() != want.numElements())
    return ::testing::AssertionFailure()
           << name << ": " << got.numElements() << " elements vs " << want.numElements();
  double scale = 0;
  for (int64_t k = 0; k < want.numElements(); ++k)
    if (std::isfinite(want.get(k)))
      scale = std::max(scale, std::fabs(want.get(k)));
  for (int64_t k = 0; k < want.numElements(); ++k) {
    double x = got.get(k), y = want.get(k);
    if ((std::isnan(x) && std::isnan(y)) || x == y)
      continue;
    if (!(std::fabs(x - y) <= rtol * std::fabs(y) + atol * scale + 1e-7))
      return ::testing::AssertionFailure() << name << " element " << k << ": " << x << " vs " << y
                                           << " (max |y| " << scale << ")";
  }
  return ::testing::AssertionSuccess();
}

// The RMS of a - b (of a if b is null): how far bf16 results lie from the bf16 reference against
// how far it lies from f32 (tests of mixed precision).
inline double rms(const runtime::HostTensor &a, const runtime::HostTensor *b = nullptr) {
  double sum = 0;
  for (int64_t e = 0; e < a.numElements(); ++e) {
    const double d = a.get(e) - (b ? b->get(e) : 0.0);
    sum += d * d;
  }
  return std::sqrt(sum / static_cast<double>(std::max<int64_t>(a.numElements(), 1)));
}

} // namespace kiln::test_util

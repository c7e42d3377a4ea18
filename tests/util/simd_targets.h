// Runs a test body once per SIMD target that the kernels were compiled for and this CPU runs,
// with Highway's dynamic dispatch forced to that target, so each kernel is checked against its
// scalar twin on every target (AVX3, AVX2, SSE4, ..., scalar), not only the best one.
#pragma once

#include <string>

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include "runtime/kernels/target.h"

namespace kiln::test_util {

template <class Fn> void forEachSimdTarget(Fn &&fn) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    ASSERT_EQ(kernels::activeTarget(), hwy::TargetName(target)) << "dispatch was not forced";
    fn();
  }
  hwy::SetSupportedTargetsForTest(0);
}

} // namespace kiln::test_util

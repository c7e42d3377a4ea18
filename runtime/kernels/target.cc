// activeTarget (see target.h): a dispatched function that names the target it was compiled for.
#include "runtime/kernels/target.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/kernels/target.cc"
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::HWY_NAMESPACE {
const char *targetName() {
  return hwy::TargetName(HWY_TARGET);
}
} // namespace kiln::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::kernels {
HWY_EXPORT(targetName);
std::string activeTarget() {
  return HWY_DYNAMIC_DISPATCH(targetName)();
}
} // namespace kiln::kernels
#endif

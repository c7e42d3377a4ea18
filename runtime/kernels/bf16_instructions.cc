// Which bf16 instructions the products may use (see bf16_instructions.h).
#include "runtime/kernels/bf16_instructions.h"

#include <atomic>
#include <cstdlib>
#include <string_view>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "runtime/cpu_features.h"

namespace kiln::kernels {

namespace {
std::atomic<bool> bf16Forbidden{false}, amxForbidden{false};
bool cpuHasBf16() {
  static const bool cpu = runtime::cpuHasFeature("avx512bf16");
  return cpu;
}
} // namespace

bool bf16Allowed() {
  return cpuHasBf16() && !bf16Forbidden.load(std::memory_order_relaxed);
}
// AMX: CPUID leaf 7 EDX bits 22 (AMX-BF16) and 24 (AMX-TILE), and Linux's leave to use the tile
// data (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, 18; Linux 5.16 on), asked once.
bool amxAllowed() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool permitted = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 22) & 1) || !((d >> 24) & 1))
      return false;
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  return permitted && bf16Allowed() && !amxForbidden.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

void forbidBf16Instructions(bool forbid) {
  bf16Forbidden = forbid;
}
void forbidAmx(bool forbid) {
  amxForbidden = forbid;
}
Status useBf16InstructionsVariable() {
  const char *text = std::getenv("KILN_BF16_INSTRUCTIONS");
  const std::string_view value = text ? text : "all";
  if (value != "all" && value != "no-amx" && value != "none")
    return makeError("KILN_BF16_INSTRUCTIONS={}: expected all, no-amx or none", value);
  forbidBf16Instructions(value == "none");
  forbidAmx(value != "all");
  return Status::success();
}
bool bf16InstructionsForbidden() {
  return cpuHasBf16() && bf16Forbidden.load(std::memory_order_relaxed);
}

} // namespace kiln::kernels

// The x86 instruction-set features that LLVM-generated code may use, by LLVM's names ("avx2",
// "avx512bf16", ...), and whether the CPU this process runs on has them -- asked of CPUID, and of
// XGETBV for the register state the OS saves (an AVX-512 CPU under an OS that does not save the
// zmm registers cannot run AVX-512 code). A standalone executable checks its generated code's
// features against these before it runs any of it: a missing one is a message naming it, never
// an illegal instruction.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::runtime {

// Every feature name the table knows, in its order.
std::vector<std::string_view> knownCpuFeatures();
// Whether this CPU and OS have `feature`; false for a name the table does not know.
bool cpuHasFeature(std::string_view feature);
// Those of `required` this machine lacks, in their order (a name the table does not know counts
// as lacking: code compiled for it cannot be vouched for).
std::vector<std::string> missingCpuFeatures(std::span<const std::string> required);

} // namespace kiln::runtime

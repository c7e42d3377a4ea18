// CPUID and XGETBV answers for the features of cpu_features.h. The bit positions are Intel's SDM
// vol. 2A "CPUID" (AMD's are the same for these): leaf 1 ECX/EDX, leaf 7 subleaf 0 EBX/ECX/EDX,
// leaf 7 subleaf 1 EAX, leaf 0x80000001 ECX.
#include "runtime/cpu_features.h"

#include <algorithm>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace kiln::runtime {

namespace {

enum Reg : uint8_t { Eax, Ebx, Ecx, Edx };
// Which register state the feature's instructions need the OS to save (XCR0).
enum class State : uint8_t { None, Avx, Avx512 };

struct Feature {
  std::string_view name;
  uint32_t leaf, subleaf;
  Reg reg;
  uint8_t bit;
  State state;
};

constexpr Feature kFeatures[] = {
    {"sse3", 1, 0, Ecx, 0, State::None},
    {"pclmul", 1, 0, Ecx, 1, State::None},
    {"ssse3", 1, 0, Ecx, 9, State::None},
    {"fma", 1, 0, Ecx, 12, State::Avx},
    {"cx16", 1, 0, Ecx, 13, State::None},
    {"sse4.1", 1, 0, Ecx, 19, State::None},
    {"sse4.2", 1, 0, Ecx, 20, State::None},
    {"movbe", 1, 0, Ecx, 22, State::None},
    {"popcnt", 1, 0, Ecx, 23, State::None},
    {"aes", 1, 0, Ecx, 25, State::None},
    {"xsave", 1, 0, Ecx, 26, State::None},
    {"avx", 1, 0, Ecx, 28, State::Avx},
    {"f16c", 1, 0, Ecx, 29, State::Avx},
    {"rdrnd", 1, 0, Ecx, 30, State::None},
    {"sse2", 1, 0, Edx, 26, State::None},
    {"bmi", 7, 0, Ebx, 3, State::None},
    {"avx2", 7, 0, Ebx, 5, State::Avx},
    {"bmi2", 7, 0, Ebx, 8, State::None},
    {"avx512f", 7, 0, Ebx, 16, State::Avx512},
    {"avx512dq", 7, 0, Ebx, 17, State::Avx512},
    {"rdseed", 7, 0, Ebx, 18, State::None},
    {"adx", 7, 0, Ebx, 19, State::None},
    {"avx512ifma", 7, 0, Ebx, 21, State::Avx512},
    {"clflushopt", 7, 0, Ebx, 23, State::None},
    {"clwb", 7, 0, Ebx, 24, State::None},
    {"avx512cd", 7, 0, Ebx, 28, State::Avx512},
    {"sha", 7, 0, Ebx, 29, State::None},
    {"avx512bw", 7, 0, Ebx, 30, State::Avx512},
    {"avx512vl", 7, 0, Ebx, 31, State::Avx512},
    {"avx512vbmi", 7, 0, Ecx, 1, State::Avx512},
    {"avx512vbmi2", 7, 0, Ecx, 6, State::Avx512},
    {"gfni", 7, 0, Ecx, 8, State::None},
    {"vaes", 7, 0, Ecx, 9, State::Avx},
    {"vpclmulqdq", 7, 0, Ecx, 10, State::Avx},
    {"avx512vnni", 7, 0, Ecx, 11, State::Avx512},
    {"avx512bitalg", 7, 0, Ecx, 12, State::Avx512},
    {"avx512vpopcntdq", 7, 0, Ecx, 14, State::Avx512},
    {"rdpid", 7, 0, Ecx, 22, State::None},
    {"movdiri", 7, 0, Ecx, 27, State::None},
    {"movdir64b", 7, 0, Ecx, 28, State::None},
    {"avx512vp2intersect", 7, 0, Edx, 8, State::Avx512},
    {"avx512fp16", 7, 0, Edx, 23, State::Avx512},
    {"avxvnni", 7, 1, Eax, 4, State::Avx},
    {"avx512bf16", 7, 1, Eax, 5, State::Avx512},
    {"lzcnt", 0x80000001, 0, Ecx, 5, State::None},
    {"sse4a", 0x80000001, 0, Ecx, 6, State::None},
    {"prfchw", 0x80000001, 0, Ecx, 8, State::None},
    {"xop", 0x80000001, 0, Ecx, 11, State::Avx},
    {"fma4", 0x80000001, 0, Ecx, 16, State::Avx},
    {"tbm", 0x80000001, 0, Ecx, 21, State::None},
};

#if defined(__x86_64__) || defined(__i386__)
bool has(const Feature &f) {
  unsigned r[4] = {};
  const unsigned maxLeaf = __get_cpuid_max(f.leaf & 0x80000000u, nullptr);
  if (maxLeaf < f.leaf || !__get_cpuid_count(f.leaf, f.subleaf, &r[0], &r[1], &r[2], &r[3]))
    return false;
  if (!((r[f.reg] >> f.bit) & 1))
    return false;
  if (f.state == State::None)
    return true;
  // The OS saves the state (leaf 1 ECX bit 27, OSXSAVE) and XCR0 holds it: bits 1-2 (SSE, AVX),
  // and for AVX-512 bits 5-7 (opmask, upper zmm0-15, zmm16-31).
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1))
    return false;
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  const uint32_t need = f.state == State::Avx512 ? 0xe6u : 0x6u;
  return (lo & need) == need;
}
#else
bool has(const Feature &) {
  return false;
}
#endif

const Feature *find(std::string_view name) {
  for (const Feature &f : kFeatures)
    if (f.name == name)
      return &f;
  return nullptr;
}

} // namespace

std::vector<std::string_view> knownCpuFeatures() {
  std::vector<std::string_view> names;
  for (const Feature &f : kFeatures)
    names.push_back(f.name);
  return names;
}

bool cpuHasFeature(std::string_view feature) {
  const Feature *f = find(feature);
  return f && has(*f);
}

std::vector<std::string> missingCpuFeatures(std::span<const std::string> required) {
  std::vector<std::string> missing;
  for (const std::string &name : required)
    if (!cpuHasFeature(name))
      missing.push_back(name);
  return missing;
}

} // namespace kiln::runtime

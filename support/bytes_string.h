// A byte count for messages, in binary units: "512 B", "1.5 GiB". In support/ so that the runtime
// (which must not see the IR) and the IR say sizes alike.
#pragma once

#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace kiln {

// (A double too: a size past int64, such as a rejected type's, says how far past it is.)
inline std::string bytesString(double bytes) {
  constexpr const char *kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  int u = 0;
  while (bytes >= 1024 && u < 8) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", bytes, kUnits[u]);
}
inline std::string bytesString(int64_t bytes) {
  return bytesString(static_cast<double>(bytes));
}

} // namespace kiln

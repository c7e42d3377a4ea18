// Small POSIX helpers shared by runtime/'s file readers and writers: a file descriptor closed on
// every path out of a scope, and errno as text.
#pragma once

#include <unistd.h>

#include <string>
#include <system_error>

namespace kiln::runtime {

inline std::string errnoText(int err) {
  return std::generic_category().message(err);
}

// Closes a file descriptor on every path out of a function.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd &) = delete;
  Fd &operator=(const Fd &) = delete;
  ~Fd() {
    if (fd >= 0)
      ::close(fd);
  }
};

} // namespace kiln::runtime

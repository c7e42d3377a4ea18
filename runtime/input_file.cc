// Reading user-named files whole (see input_file.h).
#include "runtime/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include "runtime/posix_file.h"
#include "support/bytes_string.h"

namespace kiln::runtime {
Expected<std::string> readInputText(const std::string &path, int64_t maxBytes) {
  const bool stdinput = path == "-";
  const std::string name = stdinput ? "standard input" : path;
  Fd owned(stdinput ? -1 : ::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  const int fd = stdinput ? 0 : owned.fd;
  if (fd < 0)
    return makeError("{}: cannot open: {}", name, errnoText(errno));
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode))
    return makeError("{}: is a directory, expected a file", name);
  std::string text;
  if (S_ISREG(st.st_mode) && st.st_size > maxBytes)
    return makeError("{}: {} is larger than {}, the most read as one input", name,
                     bytesString(st.st_size), bytesString(maxBytes));
  if (S_ISREG(st.st_mode))
    text.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return makeError("{}: cannot read: {}", name, errnoText(errno));
    if (n == 0)
      return text;
    if (static_cast<int64_t>(text.size()) + n > maxBytes)
      return makeError("{}: larger than {}, the most read as one input", name,
                       bytesString(maxBytes));
    text.append(buf, static_cast<size_t>(n));
  }
}

} // namespace kiln::runtime

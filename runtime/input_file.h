// Reading a file that the user named (a text corpus, an IR file, a tokenizer) whole, with the
// errors a user can act on: a directory is named as one (rather than read as an empty file or
// failing inside the C++ library), and the size is capped, so that /dev/zero or a mistaken disk
// image ends in an error rather than in the kernel's out-of-memory killer.
#pragma once

#include <cstdint>
#include <string>

#include "support/status.h"

namespace kiln::runtime {

// The most bytes readInputText reads (2 GiB): a text whose token ids (4 bytes each) still fit in
// this machine's memory beside it.
inline constexpr int64_t kMaxInputBytes = int64_t{1} << 31;

// The bytes of `path` (a regular file, a FIFO or a device read to its end; fd 0 for "-", named
// "standard input"). Errors name the path: cannot open, is a directory, cannot read, or larger
// than `maxBytes`.
Expected<std::string> readInputText(const std::string &path, int64_t maxBytes = kMaxInputBytes);

} // namespace kiln::runtime

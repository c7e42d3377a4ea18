// The DSL's diagnostics in tests: the message of the DslError a piece of model code throws.
#pragma once

#include <functional>
#include <string>

#include "frontend/builder.h"

namespace kiln::test_util {

// The message of the DslError `f` throws, or "<no error>".
inline std::string dslErrorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const frontend::DslError &e) {
    return e.what();
  }
  return "<no error>";
}

} // namespace kiln::test_util

// Tokenizers that a test writes as tokenizer.json.
#pragma once

#include <gtest/gtest.h>

#include <utility>

#include "runtime/json_text.h"
#include "runtime/tokenizer.h"

namespace kiln::test_util {

// The tokenizer `j` describes. A failure is reported, and the byte-level tokenizer stands in for
// it so that the test goes on to report what else differs.
inline runtime::Tokenizer parsedTokenizer(const runtime::Json &j) {
  Expected<runtime::Tokenizer> t = runtime::Tokenizer::parse(j.dump(), "tok.json");
  EXPECT_TRUE(t.ok()) << t.error().message;
  return t.ok() ? std::move(*t) : runtime::Tokenizer::bytes();
}

} // namespace kiln::test_util

// JSON from files kiln did not write (tokenizer.json, vocab.json, safetensors headers, the
// configs to come), read one way, so that no reader forgets a bound:
// - nesting is bounded at kMaxJsonDepth: nlohmann's parser, copies and destructor recurse, and a
//   400 KB file of 200k '[' overflowed the stack (issue 36);
// - objects are std::maps (nlohmann::json): an insert is log n, where ordered_json's is a scan of
//   the object, quadratic over a 100k-token vocabulary (11.9 s against 0.04 s for the same as
//   an array); the top level's keys are kept in file order beside it, for messages that name the
//   first problem in the file;
// - a key given twice in one object is an error (parsers otherwise keep one of them silently);
// - errors name the byte (as the file counts it: `base` is where the text starts in it).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/status.h"

namespace kiln::runtime {

using Json = nlohmann::json;

// serde_json (which the safetensors reference parses with) refuses deeper nesting too.
inline constexpr int kMaxJsonDepth = 128;

struct JsonText {
  Json value;
  std::vector<std::string> topKeys; // the top-level object's keys in file order (else empty)
};

struct JsonReadOptions {
  uint64_t base = 0;     // the text's first byte in its file, for byte offsets in errors
  std::string what = {}; // what the text is, in errors ("header"), or nothing
  // The error for `key` given twice in the object at `path` (the enclosing keys and, for arrays,
  // indices as text, outermost first; empty at the top level). Default: "WHAT: key "k" appears
  // twice in model.vocab".
  std::function<Error(const std::vector<std::string> &path, const std::string &key)> duplicate = {};
};

// Errors: "byte N: WHAT is not valid JSON: REASON" ("byte N: not valid JSON: REASON" without a
// name), "byte N: WHAT nests deeper than 128 levels", or the duplicate's.
Expected<JsonText> readJson(std::string_view text, const JsonReadOptions &options);

// `s` as JSON writes a string: quoted, escaped, printable even where it is not valid UTF-8 (an
// error's way to name a key).
std::string jsonQuote(std::string_view s);

// v[key] if v is an object that has it, else null (const json's operator[] asserts the key).
const nlohmann::json &memberOrNull(const nlohmann::json &v, std::string_view key);

// `v` as a token id: a JSON integer in [0, 2^31); nullopt if it is not one.
std::optional<int32_t> tokenIdIn(const nlohmann::json &v);

} // namespace kiln::runtime

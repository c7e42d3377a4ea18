// UTF-8 decoding and validation (RFC 3629: no overlong forms, no surrogates, nothing above
// U+10FFFF). Names travel from IR text into safetensors headers (which must be UTF-8) and C headers
// of compiled bundles, so every layer checks them with these functions (and the tokenizer splits
// text with the decoder).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace kiln {

// The code point that starts at s[i] and its length in bytes; for a byte that does not start a
// valid sequence (a stray continuation, a truncated or overlong form, a surrogate, past
// U+10FFFF), nullopt and length 1.
inline std::pair<std::optional<char32_t>, size_t> decodeUtf8At(std::string_view s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (len == 0 || i + len > s.size())
    return {std::nullopt, 1};
  char32_t cp = len == 1 ? c : len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
  for (size_t k = 1; k < len; ++k) {
    unsigned char cc = static_cast<unsigned char>(s[i + k]);
    if ((cc >> 6) != 0x2)
      return {std::nullopt, 1};
    cp = cp << 6 | (cc & 0x3f);
  }
  constexpr char32_t kMinOfLength[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinOfLength[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
    return {std::nullopt, 1};
  return {cp, len};
}

// The byte offset of the first byte that does not start a valid UTF-8 sequence, or nullopt if
// `s` is all valid UTF-8.
inline std::optional<size_t> firstInvalidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    auto [cp, len] = decodeUtf8At(s, i);
    if (!cp)
      return i;
    i += len;
  }
  return std::nullopt;
}

// Appends code point c (at most U+10FFFF) to `out` as UTF-8.
inline void appendUtf8(std::string &out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

inline bool isValidUtf8(std::string_view s) {
  return !firstInvalidUtf8(s).has_value();
}

} // namespace kiln

// The Unicode classes that byte-level BPE pre-split patterns use (\p{L}, \p{N}, \s, and GPT-4o's
// cases and marks), exactly as Hugging Face tokenizers' regex engine (Oniguruma) defines them, so
// that kiln splits text where it does. All but \s come from generated tables (unicode_classes.cc).
#pragma once

namespace kiln::runtime {

// \p{L}: a letter (general category Lu, Ll, Lt, Lm or Lo).
bool isUnicodeLetter(char32_t c);
// \p{N}: a number (Nd, Nl or No: "7", "²", "½", "Ⅻ").
bool isUnicodeNumber(char32_t c);
// The cases GPT-4o's pattern tells letters apart by: \p{Lu} or \p{Lt} (upper and title case:
// "A", "ǅ"), \p{Ll} (lower case: "a", "ß"); the other letters, \p{Lm} and \p{Lo} ("ʰ", "中"),
// are neither. And \p{M}: a mark (Mn, Mc or Me: a combining accent, a vowel sign), not a letter.
bool isUnicodeUpperOrTitle(char32_t c);
bool isUnicodeLowercase(char32_t c);
bool isUnicodeMark(char32_t c);
// \s: Unicode's White_Space (U+0009-000D, U+0020, U+0085, U+00A0, U+1680, U+2000-200A, U+2028,
// U+2029, U+202F, U+205F, U+3000), which is Oniguruma's \s and Rust regex's; not Python's
// str.isspace(), which adds U+001C-001F.
inline bool isUnicodeSpace(char32_t c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

} // namespace kiln::runtime

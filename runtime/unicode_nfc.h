// Unicode Normalization Form C (UAX #15), the normalizer {"type": "NFC"} of a tokenizer.json
// (Qwen2's): canonical decomposition, canonical ordering of combining marks, then canonical
// composition, over the Unicode Character Database's canonical data (generated, from Python's
// unicodedata, into unicode_nfc_tables.cc by tools/gen_unicode_nfc.py). Hangul syllables are
// decomposed and composed by the standard's arithmetic.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kiln::runtime {

// `text` in NFC. Bytes that are not valid UTF-8 stay as they are, each a boundary nothing composes
// across (Hugging Face's normalizers see only valid UTF-8).
std::string toNfc(std::string_view text);

namespace nfc_data {
struct ClassRange {
  char32_t first, last, cls; // code points first..last have canonical combining class cls
};
struct Decomposition {
  char32_t c, first, second; // c -> first second (second 0: the singleton c -> first)
  char32_t composes;         // 1: a primary composite, which NFC composes first + second into
};
std::span<const ClassRange> classRanges();       // sorted, disjoint; class 0 left out
std::span<const Decomposition> decompositions(); // sorted by c; Hangul syllables left out
} // namespace nfc_data

} // namespace kiln::runtime

// NFC (runtime/unicode_nfc.h) on the cases UAX #15 names: composition, canonical ordering,
// blocking, singletons and composition exclusions, Hangul by arithmetic; invalid UTF-8 kept as it
// is. (The generated tables were checked against Python's unicodedata.normalize on every code
// point and 200000 random sequences of marks, starters and jamo; tests/tokenizers/ compares whole
// texts with Hugging Face tokenizers' NFC through Qwen2.5's tokenizer.)
#include <gtest/gtest.h>

#include <string>

#include "runtime/unicode_nfc.h"

namespace kiln::runtime::unicode_nfc_test {
namespace {

TEST(UnicodeNfc, ComposesOrdersAndKeepsWhatItMust) {
  struct Case {
    std::string in, out, what;
  };
  const Case cases[] = {
      {"", "", "empty"},
      {"plain ASCII", "plain ASCII", "nothing to do"},
      {"e\u0301", "\u00E9", "a starter and its mark"},
      {"\u00E9", "\u00E9", "composed stays composed"},
      {"A\u030A\u0301", "\u01FA", "composed twice: A + ring, then + acute"},
      {"a\u0323\u0301", "\u1EA1\u0301", "dot below (220) first composes, acute after it too"},
      {"a\u0301\u0323", "\u1EA1\u0301", "marks reordered by class before composing"},
      {"\u1EA1\u0301", "\u1EA1\u0301", "no composite of the pair"},
      {"a\u0308\u0308", "\u00E4\u0308", "a second mark of the same class is blocked"},
      {"e-\u0301", "e-\u0301", "a starter between blocks"},
      {"\u0301e", "\u0301e", "a leading mark has no starter"},
      {"\u2126 \u212B", "\u03A9 \u00C5", "singletons (Ohm, Angstrom) replaced"},
      {"\u0958 \u0915\u093C", "\u0915\u093C \u0915\u093C", "an excluded composition stays apart"},
      {"\uFB01 \u00BD \u2460", "\uFB01 \u00BD \u2460", "compatibility forms are NFKC's, kept"},
      {"\u1112\u1161\u11AB", "\uD55C", "Hangul L V T composed"},
      {"\uD55C", "\uD55C", "a Hangul syllable stays"},
      {"\uAC00\u11A8", "\uAC01", "LV + T"},
      {"\u1100\u1161\u0301\u11A8", "\uAC00\u0301\u11A8", "a mark blocks T"},
      {"\u0B47\u0B3E \u0BC6\u0BD7", "\u0B4B \u0BCC", "two starters composing (Oriya, Tamil)"},
  };
  for (const Case &c : cases)
    EXPECT_EQ(toNfc(c.in), c.out) << c.what;
}

TEST(UnicodeNfc, InvalidUtf8StaysAndBlocks) {
  EXPECT_EQ(toNfc("e\xFF\u0301"), "e\xFF\u0301");
  EXPECT_EQ(toNfc("\xC3\u0301e\u0301\xE2\x82"), "\xC3\u0301\u00E9\xE2\x82");
}

} // namespace
} // namespace kiln::runtime::unicode_nfc_test

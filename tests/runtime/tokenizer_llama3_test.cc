// Llama 3's byte-level BPE (runtime/tokenizer_split.cc), and GPT-4o's pattern: its pre-split
// pattern on tricky strings against splits worked out by hand from the regex (and checked against
// Hugging Face tokenizers' own pre_tokenizer), ignore_merges, the exact Unicode classes, the
// pre_tokenizer read from a tiny handmade tokenizer.json (an unknown regex refused by name) and
// written back; and Qwen2's, Llama 3's pattern with one digit a word, after the normalizer NFC.
// tests/tokenizers/ compares the same code with Hugging Face tokenizers on Llama 3's and Qwen2.5's
// real files.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/json_text.h"
#include "runtime/tokenizer.h"
#include "runtime/unicode_classes.h"
#include "tests/util/tokenizer_json.h"

namespace kiln::tokenizer_llama3_test {
namespace {

using runtime::Json;
using runtime::Tokenizer;
using Ids = std::vector<int32_t>;
using Words = std::vector<std::string>;

// Spelled out here rather than taken from the code under test.
const std::string kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

Words split(std::string_view text, Tokenizer::PreSplit how) {
  Words out;
  for (std::string_view w : Tokenizer::words(text, how))
    out.emplace_back(w);
  return out;
}
Words llama3(std::string_view text) {
  return split(text, Tokenizer::PreSplit::Llama3);
}
Words gpt2(std::string_view text) {
  return split(text, Tokenizer::PreSplit::Gpt2);
}
Words qwen2(std::string_view text) {
  return split(text, Tokenizer::PreSplit::Qwen2);
}
Words o200k(std::string_view text) {
  return split(text, Tokenizer::PreSplit::O200k);
}

TEST(TokenizerLlama3, SplitsAsItsRegex) {
  // Contractions in any case, the long s folding to "s"; GPT-2's are lower case only.
  EXPECT_EQ(llama3("DON'T I'LL we'Ve"), (Words{"DON", "'T", " I", "'LL", " we", "'Ve"}));
  EXPECT_EQ(gpt2("DON'T I'LL"), (Words{"DON", "'", "T", " I", "'", "LL"}));
  EXPECT_EQ(llama3("'\u017F x'S"), (Words{"'\u017F", " x", "'S"}));
  // Digits three at a time, a space before them alone; \p{N} beyond ASCII ("²", "½", "Ⅻ").
  EXPECT_EQ(llama3(" 12345"), (Words{" ", "123", "45"}));
  EXPECT_EQ(gpt2(" 12345"), (Words{" 12345"}));
  EXPECT_EQ(qwen2(" 12345x\u00BD"), (Words{" ", "1", "2", "3", "4", "5", "x", "\u00BD"}));
  EXPECT_EQ(llama3("\u00B2\u00B34 \u00BD\u216B1"), (Words{"\u00B2\u00B34", " ", "\u00BD\u216B1"}));
  // Any one character but a newline, letter or digit leads letters: a tab, a no-break space, "-"
  // (after a space, " -" is " ?other" first).
  EXPECT_EQ(llama3("\tb x\u00A0y x-z -z"), (Words{"\tb", " x", "\u00A0y", " x", "-z", " -", "z"}));
  EXPECT_EQ(gpt2("\tb x-z"), (Words{"\t", "b", " x", "-", "z"}));
  // Punctuation takes the newlines after it; whitespace runs end at their last newline.
  EXPECT_EQ(llama3("a.\n\nb"), (Words{"a", ".\n\n", "b"}));
  EXPECT_EQ(llama3(",\n\r\nx !\n"), (Words{",\n\r\n", "x", " !\n"}));
  EXPECT_EQ(llama3("a  \n  b"), (Words{"a", "  \n", " ", " b"}));
  EXPECT_EQ(llama3("ab\n\n\ncd  \n\t x"), (Words{"ab", "\n\n\n", "cd", "  \n", "\t", " x"}));
  EXPECT_EQ(llama3("\t\nx"), (Words{"\t\n", "x"}));
  // A newline never leads letters (it is no [^\r\n...]).
  EXPECT_EQ(llama3("a\nb"), (Words{"a", "\n", "b"}));
  // Combining marks are not letters: a virama leads the letter after it, a last vowel sign is
  // "other" (the old approximation took both for letters).
  EXPECT_EQ(llama3("\u0928\u092E\u0938\u094D\u0924\u0947"),
            (Words{"\u0928\u092E\u0938", "\u094D\u0924", "\u0947"}));
  // GPT-2's pattern uses the same classes: the marks are words of their own.
  EXPECT_EQ(gpt2("\u0928\u092E\u0938\u094D\u0924\u0947"),
            (Words{"\u0928\u092E\u0938", "\u094D", "\u0924", "\u0947"}));
  EXPECT_EQ(gpt2("x\u00B2\u00B3 \u00BD"), (Words{"x", "\u00B2\u00B3", " \u00BD"}));
  // U+0085 is \s (two of them: the run less its last); U+001C is not (Python's isspace says so).
  EXPECT_EQ(llama3("a\u0085\u0085b"), (Words{"a", "\u0085", "\u0085b"}));
  EXPECT_EQ(llama3("x\x1C\x1Cy"), (Words{"x", "\x1C\x1C", "y"}));
  // Trailing whitespace is one word; invalid UTF-8 bytes are "other".
  EXPECT_EQ(llama3("end  "), (Words{"end", "  "}));
  EXPECT_EQ(llama3("ab\xF8\x80 cd"), (Words{"ab", "\xF8\x80", " cd"}));
  EXPECT_EQ(llama3(""), Words{});
}

// GPT-4o's pattern (o200k), worked out by hand from its regex and checked against Hugging Face
// tokenizers on @lenml's GPT-4o tokenizer.json (tests/tokenizers/run.sh).
TEST(TokenizerO200k, SplitsAsItsRegex) {
  // Capitals then lower case: U* takes "HTTPS", L+ "erver"; capitals alone are the second
  // alternative's.
  EXPECT_EQ(o200k("HTTPServer parseJSONValue ABC def"),
            (Words{"HTTPServer", " parse", "JSONValue", " ABC", " def"}));
  // Contractions end words, in any case (the long s folds to "s"); alone they are punctuation.
  EXPECT_EQ(o200k("DON'T don't I'M x'\u017F 's"),
            (Words{"DON'T", " don't", " I'M", " x'\u017F", " '", "s"}));
  // Marks are letters of both cases (but no \p{L}, so one may lead): after "E" a mark ends the
  // capital run's word, as L+ can start only there; ʰ (Lm) likewise before "A".
  EXPECT_EQ(o200k("e\u0301 E\u0301X \u0301abc \u02B0A"),
            (Words{"e\u0301", " E\u0301", "X", " \u0301abc", " \u02B0", "A"}));
  // Devanagari: the virama and vowel signs are marks, so the word is whole (Llama 3's cuts it).
  EXPECT_EQ(o200k("\u0928\u092E\u0938\u094D\u0924\u0947"),
            (Words{"\u0928\u092E\u0938\u094D\u0924\u0947"}));
  // Punctuation takes the newlines and slashes after it; digits three at a time.
  EXPECT_EQ(o200k("?/\n// x 12345"), (Words{"?/\n//", " x", " ", "123", "45"}));
  EXPECT_EQ(o200k("a  \n  b\t\n"), (Words{"a", "  \n", " ", " b", "\t\n"}));
  EXPECT_EQ(o200k(""), Words{});
}

TEST(TokenizerLlama3, UnicodeClassesAreExact) {
  for (char32_t c : {U'a', U'Z', U'\u00AA', U'\u00B5', U'\u017F', U'\u02C1', U'\u0928', U'\u4E00',
                     U'\U00020000', U'\U0001D518'})
    EXPECT_TRUE(runtime::isUnicodeLetter(c)) << static_cast<uint32_t>(c);
  for (char32_t c : {U'1', U'@', U'\u00D7', U'\u02C2', U'\u0301', U'\u094D', U'\u00B2', U'\uE000',
                     U'\U0001F600', U'\U0010FFFF'})
    EXPECT_FALSE(runtime::isUnicodeLetter(c)) << static_cast<uint32_t>(c);
  for (char32_t c : {U'0', U'9', U'\u00B2', U'\u00BD', U'\u0661', U'\u216B', U'\u2460', U'\u3007',
                     U'\U0001D7CE'})
    EXPECT_TRUE(runtime::isUnicodeNumber(c)) << static_cast<uint32_t>(c);
  for (char32_t c : {U'a', U'/', U':', U'\u00B1', U'\u4E00', U'\u4E03'})
    EXPECT_FALSE(runtime::isUnicodeNumber(c)) << static_cast<uint32_t>(c);
  // GPT-4o's cases: upper and title case, lower case; modifier and other letters are neither.
  for (char32_t c : {U'A', U'\u00C0', U'\u01C5', U'\u03A3', U'\U0001D400'})
    EXPECT_TRUE(runtime::isUnicodeUpperOrTitle(c) && !runtime::isUnicodeLowercase(c))
        << static_cast<uint32_t>(c);
  for (char32_t c : {U'a', U'\u00DF', U'\u017F', U'\u03C2', U'\U0001D41A'})
    EXPECT_TRUE(runtime::isUnicodeLowercase(c) && !runtime::isUnicodeUpperOrTitle(c))
        << static_cast<uint32_t>(c);
  for (char32_t c : {U'\u02B0', U'\u4E00', U'\u0928', U'1', U' '})
    EXPECT_FALSE(runtime::isUnicodeLowercase(c) || runtime::isUnicodeUpperOrTitle(c))
        << static_cast<uint32_t>(c);
  for (char32_t c : {U'\u0301', U'\u094D', U'\u0947', U'\u20DD', U'\U000E0100'})
    EXPECT_TRUE(runtime::isUnicodeMark(c)) << static_cast<uint32_t>(c);
  for (char32_t c : {U'a', U'\u02B0', U'\u00B4', U'\u02FF', U'\U000E01F0'})
    EXPECT_FALSE(runtime::isUnicodeMark(c)) << static_cast<uint32_t>(c);
  EXPECT_TRUE(runtime::isUnicodeSpace(U'\u0085'));
  EXPECT_TRUE(runtime::isUnicodeSpace(U'\u3000'));
  EXPECT_FALSE(runtime::isUnicodeSpace(U'\u001C'));
  EXPECT_FALSE(runtime::isUnicodeSpace(U'\u200B'));
}

// The 256 byte tokens (ids = byte values), then "bc" (256, merged from "b c") and "abc" (257, in
// the vocab but made by no merge), "<|begin_of_text|>" (258); Llama 3's pre_tokenizer and
// template.
Json tinyLlama3() {
  Json j = Json::parse(Tokenizer::bytes().toJson());
  j["model"]["vocab"]["bc"] = 256;
  j["model"]["vocab"]["abc"] = 257;
  j["model"]["merges"] = Json::array({"b c"});
  j["model"]["ignore_merges"] = true;
  j["added_tokens"] = Json::parse(R"([{"id": 258, "content": "<|begin_of_text|>",
      "single_word": false, "lstrip": false, "rstrip": false, "normalized": false,
      "special": true}])");
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern", {{"Regex", kLlama3Regex}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                          {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", false}}}}};
  j["post_processor"] = Json::parse(R"({"type": "Sequence", "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
      {"type": "TemplateProcessing",
       "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                  {"Sequence": {"id": "A", "type_id": 0}}],
       "pair": [], "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>",
           "ids": [258], "tokens": ["<|begin_of_text|>"]}}}]})");
  return j;
}

TEST(TokenizerLlama3, IgnoreMergesTakesAWordOfTheVocabWhole) {
  const Tokenizer t = test_util::parsedTokenizer(tinyLlama3());
  EXPECT_EQ(t.preSplit(), Tokenizer::PreSplit::Llama3);
  EXPECT_TRUE(t.ignoresMerges());
  // "abc" is a word and a token: that token. "xabc" is no token: merged ("bc"), as is "abcd".
  EXPECT_EQ(t.encode("abc"), (Ids{257}));
  EXPECT_EQ(t.encode("xabc"), (Ids{'x', 'a', 256}));
  EXPECT_EQ(t.encode("abc abc"), (Ids{257, ' ', 'a', 256}));
  // Without it, the merges alone: "abc" is a, bc.
  Json j = tinyLlama3();
  j["model"]["ignore_merges"] = false;
  const Tokenizer merged = test_util::parsedTokenizer(j);
  EXPECT_FALSE(merged.ignoresMerges());
  EXPECT_EQ(merged.encode("abc"), (Ids{'a', 256}));
  // The pre-split is Llama 3's: digits three at a time ("123" is no token: three bytes).
  EXPECT_EQ(t.encode("1234<|begin_of_text|>"), (Ids{'1', '2', '3', '4', 258}));
  EXPECT_EQ(t.bosId(), 258);
  EXPECT_EQ(*t.decode(t.encode("DON'T\n\n x 12345 abc")), "DON'T\n\n x 12345 abc");
}

TEST(TokenizerLlama3, WrittenBackIsTheSameTokenizer) {
  const Tokenizer t = test_util::parsedTokenizer(tinyLlama3());
  const std::string written = t.toJson();
  const Json j = Json::parse(written);
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"], kLlama3Regex);
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][1]["use_regex"], false);
  EXPECT_EQ(j["model"]["ignore_merges"], true);
  const Tokenizer back = test_util::parsedTokenizer(j);
  EXPECT_EQ(back.preSplit(), Tokenizer::PreSplit::Llama3);
  EXPECT_TRUE(back.ignoresMerges());
  EXPECT_EQ(back.bosId(), 258);
  EXPECT_EQ(back.toJson(), written);
  for (std::string text : {"abc", " 12345 DON'T", "x.\n\n y<|begin_of_text|>abc"})
    EXPECT_EQ(back.encode(text), t.encode(text)) << text;
  // A GPT-2 file keeps GPT-2's split and writes no ignore_merges.
  const Tokenizer g = Tokenizer::train("hello hello 12345 12345", 270).value();
  EXPECT_EQ(g.preSplit(), Tokenizer::PreSplit::Gpt2);
  EXPECT_FALSE(Json::parse(g.toJson())["model"].contains("ignore_merges"));
  EXPECT_EQ(Json::parse(g.toJson())["pre_tokenizer"]["type"], "ByteLevel");
}

TEST(TokenizerLlama3, GptTwosRegexInASplitIsGpt2) {
  Json j = tinyLlama3();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  const Tokenizer t = test_util::parsedTokenizer(j);
  EXPECT_EQ(t.preSplit(), Tokenizer::PreSplit::Gpt2);
  // GPT-2's "\t", "abc" (a token); Llama 3's would be "\tabc" (none: merged to \t a bc).
  EXPECT_EQ(t.encode("\tabc"), (Ids{'\t', 257}));
  EXPECT_EQ(test_util::parsedTokenizer(tinyLlama3()).encode("\tabc"), (Ids{'\t', 'a', 256}));
}

// Qwen2's file: its regex, and the normalizer NFC before it (a decomposed "é" is the composed
// one's tokens), written back as read; a normalizer of another kind, and an added token matched in
// normalized text, are refused by name.
TEST(TokenizerLlama3, QwenTwosRegexAndNfcNormalizer) {
  const std::string qwen2Regex =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  Json j = tinyLlama3();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = qwen2Regex;
  j["normalizer"] = {{"type", "NFC"}};
  const Tokenizer t = test_util::parsedTokenizer(j);
  EXPECT_EQ(t.preSplit(), Tokenizer::PreSplit::Qwen2);
  EXPECT_TRUE(t.normalizesNfc());
  EXPECT_EQ(t.encode(" 123"), (Ids{' ', '1', '2', '3'}));
  EXPECT_EQ(t.encode("e\u0301<|begin_of_text|>\u0301"), (Ids{0xC3, 0xA9, 258, 0xCC, 0x81}));
  const Json written = Json::parse(t.toJson());
  EXPECT_EQ(written["normalizer"], (Json{{"type", "NFC"}}));
  EXPECT_EQ(written["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"], qwen2Regex);
  EXPECT_EQ(test_util::parsedTokenizer(written).toJson(), t.toJson());
  EXPECT_FALSE(test_util::parsedTokenizer(tinyLlama3()).normalizesNfc());
  EXPECT_EQ(test_util::parsedTokenizer(tinyLlama3()).encode("e\u0301"), (Ids{'e', 0xCC, 0x81}));
  Json other = j;
  other["normalizer"] = {{"type", "NFKC"}};
  Expected<Tokenizer> refused = Tokenizer::parse(other.dump(), "tok.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message,
            "tok.json: normalizer: only NFC (Qwen2's) or none is supported with ByteLevel BPE");
  other = j;
  other["added_tokens"][0]["normalized"] = true;
  refused = Tokenizer::parse(other.dump(), "tok.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message,
            "tok.json: added_tokens[0]: \"normalized\": true is not supported with the normalizer");
}

TEST(TokenizerLlama3, OtherPreTokenizersAreRefusedByName) {
  auto error = [](const Json &j) {
    Expected<Tokenizer> t = Tokenizer::parse(j.dump(), "tok.json");
    return t.ok() ? std::string("loaded") : t.error().message;
  };
  Json j = tinyLlama3();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = R"(\w+|\s+)";
  EXPECT_EQ(
      error(j),
      R"(tok.json: pre_tokenizer.pretokenizers[0].pattern: the Split regex "\\w+|\\s+" is not supported (only GPT-2's, Llama 3's, Qwen2's and GPT-4o's))");
  // One character off Llama 3's ({1,4} for {1,3}) is another regex.
  std::string near = kLlama3Regex;
  near.replace(near.find("{1,3}"), 5, "{1,4}");
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = near;
  EXPECT_NE(error(j).find("tok.json: pre_tokenizer.pretokenizers[0].pattern: the Split regex"),
            std::string::npos);
  const std::string expected = "only ByteLevel without a prefix space, or Sequence[Split(Regex, "
                               "Isolated), ByteLevel(use_regex: false)] with GPT-2's, Llama 3's, "
                               "Qwen2's or GPT-4o's regex is supported";
  j = tinyLlama3();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", "x"}};
  EXPECT_EQ(error(j), "tok.json: pre_tokenizer.pretokenizers[0].pattern: " + expected);
  j = tinyLlama3();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  EXPECT_EQ(error(j), "tok.json: pre_tokenizer.pretokenizers[0]: " + expected);
  // Removed with invert keeps the matches alone: the same split, as the pattern matches every
  // character (tiktoken's converted files say it so).
  j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true;
  EXPECT_EQ(error(j), "loaded");
  j = tinyLlama3();
  j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true; // GPT-2's split after Llama 3's
  EXPECT_EQ(error(j), "tok.json: pre_tokenizer.pretokenizers[1]: " + expected);
  j = tinyLlama3();
  j["pre_tokenizer"] = j["pre_tokenizer"]["pretokenizers"][0]; // no ByteLevel
  EXPECT_EQ(error(j), "tok.json: pre_tokenizer: " + expected);
  j = tinyLlama3();
  j["model"]["ignore_merges"] = "yes";
  EXPECT_EQ(error(j), "tok.json: model.ignore_merges is not true or false");
}

} // namespace
} // namespace kiln::tokenizer_llama3_test

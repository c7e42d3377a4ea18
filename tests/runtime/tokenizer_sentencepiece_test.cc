// SentencePiece-style BPE (runtime/tokenizer_sentencepiece.cc) on a tiny handmade Llama-style
// tokenizer.json: merges by rank (not position; ties to the leftmost) as a naive
// one-merge-at-a-time loop would apply them, byte fallback and unk, decode of byte runs (valid and
// invalid UTF-8), the leading "▁" and its space, special tokens, Metaspace's forms, the template's
// BOS and EOS, files written back, and each malformed field named with the file. tests/tokenizers/
// compares the same code with Hugging Face tokenizers on real vocabularies.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/generation_parts.h"
#include "runtime/json_text.h"
#include "runtime/tokenizer.h"
#include "support/rng.h"
#include "tests/util/tokenizer_json.h"

namespace kiln::tokenizer_sentencepiece_test {
namespace {

using runtime::Json;
using runtime::Tokenizer;
using Ids = std::vector<int32_t>;

const std::string kSpace = "\xE2\x96\x81"; // "▁"
const std::string kBad = "\xEF\xBF\xBD";   // U+FFFD

using Merges = std::vector<std::pair<std::string, std::string>>;

// <unk> <s> </s> (0-2), the byte tokens <0x00>..<0xFF> (3-258), `chars`, then each merge's result,
// with Llama 2's normalizer, decoder and template; merges as "left right" strings.
Json llamaStyle(const std::vector<std::string> &chars, const Merges &merges) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b)
    tokens.push_back(fmt::format("<0x{:02X}>", b));
  tokens.insert(tokens.end(), chars.begin(), chars.end());
  Json vocab = Json::object(), list = Json::array();
  for (const auto &[l, r] : merges) {
    tokens.push_back(l + r);
    list.push_back(l + " " + r);
  }
  for (size_t id = 0; id < tokens.size(); ++id)
    vocab[tokens[id]] = id;
  Json added = Json::array();
  for (int id = 0; id < 3; ++id)
    added.push_back(
        {{"id", id}, {"content", tokens[id]}, {"normalized", false}, {"special", true}});
  Json j = Json::parse(R"({
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": null,
    "post_processor": {"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "fuse_unk": true,
              "byte_fallback": true}})");
  j["added_tokens"] = added;
  j["model"]["vocab"] = vocab;
  j["model"]["merges"] = list;
  return j;
}

// {"SpecialToken": {"id": NAME, "type_id": 0}}: a template's piece.
Json specialPiece(const std::string &name) {
  return Json::parse(fmt::format(R"({{"SpecialToken": {{"id": "{}", "type_id": 0}}}})", name));
}

// 259 "▁", 260 a, 261 b, 262 c, 263 h, 264 e, 265 l, 266 o, 267 "é", then the merges' results:
// 268 ll, 269 "▁h", 270 ell, 271 "▁hell", 272 "▁hello", 273 bc, 274 ab, 275 aa, 276 "c▁". "bc"
// ranks before "ab", so "abc" is a + bc although "ab" is further left.
Json tinySentencePiece() {
  return llamaStyle({kSpace, "a", "b", "c", "h", "e", "l", "o", "\xC3\xA9"},
                    {{"l", "l"},
                     {kSpace, "h"},
                     {"e", "ll"},
                     {kSpace + "h", "ell"},
                     {kSpace + "hell", "o"},
                     {"b", "c"},
                     {"a", "b"},
                     {"a", "a"},
                     {"c", kSpace}});
}
enum : int32_t { kUnk, kBos, kEos, kByte0, kSp = 259, kA, kB, kC, kH, kE, kL, kO, kEAcute };
enum : int32_t { kLl = 268, kSpH, kEll, kSpHell, kSpHello, kBc, kAb, kAa, kCSp };
int32_t byte(int b) {
  return kByte0 + b;
}

std::string decoded(const Tokenizer &t, const Ids &ids) {
  Expected<std::string> s = t.decode(ids);
  return s.ok() ? *s : "error: " + s.error().message;
}

TEST(TokenizerSentencePiece, ReadsTheFile) {
  const Tokenizer t = test_util::parsedTokenizer(tinySentencePiece());
  EXPECT_EQ(t.kind(), Tokenizer::Kind::SentencePiece);
  EXPECT_EQ(t.vocabSize(), 277);
  EXPECT_EQ(t.mergeCount(), 9);
  EXPECT_EQ(t.token(kSpHello), kSpace + "hello");
  EXPECT_EQ(t.specials(), (Ids{kUnk, kBos, kEos}));
}

TEST(TokenizerSentencePiece, MergesByRankThenLeftmost) {
  const Tokenizer t = test_util::parsedTokenizer(tinySentencePiece());
  EXPECT_EQ(t.encode("hello"), (Ids{kSpHello}));
  EXPECT_EQ(t.encode("abc"), (Ids{kSp, kA, kBc})); // "bc" (rank 5) before "ab" (rank 6)
  EXPECT_EQ(t.encode("aaa"), (Ids{kSp, kAa, kA})); // a tie: the leftmost pair first
  EXPECT_EQ(t.encode("aaaa"), (Ids{kSp, kAa, kAa}));
  EXPECT_EQ(t.encode("ab hello"), (Ids{kSp, kAb, kSpHello}));
  EXPECT_EQ(t.encode("c c"), (Ids{kSp, kCSp, kC})); // no pre-split: a merge may take a "▁"
}

TEST(TokenizerSentencePiece, ByteFallbackForCharactersOutsideTheVocab) {
  const Tokenizer t = test_util::parsedTokenizer(tinySentencePiece());
  // "x" and "€" (E2 82 AC) are no tokens: their bytes are; "é" (two bytes) is one token.
  EXPECT_EQ(t.encode("x\xE2\x82\xAC\xC3\xA9"),
            (Ids{kSp, byte('x'), byte(0xE2), byte(0x82), byte(0xAC), kEAcute}));
  // Invalid UTF-8 (which Hugging Face cannot take): each stray byte its own fallback.
  EXPECT_EQ(t.encode("a\xFF"), (Ids{kSp, kA, byte(0xFF)}));
  EXPECT_EQ(decoded(t, t.encode("a\xFF")), "a" + kBad);
}

TEST(TokenizerSentencePiece, DecodesRunsOfFallbackBytes) {
  const Tokenizer t = test_util::parsedTokenizer(tinySentencePiece());
  EXPECT_EQ(decoded(t, {byte(0xE2), byte(0x82), byte(0xAC)}), "\xE2\x82\xAC");
  EXPECT_EQ(decoded(t, {kA, byte(0xE2), byte(0x82), byte(0xAC), kB}), "a\xE2\x82\xAC"
                                                                      "b");
  // A run that is not valid UTF-8 as a whole: one U+FFFD for each of its bytes, the valid "€" in
  // it included (as the ByteFallback decoder does, not a lossy decode).
  EXPECT_EQ(decoded(t, {byte(0xE2), byte(0x82)}), kBad + kBad);
  EXPECT_EQ(decoded(t, {byte(0xE2), byte(0x82), byte(0xAC), byte(0xFF)}),
            kBad + kBad + kBad + kBad);
  EXPECT_EQ(decoded(t, {byte(0xFF), kA, byte('A')}), kBad + "aA");
  // A token between two runs ends the first.
  EXPECT_EQ(decoded(t, {byte(0xE2), kA, byte(0x82)}), kBad + "a" + kBad);
}

TEST(TokenizerSentencePiece, LeadingSpaceComesAndGoes) {
  const Tokenizer t = test_util::parsedTokenizer(tinySentencePiece());
  EXPECT_EQ(t.encode(""), Ids{});
  EXPECT_EQ(t.encode(" "), (Ids{kSp, kSp}));
  EXPECT_EQ(t.encode(" hello"), (Ids{kSp, kSpHello}));
  EXPECT_EQ(t.encode(kSpace), (Ids{kSp, kSp})); // "▁" in a text is a space to the model
  EXPECT_EQ(decoded(t, {kSpHello}), "hello");   // Strip: the prepended space goes
  EXPECT_EQ(decoded(t, {kSp, kSpHello}), " hello");
  EXPECT_EQ(decoded(t, {kSpHello, kSpHello}), "hello hello");
  EXPECT_EQ(decoded(t, {kA, kSpHello}), "a hello");
  for (std::string s : {"hello", " hello", "  a  b  ", "ab\xC3\xA9 x\n\tc", "", " "})
    EXPECT_EQ(decoded(t, t.encode(s)), s) << s;
}

TEST(TokenizerSentencePiece, SpecialTokensCutTheTextAndEachPieceGainsASpace) {
  const Tokenizer t = test_util::parsedTokenizer(tinySentencePiece());
  EXPECT_EQ(t.encode("a</s>b<s>"), (Ids{kSp, kA, kEos, kSp, kB, kBos}));
  EXPECT_EQ(decoded(t, t.encode("a</s>b<s>")), "a</s> b<s>"); // as Hugging Face's
  EXPECT_EQ(t.encode("<unk><s>"), (Ids{kUnk, kBos}));
  EXPECT_EQ(decoded(t, {kBos, kSpHello, kEos}), "<s> hello</s>");
  EXPECT_EQ(t.bosId(), kBos); // the template's "<s> $A"; encode never adds it
  EXPECT_EQ(t.eosId(), kEos); // "</s>", a special token
  Json j = tinySentencePiece();
  j["post_processor"]["single"].push_back(specialPiece("</s>"));
  j["post_processor"]["special_tokens"]["</s>"] = Json::parse(R"({"id": "</s>", "ids": [2]})");
  j["added_tokens"][2]["content"] = "<|end|>";
  j["model"]["vocab"].erase("</s>");
  j["model"]["vocab"]["<|end|>"] = 2;
  const Tokenizer withEos = test_util::parsedTokenizer(j);
  EXPECT_EQ(withEos.eosId(), kEos); // from the template, whatever its name
  EXPECT_EQ(withEos.bosId(), kBos);
  j.erase("post_processor");
  EXPECT_EQ(test_util::parsedTokenizer(j).bosId(), std::nullopt);
  EXPECT_EQ(test_util::parsedTokenizer(j).eosId(), std::nullopt);
  const Tokenizer gpt =
      Tokenizer::train("abab", 300, std::vector<std::string>{"<|endoftext|>"}).value();
  EXPECT_EQ(gpt.eosId(), gpt.specials().at(0)); // GPT-2's name
  EXPECT_EQ(gpt.bosId(), std::nullopt);
  // The model's BOS, put or not: the template's, else one named so, else (GPT-2) its EOS.
  EXPECT_EQ(t.beginId(), kBos);
  EXPECT_EQ(test_util::parsedTokenizer(j).beginId(), kBos); // "<s>", though nothing puts it
  EXPECT_EQ(gpt.beginId(), gpt.eosId());
  const Tokenizer llama3 =
      Tokenizer::train("abab", 300,
                       std::vector<std::string>{"<|begin_of_text|>", "<|end_of_text|>"})
          .value();
  EXPECT_EQ(llama3.bosId(), std::nullopt); // (Llama 3's first tokenizer.json puts none)
  EXPECT_EQ(llama3.beginId(), llama3.specials().at(0));
  EXPECT_EQ(llama3.eosId(), llama3.specials().at(1));
}

TEST(TokenizerSentencePiece, UnknownCharactersWithoutByteFallback) {
  Json j = tinySentencePiece();
  j["model"]["byte_fallback"] = false;
  EXPECT_EQ(test_util::parsedTokenizer(j).encode("xy a\xE2\x82\xAC"),
            (Ids{kSp, kUnk, kSp, kA, kUnk}));
  j["model"]["fuse_unk"] = false;
  EXPECT_EQ(test_util::parsedTokenizer(j).encode("xy a\xE2\x82\xAC"),
            (Ids{kSp, kUnk, kUnk, kSp, kA, kUnk}));
}

TEST(TokenizerSentencePiece, MetaspacePreTokenizer) {
  auto metaspace = [](const char *scheme, bool split) {
    Json j = tinySentencePiece();
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "Metaspace"},
                          {"replacement", kSpace},
                          {"prepend_scheme", scheme},
                          {"split", split}};
    return test_util::parsedTokenizer(j);
  };
  const Tokenizer first = metaspace("first", false), always = metaspace("always", false),
                  never = metaspace("never", false), split = metaspace("always", true);
  EXPECT_EQ(first.encode("hello"), (Ids{kSpHello}));
  EXPECT_EQ(first.encode(" hello"), (Ids{kSpHello})); // no second "▁" where there is one
  EXPECT_EQ(first.encode("<s>hello"), (Ids{kBos, kH, kEll, kO})); // not at the text's start
  EXPECT_EQ(always.encode("<s>hello"), (Ids{kBos, kSpHello}));
  EXPECT_EQ(never.encode("hello"), (Ids{kH, kEll, kO}));
  EXPECT_EQ(always.encode("c c"), (Ids{kSp, kCSp, kC}));
  EXPECT_EQ(split.encode("c c"), (Ids{kSp, kC, kSp, kC})); // each "▁" starts a word
  EXPECT_EQ(decoded(first, first.encode(" hello")), "hello");
  // The older form: add_prefix_space, split by default.
  Json j = tinySentencePiece();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kSpace}, {"add_prefix_space", true}};
  EXPECT_EQ(test_util::parsedTokenizer(j).encode("c c"), (Ids{kSp, kC, kSp, kC}));
  j["pre_tokenizer"]["add_prefix_space"] = false;
  EXPECT_EQ(test_util::parsedTokenizer(j).encode("hello"), (Ids{kH, kEll, kO}));
}

TEST(TokenizerSentencePiece, WrittenFilesReadBackToTheSameTokenizer) {
  std::vector<Json> files = {tinySentencePiece()};
  for (const char *scheme : {"first", "always", "never"}) {
    files.push_back(tinySentencePiece());
    files.back()["normalizer"] = nullptr;
    files.back()["pre_tokenizer"] = {{"type", "Metaspace"},
                                     {"replacement", kSpace},
                                     {"prepend_scheme", scheme},
                                     {"split", scheme[0] == 'a'}};
  }
  files.push_back(tinySentencePiece());
  files.back()["model"]["byte_fallback"] = false;
  files.back()["decoder"]["decoders"].erase(3); // no Strip
  const std::vector<std::string> texts = {"hello", " a</s>b<s> c c", "x\xE2\x82\xAC aaa", "", "  "};
  for (const Json &j : files) {
    const Tokenizer t = test_util::parsedTokenizer(j);
    const std::string written = t.toJson();
    const Tokenizer back = test_util::parsedTokenizer(Json::parse(written));
    EXPECT_EQ(back.toJson(), written);
    EXPECT_EQ(back.bosId(), t.bosId());
    for (const std::string &s : texts) {
      EXPECT_EQ(back.encode(s), t.encode(s)) << s;
      EXPECT_EQ(decoded(back, t.encode(s)), decoded(t, t.encode(s))) << s;
    }
  }
  // Llama 2's own form.
  const Json written = Json::parse(test_util::parsedTokenizer(tinySentencePiece()).toJson());
  EXPECT_EQ(written["normalizer"]["normalizers"][0]["type"], "Prepend");
  EXPECT_EQ(written["decoder"]["decoders"][3]["start"], 1);
  EXPECT_EQ(written["post_processor"]["single"][0]["SpecialToken"]["id"], "<s>");
  EXPECT_EQ(written["model"]["merges"][3], kSpace + "h ell");
}

// The merges as a naive loop applies them: the lowest-ranked adjacent pair, the leftmost of its
// occurrences, one merge at a time. Random merge tables over a small alphabet make many
// overlapping candidates; the encoder's heap must give the same tokens.
TEST(TokenizerSentencePiece, MergesAsANaiveLoopWould) {
  for (uint64_t seed = 0; seed < 8; ++seed) {
    SCOPED_TRACE(seed);
    std::vector<std::string> tokens = {kSpace, "a", "b", "c"};
    Merges merges;
    std::map<std::string, int32_t> known;
    for (uint64_t k = 0; merges.size() < 40 && k < 10000; ++k) {
      const std::string &l = tokens[rng::bits(seed, 2 * k) % tokens.size()],
                        &r = tokens[rng::bits(seed, 2 * k + 1) % tokens.size()];
      if (l.size() + r.size() <= 6 && !known.count(l + r) &&
          std::find(tokens.begin(), tokens.end(), l + r) == tokens.end()) {
        merges.push_back({l, r});
        known[l + r] = 1;
        tokens.push_back(l + r);
      }
    }
    const Tokenizer t = test_util::parsedTokenizer(llamaStyle({kSpace, "a", "b", "c"}, merges));
    auto id = [&](const std::string &s) {
      for (int32_t i = 0; i < t.vocabSize(); ++i)
        if (t.token(i) == s)
          return i;
      return -1;
    };
    for (uint64_t k = 0; k < 100; ++k) {
      std::string text;
      std::vector<std::string> pieces = {kSpace};
      for (uint64_t i = 0, n = rng::bits(seed + 100, k) % 80; i < n; ++i) {
        const char c = "abc "[rng::bits(seed + 200 + k, i) % 4];
        text += c;
        pieces.push_back(c == ' ' ? kSpace : std::string(1, c));
      }
      if (text.empty())
        continue;
      for (;;) {
        size_t best = pieces.size(), bestRank = merges.size();
        for (size_t i = 0; i + 1 < pieces.size(); ++i)
          for (size_t m = 0; m < bestRank; ++m)
            if (merges[m].first == pieces[i] && merges[m].second == pieces[i + 1])
              best = i, bestRank = m;
        if (best == pieces.size())
          break;
        pieces[best] += pieces[best + 1];
        pieces.erase(pieces.begin() + static_cast<std::ptrdiff_t>(best) + 1);
      }
      Ids want;
      for (const std::string &p : pieces)
        want.push_back(id(p));
      EXPECT_EQ(t.encode(text), want) << text;
    }
  }
}

// The whole text between special tokens is one piece: 600 KB of it encodes in O(n log n) (a
// quadratic merge loop would take minutes here) to what its words give.
// generate's --stop looks at the continuation's end alone (gen::holdsStop): at every token of
// random continuations it finds what the whole text finds, for both kinds of tokenizer (runs of
// fallback bytes cut by the end's start, a leading space, special tokens) and stops of every
// length, taken from the text so that they occur.
TEST(TokenizerSentencePiece, StopTextIsFoundFromTheContinuationsEnd) {
  const Tokenizer sentencePiece = test_util::parsedTokenizer(tinySentencePiece());
  const Tokenizer byteLevel = Tokenizer::train("hello hello abc abc caf\xC3\xA9 caf\xC3\xA9", 270,
                                               std::vector<std::string>{"</s>"})
                                  .value();
  for (const Tokenizer *t : {&sentencePiece, &byteLevel})
    for (uint64_t seed = 1; seed <= 40; ++seed) {
      const auto vocab = static_cast<uint64_t>(t->vocabSize());
      Ids prompt = {static_cast<int32_t>(rng::bits(seed, 1000) % vocab)}, ids;
      for (uint64_t k = 0; k < 60; ++k)
        ids.push_back(static_cast<int32_t>(rng::bits(seed, k) % vocab));
      const std::string whole = runtime::gen::generatedText(*t, prompt, ids).value();
      const size_t at = rng::bits(seed, 2000) % whole.size(),
                   length = 1 + rng::bits(seed, 3000) % std::min<size_t>(12, whole.size() - at);
      const std::string stop = whole.substr(at, length);
      for (size_t n = 1; n <= ids.size(); ++n) {
        const std::span<const int32_t> some(ids.data(), n);
        const bool want =
            runtime::gen::generatedText(*t, prompt, some)->find(stop) != std::string::npos;
        ASSERT_EQ(runtime::gen::holdsStop(*t, prompt, some, stop), want)
            << "seed " << seed << ", " << n << " ids, stop " << Json(stop).dump();
        if (want)
          break; // (generation ends at the first)
      }
    }
}

TEST(TokenizerSentencePiece, LongPiece) {
  const Tokenizer t = test_util::parsedTokenizer(tinySentencePiece());
  std::string text;
  for (int k = 0; k < 100000; ++k)
    text += k % 1000 == 999 ? "abc " : "hello ";
  const Ids ids = t.encode(text);
  ASSERT_EQ(ids.size(), 100000u + 2 * 100 + 1); // "▁hello" each, "▁" a bc each, the last "▁"
  EXPECT_EQ(ids[0], kSpHello);
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + 999, ids.begin() + 1003),
            (Ids{kSp, kA, kBc, kSpHello}));
  EXPECT_EQ(decoded(t, ids), text);
}

TEST(TokenizerSentencePiece, MalformedFilesNameTheFileAndTheField) {
  auto error = [](Json j) {
    Expected<Tokenizer> t = Tokenizer::parse(j.dump(), "tok.json");
    return t.ok() ? std::string("loaded") : t.error().message;
  };
  const std::string expectedNormalizer = "(SentencePiece BPE: Sequence[Prepend(\"▁\"), "
                                         "Replace(\" \", \"▁\")], or the Replace alone)";
  Json j = tinySentencePiece();
  j["normalizer"]["normalizers"].push_back(Json::parse(R"({"type": "Lowercase"})"));
  EXPECT_EQ(error(j), "tok.json: normalizer.normalizers[2]: Lowercase is not supported " +
                          expectedNormalizer);
  j["normalizer"]["normalizers"] = Json::parse(R"([{"type": "Lowercase"}])");
  EXPECT_EQ(error(j), "tok.json: normalizer.normalizers[0]: Lowercase is not supported " +
                          expectedNormalizer);
  j["normalizer"]["normalizers"] = Json::parse(R"([{"type": "Prepend", "prepend": "_"}])");
  EXPECT_EQ(error(j), "tok.json: normalizer.normalizers[0].prepend: only \"▁\" is supported");
  j["normalizer"]["normalizers"][0]["prepend"] = kSpace;
  EXPECT_EQ(error(j),
            "tok.json: normalizer: Replace(\" \", \"▁\") is missing " + expectedNormalizer);
  j = tinySentencePiece();
  j["pre_tokenizer"] = Json::parse(R"({"type": "Whitespace"})");
  EXPECT_EQ(error(j), "tok.json: pre_tokenizer: Whitespace is not supported (SentencePiece BPE: "
                      "none, or Metaspace)");
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kSpace}};
  EXPECT_EQ(error(j), "tok.json: normalizer: Sequence beside the pre_tokenizer Metaspace is not "
                      "supported");
  j["normalizer"] = nullptr;
  j["pre_tokenizer"]["prepend_scheme"] = "sometimes";
  EXPECT_EQ(error(j), "tok.json: pre_tokenizer.prepend_scheme: expected \"first\", \"always\" or "
                      "\"never\"");
  j["pre_tokenizer"]["prepend_scheme"] = "first";
  j["pre_tokenizer"]["replacement"] = "_";
  EXPECT_EQ(error(j), "tok.json: pre_tokenizer.replacement: only \"▁\" is supported");
  // What Hugging Face does to the ids after the model, as for byte-level files (these read as
  // if absent: other ids).
  j = tinySentencePiece();
  j["truncation"] = Json::parse(R"({"max_length": 4})");
  EXPECT_EQ(error(j), "tok.json: truncation is not supported (kiln encodes a whole text as it is)");
  j = tinySentencePiece();
  j["padding"] = Json::parse(R"({"strategy": {"Fixed": 8}})");
  EXPECT_EQ(error(j), "tok.json: padding is not supported (kiln encodes a whole text as it is)");
  j = tinySentencePiece();
  j["post_processor"] = Json::parse(R"({"type": "BertProcessing"})");
  EXPECT_EQ(error(j), "tok.json: post_processor: only ByteLevel and TemplateProcessing (a BOS or "
                      "EOS around the text) are supported");
  j = tinySentencePiece();
  j["decoder"]["decoders"].erase(1);
  EXPECT_EQ(error(j), "tok.json: decoder.decoders[1]: Fuse is not supported (SentencePiece BPE: "
                      "Sequence[Replace(\"▁\", \" \"), ByteFallback, Fuse, Strip(\" \", N, M)], "
                      "the Strip optional)");
  j["decoder"] = nullptr;
  EXPECT_EQ(error(j), "tok.json: decoder: null is not supported (SentencePiece BPE: "
                      "Sequence[Replace(\"▁\", \" \"), ByteFallback, Fuse, Strip(\" \", N, M)], "
                      "the Strip optional)");
  j = tinySentencePiece();
  j["decoder"]["decoders"][3]["start"] = -1;
  EXPECT_EQ(error(j), "tok.json: decoder.decoders[3]: expected Strip(\" \", start, stop) with "
                      "counts >= 0");
  // A byte token may be missing only where its ASCII character is a token (Gemma's "\t" and no
  // "<0x09>"): only a character without a token falls back to its bytes.
  j = tinySentencePiece();
  j["model"]["vocab"].erase("<0x41>");
  j["model"]["vocab"]["<41>"] = byte(0x41); // (the ids stay 0..N-1)
  EXPECT_EQ(error(j), "tok.json: model.byte_fallback: the vocab has no token \"<0x41>\" (byte "
                      "fallback needs <0x00> to <0xFF>, but for an ASCII character that is a "
                      "token)");
  j["model"]["vocab"].erase("<41>");
  j["model"]["vocab"]["A"] = byte(0x41);
  EXPECT_EQ(error(j), "loaded");
  j = tinySentencePiece();
  j["model"]["vocab"].erase("<0xC3>"); // (the first byte of characters without a token)
  j["model"]["vocab"]["<C3>"] = byte(0xC3);
  EXPECT_EQ(error(j), "tok.json: model.byte_fallback: the vocab has no token \"<0xC3>\" (byte "
                      "fallback needs <0x00> to <0xFF>, but for an ASCII character that is a "
                      "token)");
  j = tinySentencePiece();
  j["model"]["unk_token"] = "<nope>";
  EXPECT_EQ(error(j), "tok.json: model.unk_token: \"<nope>\" is not a token of the vocab");
  j["model"]["unk_token"] = nullptr;
  j["model"]["byte_fallback"] = false;
  EXPECT_EQ(error(j), "tok.json: model.unk_token: a SentencePiece BPE without byte_fallback needs "
                      "one (else an unknown character would vanish)");
  for (const char *key : {"ignore_merges", "continuing_subword_prefix"}) {
    j = tinySentencePiece();
    j["model"][key] = key[0] == 'i' ? Json(true) : Json("##");
    EXPECT_EQ(error(j), fmt::format("tok.json: model.{} is not supported", key));
  }
  j = tinySentencePiece();
  j["model"]["merges"].push_back("a q");
  EXPECT_EQ(error(j), "tok.json: merge 10 (\"a q\"): token \"q\" is not in the vocab");
  j["model"]["merges"].back() = "a c";
  EXPECT_EQ(error(j), "tok.json: merge 10 (\"a c\"): the merged token \"ac\" is not in the vocab");
  j["model"]["merges"].back() = "abc";
  EXPECT_EQ(error(j), "tok.json: merge 10: expected \"left right\" or [\"left\", \"right\"]");
  j = tinySentencePiece();
  j["added_tokens"][1]["normalized"] = true;
  EXPECT_EQ(error(j),
            "tok.json: added_tokens[1]: \"normalized\": true is not supported with the normalizer");
  j = tinySentencePiece();
  j["post_processor"]["single"].insert(j["post_processor"]["single"].begin(), specialPiece("<s>"));
  EXPECT_EQ(error(j), "tok.json: post_processor.single[1]: expected [SpecialToken]? Sequence A "
                      "[SpecialToken]? (one token at most on each side of $A)");
  j = tinySentencePiece();
  j["post_processor"]["special_tokens"]["<s>"]["ids"] = Json::array({99999});
  EXPECT_EQ(error(j), "tok.json: post_processor.special_tokens: \"<s>\" is not {\"ids\": [ID]} "
                      "with an id of the vocab");
  j = tinySentencePiece();
  j["post_processor"]["single"].erase(1);
  EXPECT_EQ(error(j), "tok.json: post_processor.single has no Sequence A (the text)");
}

} // namespace
} // namespace kiln::tokenizer_sentencepiece_test

// Tokenizers (runtime/tokenizer.h): every byte string survives encode and decode (bytes and a
// trained BPE, invalid UTF-8 included); GPT-2's pre-split; training is deterministic and merges
// the most frequent pair; files in GPT-2's and Hugging Face's formats written here give the ids
// GPT-2's vocabulary has (its byte order: "Ġ" is 220, "Ċ" 198); kiln's own file reads back; a
// malformed file is an error naming the file and the entry.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include <string>
#include <vector>

#include "runtime/tokenizer.h"
#include "support/rng.h"
#include "tests/util/temp_dir.h"

namespace kiln::tokenizer_test {
namespace {

using runtime::Tokenizer;

// Byte strings of every kind: random bytes, mostly-ASCII text with runs of spaces and newlines,
// and UTF-8 (valid and cut short).
std::vector<std::string> byteStrings() {
  std::vector<std::string> out = {"",
                                  " ",
                                  "  ",
                                  "\n\n",
                                  "a",
                                  "don't",
                                  "x  y",
                                  "\xC3",
                                  "caf\xC3\xA9 \xE2\x80\x94 na\xC3\xAFve",
                                  std::string(3, '\0')};
  const std::string alphabet = "ab c'.\n\t0\xC3\xA9\xE2\x80\x94\xFF";
  for (uint64_t k = 0; k < 200; ++k) {
    std::string s;
    const uint64_t len = rng::bits(k, 0) % 40;
    for (uint64_t i = 0; i < len; ++i) {
      const uint64_t r = rng::bits(k, i + 1);
      s += k % 2 ? static_cast<char>(r % 256) : alphabet[r % alphabet.size()];
    }
    out.push_back(s);
  }
  return out;
}

const char *kText = "the cat sat on the mat. the cat's hat is the best hat; that is that.\n"
                    "the rat ate the oats and the cat ate the rat.\n";

TEST(Tokenizer, EveryByteStringRoundTrips) {
  const Tokenizer bpe = Tokenizer::train(kText, 300).value();
  ASSERT_GT(bpe.vocabSize(), 256);
  for (const Tokenizer *t : {&bpe}) {
    for (const std::string &s : byteStrings()) {
      const std::vector<int32_t> ids = t->encode(s);
      Expected<std::string> back = t->decode(ids);
      ASSERT_TRUE(back.ok());
      EXPECT_EQ(*back, s);
    }
  }
  const Tokenizer bytes = Tokenizer::bytes();
  for (const std::string &s : byteStrings()) {
    EXPECT_EQ(bytes.encode(s).size(), s.size());
    EXPECT_EQ(*bytes.decode(bytes.encode(s)), s);
  }
}

TEST(Tokenizer, SplitsWordsAsGpt2) {
  std::vector<std::string> got;
  for (std::string_view w : Tokenizer::words("Hello world's  end!?\n\n x 42a"))
    got.emplace_back(w);
  const std::vector<std::string> want = {"Hello", " world", "'s", " ",   " end",
                                         "!?",    "\n\n",   " x", " 42", "a"};
  EXPECT_EQ(got, want);
  // Bytes of invalid UTF-8 (here a lead byte past F4 and its continuations) are "other", never a
  // letter they might decode to.
  got.clear();
  for (std::string_view w : Tokenizer::words("ab\xF8\x80\x80 cd\xC0\xAF"))
    got.emplace_back(w);
  EXPECT_EQ(got, (std::vector<std::string>{"ab", "\xF8\x80\x80", " cd", "\xC0\xAF"}));
}

TEST(Tokenizer, TrainingMergesTheMostFrequentPairDeterministically) {
  const Tokenizer a = Tokenizer::train(kText, 300).value(),
                  b = Tokenizer::train(kText, 300).value();
  EXPECT_EQ(a.toJson(), b.toJson());
  // "at" is the most frequent pair of the text (14 times: cat sat mat hat that rat ate oats):
  // the first merge, id 256.
  EXPECT_EQ(a.token(256), "at");
  // Common words become single tokens.
  EXPECT_EQ(a.encode(" the").size(), 1u);
  EXPECT_LT(a.encode(kText).size(), std::string_view(kText).size() / 2);
  // Training stops where no pair occurs twice.
  EXPECT_EQ(Tokenizer::train("abcd", 1000).value().vocabSize(), 256);
}

// Training keeps its pair counts up to date merge by merge; this recounts every pair of every
// word at every merge, as training did before (quadratic: 1 MB took a minute), and the merges must
// be the same, rank for rank. The text has repeats that overlap ("aaaa"), tokens made twice by
// different merges ("abc" as ab+c and a+bc) and ties.
std::vector<std::pair<int32_t, int32_t>> recountedMerges(std::string_view text, int64_t vocab) {
  std::map<std::string_view, int64_t> counts;
  for (std::string_view w : Tokenizer::words(text))
    ++counts[w];
  std::vector<std::vector<int32_t>> pieces;
  std::vector<int64_t> freq;
  for (const auto &[w, c] : counts) {
    pieces.emplace_back(w.begin(), w.end());
    for (int32_t &b : pieces.back())
      b = static_cast<unsigned char>(b);
    freq.push_back(c);
  }
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b)
    tokens.emplace_back(1, static_cast<char>(b));
  std::vector<std::pair<int32_t, int32_t>> merges;
  while (static_cast<int64_t>(tokens.size()) < vocab) {
    std::map<std::pair<int32_t, int32_t>, int64_t> pairs;
    for (size_t w = 0; w < pieces.size(); ++w)
      for (size_t k = 0; k + 1 < pieces[w].size(); ++k)
        pairs[{pieces[w][k], pieces[w][k + 1]}] += freq[w];
    auto best = pairs.end();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (best == pairs.end() || it->second > best->second)
        best = it;
    if (best == pairs.end() || best->second < 2)
      break;
    const auto [l, r] = best->first;
    const std::string joined = tokens[l] + tokens[r];
    auto known = std::find(tokens.begin(), tokens.end(), joined);
    const auto result = static_cast<int32_t>(known - tokens.begin());
    if (known == tokens.end())
      tokens.push_back(joined);
    merges.push_back({l, r});
    for (std::vector<int32_t> &p : pieces) {
      size_t out = 0;
      for (size_t k = 0; k < p.size(); ++k)
        p[out++] = k + 1 < p.size() && p[k] == l && p[k + 1] == r ? (++k, result) : p[k];
      p.resize(out);
    }
  }
  return merges;
}

TEST(Tokenizer, TrainingMergesAsAFullRecountWould) {
  std::string text = kText;
  for (uint64_t k = 0; k < 400; ++k) {
    const uint64_t r = rng::bits(k, 7);
    text += std::string(1 + r % 6, 'a') + (r % 3 ? "bc " : "ab c ") + "abc" +
            std::string(1, static_cast<char>('a' + r % 5)) + (r % 7 ? " " : "\n");
  }
  for (int64_t vocab : {257, 300, 400, 2000}) {
    SCOPED_TRACE(vocab);
    const Tokenizer t = Tokenizer::train(text, vocab).value();
    EXPECT_EQ(t.merges(), recountedMerges(text, vocab));
    EXPECT_GT(t.mergeCount(), 0);
  }
  // One long word (a text without spaces), where a merge changes many pairs of one word.
  std::string word;
  for (uint64_t k = 0; k < 3000; ++k)
    word += static_cast<char>('a' + rng::bits(99, k) % 4);
  EXPECT_EQ(Tokenizer::train(word, 500).value().merges(), recountedMerges(word, 500));
}

// Special tokens cut the text before the pre-split: each is one id wherever it occurs (the
// longest at a place), training never merges across or into one, and every byte string with
// special tokens in it still round-trips.
TEST(Tokenizer, SpecialTokensAreOneIdAndNeverMerged) {
  const std::string eot = "<|endoftext|>";
  const std::string text = std::string(kText) + eot + kText + eot + "<|end";
  const Tokenizer t = Tokenizer::train(text, 300, std::vector<std::string>{eot, "<|end"}).value();
  // The specials take the last ids, after the merges (which stop where no pair occurs twice).
  const auto n = static_cast<int32_t>(t.vocabSize());
  ASSERT_GT(n, 280);
  ASSERT_EQ(t.specials(), (std::vector<int32_t>{n - 2, n - 1}));
  EXPECT_EQ(t.mergeCount(), n - 258);
  EXPECT_EQ(t.token(n - 2), eot);
  for (int32_t id = 256; id < n - 2; ++id) // no learned token holds a part of a special one
    EXPECT_EQ(t.token(id).find('|'), std::string::npos) << t.token(id);
  const std::vector<int32_t> ids = t.encode("cat" + eot + eot + "<|end|>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), n - 2), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), n - 1), 1); // "<|end" of "<|end|>"
  EXPECT_EQ(ids[ids.size() - 3], n - 1);
  for (const std::string &s : byteStrings()) {
    const std::string with = eot + s + "<|end" + s + eot;
    EXPECT_EQ(*t.decode(t.encode(with)), with);
  }
  // Empty texts and repeats are left out, a byte's special token is that byte's id, and neither
  // takes a place of --vocab-size.
  const Tokenizer odd =
      Tokenizer::train(text, 300, std::vector<std::string>{"", eot, eot, "!", "\xFF"}).value();
  EXPECT_EQ(odd.vocabSize(), n - 1);
  EXPECT_EQ(odd.specials(), (std::vector<int32_t>{n - 2, '!'}));
  // A special that Hugging Face, which looks an added token up by its spelling in the vocab,
  // would read as another token than kiln: the bytes of a token spelled otherwise (" " is "Ġ",
  // "\n" "Ċ"), the spelling of a token of other bytes ("é" is byte 0xE9's, "Ġ" byte 0x20's).
  const std::pair<const char *, const char *> refused[] = {
      {" ", R"(special token " " is token 32 (its bytes, spelled "Ġ") to kiln but a new token to )"
            "Hugging Face, which looks added tokens up by their spelling in the vocab: not "
            "supported"},
      {"\n", "special token \"\\n\" is token 10 (its bytes, spelled \"Ċ\") to kiln"},
      {"é",
       R"(special token "é" is a new token to kiln but token 233 (spelled so) to Hugging Face)"},
      {"Ġ", R"(special token "Ġ" is a new token to kiln but token 32 (spelled so))"},
  };
  for (const auto &[special, message] : refused) {
    Expected<Tokenizer> t = Tokenizer::train(text, 300, std::vector<std::string>{special});
    ASSERT_FALSE(t) << special;
    EXPECT_TRUE(t.error().message.starts_with(message)) << t.error().message;
  }
  // Bytes with a special token: the token's id after the bytes; the rest stays bytes.
  Tokenizer bytes = Tokenizer::bytes();
  ASSERT_EQ(*bytes.addSpecial(eot), 256);
  EXPECT_FALSE(bytes.isBytes());
  EXPECT_EQ(bytes.encode("a" + eot + "b"), (std::vector<int32_t>{'a', 256, 'b'}));
  EXPECT_EQ(*bytes.addSpecial("!"), '!');    // a byte's own token can be special too
  EXPECT_FALSE(bytes.addSpecial("\n").ok()); // (Hugging Face: a new token, as "\n" is "Ċ")
  EXPECT_FALSE(bytes.addSpecial("").ok());
}

class TokenizerFiles : public testing_files::TempDirTest {
protected:
  // GPT-2's byte characters in its vocabulary's order: printable bytes first, then the rest as
  // U+0100 onwards (its bytes_to_unicode), written out here independently of the tokenizer.
  static std::vector<std::string> gpt2ByteTokens() {
    std::vector<int> order;
    std::vector<std::string> spelled;
    auto utf8 = [](int c) {
      std::string s;
      if (c < 0x80) {
        s += static_cast<char>(c);
      } else {
        s += static_cast<char>(0xC0 | (c >> 6));
        s += static_cast<char>(0x80 | (c & 0x3F));
      }
      return s;
    };
    for (int b = 0; b < 256; ++b)
      if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)
        spelled.push_back(utf8(b));
    int next = 256;
    for (int b = 0; b < 256; ++b)
      if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE))
        spelled.push_back(utf8(next++));
    return spelled;
  }
  static std::vector<std::pair<std::string, std::string>> merges() {
    return {{"h", "e"}, {"l", "l"},   {"ll", "o"},   {"he", "llo"}, {"Ġ", "w"},
            {"o", "r"}, {"Ġw", "or"}, {"Ġwor", "l"}, {"Ġworl", "d"}};
  }
  // vocab.json: the bytes, then each merge's result.
  std::string vocabJson() const {
    std::vector<std::string> tokens = gpt2ByteTokens();
    for (const auto &[l, r] : merges())
      tokens.push_back(l + r);
    std::string out = "{";
    for (size_t id = 0; id < tokens.size(); ++id) {
      std::string escaped;
      for (char c : tokens[id])
        escaped += c == '"' ? "\\\"" : c == '\\' ? "\\\\" : std::string(1, c);
      out += fmt::format("{}\"{}\": {}", id ? ", " : "", escaped, id);
    }
    return out + "}";
  }
  void write(const std::string &name, const std::string &text) {
    writeBytes(dir_ / name, std::vector<uint8_t>(text.begin(), text.end()));
  }
  std::string path(const std::string &name) const { return (dir_ / name).string(); }

  static void expectGpt2Ids(const Tokenizer &t) {
    EXPECT_EQ(t.vocabSize(), 265);
    EXPECT_EQ(t.encode("hello world"), (std::vector<int32_t>{259, 264}));
    EXPECT_EQ(t.encode("hello!\n"), (std::vector<int32_t>{259, 0, 198}));
    EXPECT_EQ(t.encode(" "), (std::vector<int32_t>{220}));
    EXPECT_EQ(*t.decode(std::vector<int32_t>{259, 264, 198}), "hello world\n");
  }
};

TEST_F(TokenizerFiles, ReadsGpt2VocabAndMerges) {
  std::string m = "#version: 0.2\n";
  for (const auto &[l, r] : merges())
    m += l + " " + r + "\n";
  // The same files, each starting with a UTF-8 byte order mark (as an editor may save them).
  for (const std::string &bom : {std::string(), std::string("\xEF\xBB\xBF")}) {
    write("vocab.json", bom + vocabJson());
    write("merges.txt", bom + m);
    Expected<Tokenizer> t = Tokenizer::loadVocabMerges(path("vocab.json"), path("merges.txt"));
    ASSERT_TRUE(t.ok()) << t.error().message;
    expectGpt2Ids(*t);
  }
}

// A byte-level vocab that leaves ids unused, as GPT-4o's leaves 199998 and 200000-200017: each
// is a hole, which encode never gives and decode gives nothing for (Hugging Face's decode skips
// an id without a token); kiln writes the file back with the same holes.
TEST_F(TokenizerFiles, UnusedVocabIdsAreHoles) {
  std::string vocab = vocabJson();
  const int64_t holeId = static_cast<int64_t>(gpt2ByteTokens().size() + merges().size());
  vocab.insert(vocab.size() - 1, fmt::format(R"(, "zz": {})", holeId + 2)); // holes at N, N+1
  std::string pairs;
  for (const auto &[l, r] : merges())
    pairs += fmt::format("{}\"{} {}\"", pairs.empty() ? "" : ", ", l, r);
  write("holes.json", fmt::format(R"({{"pre_tokenizer": {{"type": "ByteLevel",
      "add_prefix_space": false}}, "decoder": {{"type": "ByteLevel"}}, "model": {{"type": "BPE",
      "vocab": {}, "merges": [{}]}}}})",
                                  vocab, pairs));
  Expected<Tokenizer> t = Tokenizer::load(path("holes.json"));
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->vocabSize(), holeId + 3);
  EXPECT_EQ(t->encode("hello world"), (std::vector<int32_t>{259, 264}));
  const std::vector<int32_t> withHoles = {259, static_cast<int32_t>(holeId),
                                          static_cast<int32_t>(holeId + 1), 264};
  EXPECT_EQ(t->decode(withHoles).value(), "hello world");
  EXPECT_EQ(t->token(static_cast<int32_t>(holeId + 2)), "zz");
  write("again.json", t->toJson());
  Expected<Tokenizer> again = Tokenizer::load(path("again.json"));
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(again->vocabSize(), holeId + 3);
  EXPECT_EQ(again->toJson(), t->toJson());
}

TEST_F(TokenizerFiles, ReadsHuggingFaceTokenizerJsonInBothMergeSpellings) {
  std::string pairs, arrays;
  for (const auto &[l, r] : merges()) {
    pairs += fmt::format("{}\"{} {}\"", pairs.empty() ? "" : ", ", l, r);
    arrays += fmt::format("{}[\"{}\", \"{}\"]", arrays.empty() ? "" : ", ", l, r);
  }
  for (const std::string &list : {pairs, arrays}) {
    write("tokenizer.json", fmt::format(R"({{"version": "1.0", "added_tokens": [],
      "pre_tokenizer": {{"type": "ByteLevel", "add_prefix_space": false}},
      "decoder": {{"type": "ByteLevel"}},
      "model": {{"type": "BPE", "vocab": {}, "merges": [{}]}}}})",
                                        vocabJson(), list));
    Expected<Tokenizer> t = Tokenizer::load(path("tokenizer.json"));
    ASSERT_TRUE(t.ok()) << t.error().message;
    expectGpt2Ids(*t);
  }
}

// GPT-2's tokenizer.json has its end-of-text token in the vocab and in added_tokens; others add
// tokens after the vocab. Both read, and kiln's own file with special tokens reads back.
TEST_F(TokenizerFiles, ReadsAddedTokens) {
  std::string vocab = vocabJson();
  vocab.back() = ',';
  vocab += R"( "<|endoftext|>": 265})";
  write("tokenizer.json", fmt::format(R"({{"added_tokens": [
      {{"id": 265, "content": "<|endoftext|>", "single_word": false, "lstrip": false,
        "rstrip": false, "normalized": true, "special": true}},
      {{"id": 266, "content": "<pad>", "special": true}}],
      "pre_tokenizer": {{"type": "ByteLevel", "add_prefix_space": false}},
      "decoder": {{"type": "ByteLevel"}},
      "model": {{"type": "BPE", "vocab": {}, "merges": []}}}})",
                                      vocab));
  Expected<Tokenizer> t = Tokenizer::load(path("tokenizer.json"));
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->vocabSize(), 267);
  EXPECT_EQ(t->specials(), (std::vector<int32_t>{265, 266}));
  EXPECT_EQ(t->encode("h<|endoftext|><pad>"), (std::vector<int32_t>{71, 265, 266}));
  EXPECT_EQ(*t->decode(std::vector<int32_t>{266, 265}), "<pad><|endoftext|>");
  const Tokenizer trained =
      Tokenizer::train(kText, 300, std::vector<std::string>{"<|endoftext|>"}).value();
  write("own.json", trained.toJson());
  Expected<Tokenizer> back = Tokenizer::load(path("own.json"));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->toJson(), trained.toJson());
  EXPECT_EQ(back->encode("the cat<|endoftext|>"), trained.encode("the cat<|endoftext|>"));
}

TEST_F(TokenizerFiles, ItsOwnFileReadsBack) {
  const Tokenizer t = Tokenizer::train(kText, 290).value();
  write("tok.json", t.toJson());
  Expected<Tokenizer> back = Tokenizer::load(path("tok.json"));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->toJson(), t.toJson());
  for (const std::string &s : byteStrings())
    EXPECT_EQ(back->encode(s), t.encode(s));
}

TEST_F(TokenizerFiles, MalformedFilesAreClearErrors) {
  // Each file is byte-level but for what it tests: the pre-tokenizer and decoder the kind needs
  // go first where the text names none.
  auto loadError = [&](std::string text) {
    if (text.size() > 1 && text.find("\"decoder\"") == std::string::npos)
      text.insert(1, R"("decoder": {"type": "ByteLevel"}, )");
    if (text.size() > 1 && text.find("\"pre_tokenizer\"") == std::string::npos)
      text.insert(1, R"("pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false}, )");
    write("bad.json", text);
    Expected<Tokenizer> t = Tokenizer::load(path("bad.json"));
    return t.ok() ? std::string("loaded") : t.error().message;
  };
  const std::string bad = path("bad.json");
  // Without them Hugging Face gives the text to BPE unmapped, or decodes ids to their spellings:
  // kiln read both as GPT-2's.
  EXPECT_EQ(loadError(R"({"pre_tokenizer": null, "model": {"type": "BPE"}})"),
            bad + ": pre_tokenizer is missing or null: Hugging Face would then give the text to "
                  "BPE without mapping its bytes to the vocab's alphabet; only ByteLevel without "
                  "a prefix space, or Sequence[Split(Regex, Isolated), ByteLevel(use_regex: "
                  "false)] with GPT-2's, Llama 3's, Qwen2's or GPT-4o's regex is supported");
  EXPECT_EQ(loadError(R"({"decoder": null, "model": {"type": "BPE"}})"),
            bad + ": decoder is missing or null: Hugging Face would then decode ids to their "
                  "spellings in the byte-level alphabet (Ġ for a space); only ByteLevel (ids back "
                  "to their bytes) is supported");
  EXPECT_EQ(loadError("{"), bad + ": byte 1: not valid JSON: syntax error while parsing object key "
                                  "- unexpected end of input; expected string literal");
  EXPECT_EQ(loadError(R"({"model": {"type": "WordPiece"}})"),
            bad + ": not a BPE tokenizer.json (its \"model\" must have \"type\": \"BPE\")");
  EXPECT_EQ(loadError(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})"),
            bad + ": the vocab has no token for byte 0x00 (\"Ā\"): not byte-level");
  const std::string vocab = vocabJson();
  EXPECT_EQ(loadError(fmt::format(R"({{"model": {{"type": "BPE", "vocab": {}, "merges": ["h e",
      "x"]}}}})",
                                  vocab)),
            bad + ": merge 2: expected \"left right\" or [\"left\", \"right\"]");
  EXPECT_EQ(loadError(fmt::format(
                R"({{"model": {{"type": "BPE", "vocab": {}, "merges": ["h e", "q z"]}}}})", vocab)),
            bad + ": merge 2 (\"q z\"): the merged token \"qz\" is not in the vocab");
  EXPECT_EQ(loadError(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []}})"),
            bad + ": vocab ids must each be given once: id 0 is given twice");
  // What Hugging Face does after the model (cut, pad, [CLS]/[SEP], decode to spelled text): kiln
  // read such files and gave other ids or text.
  const std::pair<const char *, std::string> after[] = {
      {R"("truncation": {"max_length": 3})",
       ": truncation is not supported (kiln encodes a whole text as it is)"},
      {R"("padding": {"strategy": {"Fixed": 8}})",
       ": padding is not supported (kiln encodes a whole text as it is)"},
      {R"("decoder": {"type": "WordPiece"})",
       ": decoder: only ByteLevel (ids back to their bytes) is supported"},
      {R"("post_processor": {"type": "BertProcessing"})",
       ": post_processor: only ByteLevel and TemplateProcessing (a BOS or EOS around the text) are "
       "supported"}};
  for (const auto &[part, message] : after)
    EXPECT_EQ(loadError(fmt::format(
                  R"({{{}, "model": {{"type": "BPE", "vocab": {}, "merges": []}}}})", part, vocab)),
              bad + message)
        << part;
  // An id far past the vocabulary names its token (a byte-level vocab may leave ids unused, but
  // not more than it has tokens: the table would be that long).
  EXPECT_EQ(
      loadError(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 50000000}, "merges": []}})"),
      bad + ": vocab token \"b\" has id 50000000: 2 tokens may leave at most as many ids unused");
  // No merges key: not read as no merges (every text would encode as bytes).
  EXPECT_EQ(loadError(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}}})"),
            bad + ": model.merges is missing (a BPE tokenizer's ranked merges)");
  // A NUL in a token is escaped, not where the message ends.
  EXPECT_EQ(loadError(R"({"model": {"type": "BPE", "vocab": {"x\u0000y": -1}, "merges": []}})"),
            bad + ": vocab token \"x\\u0000y\": its id is not an integer >= 0");
  // A key twice in the vocab is named, not silently one of them.
  EXPECT_EQ(loadError(R"({"model": {"type": "BPE", "vocab": {"a": 0, "a": 1}, "merges": []}})"),
            bad + ": key \"a\" appears twice in model.vocab");
  EXPECT_EQ(loadError(R"({"model": {"type": "BPE", "vocab": {"a": -3}}})"),
            bad + ": vocab token \"a\": its id is not an integer >= 0");
  EXPECT_EQ(loadError(R"({"model": {"type": 1}})"),
            bad + ": not a BPE tokenizer.json (its \"model\" must have \"type\": \"BPE\")");
  // What the encoder here would not do as the file asks is refused by name.
  EXPECT_EQ(loadError(R"({"normalizer": {"type": "Lowercase"}, "model": {"type": "BPE"}})"),
            bad + ": normalizer: only NFC (Qwen2's) or none is supported with ByteLevel BPE");
  EXPECT_EQ(
      loadError(
          R"({"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": true}, "model": {"type": "BPE"}})"),
      bad + ": pre_tokenizer: only ByteLevel without a prefix space, or Sequence[Split(Regex, "
            "Isolated), ByteLevel(use_regex: false)] with GPT-2's, Llama 3's, Qwen2's or "
            "GPT-4o's regex is supported");
  EXPECT_EQ(loadError(R"({"model": {"type": "BPE", "byte_fallback": true}})"),
            bad + ": model.byte_fallback is not supported");
  EXPECT_EQ(loadError(R"({"model": {"type": "BPE", "continuing_subword_prefix": "##"}})"),
            bad + ": model.continuing_subword_prefix is not supported");
  auto withAdded = [&](const std::string &added) {
    return loadError(fmt::format(R"({{"added_tokens": {}, "model": {{"type": "BPE", "vocab": {},
        "merges": []}}}})",
                                 added, vocab));
  };
  EXPECT_EQ(withAdded(R"([{"id": 3, "content": "<s>"}])"),
            bad + ": added_tokens[0]: \"<s>\" has id 3, expected 265 (the next id after the "
                  "vocab's last)");
  EXPECT_EQ(withAdded(R"([{"id": 7, "content": "h"}])"),
            bad + ": added_tokens[0]: \"h\" has id 7, expected 71 (its id in the vocab)");
  EXPECT_EQ(withAdded(R"([{"id": 265, "content": "<s>", "lstrip": true}])"),
            bad + ": added_tokens[0]: \"lstrip\": true is not supported");
  EXPECT_EQ(withAdded(R"([{"id": 265}])"),
            bad +
                ": added_tokens[0]: expected {\"id\": N, \"content\": \"TEXT\", ...} with a text");
  EXPECT_EQ(withAdded(R"({"id": 265})"), bad + ": added_tokens is not an array");
  EXPECT_EQ(Tokenizer::load(path("missing.json")).error().message,
            path("missing.json") + ": cannot open: No such file or directory");
  write("merges.txt", "h e\nhe\n");
  write("vocab.json", vocab);
  EXPECT_EQ(Tokenizer::loadVocabMerges(path("vocab.json"), path("merges.txt")).error().message,
            path("merges.txt") + ":2: expected \"left right\", got \"he\"");
  EXPECT_EQ(Tokenizer::bytes().decode(std::vector<int32_t>{65, 256}).error().message,
            "token 256 (at 1) is not in the vocabulary of 256 tokens");
}

} // namespace
} // namespace kiln::tokenizer_test

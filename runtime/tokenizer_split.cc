// A byte-level BPE's pre-split of text into words, by GPT-2's pattern, Llama 3's, Qwen2's or
// GPT-4o's (see tokenizer.h), and the normalizer, pre_tokenizer and model flags of a tokenizer.json
// that ask for them: read,
// checked, written back. Each pattern is its regex run by hand, alternative by alternative, with
// the regex's backtracking worked out (the comments say how), over exact Unicode classes.
#include "runtime/tokenizer.h"

#include <algorithm>
#include <span>

#include "runtime/json_text.h"
#include "runtime/unicode_classes.h"
#include "support/utf8.h"
#include <fmt/format.h>

namespace kiln::runtime {

namespace {

// The patterns as tokenizer.json files spell them: GPT-2's is the one a ByteLevel pre_tokenizer
// with use_regex applies (and a Split may spell out), the others a Split's. Qwen2's is Llama 3's
// with one digit a word (\p{N} for \p{N}{1,3}).
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// GPT-4o's (tiktoken's o200k_base, Phi-4's): letter runs cut by case, contractions kept on them.
constexpr std::string_view kO200kRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum class Class : uint8_t { Letter, Number, Space, Other };

Class classOf(std::optional<char32_t> c) {
  if (!c)
    return Class::Other; // a byte of invalid UTF-8
  if (isUnicodeSpace(*c))
    return Class::Space;
  if (isUnicodeLetter(*c))
    return Class::Letter;
  return isUnicodeNumber(*c) ? Class::Number : Class::Other;
}

// The text as code points with their classes and byte offsets (the end as a last offset).
struct Points {
  std::string_view text;
  std::vector<size_t> at;
  std::vector<Class> cls;
  std::vector<char32_t> cp; // 0xFFFFFFFF for a byte of invalid UTF-8
  size_t n = 0;

  explicit Points(std::string_view t) : text(t) {
    for (size_t i = 0; i < t.size();) {
      auto [c, len] = decodeUtf8At(t, i);
      at.push_back(i), cls.push_back(classOf(c)), cp.push_back(c.value_or(0xFFFFFFFF));
      i += len;
    }
    at.push_back(t.size());
    n = cls.size();
  }
  std::string_view piece(size_t i, size_t j) const { return text.substr(at[i], at[j] - at[i]); }
  // The end of the run of class c from j.
  size_t runOf(size_t j, Class c) const {
    while (j < n && cls[j] == c)
      ++j;
    return j;
  }
  bool isNewline(size_t k) const { return k < n && (cp[k] == '\r' || cp[k] == '\n'); }
  // The length of a contraction ('s 't 're 've 'm 'll 'd) at i, 0 if none; `fold` maps a code
  // point to the one it matches as (itself when case-sensitive).
  template <class Fold> size_t contraction(size_t i, Fold fold) const {
    if (cp[i] != '\'' || i + 1 >= n)
      return 0;
    const char32_t a = fold(cp[i + 1]), b = i + 2 < n ? fold(cp[i + 2]) : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
      return 2;
    return (a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l') ? 3 : 0;
  }
  // \s+(?!\S)|\s+ at a whitespace character i: the run, less its last character when a word
  // follows and the run has two or more (\s+ backtracks one; a lone one matches the plain \s+).
  size_t spaceRun(size_t i) const {
    const size_t j = runOf(i, Class::Space);
    return j < n && j - i >= 2 ? j - 1 : j;
  }
  // \s*[\r\n]+|\s+(?!\S)|\s+, Llama 3's and GPT-4o's last three: \s* takes the whole run and
  // gives back up to its last newline, which [\r\n]+ takes (the one after it, if any, is not a
  // newline); a run without one is spaceRun's.
  size_t spaceWord(size_t i) const {
    const size_t j = runOf(i, Class::Space);
    for (size_t last = j; last > i; --last)
      if (isNewline(last - 1))
        return last;
    return spaceRun(i);
  }
};

size_t gpt2Word(const Points &p, size_t i) {
  if (size_t len = p.contraction(i, [](char32_t c) { return c; }))
    return i + len;
  // " ?letters", " ?digits", " ?other": a space joins the word after it.
  const size_t k = p.cp[i] == ' ' && i + 1 < p.n && p.cls[i + 1] != Class::Space ? i + 1 : i;
  return p.cls[k] != Class::Space ? p.runOf(k, p.cls[k]) : p.spaceRun(i);
}

// Oniguruma's case-insensitive match of the contractions: ASCII letters in either case, and the
// long s "ſ" (U+017F), which Unicode's case folding makes "s" (no other character folds to one of
// s t r e v m l d).
char32_t foldContraction(char32_t c) {
  if (c == 0x17F)
    return 's';
  return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
}

// Llama 3's pattern, and Qwen2's with digits at most 1 a word (Llama 3's: 3).
size_t llama3Word(const Points &p, size_t i, size_t digits) {
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (size_t len = p.contraction(i, foldContraction))
    return i + len;
  // [^\r\n\p{L}\p{N}]?\p{L}+: one character that is not a newline, letter or digit may lead.
  const bool lead = p.cls[i] != Class::Letter && p.cls[i] != Class::Number && !p.isNewline(i);
  const size_t k = lead && i + 1 < p.n && p.cls[i + 1] == Class::Letter ? i + 1 : i;
  if (p.cls[k] == Class::Letter)
    return p.runOf(k, Class::Letter);
  // \p{N}{1,3} (Qwen2: \p{N})
  if (p.cls[i] == Class::Number)
    return std::min(p.runOf(i, Class::Number), i + digits);
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  const size_t o = p.cp[i] == ' ' && i + 1 < p.n && p.cls[i + 1] == Class::Other ? i + 1 : i;
  if (p.cls[o] == Class::Other) {
    size_t j = p.runOf(o, Class::Other);
    while (p.isNewline(j))
      ++j;
    return j;
  }
  return p.spaceWord(i);
}

// GPT-4o's two classes of "letters": [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] (upper) and
// [\p{Ll}\p{Lm}\p{Lo}\p{M}] (lower). Lm, Lo and the marks are in both; a mark is no \p{L}.
bool o200kUpper(const Points &p, size_t k) {
  return k < p.n &&
         (p.cls[k] == Class::Letter ? !isUnicodeLowercase(p.cp[k]) : isUnicodeMark(p.cp[k]));
}
bool o200kLower(const Points &p, size_t k) {
  return k < p.n &&
         (p.cls[k] == Class::Letter ? !isUnicodeUpperOrTitle(p.cp[k]) : isUnicodeMark(p.cp[k]));
}
template <class In> size_t runWhile(const Points &p, size_t k, In in) {
  while (in(p, k))
    ++k;
  return k;
}

// GPT-4o's pattern. Its first two alternatives, P? U* L+ C? and P? U+ L* C? (P a lead
// [^\r\n\p{L}\p{N}], U upper, L lower, C a contraction in any case), with the regex's
// backtracking worked out: the lead is tried, then not (a mark may lead and be a letter too);
// U* takes its whole run and gives characters back until L+ can start -- at the run's end (a
// lower-case letter) or at the run's last character in both classes, from which L+ takes what it
// can. Only where no such character is does the second take the upper run and the lower run
// after it. Then as Llama 3's, with "/" among the newlines punctuation takes after it.
size_t o200kWord(const Points &p, size_t i) {
  const bool lead = p.cls[i] != Class::Letter && p.cls[i] != Class::Number && !p.isNewline(i);
  const size_t starts[2] = {i + 1, i}; // with the lead, then without
  const std::span<const size_t> tries(lead ? starts : starts + 1, lead ? 2 : 1);
  auto withContraction = [&](size_t end) {
    return end < p.n ? end + p.contraction(end, foldContraction) : end;
  };
  for (size_t s : tries) { // P? U* L+ C?
    const size_t e = runWhile(p, s, o200kUpper);
    for (size_t k = e + 1; k-- > s;)
      if (o200kLower(p, k))
        return withContraction(runWhile(p, k, o200kLower));
  }
  for (size_t s : tries) // P? U+ L* C?
    if (const size_t e = runWhile(p, s, o200kUpper); e > s)
      return withContraction(runWhile(p, e, o200kLower));
  if (p.cls[i] == Class::Number) // \p{N}{1,3}
    return std::min(p.runOf(i, Class::Number), i + 3);
  // ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
  const size_t o = p.cp[i] == ' ' && i + 1 < p.n && p.cls[i + 1] == Class::Other ? i + 1 : i;
  if (p.cls[o] == Class::Other) {
    size_t j = p.runOf(o, Class::Other);
    while (p.isNewline(j) || (j < p.n && p.cp[j] == '/'))
      ++j;
    return j;
  }
  return p.spaceWord(i);
}

// The words of the text: word(i) is where the one at i ends.
template <class Word> std::vector<std::string_view> wordsBy(const Points &p, Word word) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < p.n;) {
    const size_t end = word(i);
    out.push_back(p.piece(i, end));
    i = end;
  }
  return out;
}

bool isFalse(const Json &v) {
  return v.is_null() || v == false;
}

Json byteLevelJson(bool useRegex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", useRegex}};
}

constexpr std::string_view kExpectedPreTokenizer =
    "ByteLevel without a prefix space, or Sequence[Split(Regex, Isolated), ByteLevel(use_regex: "
    "false)] with GPT-2's, Llama 3's, Qwen2's or GPT-4o's regex";

// The pre_tokenizer's pattern: ByteLevel's own (GPT-2's), or a Split's before a ByteLevel that
// has none. Errors name the key.
Expected<Tokenizer::PreSplit> preSplitOf(const Json &p, const std::string &path) {
  using PreSplit = Tokenizer::PreSplit;
  auto refuse = [&](const std::string &where) {
    return makeError("{}: {}: only {} is supported", path, where, kExpectedPreTokenizer);
  };
  auto byteLevel = [&](const Json &b, bool useRegex) {
    const Json &regex = memberOrNull(b, "use_regex");
    return memberOrNull(b, "type") == "ByteLevel" && isFalse(memberOrNull(b, "add_prefix_space")) &&
           (regex.is_null() ? useRegex : regex == useRegex);
  };
  // (None: Hugging Face gives the text to the model as it is, unsplit and without the byte-level
  // alphabet, so a vocab spelled in it, Ġ for a space, would give other ids.)
  if (p.is_null())
    return makeError("{}: pre_tokenizer is missing or null: Hugging Face would then give the text "
                     "to BPE without mapping its bytes to the vocab's alphabet; only {} is "
                     "supported",
                     path, kExpectedPreTokenizer);
  if (byteLevel(p, true))
    return PreSplit::Gpt2;
  const Json &list = memberOrNull(p, "pretokenizers");
  if (memberOrNull(p, "type") != "Sequence" || !list.is_array() || list.size() != 2)
    return refuse("pre_tokenizer");
  // (Isolated keeps the matches and the text between them; Removed with invert, the matches alone,
  // as tiktoken's converted files say it. The patterns below match every character, so nothing
  // lies between matches and the two split alike.)
  const Json &split = list[0];
  const bool isolated =
      memberOrNull(split, "behavior") == "Isolated" && isFalse(memberOrNull(split, "invert"));
  const bool matchesKept =
      memberOrNull(split, "behavior") == "Removed" && memberOrNull(split, "invert") == true;
  if (memberOrNull(split, "type") != "Split" || (!isolated && !matchesKept))
    return refuse("pre_tokenizer.pretokenizers[0]");
  if (!byteLevel(list[1], false))
    return refuse("pre_tokenizer.pretokenizers[1]");
  const Json &regex = memberOrNull(memberOrNull(split, "pattern"), "Regex");
  if (!regex.is_string())
    return refuse("pre_tokenizer.pretokenizers[0].pattern");
  if (regex.get_ref<const std::string &>() == kGpt2Regex)
    return PreSplit::Gpt2;
  if (regex.get_ref<const std::string &>() == kLlama3Regex)
    return PreSplit::Llama3;
  if (regex.get_ref<const std::string &>() == kQwen2Regex)
    return PreSplit::Qwen2;
  if (regex.get_ref<const std::string &>() == kO200kRegex)
    return PreSplit::O200k;
  return makeError("{}: pre_tokenizer.pretokenizers[0].pattern: the Split regex {} is not "
                   "supported (only GPT-2's, Llama 3's, Qwen2's and GPT-4o's)",
                   path, jsonQuote(regex.get<std::string>()));
}

} // namespace

std::vector<std::string_view> Tokenizer::words(std::string_view text, PreSplit split) {
  const Points p(text);
  switch (split) {
  case PreSplit::Gpt2:
    return wordsBy(p, [&](size_t i) { return gpt2Word(p, i); });
  case PreSplit::Llama3:
  case PreSplit::Qwen2:
    break;
  case PreSplit::O200k:
    return wordsBy(p, [&](size_t i) { return o200kWord(p, i); });
  }
  const size_t digits = split == PreSplit::Llama3 ? 3 : 1;
  return wordsBy(p, [&](size_t i) { return llama3Word(p, i, digits); });
}

// What the encoder here does: NFC or no normalizer, a pre-split pattern and plain merges,
// ignore_merges or not. A file asking for more (another normalizer, another pre-tokenizer, a
// prefix space, byte fallback, word prefixes or suffixes) would encode differently: refused by
// name.
Expected<Tokenizer::ByteLevelRules> Tokenizer::byteLevelRules(const Json &j,
                                                              const std::string &path) {
  const Json &normalizer = memberOrNull(j, "normalizer");
  const bool nfc = memberOrNull(normalizer, "type") == "NFC";
  if (!normalizer.is_null() && !nfc)
    return makeError("{}: normalizer: only NFC (Qwen2's) or none is supported with ByteLevel BPE",
                     path);
  Expected<PreSplit> split = preSplitOf(memberOrNull(j, "pre_tokenizer"), path);
  if (!split)
    return split.error();
  const Json &model = memberOrNull(j, "model");
  for (const char *key : {"byte_fallback", "fuse_unk"})
    if (!isFalse(memberOrNull(model, key)))
      return makeError("{}: model.{} is not supported", path, key);
  const Json &ignore = memberOrNull(model, "ignore_merges");
  if (!ignore.is_null() && !ignore.is_boolean())
    return makeError("{}: model.ignore_merges is not true or false", path);
  for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix", "unk_token"})
    if (!memberOrNull(model, key).is_null() && memberOrNull(model, key) != "")
      return makeError("{}: model.{} is not supported", path, key);
  if (!memberOrNull(model, "dropout").is_null() && memberOrNull(model, "dropout") != 0)
    return makeError("{}: model.dropout (BPE dropout) is not supported", path);
  // (None: Hugging Face joins the tokens' spellings, Ġ for a space, instead of their bytes.)
  const Json &decoder = memberOrNull(j, "decoder");
  if (decoder.is_null())
    return makeError("{}: decoder is missing or null: Hugging Face would then decode ids to their "
                     "spellings in the byte-level alphabet (Ġ for a space); only ByteLevel (ids "
                     "back to their bytes) is supported",
                     path);
  if (memberOrNull(decoder, "type") != "ByteLevel")
    return makeError("{}: decoder: only ByteLevel (ids back to their bytes) is supported", path);
  return ByteLevelRules{*split, ignore == true, nfc};
}

Status Tokenizer::checkAfterModel(const Json &j, const std::string &path) {
  for (const char *key : {"truncation", "padding"})
    if (!memberOrNull(j, key).is_null())
      return makeError("{}: {} is not supported (kiln encodes a whole text as it is)", path, key);
  const Json &post = memberOrNull(j, "post_processor");
  auto knownPost = [](const Json &p) {
    return p.is_null() || memberOrNull(p, "type") == "ByteLevel" ||
           memberOrNull(p, "type") == "TemplateProcessing";
  };
  bool postKnown = knownPost(post);
  if (memberOrNull(post, "type") == "Sequence" && memberOrNull(post, "processors").is_array()) {
    postKnown = true;
    for (const Json &p : memberOrNull(post, "processors"))
      postKnown = postKnown && knownPost(p);
  }
  if (!postKnown)
    return makeError("{}: post_processor: only ByteLevel and TemplateProcessing (a BOS or EOS "
                     "around the text) are supported",
                     path);
  return {};
}

Json Tokenizer::preTokenizerJson() const {
  if (preSplit_ == PreSplit::Gpt2)
    return byteLevelJson(true);
  const std::string_view regex = preSplit_ == PreSplit::Llama3  ? kLlama3Regex
                                 : preSplit_ == PreSplit::Qwen2 ? kQwen2Regex
                                                                : kO200kRegex;
  const Json split = {{"type", "Split"},
                      {"pattern", {{"Regex", regex}}},
                      {"behavior", "Isolated"},
                      {"invert", false}};
  return {{"type", "Sequence"}, {"pretokenizers", {split, byteLevelJson(false)}}};
}

} // namespace kiln::runtime

// Byte-level and byte-level BPE tokenizers, and what every tokenizer.json has: the vocab and
// merges, added tokens (see tokenizer.h; SentencePiece-style BPE and the post_processor's template
// are in tokenizer_sentencepiece.cc, training in tokenizer_train.cc).
#include "runtime/tokenizer.h"

#include <algorithm>
#include <array>
#include <optional>
#include <queue>

#include "runtime/input_file.h"
#include "runtime/json_text.h"
#include "runtime/tokenizer_segments.h"
#include "runtime/unicode_nfc.h"
#include "support/utf8.h"
#include <fmt/format.h>

namespace kiln::runtime {

namespace {

// ---- GPT-2's byte <-> character map ----
// Printable bytes (33-126, 161-172, 174-255) stand for themselves; the others, in byte order, for
// U+0100 onwards, so that every token is printable text in a JSON file.
struct ByteChars {
  std::array<char32_t, 256> charOf{};
  // The other way, by code point (every byte character is below U+0200): a table, not a map,
  // since loading a vocabulary looks up every character of every token (15% of a 128k-token
  // load's time went to a std::map's lookups).
  static constexpr char32_t kEnd = 0x200;
  std::array<int16_t, kEnd> byteOf;
  ByteChars() {
    byteOf.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      charOf[b] = printable ? static_cast<char32_t>(b) : next++;
      byteOf[charOf[b]] = static_cast<uint8_t>(b);
    }
  }
};
const ByteChars &byteChars() {
  static const ByteChars map;
  return map;
}

// The token's bytes from its GPT-2 spelling; nullopt if a character is not a byte character.
std::optional<std::string> bytesOfSpelling(std::string_view spelled) {
  std::string out;
  for (size_t i = 0; i < spelled.size();) {
    auto [c, n] = decodeUtf8At(spelled, i);
    const int16_t b = c && *c < ByteChars::kEnd ? byteChars().byteOf[*c] : int16_t{-1};
    if (b < 0)
      return std::nullopt;
    out += static_cast<char>(b);
    i += n;
  }
  return out;
}

std::string spellingOf(std::string_view bytes) {
  std::string out;
  for (char b : bytes)
    appendUtf8(out, byteChars().charOf[static_cast<unsigned char>(b)]);
  return out;
}

} // namespace

Tokenizer Tokenizer::bytes() {
  Tokenizer t;
  for (int b = 0; b < 256; ++b) {
    t.tokens_.emplace_back(1, static_cast<char>(b));
    t.idOf_[t.tokens_.back()] = b;
    t.byteId_[b] = b;
  }
  return t;
}

void Tokenizer::encodeWord(std::string_view word, std::vector<int32_t> &out) const {
  // ignore_merges: a word of the vocab is its token, whatever the merges would make of it.
  if (auto it = ignoreMerges_ ? idOf_.find(std::string(word)) : idOf_.end(); it != idOf_.end()) {
    out.push_back(it->second);
    return;
  }
  std::vector<int32_t> s;
  for (char b : word)
    s.push_back(byteId_[static_cast<unsigned char>(b)]);
  mergeByRank(s);
  out.insert(out.end(), s.begin(), s.end());
}

// Hugging Face's Word::merge_all, which the ids must equal: a heap of candidate merges (rank,
// position), the lowest rank first and of those the leftmost, over the symbols as a linked list.
// A merge makes at most two new candidates (with its left and right neighbours); a candidate
// whose symbols have changed since -- the pair at its position no longer merges into its result
// -- is skipped. O(n log n) for n characters, where rescanning for the best pair after each merge
// would be quadratic in a word that is the whole text (a file without spaces: 1 MB took 62 s).
// Byte-level and SentencePiece-style BPE both merge so.
void Tokenizer::mergeByRank(std::vector<int32_t> &ids) const {
  const auto n = static_cast<int32_t>(ids.size());
  struct Candidate {
    int32_t rank, pos, result;
    bool operator<(const Candidate &o) const { // the heap's top: the lowest rank, then position
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate> heap;
  std::vector<int32_t> prev(ids.size()), next(ids.size());
  auto consider = [&](int32_t left, int32_t right) {
    auto it = merges_.find({ids[left], ids[right]});
    if (it != merges_.end())
      heap.push({it->second.rank, left, it->second.result});
  };
  for (int32_t k = 0; k < n; ++k) {
    prev[k] = k - 1, next[k] = k + 1 < n ? k + 1 : -1;
    if (k + 1 < n)
      consider(k, k + 1);
  }
  constexpr int32_t kGone = -1; // a symbol merged into its left neighbour
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t right = next[c.pos];
    if (ids[c.pos] == kGone || right < 0)
      continue;
    auto it = merges_.find({ids[c.pos], ids[right]});
    if (it == merges_.end() || it->second.result != c.result)
      continue;
    ids[c.pos] = c.result, ids[right] = kGone;
    next[c.pos] = next[right];
    if (next[right] >= 0)
      prev[next[right]] = c.pos;
    if (prev[c.pos] >= 0)
      consider(prev[c.pos], c.pos);
    if (next[c.pos] >= 0)
      consider(c.pos, next[c.pos]);
  }
  std::erase(ids, kGone);
}

Expected<int32_t> Tokenizer::addSpecial(const std::string &text) {
  if (text.empty())
    return makeError("a special token needs a text");
  // (A tokenizer.json holds UTF-8 text: Hugging Face tokenizers and kiln could not read it back.)
  if (!isValidUtf8(text))
    return makeError("special token \"{}\" is not valid UTF-8", text);
  auto it = idOf_.find(text);
  const int32_t id = it != idOf_.end() ? it->second : static_cast<int32_t>(tokens_.size());
  if (isSpecial(id))
    return id; // already special
  // Hugging Face looks an added token up by its spelling in the vocab, kiln by its bytes: where the
  // two find other tokens (" " is the bytes of the token spelled "Ġ", "é" spells byte 0xE9's),
  // the text would have other ids in the two, so such a special is refused.
  if (const std::optional<int32_t> spelled = idOfSpelling(text);
      kind_ == Kind::ByteLevel && spelled != (it != idOf_.end() ? std::optional(id) : std::nullopt))
    return makeError("special token {} is {} to kiln but {} to Hugging Face, which looks added "
                     "tokens up by their spelling in the vocab: not supported",
                     jsonQuote(text),
                     it != idOf_.end() ? fmt::format("token {} (its bytes, spelled {})", id,
                                                     jsonQuote(spellingOf(text)))
                                       : "a new token",
                     spelled ? fmt::format("token {} (spelled so)", *spelled) : "a new token");
  if (it == idOf_.end()) {
    tokens_.push_back(text);
    idOf_.emplace(text, id);
  }
  specialTexts_.push_back(text);
  specialIds_.push_back(id);
  return id;
}

void Tokenizer::encodePlain(std::string_view text, std::vector<int32_t> &out) const {
  if (merges_.empty() && !ignoreMerges_) {
    for (char b : text)
      out.push_back(byteId_[static_cast<unsigned char>(b)]);
    return;
  }
  std::unordered_map<std::string_view, std::vector<int32_t>> cache; // words repeat
  for (std::string_view w : words(text, preSplit_)) {
    auto it = cache.find(w);
    if (it == cache.end()) {
      std::vector<int32_t> ids;
      encodeWord(w, ids);
      it = cache.emplace(w, std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  tokenizer_detail::forEachSegment(
      text, specialTexts_,
      [&](std::string_view part) {
        if (kind_ == Kind::SentencePiece)
          encodePiece(part, part.data() == text.data(), out);
        else if (nfc_)
          encodePlain(toNfc(part), out);
        else
          encodePlain(part, out);
      },
      [&](size_t k) { out.push_back(specialIds_[k]); });
  return out;
}

Expected<std::string> Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (size_t k = 0; k < ids.size(); ++k) {
    if (ids[k] < 0 || ids[k] >= vocabSize())
      return makeError("token {} (at {}) is not in the vocabulary of {} tokens", ids[k], k,
                       vocabSize());
    if (kind_ == Kind::ByteLevel)
      out += tokens_[static_cast<size_t>(ids[k])];
  }
  return kind_ == Kind::SentencePiece ? decodePieces(ids) : out;
}

std::optional<int32_t>
Tokenizer::specialNamed(std::initializer_list<std::string_view> names) const {
  for (std::string_view name : names)
    for (size_t k = 0; k < specialTexts_.size(); ++k)
      if (specialTexts_[k] == name)
        return specialIds_[k];
  return std::nullopt;
}

std::optional<int32_t> Tokenizer::eosId() const {
  return eosAfter_ ? eosAfter_ : specialNamed({"</s>", "<|endoftext|>", "<|end_of_text|>"});
}

std::optional<int32_t> Tokenizer::beginId() const {
  if (bos_)
    return bos_;
  if (std::optional<int32_t> named = specialNamed({"<s>", "<|begin_of_text|>"}))
    return named;
  return eosId();
}

std::optional<int32_t> Tokenizer::idOfSpelling(const std::string &spelled) const {
  const std::optional<std::string> bytes =
      kind_ == Kind::SentencePiece ? std::optional(spelled) : bytesOfSpelling(spelled);
  auto it = bytes ? idOf_.find(*bytes) : idOf_.end();
  return it != idOf_.end() ? std::optional(it->second) : std::nullopt;
}

bool Tokenizer::endsText(int32_t id) const {
  if (endIds_.empty())
    return eosId() == id;
  return std::find(endIds_.begin(), endIds_.end(), id) != endIds_.end();
}

std::string Tokenizer::vocabText(int32_t id) const {
  const std::string &t = tokens_[static_cast<size_t>(id)];
  return kind_ == Kind::SentencePiece ? t : spellingOf(t);
}

Json Tokenizer::addedTokensJson() const {
  Json added = Json::array();
  for (size_t k = 0; k < specialIds_.size(); ++k)
    added.push_back({{"id", specialIds_[k]},
                     {"content", specialTexts_[k]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  return added;
}

std::string Tokenizer::toJson() const {
  if (kind_ == Kind::SentencePiece)
    return sentencePieceJson().dump(1) + "\n";
  // Hugging Face finds an added token's id by its text in the vocab, and gives one it does not
  // find the next id after the vocab's: a special token whose bytes GPT-2's alphabet spells
  // otherwise ("<end of text>" as "<endĠofĠtext>") got another id there. Where it and every id
  // after it are special tokens (kiln tokenizer train --special appends them), they are left out
  // of the vocab, and their ids are the ones Hugging Face gives them, in added_tokens' order.
  size_t vocabEnd = tokens_.size();
  for (size_t id = tokens_.size(); id > 0 && isSpecial(static_cast<int32_t>(id - 1)); --id)
    if (spellingOf(tokens_[id - 1]) != tokens_[id - 1])
      vocabEnd = id - 1;
  Json vocab = Json::object();
  for (size_t id = 0; id < vocabEnd; ++id)
    if (!tokens_[id].empty()) // (not a hole)
      vocab[spellingOf(tokens_[id])] = id;
  Json merges = Json::array();
  for (auto [l, r] : mergeList_)
    merges.push_back(spellingOf(tokens_[l]) + " " + spellingOf(tokens_[r]));
  const Json byteLevel = {{"type", "ByteLevel"},
                          {"add_prefix_space", false},
                          {"trim_offsets", true},
                          {"use_regex", true}};
  Json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false}};
  if (ignoreMerges_)
    model["ignore_merges"] = true;
  model["vocab"] = std::move(vocab);
  model["merges"] = std::move(merges);
  Json j = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", addedTokensJson()},
            {"normalizer", nfc_ ? Json{{"type", "NFC"}} : Json()},
            {"pre_tokenizer", preTokenizerJson()},
            {"post_processor", bos_ || eosAfter_ ? templateJson() : byteLevel},
            {"decoder", byteLevel},
            {"model", std::move(model)}};
  return j.dump(1) + "\n";
}

Expected<Tokenizer>
Tokenizer::fromParts(std::vector<std::pair<std::string, int64_t>> vocab,
                     const std::vector<std::pair<std::string, std::string>> &merges,
                     const std::string &where, Kind kind) {
  Tokenizer t;
  t.kind_ = kind;
  // A byte-level token's bytes from its GPT-2 spelling; a SentencePiece token is its text.
  auto tokenOf = [kind](const std::string &spelled) {
    return kind == Kind::ByteLevel ? bytesOfSpelling(spelled) : std::optional(spelled);
  };
  std::sort(vocab.begin(), vocab.end(),
            [](const auto &a, const auto &b) { return a.second < b.second; });
  // The first id out of place in the sorted vocab: given twice, or missing.
  auto gap = [&] {
    for (size_t k = 0; k < vocab.size(); ++k)
      if (const int64_t id = vocab[k].second; id != static_cast<int64_t>(k))
        return id < static_cast<int64_t>(k) ? fmt::format("id {} is given twice", id)
                                            : fmt::format("id {} is missing", k);
    return std::string();
  };
  // A byte-level vocab may leave ids unused (GPT-4o's leaves 199998 and 200000-200017 to its
  // special tokens): such an id is a hole, a token of no bytes, which encode never gives and
  // decode gives nothing for, as Hugging Face's decode skips an id it has no token for. At most as
  // many holes as tokens (an id of 2^40 would be a table of that size).
  const bool holes = kind == Kind::ByteLevel;
  for (size_t k = 1; k < vocab.size() && holes; ++k)
    if (vocab[k].second == vocab[k - 1].second)
      return makeError("{}: vocab ids must each be given once: id {} is given twice", where,
                       vocab[k].second);
  const int64_t ids = vocab.empty() ? 0 : vocab.back().second + 1;
  if (const std::string g = gap(); !g.empty() && !holes) {
    if (vocab.back().second >= static_cast<int64_t>(vocab.size()))
      return makeError("{}: vocab token {} has id {}: the ids of {} tokens are 0..{} ({})", where,
                       jsonQuote(vocab.back().first), vocab.back().second, vocab.size(),
                       vocab.size() - 1, g);
    return makeError("{}: vocab ids must be 0..{} each once: {}", where, vocab.size() - 1, g);
  }
  if (ids > 2 * static_cast<int64_t>(vocab.size()))
    return makeError("{}: vocab token {} has id {}: {} tokens may leave at most as many ids unused",
                     where, jsonQuote(vocab.back().first), vocab.back().second, vocab.size());
  t.tokens_.resize(static_cast<size_t>(ids));
  for (const auto &[spelled, id] : vocab) {
    std::optional<std::string> bytes = tokenOf(spelled);
    if (!bytes)
      return makeError("{}: vocab token {} (id {}) is not spelled in GPT-2's byte characters",
                       where, jsonQuote(spelled), id);
    if (bytes->empty() && holes) // (a hole's bytes)
      return makeError("{}: vocab token \"\" (id {}) is empty", where, id);
    if (!t.idOf_.emplace(*bytes, static_cast<int32_t>(id)).second)
      return makeError("{}: vocab token {} (id {}) is given twice", where, jsonQuote(spelled), id);
    if (bytes->size() == 1 && kind == Kind::ByteLevel)
      t.byteId_[static_cast<unsigned char>((*bytes)[0])] = static_cast<int32_t>(id);
    t.tokens_[static_cast<size_t>(id)] = std::move(*bytes);
  }
  for (int b = 0; b < 256 && kind == Kind::ByteLevel; ++b)
    if (t.byteId_[b] < 0)
      return makeError("{}: the vocab has no token for byte 0x{:02X} (\"{}\"): not byte-level",
                       where, b, spellingOf(std::string(1, static_cast<char>(b))));
  for (size_t k = 0; k < merges.size(); ++k) {
    const auto &[l, r] = merges[k];
    std::optional<std::string> lb = tokenOf(l), rb = tokenOf(r);
    auto li = lb ? t.idOf_.find(*lb) : t.idOf_.end(), ri = rb ? t.idOf_.find(*rb) : t.idOf_.end();
    if (li == t.idOf_.end() || ri == t.idOf_.end())
      return makeError("{}: merge {} ({}): token {} is not in the vocab", where, k + 1,
                       jsonQuote(l + " " + r), jsonQuote(li == t.idOf_.end() ? l : r));
    auto joined = t.idOf_.find(*lb + *rb);
    if (joined == t.idOf_.end())
      return makeError("{}: merge {} ({}): the merged token {} is not in the vocab", where, k + 1,
                       jsonQuote(l + " " + r), jsonQuote(l + r));
    if (!t.merges_
             .emplace(std::pair{li->second, ri->second},
                      Merge{static_cast<int32_t>(k), joined->second})
             .second)
      return makeError("{}: merge {} ({}) is given twice", where, k + 1, jsonQuote(l + " " + r));
    t.mergeList_.push_back({li->second, ri->second});
  }
  return t;
}

namespace {

Expected<Json> parseJson(std::string_view text, const std::string &where) {
  Expected<JsonText> j = readJson(text, {});
  if (!j)
    return makeError("{}: {}", where, j.error().message);
  return std::move(j->value);
}

Expected<std::vector<std::pair<std::string, int64_t>>> vocabOf(const Json &v,
                                                               const std::string &where) {
  if (!v.is_object())
    return makeError("{}: the vocab is not an object of token: id", where);
  std::vector<std::pair<std::string, int64_t>> out;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0)
      return makeError("{}: vocab token {}: its id is not an integer >= 0", where,
                       jsonQuote(it.key()));
    out.emplace_back(it.key(), it.value().get<int64_t>());
  }
  return out;
}

// "left right" (merges.txt, older tokenizer.json) or ["left", "right"] (newer tokenizer.json).
std::optional<std::pair<std::string, std::string>> mergeOf(const Json &m) {
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    const size_t space = s.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == s.size() ||
        s.find(' ', space + 1) != std::string::npos)
      return std::nullopt;
    return std::pair{s.substr(0, space), s.substr(space + 1)};
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
    return std::pair{m[0].get<std::string>(), m[1].get<std::string>()};
  return std::nullopt;
}

} // namespace

Status Tokenizer::addSpecials(const Json &added, const std::string &path) {
  if (!added.is_array())
    return makeError("{}: added_tokens is not an array", path);
  // In the order of their ids (a file may list them in another), each entry named by its place.
  std::vector<size_t> order(added.size());
  for (size_t k = 0; k < order.size(); ++k)
    order[k] = k;
  auto idOf = [&](size_t k) {
    const Json &a = added[k];
    return a.is_object() && a.contains("id") && a["id"].is_number_integer() ? a["id"].get<int64_t>()
                                                                            : int64_t{-1};
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return idOf(x) < idOf(y); });
  for (size_t k : order) {
    const Json &a = added[k];
    const std::string where = fmt::format("{}: added_tokens[{}]", path, k);
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        !a.contains("content") || !a["content"].is_string() ||
        a["content"].get<std::string>().empty())
      return makeError("{}: expected {{\"id\": N, \"content\": \"TEXT\", ...}} with a text", where);
    // What would change how the text around it encodes (stripping spaces, whole words only).
    for (const char *flag : {"single_word", "lstrip", "rstrip", "normalized", "special"})
      if (a.contains(flag) && !a[flag].is_boolean() && !a[flag].is_null())
        return makeError("{}: \"{}\" is not true or false", where, flag);
    for (const char *flag : {"single_word", "lstrip", "rstrip"})
      if (a.contains(flag) && a[flag] == true)
        return makeError("{}: \"{}\": true is not supported", where, flag);
    // (Such a token is found in the normalized text, where "a<x>b" is "▁a<x>b": "b" would gain no
    // "▁" of its own; under NFC, a mark after it could compose with its last character.)
    if (((kind_ == Kind::SentencePiece && !spm_.metaspace) || nfc_) && a.contains("normalized") &&
        a["normalized"] == true)
      return makeError("{}: \"normalized\": true is not supported with the normalizer", where);
    const std::string content = a["content"].get<std::string>();
    const int64_t id = a["id"].get<int64_t>();
    // (The id Hugging Face gives it: addSpecial refuses a text kiln would give another.)
    const std::optional<int32_t> known = idOfSpelling(content);
    const int64_t expected = known ? *known : vocabSize();
    if (id != expected)
      return makeError("{}: {} has id {}, expected {} ({})", where, jsonQuote(content), id,
                       expected,
                       known ? "its id in the vocab" : "the next id after the vocab's last");
    if (Expected<int32_t> added = addSpecial(content); !added)
      return makeError("{}: {}", where, added.error().message);
  }
  return {};
}

Expected<Tokenizer> Tokenizer::load(const std::string &path) {
  Expected<std::string> text = readInputText(path);
  if (!text)
    return text.error();
  return parse(*text, path);
}

Expected<Tokenizer> Tokenizer::parse(std::string_view json, const std::string &path) {
  Expected<Json> j = parseJson(json, path);
  if (!j)
    return j.error();
  const Json *model = j->is_object() && j->contains("model") ? &(*j)["model"] : nullptr;
  if (!model || !model->is_object() || !model->contains("type") || (*model)["type"] != "BPE")
    return makeError("{}: not a BPE tokenizer.json (its \"model\" must have \"type\": \"BPE\")",
                     path);
  // (SentencePiece-style files' were read as if absent: other ids, unsaid.)
  if (Status st = checkAfterModel(*j, path); !st)
    return st.error();
  const Kind kind = isSentencePiece(*j) ? Kind::SentencePiece : Kind::ByteLevel;
  std::optional<SentencePieceRules> rules;
  Expected<ByteLevelRules> byteLevel = ByteLevelRules{};
  if (kind == Kind::SentencePiece) {
    Expected<SentencePieceRules> r = sentencePieceRules(*j, path);
    if (!r)
      return r.error();
    rules = *r;
  } else if (byteLevel = byteLevelRules(*j, path); !byteLevel) {
    return byteLevel.error();
  }
  // (Read in place: value() would copy the whole vocabulary.)
  const auto vocabAt = model->find("vocab");
  Expected<std::vector<std::pair<std::string, int64_t>>> vocab =
      vocabOf(vocabAt != model->end() ? *vocabAt : Json(), path);
  if (!vocab)
    return vocab.error();
  // (Required: a file without it is not a BPE tokenizer of any size, and loaded as no merges it
  // would encode every text as bytes without a word.)
  if (!model->contains("merges"))
    return makeError("{}: model.merges is missing (a BPE tokenizer's ranked merges)", path);
  const Json &merges = (*model)["merges"];
  if (!merges.is_array())
    return makeError("{}: model.merges is not an array", path);
  std::vector<std::pair<std::string, std::string>> pairs;
  for (size_t k = 0; k < merges.size(); ++k) {
    auto m = mergeOf(merges[k]);
    if (!m)
      return makeError("{}: merge {}: expected \"left right\" or [\"left\", \"right\"]", path,
                       k + 1);
    pairs.push_back(std::move(*m));
  }
  Expected<Tokenizer> t = fromParts(std::move(*vocab), pairs, path, kind);
  if (!t)
    return t;
  if (rules) {
    if (Status st = t->useSentencePiece(*rules, *model, path); !st)
      return st.error();
  } else {
    t->preSplit_ = byteLevel->preSplit;
    t->ignoreMerges_ = byteLevel->ignoreMerges;
    t->nfc_ = byteLevel->nfc;
  }
  if (j->contains("added_tokens") && !(*j)["added_tokens"].is_null())
    if (Status st = t->addSpecials((*j)["added_tokens"], path); !st)
      return st.error();
  if (j->contains("post_processor"))
    if (Status st = t->readTemplate((*j)["post_processor"], path); !st)
      return st.error();
  return t;
}

Expected<Tokenizer> Tokenizer::loadVocabMerges(const std::string &vocabPath,
                                               const std::string &mergesPath) {
  Expected<std::string> vocabText = readInputText(vocabPath);
  if (!vocabText)
    return vocabText.error();
  Expected<Json> j = parseJson(*vocabText, vocabPath);
  if (!j)
    return j.error();
  Expected<std::vector<std::pair<std::string, int64_t>>> vocab = vocabOf(*j, vocabPath);
  if (!vocab)
    return vocab.error();
  Expected<std::string> text = readInputText(mergesPath);
  if (!text)
    return text.error();
  std::vector<std::pair<std::string, std::string>> pairs;
  // A UTF-8 byte order mark (an editor's) is not part of the first line, as JSON's reader skips
  // one in vocab.json.
  size_t line = 0, start = text->starts_with("\xEF\xBB\xBF") ? 3 : 0;
  while (start < text->size()) {
    size_t end = text->find('\n', start);
    if (end == std::string::npos)
      end = text->size();
    std::string entry = text->substr(start, end - start);
    start = end + 1, ++line;
    if (!entry.empty() && entry.back() == '\r')
      entry.pop_back();
    if (entry.empty() || (line == 1 && entry.starts_with("#version")))
      continue;
    auto m = mergeOf(Json(entry));
    if (!m)
      return makeError("{}:{}: expected \"left right\", got {}", mergesPath, line,
                       jsonQuote(entry));
    pairs.push_back(std::move(*m));
  }
  Expected<Tokenizer> t = fromParts(std::move(*vocab), pairs, vocabPath + " with " + mergesPath);
  // GPT-2's one special token, as Hugging Face's GPT2Tokenizer makes it from these two files
  // (its tokenizer.json lists it in added_tokens): one id wherever the text holds it, the EOS.
  if (t && t->idOf_.count("<|endoftext|>"))
    if (Expected<int32_t> id = t->addSpecial("<|endoftext|>"); !id)
      return id.error();
  return t;
}

} // namespace kiln::runtime

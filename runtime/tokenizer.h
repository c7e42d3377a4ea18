// Tokenizers: byte-level (a token per byte, the default) and byte-level BPE as GPT-2 has it.
//
// BPE: text is pre-split into words by GPT-2's pattern ('s 't 're 've 'm 'll 'd, then " ?letters",
// " ?digits", " ?other", runs of whitespace, where a run followed by a word leaves it its last
// space); each word starts as its bytes and the ranked merges are applied, the lowest rank first,
// until none applies. Ids 0-255 are the bytes in our own files (a GPT-2 file orders them its own
// way, and kiln keeps its ids). Every byte string encodes and decodes to itself, invalid UTF-8
// included (such a byte is a word piece of its own class "other").
//
// Special tokens (added tokens: "<|endoftext|>", "<pad>"): each is one id whatever its text. Encode
// first cuts the text at every occurrence of one (the leftmost, and of those the longest), as
// Hugging Face tokenizers do with added tokens, then encodes the text between them as above; so
// a special token's text never reaches the pre-split, and decode gives it back: every byte string
// still round-trips. A special token is a token of the vocabulary (GPT-2's "<|endoftext|>", id
// 50256) or an id after it.
//
// Files: the Hugging Face tokenizers format, a tokenizer.json whose model is BPE over the
// ByteLevel pre-tokenizer (kiln writes this), or GPT-2's vocab.json with merges.txt. Tokens are
// spelled in GPT-2's byte-to-character map (a space is "Ġ"). Unicode classes beyond ASCII: every
// code point past U+007F is a letter except the whitespace and punctuation blocks (U+0080-00BF,
// U+00D7, U+00F7, U+2000-206F, U+3000-303F, U+FF00-FF0F), an approximation of \p{L} and \p{N}
// that agrees with GPT-2's on ASCII text and on most letters.
//
// Cost: loading a file is O(b + n log n) for b bytes and n tokens and merges (runtime/json_text.h's
// std::map objects; a 128k-token tokenizer.json in 0.4 s here, where an ordered_json's inserts
// took 15 s); training is O(t log t + U log U) for t bytes of text and U pair updates (train()).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "support/status.h"

namespace kiln::runtime {

class Tokenizer {
public:
  // A token per byte: id = the byte's value.
  static Tokenizer bytes();
  // Learns merges from `text` until the vocabulary holds `vocabSize` tokens (256 bytes, the
  // merges and the special tokens) or no pair of tokens occurs twice. Each merge joins the most
  // frequent adjacent pair within words; ties go to the pair of lowest (left id, right id), so
  // training is deterministic. O(n log n + U log U) for n bytes of text and U pair updates (each
  // merge recounts only the words that hold its pair). The special tokens (non-empty UTF-8 texts;
  // others, and repeats, are left out) cut the text (no merge crosses or enters one) and take the
  // ids after the merges (one of a single byte is that byte's token).
  static Tokenizer train(std::string_view text, int64_t vocabSize,
                         std::span<const std::string> specials = {});
  // A tokenizer.json (BPE over ByteLevel). Errors name the file and the entry.
  static Expected<Tokenizer> load(const std::string &path);
  // The same from the file's text; errors begin with `where`.
  static Expected<Tokenizer> parse(std::string_view json, const std::string &where);
  // GPT-2's vocab.json and merges.txt.
  static Expected<Tokenizer> loadVocabMerges(const std::string &vocabPath,
                                             const std::string &mergesPath);

  // Makes `text` a special token: the id of the vocabulary's token with these bytes if there is
  // one, else a new id after the last. Errors: an empty text, invalid UTF-8.
  Expected<int32_t> addSpecial(const std::string &text);
  // The special tokens' ids, in the order they were added.
  const std::vector<int32_t> &specials() const { return specialIds_; }

  std::vector<int32_t> encode(std::string_view text) const;
  // Error for an id outside the vocabulary.
  Expected<std::string> decode(std::span<const int32_t> ids) const;
  int64_t vocabSize() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t mergeCount() const { return static_cast<int64_t>(mergeList_.size()); }
  // The merges' pairs of ids, by rank.
  const std::vector<std::pair<int32_t, int32_t>> &merges() const { return mergeList_; }
  bool isBytes() const { return merges_.empty() && specialIds_.empty(); }
  // The token's bytes.
  const std::string &token(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }
  // As a tokenizer.json that Hugging Face tokenizers and kiln read.
  std::string toJson() const;

  // GPT-2's pre-split of text into words (what encode merges within).
  static std::vector<std::string_view> words(std::string_view text);

private:
  struct PairHash {
    size_t operator()(std::pair<int32_t, int32_t> p) const {
      return std::hash<uint64_t>()((static_cast<uint64_t>(static_cast<uint32_t>(p.first)) << 32) |
                                   static_cast<uint32_t>(p.second));
    }
  };
  struct Merge {
    int32_t rank, result;
  };
  // From tokens' bytes and the merges' pairs (by token bytes), checked: the common end of the
  // two loaders. `where` prefixes errors.
  static Expected<Tokenizer>
  fromParts(std::vector<std::pair<std::string, int64_t>> vocab,
            const std::vector<std::pair<std::string, std::string>> &merges,
            const std::string &where);
  void encodeWord(std::string_view word, std::vector<int32_t> &out) const;
  // added_tokens of a tokenizer.json; errors name `path` and the entry.
  Status addSpecials(const nlohmann::json &added, const std::string &path);
  // Text without special tokens.
  void encodePlain(std::string_view text, std::vector<int32_t> &out) const;

  std::vector<std::string> tokens_;               // by id: the token's bytes
  std::unordered_map<std::string, int32_t> idOf_; // bytes -> id
  std::vector<int32_t> byteId_ = std::vector<int32_t>(256, -1);
  std::unordered_map<std::pair<int32_t, int32_t>, Merge, PairHash> merges_;
  std::vector<std::pair<int32_t, int32_t>> mergeList_; // by rank
  std::vector<std::string> specialTexts_;              // in the order added
  std::vector<int32_t> specialIds_;
};

} // namespace kiln::runtime

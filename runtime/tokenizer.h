// Tokenizers: byte-level (a token per byte, the default), byte-level BPE as GPT-2, Llama 3, Qwen2
// and GPT-4o (Phi-4) have it, and SentencePiece-style BPE with byte fallback as Llama 2, TinyLlama
// and Mistral ship it.
//
// Byte-level BPE: text is pre-split into words by one of four patterns (tokenizer_split.cc), and
// each word starts as its bytes and the ranked merges are applied, the lowest rank first, until
// none applies. GPT-2's pattern ('s 't 're 've 'm 'll 'd, then " ?letters", " ?digits", " ?other",
// runs of whitespace, where a run followed by a word leaves it its last space) is the implicit one
// of a ByteLevel pre_tokenizer; Llama 3's is a Split before it, the regex
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
// (contractions in any case, a letter run with at most one non-letter, non-digit, non-newline
// before it, digits three at a time, " ?other" with the newlines after it, whitespace up to its
// last newline, then as GPT-2's); Qwen2's is Llama 3's with one digit a word (\p{N}), after the
// normalizer NFC (runtime/unicode_nfc.h: the text between special tokens put in Unicode's
// Normalization Form C, so a decomposed "e" + U+0301 is "é"'s tokens). GPT-4o's (tiktoken's
// o200k_base, which Phi-4 and Phi-4-mini use) cuts letter runs by case:
//   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|...)?|
//   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|...)?|
//   \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
// (a word is capitals then lower case: "HTTPServer" is one, "ABC def" two; contractions end
// words: "don't" is one; marks count as letters of both cases). With ignore_merges (Llama 3's
// model), a word that is a token of the vocabulary is that token, unmerged. Ids 0-255 are the
// bytes in our own files (a GPT-2 file orders them its own way, and kiln keeps its ids); a file's
// vocab may leave ids unused (GPT-4o's does), holes that encode never gives and decode skips, as
// Hugging Face's does. Every byte
// string encodes and decodes to itself (under NFC, to its NFC), invalid UTF-8 included (such a byte
// is a word piece of its own class "other").
//
// SentencePiece-style BPE (tokenizer_sentencepiece.cc), as Hugging Face tokenizers runs it: the
// text between special tokens is one piece, with no pre-split; its spaces become "▁" (U+2581)
// and it gains a leading one -- the normalizer Sequence[Prepend("▁"), Replace(" ", "▁")]
// of Llama 2's files prepends to every piece; the pre_tokenizer Metaspace of newer files to the
// first piece of the text ("first") or to every piece ("always") when it does not start with one
// already, and with split: true it cuts the piece before each "▁". BPE works on the piece's
// characters (not bytes): a character that is not a token becomes its UTF-8 bytes as the tokens
// "<0x00>".."<0xFF>" (byte fallback; without it, the unk token, a run of them one unk with
// fuse_unk), then the merges apply, the lowest rank first, ties to the leftmost. Decode joins the
// tokens' texts with "▁" as a space and each run of byte tokens as the bytes it spells (a run
// that is not valid UTF-8 as a whole: one U+FFFD per byte, as the ByteFallback decoder does), then
// strips one leading space (the decoder's Strip). That is Hugging Face's decode, which is not
// always the text: a piece after a special token has gained a space ("a</s>b" decodes as
// "a</s> b"), Metaspace's "first" loses a leading space, and a byte of invalid UTF-8 in a text
// (which Hugging Face cannot take) falls back to its byte token and decodes as U+FFFD.
//
// Special tokens (added tokens: "<|endoftext|>", "<pad>", "<s>"): each is one id whatever its text.
// Encode first cuts the text at every occurrence of one (the leftmost, and of those the longest),
// as Hugging Face tokenizers do with added tokens, then encodes the text between them as above; so
// a special token's text never reaches the pre-split, and decode gives it back: every byte string
// still round-trips through a byte-level BPE. A special token is a token of the vocabulary (GPT-2's
// "<|endoftext|>", id 50256; Llama's "<unk>" "<s>" "</s>", 0-2) or an id after it. Encode adds no
// BOS or EOS: the file's post_processor says which (bosId(), eosId()), and callers decide.
//
// Files: the Hugging Face tokenizers format, a tokenizer.json whose model is BPE over the
// ByteLevel pre-tokenizer, alone or after Llama 3's, Qwen2's or GPT-4o's Split (kiln writes
// these; a Split of behavior Removed with invert, as tiktoken's converted files have it, reads as
// the same), or SentencePiece-style as above, or GPT-2's vocab.json with merges.txt. Byte-level
// tokens are spelled in GPT-2's byte-to-character map (a space is "Ġ"); SentencePiece tokens are
// their text ("▁the"). The patterns' Unicode classes \p{L}, \p{N}, \s, the cases and \p{M} are
// exactly Hugging Face's (Oniguruma's; runtime/unicode_classes.h, from Unicode 14.0: a letter or
// digit assigned since is "other" here), and so is the case-insensitive match of the contractions
// ("'S", and "'ſ" with the long s, which Unicode folds to "s").
//
// Cost: loading a file is O(b + n log n) for b bytes and n tokens and merges (runtime/json_text.h's
// std::map objects; Llama 3's tokenizer.json, 128k tokens and 280k merges, in 0.5 s here, where an
// ordered_json's inserts took 15 s; a pre-split is linear in the text, and encoding 1 MB of text
// takes 50-70 ms); training is O(t log t + U log U) for t bytes of text and U pair updates
// (train()); a SentencePiece piece of n characters encodes in O(n log n) (a heap of candidate
// merges over a linked list of symbols), however long: the piece is the whole text between special
// tokens.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "support/status.h"

namespace kiln::runtime {

// A SentencePiece-style tokenizer's rules: what its normalizer or pre_tokenizer, model and decoder
// say (tokenizer_sentencepiece.cc reads them).
struct SentencePieceRules {
  // When a piece gains a leading "▁": always (the normalizer Prepend), when it does not start
  // with one (Metaspace "always"), that and only at the text's start (Metaspace "first"), never.
  enum class Prefix : uint8_t { Always, IfMissing, IfMissingAtStart, Never };
  bool metaspace = false; // the pre_tokenizer Metaspace does it (else the normalizer)
  Prefix prefix = Prefix::Always;
  bool split = false; // Metaspace's split: each "▁" starts a word
  bool byteFallback = true, fuseUnk = false;
  int32_t unk = -1;                      // model.unk_token's id, -1 if none
  int64_t stripStart = 1, stripStop = 0; // the decoder's Strip(" ", start, stop)
};

class Tokenizer {
public:
  // How text becomes words and characters become tokens (see above).
  enum class Kind : uint8_t { ByteLevel, SentencePiece };
  // A byte-level BPE's pre-split pattern (see above).
  enum class PreSplit : uint8_t { Gpt2, Llama3, Qwen2, O200k };

  // A token per byte: id = the byte's value.
  static Tokenizer bytes();
  // Learns merges from `text` until the vocabulary holds `vocabSize` tokens (256 bytes, the
  // merges and the special tokens) or no pair of tokens occurs twice. Each merge joins the most
  // frequent adjacent pair within words; ties go to the pair of lowest (left id, right id), so
  // training is deterministic. O(n log n + U log U) for n bytes of text and U pair updates (each
  // merge recounts only the words that hold its pair). The special tokens (non-empty UTF-8 texts;
  // others, and repeats, are left out) cut the text (no merge crosses or enters one) and take the
  // ids after the merges (one of a single byte is that byte's token). Error: a special token
  // that addSpecial refuses (one Hugging Face would read as another token: " ", "\n", "é").
  static Expected<Tokenizer> train(std::string_view text, int64_t vocabSize,
                                   std::span<const std::string> specials = {});
  // A tokenizer.json (BPE over ByteLevel, or SentencePiece-style). Errors name the file and the
  // entry (`normalizer`, `model.byte_fallback`, `added_tokens[2]`, ...).
  static Expected<Tokenizer> load(const std::string &path);
  // The same from the file's text; errors begin with `where`.
  static Expected<Tokenizer> parse(std::string_view json, const std::string &where);
  // GPT-2's vocab.json and merges.txt; its "<|endoftext|>" (where the vocab has it) a special
  // token, as GPT-2's tokenizer.json makes it.
  static Expected<Tokenizer> loadVocabMerges(const std::string &vocabPath,
                                             const std::string &mergesPath);

  // Makes `text` a special token: the id of the vocabulary's token with these bytes if there is
  // one, else a new id after the last. Errors: an empty text, invalid UTF-8, and (byte-level) a
  // text that Hugging Face would read as another token, which looks it up by its spelling in the
  // vocab: the bytes of a token spelled otherwise (" " is "Ġ", "\n" is "Ċ"), or the spelling of a
  // token of other bytes ("é" is byte 0xE9's).
  Expected<int32_t> addSpecial(const std::string &text);
  // The special tokens' ids, in the order they were added.
  const std::vector<int32_t> &specials() const { return specialIds_; }

  Kind kind() const { return kind_; }
  PreSplit preSplit() const { return preSplit_; }
  // The model's ignore_merges: a word that is a token of the vocab is that token (Llama 3).
  bool ignoresMerges() const { return ignoreMerges_; }
  // The normalizer NFC (Qwen2's): encode puts the text between special tokens in Unicode's
  // Normalization Form C first (runtime/unicode_nfc.h).
  bool normalizesNfc() const { return nfc_; }
  // The id the file's post_processor puts before a sequence (TemplateProcessing's single
  // "<s> $A": Llama's BOS), nullopt if it puts none (GPT-2's ByteLevel).
  std::optional<int32_t> bosId() const { return bos_; }
  // The end-of-sequence id: the special token the template puts after a sequence, else the special
  // token "</s>" (Llama, Mistral), "<|endoftext|>" (GPT-2) or "<|end_of_text|>" (Llama 3), the
  // first of these there is; nullopt if none. (A tokenizer.json does not name its EOS; the
  // tokenizer_config.json beside it does, and these are the names those files give.)
  std::optional<int32_t> eosId() const;
  // The model's beginning-of-sequence token, whether the post_processor puts it or not: bosId(),
  // else the special token "<s>" (Llama 2) or "<|begin_of_text|>" (Llama 3's first tokenizer.json,
  // whose post_processor puts none), else eosId() (GPT-2 starts a text with its EOS).
  std::optional<int32_t> beginId() const;
  // Whether a generated text ends at `id`: one of the ids the model names (setEndIds: a Hugging
  // Face config's eos_token_id, which a checkpoint's description keeps) if it names any, else
  // eosId(). Not part of the tokenizer.json (toJson leaves them out).
  bool endsText(int32_t id) const;
  void setEndIds(std::vector<int32_t> ids) { endIds_ = std::move(ids); }

  // The ids of the text's tokens: no BOS or EOS (bosId(), eosId()).
  std::vector<int32_t> encode(std::string_view text) const;
  // Error for an id outside the vocabulary.
  Expected<std::string> decode(std::span<const int32_t> ids) const;
  int64_t vocabSize() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t mergeCount() const { return static_cast<int64_t>(mergeList_.size()); }
  // The merges' pairs of ids, by rank.
  const std::vector<std::pair<int32_t, int32_t>> &merges() const { return mergeList_; }
  bool isBytes() const {
    return kind_ == Kind::ByteLevel && merges_.empty() && specialIds_.empty();
  }
  // The token's bytes (byte-level), or its text in the vocab (SentencePiece: "▁the", "<0x0A>").
  const std::string &token(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }
  // As a tokenizer.json that Hugging Face tokenizers and kiln read (the same tokenizer back).
  std::string toJson() const;

  // The pre-split of text into words (what encode merges within), by GPT-2's pattern, Llama 3's,
  // Qwen2's or GPT-4o's.
  static std::vector<std::string_view> words(std::string_view text,
                                             PreSplit split = PreSplit::Gpt2);

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
  // From tokens (spelled as `kind` spells them) and the merges' pairs, checked: the common end of
  // the two loaders. `where` prefixes errors.
  static Expected<Tokenizer>
  fromParts(std::vector<std::pair<std::string, int64_t>> vocab,
            const std::vector<std::pair<std::string, std::string>> &merges,
            const std::string &where, Kind kind = Kind::ByteLevel);
  void encodeWord(std::string_view word, std::vector<int32_t> &out) const;
  // Applies the merges to `ids`: the lowest rank first, of those the leftmost (Hugging Face's).
  void mergeByRank(std::vector<int32_t> &ids) const;
  // added_tokens of a tokenizer.json; errors name `path` and the entry.
  Status addSpecials(const nlohmann::json &added, const std::string &path);
  // Text without special tokens.
  void encodePlain(std::string_view text, std::vector<int32_t> &out) const;
  // The post_processor: what its TemplateProcessing puts around a sequence (bos_, eosAfter_).
  Status readTemplate(const nlohmann::json &processor, const std::string &path);
  nlohmann::json templateJson() const;
  // The token as the file's vocab spells it.
  std::string vocabText(int32_t id) const;
  // The id of the token the file's vocab spells so (Hugging Face's look-up of an added token).
  std::optional<int32_t> idOfSpelling(const std::string &spelled) const;
  nlohmann::json addedTokensJson() const;
  // The first of these special tokens there is.
  std::optional<int32_t> specialNamed(std::initializer_list<std::string_view> names) const;
  bool isSpecial(int32_t id) const {
    return std::find(specialIds_.begin(), specialIds_.end(), id) != specialIds_.end();
  }

  // SentencePiece-style BPE (tokenizer_sentencepiece.cc). Whether a file is one: its normalizer
  // or pre_tokenizer is of that kind (else it is read as byte-level).
  static bool isSentencePiece(const nlohmann::json &file);
  // The rules from the file (checked, errors naming the key), before the vocab is read.
  static Expected<SentencePieceRules> sentencePieceRules(const nlohmann::json &file,
                                                         const std::string &path);
  // Takes `rules` once the vocab is in: finds the byte and unk tokens (checked) and indexes the
  // one-character tokens.
  Status useSentencePiece(const SentencePieceRules &rules, const nlohmann::json &model,
                          const std::string &path);
  // A text between special tokens; `atStart`: it begins the text (Metaspace's "first").
  void encodePiece(std::string_view piece, bool atStart, std::vector<int32_t> &out) const;
  void encodeChars(std::string_view word, std::vector<int32_t> &out) const;
  std::string decodePieces(std::span<const int32_t> ids) const; // ids checked
  nlohmann::json sentencePieceJson() const;

  // A byte-level file's pre_tokenizer and model flags, checked (what the encoder here does not do
  // is refused, naming the key) before the vocab is read.
  struct ByteLevelRules {
    PreSplit preSplit = PreSplit::Gpt2;
    bool ignoreMerges = false;
    bool nfc = false; // the normalizer NFC
  };
  static Expected<ByteLevelRules> byteLevelRules(const nlohmann::json &file,
                                                 const std::string &path);
  // Either kind: what Hugging Face does to the ids after the model (cut, pad, wrap them in
  // [CLS] and [SEP]) would give other ids, refused by name.
  static Status checkAfterModel(const nlohmann::json &file, const std::string &path);
  nlohmann::json preTokenizerJson() const;

  Kind kind_ = Kind::ByteLevel;
  PreSplit preSplit_ = PreSplit::Gpt2;
  bool ignoreMerges_ = false;
  bool nfc_ = false;
  std::vector<std::string> tokens_;               // by id: the token's bytes (SentencePiece: text)
  std::unordered_map<std::string, int32_t> idOf_; // bytes (text) -> id
  // Byte-level: each byte's token. SentencePiece: its fallback token "<0xXX>" (-1: none).
  std::vector<int32_t> byteId_ = std::vector<int32_t>(256, -1);
  std::unordered_map<std::pair<int32_t, int32_t>, Merge, PairHash> merges_;
  std::vector<std::pair<int32_t, int32_t>> mergeList_; // by rank
  std::vector<std::string> specialTexts_;              // in the order added
  std::vector<int32_t> specialIds_;
  std::optional<int32_t> bos_, eosAfter_; // the post_processor's template's, around $A
  std::vector<int32_t> endIds_;           // setEndIds'
  SentencePieceRules spm_;
  std::unordered_map<char32_t, int32_t> charId_; // SentencePiece: the one-character tokens
};

} // namespace kiln::runtime

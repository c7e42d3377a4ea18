// SentencePiece-style BPE with byte fallback, as Llama 2, TinyLlama and Mistral ship it in a
// tokenizer.json (see tokenizer.h for what it does): the file's rules, checked; encode (characters,
// byte fallback, merges by rank over a heap) and decode (byte runs, "▁" as spaces, Strip); the file
// written back. Also the post_processor's template (Llama's "<s> $A"), which any kind may have.
// The reference is Hugging Face tokenizers (tests/tokenizers/ compares on real vocabularies).
#include "runtime/tokenizer.h"

#include <algorithm>

#include "runtime/json_text.h"
#include "support/utf8.h"
#include <fmt/format.h>

namespace kiln::runtime {

namespace {

using Prefix = SentencePieceRules::Prefix;

constexpr std::string_view kSpace = "\xE2\x96\x81"; // "▁" (U+2581): SentencePiece's space
constexpr std::string_view kExpectedNormalizer =
    "Sequence[Prepend(\"▁\"), Replace(\" \", \"▁\")], or the Replace alone";
constexpr std::string_view kExpectedDecoder =
    "Sequence[Replace(\"▁\", \" \"), ByteFallback, Fuse, Strip(\" \", N, M)], the Strip optional";

std::string typeOf(const Json &v) {
  const Json &t = memberOrNull(v, "type");
  return t.is_string() ? t.get<std::string>() : v.is_null() ? "null" : "an entry without a type";
}
bool is(const Json &v, std::string_view text) {
  return v.is_string() && v.get_ref<const std::string &>() == text;
}
// Replace with a {"String": from} pattern (a Regex one is refused) and `to` as its content.
bool isReplace(const Json &v, std::string_view from, std::string_view to) {
  const Json &pattern = memberOrNull(v, "pattern");
  return typeOf(v) == "Replace" && pattern.is_object() && pattern.size() == 1 &&
         is(memberOrNull(pattern, "String"), from) && is(memberOrNull(v, "content"), to);
}

// The steps of a Sequence (its `list` key) or the one step; each with its place in the file.
std::vector<std::pair<const Json *, std::string>> stepsOf(const Json &v, const char *list,
                                                          const std::string &name) {
  std::vector<std::pair<const Json *, std::string>> out;
  if (typeOf(v) != "Sequence" || !memberOrNull(v, list).is_array())
    return {{&v, name}};
  for (size_t k = 0; k < memberOrNull(v, list).size(); ++k)
    out.emplace_back(&memberOrNull(v, list)[k], fmt::format("{}.{}[{}]", name, list, k));
  return out;
}

Error unsupported(const std::string &path, const std::string &where, const Json &v,
                  std::string_view expected) {
  return makeError("{}: {}: {} is not supported (SentencePiece BPE: {})", path, where, typeOf(v),
                   expected);
}

// The normalizer: Llama 2's Prepend("▁") then Replace(" ", "▁"); without the Prepend, no prefix.
Expected<Prefix> normalizerPrefix(const Json &n, const std::string &path) {
  const auto steps = stepsOf(n, "normalizers", "normalizer");
  size_t k = 0;
  Prefix prefix = Prefix::Never;
  if (!steps.empty() && typeOf(*steps[0].first) == "Prepend") {
    if (!is(memberOrNull(*steps[0].first, "prepend"), kSpace))
      return makeError("{}: {}.prepend: only \"▁\" is supported", path, steps[0].second);
    prefix = Prefix::Always;
    k = 1;
  }
  if (k == steps.size())
    return makeError("{}: normalizer: Replace(\" \", \"▁\") is missing (SentencePiece BPE: {})",
                     path, kExpectedNormalizer);
  if (!isReplace(*steps[k].first, " ", kSpace))
    return unsupported(path, steps[k].second, *steps[k].first, kExpectedNormalizer);
  if (k + 1 < steps.size())
    return unsupported(path, steps[k + 1].second, *steps[k + 1].first, kExpectedNormalizer);
  return prefix;
}

// The pre_tokenizer Metaspace (newer files): prepend_scheme, else the older add_prefix_space
// (true: "always"), and split (default true), as Hugging Face reads them.
Status readMetaspace(const Json &p, const std::string &path, SentencePieceRules &rules) {
  if (!is(memberOrNull(p, "replacement"), kSpace))
    return makeError("{}: pre_tokenizer.replacement: only \"▁\" is supported", path);
  const Json &scheme = memberOrNull(p, "prepend_scheme"),
             &add = memberOrNull(p, "add_prefix_space"), &split = memberOrNull(p, "split");
  if (!add.is_null() && !add.is_boolean())
    return makeError("{}: pre_tokenizer.add_prefix_space is not true or false", path);
  if (!split.is_null() && !split.is_boolean())
    return makeError("{}: pre_tokenizer.split is not true or false", path);
  rules.metaspace = true;
  rules.split = split.is_null() || split.get<bool>();
  rules.prefix = is(scheme, "first")   ? Prefix::IfMissingAtStart
                 : is(scheme, "never") ? Prefix::Never
                                       : Prefix::IfMissing;
  if (!scheme.is_null() && !is(scheme, "first") && !is(scheme, "never") && !is(scheme, "always"))
    return makeError("{}: pre_tokenizer.prepend_scheme: expected \"first\", \"always\" or "
                     "\"never\"",
                     path);
  if (add == false && !scheme.is_null() && !is(scheme, "never"))
    return makeError("{}: pre_tokenizer: add_prefix_space false contradicts prepend_scheme", path);
  if (add == false)
    rules.prefix = Prefix::Never;
  return {};
}

// The decoder: Replace("▁", " "), ByteFallback, Fuse, then an optional Strip(" ", start, stop).
Status readDecoder(const Json &d, const std::string &path, SentencePieceRules &rules) {
  const auto steps = stepsOf(d, "decoders", "decoder");
  const char *kinds[] = {"Replace", "ByteFallback", "Fuse", "Strip"};
  rules.stripStart = rules.stripStop = 0;
  for (size_t k = 0; k < steps.size(); ++k) {
    const auto &[v, where] = steps[k];
    if (k >= 4 || typeOf(*v) != kinds[k] || (k == 0 && !isReplace(*v, kSpace, " ")))
      return unsupported(path, where, *v, kExpectedDecoder);
    if (k < 3)
      continue;
    const Json &start = memberOrNull(*v, "start"), &stop = memberOrNull(*v, "stop");
    if (!is(memberOrNull(*v, "content"), " ") || !start.is_number_unsigned() ||
        !stop.is_number_unsigned())
      return makeError("{}: {}: expected Strip(\" \", start, stop) with counts >= 0", path, where);
    rules.stripStart = start.get<int64_t>(), rules.stripStop = stop.get<int64_t>();
  }
  if (steps.size() < 3)
    return makeError("{}: decoder: expected {}", path, kExpectedDecoder);
  return {};
}

Status readModelFlags(const Json &model, const std::string &path, SentencePieceRules &rules) {
  for (const char *key : {"byte_fallback", "fuse_unk", "ignore_merges"})
    if (!memberOrNull(model, key).is_null() && !memberOrNull(model, key).is_boolean())
      return makeError("{}: model.{} is not true or false", path, key);
  if (memberOrNull(model, "ignore_merges") == true)
    return makeError("{}: model.ignore_merges is not supported", path);
  for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!memberOrNull(model, key).is_null() && !is(memberOrNull(model, key), ""))
      return makeError("{}: model.{} is not supported", path, key);
  if (!memberOrNull(model, "dropout").is_null() && memberOrNull(model, "dropout") != 0)
    return makeError("{}: model.dropout (BPE dropout) is not supported", path);
  rules.byteFallback = memberOrNull(model, "byte_fallback") == true;
  rules.fuseUnk = memberOrNull(model, "fuse_unk") == true;
  return {};
}

// The ByteFallback decoder's byte token: 6 bytes "<0x" XX ">", XX as Rust's u8::from_str_radix(_,
// 16) takes it (either case; also "+X", which it reads as a sign).
std::optional<uint8_t> fallbackByte(std::string_view t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>')
    return std::nullopt;
  auto digit = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
  };
  const int hi = t[3] == '+' ? 0 : digit(t[3]), lo = digit(t[4]);
  if (hi < 0 || lo < 0)
    return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

} // namespace

// (A normalizer beside GPT-2's ByteLevel pre-tokenizer stays byte-level's to refuse.)
bool Tokenizer::isSentencePiece(const Json &file) {
  const std::string n = typeOf(memberOrNull(file, "normalizer")),
                    p = typeOf(memberOrNull(file, "pre_tokenizer"));
  return p == "Metaspace" ||
         (p != "ByteLevel" && (n == "Sequence" || n == "Prepend" || n == "Replace"));
}

Expected<SentencePieceRules> Tokenizer::sentencePieceRules(const Json &file,
                                                           const std::string &path) {
  SentencePieceRules rules;
  const Json &normalizer = memberOrNull(file, "normalizer"),
             &pre = memberOrNull(file, "pre_tokenizer");
  if (typeOf(pre) == "Metaspace") {
    if (!normalizer.is_null())
      return makeError("{}: normalizer: {} beside the pre_tokenizer Metaspace is not supported",
                       path, typeOf(normalizer));
    if (Status st = readMetaspace(pre, path, rules); !st)
      return st.error();
  } else {
    if (!pre.is_null())
      return makeError("{}: pre_tokenizer: {} is not supported (SentencePiece BPE: none, or "
                       "Metaspace)",
                       path, typeOf(pre));
    Expected<Prefix> prefix = normalizerPrefix(normalizer, path);
    if (!prefix)
      return prefix.error();
    rules.prefix = *prefix;
  }
  if (Status st = readDecoder(memberOrNull(file, "decoder"), path, rules); !st)
    return st.error();
  if (Status st = readModelFlags(memberOrNull(file, "model"), path, rules); !st)
    return st.error();
  return rules;
}

Status Tokenizer::useSentencePiece(const SentencePieceRules &rules, const Json &model,
                                   const std::string &path) {
  spm_ = rules;
  for (size_t id = 0; id < tokens_.size(); ++id) {
    if (tokens_[id].empty())
      continue;
    auto [c, n] = decodeUtf8At(tokens_[id], 0);
    if (c && n == tokens_[id].size())
      charId_.emplace(*c, static_cast<int32_t>(id));
  }
  // Hugging Face looks the bytes up as format!("<{b:#04X}>"): "<0x0A>", exactly. A byte is only
  // looked up for a character without a token of its own, so an ASCII character's byte may be
  // missing where the character has one (Gemma's vocab has "\t", not "<0x09>").
  for (int b = 0; b < 256 && spm_.byteFallback; ++b) {
    const std::string name = fmt::format("<0x{:02X}>", b);
    auto it = idOf_.find(name);
    if (it == idOf_.end() && b < 0x80 && charId_.contains(static_cast<char32_t>(b)))
      continue; // (byteId_[b] stays -1, never read: encodeChars finds the character)
    if (it == idOf_.end())
      return makeError("{}: model.byte_fallback: the vocab has no token \"{}\" (byte fallback "
                       "needs <0x00> to <0xFF>, but for an ASCII character that is a token)",
                       path, name);
    byteId_[b] = it->second;
  }
  const Json &unk = memberOrNull(model, "unk_token");
  if (!unk.is_null()) {
    auto it = unk.is_string() ? idOf_.find(unk.get<std::string>()) : idOf_.end();
    if (it == idOf_.end())
      return makeError("{}: model.unk_token: {} is not a token of the vocab", path,
                       unk.is_string() ? jsonQuote(unk.get<std::string>()) : unk.dump());
    spm_.unk = it->second;
  } else if (!spm_.byteFallback) {
    return makeError("{}: model.unk_token: a SentencePiece BPE without byte_fallback needs one "
                     "(else an unknown character would vanish)",
                     path);
  }
  return {};
}

void Tokenizer::encodePiece(std::string_view piece, bool atStart, std::vector<int32_t> &out) const {
  std::string text;
  text.reserve(piece.size() + kSpace.size());
  const bool missing = !piece.starts_with(' ') && !piece.starts_with(kSpace);
  if (spm_.prefix == Prefix::Always || (spm_.prefix == Prefix::IfMissing && missing) ||
      (spm_.prefix == Prefix::IfMissingAtStart && missing && atStart))
    text += kSpace;
  for (char c : piece)
    c == ' ' ? text += kSpace : text += c;
  if (!spm_.split)
    return encodeChars(text, out);
  // Metaspace's split: a word before each "▁" (the "▁" begins the next). Words repeat.
  std::unordered_map<std::string_view, std::vector<int32_t>> cache;
  for (size_t from = 0; from < text.size();) {
    const size_t end = std::min(text.find(kSpace, from + 1), text.size());
    const std::string_view word = std::string_view(text).substr(from, end - from);
    auto it = cache.find(word);
    if (it == cache.end()) {
      std::vector<int32_t> ids;
      encodeChars(word, ids);
      it = cache.emplace(word, std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
    from = end;
  }
}

// As Hugging Face's BPE::merge_word: each character's token, else its bytes' tokens, else unk (a
// run of unknown characters one unk with fuse_unk). A byte of invalid UTF-8 (a text Hugging Face
// cannot take) is a character without a token.
void Tokenizer::encodeChars(std::string_view word, std::vector<int32_t> &out) const {
  std::vector<int32_t> ids;
  bool afterUnk = false;
  for (size_t i = 0; i < word.size();) {
    auto [c, n] = decodeUtf8At(word, i);
    auto it = c ? charId_.find(*c) : charId_.end();
    const bool unknown = it == charId_.end() && !spm_.byteFallback;
    if (it != charId_.end())
      ids.push_back(it->second);
    else if (spm_.byteFallback)
      for (size_t k = i; k < i + n; ++k)
        ids.push_back(byteId_[static_cast<unsigned char>(word[k])]);
    else if (!afterUnk || !spm_.fuseUnk)
      ids.push_back(spm_.unk);
    afterUnk = unknown;
    i += n;
  }
  mergeByRank(ids);
  out.insert(out.end(), ids.begin(), ids.end());
}

// The decoder: each token's text with "▁" as " " (Replace); a run of byte tokens as its bytes, or
// one U+FFFD per byte if the run is not valid UTF-8 as a whole (ByteFallback); all joined (Fuse);
// then Strip's leading and trailing spaces.
std::string Tokenizer::decodePieces(std::span<const int32_t> ids) const {
  std::string out, run;
  auto flush = [&] {
    if (isValidUtf8(run))
      out += run;
    else
      for (size_t k = 0; k < run.size(); ++k)
        out += "\xEF\xBF\xBD"; // U+FFFD
    run.clear();
  };
  for (int32_t id : ids) {
    const std::string &t = tokens_[static_cast<size_t>(id)];
    if (std::optional<uint8_t> b = fallbackByte(t)) {
      run += static_cast<char>(*b);
      continue;
    }
    flush();
    for (size_t at = 0, next; at < t.size(); at = next + kSpace.size()) {
      next = std::min(t.find(kSpace, at), t.size());
      out.append(t, at, next - at);
      if (next < t.size())
        out += ' ';
    }
  }
  flush();
  size_t start = 0, stop = out.size();
  while (start < stop && start < static_cast<size_t>(spm_.stripStart) && out[start] == ' ')
    ++start;
  while (stop > start && out.size() - stop < static_cast<size_t>(spm_.stripStop) &&
         out[stop - 1] == ' ')
    --stop;
  return out.substr(start, stop - start);
}

Json Tokenizer::sentencePieceJson() const {
  const std::string space(kSpace);
  Json vocab = Json::object();
  for (size_t id = 0; id < tokens_.size(); ++id)
    vocab[tokens_[id]] = id;
  // "left right", unless a token has a space: then the newer ["left", "right"] for every merge.
  const bool arrays = std::any_of(mergeList_.begin(), mergeList_.end(), [&](auto m) {
    return tokens_[m.first].find(' ') != std::string::npos ||
           tokens_[m.second].find(' ') != std::string::npos;
  });
  Json merges = Json::array();
  for (auto [l, r] : mergeList_)
    merges.push_back(arrays ? Json::array({tokens_[l], tokens_[r]})
                            : Json(tokens_[l] + " " + tokens_[r]));
  Json normalizers = Json::array();
  if (spm_.prefix == Prefix::Always)
    normalizers.push_back(Json{{"type", "Prepend"}, {"prepend", space}});
  normalizers.push_back(
      Json{{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}});
  const char *scheme = spm_.prefix == Prefix::IfMissingAtStart ? "first"
                       : spm_.prefix == Prefix::Never          ? "never"
                                                               : "always";
  const Json metaspace = {{"type", "Metaspace"},
                          {"replacement", space},
                          {"prepend_scheme", scheme},
                          {"split", spm_.split}};
  Json decoders =
      Json::array({Json{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
                   Json{{"type", "ByteFallback"}}, Json{{"type", "Fuse"}}});
  if (spm_.stripStart || spm_.stripStop)
    decoders.push_back(Json{
        {"type", "Strip"}, {"content", " "}, {"start", spm_.stripStart}, {"stop", spm_.stripStop}});
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", addedTokensJson()},
          {"normalizer",
           spm_.metaspace ? Json() : Json{{"type", "Sequence"}, {"normalizers", normalizers}}},
          {"pre_tokenizer", spm_.metaspace ? metaspace : Json()},
          {"post_processor", bos_ || eosAfter_ ? templateJson() : Json()},
          {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", spm_.unk >= 0 ? Json(tokens_[spm_.unk]) : Json()},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", spm_.fuseUnk},
            {"byte_fallback", spm_.byteFallback},
            {"vocab", vocab},
            {"merges", merges}}}};
}

// The post_processor: a TemplateProcessing, alone or in a Sequence (Llama 3's, after ByteLevel),
// whose "single" is [SpecialToken]? Sequence A [SpecialToken]? -- "<s> $A" is Llama's BOS. Other
// processors (GPT-2's ByteLevel: offsets only) add no token, and the "pair" template is unused
// here (kiln encodes one text at a time).
Status Tokenizer::readTemplate(const Json &p, const std::string &path) {
  const Json *t = &p;
  if (typeOf(p) == "Sequence") {
    const Json &list = memberOrNull(p, "processors");
    for (size_t k = 0; list.is_array() && k < list.size(); ++k)
      if (typeOf(list[k]) == "TemplateProcessing")
        t = &list[k];
  }
  if (typeOf(*t) != "TemplateProcessing")
    return {};
  const std::string where = path + ": post_processor";
  const Json &single = memberOrNull(*t, "single");
  if (!single.is_array())
    return makeError("{}.single is not an array", where);
  bool sawA = false;
  for (size_t k = 0; k < single.size(); ++k) {
    const Json &e = single[k];
    if (e.size() == 1 && is(memberOrNull(memberOrNull(e, "Sequence"), "id"), "A") && !sawA) {
      sawA = true;
      continue;
    }
    std::optional<int32_t> &slot = sawA ? eosAfter_ : bos_;
    const Json &name = memberOrNull(memberOrNull(e, "SpecialToken"), "id");
    if (e.size() != 1 || !name.is_string() || slot)
      return makeError("{}.single[{}]: expected [SpecialToken]? Sequence A [SpecialToken]? (one "
                       "token at most on each side of $A)",
                       where, k);
    const std::string n = name.get<std::string>();
    const Json &ids = memberOrNull(memberOrNull(memberOrNull(*t, "special_tokens"), n), "ids");
    if (!ids.is_array() || ids.size() != 1 || !ids[0].is_number_integer() ||
        ids[0].get<int64_t>() < 0 || ids[0].get<int64_t>() >= vocabSize())
      return makeError("{}.special_tokens: {} is not {{\"ids\": [ID]}} with an id of the vocab",
                       where, jsonQuote(n));
    slot = ids[0].get<int32_t>();
  }
  if (!sawA)
    return makeError("{}.single has no Sequence A (the text)", where);
  return {};
}

Json Tokenizer::templateJson() const {
  // The tokens' texts as the vocab spells them name them.
  auto text = [&](int32_t id) { return vocabText(id); };
  Json special = Json::object();
  auto piece = [&](std::optional<int32_t> id, int type) {
    special[text(*id)] = {
        {"id", text(*id)}, {"ids", Json::array({*id})}, {"tokens", Json::array({text(*id)})}};
    return Json{{"SpecialToken", {{"id", text(*id)}, {"type_id", type}}}};
  };
  auto sequence = [](const char *name, int type) {
    return Json{{"Sequence", {{"id", name}, {"type_id", type}}}};
  };
  Json single = Json::array(), pair = Json::array();
  for (int type : {0, 1}) {
    Json &to = type ? pair : single;
    if (bos_)
      to.push_back(piece(bos_, type));
    to.push_back(sequence(type ? "B" : "A", type));
    if (eosAfter_)
      to.push_back(piece(eosAfter_, type));
  }
  pair.insert(pair.begin(), single.begin(), single.end());
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", pair},
          {"special_tokens", special}};
}

} // namespace kiln::runtime

// Translation with an encoder-decoder's encode and decode programs: the source through the
// encoder once, then beam search over the cached decoder (see generation.h).
#include <algorithm>

#include "runtime/generation.h"
#include "runtime/generation_parts.h"
#include "runtime/tasks.h"

namespace kiln::runtime {

using namespace gen;

Expected<std::vector<Beam>> translate(Executable &encode, Executable &decode,
                                      const Tokenizer &tokenizer, const std::string &source,
                                      const BeamOptions &o, Generated *stats) {
  const Program &enc = encode.program(), &dec = decode.program();
  const Symbol *src = enc.argument("src"), *decSrc = dec.argument("src");
  const Symbol *tgt = dec.argument("tgt"), *pos = dec.argument("pos");
  const Symbol *logits = dec.output("logits");
  if (!src || src->shape.size() != 2 || !decSrc || decSrc->shape != src->shape || !tgt ||
      tgt->shape != std::vector<int64_t>{src->shape[0], 1} || !pos ||
      pos->shape != std::vector<int64_t>{src->shape[0]} || !logits || logits->shape.size() != 3)
    return makeError("programs @{} and @{} are not the encode and decode programs of one "
                     "encoder-decoder (models::buildTransformerCached)",
                     enc.name, dec.name);
  const int64_t rows = src->shape[0], srcLen = src->shape[1], vocab = logits->shape[2];
  const int64_t width = o.width > 0 ? o.width : rows;
  if (width > rows)
    return makeError("{} beams: the decode program @{} decodes {} row{} at a time", width, dec.name,
                     rows, rows == 1 ? "" : "s");
  const int64_t length = pos->range > 0 ? pos->range : 1; // the decoder's cache: tgt_len
  const int64_t textVocab = tokenizer.vocabSize();
  if (textVocab + kFirstContent > vocab)
    return makeError("the tokenizer's {} tokens and 3 special ids do not fit the model's vocab "
                     "of {}",
                     textVocab, vocab);
  std::vector<int32_t> ids = tokenizer.encode(source);
  if (ids.empty())
    return makeError("the source is empty");
  if (static_cast<int64_t>(ids.size()) > srcLen)
    return makeError("the source has {} tokens, but the model reads at most {} (src_len)",
                     ids.size(), srcLen);
  // The source in every row (the beams share it), shifted past the special ids, padded.
  Generated g;
  g.window = length, g.cached = true;
  const auto began = Clock::now();
  HostTensor in(src->dtype, src->shape);
  for (int64_t r = 0; r < rows; ++r)
    for (size_t t = 0; t < ids.size(); ++t)
      in.setInt(r * srcLen + static_cast<int64_t>(t), ids[t] + kFirstContent);
  if (Status st = encode.write(*src, in); !st)
    return st.error();
  if (Status st = encode.run(); !st)
    return st.error();
  if (Status st = decode.write(*decSrc, in); !st)
    return st.error();
  for (const Symbol &s : enc.symbols)
    if (s.kind == Symbol::Kind::Output)
      if (Status st = decode.write(s.name, encode.read(s)); !st)
        return makeError("the decode program does not take the encoder's \"{}\": {}", s.name,
                         st.error().message);
  g.prefills = 1, g.prefillTokens = static_cast<int64_t>(ids.size());
  g.prefillSeconds = secondsSince(began);
  // Decoding from BOS at position 0, a token per step, until EOS or the cache is full.
  std::vector<const Symbol *> caches;
  for (const Symbol &s : dec.symbols)
    if (s.kind == Symbol::Kind::State)
      caches.push_back(&s);
  HostTensor token(tgt->dtype, tgt->shape), at(pos->dtype, pos->shape);
  int64_t step = 0;
  auto next = [&](const std::vector<Hyp> &live) -> Expected<NextLogits> {
    const auto t0 = Clock::now();
    for (int64_t r = 0; r < rows; ++r) {
      const size_t row = static_cast<size_t>(r);
      token.setInt(r, row < live.size() ? live[row].seq.back() : kPad);
      at.setInt(r, step);
    }
    if (Status st = decode.write(*tgt, token); !st)
      return st.error();
    if (Status st = decode.write(*pos, at); !st)
      return st.error();
    if (Status st = decode.run(); !st)
      return st.error();
    // After --max-new tokens only EOS may follow, with its log p among all the tokens in the
    // score (a softmax over EOS alone gave it log p = 0: a beam cut off by the length outranked
    // one the model ended).
    const int64_t only = step == o.maxNew ? kEos : -1;
    ++step, ++g.decodeSteps, g.decodeTokens += static_cast<int64_t>(live.size());
    g.decodeSeconds += secondsSince(t0);
    return NextLogits{decode.read(*logits), 1, 0, kEos, kFirstContent + textVocab, only};
  };
  auto follow = [&](std::span<const size_t> from) -> Status {
    for (const Symbol *s : caches)
      if (Status st = reorderRows(decode, *s, from); !st)
        return st;
    return {};
  };
  // EOS that the length forced (BOS, max_new tokens, EOS) does not finish a beam: it is cut off.
  auto done = [&](const Hyp &h) {
    return h.seq.back() == kEos && static_cast<int64_t>(h.seq.size()) <= o.maxNew + 1;
  };
  const int64_t steps = std::min(o.maxNew + 1, length); // the tokens and EOS
  Expected<std::vector<Hyp>> hyps =
      searchBeams(static_cast<size_t>(width), steps, {static_cast<int32_t>(kBos)}, next, follow,
                  done, o.onProgress);
  if (!hyps)
    return hyps.error();
  g.tokens = g.decodeTokens;
  if (stats)
    *stats = std::move(g);
  // The text of the tokens between BOS and EOS.
  return rankBeams(*hyps, 1, o.lengthPenalty, static_cast<size_t>(width), tokenizer, {},
                   [](std::span<const int32_t> t) {
                     std::vector<int32_t> out;
                     for (int32_t id : t)
                       if (id >= kFirstContent)
                         out.push_back(id - static_cast<int32_t>(kFirstContent));
                     return out;
                   });
}

} // namespace kiln::runtime

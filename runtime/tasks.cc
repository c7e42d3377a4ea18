// Batch generators for the synthetic tasks (see tasks.h).
#include "runtime/tasks.h"

#include <algorithm>

#include "support/rng.h"

namespace kiln::runtime {

std::string_view corpus() {
  // Our own plain prose, long enough that a tiny model cannot memorise every window quickly.
  return "A compiler reads a program and writes another program that means the same thing but "
         "runs faster. A graph compiler for neural networks reads a computation graph: nodes "
         "are operations such as matrix products, additions and softmax; edges carry tensors "
         "from one operation to the next. The compiler can see the whole graph at once, so it "
         "can fuse many small steps into one large step, reuse memory that is no longer needed, "
         "and choose the fastest way to compute each part on the machine at hand.\n"
         "To train a network we need the gradient of the loss with respect to every weight. "
         "Reverse mode automatic differentiation computes all of them in one backward sweep: it "
         "walks the graph from the loss back to the inputs, and at each node it applies the "
         "chain rule, turning the gradient of the node's output into gradients of its inputs. "
         "When a value is used twice, the gradients from both uses add up. When a value was "
         "broadcast, the gradient is summed back to its original shape.\n"
         "Attention lets every position of a sequence look at every other position. Each "
         "position asks a question, the query; every position offers a key and a value. The "
         "answer is a weighted average of the values, with weights from how well each key "
         "matches the query, normalised by a softmax. A causal mask hides the future from a "
         "language model, so that it must predict the next word from the words before it.\n"
         "Layer normalisation keeps activations in a steady range: it subtracts the mean of "
         "each row, divides by its standard deviation, and then scales and shifts the result "
         "with learned weights. Placed before each sublayer it makes deep stacks easy to "
         "train; placed after the residual sum it follows the original paper.\n"
         "The small models here learn to copy and to reverse short strings of symbols, to "
         "predict the next byte of this very text, and to fill in bytes that were masked out. "
         "None of these tasks is hard, which is the point: a correct training step makes the "
         "loss fall quickly, and a wrong one does not.\n";
}

Expected<TaskKind> parseTask(std::string_view name) {
  for (TaskKind k :
       {TaskKind::Copy, TaskKind::Reverse, TaskKind::Lm, TaskKind::Mlm, TaskKind::Pairs})
    if (taskName(k) == name)
      return k;
  return makeError("unknown task '{}' (expected copy, reverse, lm, mlm or pairs)", name);
}

std::string_view taskName(TaskKind k) {
  switch (k) {
  case TaskKind::Copy:
    return "copy";
  case TaskKind::Reverse:
    return "reverse";
  case TaskKind::Lm:
    return "lm";
  case TaskKind::Mlm:
    return "mlm";
  case TaskKind::Pairs:
    return "pairs";
  }
  return "?";
}

TextSplit splitText(std::string_view text, double fraction) {
  const auto held = static_cast<size_t>(static_cast<double>(text.size()) * fraction);
  const size_t trained = text.size() - std::min(held, text.size());
  return {text.substr(0, trained), text.substr(trained)};
}

TextSplit splitLines(std::string_view text, double fraction) {
  TextSplit split = splitText(text, fraction);
  const size_t cut = split.train.size();
  if (cut == 0 || cut == text.size() || text[cut - 1] == '\n')
    return split;
  const size_t next = text.find('\n', cut);
  const size_t at = next == std::string_view::npos ? text.size() : next + 1;
  return {text.substr(0, at), text.substr(at)};
}

PairLines pairLinesLongerThan(std::span<const int32_t> stream, int64_t length) {
  PairLines p;
  int64_t run = 0; // ids of the current half
  bool longer = false;
  for (const int32_t id : stream) {
    if (id != kPairTab && id != kPairEnd) {
      longer = longer || ++run > length;
      continue;
    }
    run = 0;
    if (id == kPairEnd) {
      ++p.lines, p.cut += longer;
      longer = false;
    }
  }
  return p;
}

Expected<std::vector<int32_t>>
pairTokens(std::string_view text,
           const std::function<std::vector<int32_t>(std::string_view)> &encode, int64_t firstLine) {
  std::vector<int32_t> out;
  int64_t number = firstLine - 1;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos)
      end = text.size();
    std::string_view line = text.substr(at, end - at);
    at = end + 1, ++number;
    if (line.ends_with('\r'))
      line.remove_suffix(1);
    if (line.empty())
      continue;
    const size_t tab = line.find('\t');
    if (tab == std::string_view::npos || tab == 0 || tab + 1 == line.size())
      return makeError("line {}: expected source<TAB>target, both non-empty", number);
    // A third column (a TSV of more fields) would otherwise train as part of the target.
    if (const size_t second = line.find('\t', tab + 1); second != std::string_view::npos)
      return makeError("line {}: has a second tab (column {}): expected source<TAB>target, one "
                       "tab",
                       number, second + 1);
    for (const std::string_view half : {line.substr(0, tab), line.substr(tab + 1)}) {
      const std::vector<int32_t> ids = encode(half);
      out.insert(out.end(), ids.begin(), ids.end());
      out.push_back(half.data() == line.data() ? kPairTab : kPairEnd);
    }
  }
  return out;
}

Status checkTaskShape(TaskKind kind, const TaskShape &s) {
  if (s.batch <= 0)
    return makeError("task {}: batch must be positive", taskName(kind));
  if (isEncoderDecoderTask(kind) && s.srcLen > 0 && s.tgtLen > 0 && s.tgtLen != s.srcLen + 1)
    return makeError(
        "the target length tgt_len={} must be src_len + 1 = {} (an encoder-decoder's target is "
        "BOS and up to src_len tokens, or those and EOS): leave tgt_len out, or set it to {}",
        s.tgtLen, s.srcLen + 1, s.srcLen + 1);
  return {};
}

namespace {

// The model's and the tokenizer's part of checkTask: what no text changes.
Status checkModel(TaskKind kind, const TaskShape &s) {
  if (Status st = checkTaskShape(kind, s); !st)
    return st;
  if (kind == TaskKind::Pairs) {
    if (s.srcLen <= 0)
      return makeError("task pairs: the source length must be positive");
    if (s.vocab < s.textVocab + kFirstContent)
      return makeError("task pairs: {} text ids and 3 special ids (pad, bos, eos) need vocab >= "
                       "{}, got {}",
                       s.textVocab, s.textVocab + kFirstContent, s.vocab);
    return {};
  }
  if (kind == TaskKind::Copy || kind == TaskKind::Reverse) {
    if (s.srcLen <= 0)
      return makeError("task {}: the source length must be positive", taskName(kind));
    if (s.vocab <= kFirstContent)
      return makeError("task {}: vocab {} leaves no content tokens (ids 0-2 are pad, bos, eos)",
                       taskName(kind), s.vocab);
    return {};
  }
  if (s.seqLen <= 0)
    return makeError("task {}: the sequence length must be positive, got {}", taskName(kind),
                     s.seqLen);
  if (s.textVocab == 256 && s.vocab < 256)
    return makeError("task {}: byte tokens need vocab >= 256, got {}", taskName(kind), s.vocab);
  // (mlm's [MASK], vocab - 1, must be no token of the tokenizer's.)
  const int64_t least = s.textVocab + (kind == TaskKind::Mlm ? 1 : 0);
  if (s.textVocab != 256 && s.vocab < least)
    return makeError("task {}: the tokenizer's {} tokens need vocab >= {}, got {}", taskName(kind),
                     s.textVocab, least, s.vocab);
  return {};
}

// The text's part: a pairs text's lines, an lm or mlm text's length, and that no id of an mlm
// text is [MASK]'s (vocab - 1: byte 0xff of a binary text where vocab is 256) or the pad_id the
// model masks (byte 0 by default).
Status checkText(TaskKind kind, const TaskShape &s, std::span<const int32_t> tokens) {
  if (kind == TaskKind::Mlm)
    if (auto at = std::find(tokens.begin(), tokens.end(), s.vocab - 1); at != tokens.end())
      return makeError(
          "task mlm: the text holds id {} (at token {}), which is [MASK]'s, vocab - 1: a model "
          "of --set vocab={} or more, or a text without it",
          s.vocab - 1, at - tokens.begin(), s.vocab + 1);
  if (kind == TaskKind::Mlm && s.pad >= 0) {
    // (A pad_id past the text's ids and below [MASK]'s: vocab = that + 2.)
    const int64_t vocab = std::max(s.vocab, s.textVocab + 1) + 1;
    const std::string hint = fmt::format("--set vocab={} --set pad_id={}", vocab, vocab - 2);
    if (s.pad == s.vocab - 1)
      return makeError("task mlm: pad_id {} is [MASK]'s id, vocab - 1: the model would mask the "
                       "masked tokens as padding ({}, say)",
                       s.pad, hint);
    if (auto at = std::find(tokens.begin(), tokens.end(), s.pad); at != tokens.end())
      return makeError("task mlm: the text holds id {} (at token {}), which is the model's pad_id: "
                       "the model would mask it as padding (give it an id no token takes: {}, "
                       "say)",
                       s.pad, at - tokens.begin(), hint);
  }
  if (kind == TaskKind::Pairs && std::find(tokens.begin(), tokens.end(), kPairEnd) == tokens.end())
    return makeError("task pairs: the text has no source<TAB>target line");
  // lm's window is a sequence and its next token; mlm's a sequence.
  const int64_t window = kind == TaskKind::Lm ? s.seqLen + 1 : s.seqLen;
  if ((kind == TaskKind::Lm || kind == TaskKind::Mlm) &&
      static_cast<size_t>(window) > tokens.size())
    return makeError("task {}: the text has {} {}, and {}: give a longer text, or a shorter "
                     "sequence",
                     taskName(kind), tokens.size(), s.textVocab == 256 ? "bytes" : "tokens",
                     kind == TaskKind::Lm
                         ? fmt::format("a training window takes {} (a sequence of {} and the next)",
                                       window, s.seqLen)
                         : fmt::format("a window takes a sequence's {}", window));
  return {};
}

} // namespace

Status checkTask(TaskKind kind, const TaskShape &s, std::span<const int32_t> tokens,
                 std::string_view textName) {
  if (Status st = checkModel(kind, s); !st)
    return st;
  Status st = checkText(kind, s, tokens);
  if (st || textName.empty())
    return st;
  return makeError("{}: {}", textName, st.error().message);
}

Status checkTask(TaskKind kind, const TaskShape &shape, std::string_view text) {
  return checkTask(kind, shape, byteTokens(text));
}

Expected<std::string> continuedTask(const std::string &trained, bool withData,
                                    std::string_view where) {
  if (!trained.empty())
    if (Expected<TaskKind> known = parseTask(trained); !known)
      return makeError("{}: metadata \"kiln.task\": {} (give --task)", where,
                       known.error().message);
  if (withData && (trained == "copy" || trained == "reverse"))
    return std::string();
  return trained;
}

Error pairsNeedData(std::string_view flag, std::string_view where) {
  return makeError("{} {}: the checkpoint was trained on task pairs, which needs --data FILE "
                   "(lines of source<TAB>target): give it, or --task copy or reverse",
                   flag, where);
}

Status checkPadId(int64_t padId, std::string_view what) {
  if (padId == kPad)
    return {};
  return makeError("{} pads with id {} (BOS is {}, EOS {}, content from {}): the model's pad_id "
                   "must be {}, got {}",
                   what, kPad, kBos, kEos, kFirstContent, kPad, padId);
}

std::vector<int32_t> byteTokens(std::string_view text) {
  std::vector<int32_t> ids(text.size());
  for (size_t k = 0; k < text.size(); ++k)
    ids[k] = static_cast<unsigned char>(text[k]);
  return ids;
}

namespace {

// A counter-based stream per (seed, task, batch index); draw(k) is the k-th 64-bit value.
struct Stream {
  uint64_t key;
  uint64_t n = 0;
  Stream(uint64_t seed, TaskKind kind, uint64_t index)
      : key(rng::mix64(seed * 0x9e3779b97f4a7c15ull +
                       static_cast<uint64_t>(kind) * 0x632be59bd9b4e019ull + index)) {}
  uint64_t next() { return rng::bits(key, n++); }
  int64_t below(int64_t bound) {
    return static_cast<int64_t>(next() % static_cast<uint64_t>(bound));
  }
};

Batch seq2seq(bool reverse, const TaskShape &s, Stream &r) {
  int64_t B = s.batch, S = s.srcLen, T = S + 1;
  BatchTensor src{"src", {B, S}, {}}, tgt{"tgt", {B, T}, {}}, targets{"targets", {B, T}, {}};
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> x(S);
    for (int64_t &t : x)
      t = kFirstContent + r.below(s.vocab - kFirstContent);
    std::vector<int64_t> y = x;
    if (reverse)
      std::reverse(y.begin(), y.end());
    y.push_back(kEos);
    src.values.insert(src.values.end(), x.begin(), x.end());
    tgt.values.push_back(kBos); // teacher forcing: the decoder sees BOS y[:-1]
    tgt.values.insert(tgt.values.end(), y.begin(), y.end() - 1);
    targets.values.insert(targets.values.end(), y.begin(), y.end());
  }
  return {src, tgt, targets};
}

Batch lm(const TaskShape &s, Stream &r, std::span<const int32_t> text) {
  int64_t B = s.batch, T = s.seqLen;
  BatchTensor tokens{"tokens", {B, T}, {}}, targets{"targets", {B, T}, {}};
  for (int64_t b = 0; b < B; ++b) {
    int64_t start = r.below(static_cast<int64_t>(text.size()) - T);
    for (int64_t t = 0; t < T; ++t) {
      tokens.values.push_back(text[start + t]);
      targets.values.push_back(text[start + t + 1]);
    }
  }
  return {tokens, targets};
}

// BERT's masking: each position is chosen with probability 15%; a chosen position becomes
// [MASK] 80% of the time, a random token 10% (of bytes: a printable one), stays itself 10%;
// only chosen positions are scored (the others hold the model's ignore index). A row that chose
// none chooses one position (as BERT's own data does, max(1, 15%) a sequence): a batch with no
// scored target has a loss of 0/0, which stopped a run (about once in 180 steps of 2 x 16).
Batch mlm(const TaskShape &s, Stream &r, std::span<const int32_t> text) {
  int64_t B = s.batch, T = s.seqLen, mask = s.vocab - 1;
  BatchTensor tokens{"tokens", {B, T}, {}}, types{"token_types", {B, T}, {}},
      targets{"targets", {B, T}, {}};
  auto choose = [&](size_t at) {
    const int64_t original = targets.values[at] = tokens.values[at];
    const int64_t roll = r.below(10);
    tokens.values[at] = roll < 8   ? mask
                        : roll < 9 ? (s.textVocab == 256 ? 32 + r.below(95) : r.below(s.textVocab))
                                   : original;
  };
  for (int64_t b = 0; b < B; ++b) {
    // (Any window of T tokens: unlike lm's, it needs no next token, so a text of T is one.)
    const int64_t start = r.below(static_cast<int64_t>(text.size()) - T + 1);
    const size_t row = tokens.values.size();
    bool chosen = false;
    for (int64_t t = 0; t < T; ++t) {
      tokens.values.push_back(text[start + t]);
      types.values.push_back(0);
      targets.values.push_back(s.ignore);
      if (r.below(100) < 15)
        choose(row + static_cast<size_t>(t)), chosen = true;
    }
    if (!chosen)
      choose(row + static_cast<size_t>(r.below(T)));
  }
  return {tokens, types, targets};
}

// Lines drawn from the stream: each line's source and target, cut to S tokens, shifted past the
// special ids; the rest of each row padding.
Batch pairs(const TaskShape &s, Stream &r, std::span<const int32_t> stream,
            std::span<const size_t> starts) {
  const int64_t B = s.batch, S = s.srcLen, T = S + 1;
  BatchTensor src{"src", {B, S}, {}}, tgt{"tgt", {B, T}, {}}, targets{"targets", {B, T}, {}};
  for (int64_t b = 0; b < B; ++b) {
    const int32_t *at =
        stream.data() + starts[static_cast<size_t>(r.below(static_cast<int64_t>(starts.size())))];
    std::vector<int64_t> x, y;
    for (; *at != kPairTab; ++at)
      if (static_cast<int64_t>(x.size()) < S)
        x.push_back(*at + kFirstContent);
    bool cut = false;
    for (++at; *at != kPairEnd; ++at)
      if (static_cast<int64_t>(y.size()) < S)
        y.push_back(*at + kFirstContent);
      else
        cut = true;
    // EOS where the target ends; a target cut short goes on, so its last place is not scored.
    y.push_back(cut ? s.ignore : kEos);
    x.resize(static_cast<size_t>(S), kPad);
    src.values.insert(src.values.end(), x.begin(), x.end());
    tgt.values.push_back(kBos); // teacher forcing: the decoder sees BOS y[:-1]
    tgt.values.insert(tgt.values.end(), y.begin(), y.end() - 1);
    tgt.values.resize(static_cast<size_t>((b + 1) * T), kPad);
    targets.values.insert(targets.values.end(), y.begin(), y.end());
    targets.values.resize(static_cast<size_t>((b + 1) * T), s.ignore);
  }
  return {src, tgt, targets};
}

// Where each line of a pairs stream starts (after each kPairEnd).
std::vector<size_t> lineStarts(std::span<const int32_t> stream) {
  std::vector<size_t> starts{0};
  for (size_t k = 0; k + 1 < stream.size(); ++k)
    if (stream[k] == kPairEnd)
      starts.push_back(k + 1);
  return starts;
}

Batch batchOf(TaskKind kind, const TaskShape &shape, uint64_t seed, uint64_t index,
              std::span<const int32_t> text, std::span<const size_t> lines) {
  Stream r(seed, kind, index);
  switch (kind) {
  case TaskKind::Copy:
    return seq2seq(false, shape, r);
  case TaskKind::Reverse:
    return seq2seq(true, shape, r);
  case TaskKind::Lm:
    return lm(shape, r, text);
  case TaskKind::Mlm:
    return mlm(shape, r, text);
  case TaskKind::Pairs:
    return pairs(shape, r, text, lines);
  }
  return {};
}
} // namespace

TaskText::TaskText(std::vector<int32_t> tokens) : ids(std::move(tokens)), lines(lineStarts(ids)) {}

Batch batchRows(const Batch &batch, int64_t first, int64_t rows) {
  Batch out;
  for (const BatchTensor &t : batch) {
    BatchTensor part{t.name, t.shape, {}, {}};
    part.shape[0] = rows;
    int64_t per = 1; // elements per row
    for (size_t d = 1; d < t.shape.size(); ++d)
      per *= t.shape[d];
    if (!t.values.empty())
      part.values.assign(t.values.begin() + first * per, t.values.begin() + (first + rows) * per);
    if (!t.reals.empty())
      part.reals.assign(t.reals.begin() + first * per, t.reals.begin() + (first + rows) * per);
    out.push_back(std::move(part));
  }
  return out;
}

Batch makeBatch(TaskKind kind, const TaskShape &shape, uint64_t seed, uint64_t index,
                std::string_view text) {
  return makeBatch(kind, shape, seed, index, byteTokens(text));
}

Batch makeBatch(TaskKind kind, const TaskShape &shape, uint64_t seed, uint64_t index,
                const TaskText &text) {
  return batchOf(kind, shape, seed, index, text.ids, text.lines);
}

Batch makeBatch(TaskKind kind, const TaskShape &shape, uint64_t seed, uint64_t index,
                std::span<const int32_t> text) {
  return batchOf(kind, shape, seed, index, text,
                 kind == TaskKind::Pairs ? lineStarts(text) : std::vector<size_t>{});
}

} // namespace kiln::runtime

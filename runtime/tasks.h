// Synthetic training tasks: deterministic batches of token ids for the three model families.
// Batch k of a task is a pure function of (task settings, seed, k), so a training run is
// reproducible bit for bit and any batch can be regenerated on its own.
//   copy / reverse (encoder-decoder): src = x, tgt = BOS y[:-1], targets = y, y = x or reverse(x)
//   lm (decoder-only): windows of a text's tokens (the embedded corpus' bytes by default),
//   targets = the next token
//   mlm (encoder-only): such windows with BERT's 80/10/10 masking of 15% of positions
//   pairs (encoder-decoder): lines of a text file, source<TAB>target, src = x, tgt = BOS y,
//   targets = y EOS (x, y the halves' tokens, shifted past the special ids, cut to S; a cut
//   target's last place unscored instead of EOS, as it does not end there)
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace kiln::runtime {

// Special ids of the synthetic seq2seq vocabulary; content tokens are [kFirstContent, vocab).
inline constexpr int64_t kPad = 0, kBos = 1, kEos = 2, kFirstContent = 3;
inline constexpr int64_t kIgnore = -100; // targets not scored (PyTorch's default ignore_index)

// An encoder-decoder's sequences in these ids (the copy, reverse and pairs tasks, translation)
// are padded with kPad, which the model masks where its pad_id is: Error unless pad_id is kPad
// (another would mask content or BOS and read the padding as tokens). `what`: "task copy".
Status checkPadId(int64_t padId, std::string_view what);

struct TaskShape {
  int64_t batch = 0;
  int64_t srcLen = 0; // copy/reverse/pairs: source length S; the target length is S + 1 (EOS)
  int64_t tgtLen = 0; // copy/reverse/pairs: the model's target length, which must be S + 1 (0:
                      // not checked)
  int64_t seqLen = 0; // lm/mlm: sequence length T
  int64_t vocab = 0;
  int64_t textVocab = 256;  // lm/mlm: the ids a text's tokens take (256: bytes; a tokenizer's)
  int64_t ignore = kIgnore; // pairs, mlm: the targets not scored (the model's ignore index)
  int64_t pad = -1; // mlm: the id the model masks as padding, which the text must not hold (-1:
                    // none known)
};

// One named array per model input, row-major: integers, or reals for a float input.
struct BatchTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<int64_t> values;    // token ids, labels, masks
  std::vector<double> reals = {}; // a float input's values (images, features), if not in `values`
};
using Batch = std::vector<BatchTensor>;

// The embedded corpus (plain ASCII prose) that lm and mlm draw windows from by default.
std::string_view corpus();

// A text divided for training: windows of `train` feed the steps, windows of `validation` (its
// last `fraction` of bytes, rounded down) the validation loss (kiln train --val-fraction, and a
// standalone executable's train).
struct TextSplit {
  std::string_view train, validation;
};
TextSplit splitText(std::string_view text, double fraction);

// The same, for task pairs: the cut moves on to the start of the next line, so that every line
// stays whole on one side.
TextSplit splitLines(std::string_view text, double fraction);

enum class TaskKind : uint8_t { Copy, Reverse, Lm, Mlm, Pairs };
// "copy", "reverse", "lm", "mlm", "pairs"
Expected<TaskKind> parseTask(std::string_view name);
// copy, reverse and pairs: an encoder-decoder's tasks ("src", "tgt", "targets").
inline bool isEncoderDecoderTask(TaskKind k) {
  return k == TaskKind::Copy || k == TaskKind::Reverse || k == TaskKind::Pairs;
}
std::string_view taskName(TaskKind k);
// The task a run that resumes the checkpoint `where`, trained on task `trained` (its description's:
// runtime/model_description.h; "": not said), trains on where no --task names one: that task, as
// the run it continues did (an encoder-decoder's model default, copy, would silently train a
// reverse model on copy), except a task that makes its own sequences where text is given
// (`withData`): "", the model's own with a text. (Task pairs without text is the caller's to
// refuse, naming the checkpoint.) Error: a task this kiln does not know.
Expected<std::string> continuedTask(const std::string &trained, bool withData,
                                    std::string_view where);
// That refusal: the checkpoint of `flag` ("--load", "--weights") `where` was trained on task pairs
// and no --data is given.
Error pairsNeedData(std::string_view flag, std::string_view where);

// Errors name what does not fit (e.g. lm needs vocab >= 256 for byte tokens, and a text longer
// than a sequence). The text as `tokens` (ids below shape.textVocab), or as its bytes; the errors
// that are the text's (too short, no line of pairs) begin with `textName` where one is given
// ("--data FILE").
Status checkTask(TaskKind kind, const TaskShape &shape, std::span<const int32_t> tokens,
                 std::string_view textName = {});
// The part of checkTask that no text decides: an encoder-decoder's target length. Where a step is
// compiled without its data (kiln compile --train), so that the bundle it writes can train.
Status checkTaskShape(TaskKind kind, const TaskShape &shape);
Status checkTask(TaskKind kind, const TaskShape &shape, std::string_view text = corpus());

// Batch `index` of the task. Inputs: copy/reverse/pairs: "src" [B,S], "tgt" [B,S+1],
// "targets" [B,S+1] (pairs: padded with kPad, targets with shape.ignore; content ids are a
// text's ids + kFirstContent); lm: "tokens" [B,T], "targets" [B,T]; mlm: "tokens", "token_types"
// (all 0), "targets" (shape.ignore where not masked; at least one masked a row) [B,T]. mlm's [MASK]
// id is vocab - 1. lm and mlm draw windows of a text's tokens (of the embedded corpus or a user's
// text file: its bytes, or the ids a tokenizer gave it, tokenized once). The text overload takes
// its bytes on each call.
Batch makeBatch(TaskKind kind, const TaskShape &shape, uint64_t seed, uint64_t index,
                std::span<const int32_t> tokens);
// A training text's ids with where each of its lines starts (of a pairs stream, below: after
// each kPairEnd), found once for the run: task pairs draws lines, and finding them at every batch
// read the whole text (22 ms a step for 24 MB).
struct TaskText {
  std::vector<int32_t> ids;
  std::vector<size_t> lines;
  TaskText() = default;
  explicit TaskText(std::vector<int32_t> tokens);
};
// The same as the span overload, from a text whose lines were found once.
Batch makeBatch(TaskKind kind, const TaskShape &shape, uint64_t seed, uint64_t index,
                const TaskText &text);
Batch makeBatch(TaskKind kind, const TaskShape &shape, uint64_t seed, uint64_t index,
                std::string_view text = corpus());
// The text's bytes as token ids.
std::vector<int32_t> byteTokens(std::string_view text);

// Rows [first, first + rows) of every tensor of `batch` (each leads with the batch axis): rank r's
// part of a data-parallel run's global batch, so that the data a step sees does not depend on how
// many ranks share it.
Batch batchRows(const Batch &batch, int64_t first, int64_t rows);

// A file of source<TAB>target lines as the one stream of ids that task pairs takes: per line,
// the source's ids, kPairTab, the target's ids, kPairEnd, the ids as `encode` gives them (bytes,
// or a tokenizer's). Empty lines are skipped; an Error names the first line without a tab (or
// with an empty half, or a second tab), counting from `firstLine`.
inline constexpr int32_t kPairTab = -1, kPairEnd = -2;
Expected<std::vector<int32_t>>
pairTokens(std::string_view text,
           const std::function<std::vector<int32_t>(std::string_view)> &encode,
           int64_t firstLine = 1);
// Of the lines of such a stream: how many there are, and how many have a source or a target of
// more than `length` ids, of which task pairs trains on the first `length` (a target so cut
// scores no EOS).
struct PairLines {
  int64_t lines = 0, cut = 0;
};
PairLines pairLinesLongerThan(std::span<const int32_t> stream, int64_t length);

} // namespace kiln::runtime

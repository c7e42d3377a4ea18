// The synthetic training tasks: deterministic, well-formed batches.
#include <gtest/gtest.h>

#include <algorithm>

#include "runtime/tasks.h"

namespace kiln::runtime::tasks_test {
namespace {

const BatchTensor &get(const Batch &b, std::string_view name) {
  for (const BatchTensor &t : b)
    if (t.name == name)
      return t;
  ADD_FAILURE() << "no " << name;
  return b.front();
}

TEST(Tasks, CopyAndReverse) {
  TaskShape s{.batch = 3, .srcLen = 5, .vocab = 12};
  for (TaskKind k : {TaskKind::Copy, TaskKind::Reverse}) {
    Batch b = makeBatch(k, s, 7, 0);
    const BatchTensor &src = get(b, "src"), &tgt = get(b, "tgt"), &y = get(b, "targets");
    EXPECT_EQ(src.shape, (std::vector<int64_t>{3, 5}));
    EXPECT_EQ(tgt.shape, (std::vector<int64_t>{3, 6}));
    for (int r = 0; r < 3; ++r) {
      std::vector<int64_t> x(src.values.begin() + r * 5, src.values.begin() + r * 5 + 5);
      for (int64_t t : x)
        EXPECT_TRUE(t >= kFirstContent && t < 12);
      if (k == TaskKind::Reverse)
        std::reverse(x.begin(), x.end());
      x.push_back(kEos);
      EXPECT_EQ(std::vector<int64_t>(y.values.begin() + r * 6, y.values.begin() + r * 6 + 6), x);
      EXPECT_EQ(tgt.values[r * 6], kBos); // decoder input = BOS + targets[:-1]
      for (int t = 1; t < 6; ++t)
        EXPECT_EQ(tgt.values[r * 6 + t], y.values[r * 6 + t - 1]);
    }
  }
}

TEST(Tasks, LmTargetsAreTheNextByte) {
  TaskShape s{.batch = 4, .seqLen = 10, .vocab = 256};
  Batch b = makeBatch(TaskKind::Lm, s, 1, 3);
  const BatchTensor &x = get(b, "tokens"), &y = get(b, "targets");
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t + 1 < 10; ++t)
      EXPECT_EQ(y.values[r * 10 + t], x.values[r * 10 + t + 1]);
  std::string_view text = corpus();
  std::string window(x.values.begin(), x.values.begin() + 10);
  EXPECT_NE(text.find(window), std::string_view::npos);
}

TEST(Tasks, MlmMasksAboutFifteenPercent) {
  TaskShape s{.batch = 32, .seqLen = 64, .vocab = 256};
  Batch b = makeBatch(TaskKind::Mlm, s, 2, 0);
  const BatchTensor &x = get(b, "tokens"), &y = get(b, "targets");
  int scored = 0, masked = 0;
  for (size_t i = 0; i < x.values.size(); ++i) {
    if (y.values[i] == kIgnore)
      continue;
    ++scored;
    masked += x.values[i] == 255;
  }
  double n = double(x.values.size());
  EXPECT_NEAR(scored / n, 0.15, 0.03);
  EXPECT_NEAR(masked / double(scored), 0.8, 0.08);
}

// Every row scores at least one target (a batch of none has the loss 0/0), and the others hold
// the model's ignore index.
TEST(Tasks, MlmScoresATargetInEveryRow) {
  TaskShape s{.batch = 64, .seqLen = 4, .vocab = 256, .ignore = -7};
  for (uint64_t index = 0; index < 20; ++index) {
    const Batch b = makeBatch(TaskKind::Mlm, s, 3, index);
    const BatchTensor &y = get(b, "targets");
    for (int64_t row = 0; row < s.batch; ++row) {
      int scored = 0;
      for (int64_t t = 0; t < s.seqLen; ++t) {
        const int64_t id = y.values[static_cast<size_t>(row * s.seqLen + t)];
        EXPECT_TRUE(id == -7 || (id >= 0 && id < 256)) << id;
        scored += id != -7;
      }
      EXPECT_GE(scored, 1) << "batch " << index << ", row " << row;
    }
  }
}

// An mlm window is any T tokens of the text (it needs no next token, as lm's does): the text's
// last token is drawn, and a text of exactly T tokens is one window.
TEST(Tasks, MlmWindowsReachTheTextsEnd) {
  const std::vector<int32_t> text = {10, 11, 12, 13, 14};
  TaskShape s{.batch = 64, .seqLen = 4, .vocab = 256};
  ASSERT_TRUE(checkTask(TaskKind::Mlm, s, text).ok());
  bool last = false;
  for (uint64_t index = 0; index < 4; ++index) {
    const Batch b = makeBatch(TaskKind::Mlm, s, 1, index, text);
    const BatchTensor &y = get(b, "targets");
    // (a row's first token tells its window; its unmasked originals are in the targets or tokens)
    for (size_t at = 3; at < y.values.size(); at += 4)
      last = last || y.values[at] == 14 || get(b, "tokens").values[at] == 14;
  }
  EXPECT_TRUE(last);
  s.seqLen = 5;
  ASSERT_TRUE(checkTask(TaskKind::Mlm, s, text).ok());
  const Batch whole = makeBatch(TaskKind::Mlm, s, 1, 0, text);
  for (size_t at = 0; at < 5; ++at) // every row is the text (masked or scored where chosen)
    EXPECT_TRUE(get(whole, "targets").values[at] == 10 + static_cast<int64_t>(at) ||
                get(whole, "tokens").values[at] == 10 + static_cast<int64_t>(at));
  s.seqLen = 6;
  EXPECT_EQ(checkTask(TaskKind::Mlm, s, text).error().message,
            "task mlm: the text has 5 bytes, and a window takes a sequence's 6: give a longer "
            "text, or a shorter sequence");
}

TEST(Tasks, DeterministicPerSeedAndIndex) {
  TaskShape s{.batch = 2, .seqLen = 8, .vocab = 256};
  EXPECT_EQ(makeBatch(TaskKind::Mlm, s, 5, 9)[0].values,
            makeBatch(TaskKind::Mlm, s, 5, 9)[0].values);
  EXPECT_NE(makeBatch(TaskKind::Lm, s, 5, 9)[0].values,
            makeBatch(TaskKind::Lm, s, 5, 10)[0].values);
  EXPECT_NE(makeBatch(TaskKind::Lm, s, 5, 9)[0].values, makeBatch(TaskKind::Lm, s, 6, 9)[0].values);
}

TEST(Tasks, BadShapesAreNamed) {
  EXPECT_EQ(checkTask(TaskKind::Lm, {.batch = 2, .seqLen = 8, .vocab = 100}).error().message,
            "task lm: byte tokens need vocab >= 256, got 100");
  EXPECT_EQ(checkTask(TaskKind::Copy, {.batch = 2, .srcLen = 4, .vocab = 3}).error().message,
            "task copy: vocab 3 leaves no content tokens (ids 0-2 are pad, bos, eos)");
  // A text too short is the text's error, named where the caller names the text; a model's
  // error is not the text's.
  const std::vector<int32_t> three = {1, 2, 3};
  EXPECT_EQ(checkTask(TaskKind::Lm, {.batch = 2, .seqLen = 8, .vocab = 256}, three, "--data t.txt")
                .error()
                .message,
            "--data t.txt: task lm: the text has 3 bytes, and a training window takes 9 (a "
            "sequence of 8 and the next): give a longer text, or a shorter sequence");
  EXPECT_EQ(checkTask(TaskKind::Lm, {.batch = 2, .seqLen = 2, .vocab = 100}, three, "--data t.txt")
                .error()
                .message,
            "task lm: byte tokens need vocab >= 256, got 100");
  // The target length, which no text decides (kiln compile --train checks only this part).
  const TaskShape tgt{.batch = 2, .srcLen = 4, .tgtLen = 9, .vocab = 10};
  for (const Status &st :
       {checkTaskShape(TaskKind::Reverse, tgt), checkTask(TaskKind::Reverse, tgt)})
    EXPECT_EQ(st.error().message,
              "the target length tgt_len=9 must be src_len + 1 = 5 (an encoder-decoder's target is "
              "BOS and up to src_len tokens, or those and EOS): leave tgt_len out, or set it to 5");
  EXPECT_TRUE(checkTaskShape(TaskKind::Reverse, {.batch = 2, .srcLen = 4, .tgtLen = 5}));
  EXPECT_TRUE(checkTaskShape(TaskKind::Lm, {.batch = 2, .seqLen = 8}));
  EXPECT_EQ(parseTask("sort").error().message,
            "unknown task 'sort' (expected copy, reverse, lm, mlm or pairs)");
}

// Task pairs: each drawn line's source, cut to S and padded; BOS and the target; the target and
// EOS (a cut target: the ignore id), padded with the ignore id. A line without a tab is named; the
// split keeps lines whole.
TEST(Tasks, PairsOfLines) {
  const std::string text = "ab\tBA\n\nabcdef\tFEDCBA\r\n";
  Expected<std::vector<int32_t>> ids = pairTokens(text, byteTokens);
  ASSERT_TRUE(ids.ok()) << ids.error().message;
  EXPECT_EQ(*ids, (std::vector<int32_t>{'a', 'b', kPairTab, 'B', 'A', kPairEnd, 'a',
                                        'b', 'c', 'd',      'e', 'f', kPairTab, 'F',
                                        'E', 'D', 'C',      'B', 'A', kPairEnd}));
  const TaskShape s{.batch = 16, .srcLen = 4, .vocab = 259, .ignore = -7};
  ASSERT_TRUE(checkTask(TaskKind::Pairs, s, *ids).ok());
  const Batch b = makeBatch(TaskKind::Pairs, s, 1, 0, *ids);
  const int64_t c = kFirstContent;
  bool sawShort = false, sawLong = false;
  for (int64_t r = 0; r < 16; ++r) {
    auto row = [&](std::string_view name, int64_t n) {
      const std::vector<int64_t> &v = get(b, name).values;
      return std::vector<int64_t>(v.begin() + r * n, v.begin() + (r + 1) * n);
    };
    if (row("src", 4) == std::vector<int64_t>{'a' + c, 'b' + c, kPad, kPad}) {
      sawShort = true;
      EXPECT_EQ(row("tgt", 5), (std::vector<int64_t>{kBos, 'B' + c, 'A' + c, kPad, kPad}));
      EXPECT_EQ(row("targets", 5), (std::vector<int64_t>{'B' + c, 'A' + c, kEos, -7, -7}));
    } else {
      sawLong = true;
      EXPECT_EQ(row("src", 4), (std::vector<int64_t>{'a' + c, 'b' + c, 'c' + c, 'd' + c}));
      // Cut to 4: not taught to end there.
      EXPECT_EQ(row("targets", 5), (std::vector<int64_t>{'F' + c, 'E' + c, 'D' + c, 'C' + c, -7}));
    }
  }
  EXPECT_TRUE(sawShort && sawLong);
  EXPECT_EQ(pairTokens("a\tb\nno tab\n", byteTokens, 10).error().message,
            "line 11: expected source<TAB>target, both non-empty");
  EXPECT_EQ(pairTokens("a\tb\tc\n", byteTokens).error().message,
            "line 1: has a second tab (column 4): expected source<TAB>target, one tab");
  EXPECT_EQ(splitLines("aaaa\tb\ncc\td\n", 0.5).validation, "cc\td\n");
  EXPECT_EQ(
      checkTask(TaskKind::Pairs, {.batch = 2, .srcLen = 4, .vocab = 256}, *ids).error().message,
      "task pairs: 256 text ids and 3 special ids (pad, bos, eos) need vocab >= 259, got 256");
}

} // namespace
} // namespace kiln::runtime::tasks_test

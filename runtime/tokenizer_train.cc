// Training a byte-level BPE tokenizer (Tokenizer::train, runtime/tokenizer.h): the merges of the
// most frequent pairs, counted once and kept up to date merge by merge.
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/tokenizer.h"
#include "runtime/tokenizer_segments.h"
#include "support/utf8.h"

namespace kiln::runtime {

namespace {

// Training's pair counts, kept up to date merge by merge instead of recounted: a merge visits only
// the words that hold its pair (`where`), takes their pairs' counts out, merges, and puts the new
// pairs' counts back. The best pair is the top of a heap of (count, pair) entries, one pushed at
// every change of a count; an entry whose count is no longer its pair's is stale and skipped
// when it surfaces. Cost: O(U log U) for U = the pair updates (every pair of every word a merge
// visits, before and after), against the full recount's O(merges x text) -- 1 MB of text to 1024
// tokens took 44-71 s that way.
class PairCounts {
public:
  using Pair = std::pair<int32_t, int32_t>;
  PairCounts(std::vector<std::vector<int32_t>> &pieces, const std::vector<int64_t> &freq)
      : pieces_(pieces), freq_(freq), visited_(pieces.size(), -1) {
    for (size_t w = 0; w < pieces.size(); ++w) {
      tally(pieces[w], +1);
      apply(static_cast<int32_t>(w), -1);
    }
  }

  // The most frequent pair, ties to the lowest (left, right); nullopt if none occurs twice.
  std::optional<Pair> best() {
    for (; !heap_.empty(); heap_.pop()) { // past the stale entries
      const Entry e = heap_.top();
      if (counts_[e.key] == e.count)
        return e.count >= 2 ? std::optional(unpack(e.key)) : std::nullopt;
    }
    return std::nullopt;
  }

  // Replaces every occurrence of `pair` in the words (left to right, not overlapping) by
  // `result`. None is left after it: every pair that a merge makes holds its result.
  void merge(Pair pair, int32_t result) {
    ++merges_;
    auto listed = where_.extract(pack(pair));
    if (listed.empty())
      return;
    for (int32_t w : listed.mapped()) {
      if (visited_[w] == merges_) // listed twice
        continue;
      visited_[w] = merges_;
      std::vector<int32_t> &p = pieces_[w];
      tally(p, -1);
      size_t out = 0;
      for (size_t k = 0; k < p.size(); ++k) {
        if (k + 1 < p.size() && p[k] == pair.first && p[k + 1] == pair.second)
          p[out++] = result, ++k;
        else
          p[out++] = p[k];
      }
      p.resize(out);
      tally(p, +1);
      apply(w, result);
    }
  }

private:
  // A pair as one integer whose order is the pair's (ids are >= 0).
  static uint64_t pack(Pair p) {
    return static_cast<uint64_t>(p.first) << 32 | static_cast<uint32_t>(p.second);
  }
  static Pair unpack(uint64_t k) {
    return {static_cast<int32_t>(k >> 32), static_cast<int32_t>(k & 0xFFFFFFFF)};
  }
  struct Entry {
    int64_t count;
    uint64_t key;
    bool operator<(const Entry &o) const { // the heap's top: the largest count, then lowest pair
      return count != o.count ? count < o.count : key > o.key;
    }
  };
  // Counts a word's pairs into delta_: +1 (sign) or -1 for each occurrence.
  void tally(const std::vector<int32_t> &p, int sign) {
    for (size_t k = 0; k + 1 < p.size(); ++k)
      delta_[pack({p[k], p[k + 1]})] += sign;
  }
  // Applies word w's net change of each pair (delta_, then emptied), freq times, and lists the
  // word under each pair of it that holds `fresh` (-1: every pair; once each). Only the pairs whose
  // count changed go to the heap: a merge in a word of n bytes pushed 2n entries, and one 100 KB
  // word took 194 s and 4.2 GB.
  void apply(int32_t w, int32_t fresh) {
    for (const auto &[key, d] : delta_) {
      if (d == 0)
        continue;
      int64_t &c = counts_[key];
      c += d * freq_[w];
      heap_.push({c, key});
    }
    delta_.clear();
    const std::vector<int32_t> &p = pieces_[w];
    for (size_t k = 0; k + 1 < p.size(); ++k)
      if (fresh < 0 || p[k] == fresh || p[k + 1] == fresh)
        if (std::vector<int32_t> &words = where_[pack({p[k], p[k + 1]})];
            words.empty() || words.back() != w)
          words.push_back(w);
  }

  std::vector<std::vector<int32_t>> &pieces_;
  const std::vector<int64_t> &freq_;
  std::unordered_map<uint64_t, int64_t> counts_;
  std::unordered_map<uint64_t, std::vector<int32_t>> where_; // words that hold (or held) a pair
  std::unordered_map<uint64_t, int64_t> delta_;              // tally's, for apply
  std::priority_queue<Entry> heap_;
  std::vector<int64_t> visited_; // the merge that last visited each word
  int64_t merges_ = 0;
};

} // namespace

Expected<Tokenizer> Tokenizer::train(std::string_view text, int64_t vocabSize,
                                     std::span<const std::string> specialTexts) {
  Tokenizer t = bytes();
  // The special tokens, once each; a special of one byte is that byte's token (no id of its own).
  std::vector<std::string> specials;
  int64_t newIds = 0;
  for (const std::string &s : specialTexts)
    if (!s.empty() && isValidUtf8(s) &&
        std::find(specials.begin(), specials.end(), s) == specials.end()) {
      specials.push_back(s);
      newIds += s.size() > 1;
    }
  std::map<std::string_view, int64_t> counts; // ordered: words in a fixed order
  // The words between special tokens (never merged across or into them).
  tokenizer_detail::forEachSegment(
      text, specials,
      [&](std::string_view part) {
        for (std::string_view w : words(part))
          ++counts[w];
      },
      [](size_t) {});
  vocabSize -= newIds;
  std::vector<std::vector<int32_t>> pieces;
  std::vector<int64_t> freq;
  for (const auto &[w, c] : counts) {
    pieces.emplace_back();
    for (char b : w)
      pieces.back().push_back(static_cast<unsigned char>(b));
    freq.push_back(c);
  }
  PairCounts pairs(pieces, freq);
  while (t.vocabSize() < vocabSize) {
    const std::optional<std::pair<int32_t, int32_t>> best = pairs.best();
    if (!best)
      break;
    const auto [left, right] = *best;
    const std::string joined = t.tokens_[left] + t.tokens_[right];
    auto [it, added] = t.idOf_.emplace(joined, static_cast<int32_t>(t.tokens_.size()));
    if (added)
      t.tokens_.push_back(joined);
    const int32_t result = it->second;
    t.merges_[{left, right}] = {static_cast<int32_t>(t.mergeList_.size()), result};
    t.mergeList_.push_back({left, right});
    pairs.merge(*best, result);
  }
  for (const std::string &special : specials)
    if (Expected<int32_t> id = t.addSpecial(special); !id)
      return id.error();
  return t;
}

} // namespace kiln::runtime

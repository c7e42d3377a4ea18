// NFC by UAX #15's definition: every code point replaced by its full canonical decomposition, the
// combining marks of each run put in canonical order (a stable sort by combining class, starters
// -- class 0 -- staying where they are), then each mark composed with the last starter before it
// where the pair is a primary composite and no mark of the same or a higher class, nor a starter,
// stands between them (then "blocked").
#include "runtime/unicode_nfc.h"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <vector>

#include "support/utf8.h"

namespace kiln::runtime {

namespace {

using nfc_data::ClassRange;
using nfc_data::Decomposition;

// Hangul syllables: S = SBase + (L - LBase) * NCount + (V - VBase) * TCount + (T - TBase), with T
// optional (TBase itself: none).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

uint8_t combiningClass(char32_t c) {
  const std::span<const ClassRange> ranges = nfc_data::classRanges();
  const auto r = std::lower_bound(ranges.begin(), ranges.end(), c,
                                  [](const ClassRange &r, char32_t c) { return r.last < c; });
  return r != ranges.end() && r->first <= c ? static_cast<uint8_t>(r->cls) : 0;
}

const Decomposition *decompositionOf(char32_t c) {
  const std::span<const Decomposition> all = nfc_data::decompositions();
  const auto d = std::lower_bound(all.begin(), all.end(), c,
                                  [](const Decomposition &d, char32_t c) { return d.c < c; });
  return d != all.end() && d->c == c ? &*d : nullptr;
}

void decompose(char32_t c, std::vector<char32_t> &out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const char32_t s = c - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + s % kNCount / kTCount);
    if (s % kTCount != 0)
      out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition *d = decompositionOf(c);
  if (!d) {
    out.push_back(c);
    return;
  }
  decompose(d->first, out);
  if (d->second)
    decompose(d->second, out);
}

// The primary composite of a starter and the code point after it, if any.
std::optional<char32_t> composite(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount)
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount)
    return first + (second - kTBase);
  static const std::unordered_map<uint64_t, char32_t> pairs = [] {
    std::unordered_map<uint64_t, char32_t> m;
    for (const Decomposition &d : nfc_data::decompositions())
      if (d.composes)
        m.emplace(uint64_t{d.first} << 32 | d.second, d.c);
    return m;
  }();
  const auto it = pairs.find(uint64_t{first} << 32 | second);
  return it != pairs.end() ? std::optional(it->second) : std::nullopt;
}

// NFC of valid code points, in place.
void normalize(std::vector<char32_t> &cps) {
  std::vector<char32_t> d;
  for (char32_t c : cps)
    decompose(c, d);
  // Canonical ordering: within each run of non-starters, a stable sort by class.
  for (size_t i = 0; i < d.size();) {
    if (combiningClass(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && combiningClass(d[j]) != 0)
      ++j;
    std::stable_sort(d.begin() + static_cast<std::ptrdiff_t>(i),
                     d.begin() + static_cast<std::ptrdiff_t>(j),
                     [](char32_t a, char32_t b) { return combiningClass(a) < combiningClass(b); });
    i = j;
  }
  // Composition: `starter` indexes the last starter kept; `last` is the class of the last code
  // point kept after it (-1: none yet), which blocks a mark of the same or a lower class.
  cps.clear();
  std::optional<size_t> starter;
  int last = -1;
  for (char32_t c : d) {
    const int cls = combiningClass(c);
    if (starter && (last == -1 || (last != 0 && last < cls)))
      if (const std::optional<char32_t> p = composite(cps[*starter], c)) {
        cps[*starter] = *p;
        continue;
      }
    if (cls == 0)
      starter = cps.size(), last = -1;
    else
      last = cls;
    cps.push_back(c);
  }
}

} // namespace

std::string toNfc(std::string_view text) {
  // Below U+0300 nothing decomposes or composes with what comes before (UTF-8 lead bytes below
  // 0xCC): most text is returned as it is.
  if (std::all_of(text.begin(), text.end(),
                  [](char b) { return static_cast<unsigned char>(b) < 0xCC; }))
    return std::string(text);
  std::string out;
  std::vector<char32_t> run;
  auto flush = [&] {
    normalize(run);
    for (char32_t c : run)
      appendUtf8(out, c);
    run.clear();
  };
  for (size_t i = 0; i < text.size();) {
    const auto [c, len] = decodeUtf8At(text, i);
    if (c) {
      run.push_back(*c);
    } else {
      flush();
      out += text[i];
    }
    i += len;
  }
  flush();
  return out;
}

} // namespace kiln::runtime

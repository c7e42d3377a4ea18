// Best-fit placement (see best_fit.h) from O(log T) sets of offset runs per buffer (T node
// positions), instead of comparing each buffer with every one placed before it (quadratic: a
// training step keeps a layer's saved values live across the whole backward pass).
//
// The gaps a buffer may take are the holes, below their top, of the union U of the offset ranges
// of the placed buffers whose lifetimes meet its own. A segment tree over node positions holds
// the placed buffers: each is stored at the O(log T) canonical nodes that tile its lifetime, and
// every tree node keeps two unions of offset ranges, coalesced into disjoint runs:
//   own(v): the buffers stored at v (their lifetimes cover v's whole span);
//   sub(v): the buffers stored at v or below it (their lifetimes lie within v's span).
// A buffer meets the query lifetime Q exactly when it is stored at a node that meets Q, so U is
// the union of sub(v) over the nodes v inside Q where the walk down from the root stops, and of
// own(v) over the nodes it passes that only partly meet Q: O(log T) sets. A query costs the runs
// in them (sorted: R log R), not the buffers: a plan packs buffers tightly, so the runs stay few
// (about 50 to 70 per buffer on GPT training steps of 96 to 500 layers, growing like log T).
//
// Placed in order of start (the planner's second order), a buffer meets exactly the buffers still
// live when it starts, which never overlap: a free list of the holes between them does, with
// O(log n) per buffer (FreeList).
//
// A zero-byte buffer may sit at the edge where a placed buffer starts flush against the ones
// below it (a gap of 0), which coalesced runs no longer show: it is placed by comparing it with
// every placed buffer, as the rule says. Such buffers (empty tensors) are rare.
#include "passes/best_fit.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <map>
#include <numeric>
#include <queue>
#include <set>
#include <utility>

namespace kiln::passes {
namespace {

// Disjoint, non-touching offset ranges [first, second), sorted.
using Runs = std::vector<std::pair<int64_t, int64_t>>;

// Adds [lo, hi) to `runs`, merging the runs it overlaps or touches. The runs are few (see above),
// so the vector's shifting costs less than a tree's nodes would.
void addRun(Runs &runs, int64_t lo, int64_t hi) {
  // The first run that ends at or after lo, and the first that starts after hi: those between
  // merge with [lo, hi).
  auto first = std::lower_bound(runs.begin(), runs.end(), lo,
                                [](const auto &r, int64_t x) { return r.second < x; });
  auto last =
      std::upper_bound(first, runs.end(), hi, [](int64_t x, const auto &r) { return x < r.first; });
  if (first == last) {
    runs.insert(first, {lo, hi});
    return;
  }
  first->first = std::min(first->first, lo);
  first->second = std::max((last - 1)->second, hi);
  runs.erase(first + 1, last);
}

class LifetimeTree {
public:
  explicit LifetimeTree(int32_t positions) {
    while (span_ < positions)
      span_ *= 2;
    own_.resize(2 * span_);
    sub_.resize(2 * span_);
  }

  void insert(const Lifetime &b, int64_t offset) {
    insert(1, 0, span_, b.start, b.end + 1, offset, offset + b.size);
  }

  // The runs of every set whose union is U for lifetime [start, end], appended to `out`.
  void gather(int32_t start, int32_t end, Runs &out) const {
    gather(1, 0, span_, start, end + 1, out);
  }

private:
  void insert(int32_t v, int32_t lo, int32_t hi, int32_t s, int32_t e, int64_t a, int64_t b) {
    addRun(sub_[v], a, b);
    if (s <= lo && hi <= e) {
      addRun(own_[v], a, b);
      return;
    }
    int32_t mid = (lo + hi) / 2;
    if (s < mid)
      insert(2 * v, lo, mid, s, e, a, b);
    if (e > mid)
      insert(2 * v + 1, mid, hi, s, e, a, b);
  }

  void gather(int32_t v, int32_t lo, int32_t hi, int32_t s, int32_t e, Runs &out) const {
    if (s <= lo && hi <= e) {
      out.insert(out.end(), sub_[v].begin(), sub_[v].end());
      return;
    }
    out.insert(out.end(), own_[v].begin(), own_[v].end());
    int32_t mid = (lo + hi) / 2;
    if (s < mid)
      gather(2 * v, lo, mid, s, e, out);
    if (e > mid)
      gather(2 * v + 1, mid, hi, s, e, out);
  }

  int32_t span_ = 1;
  std::vector<Runs> own_, sub_;
};

// The smallest gap of at least `size` bytes among the holes of the union of `runs` (sorted here),
// the first on ties; else the union's top.
int64_t bestGap(Runs &runs, int64_t size) {
  std::sort(runs.begin(), runs.end());
  int64_t cursor = 0, best = -1, bestGap = 0;
  for (const auto &[lo, hi] : runs) {
    int64_t gap = lo - cursor;
    if (gap > 0 && gap >= size && (best < 0 || gap < bestGap)) {
      best = cursor;
      bestGap = gap;
    }
    cursor = std::max(cursor, hi);
  }
  return best >= 0 ? best : cursor;
}

// The rule itself, for a zero-byte buffer: a gap of 0 between placed buffers counts.
int64_t zeroByteOffset(std::span<const Lifetime> buffers, std::span<const int32_t> placed,
                       const std::vector<int64_t> &offsets, const Lifetime &b) {
  Runs conflicts;
  for (int32_t j : placed)
    if (buffers[j].start <= b.end && b.start <= buffers[j].end && buffers[j].size > 0)
      conflicts.push_back({offsets[j], offsets[j] + buffers[j].size});
  std::sort(conflicts.begin(), conflicts.end());
  int64_t cursor = 0, best = -1, bestGap = 0;
  for (const auto &[lo, hi] : conflicts) {
    int64_t gap = lo - cursor;
    if (gap >= 0 && (best < 0 || gap < bestGap)) {
      best = cursor;
      bestGap = gap;
    }
    cursor = std::max(cursor, hi);
  }
  return best >= 0 ? best : cursor;
}

// Buffers placed in order of start: those placed before b that meet it are exactly those still
// live at b.start (none starts later), and they are pairwise disjoint (any two met when the later
// was placed). So the holes between them are a free list kept by (size, offset): the best fit is
// one lookup, and a buffer that dies merges the holes around it. O(log n) per buffer.
class FreeList {
public:
  // Places a buffer live over [start, end] by the rule and returns its offset.
  int64_t place(int32_t start, int32_t end, int64_t size) {
    while (!expiry_.empty() && expiry_.top().first < start) {
      release(expiry_.top().second);
      expiry_.pop();
    }
    if (size == 0)
      return zeroByteOffset();
    auto hole = holes_.lower_bound({size, 0});
    int64_t offset = top();
    if (hole != holes_.end()) {
      offset = hole->second;
      if (hole->first > size)
        holes_.insert({hole->first - size, offset + size});
      holes_.erase(hole);
    }
    live_.emplace(offset, offset + size);
    expiry_.push({end, offset});
    return offset;
  }

private:
  int64_t top() const { return live_.empty() ? 0 : live_.rbegin()->second; }

  void release(int64_t offset) {
    auto it = live_.find(offset);
    int64_t below = it == live_.begin() ? 0 : std::prev(it)->second;
    auto next = std::next(it);
    if (offset > below)
      holes_.erase({offset - below, below});
    if (next != live_.end()) {
      if (next->first > it->second)
        holes_.erase({next->first - it->second, it->second});
      holes_.insert({next->first - below, below});
    }
    live_.erase(it);
  }

  // The rule for a zero-byte buffer: the first place where a live buffer starts flush against
  // the ones below it (a gap of 0), else the smallest hole, else the top.
  int64_t zeroByteOffset() const {
    int64_t cursor = 0;
    for (const auto &[lo, hi] : live_) {
      if (lo == cursor)
        return cursor;
      cursor = hi;
    }
    return holes_.empty() ? top() : holes_.begin()->second;
  }

  std::map<int64_t, int64_t> live_;                // offset -> end of the live buffers
  std::set<std::pair<int64_t, int64_t>> holes_;    // (size, offset) of the holes below the top
  std::priority_queue<std::pair<int32_t, int64_t>, // (last position, offset), soonest first
                      std::vector<std::pair<int32_t, int64_t>>, std::greater<>>
      expiry_;
};

} // namespace

Placement placeBestFit(std::span<const Lifetime> buffers, std::span<const int32_t> order) {
  Placement p;
  p.offsets.assign(buffers.size(), 0);
  bool byStart = true;
  for (size_t k = 1; k < order.size() && byStart; ++k)
    byStart = buffers[order[k - 1]].start <= buffers[order[k]].start;
  if (byStart) {
    p.offsets.assign(buffers.size(), 0);
    FreeList free;
    for (int32_t i : order) {
      const Lifetime &b = buffers[i];
      p.offsets[i] = free.place(b.start, b.end, b.size);
      p.peak = std::max(p.peak, p.offsets[i] + b.size);
    }
    return p;
  }
  int32_t positions = 1;
  for (const Lifetime &b : buffers)
    positions = std::max(positions, b.end + 1);
  LifetimeTree tree(positions);
  Runs runs;
  for (size_t k = 0; k < order.size(); ++k) {
    int32_t i = order[k];
    const Lifetime &b = buffers[i];
    assert(0 <= b.start && b.start <= b.end);
    if (b.size == 0) {
      p.offsets[i] = zeroByteOffset(buffers, order.first(k), p.offsets, b);
    } else {
      runs.clear();
      tree.gather(b.start, b.end, runs);
      p.offsets[i] = bestGap(runs, b.size);
      tree.insert(b, p.offsets[i]);
    }
    p.peak = std::max(p.peak, p.offsets[i] + b.size);
  }
  return p;
}

Orders plannerOrders(std::span<const Lifetime> buffers) {
  Orders o{std::vector<int32_t>(buffers.size()), std::vector<int32_t>(buffers.size())};
  std::iota(o.largestFirst.begin(), o.largestFirst.end(), 0);
  std::iota(o.byStart.begin(), o.byStart.end(), 0);
  std::stable_sort(o.largestFirst.begin(), o.largestFirst.end(), [&](int32_t x, int32_t y) {
    return std::pair(-buffers[x].size, buffers[x].start) <
           std::pair(-buffers[y].size, buffers[y].start);
  });
  std::stable_sort(o.byStart.begin(), o.byStart.end(), [&](int32_t x, int32_t y) {
    return std::pair(buffers[x].start, -buffers[x].size) <
           std::pair(buffers[y].start, -buffers[y].size);
  });
  return o;
}

} // namespace kiln::passes

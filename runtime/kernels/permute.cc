// permute (see permute.h). Adjacent input axes that stay adjacent and in order are merged first
// ([B, T, H, D] -> [B, H, T, D] is 4 axes but one run of D contiguous elements), then:
//   - the input's last axis stays last: every output row is one contiguous run of the input
//     (memcpy of run bytes; heads' transposes move 256-byte runs);
//   - else a 2-D transpose between the output's last axis and the one that holds the input's
//     last axis, in kTile x kTile tiles so both the reads and the writes touch whole cache lines.
// Parts are fixed ranges of output rows (by size only).
#include "runtime/kernels/permute.h"

#include <algorithm>
#include <cstring>

#include "runtime/thread_pool.h"

namespace kiln::kernels {

namespace {

constexpr int64_t kTile = 16;
constexpr int64_t kPartBytes = 64 * 1024;

struct Merged {
  std::vector<int64_t> inShape, perm; // after merging
};

Merged merge(const std::vector<int64_t> &shape, const std::vector<int64_t> &perm) {
  // Groups of output axes d..e with perm[d+1] = perm[d] + 1 are one input axis.
  std::vector<std::vector<int64_t>> groups; // input axes per merged axis, in output order
  for (size_t d = 0; d < perm.size(); ++d) {
    if (shape[perm[d]] == 1)
      continue; // size-1 axes move nothing
    if (!groups.empty() && groups.back().back() + 1 == perm[d])
      groups.back().push_back(perm[d]);
    else
      groups.push_back({perm[d]});
  }
  // Merged axis g's size, and its input order (by first input axis).
  std::vector<size_t> order(groups.size());
  for (size_t g = 0; g < order.size(); ++g)
    order[g] = g;
  std::sort(order.begin(), order.end(),
            [&](size_t x, size_t y) { return groups[x][0] < groups[y][0]; });
  Merged m;
  m.perm.assign(groups.size(), 0);
  for (size_t i = 0; i < order.size(); ++i) {
    int64_t size = 1;
    for (int64_t a : groups[order[i]])
      size *= shape[a];
    m.inShape.push_back(size);
    m.perm[order[i]] = static_cast<int64_t>(i);
  }
  return m;
}

template <int64_t B> void copyElement(uint8_t *to, const uint8_t *from) {
  std::memcpy(to, from, B);
}

// out[i][j] = in[j][i] for a rows x cols block of out (in: row stride inStride, out: outStride),
// elements of B bytes.
template <int64_t B>
void transpose2d(const uint8_t *in, uint8_t *out, int64_t rows, int64_t cols, int64_t inStride,
                 int64_t outStride) {
  for (int64_t i0 = 0; i0 < rows; i0 += kTile)
    for (int64_t j0 = 0; j0 < cols; j0 += kTile)
      for (int64_t i = i0; i < std::min(rows, i0 + kTile); ++i)
        for (int64_t j = j0; j < std::min(cols, j0 + kTile); ++j)
          copyElement<B>(out + (i * outStride + j) * B, in + (j * inStride + i) * B);
}

void transpose2dBytes(const uint8_t *in, uint8_t *out, int64_t rows, int64_t cols, int64_t inStride,
                      int64_t outStride, int64_t b) {
  switch (b) {
  case 1:
    return transpose2d<1>(in, out, rows, cols, inStride, outStride);
  case 2:
    return transpose2d<2>(in, out, rows, cols, inStride, outStride);
  case 4:
    return transpose2d<4>(in, out, rows, cols, inStride, outStride);
  case 8:
    return transpose2d<8>(in, out, rows, cols, inStride, outStride);
  default:
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        std::memcpy(out + (i * outStride + j) * b, in + (j * inStride + i) * b,
                    static_cast<size_t>(b));
  }
}

} // namespace

void permute(const void *inV, void *outV, const std::vector<int64_t> &inShape,
             const std::vector<int64_t> &perm, int64_t b, runtime::ThreadPool *pool) {
  const auto *in = static_cast<const uint8_t *>(inV);
  auto *out = static_cast<uint8_t *>(outV);
  int64_t total = 1;
  for (int64_t s : inShape)
    total *= s;
  if (total == 0)
    return;
  Merged m = merge(inShape, perm);
  const int64_t rank = static_cast<int64_t>(m.perm.size());
  if (rank <= 1) { // the identity on the bytes
    std::memcpy(out, in, static_cast<size_t>(total * b));
    return;
  }
  std::vector<int64_t> inStrides(rank), outShape(rank);
  for (int64_t d = rank - 1, s = 1; d >= 0; --d)
    inStrides[d] = s, s *= m.inShape[d];
  for (int64_t d = 0; d < rank; ++d)
    outShape[d] = m.inShape[m.perm[d]];
  // Input offset (in elements) of output index idx over the axes other than `skip`.
  auto inOffset = [&](int64_t outer, int64_t last, int64_t skip) {
    int64_t off = 0;
    for (int64_t d = last; d >= 0; --d) {
      if (d == skip)
        continue;
      off += (outer % outShape[d]) * inStrides[m.perm[d]];
      outer /= outShape[d];
    }
    return off;
  };
  if (m.perm[rank - 1] == rank - 1) { // contiguous runs of the last axis
    const int64_t run = outShape[rank - 1], rows = total / run;
    const int64_t perPart = std::max<int64_t>(1, kPartBytes / (run * b));
    runtime::runParts(pool, (rows + perPart - 1) / perPart, [&](int64_t q, int) {
      for (int64_t r = q * perPart; r < std::min(rows, (q + 1) * perPart); ++r)
        std::memcpy(out + r * run * b, in + inOffset(r, rank - 2, -1) * b,
                    static_cast<size_t>(run * b));
    });
    return;
  }
  // The output axis `a` holds the input's last axis; 2-D transposes of [outShape[a], cols]
  // blocks, one per index of the other output axes.
  const int64_t a = std::find(m.perm.begin(), m.perm.end(), rank - 1) - m.perm.begin();
  const int64_t rows = outShape[a], cols = outShape[rank - 1];
  int64_t outStrideA = 1;
  for (int64_t d = a + 1; d < rank; ++d)
    outStrideA *= outShape[d];
  const int64_t blocks = total / (rows * cols);
  const int64_t inStrideCols = inStrides[m.perm[rank - 1]];
  // Each block splits into strips of whole tiles of rows.
  const int64_t strip = std::max<int64_t>(1, kPartBytes / (cols * b * kTile)) * kTile;
  const int64_t strips = (rows + strip - 1) / strip;
  runtime::runParts(pool, blocks * strips, [&](int64_t part, int) {
    const int64_t q = part / strips, i0 = (part % strips) * strip;
    // Output offset and input offset of block q (its index over the axes but a and the last).
    int64_t outOff = 0, inOff = 0, rest = q, stride = outShape[rank - 1];
    for (int64_t d = rank - 2; d >= 0; --d) {
      if (d != a) {
        const int64_t i = rest % outShape[d];
        rest /= outShape[d];
        outOff += i * stride;
        inOff += i * inStrides[m.perm[d]];
      }
      stride *= outShape[d];
    }
    transpose2dBytes(in + (inOff + i0) * b, out + (outOff + i0 * outStrideA) * b,
                     std::min(strip, rows - i0), cols, inStrideCols, outStrideA, b);
  });
}

} // namespace kiln::kernels

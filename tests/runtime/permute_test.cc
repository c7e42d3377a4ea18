// The permute kernel against the definition out[i] = in[i permuted back], element by element:
// every permutation of rank 1-4 on odd sizes (1, 7, 17, 129), element sizes 1, 4 and 8, with and
// without a thread pool.
#include "runtime/kernels/permute.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/thread_pool.h"

namespace kiln::kernels::permute_test {
namespace {

// The definition, one element at a time.
std::vector<uint8_t> naive(const std::vector<uint8_t> &in, const std::vector<int64_t> &shape,
                           const std::vector<int64_t> &perm, int64_t b) {
  const size_t rank = shape.size();
  std::vector<int64_t> inStrides(rank), outShape(rank), idx(rank, 0);
  for (int64_t d = static_cast<int64_t>(rank) - 1, s = 1; d >= 0; --d)
    inStrides[d] = s, s *= shape[d];
  for (size_t d = 0; d < rank; ++d)
    outShape[d] = shape[perm[d]];
  std::vector<uint8_t> out(in.size());
  for (size_t k = 0; k < in.size() / b; ++k) {
    int64_t rest = static_cast<int64_t>(k), from = 0;
    for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0; --d) {
      from += (rest % outShape[d]) * inStrides[perm[d]];
      rest /= outShape[d];
    }
    std::memcpy(&out[k * b], &in[from * b], static_cast<size_t>(b));
  }
  return out;
}

void check(const std::vector<int64_t> &shape, runtime::ThreadPool *pool) {
  std::vector<int64_t> perm(shape.size());
  std::iota(perm.begin(), perm.end(), 0);
  const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  do {
    for (int64_t b : {1, 4, 8}) {
      std::vector<uint8_t> in(static_cast<size_t>(n * b)), out(in.size(), 0xEE);
      for (size_t i = 0; i < in.size(); ++i)
        in[i] = static_cast<uint8_t>(i * 131 + i / 256);
      permute(in.data(), out.data(), shape, perm, b, pool);
      ASSERT_EQ(out, naive(in, shape, perm, b))
          << "shape " << ::testing::PrintToString(shape) << " perm "
          << ::testing::PrintToString(perm) << " element bytes " << b;
    }
  } while (std::next_permutation(perm.begin(), perm.end()));
}

TEST(Permute, EveryPermutationOfOddShapes) {
  runtime::ThreadPool pool(2);
  for (runtime::ThreadPool *p : {static_cast<runtime::ThreadPool *>(nullptr), &pool}) {
    check({7}, p);
    check({17, 129}, p);
    check({1, 7}, p);
    check({7, 1, 17}, p);
    check({3, 17, 7}, p);
    check({2, 7, 3, 17}, p);
    check({2, 1, 129, 3}, p);
  }
}

TEST(Permute, HeadsTransposeAndLargeMatrix) {
  runtime::ThreadPool pool(2);
  // [B, T, H, D] -> [B, H, T, D] as attention does, and a transpose larger than one part.
  for (const auto &[shape, perm] :
       std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
           {{2, 33, 4, 16}, {0, 2, 1, 3}}, {{300, 257}, {1, 0}}, {{3, 129, 130}, {2, 0, 1}}}) {
    const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
    std::vector<uint8_t> in(static_cast<size_t>(n * 4)), out(in.size());
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = static_cast<uint8_t>(i * 7 + i / 251);
    permute(in.data(), out.data(), shape, perm, 4, &pool);
    EXPECT_EQ(out, naive(in, shape, perm, 4));
  }
}

TEST(Permute, EmptyTensorWritesNothing) {
  std::vector<uint8_t> out(4, 0xAB);
  permute(nullptr, out.data(), {0, 3}, {1, 0}, 4, nullptr);
  EXPECT_EQ(out, std::vector<uint8_t>(4, 0xAB));
}

} // namespace
} // namespace kiln::kernels::permute_test

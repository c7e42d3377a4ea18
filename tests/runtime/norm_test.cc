// The norm kernels against their scalar twins on every compiled SIMD target: row lengths around
// the vector widths (1, 7, 17, 127, 129, 256), with and without weight, bias and the residual add
// (a broadcast position table too), layer_norm and rms_norm, forward and backward; y stored in
// bf16; and dweight the same bits with and without threads.
#include "runtime/kernels/norm.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/thread_pool.h"
#include "support/bf16.h"
#include "tests/util/random.h"
#include "tests/util/simd_targets.h"

namespace kiln::kernels::norm_test {
namespace {

using test_util::randomFloats;

// Sums in another order: a few ulps of the row's sums, relative to the row's scale.
void expectNear(const std::vector<float> &got, const std::vector<float> &want, const char *what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2e-5 * (1 + std::fabs(want[i]))) << what << " element " << i;
}

struct Options {
  bool centered, weight, bias, add;
};

void checkForward(int64_t rows, int64_t n, Options o, runtime::ThreadPool *pool) {
  const int64_t bRows = rows > 3 ? 3 : rows; // a table broadcast over the rows
  std::vector<float> a = randomFloats(rows * n, 1, -2, 3), b = randomFloats(bRows * n, 2),
                     w = randomFloats(n, 3), bias = randomFloats(n, 4);
  std::vector<float> sum[2], y[2], mean[2], rstd[2];
  for (int k = 0; k < 2; ++k) {
    sum[k].assign(rows * n, 0), y[k].assign(rows * n, 0);
    mean[k].assign(rows, 0), rstd[k].assign(rows, 0);
    NormForward f;
    f.rows = rows, f.n = n, f.centered = o.centered, f.eps = 1e-5f;
    f.a = a.data(), f.aRows = rows;
    if (o.add)
      f.b = b.data(), f.bRows = bRows, f.sum = sum[k].data();
    f.weight = o.weight ? w.data() : nullptr;
    f.bias = o.bias ? bias.data() : nullptr;
    f.y = y[k].data(), f.mean = o.centered ? mean[k].data() : nullptr, f.rstd = rstd[k].data();
    k == 0 ? normForward(f, pool) : normForwardScalar(f);
  }
  expectNear(sum[0], sum[1], "sum");
  expectNear(y[0], y[1], "y");
  expectNear(mean[0], mean[1], "mean");
  expectNear(rstd[0], rstd[1], "rstd");
}

void checkBackward(int64_t rows, int64_t n, Options o, runtime::ThreadPool *pool) {
  std::vector<float> x = randomFloats(rows * n, 5, -2, 2), dy = randomFloats(rows * n, 6),
                     mean = randomFloats(rows, 7), rstd = randomFloats(rows, 8, 0.5, 2),
                     w = randomFloats(n, 9);
  std::vector<float> dx[2], dw[2];
  for (int k = 0; k < 2; ++k) {
    dx[k].assign(rows * n, 0), dw[k].assign(n, 7);
    NormBackward b;
    b.rows = rows, b.n = n, b.x = x.data(), b.mean = o.centered ? mean.data() : nullptr;
    b.rstd = rstd.data(), b.dy = dy.data(), b.weight = o.weight ? w.data() : nullptr;
    b.dx = dx[k].data(), b.dweight = o.weight ? dw[k].data() : nullptr;
    k == 0 ? normBackward(b, pool) : normBackwardScalar(b);
  }
  expectNear(dx[0], dx[1], "dx");
  for (size_t j = 0; j < dw[0].size(); ++j) // summed over the rows: scale by their count
    ASSERT_NEAR(dw[0][j], dw[1][j], 2e-5 * static_cast<double>(rows)) << "dweight " << j;
}

TEST(NormKernels, MatchTheScalarTwinOnEveryTarget) {
  runtime::ThreadPool pool(2);
  test_util::forEachSimdTarget([&] {
    for (int64_t n : {1, 7, 17, 127, 129, 256})
      for (int64_t rows : {1, 7, 70})
        for (Options o : {Options{true, true, true, false}, Options{true, false, false, true},
                          Options{true, true, false, true}, Options{false, true, false, false},
                          Options{false, false, false, true}}) {
          SCOPED_TRACE(::testing::Message()
                       << "rows " << rows << " n " << n << " centered " << o.centered << " weight "
                       << o.weight << " bias " << o.bias << " add " << o.add);
          checkForward(rows, n, o, &pool);
          checkBackward(rows, n, o, &pool);
        }
  });
}

// bf16_y: the kernel's y stored as bf16 is its f32 y rounded to nearest even (support/bf16.h),
// bit for bit, on every target and row length (the tails too); the statistics are unchanged.
TEST(NormKernels, Bf16YIsTheF32YRounded) {
  runtime::ThreadPool pool(2);
  test_util::forEachSimdTarget([&] {
    for (int64_t n : {1, 7, 17, 127, 129, 256}) {
      SCOPED_TRACE(::testing::Message() << "n " << n);
      const int64_t rows = 9;
      std::vector<float> a = randomFloats(rows * n, 1, -2, 3), b = randomFloats(rows * n, 2),
                         w = randomFloats(n, 3), bias = randomFloats(n, 4);
      std::vector<float> sum(rows * n), y(rows * n), mean[2], rstd[2];
      std::vector<uint16_t> yBf16(rows * n);
      for (int k = 0; k < 2; ++k) {
        mean[k].assign(rows, 0), rstd[k].assign(rows, 0);
        NormForward f;
        f.rows = rows, f.n = n, f.eps = 1e-5f, f.a = a.data(), f.aRows = rows;
        f.b = b.data(), f.bRows = rows, f.sum = sum.data(), f.weight = w.data();
        f.bias = bias.data(), f.mean = mean[k].data(), f.rstd = rstd[k].data();
        f.y = k == 0 ? y.data() : nullptr;
        f.yBf16 = k == 1 ? yBf16.data() : nullptr;
        normForward(f, &pool);
      }
      for (int64_t e = 0; e < rows * n; ++e)
        ASSERT_EQ(yBf16[e], toBf16Bits(y[e])) << "element " << e;
      EXPECT_EQ(mean[0], mean[1]);
      EXPECT_EQ(rstd[0], rstd[1]);
    }
  });
}

TEST(NormKernels, WeightGradientIsTheSameBitsWithoutThreads) {
  const int64_t rows = 300, n = 65;
  std::vector<float> x = randomFloats(rows * n, 1), dy = randomFloats(rows * n, 2),
                     mean = randomFloats(rows, 3), rstd = randomFloats(rows, 4, 0.5, 2),
                     w = randomFloats(n, 5);
  runtime::ThreadPool pool(2);
  std::vector<float> dx[2], dw[2];
  for (int k = 0; k < 2; ++k) {
    dx[k].assign(rows * n, 0), dw[k].assign(n, 0);
    NormBackward b{rows,      n,        x.data(),     mean.data(), rstd.data(),
                   dy.data(), w.data(), dx[k].data(), dw[k].data()};
    normBackward(b, k == 0 ? &pool : nullptr);
  }
  EXPECT_EQ(dx[0], dx[1]);
  EXPECT_EQ(dw[0], dw[1]);
}

} // namespace
} // namespace kiln::kernels::norm_test

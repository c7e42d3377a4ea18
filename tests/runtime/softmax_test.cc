// softmax / log_softmax row kernels against the definition computed in double, on every compiled
// SIMD target: row lengths around the vector widths (1, 7, 17, 127, 129, 256), rows of all -inf
// (softmax 0), rows with a NaN or +inf (NaN), partly -inf rows; and rows.h's primitives there.
#include "runtime/kernels/softmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "codegen/common/pointwise.h"
#include "runtime/kernels/rows.h"
#include "runtime/thread_pool.h"
#include "tests/util/random.h"
#include "tests/util/simd_targets.h"

namespace kiln::kernels::softmax_test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Rows of random values in [-30, 30]; row 1 all -inf, row 2 holds a NaN, row 3 a +inf, row 4 is
// half -inf (when there are that many rows).
std::vector<float> inputs(int64_t rows, int64_t n) {
  std::vector<float> x = test_util::randomFloats(rows * n, 3, -30, 30);
  auto row = [&](int64_t r) { return x.data() + r * n; };
  if (rows > 1)
    std::fill(row(1), row(1) + n, -kInf);
  if (rows > 2)
    row(2)[n / 2] = std::numeric_limits<float>::quiet_NaN();
  if (rows > 3)
    row(3)[n - 1] = kInf;
  if (rows > 4)
    std::fill(row(4), row(4) + n / 2, -kInf);
  return x;
}

// The definitions (ir/ops/reduce.h) in double for one row.
std::vector<double> definition(const float *x, int64_t n, bool log) {
  double m = -kInf;
  bool nan = false;
  for (int64_t j = 0; j < n; ++j)
    nan |= std::isnan(x[j]), m = std::max(m, double(x[j]));
  std::vector<double> y(n, std::numeric_limits<double>::quiet_NaN());
  if (nan)
    return y;
  const double shift = (!log && m == -kInf) ? 0 : m;
  double sum = 0;
  for (int64_t j = 0; j < n; ++j)
    sum += std::exp(double(x[j]) - shift);
  for (int64_t j = 0; j < n; ++j)
    y[j] = log ? (double(x[j]) - m) - std::log(sum)
               : std::exp(double(x[j]) - shift) / std::max(sum, 1.0);
  return y;
}

// got within tol (1 + |want|) of want; NaN matches NaN and an infinity itself.
bool near(double got, double want, double tol) {
  if (std::isnan(want) || std::isnan(got))
    return std::isnan(want) && std::isnan(got);
  return got == want || std::fabs(got - want) <= tol * (1 + std::fabs(want));
}

void expectRow(const float *got, const std::vector<double> &want, int64_t row) {
  for (size_t j = 0; j < want.size(); ++j)
    EXPECT_TRUE(near(got[j], want[j], 4e-6))
        << "row " << row << " element " << j << ": " << got[j] << " vs " << want[j];
}

TEST(SoftmaxKernels, MatchTheDefinitionOnEveryTarget) {
  runtime::ThreadPool pool(2);
  test_util::forEachSimdTarget([&] {
    for (int64_t n : {1, 7, 17, 127, 129, 256})
      for (int64_t rows : {1, 6, 70}) {
        SCOPED_TRACE(::testing::Message() << "rows " << rows << " n " << n);
        const std::vector<float> x = inputs(rows, n);
        std::vector<float> y(x.size()), ly(x.size());
        softmaxRows(x.data(), y.data(), rows, n, &pool);
        logSoftmaxRows(x.data(), ly.data(), rows, n, &pool);
        for (int64_t r = 0; r < rows; ++r) {
          expectRow(y.data() + r * n, definition(x.data() + r * n, n, false), r);
          expectRow(ly.data() + r * n, definition(x.data() + r * n, n, true), r);
        }
      }
  });
}

// cross_entropy's rows against its definition in double (ir/ops/reduce.h): loss = -sum_j q_j
// logp_j and lse, for targets in range, one past the classes and negative (no class), of i32 and
// i64, with and without smoothing, on the rows of inputs(): all -inf (NaN), NaN, +inf, half -inf
// (a finite loss where the target's logit is finite).
TEST(SoftmaxKernels, CrossEntropyMatchesTheDefinitionOnEveryTarget) {
  runtime::ThreadPool pool(2);
  test_util::forEachSimdTarget([&] {
    for (int64_t n : {1, 7, 17, 129, 1000})
      for (float eps : {0.0f, 0.1f}) {
        SCOPED_TRACE(::testing::Message() << "n " << n << " smoothing " << eps);
        const int64_t rows = 9;
        const std::vector<float> x = inputs(rows, n);
        std::vector<int64_t> t64(rows);
        for (int64_t r = 0; r < rows; ++r)
          t64[r] = r == 5 ? n : r == 6 ? -100 : (r * 5 + n - 1) % n;
        const std::vector<int32_t> t32(t64.begin(), t64.end());
        std::vector<float> loss(rows), lse(rows), loss32(rows), lse32(rows);
        crossEntropyRows(x.data(), t64.data(), false, loss.data(), lse.data(), rows, n, eps, &pool);
        crossEntropyRows(x.data(), t32.data(), true, loss32.data(), lse32.data(), rows, n, eps,
                         &pool);
        EXPECT_EQ(std::memcmp(loss.data(), loss32.data(), sizeof(float) * rows), 0);
        EXPECT_EQ(std::memcmp(lse.data(), lse32.data(), sizeof(float) * rows), 0);
        for (int64_t r = 0; r < rows; ++r) {
          const std::vector<double> logp = definition(x.data() + r * n, n, true);
          double want = 0, m = -kInf;
          for (int64_t j = 0; j < n; ++j) {
            const double q = (j == t64[r] ? 1 - double(eps) : 0) + double(eps) / double(n);
            want -= q == 0 ? 0 : q * logp[j];
            m = std::max(m, double(x[r * n + j]));
          }
          EXPECT_TRUE(near(loss[r], want, 4e-6))
              << "row " << r << ": " << loss[r] << " vs " << want;
          // lse = x_j - logp_j for any j; the row's max holds it exactly where it is finite.
          double wantLse = std::numeric_limits<double>::quiet_NaN();
          for (int64_t j = 0; j < n; ++j)
            if (double(x[r * n + j]) == m && std::isfinite(m))
              wantLse = m - logp[j];
          if (std::isfinite(m)) {
            EXPECT_TRUE(near(lse[r], wantLse, 4e-6)) << "row " << r;
          }
        }
      }
  });
}

// A row of n raw attention scores, a bias and a mask (keys 0, 3, 6, ... masked).
struct ScoreInputs {
  std::vector<float> s0, bias;
  std::vector<uint8_t> mask;
  explicit ScoreInputs(int64_t n)
      : s0(test_util::randomFloats(n, 1, -4, 4)), bias(test_util::randomFloats(n, 2)), mask(n) {
    for (int64_t j = 0; j < n; ++j)
      mask[j] = (j * 7) % 3 != 0;
  }
};

// scoreRow: scale, bias, mask and the causal limit, and the row's max.
TEST(RowKernels, ScoreRowMasksAndReturnsTheMax) {
  test_util::forEachSimdTarget([&] {
    for (int64_t n : {1, 7, 17, 127, 129}) {
      const auto [s0, bias, mask] = ScoreInputs(n);
      for (int64_t allowed : {int64_t{0}, n / 2 + 1, n}) {
        std::vector<float> s = s0;
        const float m = scoreRow(s.data(), n, -0.5f, bias.data(), mask.data(), allowed);
        float want = -kInf;
        for (int64_t j = 0; j < n; ++j) {
          const float v = (j < allowed && mask[j]) ? s0[j] * -0.5f + bias[j] : -kInf;
          EXPECT_TRUE(near(s[j], v, 1e-6)) << "n " << n << " allowed " << allowed << " j " << j;
          want = std::max(want, v);
        }
        EXPECT_TRUE(near(m, want, 1e-6)) << m << " vs " << want;
      }
    }
  });
}

// scoreExpRow: scoreRow (every key allowed) then expRow in one pass, with or without a bias and
// a mask; masked keys give exactly 0, and a NaN shift (a NaN row's log-sum-exp) gives NaN.
TEST(RowKernels, ScoreExpRowIsScoreRowThenExpRow) {
  test_util::forEachSimdTarget([&] {
    for (int64_t n : {1, 7, 17, 127, 129}) {
      const auto [s0, bias, mask] = ScoreInputs(n);
      for (int withBias = 0; withBias < 2; ++withBias)
        for (int withMask = 0; withMask < 2; ++withMask) {
          const float *b = withBias ? bias.data() : nullptr;
          const uint8_t *m = withMask ? mask.data() : nullptr;
          std::vector<float> want = s0, got = s0;
          const float max = scoreRow(want.data(), n, 0.7f, b, m, n);
          const float shift = (max == -kInf ? 0.0f : max) + 0.25f; // finite, above every logit
          expRow(want.data(), shift, want.data(), n);
          scoreExpRow(got.data(), n, 0.7f, b, m, shift);
          for (int64_t j = 0; j < n; ++j) {
            EXPECT_TRUE(near(got[j], want[j], 1e-6)) << "n " << n << " j " << j;
            if (m && !m[j]) {
              EXPECT_EQ(got[j], 0.0f) << "n " << n << " j " << j;
            }
          }
          scoreExpRow(got.data(), n, 0.7f, b, m, std::numeric_limits<float>::quiet_NaN());
          EXPECT_TRUE(std::isnan(got[0])) << "n " << n;
        }
    }
  });
}

// softmaxGradRow: p (dp - delta), then times the scale, rounded in that order (attention's dS;
// scaled after dbias took the unscaled gradient, the same bits).
TEST(RowKernels, SoftmaxGradRowScalesTheRoundedGradient) {
  test_util::forEachSimdTarget([&] {
    for (int64_t n : {1, 7, 17, 127, 129}) {
      const std::vector<float> p = test_util::randomFloats(n, 1, 0, 1),
                               dp = test_util::randomFloats(n, 2);
      std::vector<float> unscaled = dp, scaled = dp;
      softmaxGradRow(p.data(), 0.37f, 1.0f, unscaled.data(), n);
      softmaxGradRow(p.data(), 0.37f, 0.125f * 3, scaled.data(), n);
      for (int64_t j = 0; j < n; ++j) {
        const float g = p[j] * (dp[j] - 0.37f);
        EXPECT_EQ(unscaled[j], g) << "n " << n << " j " << j;
        EXPECT_EQ(scaled[j], g * (0.125f * 3)) << "n " << n << " j " << j;
      }
    }
  });
}

// expRow at a finite shift above every element takes vExpNonPositive: the bits of vmath's exp of
// x - shift, element for element, across the range where exp rounds to a subnormal and to 0 and
// at -inf (a masked score).
TEST(RowKernels, ExpRowBelowAFiniteShiftIsVmathsExpBitForBit) {
  test_util::forEachSimdTarget([&] {
    for (int64_t n : {1, 17, 129, 1000}) {
      std::vector<float> x = test_util::randomFloats(n, 4, -110, 2.5);
      x[0] = 2.5f; // the shift: the row's max
      if (n > 2)
        x[1] = -kInf, x[2] = 2.5f - 87.4f;
      std::vector<float> y(n), shifted(n), want(n);
      for (int64_t j = 0; j < n; ++j)
        shifted[j] = x[j] - 2.5f;
      codegen::runPointwise(ir::OpKind::Exp, ir::CastTo::Same, want.data(), shifted.data(), nullptr,
                            nullptr, n);
      expRow(x.data(), 2.5f, y.data(), n);
      EXPECT_EQ(std::memcmp(y.data(), want.data(), sizeof(float) * n), 0) << "n " << n;
    }
  });
}

// log_softmax's passes (logSoftmaxRows) against the ones they replaced: expRow without y returns
// the sum it returns with y, bit for bit, and logSoftmaxRow is x - m, then - logSum, each rounded
// (two affineRow passes), on rows with -inf, NaN and +inf (NaN where they gave NaN).
TEST(RowKernels, LogSoftmaxRowsPassesKeepTheirBits) {
  test_util::forEachSimdTarget([&] {
    for (int64_t n : {1, 7, 17, 127, 129, 1000}) {
      const int64_t rows = 5;
      std::vector<float> x = inputs(rows, n), e(n), want(n), got(n);
      for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x.data() + r * n;
        const float m = rowMax(xr, n);
        const float sum = expRow(xr, m, e.data(), n), alone = expRow(xr, m, nullptr, n);
        EXPECT_EQ(std::memcmp(&sum, &alone, sizeof sum), 0) << "n " << n << " row " << r;
        affineRow(xr, 1.0f, -m, want.data(), n);
        affineRow(want.data(), 1.0f, -std::log(sum), want.data(), n);
        logSoftmaxRow(xr, m, std::log(sum), got.data(), n);
        for (int64_t j = 0; j < n; ++j) // a NaN's sign and payload may differ
          EXPECT_TRUE(std::isnan(got[j]) ? std::isnan(want[j])
                                         : std::memcmp(&got[j], &want[j], sizeof(float)) == 0)
              << "n " << n << " row " << r << " element " << j << ": " << got[j] << " vs "
              << want[j];
      }
    }
  });
}

} // namespace
} // namespace kiln::kernels::softmax_test

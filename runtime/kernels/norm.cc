// Norm kernels (see norm.h), compiled per SIMD target and dispatched at run time. One row at a
// time: a row of the GPT (n = 256..1024 floats) is 1-4 KiB, so the two or three passes over it
// (sum, squared deviations, output) read it from L1 after the first; each pass keeps two vector
// accumulators so consecutive FMAs/adds do not wait on each other's latency.
#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/kernels/norm.h"
#include "runtime/thread_pool.h"
#include "support/bf16.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/kernels/norm.cc"
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"
// After highway.h (clang-format must not sort it above foreach_target.h).
#include "runtime/kernels/vmath-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

constexpr int64_t kRowsPerPart = 32;

// sum_j f(j) over a row, f returning a vector of lanes j..j+N-1 (the tail: scalar g(j)).
template <class F, class G> HWY_ATTR float rowSum(int64_t n, const F &f, const G &g) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  V s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t j = 0;
  for (; j + 2 * N <= n; j += 2 * N) {
    s0 = hn::Add(s0, f(j));
    s1 = hn::Add(s1, f(j + N));
  }
  for (; j + N <= n; j += N)
    s0 = hn::Add(s0, f(j));
  float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  for (; j < n; ++j)
    s += g(j);
  return s;
}

HWY_ATTR void forwardRow(const NormForward &f, int64_t r) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d)), n = f.n;
  const float *a = f.a + (r % f.aRows) * n;
  const float *s = a;
  if (f.b) {
    const float *b = f.b + (r % f.bRows) * n;
    float *sum = f.sum + r * n;
    int64_t j = 0;
    for (; j + N <= n; j += N)
      hn::StoreU(hn::Add(hn::LoadU(d, a + j), hn::LoadU(d, b + j)), d, sum + j);
    for (; j < n; ++j)
      sum[j] = a[j] + b[j];
    s = sum;
  }
  const float inv = 1.0f / static_cast<float>(n);
  float mean = 0;
  if (f.centered)
    mean = rowSum(
               n, [&](int64_t j) { return hn::LoadU(d, s + j); }, [&](int64_t j) { return s[j]; }) *
           inv;
  const V vm = hn::Set(d, mean);
  const float var = rowSum(
                        n,
                        [&](int64_t j) {
                          const V c = hn::Sub(hn::LoadU(d, s + j), vm);
                          return hn::Mul(c, c);
                        },
                        [&](int64_t j) { return (s[j] - mean) * (s[j] - mean); }) *
                    inv;
  const float rstd = 1.0f / std::sqrt(var + f.eps);
  const V vr = hn::Set(d, rstd);
  const hn::Rebind<uint16_t, D> d16;
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    V v = hn::Mul(hn::Sub(hn::LoadU(d, s + j), vm), vr);
    if (f.weight)
      v = hn::Mul(v, hn::LoadU(d, f.weight + j));
    if (f.bias)
      v = hn::Add(v, hn::LoadU(d, f.bias + j));
    if (f.yBf16)
      hn::StoreU(hn::TruncateTo(d16, hn::ShiftRight<16>(vm::bf16Bits(v))), d16,
                 f.yBf16 + r * n + j);
    else
      hn::StoreU(v, d, f.y + r * n + j);
  }
  for (; j < n; ++j) {
    const float v =
        (s[j] - mean) * rstd * (f.weight ? f.weight[j] : 1.0f) + (f.bias ? f.bias[j] : 0.0f);
    if (f.yBf16)
      f.yBf16[r * n + j] = toBf16Bits(v);
    else
      f.y[r * n + j] = v;
  }
  if (f.mean)
    f.mean[r] = mean;
  f.rstd[r] = rstd;
}

HWY_ATTR void forwardRun(const NormForward &f, runtime::ThreadPool *pool) {
  runtime::runParts(pool, (f.rows + kRowsPerPart - 1) / kRowsPerPart, [&](int64_t q, int) {
    for (int64_t r = q * kRowsPerPart; r < std::min(f.rows, (q + 1) * kRowsPerPart); ++r)
      forwardRow(f, r);
  });
}

// dx of row r; dweight's share of the row added into `dw` (if any).
HWY_ATTR void backwardRow(const NormBackward &b, int64_t r, float *dw) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d)), n = b.n;
  const float *x = b.x + r * n, *dy = b.dy + r * n;
  const float mean = b.mean ? b.mean[r] : 0.0f, rstd = b.rstd[r];
  const V vm = hn::Set(d, mean), vr = hn::Set(d, rstd), one = hn::Set(d, 1.0f);
  auto w = [&](int64_t j) { return b.weight ? hn::LoadU(d, b.weight + j) : one; };
  auto ws = [&](int64_t j) { return b.weight ? b.weight[j] : 1.0f; };
  auto xhat = [&](int64_t j) { return hn::Mul(hn::Sub(hn::LoadU(d, x + j), vm), vr); };
  auto xhats = [&](int64_t j) { return (x[j] - mean) * rstd; };
  const float inv = 1.0f / static_cast<float>(n);
  const float meanG = b.mean
                          ? rowSum(
                                n, [&](int64_t j) { return hn::Mul(hn::LoadU(d, dy + j), w(j)); },
                                [&](int64_t j) { return dy[j] * ws(j); }) *
                                inv
                          : 0.0f;
  const float meanGX =
      rowSum(
          n, [&](int64_t j) { return hn::Mul(hn::Mul(hn::LoadU(d, dy + j), w(j)), xhat(j)); },
          [&](int64_t j) { return dy[j] * ws(j) * xhats(j); }) *
      inv;
  const V vg = hn::Set(d, meanG), vgx = hn::Set(d, meanGX);
  float *dx = b.dx + r * n;
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const V dyv = hn::LoadU(d, dy + j), xh = xhat(j);
    const V g = hn::Mul(dyv, w(j));
    hn::StoreU(hn::Mul(vr, hn::Sub(hn::Sub(g, vg), hn::Mul(xh, vgx))), d, dx + j);
    if (dw)
      hn::StoreU(hn::MulAdd(dyv, xh, hn::LoadU(d, dw + j)), d, dw + j);
  }
  for (; j < n; ++j) {
    const float g = dy[j] * ws(j), xh = xhats(j);
    dx[j] = rstd * (g - meanG - xh * meanGX);
    if (dw)
      dw[j] += dy[j] * xh;
  }
}

HWY_ATTR void backwardRun(const NormBackward &b, runtime::ThreadPool *pool) {
  const int64_t parts = (b.rows + kRowsPerPart - 1) / kRowsPerPart;
  std::vector<float> partial(b.dweight ? static_cast<size_t>(parts * b.n) : 0, 0.0f);
  runtime::runParts(pool, parts, [&](int64_t q, int) {
    float *dw = b.dweight ? partial.data() + q * b.n : nullptr;
    for (int64_t r = q * kRowsPerPart; r < std::min(b.rows, (q + 1) * kRowsPerPart); ++r)
      backwardRow(b, r, dw);
  });
  if (!b.dweight)
    return;
  std::fill(b.dweight, b.dweight + b.n, 0.0f);
  for (int64_t q = 0; q < parts; ++q)
    for (int64_t j = 0; j < b.n; ++j)
      b.dweight[j] += partial[q * b.n + j];
}

} // namespace kiln::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::kernels {

HWY_EXPORT(forwardRun);
HWY_EXPORT(backwardRun);

void normForward(const NormForward &f, runtime::ThreadPool *pool) {
  if (f.rows > 0 && f.n > 0)
    HWY_DYNAMIC_DISPATCH(forwardRun)(f, pool);
}

void normBackward(const NormBackward &b, runtime::ThreadPool *pool) {
  if (b.rows > 0 && b.n > 0)
    HWY_DYNAMIC_DISPATCH(backwardRun)(b, pool);
  else if (b.dweight)
    std::fill(b.dweight, b.dweight + b.n, 0.0f);
}

void normForwardScalar(const NormForward &f) {
  for (int64_t r = 0; r < f.rows; ++r) {
    const float *a = f.a + (r % f.aRows) * f.n;
    std::vector<float> s(a, a + f.n);
    if (f.b)
      for (int64_t j = 0; j < f.n; ++j)
        s[j] += f.b[(r % f.bRows) * f.n + j], f.sum[r * f.n + j] = s[j];
    float mean = 0, var = 0;
    if (f.centered) {
      for (float v : s)
        mean += v;
      mean /= static_cast<float>(f.n);
    }
    for (float v : s)
      var += (v - mean) * (v - mean);
    const float rstd = 1.0f / std::sqrt(var / static_cast<float>(f.n) + f.eps);
    for (int64_t j = 0; j < f.n; ++j) {
      const float y =
          (s[j] - mean) * rstd * (f.weight ? f.weight[j] : 1.0f) + (f.bias ? f.bias[j] : 0.0f);
      if (f.yBf16)
        f.yBf16[r * f.n + j] = toBf16Bits(y);
      else
        f.y[r * f.n + j] = y;
    }
    if (f.mean)
      f.mean[r] = mean;
    f.rstd[r] = rstd;
  }
}

void normBackwardScalar(const NormBackward &b) {
  if (b.dweight)
    std::fill(b.dweight, b.dweight + b.n, 0.0f);
  for (int64_t r = 0; r < b.rows; ++r) {
    const float mean = b.mean ? b.mean[r] : 0.0f, rstd = b.rstd[r];
    float meanG = 0, meanGX = 0;
    for (int64_t j = 0; j < b.n; ++j) {
      const float g = b.dy[r * b.n + j] * (b.weight ? b.weight[j] : 1.0f);
      meanG += g;
      meanGX += g * (b.x[r * b.n + j] - mean) * rstd;
    }
    meanG = b.mean ? meanG / static_cast<float>(b.n) : 0.0f;
    meanGX /= static_cast<float>(b.n);
    for (int64_t j = 0; j < b.n; ++j) {
      const float xh = (b.x[r * b.n + j] - mean) * rstd, dy = b.dy[r * b.n + j];
      b.dx[r * b.n + j] = rstd * (dy * (b.weight ? b.weight[j] : 1.0f) - meanG - xh * meanGX);
      if (b.dweight)
        b.dweight[j] += dy * xh;
    }
  }
}

} // namespace kiln::kernels
#endif

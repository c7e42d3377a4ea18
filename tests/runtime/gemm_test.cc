// The GEMM kernel against its scalar twin, on every compiled SIMD target: odd sizes around the
// micro-tile and block edges, every transpose of A and B, batched and strided operands,
// accumulation, the epilogue, and the same bits at 1 and 2 threads; the same for bf16 products,
// on AMX, on vdpbf16ps and on the f32 FMAs of every other target; and operands of bf16 elements.
#include "runtime/kernels/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/cpu_features.h"
#include "runtime/kernels/target.h"
#include "runtime/thread_pool.h"
#include "support/bf16.h"
#include "support/workspace.h"
#include "tests/util/random.h"
#include "tests/util/simd_targets.h"

namespace kiln::kernels::gemm_test {
namespace {

using test_util::randomFloats;

struct Case {
  int64_t batch, m, n, k;
  bool ta, tb;
  bool bf16 = false; // bf16 products
  int64_t pad = 3;   // A's row stride past its row (bf16 rows of A are read in place at odd and
                     // even strides alike, but not 4 KiB apart: gemm.cc, readsARows)
};

// A [batch, m, k] (or [batch, k, m] if ta), B [batch, k, n] (or [batch, n, k]); A's rows padded
// to a stride of k + pad so that strides are not the packed sizes.
struct Operands {
  Case c;
  int64_t lda, ldb;
  std::vector<float> a, b;
  explicit Operands(Case cs) : c(cs) {
    lda = (c.ta ? c.m : c.k) + c.pad;
    ldb = c.tb ? c.k : c.n;
    a = randomFloats(c.batch * (c.ta ? c.k : c.m) * lda, 1);
    b = randomFloats(c.batch * (c.tb ? c.n : c.k) * ldb, 2);
  }
  Gemm gemm(float *out) const {
    Gemm g;
    g.batch = c.batch, g.m = c.m, g.n = c.n, g.k = c.k;
    int64_t aRows = c.ta ? c.k : c.m, bRows = c.tb ? c.n : c.k;
    g.a =
        c.ta ? MatrixRef{a.data(), 1, lda, aRows * lda} : MatrixRef{a.data(), lda, 1, aRows * lda};
    g.b =
        c.tb ? MatrixRef{b.data(), 1, ldb, bRows * ldb} : MatrixRef{b.data(), ldb, 1, bRows * ldb};
    g.c = out;
    g.ldc = c.n;
    g.cBatchStride = c.m * c.n;
    g.bf16 = c.bf16;
    return g;
  }
};

// |x - y| within a few ulps of the sum of |terms| (the two sum in different orders).
void expectClose(const std::vector<float> &got, const std::vector<float> &want, int64_t k) {
  ASSERT_EQ(got.size(), want.size());
  float tol = 4e-7f * static_cast<float>(k + 1) + 1e-6f;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << "element " << i;
}

void runCase(Case c, runtime::ThreadPool *pool, bool accumulate) {
  Operands ops(c);
  std::vector<float> got = randomFloats(c.batch * c.m * c.n, 3), want = got;
  Gemm g = ops.gemm(got.data());
  g.accumulate = accumulate;
  std::vector<float> scratch(static_cast<size_t>(gemmScratchFloats(g, pool ? pool->threads() : 1)));
  gemm(g, pool, scratch.data());
  Gemm w = ops.gemm(want.data());
  w.accumulate = accumulate;
  gemmScalar(w);
  expectClose(got, want, c.k);
}

// fn on one product of each odd size around the micro-tile (1, 7, 17, 127, 129) and every
// transpose of A and B, traced.
template <class F> void forEachOddCase(const F &fn) {
  for (int64_t m : {1, 7, 17, 129})
    for (int64_t n : {1, 17, 127})
      for (int64_t k : {1, 7, 129})
        for (bool ta : {false, true})
          for (bool tb : {false, true}) {
            SCOPED_TRACE(testing::Message()
                         << m << "x" << n << "x" << k << " ta=" << ta << " tb=" << tb);
            fn(Case{1, m, n, k, ta, tb});
          }
}

TEST(Gemm, OddSizesEveryTransposeEveryTarget) {
  runtime::ThreadPool pool(2);
  test_util::forEachSimdTarget([&] { forEachOddCase([&](Case c) { runCase(c, &pool, false); }); });
}

TEST(Gemm, BlockEdgesBatchesAndAccumulation) {
  runtime::ThreadPool pool(2);
  test_util::forEachSimdTarget([&] {
    // Past Mc (168), Kc (256) and Nc (512) so that every loop takes more than one block.
    runCase({1, 200, 530, 300, false, true}, &pool, false);
    runCase({3, 33, 65, 270, true, false}, &pool, true);
    runCase({2, 129, 7, 17, true, true}, nullptr, true);
    runCase({1, 5, 6, 0, false, false}, &pool, false); // k = 0: C = 0
    // At most Mc rows per thread: the threads split the columns (200 rows above too), sharing
    // A's packed block where k is one block, else each packing A; or, A^T over many blocks of
    // k, they split the rows, each packing B.
    runCase({1, 300, 200, 0, false, true}, &pool, false);
    runCase({1, 330, 97, 40, true, false}, &pool, true);
    runCase({1, 300, 300, 200, false, true}, &pool, true);
    runCase({1, 300, 300, 1500, false, false}, &pool, true);
    runCase({1, 300, 300, 1500, true, true}, &pool, false);
  });
}

// c with an epilogue that doubles each element and adds its column against the scalar twin: a
// sum seen twice, or before it is finished, comes out wrong.
void expectEpilogueOnce(Case c, runtime::ThreadPool &pool) {
  Operands ops(c);
  std::vector<float> got(static_cast<size_t>(c.batch * c.m * c.n)), want = got;
  auto bias = [](void *, int64_t, int64_t, int64_t col, int64_t rows, int64_t cols, float *p,
                 int64_t ldc) {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        p[i * ldc + j] = p[i * ldc + j] * 2 + static_cast<float>(col + j);
  };
  Gemm g = ops.gemm(got.data());
  g.epilogue.fn = bias;
  std::vector<float> scratch(static_cast<size_t>(gemmScratchFloats(g, pool.threads())));
  gemm(g, &pool, scratch.data());
  Gemm w = ops.gemm(want.data());
  w.epilogue.fn = bias;
  gemmScalar(w);
  expectClose(got, want, c.k * 2);
}

// Products of at most 4 rows (decoding) read B unpacked, by dot products (B = W^T) or by rows:
// every row count, column and k edge of the vectors and of the 64-column parts, both layouts,
// accumulation and batches, f32 and bf16 products; the same bits at 1 and 2 threads.
TEST(Gemm, FewRowsEveryLayoutAndEdge) {
  runtime::ThreadPool pool(2);
  test_util::forEachSimdTarget([&] {
    for (int64_t m : {1, 2, 3, 4})
      for (int64_t n : {1, 17, 64, 65, 200})
        for (int64_t k : {1, 15, 16, 17, 300})
          for (bool tb : {false, true}) {
            SCOPED_TRACE(testing::Message() << m << "x" << n << "x" << k << " tb=" << tb);
            for (bool ta : {false, true})
              for (bool bf16 : {false, true}) // bf16: dots on vdpbf16ps, or rounded lanes
                runCase({2, m, n, k, ta, tb, bf16}, &pool, /*accumulate=*/n == 65);
          }
  });
  Case c{2, 3, 700, 520, false, true};
  Operands ops(c);
  std::vector<float> one(static_cast<size_t>(c.batch * c.m * c.n)), two = one;
  runtime::ThreadPool pool1(1);
  Gemm g = ops.gemm(one.data());
  gemm(g, &pool1, nullptr);
  g.c = two.data();
  gemm(g, &pool, nullptr);
  EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float)));
  // The epilogue sees every finished element once, in both layouts.
  for (bool tb : {false, true})
    expectEpilogueOnce({2, 4, 130, 70, false, tb}, pool);
}

// The epilogue adds a bias per column; it must see each element of C exactly once, finished.
TEST(Gemm, EpilogueSeesEachFinishedElementOnce) {
  runtime::ThreadPool pool(2);
  expectEpilogueOnce({2, 190, 600, 260, false, true}, pool);
  expectEpilogueOnce({1, 250, 300, 1100, true, false}, pool); // halves of the rows (A^T, deep)
  // Over 2 and 3 blocks of columns, the epilogue on whole rows after the last: halves of the
  // rows, then blocks of rows.
  expectEpilogueOnce({1, 250, 700, 1100, true, false}, pool);
  expectEpilogueOnce({1, 400, 600, 100, false, true}, pool);
  expectEpilogueOnce({1, 400, 2100, 100, true, false, true}, pool);
  expectEpilogueOnce({1, 400, 600, 0, false, true}, pool); // k = 0: C zeroed, then the epilogue
}

// Pre-packed operands (attention's tiles): a product over a slice of each pack -- A's k from an
// offset on, B's k from an offset on and its columns from the second micro-panel on -- against
// the scalar twin, odd sizes, every transpose, every target; and an A read in place (column-major
// or row-major), and a row-major B read in place.
TEST(Gemm, PrePackedOperandsAndTheirSlices) {
  auto aligned = [](std::vector<float> &v) { return workspace::alignUp64(v.data()); };
  test_util::forEachSimdTarget([&] {
    const int64_t mr = gemmPanelRows(), nr = gemmPanelCols();
    forEachOddCase([&](Case c) {
      const int64_t m = c.m, n = c.n, k = c.k;
      Operands ops({1, m, n + nr, 2 * k, c.ta, c.tb});
      std::vector<float> abuf(workspace::gemmPackAFloats(m, 2 * k) + 16),
          bbuf(workspace::gemmPackBFloats(2 * k, n + nr) + 16);
      float *ap = aligned(abuf), *bp = aligned(bbuf);
      std::vector<float> got = randomFloats(m * n, 3), want(got.size());
      Gemm whole = ops.gemm(want.data());
      packGemmA(whole.a, m, 2 * k, ap);
      packGemmB(whole.b, 2 * k, n + nr, bp);
      gemmPacked(m, n, k, {ap + k * mr, 2 * k * mr}, {bp + 2 * k * nr + k * nr, 2 * k * nr},
                 got.data(), n, false);
      Gemm w;
      w.m = m, w.n = n, w.k = k, w.c = want.data(), w.ldc = n;
      w.a = whole.a, w.a.data += k * whole.a.colStride;
      w.b = whole.b, w.b.data += k * whole.b.rowStride + nr * whole.b.colStride;
      gemmScalar(w);
      expectClose(got, want, k);
      const int64_t panels = n / nr * nr; // the columns of whole panels
      if (!c.tb && panels > 0) {
        // B row-major read in place, as attention reads K, V, Q and dO: whole panels, k and the
        // columns from the same offsets on.
        std::vector<float> inPlace(static_cast<size_t>(m * panels)), wantPanels(inPlace.size());
        Gemm wp = w;
        wp.n = panels, wp.ldc = panels, wp.c = wantPanels.data();
        gemmScalar(wp);
        gemmPacked(m, panels, k, {ap + k * mr, 2 * k * mr},
                   {ops.b.data() + k * ops.ldb + nr, nr, ops.ldb}, inPlace.data(), panels, false);
        expectClose(inPlace, wantPanels, k);
      }
      if (!c.ta) {
        // A row-major with rows kGemmARowStride apart is read in place, as attention reads P and
        // dS: k from the same offset on.
        constexpr int64_t ld = workspace::kGemmARowStride;
        if (2 * k > ld)
          return;
        std::vector<float> rows(static_cast<size_t>(m * ld), std::nanf(""));
        for (int64_t i = 0; i < m; ++i)
          std::copy_n(ops.a.data() + i * ops.lda, 2 * k, rows.data() + i * ld);
        std::vector<float> inPlace(got.size());
        gemmPacked(m, n, k, {rows.data() + k, mr * ld, 0, true},
                   {bp + 2 * k * nr + k * nr, 2 * k * nr}, inPlace.data(), n, false);
        expectClose(inPlace, want, k);
        return;
      }
      // A transposed in memory ([k, m] rows) is read in place, as attention reads P^T: k from
      // the same offset on, the last panel's extra rows read past m (a copy with room for them).
      std::vector<float> at(ops.a);
      at.resize(at.size() + mr);
      std::vector<float> inPlace(got.size());
      gemmPacked(m, n, k, {at.data() + k * ops.lda, mr, ops.lda},
                 {bp + 2 * k * nr + k * nr, 2 * k * nr}, inPlace.data(), n, false);
      expectClose(inPlace, want, k);
    });
  });
}

TEST(Gemm, SameBitsAtOneAndTwoThreads) {
  // The second: blocks of rows at 1 thread, of columns at 2; the third (a weight gradient's
  // A^T, many blocks of k): blocks of rows at 1 thread, halves of the rows at 2.
  for (Case c : {Case{2, 301, 700, 520, true, true}, Case{1, 301, 700, 520, false, true},
                 Case{1, 301, 300, 1100, true, false}})
    for (bool bf16 : {false, true}) {
      c.bf16 = bf16;
      Operands ops(c);
      std::vector<float> one(static_cast<size_t>(c.batch * c.m * c.n)), two = one;
      runtime::ThreadPool pool1(1), pool2(2);
      Gemm g = ops.gemm(one.data());
      std::vector<float> scratch(static_cast<size_t>(gemmScratchFloats(g, 2)));
      gemm(g, &pool1, scratch.data());
      g.c = two.data();
      gemm(g, &pool2, scratch.data());
      EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float))) << bf16;
    }
}

// ---- bf16 products ----
// Against the scalar twin (operands rounded to bf16, f32 sums in k order): on every target, odd
// sizes (odd k pairs with a zero), every transpose, block edges, batches, accumulation, few rows
// (decoding), k = 0 and the epilogue. The sums differ only in order, so the f32 tolerance holds;
// unrounded operands would be off by about 2^-9 relative, far past it.
TEST(GemmBf16, AgainstTheScalarTwinEveryTarget) {
  runtime::ThreadPool pool(2);
  test_util::forEachSimdTarget([&] {
    forEachOddCase([&](Case c) {
      c.bf16 = true;
      runCase(c, &pool, false);
    });
    runCase({1, 200, 530, 300, false, true, true}, &pool, false);
    runCase({3, 33, 65, 270, true, false, true}, &pool, true);
    runCase({1, 330, 97, 41, true, false, true}, &pool, true);
    runCase({2, 3, 130, 17, false, true, true}, &pool, true);
    runCase({2, 4, 65, 301, true, false, true}, &pool, false);
    runCase({1, 5, 6, 0, false, false, true}, &pool, false);
    runCase({1, 2, 70, 4233, false, true, true}, &pool, true); // decoding's dots: 2 blocks of k
    expectEpilogueOnce({2, 190, 600, 260, false, true, true}, pool);
    expectEpilogueOnce({1, 190, 600, 260, true, true, true}, pool); // blocks of columns
  });
}

// Round to nearest, ties to even, as support/bf16.h: 1 + 2^-8 is a tie between 1 and 1 + 2^-7
// (to 1, the even one), 1 + 2^-8 + 2^-9 is above it (to 1 + 2^-7). Their sum times 1 is 2 + 2^-7
// in bf16 products, 2 + 2^-7 + 2^-9 in f32. On the packed path and the few-rows one, every target.
TEST(GemmBf16, RoundsOperandsToNearestEven) {
  test_util::forEachSimdTarget([&] {
    for (int64_t m : {1, 16}) {
      const int64_t n = 33;
      std::vector<float> a(static_cast<size_t>(2 * m)), b(static_cast<size_t>(2 * n), 1.0f);
      for (int64_t i = 0; i < m; ++i)
        a[2 * i] = 1 + 0x1p-8f, a[2 * i + 1] = 1 + 0x1p-8f + 0x1p-9f;
      std::vector<float> c(static_cast<size_t>(m * n));
      Gemm g;
      g.m = m, g.n = n, g.k = 2, g.bf16 = true;
      g.a = {a.data(), 2, 1, 0}, g.b = {b.data(), n, 1, 0}, g.c = c.data(), g.ldc = n;
      std::vector<float> scratch(static_cast<size_t>(gemmScratchFloats(g, 1)));
      gemm(g, nullptr, scratch.data());
      for (float x : c)
        ASSERT_EQ(x, 2 + 0x1p-7f) << "m " << m;
    }
  });
}

// vdpbf16ps adds the product of k = 2i + 1, then that of k = 2i, to its f32 sum, each rounded
// (Intel's pseudocode; measured on a Sapphire Rapids-class Xeon: no difference in 320000 sums,
// 34000 in the other order); the FMA kernels do the same, so the fallback gives its bits. A CPU
// whose instruction sums otherwise fails this test, which then says so.
TEST(GemmBf16, TheInstructionAndItsFallbackGiveTheSameBits) {
  forbidAmx(true);
  if (gemmBf16Engine() != "vdpbf16ps") {
    forbidAmx(false);
    GTEST_SKIP() << "this CPU has no AVX512_BF16";
  }
  runtime::ThreadPool pool(2);
  for (Case c : {Case{1, 200, 530, 300, false, true, true}, Case{3, 33, 65, 270, true, false, true},
                 Case{1, 17, 127, 129, true, true, true}}) {
    Operands ops(c);
    std::vector<float> native(static_cast<size_t>(c.batch * c.m * c.n)), fma = native;
    Gemm g = ops.gemm(native.data());
    std::vector<float> scratch(static_cast<size_t>(gemmScratchFloats(g, 2)));
    gemm(g, &pool, scratch.data());
    forbidBf16Instructions(true);
    g.c = fma.data();
    gemm(g, &pool, scratch.data());
    forbidBf16Instructions(false);
    EXPECT_EQ(0, std::memcmp(native.data(), fma.data(), native.size() * sizeof(float)))
        << c.m << "x" << c.n << "x" << c.k;
  }
  forbidAmx(false);
}

// Each engine the CPU has (AMX, vdpbf16ps, f32 FMAs) against the scalar twin on the AVX-512
// target: odd sizes, every transpose (A row-major and column-major take AMX's two packings), a
// strided A (element by element), accumulation over Kc blocks, edges of the 32 x 32 tiles, whole
// tiles of 16 pairs and the pairs past them, and blocks of columns.
TEST(GemmBf16, EveryEngineAgainstTheScalarTwin) {
  runtime::ThreadPool pool(2);
  for (int engine = 0; engine < 3; ++engine) {
    forbidAmx(engine > 0);
    forbidBf16Instructions(engine > 1);
    SCOPED_TRACE(gemmBf16Engine());
    forEachOddCase([&](Case c) {
      c.bf16 = true;
      runCase(c, &pool, false);
    });
    for (bool ta : {false, true}) {
      runCase({1, 200, 530, 300, ta, true, true}, &pool, false);
      runCase({3, 48, 64, 64, ta, false, true}, &pool, true);
      runCase({1, 33, 97, 33, ta, false, true}, &pool, true);
      runCase({2, 169, 65, 520, ta, true, true}, &pool, false);
      runCase({1, 300, 300, 200, ta, true, true}, &pool, true); // A's one block of k shared
      // 3 blocks of k: A packed per part of the columns, or (A^T) B per half of the rows.
      runCase({1, 300, 300, 1500, ta, false, true}, &pool, true);
      // Blocks of columns: vdpbf16ps' pairs take 2 Nc a block from k = 8 on (the scratch's
      // bound), Nc below; m past Mc 2 threads (a B block shared) and within (blocks by columns).
      for (int64_t k : {7, 9, 300})
        for (int64_t m : {40, 400})
          runCase({1, m, 2 * workspace::kGemmNc + 70, k, ta, k % 2 == 1, true}, &pool, true);
    }
  }
  forbidAmx(false);
  forbidBf16Instructions(false);
  // A strided in both dimensions: an A column of a [k, 2m] matrix read every other element.
  std::vector<float> a = test_util::randomFloats(40 * 60, 4),
                     b = test_util::randomFloats(40 * 33, 5);
  std::vector<float> got(30 * 33), want(got.size());
  Gemm g;
  g.m = 30, g.n = 33, g.k = 40, g.bf16 = true;
  g.a = {a.data(), 2, 60, 0}, g.b = {b.data(), 33, 1, 0}, g.c = got.data(), g.ldc = 33;
  std::vector<float> scratch(static_cast<size_t>(gemmScratchFloats(g, 2)));
  gemm(g, &pool, scratch.data());
  g.c = want.data();
  gemmScalar(g);
  expectClose(got, want, g.k);
}

// The instruction runs on the AVX-512 targets of a CPU that has it, and nowhere else: a forced
// AVX2 (or lower) target and a forbidden instruction take the f32 FMAs.
TEST(GemmBf16, FallsBackWhereTheInstructionIsMissing) {
  const bool cpu = runtime::cpuHasFeature("avx512bf16");
  test_util::forEachSimdTarget([&] {
    const bool avx512 = activeTarget().starts_with("AVX3");
    EXPECT_EQ(gemmBf16Engine() != "f32 FMAs", cpu && avx512);
    forbidBf16Instructions(true);
    EXPECT_EQ(gemmBf16Engine(), "f32 FMAs");
    forbidBf16Instructions(false);
  });
}

// Operands of bf16 elements (MatrixRef::bf16: inference weights, activations stored in bf16) give
// the bits of operands of f32 elements holding the same values: A, B or both, on every path (few
// rows by dots and by rows, the packed blocks, AMX's pair packing, the f32 pack of a strided B),
// every engine and target, f32 and bf16 products, both layouts of A and of B, batches,
// accumulation, odd k (a pair's missing half) and columns past a panel; and bf16 rows of A read in
// place as pairs on vdpbf16ps (by columns, with A shared, by blocks of rows, batched; odd and even
// strides, rows 2 KiB apart; an odd last block of k packed), beside rows 4 KiB apart, which pack.
TEST(GemmBf16, Bf16ElementsGiveTheBitsOfTheirValues) {
  runtime::ThreadPool pool(2);
  const std::vector<Case> cases = {{1, 1, 130, 301, false, true},
                                   {2, 4, 65, 33, false, false},
                                   {1, 3, 200, 17, true, true},
                                   {1, 1, 40, 9, true, false},
                                   {1, 200, 530, 300, true, true},
                                   {2, 33, 97, 129, false, false},
                                   {1, 17, 1, 7, false, true},
                                   {1, 2, 70, 4233, false, true},
                                   {1, 45, 70, 40, true, false},
                                   {1, 100, 300, 1100, false, false, false, 2},
                                   {1, 33, 200, 300, false, true, false, 4},
                                   {1, 400, 100, 600, false, true, false, 2},
                                   {2, 31, 70, 64, false, false, false, 2},
                                   {1, 40, 64, 1022, false, true, false, 2},
                                   {1, 60, 200, 1101, false, false, false, 0},
                                   {2, 31, 70, 64, false, true},
                                   {1, 50, 64, 2046, false, true, false, 2},
                                   // by columns, a part a thread: all 250 rows in one block
                                   {1, 250, 150, 600, false, false, false, 2}};
  auto toBits = [](std::vector<float> &values) {
    std::vector<uint16_t> bits(values.size());
    for (size_t e = 0; e < bits.size(); ++e) {
      bits[e] = toBf16Bits(values[e]);
      values[e] = fromBf16Bits(bits[e]);
    }
    return bits;
  };
  for (int engine = 0; engine < 3; ++engine) {
    forbidAmx(engine > 0);
    forbidBf16Instructions(engine > 1);
    test_util::forEachSimdTarget([&] {
      for (Case c : cases)
        for (int which = 1; which <= 3; ++which) // bf16 elements in A (1), B (2) or both (3)
          for (bool products : {false, true})
            for (bool accumulate : {false, true}) {
              c.bf16 = products;
              SCOPED_TRACE(testing::Message()
                           << gemmBf16Engine() << " m" << c.m << " n" << c.n << " k" << c.k
                           << " ta " << c.ta << " tb " << c.tb << " bf16 in " << which
                           << " bf16 products " << products << " accumulate " << accumulate);
              Operands ops(c);
              std::vector<uint16_t> aBits = toBits(ops.a), bBits = toBits(ops.b);
              std::vector<float> want = randomFloats(c.batch * c.m * c.n, 3), got = want;
              Gemm g = ops.gemm(want.data());
              g.accumulate = accumulate;
              std::vector<float> scratch(static_cast<size_t>(gemmScratchFloats(g, 2)));
              gemm(g, &pool, scratch.data());
              g.c = got.data();
              if (which & 1)
                g.a.bf16 = aBits.data(), g.a.data = nullptr;
              if (which & 2)
                g.b.bf16 = bBits.data(), g.b.data = nullptr;
              gemm(g, &pool, scratch.data());
              ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
            }
    });
  }
  forbidAmx(false);
  forbidBf16Instructions(false);
  // A strided B (neither stride 1: the f32 pack, made pairs after) with a bf16 A.
  std::vector<float> a = test_util::randomFloats(30 * 40, 4),
                     b = test_util::randomFloats(40 * 66, 5);
  std::vector<uint16_t> aBits = toBits(a);
  std::vector<float> got(30 * 33), want(got.size());
  Gemm g;
  g.m = 30, g.n = 33, g.k = 40, g.bf16 = true;
  g.a = {a.data(), 40, 1, 0}, g.b = {b.data(), 66, 2, 0}, g.c = want.data(), g.ldc = 33;
  std::vector<float> scratch(static_cast<size_t>(gemmScratchFloats(g, 2)));
  gemm(g, &pool, scratch.data());
  g.c = got.data(), g.a.bf16 = aBits.data(), g.a.data = nullptr;
  gemm(g, &pool, scratch.data());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
}

} // namespace
} // namespace kiln::kernels::gemm_test

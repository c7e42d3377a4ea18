// Shape/dtype inference and the reference loop of batched matmul:
// a [..., M, K] x b [..., K, N] -> [..., M, N], batch dims broadcast, either operand optionally
// stored transposed in its last two dims.
#include "ir/ops/matmul.h"

#include <fmt/format.h>

#include "ir/graph.h"
#include "support/bf16.h"
#include "support/workspace.h"

namespace kiln::ir {
namespace {

// The operand as the user wrote it: "[2,3,4]", with "^T" if it is read transposed.
std::string operandString(const Type &t, bool transposed) {
  return shapeString(t.shape) + (transposed ? "^T" : "");
}

// [M, K] of a (or [K, N] of b) after the optional transpose of its last two dims.
std::pair<int64_t, int64_t> matrixDims(const Type &t, bool transposed) {
  int64_t r = t.shape[t.rank() - 2], c = t.shape[t.rank() - 1];
  return transposed ? std::pair{c, r} : std::pair{r, c};
}

std::span<const int64_t> batchDims(const Type &t) {
  return std::span<const int64_t>(t.shape).first(t.shape.size() - 2);
}

} // namespace

Expected<std::vector<Type>> inferMatmul(std::span<const Type> in, const Attrs &attrs) {
  const Type &a = in[0], &b = in[1];
  bool ta = attrs.getBool("transpose_a"), tb = attrs.getBool("transpose_b");
  std::string both = fmt::format("{} x {}", operandString(a, ta), operandString(b, tb));
  for (const Type *t : {&a, &b})
    if (!isFloat(t->dtype))
      return makeError("operand has dtype {}, expected a float dtype (f32, f64, bf16): {}",
                       dtypeName(t->dtype), both);
  // With bf16 products each operand may be stored in f32 or in bf16 (rounding a bf16 is itself:
  // a weight, passes/bf16_weights.cc; an activation, passes/bf16_activations.cc), and the sums
  // are f32.
  auto f32OrBf16 = [](DType d) { return d == DType::F32 || d == DType::BF16; };
  const bool mixed = attrs.getBool("bf16_products") && f32OrBf16(a.dtype) && f32OrBf16(b.dtype);
  if (a.dtype != b.dtype && !mixed)
    return makeError("operand dtypes differ: {} x {} (insert a cast; with bf16_products each may "
                     "be f32 or bf16)",
                     typeString(a), typeString(b));
  if (a.rank() < 2 || b.rank() < 2)
    return makeError("operands must have rank >= 2 (a vector is a [1, K] or [K, 1] matrix): {}",
                     both);
  auto [m, ka] = matrixDims(a, ta);
  auto [kb, n] = matrixDims(b, tb);
  if (ka != kb)
    return makeError("inner dimensions differ: {} ({} vs {})", both, ka, kb);
  Expected<Shape> batch = broadcastShapes(batchDims(a), batchDims(b));
  if (!batch)
    return makeError("batch dimensions do not broadcast: {} ({} vs {})", both,
                     shapeString(batchDims(a)), shapeString(batchDims(b)));
  Shape shape = std::move(*batch);
  shape.push_back(m);
  shape.push_back(n);
  return std::vector<Type>{Type{mixed ? DType::F32 : a.dtype, std::move(shape)}};
}

// The rows are counted over the whole batch: the kernel runs a batch that shares its weight as
// one GEMM of batch x m rows (codegen's gemmShape), and gemmBytes caps the rows at a block anyway.
// Counted per matrix (m alone), the workspace fell short of what five or more workers pack, and
// their A blocks overwrote a matmul region's C further on in the scratch (issue 36).
int64_t scratchMatmul(const Graph &g, const Node &n) {
  const int64_t k = matrixDims(g.type(n.operands[0]), n.attrs.getBool("transpose_a")).second;
  const Shape &out = g.type(n.results[0]).shape;
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < out.size(); ++d)
    rows = mulSat(rows, out[d]);
  return workspace::gemmBytes(rows, out.back(), k);
}

// y[z, i, j] = sum_k a[za, i, k] * b[zb, k, j], accumulated in F in order k = 0, 1, ...;
// za, zb are the batch elements of a and b that broadcasting reads at output batch z. With
// bf16_products each a and b is first rounded to bf16: the reference of mixed precision.
template <class F> KILN_REF_FN(refMatmul) {
  const RefTensor<F> &a = *in[0], &b = *in[1];
  RefTensor<F> &y = out[0];
  bool ta = attrs.getBool("transpose_a"), tb = attrs.getBool("transpose_b");
  auto [m, kDim] = matrixDims(a.type, ta);
  int64_t n = matrixDims(b.type, tb).second;
  std::span<const int64_t> yBatch = batchDims(y.type);
  std::vector<int64_t> za = broadcastIndexMap(batchDims(a.type), yBatch);
  std::vector<int64_t> zb = broadcastIndexMap(batchDims(b.type), yBatch);
  // Element (i, k) of the logical matrix, from its stored (possibly transposed) layout.
  const bool bf16 = attrs.getBool("bf16_products");
  auto at = [bf16](const std::vector<F> &v, int64_t base, bool t, int64_t rows, int64_t cols,
                   int64_t i, int64_t k) {
    const F x = t ? v[base + k * rows + i] : v[base + i * cols + k];
    return bf16 ? static_cast<F>(roundToBf16(static_cast<float>(x))) : x;
  };
  for (size_t z = 0; z < za.size(); ++z) {
    int64_t aBase = za[z] * m * kDim, bBase = zb[z] * kDim * n, yBase = int64_t(z) * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        F acc = 0;
        for (int64_t k = 0; k < kDim; ++k)
          acc += at(a.f, aBase, ta, m, kDim, i, k) * at(b.f, bBase, tb, kDim, n, k, j);
        y.f[yBase + i * n + j] = acc;
      }
  }
  return {};
}
KILN_REF_INSTANTIATE(refMatmul);

} // namespace kiln::ir

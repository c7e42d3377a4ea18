// The gradient rule of batched matmul, in IR ops (see ir/grad.h). Every transpose combination is
// one matmul with transpose flags (no transpose nodes); batch broadcasting is undone by setGrad.
#include "ir/grad.h"
#include "ir/ops/matmul.h"

namespace kiln::ir {

namespace {
// The gradient's products take the forward's precision (bf16_products), as autocast's do.
ValueId matmul(GradContext &c, ValueId a, ValueId b, bool ta, bool tb) {
  return c.emit(OpKind::Matmul, {a, b},
                {{"transpose_a", ta},
                 {"transpose_b", tb},
                 {"bf16_products", c.attrs().getBool("bf16_products")}});
}
} // namespace

// y = A B with A = a or a^T, B = b or b^T (last two dims). On the logical matrices
//   dA = dy B^T,  dB = A^T dy,
// and a stored transposed gets the transpose of its gradient: da = dA^T = B dy^T, db = dy^T A.
//   ta tb | da                 | db
//   0  0  | dy b^T             | a^T dy
//   0  1  | dy b               | dy^T a
//   1  0  | b dy^T             | a dy
//   1  1  | b^T dy^T           | dy^T a^T
// Each product has the batch shape of y; setGrad sums it back over a's or b's broadcast dims.
Status gradMatmul(GradContext &c) {
  bool ta = c.attrs().getBool("transpose_a"), tb = c.attrs().getBool("transpose_b");
  ValueId a = c.x(0), b = c.x(1), dy = c.dy[0];
  if (!ta) {
    c.setGrad(0, matmul(c, dy, b, false, !tb));
    c.setGrad(1, tb ? matmul(c, dy, a, true, false) : matmul(c, a, dy, true, false));
  } else {
    c.setGrad(0, tb ? matmul(c, b, dy, true, true) : matmul(c, b, dy, false, true));
    c.setGrad(1, tb ? matmul(c, dy, a, true, true) : matmul(c, a, dy, false, false));
  }
  return {};
}

} // namespace kiln::ir

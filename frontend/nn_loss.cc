// Cross-entropy from log_softmax and an iota/eq one-hot. Every step broadcasts over the
// leading dims of logits [..., V] and targets [...], so any batch rank works unflattened. The
// fusion pipeline makes the per-target loss one cross_entropy op (passes/fuse_cross_entropy.cc),
// which never writes a tensor of the logits' size; keep the spelling it matches.
#include "frontend/nn_loss.h"

#include <vector>

#include <fmt/format.h>

namespace kiln::frontend::nn {

namespace {
// Checks the operands at the caller's place: float logits [..., V], integer targets [...].
void checkOperands(const Tensor &logits, const Tensor &targets, const CrossEntropyOptions &o,
                   const std::source_location &loc) {
  Builder &b = logits.builder(loc);
  auto fail = [&](std::string detail) { b.fail("cross_entropy", loc, detail); };
  if (!ir::isFloat(logits.dtype()) || logits.rank() < 1)
    fail(fmt::format("logits {}: expected a float tensor [..., V]", ir::typeString(logits.type())));
  if (!ir::isInteger(targets.dtype()))
    fail(fmt::format("targets {}: expected integer class ids", ir::typeString(targets.type())));
  ir::Shape lead(logits.shape().begin(), logits.shape().end() - 1);
  if (targets.shape() != lead)
    fail(fmt::format("targets {} do not match logits {}: expected targets of shape {}",
                     ir::typeString(targets.type()), ir::typeString(logits.type()),
                     ir::shapeString(lead)));
  if (!(o.labelSmoothing >= 0 && o.labelSmoothing <= 1))
    fail(fmt::format("label smoothing {} is not in [0, 1]", o.labelSmoothing));
}
} // namespace

Tensor crossEntropy(const Tensor &logits, const Tensor &targets, const CrossEntropyOptions &o,
                    std::source_location loc) {
  checkOperands(logits, targets, o, loc);
  Builder &b = logits.builder(loc);
  Builder::CallFrame f(b, "crossEntropy", loc);
  ir::DType ct = logits.dtype() == ir::DType::BF16 ? ir::DType::F32 : logits.dtype();
  Tensor x = logits.dtype() == ct ? logits : logits.cast(ct);
  int64_t v = x.dim(-1);

  Tensor logp = x.logSoftmax(-1); // [..., V]
  // one_hot[..., c] = (targets[...] == c): [..., 1] vs iota [V] -> [..., V]. An ignored id
  // outside [0, V) (e.g. -100) matches no class; one inside it is masked out below.
  Tensor classes = b.iota({v}, 0, targets.dtype());
  Tensor weight = targets.unsqueeze(-1).eq(classes).cast(ct); // [..., V]
  // Label smoothing: the target distribution (1 - ε) one_hot + ε/V, so that
  //   -sum_v q_v logp_v = (1 - ε)(-logp[target]) + ε mean_v(-logp_v).
  if (o.labelSmoothing > 0)
    weight = weight * (1.0 - o.labelSmoothing) + o.labelSmoothing / double(v);
  Tensor perTarget = -(logp * weight).sum({-1}); // [...]

  // Mean over the scored targets: sum_n [t_n != i] loss_n / sum_n [t_n != i]. `where` rather
  // than a product keeps a non-finite loss at an ignored position out of the sum; with no
  // scored target this is 0/0 = NaN, as in PyTorch.
  Tensor scored = targets.ne(double(o.ignoreIndex)); // bool [...]
  Tensor total = where(scored, perTarget, 0.0).sum();
  Tensor count = scored.cast(ct).sum();
  return total / count; // rank 0
}

} // namespace kiln::frontend::nn

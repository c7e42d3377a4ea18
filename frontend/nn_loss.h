// Training losses in DSL primitives. Cross-entropy is written as log_softmax plus a one-hot
// made with iota/eq, so autodiff differentiates it with the ordinary op rules and no loss op
// is needed in the IR.
#pragma once

#include <cstdint>
#include <source_location>

#include "frontend/tensor.h"

namespace kiln::frontend::nn {

struct CrossEntropyOptions {
  // Targets equal to this id are not scored and not counted (PyTorch's default, -100).
  int64_t ignoreIndex = -100;
  // ε in [0, 1]: the target distribution is (1 - ε) one_hot(target) + ε / V.
  double labelSmoothing = 0.0;
};

// The mean cross-entropy of `logits` [..., V] (float) against `targets` [...] (integer class
// ids), exactly PyTorch's
//   F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=i, label_smoothing=ε)
// with reduction 'mean': with logp = log_softmax(logits) and N = {n : targets[n] != i},
//   loss_n = (1 - ε) (-logp[n, targets[n]]) + ε mean_v(-logp[n, v]),
//   loss   = sum_{n in N} loss_n / |N|                                  -> rank-0 scalar.
// Edge cases, as in PyTorch: when every target is ignored the result is 0/0 = NaN (and so are
// the gradients). Unlike PyTorch, which raises, a target outside [0, V) that is not the ignore
// index cannot be rejected at build time: its one-hot row is all zero, so it adds only the
// ε term to the sum and still counts in |N| -- the data must not contain such ids.
// bf16 logits are scored in f32 (as under PyTorch autocast) and give an f32 loss; otherwise
// the loss has the logits' dtype.
Tensor crossEntropy(const Tensor &logits, const Tensor &targets,
                    const CrossEntropyOptions &options = {},
                    std::source_location loc = std::source_location::current());

} // namespace kiln::frontend::nn

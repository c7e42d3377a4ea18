// Residual sublayers and the encoder/decoder layers. The layer bodies read like the papers'
// equations; norm placement is decided once, in `residual`.
#include "frontend/nn_blocks.h"

namespace kiln::frontend::nn {

AttentionOptions BlockOptions::attention(bool self) const {
  return AttentionOptions{.dModel = dModel,
                          .nHeads = nHeads,
                          .nKvHeads = nKvHeads,
                          .headDim = headDim,
                          .bias = bias,
                          .qkvBias = qkvBias,
                          .weightInit = weightInit,
                          .dropout = dropout,
                          .position = self ? position : PositionKind::None,
                          .relativeK = relativeK,
                          .alibiCausal = causal,
                          .rope = rope,
                          .scale = attentionScale};
}

Tensor residual(const Tensor &x, const Norm &norm, NormPlacement placement, double dropout,
                const std::function<Tensor(const Tensor &)> &f) {
  if (placement == NormPlacement::Pre)
    return x + f(norm(x)).dropout(dropout);
  return norm(x + f(x).dropout(dropout));
}

EncoderLayer::EncoderLayer(Scope scope, const BlockOptions &o, std::source_location loc)
    : Module(std::move(scope)), ln1(child("ln1"), o.normKind, o.dModel, o.normEps, loc),
      attn(child("attn"), o.attention(/*self=*/true), loc),
      ln2(child("ln2"), o.normKind, o.dModel, o.normEps, loc),
      mlp(child("mlp"), o.dModel, o.dFF, o.activation, o.bias, o.dropout, o.weightInit, loc),
      placement_(o.norm), dropout_(o.dropout) {}

Tensor EncoderLayer::operator()(const Tensor &x, const Mask &mask, KvCache *cache,
                                std::source_location loc) const {
  auto f = frame(loc);
  Tensor h =
      residual(x, ln1, placement_, dropout_, [&](const Tensor &y) { return attn(y, mask, cache); });
  return residual(h, ln2, placement_, dropout_, [&](const Tensor &y) { return mlp(y); });
}

DecoderLayer::DecoderLayer(Scope scope, const BlockOptions &o, std::source_location loc)
    : Module(std::move(scope)), ln1(child("ln1"), o.normKind, o.dModel, o.normEps, loc),
      selfAttn(child("self_attn"), o.attention(/*self=*/true), loc),
      ln2(child("ln2"), o.normKind, o.dModel, o.normEps, loc),
      crossAttn(child("cross_attn"), o.attention(/*self=*/false), loc),
      ln3(child("ln3"), o.normKind, o.dModel, o.normEps, loc),
      mlp(child("mlp"), o.dModel, o.dFF, o.activation, o.bias, o.dropout, o.weightInit, loc),
      placement_(o.norm), dropout_(o.dropout) {}

Tensor DecoderLayer::operator()(const Tensor &x, const Tensor &memory, const Mask &selfMask,
                                const Mask &crossMask, std::source_location loc) const {
  auto f = frame(loc);
  Tensor h = residual(x, ln1, placement_, dropout_,
                      [&](const Tensor &y) { return selfAttn(y, selfMask); });
  h = residual(h, ln2, placement_, dropout_,
               [&](const Tensor &y) { return crossAttn(y, memory, crossMask); });
  return residual(h, ln3, placement_, dropout_, [&](const Tensor &y) { return mlp(y); });
}

Tensor DecoderLayer::operator()(const Tensor &x, const KvCache &memory, const Mask &selfMask,
                                const Mask &crossMask, KvCache &cache,
                                std::source_location loc) const {
  auto f = frame(loc);
  Tensor h = residual(x, ln1, placement_, dropout_,
                      [&](const Tensor &y) { return selfAttn(y, selfMask, &cache); });
  h = residual(h, ln2, placement_, dropout_,
               [&](const Tensor &y) { return crossAttn(y, memory, crossMask); });
  return residual(h, ln3, placement_, dropout_, [&](const Tensor &y) { return mlp(y); });
}

} // namespace kiln::frontend::nn

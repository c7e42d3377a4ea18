// GRU and LSTM cells and the attention of recurrent encoder-decoders (see nn_recurrent.h).
#include "frontend/nn_recurrent.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace kiln::frontend::nn {

namespace {

// PyTorch's init of recurrent weights and biases: U(-1/sqrt(H), 1/sqrt(H)), here as the normal
// of the same variance (1 / 3H).
ir::ParamInit recurrentInit(int64_t hidden) {
  return normalInit(1.0 / std::sqrt(3.0 * double(hidden)));
}

} // namespace

RecurrentCell::RecurrentCell(Scope scope, int64_t input, int64_t hidden, int64_t gates,
                             std::source_location loc)
    : Module(std::move(scope)), hidden_(hidden) {
  weightIh = param("weight_ih", {gates * hidden, input}, recurrentInit(hidden), loc);
  weightHh = param("weight_hh", {gates * hidden, hidden}, recurrentInit(hidden), loc);
  biasIh = param("bias_ih", {gates * hidden}, recurrentInit(hidden), loc);
  biasHh = param("bias_hh", {gates * hidden}, recurrentInit(hidden), loc);
}

Tensor RecurrentCell::inputGates(const Tensor &x) const {
  return x.matmul(weightIh, {.transposeB = true}) + biasIh;
}

Tensor RecurrentCell::stateGates(const Tensor &h) const {
  return h.matmul(weightHh, {.transposeB = true}) + biasHh;
}

Tensor RecurrentCell::block(const Tensor &gates, int64_t k) const {
  return gates.slice(1, k * hidden_, (k + 1) * hidden_);
}

GRUCell::GRUCell(Scope scope, int64_t input, int64_t hidden, std::source_location loc)
    : RecurrentCell(std::move(scope), input, hidden, 3, loc) {}

Tensor GRUCell::operator()(const Tensor &x, const Tensor &h, std::source_location loc) const {
  auto f = frame(loc);
  Tensor gi = inputGates(x); // [B, 3H]
  Tensor gh = stateGates(h); // [B, 3H]
  Tensor r = (block(gi, 0) + block(gh, 0)).sigmoid();
  Tensor z = (block(gi, 1) + block(gh, 1)).sigmoid();
  Tensor n = (block(gi, 2) + r * block(gh, 2)).tanh();
  Tensor keep = z * h;
  return (1.0 - z) * n + keep;
}

LSTMCell::LSTMCell(Scope scope, int64_t input, int64_t hidden, std::source_location loc)
    : RecurrentCell(std::move(scope), input, hidden, 4, loc) {}

LSTMCell::State LSTMCell::operator()(const Tensor &x, const State &s,
                                     std::source_location loc) const {
  auto f = frame(loc);
  Tensor gi = inputGates(x);
  Tensor gates = gi + stateGates(s.h); // [B, 4H]
  Tensor i = block(gates, 0).sigmoid();
  Tensor fg = block(gates, 1).sigmoid();
  Tensor g = block(gates, 2).tanh();
  Tensor o = block(gates, 3).sigmoid();
  Tensor c = fg * s.c + i * g;
  Tensor h = o * c.tanh();
  return {h, c};
}

RecurrentAttention::RecurrentAttention(Scope scope, AttentionScore score, int64_t queryDim,
                                       int64_t keyDim, int64_t attentionDim,
                                       std::source_location loc)
    : Module(std::move(scope)), score_(score) {
  switch (score) {
  case AttentionScore::Bahdanau:
    wq_.emplace(child("w_query"), queryDim, attentionDim, /*withBias=*/false, normalInit(), loc);
    wk_.emplace(child("w_key"), keyDim, attentionDim, /*withBias=*/true, normalInit(), loc);
    v_.emplace(child("v"), attentionDim, 1, /*withBias=*/false, normalInit(), loc);
    break;
  case AttentionScore::Dot:
    if (queryDim != keyDim)
      builder().fail("attention", loc,
                     fmt::format("the dot score needs query and key widths equal, got {} and {}",
                                 queryDim, keyDim));
    break;
  case AttentionScore::General:
    w_.emplace(child("w"), keyDim, queryDim, /*withBias=*/false, normalInit(), loc);
    break;
  case AttentionScore::Concat:
    w_.emplace(child("w"), queryDim + keyDim, attentionDim, /*withBias=*/false, normalInit(), loc);
    v_.emplace(child("v"), attentionDim, 1, /*withBias=*/false, normalInit(), loc);
    break;
  }
}

RecurrentAttention::Result RecurrentAttention::operator()(const Tensor &query, const Tensor &keys,
                                                          const std::optional<Tensor> &keep,
                                                          std::source_location loc) const {
  auto f = frame(loc);
  const int64_t b = keys.dim(0), s = keys.dim(1);
  Tensor q = query.reshape({b, 1, query.dim(1)}); // [B, 1, Hq]
  Tensor scores;                                  // [B, 1, S]: one query per row
  switch (score_) {
  case AttentionScore::Bahdanau: {
    Tensor e = ((*wq_)(q) + (*wk_)(keys)).tanh(); // [B, S, A]
    scores = (*v_)(e).reshape({b, 1, s});
    break;
  }
  case AttentionScore::Dot:
    scores = q.matmul(keys, {.transposeB = true});
    break;
  case AttentionScore::General: {
    Tensor wk = (*w_)(keys); // W k_j: [B, S, Hq]
    scores = q.matmul(wk, {.transposeB = true});
    break;
  }
  case AttentionScore::Concat: {
    Tensor qs = q.broadcastTo({b, s, q.dim(2)}); // q beside every key
    Tensor e = (*w_)(concat({qs, keys}, 2)).tanh();
    scores = (*v_)(e).reshape({b, 1, s});
    break;
  }
  }
  if (keep)
    scores = where(keep->reshape({b, 1, s}), scores, -std::numeric_limits<double>::infinity());
  Tensor weights = scores.softmax(-1); // [B, 1, S]
  // Dot and general scores are scaled dot-product attention with one query and one head, and
  // are written as such (q k^T, softmax, times keys) so that the attention pass fuses them. The
  // additive scores are no product q k^T, so no attention op can take them: their weighted sum
  // is a product and a sum over S, which the elementwise fusion keeps in one region, rather than
  // a matmul of one row behind a bare softmax.
  Tensor context;
  if (score_ == AttentionScore::Dot || score_ == AttentionScore::General)
    context = weights.matmul(keys).reshape({b, keys.dim(2)});
  else
    context = (weights.reshape({b, s, 1}) * keys).sum({1});
  weights = weights.reshape({b, s});
  return {context, weights};
}

} // namespace kiln::frontend::nn

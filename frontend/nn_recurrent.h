// nn building blocks, part 4: what the pre-Transformer sequence models are made of -- GRU and
// LSTM cells (PyTorch's nn.GRUCell / nn.LSTMCell: the same parameters, names and gate order), and
// the attention of recurrent encoder-decoders over the encoder's states: Bahdanau's additive
// score and Luong's dot, general and concat scores. All are compositions of existing ops (their
// gradients are autodiff's); a sequence is unrolled by calling a cell once per position.
#pragma once

#include <cstdint>
#include <source_location>
#include <utility>

#include "frontend/nn_layers.h"

namespace kiln::frontend::nn {

// What PyTorch's recurrent cells share: weight_ih [G H, I], weight_hh [G H, H], bias_ih and
// bias_hh [G H] for G gate blocks of width H, and the two affine maps of the input and the state.
class RecurrentCell : public Module {
public:
  Tensor weightIh, weightHh, biasIh, biasHh;

protected:
  RecurrentCell(Scope scope, int64_t input, int64_t hidden, int64_t gates,
                std::source_location loc);
  Tensor inputGates(const Tensor &x) const;           // W_ih x + b_ih: [B, G H]
  Tensor stateGates(const Tensor &h) const;           // W_hh h + b_hh: [B, G H]
  Tensor block(const Tensor &gates, int64_t k) const; // gate block k: [B, H]

private:
  int64_t hidden_;
};

// Cho et al. 2014, as nn.GRUCell: x [B, I], h [B, H] -> h' [B, H]
//   r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)      z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
//   n = tanh(W_in x + b_in + r * (W_hn h + b_hn))   h' = (1 - z) * n + z * h
// weight_ih [3H, I] and weight_hh [3H, H] hold the r, z, n rows in that order.
class GRUCell : public RecurrentCell {
public:
  GRUCell(Scope scope, int64_t input, int64_t hidden,
          std::source_location loc = std::source_location::current());
  Tensor operator()(const Tensor &x, const Tensor &h,
                    std::source_location loc = std::source_location::current()) const;
};

// Hochreiter & Schmidhuber 1997 with a forget gate, as nn.LSTMCell: (x [B, I], h, c [B, H]) ->
// (h', c'):  i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of the four row blocks of
// W_ih x + b_ih + W_hh h + b_hh;  c' = f * c + i * g;  h' = o * tanh(c').
class LSTMCell : public RecurrentCell {
public:
  struct State {
    Tensor h, c;
  };
  LSTMCell(Scope scope, int64_t input, int64_t hidden,
           std::source_location loc = std::source_location::current());
  State operator()(const Tensor &x, const State &s,
                   std::source_location loc = std::source_location::current()) const;
};

// The score of a query q [B, Hq] against each key k_j of keys [B, S, Hk]:
//   Bahdanau (additive, 2015):  v^T tanh(W_q q + W_k k_j)                        (width A)
//   Luong dot (2015):           q . k_j                                          (Hq = Hk)
//   Luong general:              q^T W k_j
//   Luong concat:               v^T tanh(W [q; k_j])                             (width A)
enum class AttentionScore : uint8_t { Bahdanau, Dot, General, Concat };

// Attention of a recurrent decoder: weights a = softmax_j(score(q, k_j)) over the keys that
// `keep` (bool [B, S], true = a real position; optional) allows, and the context sum_j a_j k_j.
class RecurrentAttention : public Module {
public:
  struct Result {
    Tensor context; // [B, Hk]
    Tensor weights; // [B, S]
  };
  RecurrentAttention(Scope scope, AttentionScore score, int64_t queryDim, int64_t keyDim,
                     int64_t attentionDim,
                     std::source_location loc = std::source_location::current());
  Result operator()(const Tensor &query, const Tensor &keys, const std::optional<Tensor> &keep,
                    std::source_location loc = std::source_location::current()) const;

private:
  AttentionScore score_;
  std::optional<Linear> wq_, wk_, w_, v_;
};

} // namespace kiln::frontend::nn

// BERT as in the paper and the reference implementation: word + position + token-type
// embeddings, then a norm; N encoder layers under a key-padding mask; the MLM head
// (dense, the hidden activation, norm, then the decoder tied to the word embedding, plus an
// output bias).
#include "models/bert.h"

#include <optional>
#include <vector>

namespace kiln::models {

using frontend::Builder;
using frontend::Scope;
using frontend::Tensor;

namespace {

class BertEmbeddings : public nn::Module {
public:
  BertEmbeddings(Scope scope, const BertConfig &c)
      : Module(std::move(scope)), word(child("word_embeddings"), c.vocab, c.dModel),
        position(child("position_embeddings"), c.position, c.maxLen, c.dModel),
        tokenType(child("token_type_embeddings"), c.typeVocab, c.dModel),
        norm(child("norm"), c.normKind, c.dModel, c.normEpsilon()), dropout_(c.dropout) {}

  // tokens, types [B, T] -> [B, T, d]
  Tensor operator()(const Tensor &tokens, const Tensor &types) const {
    Tensor positioned = position(word(tokens)); // words + positions
    Tensor x = positioned + tokenType(types);
    return norm(x).dropout(dropout_);
  }

  nn::Embedding word;
  nn::AbsolutePosition position;
  nn::Embedding tokenType;
  nn::Norm norm;

private:
  double dropout_;
};

// Predicts the token at every position from its final hidden state. The transform applies the
// model's hidden activation, as BERT's BertPredictionHeadTransform does (config.hidden_act).
// SwiGLU and GeGLU gate one projection with another and the transform has one projection, so a
// gated model's head uses exact GELU, BERT's own.
class MlmHead : public nn::Module {
public:
  MlmHead(Scope scope, const BertConfig &c, const Tensor &wordEmbedding)
      : Module(std::move(scope)), wordEmbedding_(wordEmbedding),
        act_(nn::isGated(c.activation) ? nn::Activation::Gelu : c.activation),
        dense(child("dense"), c.dModel, c.dModel, c.bias, c.weightInit()),
        norm(child("norm"), c.normKind, c.dModel, c.normEpsilon()) {
    if (!c.tieEmbeddings)
      decoder.emplace(child("decoder"), c.dModel, c.vocab, /*withBias=*/false, c.weightInit());
    if (c.bias)
      bias = param("bias", {c.vocab}, nn::zerosInit(), std::source_location::current());
  }

  // h [B, T, d] -> logits [B, T, V]
  Tensor operator()(const Tensor &h) const {
    Tensor x = norm(nn::activate(dense(h), act_));
    Tensor logits = decoder ? (*decoder)(x) : x.matmul(wordEmbedding_, {.transposeB = true});
    return bias ? logits + *bias : logits;
  }

private:
  Tensor wordEmbedding_; // [V, d]
  nn::Activation act_;
  nn::Linear dense;
  nn::Norm norm;
  std::optional<nn::Linear> decoder;
  std::optional<Tensor> bias;
};

class Bert : public nn::Module {
public:
  Bert(Scope scope, const BertConfig &c)
      : Module(std::move(scope)), c_(c), embeddings(child("embeddings"), c),
        blocks(
            nn::makeLayers<nn::EncoderLayer>(child("blocks"), c.nLayers, c.block(false, c.seqLen))),
        lnF(nn::finalNorm(child("ln_f"), c.norm, c.normKind, c.dModel, c.normEpsilon())),
        mlm(child("mlm"), c, embeddings.word.weight) {}

  Tensor operator()(const Tensor &tokens, const Tensor &types) const {
    Tensor x = embeddings(tokens, types);                     // [B, T, d]
    nn::Mask mask{.keep = nn::paddingMask(tokens, c_.padId)}; // [B, 1, 1, T]
    if (c_.window) {
      Tensor band = nn::windowMask(builder(), tokens.dim(1), c_.window, /*causal=*/false);
      mask.keep = *mask.keep & band; // [B, 1, T, T]
    }
    for (const nn::EncoderLayer &block : blocks)
      x = block(x, mask);
    if (lnF)
      x = (*lnF)(x);
    return mlm(x); // [B, T, V]
  }

private:
  BertConfig c_;
  BertEmbeddings embeddings;
  std::vector<nn::EncoderLayer> blocks;
  std::optional<nn::Norm> lnF;
  MlmHead mlm;
};

} // namespace

std::vector<ConfigKey<BertConfig>> bertKeys() {
  std::vector<ConfigKey<BertConfig>> keys = {
      key<BertConfig, &BertConfig::seqLen>("seq_len", "sequence length T"),
      key<BertConfig, &BertConfig::nLayers>("n_layers", "encoder layers"),
      key<BertConfig, &BertConfig::typeVocab>("type_vocab", "token types (segments)"),
      key<BertConfig, &BertConfig::window>("window", "sliding-window attention: each position "
                                                     "attends those within distance < W (0: all)"),
  };
  for (ConfigKey<BertConfig> k : commonKeys<BertConfig>()) {
    // Two keys mean more in BERT: the MLM head uses the activation, and auto eps is BERT's.
    if (k.name == "activation")
      k.help = "relu|gelu|gelu_tanh|softplus|swiglu|geglu: the feed-forward's, and the MLM head "
               "transform's (exact gelu there for swiglu and geglu, which are not per-element)";
    if (k.name == "norm_eps")
      k.help = "every norm's eps, > 0, or auto: 1e-12 for layernorm (BERT), 1e-6 for rmsnorm "
               "(LLaMA)";
    keys.push_back(k);
  }
  return keys;
}

Expected<BertConfig> bertConfig(std::span<const Setting> settings) {
  BertConfig c;
  if (Status s = applySettings<BertConfig>("bert", bertKeys(), settings, c); !s)
    return s.error();
  LengthKey lengths[] = {{"seq_len", c.seqLen}};
  fitMaxLen(c, settings, lengths);
  if (Status s = validateCommon("bert", c, lengths); !s)
    return s.error();
  if (Status s = requirePositive("bert", "n_layers", c.nLayers, kMaxLayers); !s)
    return s.error();
  if (Status s = requirePositive("bert", "type_vocab", c.typeVocab); !s)
    return s.error();
  return c;
}

Expected<ir::Graph> buildBert(const BertConfig &c) {
  return buildGraph("bert", c, [&](Builder &b) {
    ir::Type ids{ir::DType::I64, {c.batch, c.seqLen}};
    Tensor tokens = b.input("tokens", ids, c.vocab);
    Tensor types = b.input("token_types", ids, c.typeVocab);
    std::optional<Tensor> targets;
    if (c.loss)
      targets = targetsInput(b, c, c.seqLen);
    Bert model(Scope(b), c);
    addOutputs(b, c, model(tokens, types), targets);
  });
}

Expected<ir::Graph> buildBert(std::span<const Setting> settings) {
  Expected<BertConfig> c = bertConfig(settings);
  if (!c)
    return c.error();
  return buildBert(*c);
}

std::vector<std::string> describeBert() {
  return describeKeys<BertConfig>(bertKeys(), BertConfig{});
}

} // namespace kiln::models

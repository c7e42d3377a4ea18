// T5: see t5.h. The stacks are the DSL's encoder and decoder layers with T5's options (pre-norm
// RMSNorm, no biases, logit scale 1); the position bias enters each self-attention as an
// additive mask term.
#include "models/t5.h"

#include <cmath>
#include <optional>
#include <vector>

namespace kiln::models {

using frontend::Builder;
using frontend::Scope;
using frontend::Tensor;

namespace {

// The bias table [buckets, heads] of one stack and the bias it adds: [1, H, T, S].
class RelativeBias : public nn::Module {
public:
  RelativeBias(Scope scope, const T5Config &c, bool bidirectional)
      : Module(std::move(scope)), c_(c), bidirectional_(bidirectional),
        table(param("relative_attention_bias", {c.numBuckets, c.nHeads}, nn::normalInit(),
                    std::source_location::current())) {}

  Tensor operator()(int64_t t, int64_t s) const {
    Tensor buckets =
        nn::t5Buckets(builder(), t, s, bidirectional_, c_.numBuckets, c_.maxDistance); // [T, S]
    Tensor bias = table.gather(buckets);                                               // [T, S, H]
    bias = bias.permute({2, 0, 1});
    return bias.reshape({1, c_.nHeads, t, s});
  }

private:
  T5Config c_;
  bool bidirectional_;
  Tensor table;
};

class T5 : public nn::Module {
public:
  T5(Scope scope, const T5Config &c)
      : Module(std::move(scope)), c_(c), shared(child("shared"), c.vocab, c.dModel),
        encoderBias(child("encoder").child("relative_bias"), c, /*bidirectional=*/true),
        encoder(nn::makeLayers<nn::EncoderLayer>(child("encoder").child("blocks"), c.nEncoderLayers,
                                                 blockOptions(c, false))),
        encoderNorm(child("encoder").child("ln_f"), c.dModel, c.normEpsilon()),
        decoderBias(child("decoder").child("relative_bias"), c, /*bidirectional=*/false),
        decoder(nn::makeLayers<nn::DecoderLayer>(child("decoder").child("blocks"), c.nDecoderLayers,
                                                 blockOptions(c, true))),
        decoderNorm(child("decoder").child("ln_f"), c.dModel, c.normEpsilon()) {
    if (!c.tieEmbeddings)
      lmHead.emplace(child("lm_head"), c.dModel, c.vocab, /*withBias=*/false, c.weightInit());
  }

  // src [B, S], tgt [B, T] -> logits [B, T, V]
  Tensor operator()(const Tensor &src, const Tensor &tgt) const {
    const int64_t s = src.dim(1), t = tgt.dim(1);
    const nn::Mask srcKeys{.keep = nn::paddingMask(src, c_.padId)}; // [B, 1, 1, S]
    nn::Mask encoderMask = srcKeys;
    encoderMask.additive = encoderBias(s, s);
    Tensor x = shared(src).dropout(c_.dropout);
    for (const nn::EncoderLayer &layer : encoder)
      x = layer(x, encoderMask);
    Tensor memory = encoderNorm(x).dropout(c_.dropout);
    nn::Mask selfMask{.keep = nn::causalMask(builder(), t)};
    selfMask.additive = decoderBias(t, t);
    Tensor y = shared(tgt).dropout(c_.dropout);
    for (const nn::DecoderLayer &layer : decoder)
      y = layer(y, memory, selfMask, srcKeys);
    y = decoderNorm(y).dropout(c_.dropout);
    if (lmHead)
      return (*lmHead)(y);
    Tensor scaled = y * (1.0 / std::sqrt(double(c_.dModel))); // T5's tied head
    return scaled.matmul(shared.weight, {.transposeB = true});
  }

private:
  static nn::BlockOptions blockOptions(const T5Config &c, bool causal) {
    nn::BlockOptions o = c.block(causal, causal ? c.tgtLen : c.srcLen);
    o.attentionScale = 1.0;
    return o;
  }

  T5Config c_;
  nn::Embedding shared;
  RelativeBias encoderBias;
  std::vector<nn::EncoderLayer> encoder;
  nn::RMSNorm encoderNorm;
  RelativeBias decoderBias;
  std::vector<nn::DecoderLayer> decoder;
  nn::RMSNorm decoderNorm;
  std::optional<nn::Linear> lmHead;
};

} // namespace

std::vector<ConfigKey<T5Config>> t5Keys() {
  using C = T5Config;
  std::vector<ConfigKey<C>> keys = encoderDecoderKeys<C>();
  keys.push_back(
      key<C, &C::numBuckets>("num_buckets", "relative position buckets (a stack's, per head)"));
  keys.push_back(
      key<C, &C::maxDistance>("max_distance", "distance from which all share the last bucket"));
  // T5 fixes the norm (pre-norm RMSNorm), the positions (the buckets alone), the biases (none)
  // and the init: those common keys are not T5's.
  for (ConfigKey<C> k : commonKeys<C>()) {
    if (k.name == "norm" || k.name == "norm_kind" || k.name == "position" ||
        k.name == "relative_k" || k.name == "rope_theta" || k.name == "rope_scaling" ||
        k.name == "rope_fraction" || k.name == "max_len" || k.name == "bias" ||
        k.name == "qkv_bias" || k.name == "init")
      continue;
    if (k.name == "norm_eps") // (no layernorm here, whose auto the common help names first)
      k.help = "every norm's eps, > 0, or auto: 1e-6 (T5's norms are RMSNorm)";
    keys.push_back(k);
  }
  return keys;
}

Expected<T5Config> t5Config(std::span<const Setting> settings) {
  T5Config c;
  if (Status s = applySettings<T5Config>("t5", t5Keys(), settings, c); !s)
    return s.error();
  if (Status s = validateEncoderDecoder("t5", c); !s)
    return s.error();
  if (Status s = requirePositive("t5", "num_buckets", c.numBuckets, 4096); !s)
    return s.error();
  if (c.numBuckets < 4)
    return makeError("t5: num_buckets: expected at least 4 (2 a side), got {}", c.numBuckets);
  if (Status s = requirePositive("t5", "max_distance", c.maxDistance); !s)
    return s.error();
  if (c.maxDistance <= c.numBuckets / 2)
    return makeError("t5: max_distance: expected more than num_buckets / 2 = {} (the decoder's "
                     "exact buckets), got {}",
                     c.numBuckets / 2, c.maxDistance);
  return c;
}

Expected<ir::Graph> buildT5(const T5Config &c) {
  return buildSeq2Seq(
      "t5", c, c.srcLen, c.tgtLen,
      [&](Builder &b, const Tensor &src, const Tensor &tgt) { return T5(Scope(b), c)(src, tgt); });
}

Expected<ir::Graph> buildT5(std::span<const Setting> settings) {
  Expected<T5Config> c = t5Config(settings);
  if (!c)
    return c.error();
  return buildT5(*c);
}

std::vector<std::string> describeT5() {
  const std::vector<ConfigKey<T5Config>> keys = t5Keys();
  return describeKeys<T5Config>(keys, T5Config{});
}

} // namespace kiln::models

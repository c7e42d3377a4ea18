// The encoder-decoder Transformer, section 3 of Vaswani et al.: embeddings scaled by
// sqrt(d_model) plus positions, N encoder layers, N decoder layers attending to the encoder
// output, and the output projection (shared with the embeddings when tied, section 3.4).
#include "models/transformer.h"

#include <cmath>
#include <optional>
#include <vector>

#include <fmt/format.h>

namespace kiln::models {

using frontend::Builder;
using frontend::Scope;
using frontend::Tensor;

namespace {

// One stack's input: token embedding * sqrt(d_model) + position, then dropout (section 5.4).
class StackInput : public nn::Module {
public:
  StackInput(Scope scope, const TransformerConfig &c, const std::optional<nn::Embedding> &shared)
      : Module(std::move(scope)), c_(c),
        embed(shared ? *shared : nn::Embedding(child("embed"), c.vocab, c.dModel)),
        position(child("pos_embed"), c.position, c.maxLen, c.dModel) {}

  // tokens [B, L] -> [B, L, d]
  Tensor operator()(const Tensor &tokens) const {
    Tensor x = embed(tokens) * std::sqrt(double(c_.dModel));
    return position(x).dropout(c_.dropout);
  }
  // The same for tokens at positions pos [B, L] (a decoding step's).
  Tensor at(const Tensor &tokens, const Tensor &pos) const {
    Tensor x = embed(tokens) * std::sqrt(double(c_.dModel));
    return position.at(x, pos).dropout(c_.dropout);
  }

  TransformerConfig c_;
  nn::Embedding embed;
  nn::AbsolutePosition position;
};

class Transformer : public nn::Module {
public:
  Transformer(Scope scope, const TransformerConfig &c)
      : Module(std::move(scope)), c_(c),
        shared(c.tieEmbeddings
                   ? std::optional<nn::Embedding>(nn::Embedding(child("embed"), c.vocab, c.dModel))
                   : std::nullopt),
        encoderInput(child("encoder"), c, shared),
        encoder(nn::makeLayers<nn::EncoderLayer>(child("encoder").child("blocks"), c.nEncoderLayers,
                                                 c.block(false, c.srcLen))),
        encoderNorm(nn::finalNorm(child("encoder").child("ln_f"), c.norm, c.normKind, c.dModel,
                                  c.normEpsilon())),
        decoderInput(child("decoder"), c, shared),
        decoder(nn::makeLayers<nn::DecoderLayer>(child("decoder").child("blocks"), c.nDecoderLayers,
                                                 c.block(true, c.tgtLen))),
        decoderNorm(nn::finalNorm(child("decoder").child("ln_f"), c.norm, c.normKind, c.dModel,
                                  c.normEpsilon())) {
    if (!c.tieEmbeddings)
      generator.emplace(child("generator"), c.dModel, c.vocab, /*withBias=*/false, c.weightInit());
  }

  // src [B, S], tgt [B, T] -> logits [B, T, V]
  Tensor operator()(const Tensor &src, const Tensor &tgt) const {
    Tensor srcKeep = nn::paddingMask(src, c_.padId); // [B, 1, 1, S]
    Tensor memory = encode(src, nn::Mask{.keep = srcKeep});
    Tensor y = decode(tgt, memory, nn::Mask{.keep = targetMask(tgt)}, nn::Mask{.keep = srcKeep});
    return project(y);
  }

  // Generation: every decoder layer's cross-attention keys and values of the source's memory,
  // computed once. src [B, S]
  std::vector<nn::KvCache> memoryKeysValues(const Tensor &src) const {
    Tensor memory = encode(src, nn::Mask{.keep = nn::paddingMask(src, c_.padId)});
    std::vector<nn::KvCache> kv;
    for (const nn::DecoderLayer &layer : decoder)
      kv.push_back(layer.crossAttn.memoryKeysValues(memory));
    return kv;
  }

  // One decoding step: tgt [B, 1], row b's token at position pos[b], with a self-attention
  // cache per decoder layer -> logits [B, 1, V].
  Tensor step(const Tensor &tgt, const Tensor &pos, const Tensor &src,
              const std::vector<nn::KvCache> &memory, std::vector<nn::KvCache> &caches) const {
    Tensor y = decoderInput.at(tgt, pos.reshape({pos.dim(0), 1})); // [B, 1, d]
    nn::Mask selfMask{.keep = nn::cacheMask(pos, c_.tgtLen)};
    nn::Mask crossMask{.keep = nn::paddingMask(src, c_.padId)};
    for (size_t i = 0; i < decoder.size(); ++i)
      y = decoder[i](y, memory[i], selfMask, crossMask, caches[i]);
    return project(decoderNorm ? (*decoderNorm)(y) : y);
  }

private:
  // The pre-softmax projection: the generator, or the shared embedding. [B, T, d] -> [B, T, V]
  Tensor project(const Tensor &y) const {
    if (generator)
      return (*generator)(y);
    return y.matmul(shared->weight, {.transposeB = true}); // [B, T, d] x [V, d]^T
  }

  Tensor encode(const Tensor &src, const nn::Mask &mask) const {
    Tensor x = encoderInput(src); // [B, S, d]
    for (const nn::EncoderLayer &layer : encoder)
      x = layer(x, mask);
    return encoderNorm ? (*encoderNorm)(x) : x;
  }

  Tensor decode(const Tensor &tgt, const Tensor &memory, const nn::Mask &selfMask,
                const nn::Mask &crossMask) const {
    Tensor y = decoderInput(tgt); // [B, T, d]
    for (const nn::DecoderLayer &layer : decoder)
      y = layer(y, memory, selfMask, crossMask);
    return decoderNorm ? (*decoderNorm)(y) : y;
  }

  // Query i may attend key j iff j <= i and key j is not padding. A query may always attend
  // itself: that changes nothing for real tokens but keeps a padding query with only padding
  // before it (tgt[0] = pad) from a softmax over nothing, whose NaN 0 * NaN would spread.
  Tensor targetMask(const Tensor &tgt) const {
    int64_t t = tgt.dim(1);
    Tensor lower = builder().tri({t, t}, 0, /*lower=*/true);
    Tensor upper = builder().tri({t, t}, 0, /*lower=*/false);
    Tensor self = lower & upper;                          // the diagonal, j == i
    Tensor keyOk = nn::paddingMask(tgt, c_.padId) | self; // [B, 1, T, T]
    return nn::causalMask(builder(), t) & keyOk;
  }

  TransformerConfig c_;
  std::optional<nn::Embedding> shared;
  StackInput encoderInput;
  std::vector<nn::EncoderLayer> encoder;
  std::optional<nn::Norm> encoderNorm;
  StackInput decoderInput;
  std::vector<nn::DecoderLayer> decoder;
  std::optional<nn::Norm> decoderNorm;
  std::optional<nn::Linear> generator;
};

} // namespace

std::vector<ConfigKey<TransformerConfig>> transformerKeys() {
  using C = TransformerConfig;
  std::vector<ConfigKey<C>> keys = encoderDecoderKeys<C>();
  for (const ConfigKey<C> &k : commonKeys<C>())
    keys.push_back(k);
  return keys;
}

Expected<TransformerConfig> transformerConfig(std::span<const Setting> settings) {
  TransformerConfig c;
  if (Status s = applySettings<TransformerConfig>("transformer", transformerKeys(), settings, c);
      !s)
    return s.error();
  if (Status s = validateEncoderDecoder("transformer", c, settings); !s)
    return s.error();
  return c;
}

Expected<ir::Graph> buildTransformer(const TransformerConfig &c) {
  return buildSeq2Seq("transformer", c, c.srcLen, c.tgtLen,
                      [&](Builder &b, const Tensor &src, const Tensor &tgt) {
                        return Transformer(Scope(b), c)(src, tgt);
                      });
}

Expected<ir::Graph> buildTransformerCached(TransformerConfig c, TransformerGraph which) {
  c.loss = false;
  Expected<ir::Type> memory = kvType(c, c.srcLen), cache = kvType(c, c.tgtLen);
  if (!memory || !cache)
    return makeError("transformer: {}", memory ? cache.error().message : memory.error().message);
  if (c.nDecoderLayers < 1)
    return makeError("transformer: a generation graph needs n_decoder_layers >= 1, got {}",
                     c.nDecoderLayers);
  const ir::Type memoryType = *memory, cacheType = *cache;
  return buildGraph("transformer", c, [&](Builder &b) {
    Tensor src = b.input("src", {ir::DType::I64, {c.batch, c.srcLen}}, c.vocab);
    if (which == TransformerGraph::Encode) {
      Transformer model(Scope(b), c);
      const std::vector<nn::KvCache> kv = model.memoryKeysValues(src);
      for (size_t i = 0; i < kv.size(); ++i) {
        b.output(fmt::format("memory.{}.k", i), kv[i].k);
        b.output(fmt::format("memory.{}.v", i), kv[i].v);
      }
      return;
    }
    Tensor tgt = b.input("tgt", {ir::DType::I64, {c.batch, 1}}, c.vocab);
    Tensor pos = b.input("pos", {ir::DType::I64, {c.batch}}, c.tgtLen);
    std::vector<nn::KvCache> memory(static_cast<size_t>(c.nDecoderLayers));
    for (size_t i = 0; i < memory.size(); ++i) {
      memory[i].k = b.input(fmt::format("memory.{}.k", i), memoryType);
      memory[i].v = b.input(fmt::format("memory.{}.v", i), memoryType);
    }
    std::vector<nn::KvCache> caches = cacheState(b, c.nDecoderLayers, cacheType, pos);
    const std::vector<nn::KvCache> state = caches;
    Transformer model(Scope(b), c);
    b.output("logits", model.step(tgt, pos, src, memory, caches));
    updateCaches(b, state, caches);
  });
}

Expected<ir::Graph> buildTransformer(std::span<const Setting> settings) {
  Expected<TransformerConfig> c = transformerConfig(settings);
  if (!c)
    return c.error();
  return buildTransformer(*c);
}

std::vector<std::string> describeTransformer() {
  return describeKeys<TransformerConfig>(transformerKeys(), TransformerConfig{});
}

} // namespace kiln::models

// GPT-2 as in the paper and its reference code: token + position embeddings, N decoder blocks
// with causal self-attention, a final norm (pre-LN only), and the LM head, tied to the token
// embedding by default.
#include "models/gpt.h"

#include <cmath>
#include <optional>
#include <vector>

#include <fmt/format.h>

namespace kiln::models {

using frontend::Builder;
using frontend::Scope;
using frontend::Tensor;

namespace {

class Gpt : public nn::Module {
public:
  Gpt(Scope scope, const GptConfig &c)
      : Module(std::move(scope)), c_(c), tokEmbed(child("tok_embed"), c.vocab, c.dModel),
        posEmbed(child("pos_embed"), c.position, c.maxLen, c.dModel),
        blocks(
            nn::makeLayers<nn::EncoderLayer>(child("blocks"), c.nLayers, c.block(true, c.seqLen))),
        lnF(nn::finalNorm(child("ln_f"), c.norm, c.normKind, c.dModel, c.normEpsilon())) {
    if (!c.tieEmbeddings)
      lmHead.emplace(child("lm_head"), c.dModel, c.vocab, /*withBias=*/false, c.weightInit());
  }

  // tokens [B, T] -> logits [B, T, V]. With caches (one per block), a prompt's pass or, if
  // their pos is set, a decoding step of tokens [B, 1] (see nn::KvCache).
  Tensor operator()(const Tensor &tokens, std::vector<nn::KvCache> *caches = nullptr) const {
    const bool decoding = caches && caches->front().pos.valid();
    const Tensor pos = decoding ? caches->front().pos : Tensor(); // [B]
    // One call per statement: see nn::MultiHeadAttention::expandKvHeads.
    Tensor x = tokEmbed(tokens); // [B, T, d]
    if (c_.scaleEmbeddings)
      x = x * std::sqrt(double(c_.dModel));
    x = decoding ? posEmbed.at(x, pos.reshape({pos.dim(0), 1})) : posEmbed(x);
    x = x.dropout(c_.dropout);
    nn::Mask mask;
    if (decoding)
      mask.keep = nn::cacheMask(pos, c_.seqLen, c_.window);
    else if (c_.window)
      mask.keep = nn::windowMask(builder(), tokens.dim(1), c_.window, /*causal=*/true);
    else
      mask.keep = nn::causalMask(builder(), tokens.dim(1));
    for (size_t i = 0; i < blocks.size(); ++i)
      x = blocks[i](x, mask, caches ? &(*caches)[i] : nullptr);
    if (lnF)
      x = (*lnF)(x);
    if (lmHead)
      return (*lmHead)(x);
    return x.matmul(tokEmbed.weight, {.transposeB = true}); // [B, T, d] x [V, d]^T
  }

private:
  GptConfig c_;
  nn::Embedding tokEmbed;
  nn::AbsolutePosition posEmbed;
  std::vector<nn::EncoderLayer> blocks;
  std::optional<nn::Norm> lnF;
  std::optional<nn::Linear> lmHead;
};

} // namespace

std::vector<ConfigKey<GptConfig>> gptKeys() {
  std::vector<ConfigKey<GptConfig>> keys = {
      key<GptConfig, &GptConfig::seqLen>("seq_len", "sequence length T"),
      key<GptConfig, &GptConfig::nLayers>("n_layers", "decoder blocks"),
      key<GptConfig, &GptConfig::window>("window", "sliding-window attention: each position "
                                                   "attends the last W, itself included (0: all)"),
      key<GptConfig, &GptConfig::scaleEmbeddings>(
          "scale_embeddings", "true|false: token embeddings times sqrt(d_model) on the way in "
                              "(Gemma; a tied head reads the table unscaled)"),
  };
  for (const ConfigKey<GptConfig> &k : commonKeys<GptConfig>())
    keys.push_back(k);
  return keys;
}

Expected<GptConfig> gptConfig(std::span<const Setting> settings) {
  GptConfig c;
  std::vector<ConfigKey<GptConfig>> keys = gptKeys();
  if (Status s = applySettings<GptConfig>("gpt", keys, settings, c); !s)
    return s.error();
  LengthKey lengths[] = {{"seq_len", c.seqLen}};
  fitMaxLen(c, settings, lengths);
  if (Status s = validateCommon("gpt", c, lengths); !s)
    return s.error();
  if (Status s = requirePositive("gpt", "n_layers", c.nLayers, kMaxLayers); !s)
    return s.error();
  return c;
}

Expected<ir::Graph> buildGpt(const GptConfig &c) {
  return buildGraph("gpt", c, [&](Builder &b) {
    Tensor tokens = b.input("tokens", {ir::DType::I64, {c.batch, c.seqLen}}, c.vocab);
    std::optional<Tensor> targets;
    if (c.loss)
      targets = targetsInput(b, c, c.seqLen);
    Gpt model(Scope(b), c);
    addOutputs(b, c, model(tokens), targets);
  });
}

Expected<ir::Graph> buildGptCached(GptConfig c, GptGraph which) {
  c.loss = false;
  Expected<ir::Type> cache = kvType(c, c.seqLen);
  if (!cache)
    return makeError("gpt: {}", cache.error().message);
  if (c.nLayers < 1)
    return makeError("gpt: a cached generation graph needs n_layers >= 1, got {}", c.nLayers);
  const ir::Type cacheType = *cache;
  return buildGraph("gpt", c, [&](Builder &b) {
    const bool decode = which == GptGraph::Decode;
    Tensor tokens = b.input("tokens", {ir::DType::I64, {c.batch, decode ? 1 : c.seqLen}}, c.vocab);
    std::vector<nn::KvCache> caches(static_cast<size_t>(c.nLayers));
    if (decode)
      caches = cacheState(b, c.nLayers, cacheType,
                          b.input("pos", {ir::DType::I64, {c.batch}}, c.seqLen));
    const std::vector<nn::KvCache> state = caches; // the decode step's cache arguments
    Gpt model(Scope(b), c);
    b.output("logits", model(tokens, &caches));
    if (decode)
      updateCaches(b, state, caches);
    else // the prompt's keys and values, named as the decode step's caches
      for (size_t i = 0; i < caches.size(); ++i) {
        b.output(fmt::format("{}{}.k", kCacheStatePrefix, i), caches[i].k);
        b.output(fmt::format("{}{}.v", kCacheStatePrefix, i), caches[i].v);
      }
  });
}

Expected<ir::Graph> buildGpt(std::span<const Setting> settings) {
  Expected<GptConfig> c = gptConfig(settings);
  if (!c)
    return c.error();
  return buildGpt(*c);
}

std::vector<std::string> describeGpt() {
  return describeKeys<GptConfig>(gptKeys(), GptConfig{});
}

} // namespace kiln::models

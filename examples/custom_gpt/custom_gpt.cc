// A GPT-J-style decoder written from scratch in kiln's DSL, outside kiln's tree, with the whole
// kiln command line for it. Each block runs attention and the MLP in parallel off one RMSNorm
// (GPT-J, Wang & Komatsuzaki 2021: x + attn(norm(x)) + mlp(norm(x))); positions are rotary,
// applied inside attention; no layer has a bias. The LM head is tied to the token embedding.
//   custom_kiln models                               its keys, beside the built-in models'
//   custom_kiln train custom_gpt --steps 50          trains it on the embedded text
//   custom_kiln dump custom_gpt --stage=optimized    attention and norms fused
#include <optional>
#include <vector>

#include "frontend/nn.h"
#include "models/config.h"
#include "tools/cli.h"

namespace {

using namespace kiln;
using frontend::Scope;
using frontend::Tensor;
namespace nn = frontend::nn;

struct Config : models::CommonConfig {
  int64_t seqLen = 64, nLayers = 2;
  // Rotary, as its blocks compute: the common checks take learned positions' max_len otherwise.
  Config() { position = nn::PositionKind::Rope; }
};

// x + attn(h) + mlp(h), h = norm(x): both branches read the same normalised input.
class ParallelBlock : public nn::Module {
public:
  ParallelBlock(Scope scope, const Config &c)
      : Module(std::move(scope)), norm(child("norm"), c.dModel),
        attn(child("attn"), {.dModel = c.dModel,
                             .nHeads = c.nHeads,
                             .nKvHeads = c.nKvHeads,
                             .bias = false,
                             .position = nn::PositionKind::Rope}),
        mlp(child("mlp"), c.dModel, c.dFF, c.activation, /*bias=*/false) {}

  Tensor operator()(const Tensor &x, const nn::Mask &mask) const {
    Tensor h = norm(x);
    Tensor a = attn(h, mask);
    Tensor m = mlp(h);
    Tensor y = x + a;
    return y + m;
  }

private:
  nn::RMSNorm norm;
  nn::MultiHeadAttention attn;
  nn::FeedForward mlp;
};

class CustomGpt : public nn::Module {
public:
  CustomGpt(Scope scope, const Config &c)
      : Module(std::move(scope)), embed(child("embed"), c.vocab, c.dModel),
        normF(child("norm_f"), c.dModel) {
    for (int64_t i = 0; i < c.nLayers; ++i)
      blocks.emplace_back(child("blocks").child(i), c);
  }

  // tokens [B, T] -> logits [B, T, V]
  Tensor operator()(const Tensor &tokens) const {
    const nn::Mask mask{.keep = nn::causalMask(builder(), tokens.dim(1))};
    Tensor x = embed(tokens);
    for (const ParallelBlock &block : blocks)
      x = block(x, mask);
    x = normF(x);
    return x.matmul(embed.weight, {.transposeB = true});
  }

private:
  nn::Embedding embed;
  std::vector<ParallelBlock> blocks;
  nn::RMSNorm normF;
};

// The keys `--set` takes, each with its help line (`custom_kiln models` lists them).
std::vector<models::ConfigKey<Config>> keys() {
  using models::key;
  return {key<Config, &Config::seqLen>("seq_len", "sequence length T"),
          key<Config, &Config::nLayers>("n_layers", "parallel blocks"),
          key<Config, &Config::batch>("batch", "batch size"),
          key<Config, &Config::vocab>("vocab", "vocabulary size"),
          key<Config, &Config::dModel>("d_model", "model width, divisible by n_heads"),
          key<Config, &Config::nHeads>("n_heads", "attention (query) heads"),
          key<Config, &Config::nKvHeads>("n_kv_heads", "key/value heads (0 = n_heads)"),
          key<Config, &Config::dFF>("d_ff", "MLP width"),
          key<Config, &Config::activation>("activation", "relu|gelu|gelu_tanh|swiglu"),
          key<Config, &Config::loss>("loss", "true|false: the targets input and the loss")};
}

Expected<ir::Graph> build(std::span<const models::Setting> settings) {
  Config c;
  const std::vector<models::ConfigKey<Config>> k = keys();
  if (Status s = models::applySettings<Config>("custom_gpt", k, settings, c); !s)
    return s.error();
  const models::LengthKey lengths[] = {{"seq_len", c.seqLen}};
  if (Status s = models::validateCommon("custom_gpt", c, lengths); !s)
    return s.error();
  if (Status s = models::requirePositive("custom_gpt", "n_layers", c.nLayers, 64); !s)
    return s.error();
  return models::buildGraph("custom_gpt", c, [&](frontend::Builder &b) {
    Tensor tokens = b.input("tokens", {ir::DType::I64, {c.batch, c.seqLen}}, c.vocab);
    std::optional<Tensor> targets;
    if (c.loss)
      targets = models::targetsInput(b, c, c.seqLen);
    CustomGpt model(Scope(b), c);
    models::addOutputs(b, c, model(tokens), targets);
  });
}

std::vector<std::string> describe() {
  const std::vector<models::ConfigKey<Config>> k = keys();
  return models::describeKeys<Config>(k, Config{});
}

const models::ModelEntry kModels[] = {
    {"custom_gpt", "GPT-J-style parallel blocks, RMSNorm, rotary positions, no biases", &build,
     &describe, "lm"},
};

} // namespace

int main(int argc, char **argv) {
  return kiln::tools::cliMain(argc, argv, kModels);
}

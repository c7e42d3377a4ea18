// The pre-Transformer sequence-to-sequence model with attention (Bahdanau et al. 2015; Luong et
// al. 2015) in kiln's DSL, unrolled over its static lengths, with the whole kiln command line:
// a GRU or LSTM encoder over the embedded source; a decoder cell of the same kind started from
// the encoder's last state, attending at every step to the encoder's states (padding masked):
//   bahdanau:          context from the previous state, the cell reads [y_t; context],
//                      logits = W [h_t; context]                      (additive score)
//   dot|general|concat: the cell reads y_t, context from its new state (Luong's score),
//                      logits = W_o tanh(W_c [context; h_t])
// It takes the transformer model's inputs ("src", "tgt", "targets"), so kiln's copy, reverse and
// pairs tasks train it:
//   seq2seq_kiln train seq2seq_attention --task reverse --lr 3e-3 --steps 500 --set score=general
// (measured: from 2.49 to 0.0018 bahdanau, 0.025 dot, 0.016 general, 0.020 concat with a GRU; an
// LSTM learns more slowly: 0.0034 bahdanau, 1.40 dot, 0.067 general, 0.51 concat).
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "frontend/nn.h"
#include "models/config.h"
#include "tools/cli.h"

namespace {

using namespace kiln;
using frontend::Scope;
using frontend::Tensor;
namespace nn = frontend::nn;

enum class Cell : uint8_t { Gru, Lstm };

struct Config : models::CommonConfig {
  int64_t srcLen = 6, tgtLen = 7;
  Cell cell = Cell::Gru;
  nn::AttentionScore score = nn::AttentionScore::Bahdanau;
  Config() {
    ignoreIndex = std::nullopt; // pad targets unscored, as the transformer's
    // The copy and reverse tasks' scale: 12 symbols (the specials and 9 content tokens), 16
    // sequences a batch.
    vocab = 12;
    batch = 16;
  }
};

constexpr std::string_view kScores[] = {"bahdanau", "dot", "general", "concat"};

// A recurrent state: h, and for an LSTM its cell c.
struct State {
  Tensor h, c;
};

class Seq2Seq : public nn::Module {
public:
  Seq2Seq(Scope scope, const Config &c)
      : Module(std::move(scope)), c_(c), srcEmbed(child("src_embed"), c.vocab, c.dModel),
        tgtEmbed(child("tgt_embed"), c.vocab, c.dModel),
        attention(child("attention"), c.score, c.dModel, c.dModel, c.dModel) {
    const int64_t in = bahdanau() ? 2 * c.dModel : c.dModel; // the decoder cell's input
    if (c.cell == Cell::Gru) {
      encoderGru.emplace(child("encoder"), c.dModel, c.dModel);
      decoderGru.emplace(child("decoder"), in, c.dModel);
    } else {
      encoderLstm.emplace(child("encoder"), c.dModel, c.dModel);
      decoderLstm.emplace(child("decoder"), in, c.dModel);
    }
    if (!bahdanau())
      combine.emplace(child("combine"), 2 * c.dModel, c.dModel, /*withBias=*/false);
    out.emplace(child("out"), bahdanau() ? 2 * c.dModel : c.dModel, c.vocab);
  }

  // src [B, S], tgt [B, T] -> logits [B, T, V]
  Tensor operator()(const Tensor &src, const Tensor &tgt) const {
    const int64_t b = src.dim(0), d = c_.dModel;
    const Tensor keep = src.ne(double(c_.padId)); // [B, S]: keys that are not padding
    Tensor xs = srcEmbed(src);                    // [B, S, d]
    State s{builder().constant(0, {b, d}, c_.dtype), builder().constant(0, {b, d}, c_.dtype)};
    std::vector<Tensor> states;
    for (int64_t t = 0; t < src.dim(1); ++t) {
      s = encoderStep(at(xs, t), s);
      states.push_back(s.h.reshape({b, 1, d}));
    }
    const Tensor memory = frontend::concat(states, 1); // [B, S, d]
    Tensor ys = tgtEmbed(tgt);                         // [B, T, d]
    std::vector<Tensor> logits;
    for (int64_t t = 0; t < tgt.dim(1); ++t) {
      Tensor features;
      if (bahdanau()) {
        Tensor context = attention(s.h, memory, keep).context;
        s = decoderStep(frontend::concat({at(ys, t), context}, 1), s);
        features = frontend::concat({s.h, context}, 1);
      } else {
        s = decoderStep(at(ys, t), s);
        Tensor context = attention(s.h, memory, keep).context;
        features = (*combine)(frontend::concat({context, s.h}, 1)).tanh();
      }
      logits.push_back((*out)(features).reshape({b, 1, c_.vocab}));
    }
    return frontend::concat(logits, 1);
  }

private:
  bool bahdanau() const { return c_.score == nn::AttentionScore::Bahdanau; }
  static Tensor at(const Tensor &x, int64_t t) { // [B, L, d] -> position t: [B, d]
    return x.slice(1, t, t + 1).reshape({x.dim(0), x.dim(2)});
  }
  State encoderStep(const Tensor &x, const State &s) const {
    if (encoderGru)
      return {(*encoderGru)(x, s.h), s.c};
    nn::LSTMCell::State next = (*encoderLstm)(x, {s.h, s.c});
    return {next.h, next.c};
  }
  State decoderStep(const Tensor &x, const State &s) const {
    if (decoderGru)
      return {(*decoderGru)(x, s.h), s.c};
    nn::LSTMCell::State next = (*decoderLstm)(x, {s.h, s.c});
    return {next.h, next.c};
  }

  Config c_;
  nn::Embedding srcEmbed, tgtEmbed;
  std::optional<nn::GRUCell> encoderGru, decoderGru;
  std::optional<nn::LSTMCell> encoderLstm, decoderLstm;
  nn::RecurrentAttention attention;
  std::optional<nn::Linear> combine, out;
};

std::vector<models::ConfigKey<Config>> keys() {
  using models::key;
  return {
      key<Config, &Config::srcLen>("src_len", "source length S"),
      key<Config, &Config::tgtLen>("tgt_len", "target length T"),
      {"cell", "gru|lstm",
       [](Config &c, std::string_view v) -> Status {
         if (v != "gru" && v != "lstm")
           return makeError("expected gru|lstm");
         c.cell = v == "gru" ? Cell::Gru : Cell::Lstm;
         return {};
       },
       [](const Config &c) { return std::string(c.cell == Cell::Gru ? "gru" : "lstm"); }},
      {"score", "bahdanau|dot|general|concat: the attention score",
       [](Config &c, std::string_view v) -> Status {
         for (size_t k = 0; k < std::size(kScores); ++k)
           if (v == kScores[k]) {
             c.score = static_cast<nn::AttentionScore>(k);
             return {};
           }
         return makeError("expected bahdanau|dot|general|concat");
       },
       [](const Config &c) { return std::string(kScores[static_cast<size_t>(c.score)]); }},
      key<Config, &Config::batch>("batch", "batch size"),
      key<Config, &Config::vocab>("vocab", "vocabulary size"),
      key<Config, &Config::dModel>("d_model", "embedding and hidden width"),
      key<Config, &Config::padId>("pad_id", "padding token id"),
      key<Config, &Config::loss>("loss", "true|false: the targets input and the loss"),
  };
}

Expected<ir::Graph> build(std::span<const models::Setting> settings) {
  Config c;
  const std::vector<models::ConfigKey<Config>> k = keys();
  if (Status s = models::applySettings<Config>("seq2seq_attention", k, settings, c); !s)
    return s.error();
  c.nHeads = 1; // no multi-head attention here; validateCommon asks d_model % n_heads == 0
  const models::LengthKey lengths[] = {{"src_len", c.srcLen}, {"tgt_len", c.tgtLen}};
  if (Status s = models::validateCommon("seq2seq_attention", c, lengths); !s)
    return s.error();
  if (c.srcLen > 256 || c.tgtLen > 256)
    return makeError("seq2seq_attention: src_len and tgt_len are unrolled: at most 256 each");
  return models::buildSeq2Seq("seq2seq_attention", c, c.srcLen, c.tgtLen,
                              [&](frontend::Builder &b, const Tensor &src, const Tensor &tgt) {
                                return Seq2Seq(Scope(b), c)(src, tgt);
                              });
}

std::vector<std::string> describe() {
  const std::vector<models::ConfigKey<Config>> k = keys();
  return models::describeKeys<Config>(k, Config{});
}

const models::ModelEntry kModels[] = {
    {"seq2seq_attention", "GRU/LSTM encoder-decoder with Bahdanau or Luong attention", &build,
     &describe, "copy"},
};

} // namespace

int main(int argc, char **argv) {
  return kiln::tools::cliMain(argc, argv, kModels);
}

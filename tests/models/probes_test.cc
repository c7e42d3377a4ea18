// Attention probes (Builder::setProbing, what `kiln attention` draws): a model built with probes
// outputs every attention's probabilities "<module>.probs" [B, H, T, S]. Checked: a GPT's maps
// are probabilities (rows sum to 1) and causal (zero above the diagonal), the compiled model
// (fused attention, whose maps are exp(logits - lse)) gives what the unfused reference gives,
// and a BERT's padding keys get nothing. Without probes a graph has no such output.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "models/bert.h"
#include "models/gpt.h"
#include "passes/stages.h"
#include "tests/util/executable.h"

namespace kiln::probes_test {
namespace {

using models::Setting;

constexpr int64_t kT = 6, kHeads = 2;

std::vector<Setting> tiny() {
  return {{"vocab", "16"},     {"seq_len", "6"}, {"d_model", "16"}, {"n_heads", "2"},
          {"n_layers", "2"},   {"d_ff", "32"},   {"batch", "2"},    {"position", "rope"},
          {"n_kv_heads", "1"}, {"pad_id", "0"}};
}

// The graph's outputs whose names end in ".probs".
std::vector<std::string> probeOutputs(const ir::Graph &g) {
  std::vector<std::string> names;
  for (const ir::Output &o : g.outputs())
    if (o.name.ends_with(".probs"))
      names.push_back(o.name);
  return names;
}

// Runs `g` on tokens 1..12 (row 1 ends in two pad tokens) on the reference backend, unfused,
// and on highway, optimized, with the same weights; returns both maps of `name`.
std::pair<runtime::HostTensor, runtime::HostTensor> maps(const ir::Graph &g,
                                                         const std::string &name) {
  std::unique_ptr<runtime::Executable> ref = testing_exe::reference(g, 3);
  Expected<ir::Graph> opt = passes::optimizedForward(g);
  EXPECT_TRUE(opt.ok()) << opt.error().message;
  std::unique_ptr<runtime::Executable> fast = testing_exe::highway(*opt);
  for (const runtime::Symbol &s : ref->program().symbols)
    if (s.kind == runtime::Symbol::Kind::Param) {
      EXPECT_TRUE(fast->write(s.name, ref->read(s)).ok());
    }
  runtime::HostTensor tokens(DType::I64, {2, kT});
  for (int64_t k = 0; k < 2 * kT; ++k)
    tokens.setInt(k, k >= 2 * kT - 2 ? 0 : 1 + k);
  for (runtime::Executable *exe : {ref.get(), fast.get()}) {
    EXPECT_TRUE(exe->write("tokens", tokens).ok());
    EXPECT_TRUE(exe->run().ok());
  }
  return {*ref->read(name), *fast->read(name)};
}

TEST(AttentionProbes, GptMapsAreCausalProbabilitiesOnEveryBackend) {
  models::GptConfig c = *models::gptConfig(tiny());
  EXPECT_TRUE(probeOutputs(*models::buildGpt(c)).empty());
  c.probes = true;
  const ir::Graph g = *models::buildGpt(c);
  ASSERT_EQ(probeOutputs(g),
            (std::vector<std::string>{"blocks.0.attn.probs", "blocks.1.attn.probs"}));
  const auto [ref, fast] = maps(g, "blocks.1.attn.probs");
  ASSERT_EQ(fast.shape(), (std::vector<int64_t>{2, kHeads, kT, kT}));
  for (int64_t row = 0; row < 2 * kHeads * kT; ++row) {
    const int64_t i = row % kT;
    double sum = 0;
    for (int64_t j = 0; j < kT; ++j) {
      const double p = fast.get(row * kT + j);
      sum += p;
      if (j > i) {
        EXPECT_EQ(p, 0) << "query " << i << " sees key " << j;
      }
      EXPECT_NEAR(p, ref.get(row * kT + j), 1e-5);
    }
    EXPECT_NEAR(sum, 1, 1e-5);
  }
}

TEST(AttentionProbes, BertPaddingKeysGetNothing) {
  models::BertConfig c = *models::bertConfig(tiny());
  c.probes = true;
  const ir::Graph g = *models::buildBert(c);
  const auto [ref, fast] = maps(g, "blocks.0.attn.probs");
  for (int64_t h = 0; h < kHeads; ++h)
    for (int64_t i = 0; i < kT; ++i) {
      const int64_t row = ((1 * kHeads + h) * kT + i) * kT; // batch row 1: keys 4, 5 are pads
      EXPECT_EQ(fast.get(row + 4), 0);
      EXPECT_EQ(fast.get(row + 5), 0);
      EXPECT_GT(fast.get(row + 3), 0);
      EXPECT_NEAR(fast.get(row + 3), ref.get(row + 3), 1e-5);
    }
}

} // namespace
} // namespace kiln::probes_test

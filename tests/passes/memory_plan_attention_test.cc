// Memory planning of attention: one layer's training step at T = 512, 1024, 2048 has a planned
// peak that grows linearly in T with the fused attention ops, and quadratically with the softmax
// written out (each T x T tensor then lives in the arena).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ir/builder.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/autodiff.h"
#include "passes/memory_plan.h"
#include "passes/optimizer.h"

namespace kiln::memory_plan_attention_test {
namespace {
using namespace ir;

// One attention layer's training step at sequence length T: x [1, T, C] -> q, k, v [1, H, T, D]
// by matmuls with parameters, causal attention, output projection, loss = mean(y^2); autodiff
// and an SGD update. Fused: attention / attention_backward, which never hold a T x T tensor.
// Unfused: q k^T, the causal mask, softmax and p v, each T x T.
Expected<Graph> attentionStep(int64_t T, bool fused) {
  const int64_t H = 4, D = 16, C = H * D;
  Graph g("attention");
  ValueId x = g.addInput("x", Type{DType::F32, {1, T, C}});
  std::vector<ValueId> w;
  for (const char *name : {"wq", "wk", "wv", "wo"})
    w.push_back(
        g.addParam(name, Type{DType::F32, {C, C}}, ParamInit{ParamInit::Kind::Normal, 0.02}));
  Builder b(g);
  auto perm = [&](ValueId v) {
    return b.emit(OpKind::Transpose, {v}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  };
  auto heads = [&](ValueId wt) { // [1, T, C] -> [1, H, T, D]
    return perm(b.reshape(b.emit(OpKind::Matmul, {x, wt}), {1, T, H, D}));
  };
  ValueId q = heads(w[0]), k = heads(w[1]), v = heads(w[2]);
  double scale = 1 / std::sqrt(double(D));
  ValueId out;
  if (fused) {
    Expected<NodeId> n =
        g.addNode(OpKind::Attention, {q, k, v},
                  {{"scale", scale}, {"causal", true}, {"q_heads", H}, {"kv_heads", H}});
    if (!n)
      return n.error();
    out = g.node(*n).results[0];
  } else {
    ValueId logits =
        b.mul(b.emit(OpKind::Matmul, {q, k}, {{"transpose_b", true}}), b.scalar(scale, DType::F32));
    ValueId mask = b.emit(OpKind::Tri, {}, {{"shape", std::vector<int64_t>{T, T}}});
    ValueId masked = b.select(mask, logits, b.scalar(-INFINITY, DType::F32));
    out = b.emit(OpKind::Matmul, {b.emit(OpKind::Softmax, {masked}), v});
  }
  ValueId y = b.emit(OpKind::Matmul, {b.reshape(perm(out), {1, T, C}), w[3]});
  g.addOutput("loss", b.emit(OpKind::ReduceMean, {b.mul(y, y)}), OutputRole::Loss);
  Expected<Graph> grads = passes::differentiate(g);
  if (!grads)
    return grads.error();
  passes::OptimizerConfig sgd;
  sgd.kind = passes::OptimizerConfig::Kind::Sgd;
  Expected<Graph> step = passes::buildTrainingStep(*grads, sgd);
  if (!step)
    return step.error();
  step->compact();
  step->setMemoryPlan(passes::planMemory(*step));
  return step;
}

// Peaks at T = 512, 1024, 2048, printed; each must be a valid plan.
std::vector<int64_t> attentionPeaks(bool fused) {
  std::vector<int64_t> peaks;
  for (int64_t T : {512, 1024, 2048}) {
    Expected<Graph> g = attentionStep(T, fused);
    EXPECT_TRUE(g.ok()) << g.error().message;
    if (!g.ok())
      return {};
    std::vector<Error> errors = verify(*g);
    EXPECT_TRUE(errors.empty()) << errors.front().message;
    passes::MemoryStats s = passes::memoryStats(*g);
    std::printf("%s attention, T=%-5lld planned peak %12lld bytes (sum of buffers %12lld)\n",
                fused ? "fused  " : "unfused", static_cast<long long>(T),
                static_cast<long long>(s.arenaBytes), static_cast<long long>(s.bufferBytes));
    peaks.push_back(s.arenaBytes);
  }
  return peaks;
}

TEST(MemoryPlanAttention, FusedPeakGrowsLinearlyInT) {
  Expected<Graph> g = attentionStep(512, true);
  ASSERT_TRUE(g.ok()) << g.error().message;
  bool hasBackward = false;
  for (const Node &n : g->nodes()) {
    hasBackward |= n.op == OpKind::AttentionBackward;
    for (ValueId r : n.results) // no value is T x T
      EXPECT_LT(g->type(r).numElements(), 512 * 512) << mnemonic(n.op);
  }
  EXPECT_TRUE(hasBackward);
  // Multi-result nodes (attention: out, lse; its backward: dq, dk, dv) print one mem(...) each.
  std::string text = print(*g);
  EXPECT_NE(text.find(") mem(arena, offset="), std::string::npos);
  ParseResult r = parseGraph(text);
  ASSERT_TRUE(r.errors.empty()) << r.errors.front().message;
  EXPECT_EQ(print(*r.graph), text);
  std::vector<int64_t> p = attentionPeaks(true);
  ASSERT_EQ(p.size(), 3u);
  for (int i = 0; i < 2; ++i) {
    double ratio = double(p[i + 1]) / double(p[i]);
    EXPECT_GT(ratio, 1.8) << "T doubling " << i;
    EXPECT_LT(ratio, 2.2) << "T doubling " << i;
  }
}

TEST(MemoryPlanAttention, UnfusedPeakGrowsQuadraticallyInT) {
  std::vector<int64_t> p = attentionPeaks(false);
  ASSERT_EQ(p.size(), 3u);
  for (int i = 0; i < 2; ++i) {
    double ratio = double(p[i + 1]) / double(p[i]);
    EXPECT_GT(ratio, 3.5) << "T doubling " << i;
    EXPECT_LT(ratio, 4.2) << "T doubling " << i;
  }
}

} // namespace
} // namespace kiln::memory_plan_attention_test

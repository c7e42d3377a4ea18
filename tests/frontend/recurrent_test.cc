// The recurrent cells and their attention (frontend/nn_recurrent.h) and the class token: values
// against the equations written as loops (PyTorch's nn.GRUCell / nn.LSTMCell gate order), and
// every gradient -- parameters and inputs -- against central differences, in f64.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "codegen/reference/interpreter.h"
#include "frontend/nn.h"
#include "tests/passes/fusion_util.h"
#include "tests/passes/gradcheck_util.h"

namespace kiln::recurrent_test {
namespace {

using frontend::Builder;
using frontend::Scope;
using frontend::Tensor;
namespace nn = frontend::nn;
using ir::DType;
using ir::Type;
using Ref = ir::RefTensor<double>;

constexpr int64_t kB = 2, kI = 3, kH = 4, kS = 5;

// A scalar loss that weighs every element of `out` differently: sum(out * w), w an input.
void addLoss(Builder &b, const Tensor &out) {
  Tensor w = b.input("loss_weights", out.type());
  Tensor weighted = out * w;
  b.loss("loss", weighted.sum());
}

// Every float argument of g (inputs and parameters), by name.
std::vector<std::string> floatArgs(const ir::Graph &g) {
  std::vector<std::string> names;
  for (const ir::Arg &a : g.args())
    if (ir::isFloat(g.type(a.value).dtype) && a.name != "loss_weights")
      names.push_back(a.name);
  return names;
}

const Ref &argOf(const ir::Graph &g, const std::vector<Ref> &args, const std::string &name) {
  for (size_t i = 0; i < args.size(); ++i)
    if (g.args()[i].name == name)
      return args[i];
  ADD_FAILURE() << "no argument " << name;
  return args[0];
}

double sigmoid(double x) {
  return 1 / (1 + std::exp(-x));
}

// gates[b][r] = W_ih[r] . x[b] + b_ih[r] + W_hh[r] . h[b] + b_hh[r], split as the cell needs.
struct Affine {
  const ir::Graph &g;
  const std::vector<Ref> &args;
  double ih(const std::string &cell, const Ref &x, int64_t b, int64_t r, int64_t in) const {
    const Ref &w = argOf(g, args, cell + ".weight_ih"), &bias = argOf(g, args, cell + ".bias_ih");
    double s = bias.f[r];
    for (int64_t k = 0; k < in; ++k)
      s += w.f[r * in + k] * x.f[b * in + k];
    return s;
  }
  double hh(const std::string &cell, const Ref &h, int64_t b, int64_t r) const {
    const Ref &w = argOf(g, args, cell + ".weight_hh"), &bias = argOf(g, args, cell + ".bias_hh");
    double s = bias.f[r];
    for (int64_t k = 0; k < kH; ++k)
      s += w.f[r * kH + k] * h.f[b * kH + k];
    return s;
  }
};

TEST(RecurrentCells, GruIsTorchsEquationsAndItsGradientsMatch) {
  Builder b("gru", DType::F64);
  Tensor x = b.input("x", {DType::F64, {kB, kI}}), h = b.input("h", {DType::F64, {kB, kH}});
  nn::GRUCell cell(Scope(b).child("cell"), kI, kH);
  Tensor out = cell(x, h);
  b.output("h_next", out);
  addLoss(b, out);
  const ir::Graph g = b.finish();
  std::vector<Ref> args = reference::makeArgs<double>(g, 3);
  Expected<std::vector<Ref>> got = reference::run<double>(g, args);
  ASSERT_TRUE(got.ok()) << got.error().message;
  const Ref &xv = argOf(g, args, "x"), &hv = argOf(g, args, "h");
  const Affine a{g, args};
  for (int64_t i = 0; i < kB; ++i)
    for (int64_t j = 0; j < kH; ++j) {
      double r = sigmoid(a.ih("cell", xv, i, j, kI) + a.hh("cell", hv, i, j));
      double z = sigmoid(a.ih("cell", xv, i, kH + j, kI) + a.hh("cell", hv, i, kH + j));
      double n =
          std::tanh(a.ih("cell", xv, i, 2 * kH + j, kI) + r * a.hh("cell", hv, i, 2 * kH + j));
      EXPECT_NEAR((*got)[0].f[i * kH + j], (1 - z) * n + z * hv.f[i * kH + j], 1e-12);
    }
  gradcheck::expectGradientsMatch(g, args, floatArgs(g));
}

TEST(RecurrentCells, LstmIsTorchsEquationsAndItsGradientsMatch) {
  Builder b("lstm", DType::F64);
  Tensor x = b.input("x", {DType::F64, {kB, kI}});
  nn::LSTMCell::State s{b.input("h", {DType::F64, {kB, kH}}), b.input("c", {DType::F64, {kB, kH}})};
  nn::LSTMCell cell(Scope(b).child("cell"), kI, kH);
  nn::LSTMCell::State next = cell(x, s);
  b.output("h_next", next.h);
  b.output("c_next", next.c);
  addLoss(b, frontend::concat({next.h, next.c}, 1));
  const ir::Graph g = b.finish();
  std::vector<Ref> args = reference::makeArgs<double>(g, 4);
  Expected<std::vector<Ref>> got = reference::run<double>(g, args);
  ASSERT_TRUE(got.ok()) << got.error().message;
  const Ref &xv = argOf(g, args, "x"), &hv = argOf(g, args, "h"), &cv = argOf(g, args, "c");
  const Affine a{g, args};
  auto gate = [&](int64_t i, int64_t k, int64_t j) {
    return a.ih("cell", xv, i, k * kH + j, kI) + a.hh("cell", hv, i, k * kH + j);
  };
  for (int64_t i = 0; i < kB; ++i)
    for (int64_t j = 0; j < kH; ++j) {
      double in = sigmoid(gate(i, 0, j)), f = sigmoid(gate(i, 1, j)), gg = std::tanh(gate(i, 2, j));
      double o = sigmoid(gate(i, 3, j)), c = f * cv.f[i * kH + j] + in * gg;
      EXPECT_NEAR((*got)[1].f[i * kH + j], c, 1e-12);
      EXPECT_NEAR((*got)[0].f[i * kH + j], o * std::tanh(c), 1e-12);
    }
  gradcheck::expectGradientsMatch(g, args, floatArgs(g));
}

// y = W x (+ b) of a Linear `name` [out, in] on the vector at x.f[at, at + in).
double linearRow(const ir::Graph &g, const std::vector<Ref> &args, const std::string &name,
                 int64_t row, int64_t in, const std::vector<double> &x, bool withBias) {
  const Ref &w = argOf(g, args, name + ".weight");
  double s = withBias ? argOf(g, args, name + ".bias").f[row] : 0;
  for (int64_t k = 0; k < in; ++k)
    s += w.f[row * in + k] * x[k];
  return s;
}

// The score of query row i against key j, from the equations of nn_recurrent.h (attention width
// kA): what the weights' log-ratios must equal.
constexpr int64_t kA = 6;
double expectedScore(nn::AttentionScore score, const ir::Graph &g, const std::vector<Ref> &args,
                     int64_t i, int64_t j) {
  const Ref &qv = argOf(g, args, "q"), &kv = argOf(g, args, "keys");
  std::vector<double> q(qv.f.begin() + i * kH, qv.f.begin() + (i + 1) * kH);
  std::vector<double> k(kv.f.begin() + (i * kS + j) * kH, kv.f.begin() + (i * kS + j + 1) * kH);
  double s = 0;
  switch (score) {
  case nn::AttentionScore::Bahdanau: // v . tanh(W_q q + W_k k + b_k)
    for (int64_t a = 0; a < kA; ++a)
      s += argOf(g, args, "att.v.weight").f[a] *
           std::tanh(linearRow(g, args, "att.w_query", a, kH, q, false) +
                     linearRow(g, args, "att.w_key", a, kH, k, true));
    break;
  case nn::AttentionScore::Dot: // q . k
    for (int64_t d = 0; d < kH; ++d)
      s += q[d] * k[d];
    break;
  case nn::AttentionScore::General: // q . W k
    for (int64_t d = 0; d < kH; ++d)
      s += q[d] * linearRow(g, args, "att.w", d, kH, k, false);
    break;
  case nn::AttentionScore::Concat: { // v . tanh(W [q; k])
    std::vector<double> qk = q;
    qk.insert(qk.end(), k.begin(), k.end());
    for (int64_t a = 0; a < kA; ++a)
      s += argOf(g, args, "att.v.weight").f[a] *
           std::tanh(linearRow(g, args, "att.w", a, 2 * kH, qk, false));
    break;
  }
  }
  return s;
}

constexpr nn::AttentionScore kScores[] = {nn::AttentionScore::Bahdanau, nn::AttentionScore::Dot,
                                          nn::AttentionScore::General, nn::AttentionScore::Concat};

// q [B, H] attending keys [B, S, H] by `score`: outputs "weights", "context" and a loss.
ir::Graph attentionGraph(nn::AttentionScore score) {
  Builder b("attention", DType::F64);
  Tensor q = b.input("q", {DType::F64, {kB, kH}});
  Tensor keys = b.input("keys", {DType::F64, {kB, kS, kH}});
  Tensor keep = b.input("keep", {DType::Bool, {kB, kS}});
  nn::RecurrentAttention att(Scope(b).child("att"), score, kH, kH, kA);
  nn::RecurrentAttention::Result r = att(q, keys, keep);
  b.output("weights", r.weights);
  b.output("context", r.context);
  addLoss(b, r.context);
  return b.finish();
}

// Padding keys at the end of both rows; key 0 is kept in each.
void padKeys(const ir::Graph &g, std::vector<Ref> &args) {
  for (size_t i = 0; i < args.size(); ++i)
    if (g.args()[i].name == "keep")
      args[i].i = {1, 1, 1, 0, 0, 1, 1, 1, 1, 0};
}

// Each score's weights are a softmax of its equation's scores over the allowed keys (0 at masked
// ones), the context their sum of keys; the gradients of every parameter, the query and the keys
// match.
TEST(RecurrentAttention, EveryScoreIsASoftmaxAndItsGradientsMatch) {
  for (nn::AttentionScore score : kScores) {
    SCOPED_TRACE(static_cast<int>(score));
    const ir::Graph g = attentionGraph(score);
    std::vector<Ref> args = reference::makeArgs<double>(g, 5);
    padKeys(g, args);
    Expected<std::vector<Ref>> got = reference::run<double>(g, args);
    ASSERT_TRUE(got.ok()) << got.error().message;
    const Ref &w = (*got)[0], &ctx = (*got)[1], &kv = argOf(g, args, "keys");
    const Ref &kept = argOf(g, args, "keep");
    for (int64_t i = 0; i < kB; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < kS; ++j) {
        sum += w.f[i * kS + j];
        if (kept.i[i * kS + j] == 0) {
          EXPECT_EQ(w.f[i * kS + j], 0);
        } else {
          EXPECT_NEAR(std::log(w.f[i * kS + j] / w.f[i * kS]),
                      expectedScore(score, g, args, i, j) - expectedScore(score, g, args, i, 0),
                      1e-12);
        }
      }
      EXPECT_NEAR(sum, 1, 1e-12);
      for (int64_t d = 0; d < kH; ++d) {
        double c = 0;
        for (int64_t j = 0; j < kS; ++j)
          c += w.f[i * kS + j] * kv.f[(i * kS + j) * kH + d];
        EXPECT_NEAR(ctx.f[i * kH + d], c, 1e-12);
      }
    }
    gradcheck::expectGradientsMatch(g, args, floatArgs(g));
  }
}

// Dot and general scores are attention with one query and one head: the attention pass fuses
// them, no softmax left. The additive scores keep their softmax, but no matmul reads it (their
// context is a product and a sum). Fused or not, every output and gradient is the same.
TEST(RecurrentAttention, DotAndGeneralFuseAndNoSoftmaxFeedsAMatmul) {
  for (nn::AttentionScore score : kScores) {
    SCOPED_TRACE(static_cast<int>(score));
    const ir::Graph forward = attentionGraph(score);
    const ir::Graph plain = fusion_util::differentiated(forward, floatArgs(forward));
    const ir::Graph fused = fusion_util::runSpec(plain, "fusion");
    const bool product = score == nn::AttentionScore::Dot || score == nn::AttentionScore::General;
    EXPECT_EQ(fusion_util::count(fused, ir::OpKind::Attention), product ? 1 : 0);
    if (product) {
      EXPECT_EQ(fusion_util::count(fused, ir::OpKind::Softmax), 0);
    }
    for (const ir::Node &n : fused.nodes())
      if (n.op == ir::OpKind::Matmul)
        for (ir::ValueId v : n.operands) {
          const ir::NodeId def = fused.value(v).def;
          EXPECT_TRUE(def == ir::kNone || fused.node(def).op != ir::OpKind::Softmax);
        }
    fusion_util::expectSameOutputs<double>(fused, plain, 1e-12, 5, padKeys);
  }
}

TEST(ClassToken, IsPrependedToEverySequenceAndGetsEveryRowsGradient) {
  Builder b("token", DType::F64);
  Tensor x = b.input("x", {DType::F64, {kB, kS, kH}});
  Tensor token = b.param("cls", {kH}, nn::normalInit(1.0));
  Tensor y = nn::prependToken(x, token);
  b.output("y", y);
  addLoss(b, y);
  const ir::Graph g = b.finish();
  EXPECT_EQ(g.type(g.outputs()[0].value), (Type{DType::F64, {kB, kS + 1, kH}}));
  std::vector<Ref> args = reference::makeArgs<double>(g, 6);
  Expected<std::vector<Ref>> got = reference::run<double>(g, args);
  ASSERT_TRUE(got.ok()) << got.error().message;
  const Ref &xv = argOf(g, args, "x"), &tv = argOf(g, args, "cls");
  for (int64_t i = 0; i < kB; ++i)
    for (int64_t d = 0; d < kH; ++d) {
      EXPECT_EQ((*got)[0].f[(i * (kS + 1)) * kH + d], tv.f[d]);
      EXPECT_EQ((*got)[0].f[(i * (kS + 1) + 1) * kH + d], xv.f[(i * kS) * kH + d]);
    }
  gradcheck::expectGradientsMatch(g, args, floatArgs(g));
  Builder bad("bad", DType::F64);
  Tensor wrong = bad.param("cls", {kH + 1}, nn::normalInit());
  EXPECT_THROW(nn::prependToken(bad.input("x", {DType::F64, {kB, kS, kH}}), wrong),
               frontend::DslError);
}

} // namespace
} // namespace kiln::recurrent_test

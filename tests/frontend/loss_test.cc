// nn::crossEntropy against PyTorch's F.cross_entropy semantics: literal values worked out from
// the formula (ignore_index, label smoothing, an ignore index inside the vocabulary), the
// all-ignored NaN, the gradient (softmax - q) / |N|, dtypes, and diagnostics.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "codegen/reference/interpreter.h"
#include "frontend/nn.h"
#include "passes/autodiff.h"
#include "tests/util/dsl_error.h"

namespace kiln::loss_test {
namespace {

using frontend::Builder;
using frontend::Tensor;
using ir::DType;
using ir::Type;
using test_util::dslErrorOf;
namespace nn = frontend::nn;
using Ref = ir::RefTensor<double>;

// logits [N, V] (rows) and targets [N], as graph inputs in f64.
struct LossCase {
  std::vector<std::vector<double>> logits;
  std::vector<int64_t> targets;
  nn::CrossEntropyOptions options = {};
};

// Builds loss = crossEntropy(logits, targets) with logits reshaped to `shape` (default [N, V]).
ir::Graph lossGraph(const LossCase &c, ir::Shape shape = {}, DType dtype = DType::F64) {
  int64_t n = static_cast<int64_t>(c.logits.size()), v = static_cast<int64_t>(c.logits[0].size());
  if (shape.empty())
    shape = {n, v};
  ir::Shape lead(shape.begin(), shape.end() - 1);
  Builder b("ce", dtype);
  Tensor logits = b.input("logits", Type{dtype, shape});
  Tensor targets = b.input("targets", Type{DType::I64, lead});
  b.loss("loss", nn::crossEntropy(logits, targets, c.options));
  ir::Graph g = b.finish();
  EXPECT_TRUE(ir::verify(g).empty());
  return g;
}

std::vector<Ref> argsOf(const ir::Graph &g, const LossCase &c) {
  Ref logits(g.type(g.args()[0].value)), targets(g.type(g.args()[1].value));
  int64_t k = 0;
  for (const std::vector<double> &row : c.logits)
    for (double x : row)
      logits.f[k++] = x;
  for (size_t i = 0; i < c.targets.size(); ++i)
    targets.i[i] = c.targets[i];
  return {logits, targets};
}

double lossOf(const LossCase &c, ir::Shape shape = {}) {
  ir::Graph g = lossGraph(c, shape);
  Expected<std::vector<Ref>> out = reference::run<double>(g, argsOf(g, c));
  EXPECT_TRUE(out.ok()) << out.error().message;
  if (!out.ok())
    return NAN;
  EXPECT_EQ(out->at(0).type, (Type{DType::F64, {}}));
  return out->at(0).f[0];
}

// Logits over 3 classes (two rows) and over 4 (four rows).
const std::vector<std::vector<double>> kLogits3 = {{0.5, -1.0, 2.0}, {1.5, 0.25, -0.75}};
const std::vector<std::vector<double>> kLogits4 = {
    {0.3, -0.2, 1.1, 0.0}, {2.0, -1.5, 0.5, 0.25}, {-0.4, 0.9, 0.1, -1.2}, {1.0, 1.0, -2.0, 0.5}};

// The expected values below are the formula in nn_loss.h evaluated with Python's math module:
// loss_n = lse_n - x[n, t_n] (+ smoothing: (1 - e)(lse_n - x[n, t_n]) + e mean_v(lse_n - x[n, v])).
TEST(LossCrossEntropy, MeanNegativeLogLikelihood) {
  // (-logp[0, 2] + -logp[1, 1]) / 2 = (0.2413112966571571 + 1.580672609407224) / 2
  EXPECT_NEAR(lossOf({kLogits3, {2, 1}}), 0.9109919530321906, 1e-14);
}

TEST(LossCrossEntropy, IgnoredTargetsAreNeitherScoredNorCounted) {
  // Only row 0 counts: -log softmax([0.5, -1, 2])[2]; the divisor is 1, not 2.
  EXPECT_NEAR(lossOf({kLogits3, {2, -100}}), 0.24131129665715711, 1e-14);
  // An ignore index inside the vocabulary: rows with target 1 drop out; rows 0 and 3 remain.
  EXPECT_NEAR(lossOf({kLogits4, {3, 1, 1, 2}, {.ignoreIndex = 1}}), 2.8985430996792196, 1e-14);
}

TEST(LossCrossEntropy, LabelSmoothingMixesInTheUniformDistribution) {
  EXPECT_NEAR(lossOf({kLogits3, {2, 1}, {.labelSmoothing = 0.1}}), 0.9818252863655239, 1e-14);
  // e = 1 scores every class alike: the loss is mean_v(-logp) whatever the target.
  double uniform = lossOf({kLogits3, {0, 0}, {.labelSmoothing = 1.0}});
  EXPECT_NEAR(lossOf({kLogits3, {2, 1}, {.labelSmoothing = 1.0}}), uniform, 1e-14);
}

TEST(LossCrossEntropy, LeadingDimensionsAreFlattenedImplicitly) {
  // [4, 4] as [2, 2, 4] with targets [2, 2]: the same mean as PyTorch's view(-1, V).
  LossCase c{kLogits4, {3, -100, 0, 2}, {.labelSmoothing = 0.2}};
  EXPECT_NEAR(lossOf(c), 2.39139843971307, 1e-14);
  EXPECT_NEAR(lossOf(c, {2, 2, 4}), 2.39139843971307, 1e-14);
}

TEST(LossCrossEntropy, AllIgnoredIsNaNAsInPyTorch) {
  // sum over no targets / count of none = 0 / 0.
  EXPECT_TRUE(std::isnan(lossOf({kLogits3, {-100, -100}})));
  EXPECT_TRUE(std::isnan(lossOf({kLogits3, {-100, -100}, {.labelSmoothing = 0.1}})));
}

TEST(LossCrossEntropy, GradientIsSoftmaxMinusTargetDistributionOverTheCount) {
  // d loss / d x[n, v] = [t_n != i] (softmax(x_n)_v - q_nv) / |N|,  q = (1 - e) one_hot + e / V.
  LossCase c{kLogits4, {3, -100, 0, 2}, {.labelSmoothing = 0.2}};
  ir::Graph g = lossGraph(c);
  Expected<ir::Graph> dg = passes::differentiate(g, {.loss = "loss", .wrt = {"logits"}});
  ASSERT_TRUE(dg.ok()) << dg.error().message;
  Expected<std::vector<Ref>> out = reference::run<double>(*dg, argsOf(g, c));
  ASSERT_TRUE(out.ok()) << out.error().message;
  const Ref &grad = out->at(1);
  ASSERT_EQ(grad.type, (Type{DType::F64, {4, 4}}));
  double e = 0.2, count = 3;
  for (int n = 0; n < 4; ++n) {
    double z = 0;
    for (double x : kLogits4[n])
      z += std::exp(x);
    for (int v = 0; v < 4; ++v) {
      double q = (1 - e) * (v == c.targets[n]) + e / 4;
      double want = c.targets[n] == -100 ? 0 : (std::exp(kLogits4[n][v]) / z - q) / count;
      EXPECT_NEAR(grad.f[n * 4 + v], want, 1e-14) << "row " << n << " class " << v;
    }
  }
}

TEST(LossCrossEntropy, Bf16LogitsAreScoredInF32) {
  for (DType dtype : {DType::BF16, DType::F32}) {
    ir::Graph g = lossGraph({kLogits3, {2, 1}}, {}, dtype);
    EXPECT_EQ(g.type(g.outputs()[0].value), (Type{DType::F32, {}})) << ir::dtypeName(dtype);
  }
}

// ---- Diagnostics name the caller's line ----

std::string crossEntropyAt(int line) {
  return fmt::format("tests/frontend/loss_test.cc:{}: cross_entropy: ", line);
}

TEST(LossCrossEntropy, MistakesAreReportedAtTheCall) {
  Builder b;
  Tensor logits = b.input("logits", Type{DType::F32, {2, 5, 7}});
  Tensor targets = b.input("targets", Type{DType::I64, {2, 5}});
  Tensor wrong = b.input("wrong", Type{DType::I64, {2, 6}});
  Tensor floats = b.input("floats", Type{DType::F32, {2, 5}});
  int line = 0;
  std::string msg;
  msg = dslErrorOf([&] { (line = __LINE__, nn::crossEntropy(logits, wrong)); });
  EXPECT_EQ(msg, crossEntropyAt(line) +
                     "targets i64[2,6] do not match logits f32[2,5,7]: expected targets "
                     "of shape [2,5]");
  msg = dslErrorOf([&] { (line = __LINE__, nn::crossEntropy(logits, floats)); });
  EXPECT_EQ(msg, crossEntropyAt(line) + "targets f32[2,5]: expected integer class ids");
  msg = dslErrorOf([&] { (line = __LINE__, nn::crossEntropy(targets, targets)); });
  EXPECT_EQ(msg, crossEntropyAt(line) + "logits i64[2,5]: expected a float tensor [..., V]");
  msg = dslErrorOf(
      [&] { (line = __LINE__, nn::crossEntropy(logits, targets, {.labelSmoothing = 1.5})); });
  EXPECT_EQ(msg, crossEntropyAt(line) + "label smoothing 1.5 is not in [0, 1]");
}

} // namespace
} // namespace kiln::loss_test

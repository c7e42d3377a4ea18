// Optimizer updates, clipping and learning-rate schedules built as IR, checked against the
// torch.optim update rules written out by hand on a toy problem: loss = sum(w * x), so
// grad.w = x exactly.
#include <gtest/gtest.h>

#include <limits>

#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "codegen/reference/interpreter.h"
#include "ir/builder.h"
#include "passes/autodiff.h"
#include "passes/optimizer.h"

namespace kiln::optimizer_test {
namespace {
using namespace ir;
using passes::LrSchedule;
using passes::OptimizerConfig;

const std::vector<double> kW0 = {0.5, -1.0, 2.0};
const std::vector<double> kX = {0.3, -0.2, 0.1}; // the gradient of every step

Graph toyStep(const OptimizerConfig &config) {
  Graph g("toy");
  ValueId x = g.addInput("x", Type{DType::F64, {3}});
  ValueId w = g.addParam("w", Type{DType::F64, {3}});
  ValueId wx = g.result(*g.addNode(OpKind::Mul, {w, x}));
  g.addOutput("loss", g.result(*g.addNode(OpKind::ReduceSum, {wx})), OutputRole::Loss);
  Expected<Graph> grads = passes::differentiate(g);
  EXPECT_TRUE(grads.ok());
  Expected<Graph> step = passes::buildTrainingStep(*grads, config);
  EXPECT_TRUE(step.ok()) << step.error().message;
  EXPECT_TRUE(verify(*step).empty());
  return std::move(step).value();
}

// Runs `steps` updates from w = kW0 and zero state; returns the final w and the last lr.
std::pair<std::vector<double>, double> train(const OptimizerConfig &config, int steps) {
  Graph g = toyStep(config);
  std::vector<RefTensor<double>> args = reference::makeArgs<double>(g, 0);
  for (size_t a = 0; a < g.args().size(); ++a) {
    if (g.args()[a].name == "x")
      args[a].f = kX;
    if (g.args()[a].name == "w")
      args[a].f = kW0;
  }
  double lr = 0;
  for (int s = 0; s < steps; ++s) {
    auto out = reference::run<double>(g, args);
    EXPECT_TRUE(out.ok());
    for (size_t o = 0; o < g.outputs().size(); ++o) {
      const std::string &name = g.outputs()[o].name;
      if (name == "lr")
        lr = (*out)[o].f[0];
      if (name.rfind("new.", 0) == 0)
        for (size_t a = 0; a < g.args().size(); ++a)
          if (g.args()[a].name == name.substr(4))
            args[a] = (*out)[o];
    }
  }
  for (size_t a = 0; a < g.args().size(); ++a)
    if (g.args()[a].name == "w")
      return {args[a].f, lr};
  return {};
}

void expectNear(const std::vector<double> &got, const std::vector<double> &want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-12) << "element " << i;
}

OptimizerConfig config(OptimizerConfig::Kind kind, double lr) {
  OptimizerConfig c;
  c.kind = kind;
  c.schedule.lr = lr;
  return c;
}

TEST(Optimizer, SgdPlain) {
  auto [w, lr] = train(config(OptimizerConfig::Kind::Sgd, 0.1), 3);
  EXPECT_EQ(lr, 0.1);
  expectNear(w, {0.5 - 0.3 * 0.3, -1.0 + 0.3 * 0.2, 2.0 - 0.3 * 0.1});
}

TEST(Optimizer, SgdMomentumAndNesterovAndWeightDecay) {
  // torch: g += wd*p; buf = g (step 1), buf = mu*buf + g; nesterov: d = g + mu*buf; p -= lr*d.
  for (bool nesterov : {false, true}) {
    OptimizerConfig c = config(OptimizerConfig::Kind::Sgd, 0.1);
    c.momentum = 0.9;
    c.nesterov = nesterov;
    c.weightDecay = 0.01;
    std::vector<double> p = kW0, buf(3, 0.0);
    for (int s = 0; s < 3; ++s)
      for (int i = 0; i < 3; ++i) {
        double g = kX[i] + 0.01 * p[i];
        buf[i] = s == 0 ? g : 0.9 * buf[i] + g;
        p[i] -= 0.1 * (nesterov ? g + 0.9 * buf[i] : buf[i]);
      }
    expectNear(train(c, 3).first, p);
  }
}

TEST(Optimizer, AdamAndAdamW) {
  for (auto kind : {OptimizerConfig::Kind::Adam, OptimizerConfig::Kind::AdamW}) {
    OptimizerConfig c = config(kind, 0.01);
    c.weightDecay = 0.1;
    std::vector<double> p = kW0, m(3, 0.0), v(3, 0.0);
    for (int t = 1; t <= 4; ++t)
      for (int i = 0; i < 3; ++i) {
        double g = kX[i];
        if (kind == OptimizerConfig::Kind::AdamW)
          p[i] *= 1 - 0.01 * 0.1;
        else
          g += 0.1 * p[i];
        m[i] = 0.9 * m[i] + 0.1 * g;
        v[i] = 0.999 * v[i] + 0.001 * g * g;
        double denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(0.999, t)) + 1e-8;
        p[i] -= 0.01 / (1 - std::pow(0.9, t)) * m[i] / denom;
      }
    expectNear(train(c, 4).first, p);
  }
}

TEST(Optimizer, ClippingByGlobalNorm) {
  // ||x|| = sqrt(0.14); clip to 0.1: g *= 0.1 / (||x|| + 1e-6).
  OptimizerConfig c = config(OptimizerConfig::Kind::Sgd, 1.0);
  c.clipNorm = 0.1;
  double coef = 0.1 / (std::sqrt(0.14) + 1e-6);
  expectNear(train(c, 1).first, {0.5 - 0.3 * coef, -1.0 + 0.2 * coef, 2.0 - 0.1 * coef});
  c.clipNorm = 10; // above the norm: no change
  expectNear(train(c, 1).first, {0.5 - 0.3, -1.0 + 0.2, 2.0 - 0.1});
}

TEST(Optimizer, Schedules) {
  OptimizerConfig c = config(OptimizerConfig::Kind::Sgd, 2.0);
  c.schedule.kind = LrSchedule::Kind::InverseSqrt;
  c.schedule.warmup = 4;
  c.schedule.dModel = 16;
  for (int t : {1, 3, 4, 9}) // lr * d^-0.5 * min(t^-0.5, t * warmup^-1.5)
    EXPECT_NEAR(train(c, t).second, 2.0 / 4 * std::min(1 / std::sqrt(t), t / 8.0), 1e-12) << t;
  c.schedule = {LrSchedule::Kind::WarmupCosine, 1.0, 2, 10, 0.1, 0};
  for (int t : {1, 2, 6, 10, 12}) {
    double want =
        t < 2 ? t / 2.0
              : 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * std::min(1.0, (t - 2) / 8.0)));
    EXPECT_NEAR(train(c, t).second, want, 1e-12) << t;
  }
}

TEST(Optimizer, RejectsBadSettings) {
  Graph g("toy");
  ValueId w = g.addParam("w", Type{DType::F64, {}});
  g.addOutput("loss", w, OutputRole::Loss);
  Graph grads = *passes::differentiate(g);
  OptimizerConfig c = config(OptimizerConfig::Kind::Sgd, 0.1);
  c.nesterov = true;
  EXPECT_EQ(passes::buildTrainingStep(grads, c).error().message,
            "optimizer: nesterov needs momentum > 0");
  c = config(OptimizerConfig::Kind::Adam, 0.1);
  c.beta2 = 1.0;
  EXPECT_EQ(passes::buildTrainingStep(grads, c).error().message,
            "optimizer: betas must lie in [0, 1), got (0.9, 1)");
  EXPECT_EQ(passes::buildTrainingStep(g, config(OptimizerConfig::Kind::Sgd, 0.1)).error().message,
            "optimizer: parameter \"w\" has no gradient output (run autodiff first)");
  // NaN compares false either way, so it used to pass every check and act as 0.
  c = config(OptimizerConfig::Kind::AdamW, 0.1);
  c.weightDecay = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(passes::buildTrainingStep(grads, c).error().message,
            "optimizer: weight_decay must be a finite number, got nan");
  c = config(OptimizerConfig::Kind::Sgd, std::numeric_limits<double>::infinity());
  EXPECT_EQ(passes::buildTrainingStep(grads, c).error().message,
            "optimizer: lr must be a finite number, got inf");
}

// An Adam eps that rounds to 0 in a parameter's dtype made 0 / 0 = NaN where a gradient was 0
// (`kiln train --eps 1e-50` saved NaN weights and exited 0).
TEST(Optimizer, RejectsEpsThatRoundsToZero) {
  for (DType t : {DType::F32, DType::BF16}) {
    Graph g("toy");
    ValueId w = g.addParam("w", Type{t, {2}});
    Builder b(g);
    g.addOutput("loss", b.emit(OpKind::ReduceSum, {b.cast(w, DType::F32)}), OutputRole::Loss);
    Graph grads = *passes::differentiate(g);
    OptimizerConfig c = config(OptimizerConfig::Kind::AdamW, 0.1);
    c.eps = 1e-50;
    EXPECT_EQ(passes::buildTrainingStep(grads, c).error().message,
              fmt::format("optimizer: eps = 1e-50 rounds to 0 in {} (parameter \"w\"), which "
                          "makes 0 / 0 = NaN where a gradient is 0; expected at least {}",
                          dtypeName(t), t == DType::BF16 ? "9.2e-41" : "1.5e-45"));
    c.eps = t == DType::BF16 ? 1e-40 : 1e-44; // subnormal, but not 0
    EXPECT_TRUE(passes::buildTrainingStep(grads, c).ok()) << dtypeName(t);
  }
}

} // namespace
} // namespace kiln::optimizer_test

// The training-step builder: clipping, learning-rate schedule and the optimizer update, in IR
// (see optimizer.h). Each update line is torch.optim's, in the same order of operations.
#include "passes/optimizer.h"

#include <bit>
#include <cmath>
#include <map>
#include <numbers>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "ir/builder.h"
#include "support/bf16.h"

namespace kiln::passes {
using namespace kiln::ir;

namespace {

using Cfg = OptimizerConfig;
using Sched = LrSchedule;

Status validate(const Cfg &c) {
  const Sched &s = c.schedule;
  // NaN compares false both ways, so a NaN setting would silently act as 0 below: say so first.
  for (auto [name, v] : {std::pair<std::string_view, double>{"lr", s.lr},
                         {"min_lr", s.minLr},
                         {"momentum", c.momentum},
                         {"beta1", c.beta1},
                         {"beta2", c.beta2},
                         {"eps", c.eps},
                         {"weight_decay", c.weightDecay},
                         {"clip_norm", c.clipNorm}})
    if (!std::isfinite(v))
      return makeError("optimizer: {} must be a finite number, got {}", name, v);
  if (!(s.lr > 0))
    return makeError("optimizer: lr must be positive, got {}", s.lr);
  if (s.minLr < 0)
    return makeError("optimizer: min_lr must be >= 0, got {}", s.minLr);
  if (c.kind == Cfg::Kind::Sgd && c.nesterov && !(c.momentum > 0))
    return makeError("optimizer: nesterov needs momentum > 0");
  if (c.momentum < 0 || c.weightDecay < 0 || c.clipNorm < 0)
    return makeError("optimizer: momentum, weight_decay and clip_norm must be >= 0");
  if (!(c.beta1 >= 0 && c.beta1 < 1) || !(c.beta2 >= 0 && c.beta2 < 1))
    return makeError("optimizer: betas must lie in [0, 1), got ({}, {})", c.beta1, c.beta2);
  if (!(c.eps > 0))
    return makeError("optimizer: eps must be positive");
  if (s.kind == Sched::Kind::InverseSqrt && (s.warmup <= 0 || s.dModel <= 0))
    return makeError("schedule inverse_sqrt: needs warmup > 0 and d_model > 0");
  if (s.kind == Sched::Kind::WarmupCosine && (s.warmup < 0 || s.total <= s.warmup))
    return makeError("schedule warmup_cosine: needs 0 <= warmup < total");
  return {};
}

// v as a constant of dtype t holds it (rounded to nearest).
double inDType(double v, DType t) {
  if (t == DType::F64)
    return v;
  const auto f = static_cast<float>(v);
  return t == DType::BF16 ? roundToBf16(f) : f;
}

// The learning rate of update number t (1-based), as a scalar value of dtype dt.
ValueId learningRate(Builder &b, ValueId t, const Sched &s, DType dt) {
  auto k = [&](double v) { return b.scalar(v, dt); };
  switch (s.kind) {
  case Sched::Kind::Constant:
    return k(s.lr);
  case Sched::Kind::InverseSqrt: {
    ValueId decay = b.emit(OpKind::Pow, {t, k(-0.5)});
    ValueId warm = b.mul(t, k(std::pow(double(s.warmup), -1.5)));
    ValueId m = b.emit(OpKind::Min, {decay, warm});
    return b.mul(k(s.lr * std::pow(double(s.dModel), -0.5)), m);
  }
  case Sched::Kind::WarmupCosine: {
    ValueId warm = b.mul(k(s.lr / double(std::max<int64_t>(s.warmup, 1))), t);
    ValueId sinceWarmup = b.sub(t, k(double(s.warmup)));
    ValueId progress = b.div(sinceWarmup, k(double(s.total - s.warmup)));
    progress = b.emit(OpKind::Min, {progress, k(1)});
    ValueId half = k(0.5), one = k(1);
    ValueId cosine =
        b.mul(half, b.add(one, b.emit(OpKind::Cos, {b.mul(k(std::numbers::pi), progress)})));
    ValueId minLr = k(s.minLr);
    ValueId decayed = b.add(minLr, b.mul(k(s.lr - s.minLr), cosine));
    return b.select(b.emit(OpKind::Lt, {t, k(double(s.warmup))}), warm, decayed);
  }
  }
  return k(s.lr);
}

} // namespace

Expected<Graph> buildTrainingStep(const Graph &in, const Cfg &c) {
  if (Status s = validate(c); !s)
    return s.error();
  const Output *lossOut = in.findOutput(OutputRole::Loss);
  if (!lossOut)
    return makeError("optimizer: graph @{} has no loss output", in.name());

  Graph g = in;
  DType dt = g.type(lossOut->value).dtype;
  Builder b(g);
  // Each scalar made once and shared by every update that uses it (cse would merge the copies
  // anyway, keeping the first: the same graph, without ~10 constants per parameter to make,
  // clean up and merge first).
  std::map<std::pair<uint64_t, DType>, ValueId> scalars;
  auto scalar = [&](double v, DType t) {
    auto [it, made] = scalars.try_emplace({std::bit_cast<uint64_t>(v), t}, kNone);
    if (made)
      it->second = b.scalar(v, t);
    return it->second;
  };
  auto k = [&](double v) { return scalar(v, dt); };
  ParamInit zeros{};

  struct Update {
    const Arg *param;
    ValueId grad;
  };
  for (const Output &o : in.outputs())
    if (o.role == OutputRole::Update)
      return makeError("optimizer: the graph already has an update output \"{}\" (is it a "
                       "training step already?)",
                       o.name);
  // Each argument's first two gradient outputs, in output order (one pass, not one per argument).
  std::vector<std::pair<const Output *, const Output *>> gradOuts(in.args().size());
  for (const Output &o : in.outputs())
    if (o.role == OutputRole::Gradient && o.arg >= 0 &&
        o.arg < static_cast<int32_t>(gradOuts.size())) {
      auto &[first, second] = gradOuts[o.arg];
      if (!first)
        first = &o;
      else if (!second)
        second = &o;
    }
  std::vector<Update> updates;
  for (size_t i = 0; i < in.args().size(); ++i) {
    const Arg &a = in.args()[i];
    if (a.kind != Arg::Kind::Param || !isFloat(in.type(a.value).dtype))
      continue; // integer parameters have no gradient: they are not trained
    auto [gradOut, second] = gradOuts[i];
    if (second)
      return makeError("optimizer: parameter \"{}\" has two gradient outputs (\"{}\", \"{}\")",
                       a.name, gradOut->name, second->name);
    if (!gradOut)
      return makeError("optimizer: parameter \"{}\" has no gradient output (run autodiff first)",
                       a.name);
    updates.push_back({&a, gradOut->value});
  }

  for (std::string_view taken : {"lr", "grad_norm", "update_applied"})
    if (in.findOutput(taken))
      return makeError("optimizer: the graph already has an output \"{}\", which the update "
                       "writes",
                       taken);
  std::vector<Output> outputs;
  for (const Output &o : in.outputs())
    if (o.role != OutputRole::Gradient) // the gradients are consumed by the update
      outputs.push_back(o);
  auto keep = [&](const std::string &name, ValueId v) { outputs.push_back({name, v}); };
  // Argument indices by name, the first of a name as Graph::argIndex gives it (a lookup per
  // update, not a scan of every argument).
  std::unordered_map<std::string, int32_t> argAt;
  for (size_t i = 0; i < g.args().size(); ++i)
    argAt.try_emplace(g.args()[i].name, static_cast<int32_t>(i));
  // The update of argument `name`, shown as "new.<name>" (its role says what it is).
  auto update = [&](const std::string &name, ValueId v) {
    auto it = argAt.find(name);
    outputs.push_back(
        {"new." + name, v, OutputRole::Update, it == argAt.end() ? kNone : it->second});
  };
  // Optimizer state, under a name the graph must not have yet.
  Status clash;
  auto addState = [&](const std::string &name, const Type &t, Domain d) {
    if (argAt.contains(name) && clash)
      clash = makeError("optimizer: the graph already has an argument \"{}\"", name);
    argAt.try_emplace(name, static_cast<int32_t>(g.args().size()));
    return g.addState(name, t, zeros, d);
  };

  ValueId step = addState(std::string(kOptimizerStatePrefix) + "step", Type{dt, {}}, Domain::Count);
  ValueId t = b.add(step, k(1)); // this update's step number, 1-based as torch.optim counts
  ValueId lr = learningRate(b, t, c.schedule, dt);
  keep("lr", lr);

  // The gradients' squared global norm (clipping and the guard need it).
  ValueId total = kNone;
  if (c.clipNorm > 0 || c.guardNonFinite) {
    for (const Update &u : updates) {
      ValueId sq = b.sum(b.mul(u.grad, u.grad), {}, false);
      if (b.type(sq).dtype != dt) // e.g. bf16 parameters: the norm is accumulated in dt
        sq = b.cast(sq, dt);
      total = total == kNone ? sq : b.add(total, sq);
    }
    if (total == kNone)
      total = k(0);
  }
  // applied = loss + ||g||^2 is finite: x - x is 0 for every finite x, NaN for inf and NaN.
  ValueId applied = kNone;
  if (c.guardNonFinite) {
    ValueId x = b.add(lossOut->value, total);
    applied = b.emit(OpKind::Eq, {b.sub(x, x), k(0)});
    keep("update_applied", applied);
  }
  if (c.clipNorm > 0) { // torch.nn.utils.clip_grad_norm_
    ValueId norm = b.emit(OpKind::Sqrt, {total});
    ValueId clip = k(c.clipNorm);
    ValueId coef = b.emit(OpKind::Min, {b.div(clip, b.add(norm, k(1e-6))), k(1)});
    for (Update &u : updates)
      u.grad =
          b.mul(u.grad, b.type(u.grad).dtype == dt ? coef : b.cast(coef, b.type(u.grad).dtype));
    keep("grad_norm", norm);
  }

  std::vector<std::pair<std::string, ValueId>> newValues; // state first, then parameters
  for (const Update &u : updates) {
    const std::string &name = u.param->name;
    Type pt = g.type(u.param->value); // a copy: adding nodes moves the graph's values
    ValueId p = u.param->value, grad = u.grad;
    ValueId next;
    // Per-parameter arithmetic is in the parameter's dtype (as torch.optim keeps its state);
    // the step-wide scalars (lr, bias corrections) are computed in dt and cast once.
    auto kp = [&](double v) { return scalar(v, pt.dtype); };
    auto inP = [&](ValueId scalar) { return pt.dtype == dt ? scalar : b.cast(scalar, pt.dtype); };
    ValueId lrP = inP(lr);
    if (c.kind == Cfg::Kind::Sgd) {
      if (c.weightDecay > 0)
        grad = b.add(grad, b.mul(kp(c.weightDecay), p));
      if (c.momentum > 0) {
        std::string bufName = std::string(kOptimizerStatePrefix) + "momentum_buffer." + name;
        ValueId buf = addState(bufName, pt, Domain::Real);
        // buf = mu buf + g; from zeros this is torch's "buf = g" on the first step.
        ValueId nextBuf = b.add(b.mul(kp(c.momentum), buf), grad);
        newValues.push_back({bufName, nextBuf});
        grad = c.nesterov ? b.add(grad, b.mul(kp(c.momentum), nextBuf)) : nextBuf;
      }
      next = b.sub(p, b.mul(lrP, grad));
    } else {
      // An eps that rounds to 0 makes 0 / 0 = NaN wherever a gradient has always been 0 (an
      // unused embedding row), which the update would then write into the weights. (The least
      // numbers above 0: bf16 9.2e-41, f32 1.4e-45.)
      if (inDType(c.eps, pt.dtype) == 0)
        return makeError("optimizer: eps = {} rounds to 0 in {} (parameter \"{}\"), which "
                         "makes 0 / 0 = NaN where a gradient is 0; expected at least {}",
                         c.eps, dtypeName(pt.dtype), name,
                         pt.dtype == DType::BF16 ? 9.2e-41 : 1.5e-45);
      if (c.kind == Cfg::Kind::AdamW && c.weightDecay > 0) { // decoupled: p *= 1 - lr wd
        ValueId one = kp(1);
        p = b.mul(p, b.sub(one, b.mul(lrP, kp(c.weightDecay))));
      }
      if (c.kind == Cfg::Kind::Adam && c.weightDecay > 0)
        grad = b.add(grad, b.mul(kp(c.weightDecay), p));
      std::string mName = std::string(kOptimizerStatePrefix) + "exp_avg." + name,
                  vName = std::string(kOptimizerStatePrefix) + "exp_avg_sq." + name;
      ValueId m = addState(mName, pt, Domain::Real);
      ValueId v = addState(vName, pt, Domain::NonNegative); // a mean of squares
      // m1 = beta1 m + (1 - beta1) g,  v1 = beta2 v + (1 - beta2) g^2
      ValueId decayedM = b.mul(m, kp(c.beta1));
      ValueId m1 = b.add(decayedM, b.mul(grad, kp(1 - c.beta1)));
      ValueId decayedV = b.mul(v, kp(c.beta2));
      ValueId gradSq = b.mul(grad, grad);
      ValueId v1 = b.add(decayedV, b.mul(gradSq, kp(1 - c.beta2)));
      // The bias corrections 1 - beta^t.
      ValueId one = k(1);
      ValueId bc1 = b.sub(one, b.emit(OpKind::Pow, {k(c.beta1), t}));
      ValueId bc2 = b.sub(one, b.emit(OpKind::Pow, {k(c.beta2), t}));
      ValueId sqrtBc2 = inP(b.emit(OpKind::Sqrt, {bc2}));
      // denom = sqrt(v1) / sqrt(bc2) + eps
      ValueId sqrtVHat = b.div(b.emit(OpKind::Sqrt, {v1}), sqrtBc2);
      ValueId denom = b.add(sqrtVHat, kp(c.eps));
      ValueId stepSize = inP(b.div(lr, bc1));
      next = b.sub(p, b.mul(stepSize, b.div(m1, denom)));
      newValues.push_back({mName, m1});
      newValues.push_back({vName, v1});
    }
    update(name, next);
  }
  update(std::string(kOptimizerStatePrefix) + "step", t);
  for (auto &[name, v] : newValues)
    update(name, v);
  if (applied != kNone) // each update becomes select(applied, new, old)
    for (Output &o : outputs)
      if (o.role == OutputRole::Update) {
        ValueId old = g.args()[o.arg].value;
        o.value = b.select(applied, o.value, old);
      }
  if (!clash)
    return clash.error();
  g.setOutputs(std::move(outputs));
  return g;
}

} // namespace kiln::passes

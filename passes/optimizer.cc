// The training-step builder: clipping, learning-rate schedule and the optimizer update, in IR
// (see optimizer.h). Each update line is torch.optim's, in the same order of operations.
#include "passes/optimizer.h"

#include <bit>
#include <cmath>
#include <functional>
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

// ---- The update rules: one small function per optimizer, over what the driver gives ----

// A parameter's update: its name, type (a copy: adding nodes moves the graph's values), value,
// gradient (clipped), and the learning rate in its dtype.
struct Param {
  std::string name;
  Type type;
  ValueId value, grad, lr = kNone;
};

// What the driver gives a rule: the builder, the config, the step-wide values (this update's
// 1-based number t and learning rate lr, in the step dtype dt), scalars made once, state made
// under a fresh name, and the list the new state values go to (in order of creation).
struct Step {
  Builder &b;
  const Cfg &c;
  DType dt;
  ValueId t, lr;
  std::function<ValueId(double, DType)> scalar;
  std::function<ValueId(const std::string &, const Type &, Domain)> addState;
  std::vector<std::pair<std::string, ValueId>> &newValues;

  ValueId k(double v) const { return scalar(v, dt); }
  // A step-wide scalar in the parameter's dtype: per-parameter arithmetic is in the parameter's
  // dtype (as torch.optim keeps its state), the step-wide scalars are computed in dt, cast once.
  ValueId in(ValueId v, const Param &p) const {
    return p.type.dtype == dt ? v : b.cast(v, p.type.dtype);
  }
  ValueId state(const std::string &what, const Param &p, Domain d) const {
    return addState(std::string(kOptimizerStatePrefix) + what + "." + p.name, p.type, d);
  }
};

// A rule gives the parameter's new value (and its state's, through Step::newValues).
using Rule = Expected<ValueId> (*)(Step &s, Param &p);

// SGD: g += wd p;  buf = mu buf + g (from zeros: torch's buf = g on the first step);
// g = nesterov ? g + mu buf : buf;  p -= lr g.
Expected<ValueId> sgd(Step &s, Param &p) {
  Builder &b = s.b;
  auto kp = [&](double v) { return s.scalar(v, p.type.dtype); };
  ValueId grad = p.grad;
  if (s.c.weightDecay > 0)
    grad = b.add(grad, b.mul(kp(s.c.weightDecay), p.value));
  if (s.c.momentum > 0) {
    ValueId buf = s.state("momentum_buffer", p, Domain::Real);
    ValueId nextBuf = b.add(b.mul(kp(s.c.momentum), buf), grad);
    s.newValues.push_back(
        {std::string(kOptimizerStatePrefix) + "momentum_buffer." + p.name, nextBuf});
    grad = s.c.nesterov ? b.add(grad, b.mul(kp(s.c.momentum), nextBuf)) : nextBuf;
  }
  return b.sub(p.value, b.mul(p.lr, grad));
}

// Adam's moments and step on p and g as the caller's decay left them:
//   m1 = beta1 m + (1 - beta1) g,  v1 = beta2 v + (1 - beta2) g^2,
//   p -= lr / (1 - beta1^t) * m1 / (sqrt(v1) / sqrt(1 - beta2^t) + eps).
Expected<ValueId> adamStep(Step &s, Param &p, ValueId value, ValueId grad) {
  Builder &b = s.b;
  const Cfg &c = s.c;
  auto kp = [&](double v) { return s.scalar(v, p.type.dtype); };
  ValueId m = s.state("exp_avg", p, Domain::Real);
  ValueId v = s.state("exp_avg_sq", p, Domain::NonNegative); // a mean of squares
  ValueId decayedM = b.mul(m, kp(c.beta1));
  ValueId m1 = b.add(decayedM, b.mul(grad, kp(1 - c.beta1)));
  ValueId decayedV = b.mul(v, kp(c.beta2));
  ValueId gradSq = b.mul(grad, grad);
  ValueId v1 = b.add(decayedV, b.mul(gradSq, kp(1 - c.beta2)));
  ValueId one = s.k(1);
  ValueId bc1 = b.sub(one, b.emit(OpKind::Pow, {s.k(c.beta1), s.t}));
  ValueId bc2 = b.sub(one, b.emit(OpKind::Pow, {s.k(c.beta2), s.t}));
  ValueId sqrtBc2 = s.in(b.emit(OpKind::Sqrt, {bc2}), p);
  ValueId sqrtVHat = b.div(b.emit(OpKind::Sqrt, {v1}), sqrtBc2);
  ValueId denom = b.add(sqrtVHat, kp(c.eps));
  ValueId stepSize = s.in(b.div(s.lr, bc1), p);
  s.newValues.push_back({std::string(kOptimizerStatePrefix) + "exp_avg." + p.name, m1});
  s.newValues.push_back({std::string(kOptimizerStatePrefix) + "exp_avg_sq." + p.name, v1});
  return b.sub(value, b.mul(stepSize, b.div(m1, denom)));
}

// An eps that rounds to 0 makes 0 / 0 = NaN wherever a gradient has always been 0 (an unused
// embedding row), which the update would then write into the weights. (The least numbers above
// 0: bf16 9.2e-41, f32 1.4e-45.)
Status checkEps(const Cfg &c, const Param &p) {
  if (inDType(c.eps, p.type.dtype) != 0)
    return {};
  return makeError("optimizer: eps = {} rounds to 0 in {} ({}), which makes 0 / 0 = NaN where a "
                   "gradient is 0; expected at least {}",
                   c.eps, dtypeName(p.type.dtype),
                   p.name == kShardedParameters ? std::string("the sharded parameters")
                                                : fmt::format("parameter \"{}\"", p.name),
                   p.type.dtype == DType::BF16 ? 9.2e-41 : 1.5e-45);
}

// Adam: L2 decay added to the gradient (g += wd p), then Adam's step.
Expected<ValueId> adam(Step &s, Param &p) {
  if (Status st = checkEps(s.c, p); !st)
    return st.error();
  ValueId grad = p.grad;
  if (s.c.weightDecay > 0)
    grad = s.b.add(grad, s.b.mul(s.scalar(s.c.weightDecay, p.type.dtype), p.value));
  return adamStep(s, p, p.value, grad);
}

// AdamW: decoupled decay (p *= 1 - lr wd), then Adam's step.
Expected<ValueId> adamW(Step &s, Param &p) {
  if (Status st = checkEps(s.c, p); !st)
    return st.error();
  ValueId value = p.value;
  if (s.c.weightDecay > 0) {
    ValueId one = s.scalar(1, p.type.dtype);
    value = s.b.mul(value, s.b.sub(one, s.b.mul(p.lr, s.scalar(s.c.weightDecay, p.type.dtype))));
  }
  return adamStep(s, p, value, p.grad);
}

// The rules, by OptimizerConfig::Kind.
constexpr std::pair<Cfg::Kind, Rule> kRules[] = {
    {Cfg::Kind::Sgd, &sgd}, {Cfg::Kind::Adam, &adam}, {Cfg::Kind::AdamW, &adamW}};

// ---- The driver: gradients -> norm, guard and clip -> each parameter's rule -> update outputs
// ----

// Each float parameter with its one gradient output, in argument order.
Expected<std::vector<Param>> parametersOf(const Graph &in) {
  if (Status s = refuseTrainingStep(in); !s)
    return makeError("optimizer: {}", s.error().message);
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
  std::vector<Param> params;
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
    params.push_back({a.name, in.type(a.value), a.value, gradOut->value});
  }
  for (std::string_view taken : {"lr", "grad_norm", "update_applied"})
    if (in.findOutput(taken))
      return makeError("optimizer: the graph already has an output \"{}\", which the update "
                       "writes",
                       taken);
  return params;
}

// The gradients' squared global norm; where the config guards the update, the bool
// applied = loss + ||g||^2 is finite (x - x is 0 for every finite x, NaN for inf and NaN), and
// where it clips, every gradient scaled by min(1, clip / (||g|| + 1e-6))
// (torch.nn.utils.clip_grad_norm_). kNone for what the config does not ask.
struct NormAndGuard {
  ValueId norm = kNone, applied = kNone;
};
NormAndGuard normGuardAndClip(Step &s, ValueId loss, std::vector<Param> &params,
                              int64_t shardRanks) {
  Builder &b = s.b;
  NormAndGuard r;
  if (!(s.c.clipNorm > 0 || s.c.guardNonFinite))
    return r;
  ValueId total = kNone;
  for (const Param &p : params) {
    ValueId sq = b.sum(b.mul(p.grad, p.grad), {}, false);
    if (b.type(sq).dtype != s.dt) // e.g. bf16 parameters: the norm is accumulated in dt
      sq = b.cast(sq, s.dt);
    total = total == kNone ? sq : b.add(total, sq);
  }
  if (total == kNone)
    total = s.k(0);
  if (shardRanks > 1) // each rank holds a part of the gradients: the sum of the ranks' parts
    total =
        b.mul(b.emit(OpKind::AllReduce, {total}, {{"ranks", shardRanks}}), s.k(double(shardRanks)));
  if (s.c.guardNonFinite) {
    ValueId x = b.add(loss, total);
    r.applied = b.emit(OpKind::Eq, {b.sub(x, x), s.k(0)});
  }
  if (s.c.clipNorm > 0) {
    r.norm = b.emit(OpKind::Sqrt, {total});
    ValueId clip = s.k(s.c.clipNorm); // apart: the order of a call's arguments is the compiler's
    ValueId coef = b.emit(OpKind::Min, {b.div(clip, b.add(r.norm, s.k(1e-6))), s.k(1)});
    for (Param &p : params)
      p.grad =
          b.mul(p.grad, b.type(p.grad).dtype == s.dt ? coef : b.cast(coef, b.type(p.grad).dtype));
  }
  return r;
}

// ZeRO stage 1 (kShardedParameters): the parameters as one, of which this rank updates a part
// (n1+..+nk+pad = N C; both ops {ranks = N}; each reads its operands where they lie):
//   grad = reduce_scatter(g1, .., gk, zeros{[pad]})
//   value = rank_chunk(P1, .., Pk, zeros{[pad]})
// so that each rank keeps state for C elements rather than n, and reduces and sends C (the
// reduce-scatter moves half an all-reduce's bytes). The rules are elementwise, so each element's
// update is the one the unsharded step makes; shardedUpdates gathers them back.
Expected<Param> shardOf(Builder &b, const std::vector<Param> &params, int64_t ranks, DType dt) {
  if (dt != DType::F32)
    return makeError("optimizer: the sharded optimizer (--shard-optimizer) needs an f32 loss, "
                     "got {}",
                     dtypeName(dt));
  if (params.empty())
    return makeError("optimizer: the sharded optimizer (--shard-optimizer) has no float "
                     "parameter to update");
  std::vector<ValueId> values, grads;
  int64_t n = 0;
  for (const Param &p : params) {
    if (p.type.dtype != DType::F32)
      return makeError("optimizer: parameter \"{}\" is {}, but the sharded optimizer "
                       "(--shard-optimizer) updates f32 parameters",
                       p.name, dtypeName(p.type.dtype));
    values.push_back(p.value);
    grads.push_back(p.grad);
    n += p.type.numElements();
  }
  const int64_t part = (n + ranks - 1) / ranks;
  if (const int64_t pad = part * ranks - n; pad > 0) {
    values.push_back(b.full(0, Type{DType::F32, {pad}}));
    grads.push_back(values.back());
  }
  ir::Attrs attrs(opInfo(OpKind::RankChunk).attrs);
  [[maybe_unused]] Status set = attrs.set("ranks", ranks);
  const ValueId grad = b.emit(OpKind::ReduceScatter, grads, attrs);
  const ValueId value = b.emit(OpKind::RankChunk, values, std::move(attrs));
  return Param{std::string(kShardedParameters), Type{DType::F32, {part}}, value, grad};
}

// Every rank's updated part, gathered, as each parameter's new value (in `params`' order):
//   new.Pi = reshape(slice(all_gather(next){ranks = N}){n1+..+n(i-1), n1+..+ni}){shape(Pi)}
std::vector<ValueId> shardedUpdates(Builder &b, const std::vector<Param> &params, ValueId next,
                                    int64_t ranks) {
  const ValueId all = b.emit(OpKind::AllGather, {next}, {{"ranks", ranks}});
  std::vector<ValueId> out;
  int64_t start = 0;
  for (const Param &p : params) {
    const int64_t end = start + p.type.numElements();
    const ValueId part =
        b.emit(OpKind::Slice, {all}, {{"axis", int64_t{0}}, {"start", start}, {"end", end}});
    out.push_back(b.reshape(part, p.type.shape));
    start = end;
  }
  return out;
}

// The graph's arguments by name (the first of a name, as Graph::argIndex gives it: a lookup per
// update, not a scan of every argument), and optimizer state added under names it must not have.
struct States {
  Graph &g;
  std::unordered_map<std::string, int32_t> argAt;
  Status clash;

  explicit States(Graph &graph) : g(graph) {
    for (size_t i = 0; i < g.args().size(); ++i)
      argAt.try_emplace(g.args()[i].name, static_cast<int32_t>(i));
  }
  ValueId add(const std::string &name, const Type &t, Domain d) {
    if (argAt.contains(name) && clash)
      clash = makeError("optimizer: the graph already has an argument \"{}\"", name);
    argAt.try_emplace(name, static_cast<int32_t>(g.args().size()));
    return g.addState(name, t, ParamInit{}, d);
  }
  int32_t indexOf(const std::string &name) const {
    auto it = argAt.find(name);
    return it == argAt.end() ? kNone : it->second;
  }
};

// Gives every dropout of the step (the forward's, their gradients', attention's forward and
// backward) the step counter as its step operand: the mask of the update numbered t + 1 is drawn
// from (seed, t), a fresh one every step, and a run resumed from a checkpoint (which holds the
// counter) draws the unbroken run's. (A step whose update --on-nan skip drops leaves the counter,
// and the next draws its mask again.) A dropout with a step already, an IR file's, keeps it.
Status drawDropoutsAt(Graph &g, ValueId counter) {
  for (size_t id = 0; id < g.nodes().size(); ++id) {
    Node &n = g.node(static_cast<NodeId>(id));
    if (n.erased)
      continue;
    if (n.op == OpKind::Dropout && n.operands.size() == 1) {
      n.operands.push_back(counter);
    } else if ((n.op == OpKind::Attention || n.op == OpKind::AttentionBackward) &&
               n.attrs.getFloat("dropout") > 0 && !n.attrs.getBool("has_step")) {
      n.operands.push_back(counter); // (the last of the optional operands)
      if (Status s = n.attrs.set("has_step", true); !s)
        return s;
    }
  }
  g.dropMemoryPlan();
  return {};
}

} // namespace

Expected<Graph> buildTrainingStep(const Graph &in, const Cfg &c, int64_t shardRanks) {
  if (Status s = validate(c); !s)
    return s.error();
  const Output *lossOut = in.findOutput(OutputRole::Loss);
  if (!lossOut)
    return makeError("optimizer: graph @{} has no loss output", in.name());
  Expected<std::vector<Param>> params = parametersOf(in);
  if (!params)
    return params.error();

  Graph g = in;
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
  States states(g);
  auto addState = [&](const std::string &name, const Type &t, Domain d) {
    return states.add(name, t, d);
  };

  const DType dt = g.type(lossOut->value).dtype;
  std::vector<std::pair<std::string, ValueId>> newValues; // the state's, in order of creation
  const std::string stepName = std::string(kOptimizerStatePrefix) + "step";
  ValueId counter = addState(stepName, Type{dt, {}}, Domain::Count);
  if (Status st = drawDropoutsAt(g, counter); !st)
    return st.error();
  ValueId t = b.add(counter, scalar(1, dt)); // this update's number, 1-based as torch.optim's
  Step s{b, c, dt, t, learningRate(b, t, c.schedule, dt), scalar, addState, newValues};

  std::vector<Output> outputs;
  for (const Output &o : in.outputs())
    if (o.role != OutputRole::Gradient) // the gradients are consumed by the update
      outputs.push_back(o);
  outputs.push_back({"lr", s.lr});
  if (shardRanks < 1)
    return makeError("optimizer: shard over at least 1 rank, got {}", shardRanks);
  std::vector<Param> sharded; // ZeRO-1: the parameters, whose update `params` makes as one part
  if (shardRanks > 1) {
    Expected<Param> part = shardOf(b, *params, shardRanks, dt);
    if (!part)
      return part.error();
    sharded = std::exchange(*params, {*part});
  }
  const NormAndGuard ng = normGuardAndClip(s, lossOut->value, *params, shardRanks);
  if (ng.applied != kNone)
    outputs.push_back({"update_applied", ng.applied});
  if (ng.norm != kNone)
    outputs.push_back({"grad_norm", ng.norm});

  // The update of argument `name`, shown as "new.<name>" (its role says what it is).
  auto update = [&](const std::string &name, ValueId v) {
    outputs.push_back({"new." + name, v, OutputRole::Update, states.indexOf(name)});
  };
  Rule rule = nullptr;
  for (auto [kind, r] : kRules)
    if (kind == c.kind)
      rule = r;
  for (Param &p : *params) {
    p.lr = s.in(s.lr, p);
    Expected<ValueId> next = rule(s, p);
    if (!next)
      return next.error();
    if (sharded.empty()) {
      update(p.name, *next);
      continue;
    }
    const std::vector<ValueId> values = shardedUpdates(b, sharded, *next, shardRanks);
    for (size_t i = 0; i < sharded.size(); ++i)
      update(sharded[i].name, values[i]);
  }
  update(stepName, t);
  for (auto &[name, v] : newValues)
    update(name, v);
  if (ng.applied != kNone) // each update becomes select(applied, new, old)
    for (Output &o : outputs)
      if (o.role == OutputRole::Update)
        o.value = b.select(ng.applied, o.value, g.args()[o.arg].value);
  if (!states.clash)
    return states.clash.error();
  g.setOutputs(std::move(outputs));
  return g;
}

Status refuseTrainingStep(const Graph &g) {
  for (const Output &o : g.outputs())
    if (o.role == OutputRole::Update)
      return makeError("the graph already has an update output \"{}\" (is it a training step "
                       "already?)",
                       o.name);
  return {};
}

} // namespace kiln::passes

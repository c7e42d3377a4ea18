// The reference training loop (see train.h).
#include "codegen/reference/train.h"

#include <fmt/format.h>

#include "codegen/reference/checkpoint.h"
#include "codegen/reference/interpreter.h"
#include "passes/optimizer.h"

namespace kiln::reference {
using namespace kiln::ir;

template <class F> Expected<Trainer<F>> Trainer<F>::create(const Graph &g, uint64_t seed) {
  Trainer t(g);
  for (size_t i = 0; i < g.outputs().size(); ++i)
    if (g.outputs()[i].name == "loss")
      t.lossOutput_ = static_cast<int>(i);
  if (t.lossOutput_ < 0 || g.type(g.outputs()[t.lossOutput_].value).numElements() != 1)
    return makeError("training step @{}: needs a scalar \"loss\" output", g.name());
  for (size_t a = 0; a < g.args().size(); ++a) {
    const Arg &arg = g.args()[a];
    if (arg.kind == Arg::Kind::Input)
      continue;
    const Output *o = g.findOutput(std::string(passes::kNewPrefix) + arg.name);
    if (!o)
      return makeError("training step @{}: \"{}\" has no \"{}{}\" output to carry it to the next "
                       "step", g.name(), arg.name, passes::kNewPrefix, arg.name);
    if (g.type(o->value) != g.type(arg.value))
      return makeError("training step @{}: \"{}{}\" is {} but \"{}\" is {}", g.name(),
                       passes::kNewPrefix, arg.name, typeString(g.type(o->value)), arg.name,
                       typeString(g.type(arg.value)));
    t.feedback_.push_back({static_cast<int>(o - g.outputs().data()), static_cast<int>(a)});
  }
  t.args_ = makeArgs<F>(g, seed);
  return t;
}

template <class F> Expected<double> Trainer<F>::step(const runtime::Batch &batch) {
  const Graph &g = *graph_;
  for (size_t a = 0; a < g.args().size(); ++a) {
    const Arg &arg = g.args()[a];
    if (arg.kind != Arg::Kind::Input)
      continue;
    const runtime::BatchTensor *found = nullptr;
    for (const runtime::BatchTensor &t : batch)
      if (t.name == arg.name)
        found = &t;
    const Type &want = g.type(arg.value);
    if (!found)
      return makeError("batch has no \"{}\" for input {}", arg.name, typeString(want));
    if (found->shape != want.shape)
      return makeError("batch \"{}\" has shape {}, the model's input is {}", arg.name,
                       shapeString(found->shape), typeString(want));
    RefTensor<F> &dst = args_[a];
    if (dst.isFloatStorage())
      for (size_t k = 0; k < found->values.size(); ++k)
        dst.f[k] = static_cast<F>(found->values[k]);
    else
      dst.i = found->values;
  }
  Expected<std::vector<RefTensor<F>>> outs = run<F>(g, args_);
  if (!outs)
    return outs.error();
  for (auto [o, a] : feedback_)
    args_[a] = std::move((*outs)[o]);
  return (*outs)[lossOutput_].get(0);
}

template <class F> int64_t Trainer<F>::stepsDone() const {
  for (size_t a = 0; a < graph_->args().size(); ++a)
    if (graph_->args()[a].name == "opt.step")
      return static_cast<int64_t>(args_[a].get(0));
  return 0;
}

template <class F> Status Trainer<F>::save(const std::string &path) const {
  return saveCheckpoint<F>(path, *graph_, args_);
}

template <class F> Expected<int> Trainer<F>::load(const std::string &path) {
  return loadCheckpoint<F>(path, *graph_, args_);
}

template class Trainer<float>;
template class Trainer<double>;

} // namespace kiln::reference

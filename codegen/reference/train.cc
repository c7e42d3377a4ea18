// The reference training loop (see train.h).
#include "codegen/reference/train.h"

#include <fmt/format.h>

#include "codegen/reference/checkpoint.h"
#include "codegen/reference/interpreter.h"

namespace kiln::reference {
using namespace kiln::ir;

template <class F> Expected<Trainer<F>> Trainer<F>::create(const Graph &g, uint64_t seed) {
  Trainer t(g);
  if (const Output *loss = g.findOutput(OutputRole::Loss))
    t.lossOutput_ = static_cast<int>(loss - g.outputs().data());
  else
    return makeError("training step @{}: needs a loss output", g.name());
  for (size_t a = 0; a < g.args().size(); ++a) {
    const Arg &arg = g.args()[a];
    if (arg.kind == Arg::Kind::Input)
      continue;
    const Output *o = g.findOutput(OutputRole::Update, static_cast<int32_t>(a));
    if (!o)
      return makeError("training step @{}: \"{}\" has no update output to carry it to the next "
                       "step",
                       g.name(), arg.name);
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
    if (graph_->args()[a].kind == Arg::Kind::State && graph_->args()[a].domain == Domain::Count)
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

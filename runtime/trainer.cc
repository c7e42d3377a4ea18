// The training step on any Executable (see trainer.h).
#include "runtime/trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln::runtime {

Expected<Trainer> Trainer::create(Executable &exe) {
  const Program &p = exe.program();
  Trainer t(exe);
  t.loss_ = p.loss();
  t.applied_ = p.output("update_applied");
  if (!t.loss_)
    return makeError("training step @{}: needs a loss output", p.name);
  for (const Symbol &s : p.symbols) {
    if (!s.isWeight())
      continue;
    bool updated = false;
    for (const Symbol &o : p.symbols)
      updated = updated || (o.role == Symbol::Role::Update && o.kind == Symbol::Kind::Output &&
                            o.of == p.indexOf(s));
    if (!updated)
      return makeError("training step @{}: {} \"{}\" has no update output to carry it to the "
                       "next step",
                       p.name, symbolKindName(s.kind), s.name);
  }
  return t;
}

Status writeBatch(Executable &exe, const Batch &batch) {
  for (const Symbol &s : exe.program().symbols) {
    if (s.kind != Symbol::Kind::Input)
      continue;
    const BatchTensor *found = nullptr;
    for (const BatchTensor &t : batch)
      if (t.name == s.name)
        found = &t;
    if (!found) {
      std::vector<std::string_view> names;
      for (const BatchTensor &t : batch)
        names.push_back(t.name);
      return makeError("the model's input \"{}\" {}[{}] is not in the task's batch (which holds "
                       "{}): train it on a task that makes it (--task: lm makes tokens and "
                       "targets, mlm token_types too; copy, reverse and pairs make src, tgt and "
                       "targets)",
                       s.name, dtypeName(s.dtype), fmt::join(s.shape, ","), fmt::join(names, ", "));
    }
    if (found->shape != s.shape)
      return makeError("batch \"{}\" has shape [{}], the model's input is {}[{}]", s.name,
                       fmt::join(found->shape, ","), dtypeName(s.dtype), fmt::join(s.shape, ","));
    HostTensor t(s.dtype, s.shape);
    const bool reals = !found->reals.empty();
    const size_t given = reals ? found->reals.size() : found->values.size();
    if (static_cast<int64_t>(given) != t.numElements())
      return makeError("batch \"{}\" holds {} values for the {} elements of [{}]", s.name, given,
                       t.numElements(), fmt::join(s.shape, ","));
    if (reals && !isFloat(s.dtype))
      return makeError("batch \"{}\" holds reals, the model's input is {}", s.name,
                       dtypeName(s.dtype));
    for (size_t k = 0; k < given; ++k)
      if (reals)
        t.set(static_cast<int64_t>(k), found->reals[k]);
      else
        t.setInt(static_cast<int64_t>(k), found->values[k]);
    if (Status st = exe.write(s, t); !st)
      return st;
  }
  return {};
}

Expected<double> Trainer::step(const Batch &batch) {
  if (Status st = writeBatch(*exe_, batch); !st)
    return st.error();
  if (Status st = exe_->run(); !st)
    return st.error();
  return exe_->read(*loss_).get(0);
}

bool Trainer::lastUpdateApplied() const {
  return !applied_ || exe_->read(*applied_).get(0) != 0;
}

int64_t Trainer::stepsDone() const {
  const Symbol *counter = exe_->program().stepCounter();
  return counter ? static_cast<int64_t>(exe_->read(*counter).get(0)) : 0;
}

} // namespace kiln::runtime

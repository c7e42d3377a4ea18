// The training step on any Executable (see trainer.h).
#include "runtime/trainer.h"

#include <cstdint>

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
  // A name given twice is an error (the last one was used). Tensors the model does not take are
  // left (a task's batch holds what all its models take: token_types, which a GPT has not).
  for (size_t i = 0; i < batch.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (batch[j].name == batch[i].name)
        return makeError("batch \"{}\" is given twice", batch[i].name);
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
    for (size_t k = 0; k < given; ++k) {
      if (reals) {
        t.set(static_cast<int64_t>(k), found->reals[k]);
        continue;
      }
      // (An i32 input took the low 32 bits: 2^32 + 1 trained as class 1.)
      const int64_t v = found->values[k];
      if ((s.dtype == DType::I32 && (v < INT32_MIN || v > INT32_MAX)) ||
          (s.dtype == DType::Bool && v != 0 && v != 1))
        return makeError("batch \"{}\" holds {} at element {}, which is no {}", s.name, v, k,
                         dtypeName(s.dtype));
      t.setInt(static_cast<int64_t>(k), v);
    }
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

// The sharded optimizer's state in checkpoints (see sharded_state.h).
#include "runtime/sharded_state.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "runtime/checkpoint.h"
#include "runtime/communicator.h"
#include "support/checked.h"

namespace kiln::runtime {

namespace {

// "opt.KIND." of sharded state "opt.KIND.*".
std::string_view kindPrefix(const Symbol &s) {
  return std::string_view(s.name).substr(0, s.name.size() - kShardedParameters.size());
}

// Where the parameters lie in the flat vector, and this rank's part of it.
struct ShardLayout {
  std::vector<const Symbol *> params; // the float parameters, in argument order
  int64_t elements = 0;               // theirs
  int64_t ranks = 1, rank = 0, part = 0;
};

// `s`'s layout over the ranks of `exe`'s communicator (1 without one). Error: a part that is not
// ceil(n / ranks), which a program compiled for another number of ranks has.
Expected<ShardLayout> layoutOf(const Executable &exe, const Symbol &s, bool needRanks) {
  ShardLayout l;
  l.params = shardedParameters(exe.program());
  for (const Symbol *p : l.params)
    l.elements = addSat(l.elements, p->numElements());
  const Communicator *comm = exe.communicator();
  l.ranks = comm ? comm->size() : 1, l.rank = comm ? comm->rank() : 0;
  l.part = s.numElements();
  if (needRanks && (l.elements + l.ranks - 1) / l.ranks != l.part)
    return makeError("state \"{}\" holds {} elements, but one part of the parameters' {} over "
                     "this run's {} rank(s) is {}: the program was compiled for another number "
                     "of ranks",
                     s.name, l.part, l.elements, l.ranks, (l.elements + l.ranks - 1) / l.ranks);
  return l;
}

std::span<const float> floats(const HostTensor &t) {
  return {reinterpret_cast<const float *>(t.raw().data()), static_cast<size_t>(t.numElements())};
}
std::span<float> floats(HostTensor &t) {
  return {reinterpret_cast<float *>(t.raw().data()), static_cast<size_t>(t.numElements())};
}

} // namespace

std::vector<const Symbol *> shardedParameters(const Program &program) {
  std::vector<const Symbol *> params;
  for (const Symbol &p : program.symbols)
    if (p.kind == Symbol::Kind::Param && isFloat(p.dtype))
      params.push_back(&p);
  return params;
}

std::string checkpointNameOf(const Program &program, const Symbol &s) {
  if (!isShardedState(s))
    return s.name;
  const std::vector<const Symbol *> params = shardedParameters(program);
  return params.empty() ? s.name : fmt::format("{}{}", kindPrefix(s), params[0]->name);
}

bool isShardedState(const Symbol &s) {
  return s.kind == Symbol::Kind::State && s.name.starts_with(kOptimizerStatePrefix) &&
         s.name.ends_with(std::string(".") + std::string(kShardedParameters));
}

const Symbol *shardedStateOf(const Program &program, std::string_view name) {
  if (!name.starts_with(kOptimizerStatePrefix))
    return nullptr;
  const size_t dot = name.find('.', kOptimizerStatePrefix.size());
  if (dot == std::string_view::npos)
    return nullptr;
  const Symbol *param = program.argument(name.substr(dot + 1));
  if (!param || param->kind != Symbol::Kind::Param || !isFloat(param->dtype))
    return nullptr;
  const Symbol *s =
      program.argument(fmt::format("{}{}", name.substr(0, dot + 1), kShardedParameters));
  return s && isShardedState(*s) ? s : nullptr;
}

Expected<std::vector<SafetensorsTensor>> gatherShardedState(const Executable &exe,
                                                            const Symbol &s) {
  const HostTensor mine = exe.read(s);
  const std::span<const float> part = floats(mine);
  const bool alone = !exe.communicator() || exe.communicator()->size() == 1;
  Expected<ShardLayout> l = layoutOf(exe, s, !alone);
  if (!l)
    return l.error();
  std::vector<float> whole;
  if (alone) {
    // No ranks to gather from: the program has run no step (each would have failed without
    // them), so every rank's part is what this one's is, the zeros it started with.
    if (std::any_of(part.begin(), part.end(), [](float x) { return x != 0; }))
      return makeError("state \"{}\": a sharded optimizer's state is saved by its ranks together, "
                       "under mpirun",
                       s.name);
    whole.assign(static_cast<size_t>(l->elements), 0.0f);
  } else {
    if (l->rank == 0)
      whole.resize(static_cast<size_t>(l->part * l->ranks));
    if (Status st = exe.communicator()->gather(part.data(), whole.data(), l->part); !st)
      return makeError("gathering \"{}\" from the ranks: {}", s.name, st.error().message);
    if (l->rank != 0)
      return std::vector<SafetensorsTensor>{};
  }
  std::vector<SafetensorsTensor> out;
  int64_t at = 0;
  for (const Symbol *p : l->params) {
    HostTensor t(DType::F32, p->shape);
    std::copy_n(whole.begin() + at, t.numElements(), floats(t).begin());
    at += t.numElements();
    out.push_back(toSafetensors(fmt::format("{}{}", kindPrefix(s), p->name), t));
  }
  return out;
}

Expected<HostTensor> shardOfState(const Executable &exe, const Symbol &s,
                                  const SafetensorsFile &file, const std::string &path) {
  Expected<ShardLayout> l = layoutOf(exe, s, true);
  if (!l)
    return makeError("{}: {}", path, l.error().message);
  HostTensor out(DType::F32, s.shape); // zeros: the padding past the parameters stays 0
  const int64_t first = l->rank * l->part, last = first + l->part; // [first, last) of the whole
  int64_t at = 0;
  for (const Symbol *p : l->params) {
    const std::string name = fmt::format("{}{}", kindPrefix(s), p->name);
    const SafetensorsTensor *t = file.find(name);
    if (!t)
      return makeError("{}: optimizer state \"{}\" is missing", path, name);
    Expected<HostTensor> whole = fromSafetensors(*t, DType::F32, p->shape);
    if (!whole)
      return makeError("{}: {}", path, whole.error().message);
    Symbol named = s; // (the file's tensor, for the message: its name and its element)
    named.name = name, named.shape = p->shape;
    if (Status st = checkDomain(named, *whole); !st)
      return makeError("{}: {}", path, st.error().message);
    const int64_t from = std::max(first, at), to = std::min(last, at + p->numElements());
    if (from < to)
      std::copy(floats(*whole).begin() + (from - at), floats(*whole).begin() + (to - at),
                floats(out).begin() + (from - first));
    at += p->numElements();
  }
  return out;
}

} // namespace kiln::runtime

// Checkpoints of any Executable (see checkpoint.h).
#include "runtime/checkpoint.h"

#include <cmath>
#include <cstring>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/communicator.h"
#include "runtime/sharded_state.h"

namespace kiln::runtime {
namespace {

SafetensorsDtype fileDtype(DType t) {
  switch (t) {
  case DType::F32:
    return SafetensorsDtype::F32;
  case DType::F64:
    return SafetensorsDtype::F64;
  case DType::BF16:
    return SafetensorsDtype::BF16;
  case DType::I32:
    return SafetensorsDtype::I32;
  case DType::I64:
    return SafetensorsDtype::I64;
  case DType::Bool:
    return SafetensorsDtype::Bool;
  }
  return SafetensorsDtype::F32;
}

std::string typeText(DType dtype, const std::vector<int64_t> &shape) {
  return fmt::format("{}[{}]", dtypeName(dtype), fmt::join(shape, ","));
}

// Whether every element of an f32 tensor is finite (and >= 0 if nonNegative), in one typed pass
// over the floats (most of a checkpoint is f32 weights and moments) rather than checkDomain's
// HostTensor::get per element, which stays to find and name a bad one.
bool allWithinF32(const HostTensor &t, bool nonNegative) {
  const uint8_t *p = t.raw().data();
  bool within = true;
  for (int64_t k = 0; k < t.numElements(); ++k) {
    float x;
    std::memcpy(&x, p + 4 * k, 4);
    within &= std::isfinite(x) && (!nonNegative || x >= 0);
  }
  return within;
}

} // namespace

double exactIntegerLimit(DType t) {
  switch (t) {
  case DType::BF16:
    return 0x1p8;
  case DType::F32:
    return 0x1p24;
  case DType::F64:
    return 0x1p53;
  default:
    return 0x1p62;
  }
}

// Host storage is the file's storage (little-endian, bf16 as its bits, bool as one byte).
SafetensorsTensor toSafetensors(std::string name, const HostTensor &t) {
  std::span<const uint8_t> bytes = t.raw();
  return SafetensorsTensor{std::move(name), fileDtype(t.dtype()), t.shape(),
                           std::vector<uint8_t>(bytes.begin(), bytes.end())};
}

Expected<HostTensor> fromSafetensors(const SafetensorsTensor &s, DType dtype,
                                     const std::vector<int64_t> &shape) {
  if (s.dtype != fileDtype(dtype) || s.shape != shape)
    return makeError("tensor \"{}\" is {}[{}] in the file, the graph needs {}", s.name,
                     runtime::dtypeName(s.dtype), fmt::join(s.shape, ","), typeText(dtype, shape));
  HostTensor t(dtype, shape);
  std::copy(s.data.begin(), s.data.end(), t.raw().begin());
  if (dtype == DType::Bool) // any nonzero byte is true; kiln holds 1
    for (int64_t k = 0; k < t.numElements(); ++k)
      t.setInt(k, t.getInt(k) != 0);
  return t;
}

Status checkDomain(const Symbol &s, const HostTensor &t) {
  if (t.dtype() == DType::F32 && s.domain != Domain::Count &&
      allWithinF32(t, s.domain == Domain::NonNegative))
    return {};
  double limit = exactIntegerLimit(t.dtype());
  for (int64_t k = 0; k < t.numElements(); ++k) {
    double v = t.get(k);
    std::string problem;
    if (!std::isfinite(v))
      problem = "is not a finite number";
    else if (s.domain == Domain::NonNegative && v < 0)
      problem = "is negative, but this state holds values >= 0";
    else if (s.domain == Domain::Count && (v < 0 || std::trunc(v) != v || v > limit))
      problem = fmt::format("is not a count (a whole number in [0, {:.0f}] for {})", limit,
                            dtypeName(t.dtype()));
    if (!problem.empty())
      return makeError("{} \"{}\": element {} = {} {}",
                       s.kind == Symbol::Kind::Param ? "parameter" : "state", s.name, k, v,
                       problem);
  }
  return {};
}

bool writesCheckpoints(const Executable &exe) {
  return !exe.communicator() || exe.communicator()->rank() == 0;
}

Expected<SafetensorsFile> checkpointFile(const Executable &exe, int64_t batches,
                                         const ModelDescription *description) {
  SafetensorsFile file;
  file.metadata["format"] = "pt";
  file.metadata["graph"] = exe.program().name;
  if (batches >= 0)
    file.metadata["batches"] = std::to_string(batches);
  if (description)
    describeIn(*description, file.metadata);
  // Under several ranks rank 0 writes: the others only give their parts of sharded state.
  const bool writes = writesCheckpoints(exe);
  std::optional<Error> outside;
  for (const Symbol &s : exe.program().symbols) {
    if (!s.inCheckpoint())
      continue;
    if (!isShardedState(s)) {
      if (!writes)
        continue;
      // (A file that no load would take: weights that an unguarded training step made NaN. The
      // loop goes on: the other ranks wait in the gathers below.)
      const HostTensor t = exe.read(s);
      if (Status st = checkDomain(s, t); !st && !outside)
        outside = makeError("{}: a checkpoint of it would not load", st.error().message);
      file.tensors.push_back(toSafetensors(s.name, t));
      continue;
    }
    Expected<std::vector<SafetensorsTensor>> whole = gatherShardedState(exe, s);
    if (!whole)
      return whole.error();
    for (SafetensorsTensor &t : *whole)
      file.tensors.push_back(std::move(t));
  }
  if (outside)
    return *outside;
  return file;
}

Status saveCheckpoint(const Executable &exe, const std::string &path, int64_t batches,
                      const ModelDescription *description) {
  Expected<SafetensorsFile> file = checkpointFile(exe, batches, description);
  if (!file)
    return makeError("{}: {}", path, file.error().message);
  if (!writesCheckpoints(exe))
    return {}; // (rank 0 writes for the run)
  return writeSafetensors(path, *file);
}

Expected<int> loadCheckpoint(Executable &exe, const std::string &path) {
  const Program &program = exe.program();
  auto optimizerState = [](const Symbol &s) {
    return s.kind == Symbol::Kind::State && s.inCheckpoint();
  }; // all the state a checkpoint holds (not a KV cache)
  bool keepsState = false;
  std::vector<std::string> wanted;
  for (const Symbol &s : program.symbols) {
    keepsState = keepsState || optimizerState(s);
    if (s.inCheckpoint())
      wanted.push_back(s.name);
  }
  // A program without an optimizer (inference) reads only what it holds: of a training
  // checkpoint, the parameters, not the moments (two thirds of the file under AdamW).
  Expected<SafetensorsFile> file =
      keepsState ? readSafetensors(path) : readSafetensors(path, std::move(wanted));
  if (!file)
    return file.error();
  std::vector<std::string_view> names(file->unread.begin(), file->unread.end());
  for (const SafetensorsTensor &t : file->tensors)
    names.push_back(t.name);
  for (std::string_view name : names) {
    const Symbol *s = program.argument(name);
    // A program without an optimizer (inference) takes a training checkpoint's parameters.
    if (!s && !keepsState && name.starts_with(kOptimizerStatePrefix))
      continue;
    if (!s && shardedStateOf(program, name)) // this rank's part of it is loaded below
      continue;
    if (s && s->isBf16Copy())
      return makeError("{}: tensor \"{}\" is a parameter's bf16 copy, which a checkpoint never "
                       "holds: the runtime writes it with the parameter",
                       path, name);
    if (!s || !s->inCheckpoint())
      return makeError("{}: tensor \"{}\" is not a parameter or state of graph @{}{}", path, name,
                       program.name,
                       name.starts_with(kOptimizerStatePrefix)
                           ? " (optimizer state this run's optimizer does not keep: a checkpoint "
                             "of another --optimizer, or of sgd with --momentum? resume with the "
                             "optimizer flags it was trained with)"
                           : "");
  }
  // Every parameter first: a checkpoint of another model (more layers) lacks parameters and
  // their state alike, and the parameters name the cause.
  for (const Symbol &s : program.symbols)
    if (s.kind == Symbol::Kind::Param && s.inCheckpoint() && !file->find(s.name))
      return makeError("{}: parameter \"{}\" is missing", path, s.name);
  // State is all or nothing: a weights-only file starts the optimizer fresh, but a file with
  // some of it (an Adam moment without its partner, moments without the step counter) cannot be
  // resumed from.
  // (Sharded state is there where its first parameter's whole is: shardOfState wants the rest.)
  const Symbol *stateFound = nullptr, *stateMissing = nullptr;
  for (const Symbol &s : program.symbols)
    if (optimizerState(s))
      (file->find(checkpointNameOf(program, s)) ? stateFound : stateMissing) = &s;
  if (stateFound && stateMissing) {
    // The kinds of state (opt.exp_avg, opt.step, ...) that the program keeps: a whole checkpoint
    // of another optimizer (SGD's opt.step alone, for Adam) lands here too.
    std::set<std::string> kinds;
    for (const Symbol &s : program.symbols)
      if (optimizerState(s))
        kinds.insert(s.name.substr(0, s.name.find('.', s.name.find('.') + 1)));
    return makeError("{}: has optimizer state \"{}\" but not \"{}\": a checkpoint holds all of "
                     "the optimizer state or none of it (weights only); this program's optimizer "
                     "keeps {} (a checkpoint of another optimizer?)",
                     path, checkpointNameOf(program, *stateFound),
                     checkpointNameOf(program, *stateMissing), fmt::join(kinds, ", "));
  }
  // Everything is checked before anything is written: a bad file leaves `exe` as it was.
  std::vector<std::pair<const Symbol *, HostTensor>> loaded;
  for (const Symbol &s : program.symbols) {
    if (!s.inCheckpoint())
      continue;
    if (isShardedState(s)) {
      if (!stateFound)
        continue;
      Expected<HostTensor> part = shardOfState(exe, s, *file, path);
      if (!part)
        return part.error();
      loaded.emplace_back(&s, std::move(*part)); // (checked whole, in shardOfState)
      continue;
    }
    const SafetensorsTensor *t = file->find(s.name);
    if (!t) // state of a weights-only file (parameters were checked above): a fresh optimizer
      continue;
    // The file's f32 for a weight stored in bf16, its bf16 for an f32 parameter: Executable::write
    // rounds or widens them. (Of another shape: the error names the graph's own type.)
    const bool fits = t->shape == s.shape;
    const bool rounded = fits && s.roundsF32() && t->dtype == SafetensorsDtype::F32;
    const bool widened = fits && s.widensBf16() && t->dtype == SafetensorsDtype::BF16;
    Expected<HostTensor> value = fromSafetensors(*t,
                                                 rounded   ? DType::F32
                                                 : widened ? DType::BF16
                                                           : s.dtype,
                                                 s.shape);
    if (!value)
      return makeError("{}: {}", path, value.error().message);
    if (Status st = checkDomain(s, *value); !st)
      return makeError("{}: {}", path, st.error().message);
    loaded.emplace_back(&s, std::move(*value));
  }
  for (auto &[s, value] : loaded)
    if (Status st = exe.write(*s, value); !st)
      return makeError("{}: {}", path, st.error().message);
  // The file's tensors: sharded state took one of each parameter.
  const auto perSharded = static_cast<int>(shardedParameters(program).size());
  int tensors = 0;
  for (const auto &[s, value] : loaded)
    tensors += isShardedState(*s) ? perSharded : 1;
  return tensors;
}

Expected<int64_t> batchesIn(const std::string &path) {
  const std::string counter = std::string(kOptimizerStatePrefix) + "step";
  Expected<SafetensorsFile> file = readSafetensors(path, std::vector<std::string>{counter});
  if (!file)
    return file.error();
  // A file without the optimizer's counter starts the optimizer fresh, and with it the run: its
  // schedule and its batches (a forward bundle's weights, compiled from a checkpoint, said the
  // checkpoint's batches, and a run from them stretched its schedule over steps it never took).
  const SafetensorsTensor *t = file->find(counter);
  if (!t)
    return 0;
  if (auto it = file->metadata.find("batches"); it != file->metadata.end()) {
    const std::string &text = it->second;
    const bool digits = !text.empty() && text.size() <= 15 &&
                        text.find_first_not_of("0123456789") == std::string::npos;
    if (!digits)
      return makeError("{}: metadata \"batches\" is \"{}\", not a count of batches", path, text);
    return std::stoll(text);
  }
  if (!t->shape.empty())
    return 0;
  Expected<HostTensor> v =
      fromSafetensors(*t, t->dtype == SafetensorsDtype::F64 ? DType::F64 : DType::F32, {});
  if (!v)
    return makeError("{}: {}", path, v.error().message);
  const double count = v->get(0);
  if (!(count >= 0 && count < 1e15) || count != std::floor(count))
    return makeError("{}: step counter {} is not a count of steps", path, count);
  return static_cast<int64_t>(count);
}

} // namespace kiln::runtime

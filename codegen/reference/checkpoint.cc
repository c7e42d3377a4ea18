// Conversions between RefTensor and safetensors records, and graph-checked save/load.
#include "codegen/reference/checkpoint.h"

#include <cmath>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "support/bf16.h"

namespace kiln::reference {
using namespace kiln::ir;
using runtime::SafetensorsDtype;

namespace {

std::optional<SafetensorsDtype> fileDType(DType t) {
  switch (t) {
  case DType::F32: return SafetensorsDtype::F32;
  case DType::F64: return SafetensorsDtype::F64;
  case DType::BF16: return SafetensorsDtype::BF16;
  case DType::I32: return SafetensorsDtype::I32;
  case DType::I64: return SafetensorsDtype::I64;
  case DType::Bool: return SafetensorsDtype::Bool;
  }
  return std::nullopt;
}

// Appends the little-endian bytes of `v` (the host is little-endian, as the format is).
template <class T> void put(std::vector<uint8_t> &out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));
}
template <class T> T take(const uint8_t *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// The largest whole number that dtype t holds exactly along with all below it.
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

// A loaded tensor's values against what its argument may hold (ir::Domain): a checkpoint with
// NaN weights, a negative second moment or a step counter of 1e30 is refused, not trained on.
template <class F> Status checkValues(const Arg &arg, const RefTensor<F> &t) {
  double limit = exactIntegerLimit(t.type.dtype);
  for (int64_t k = 0; k < t.size(); ++k) {
    double v = t.get(k);
    std::string problem;
    if (!std::isfinite(v))
      problem = "is not a finite number";
    else if (arg.domain == Domain::NonNegative && v < 0)
      problem = "is negative, but this state holds values >= 0";
    else if (arg.domain == Domain::Count && (v < 0 || std::trunc(v) != v || v > limit))
      problem = fmt::format("is not a count (a whole number in [0, {:.0f}] for {})", limit,
                            dtypeName(t.type.dtype));
    if (!problem.empty())
      return makeError("{} \"{}\": element {} = {} {}",
                       arg.kind == Arg::Kind::Param ? "parameter" : "state", arg.name, k, v,
                       problem);
  }
  return {};
}

} // namespace

template <class F> runtime::SafetensorsTensor toSafetensors(std::string name, const RefTensor<F> &t) {
  runtime::SafetensorsTensor s{std::move(name), *fileDType(t.type.dtype), t.type.shape, {}};
  s.data.reserve(t.size() * runtime::dtypeSize(s.dtype));
  for (int64_t k = 0; k < t.size(); ++k) {
    switch (t.type.dtype) {
    case DType::F32: put(s.data, static_cast<float>(t.f[k])); break;
    case DType::F64: put(s.data, static_cast<double>(t.f[k])); break;
    case DType::BF16: put(s.data, toBf16Bits(static_cast<float>(t.f[k]))); break;
    case DType::I32: put(s.data, static_cast<int32_t>(t.i[k])); break;
    case DType::I64: put(s.data, t.i[k]); break;
    case DType::Bool: put(s.data, static_cast<uint8_t>(t.i[k] != 0)); break;
    }
  }
  return s;
}

template <class F>
Expected<RefTensor<F>> fromSafetensors(const runtime::SafetensorsTensor &s, const Type &expected) {
  std::optional<SafetensorsDtype> want = fileDType(expected.dtype);
  if (s.dtype != *want || s.shape != expected.shape)
    return makeError("tensor \"{}\" is {}{} in the file, the graph needs {}", s.name,
                     runtime::dtypeName(s.dtype), shapeString(s.shape), typeString(expected));
  RefTensor<F> t(expected);
  size_t size = runtime::dtypeSize(s.dtype);
  for (int64_t k = 0; k < t.size(); ++k) {
    const uint8_t *p = s.data.data() + k * size;
    switch (expected.dtype) {
    case DType::F32: t.f[k] = static_cast<F>(take<float>(p)); break;
    case DType::F64: t.f[k] = static_cast<F>(take<double>(p)); break;
    case DType::BF16: t.f[k] = static_cast<F>(fromBf16Bits(take<uint16_t>(p))); break;
    case DType::I32: t.i[k] = take<int32_t>(p); break;
    case DType::I64: t.i[k] = take<int64_t>(p); break;
    case DType::Bool: t.i[k] = take<uint8_t>(p) != 0; break;
    }
  }
  return t;
}

template <class F>
Status saveCheckpoint(const std::string &path, const Graph &g, std::span<const RefTensor<F>> args) {
  runtime::SafetensorsFile file;
  file.metadata["format"] = "pt";
  file.metadata["graph"] = g.name();
  for (size_t a = 0; a < g.args().size(); ++a)
    if (g.args()[a].kind != Arg::Kind::Input)
      file.tensors.push_back(toSafetensors(g.args()[a].name, args[a]));
  return runtime::writeSafetensors(path, file);
}

template <class F>
Expected<int> loadCheckpoint(const std::string &path, const Graph &g, std::span<RefTensor<F>> args) {
  Expected<runtime::SafetensorsFile> file = runtime::readSafetensors(path);
  if (!file)
    return file.error();
  for (const runtime::SafetensorsTensor &t : file->tensors) {
    const Arg *a = g.findArg(t.name);
    if (!a || a->kind == Arg::Kind::Input)
      return makeError("{}: tensor \"{}\" is not a parameter or state of graph @{}", path, t.name,
                       g.name());
  }
  // State is all or nothing: a weights-only file starts the optimizer fresh, but a file with
  // some of it (an Adam moment without its partner, moments without the step counter) cannot be
  // resumed from.
  const Arg *stateFound = nullptr, *stateMissing = nullptr;
  for (const Arg &arg : g.args())
    if (arg.kind == Arg::Kind::State)
      (file->find(arg.name) ? stateFound : stateMissing) = &arg;
  if (stateFound && stateMissing)
    return makeError("{}: has optimizer state \"{}\" but not \"{}\": a checkpoint holds all of "
                     "the optimizer state or none of it (weights only)",
                     path, stateFound->name, stateMissing->name);
  // Everything is checked before anything is replaced: a bad file leaves `args` as they were.
  std::vector<std::pair<size_t, RefTensor<F>>> loaded;
  for (size_t a = 0; a < g.args().size(); ++a) {
    const Arg &arg = g.args()[a];
    if (arg.kind == Arg::Kind::Input)
      continue;
    const runtime::SafetensorsTensor *t = file->find(arg.name);
    if (!t) {
      if (arg.kind == Arg::Kind::Param)
        return makeError("{}: parameter \"{}\" is missing", path, arg.name);
      continue;
    }
    Expected<RefTensor<F>> value = fromSafetensors<F>(*t, g.type(arg.value));
    if (!value)
      return makeError("{}: {}", path, value.error().message);
    if (Status s = checkValues(arg, *value); !s)
      return makeError("{}: {}", path, s.error().message);
    loaded.emplace_back(a, std::move(*value));
  }
  for (auto &[a, value] : loaded)
    args[a] = std::move(value);
  return static_cast<int>(loaded.size());
}

#define KILN_CHECKPOINT_INSTANTIATE(F)                                                             \
  template runtime::SafetensorsTensor toSafetensors(std::string, const RefTensor<F> &);            \
  template Expected<RefTensor<F>> fromSafetensors(const runtime::SafetensorsTensor &, const Type &); \
  template Status saveCheckpoint(const std::string &, const Graph &, std::span<const RefTensor<F>>); \
  template Expected<int> loadCheckpoint(const std::string &, const Graph &, std::span<RefTensor<F>>)
KILN_CHECKPOINT_INSTANTIATE(float);
KILN_CHECKPOINT_INSTANTIATE(double);

} // namespace kiln::reference

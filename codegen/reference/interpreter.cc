// The reference interpreter and its argument generator (see interpreter.h).
#include "codegen/reference/interpreter.h"

#include <cmath>

#include <fmt/format.h>

#include "ir/evaluate.h"
#include "runtime/weights.h"

namespace kiln::reference {
using namespace kiln::ir;

template <class F>
Expected<std::vector<RefTensor<F>>> run(const Graph &g, std::span<const RefTensor<F>> args) {
  if (args.size() != g.args().size())
    return makeError("graph @{} takes {} arguments, got {}", g.name(), g.args().size(),
                     args.size());
  std::vector<RefTensor<F>> values(g.numValues());
  for (size_t i = 0; i < args.size(); ++i) {
    const Arg &a = g.args()[i];
    if (args[i].type != g.type(a.value))
      return makeError("argument \"{}\": expected {}, got {}", a.name, typeString(g.type(a.value)),
                       typeString(args[i].type));
    size_t want = static_cast<size_t>(args[i].size());
    if ((args[i].isFloatStorage() ? args[i].f.size() : args[i].i.size()) != want)
      return makeError("argument \"{}\": holds the wrong number of elements for {}", a.name,
                       typeString(args[i].type));
    values[a.value] = args[i];
  }
  if (Status s = evaluate(g, values); !s)
    return s.error();
  std::vector<RefTensor<F>> outputs;
  for (const Output &o : g.outputs())
    outputs.push_back(values[o.value]);
  return outputs;
}

template <class F> std::vector<RefTensor<F>> makeArgs(const Graph &g, uint64_t seed) {
  // The runtime's generators (runtime/weights.h), so every backend starts from the same values;
  // here kept in F, as the interpreter holds them.
  std::vector<RefTensor<F>> args;
  for (const Arg &a : g.args()) {
    RefTensor<F> t(g.type(a.value));
    uint64_t stream = runtime::streamOf(seed, a.name);
    for (int64_t k = 0; k < t.size(); ++k) {
      double x = a.kind != Arg::Kind::Input ? runtime::initValue(a.init, t.type.shape, stream, k)
                                            : runtime::inputValue(t.type.dtype, a.range, stream, k);
      if (t.isFloatStorage())
        t.f[k] = static_cast<F>(x);
      else
        t.i[k] = static_cast<int64_t>(x);
    }
    roundIfBf16(t);
    args.push_back(std::move(t));
  }
  return args;
}

template <class F> runtime::HostTensor toHost(const RefTensor<F> &t) {
  runtime::HostTensor h(t.type.dtype, t.type.shape);
  for (int64_t k = 0; k < t.size(); ++k) {
    if (t.isFloatStorage())
      h.set(k, static_cast<double>(t.f[k]));
    else
      h.setInt(k, t.i[k]);
  }
  return h;
}

template <class F> RefTensor<F> fromHost(const runtime::HostTensor &h) {
  RefTensor<F> t(Type{h.dtype(), h.shape()});
  for (int64_t k = 0; k < t.size(); ++k) {
    if (t.isFloatStorage())
      t.f[k] = static_cast<F>(h.get(k));
    else
      t.i[k] = h.getInt(k);
  }
  return t;
}

std::string summarize(const runtime::HostTensor &t) {
  double sum = 0, abs = 0;
  for (int64_t k = 0; k < t.numElements(); ++k) {
    sum += t.get(k);
    abs += std::fabs(t.get(k));
  }
  std::string first;
  for (int64_t k = 0; k < std::min<int64_t>(t.numElements(), 4); ++k)
    first += fmt::format("{}{:.6g}", k ? ", " : "", t.get(k));
  return fmt::format("{}  sum={:.9g}  sum|x|={:.9g}  first=[{}{}]",
                     typeString(Type{t.dtype(), t.shape()}), sum, abs, first,
                     t.numElements() > 4 ? ", ..." : "");
}

template Expected<std::vector<RefTensor<float>>> run(const Graph &,
                                                     std::span<const RefTensor<float>>);
template Expected<std::vector<RefTensor<double>>> run(const Graph &,
                                                      std::span<const RefTensor<double>>);
template std::vector<RefTensor<float>> makeArgs(const Graph &, uint64_t);
template std::vector<RefTensor<double>> makeArgs(const Graph &, uint64_t);
template runtime::HostTensor toHost(const RefTensor<float> &);
template runtime::HostTensor toHost(const RefTensor<double> &);
template RefTensor<float> fromHost(const runtime::HostTensor &);
template RefTensor<double> fromHost(const runtime::HostTensor &);

} // namespace kiln::reference

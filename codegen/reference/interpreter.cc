// The reference interpreter and its argument generator (see interpreter.h).
#include "codegen/reference/interpreter.h"

#include <cmath>

#include <fmt/format.h>

#include "ir/evaluate.h"
#include "support/rng.h"

namespace kiln::reference {
using namespace kiln::ir;

namespace {

// FNV-1a of a name: gives each argument its own random stream.
uint64_t nameHash(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s)
    h = (h ^ c) * 0x100000001b3ull;
  return h;
}

} // namespace

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

namespace {
template <class F> int64_t heldBytes(const Type &t) {
  return mulSat(t.numElements(), isFloat(t.dtype) ? int64_t{sizeof(F)} : int64_t{8});
}
} // namespace

template <class F> int64_t runBytes(const Graph &g) {
  int64_t total = 0, largestBody = 0;
  for (const Arg &a : g.args())
    total = addSat(total, mulSat(2, heldBytes<F>(g.type(a.value))));
  for (const Node &n : g.nodes()) {
    for (ValueId r : n.results)
      total = addSat(total, heldBytes<F>(g.type(r)));
    for (const AttrValue &v : n.attrs.values())
      if (const Region *r = std::get_if<Region>(&v); r && r->graph)
        largestBody = std::max(largestBody, runBytes<F>(*r->graph));
  }
  for (const Output &o : g.outputs())
    total = addSat(total, heldBytes<F>(g.type(o.value)));
  return addSat(total, largestBody);
}

template <class F> std::vector<RefTensor<F>> makeArgs(const Graph &g, uint64_t seed) {
  std::vector<RefTensor<F>> args;
  for (const Arg &a : g.args()) {
    RefTensor<F> t(g.type(a.value));
    uint64_t stream = rng::mix64(seed ^ nameHash(a.name));
    const Shape &shape = t.type.shape;
    if (a.kind != Arg::Kind::Input) { // parameters and state: from their init
      const ParamInit &init = a.init;
      // Xavier/Glorot: fan_in, fan_out of a [.., out, in] weight.
      int64_t fanIn = shape.empty() ? 1 : shape.back();
      int64_t fanOut = shape.size() < 2 ? 1 : shape[shape.size() - 2];
      for (int64_t k = 0; k < t.size(); ++k) {
        double u = 2 * rng::uniform(stream, k) - 1; // U(-1, 1)
        double x = 0;
        switch (init.kind) {
        case ParamInit::Kind::Zeros:
          x = 0;
          break;
        case ParamInit::Kind::Ones:
          x = 1;
          break;
        case ParamInit::Kind::Normal:
          x = init.scale * rng::normal(stream, k);
          break;
        case ParamInit::Kind::Uniform:
          x = init.scale * u;
          break;
        case ParamInit::Kind::XavierUniform:
          x = init.scale * std::sqrt(6.0 / double(fanIn + fanOut)) * u;
          break;
        }
        if (t.isFloatStorage())
          t.f[k] = static_cast<F>(x);
        else
          t.i[k] = static_cast<int64_t>(x);
      }
    } else if (t.isFloatStorage()) {
      for (int64_t k = 0; k < t.size(); ++k)
        t.f[k] = static_cast<F>(rng::normal(stream, k));
    } else {
      uint64_t range = t.type.dtype == DType::Bool ? 2 : a.range > 0 ? a.range : 16;
      for (int64_t k = 0; k < t.size(); ++k)
        t.i[k] = static_cast<int64_t>(rng::bits(stream, k) % range);
    }
    roundIfBf16(t);
    args.push_back(std::move(t));
  }
  return args;
}

template <class F> std::string summarize(const RefTensor<F> &t) {
  double sum = 0, abs = 0;
  for (int64_t k = 0; k < t.size(); ++k) {
    sum += t.get(k);
    abs += std::fabs(t.get(k));
  }
  std::string first;
  for (int64_t k = 0; k < std::min<int64_t>(t.size(), 4); ++k)
    first += fmt::format("{}{:.6g}", k ? ", " : "", t.get(k));
  return fmt::format("{}  sum={:.9g}  sum|x|={:.9g}  first=[{}{}]", typeString(t.type), sum, abs,
                     first, t.size() > 4 ? ", ..." : "");
}

template Expected<std::vector<RefTensor<float>>> run(const Graph &,
                                                     std::span<const RefTensor<float>>);
template Expected<std::vector<RefTensor<double>>> run(const Graph &,
                                                      std::span<const RefTensor<double>>);
template int64_t runBytes<float>(const Graph &);
template int64_t runBytes<double>(const Graph &);
template std::vector<RefTensor<float>> makeArgs(const Graph &, uint64_t);
template std::vector<RefTensor<double>> makeArgs(const Graph &, uint64_t);
template std::string summarize(const RefTensor<float> &);
template std::string summarize(const RefTensor<double> &);

} // namespace kiln::reference

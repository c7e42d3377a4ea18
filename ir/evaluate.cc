// The reference node loop (see evaluate.h).
#include "ir/evaluate.h"

namespace kiln::ir {
namespace {

template <class F> RefFn<F> refOf(const OpInfo &op) {
  if constexpr (std::is_same_v<F, float>)
    return op.ref32;
  else
    return op.ref64;
}

} // namespace

template <class F>
Expected<std::vector<RefTensor<F>>> evaluateNode(const Graph &g, NodeId id,
                                                 std::span<const RefTensor<F> *const> in) {
  const Node &n = g.node(id);
  std::vector<RefTensor<F>> out;
  for (ValueId r : n.results)
    out.emplace_back(g.type(r));
  if (Status s = refOf<F>(opInfo(n.op))(n.attrs, in, out); !s)
    return makeError("{}: {}: {}", placeOf(n, id), mnemonic(n.op), s.error().message);
  for (RefTensor<F> &t : out)
    roundIfBf16(t);
  return out;
}

template <class F> Status evaluate(const Graph &g, std::vector<RefTensor<F>> &values) {
  values.resize(g.numValues());
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()); ++id) {
    const Node &n = g.node(id);
    std::vector<const RefTensor<F> *> in;
    for (ValueId v : n.operands)
      in.push_back(&values[v]);
    Expected<std::vector<RefTensor<F>>> out = evaluateNode<F>(g, id, in);
    if (!out)
      return out.error();
    for (size_t k = 0; k < out->size(); ++k)
      values[n.results[k]] = std::move((*out)[k]);
  }
  return {};
}

RefTensor<double> filledTensor(const Type &t, double v) {
  RefTensor<double> x(t);
  if (x.isFloatStorage())
    x.f.assign(x.f.size(), v);
  else
    x.i.assign(x.i.size(), static_cast<int64_t>(v));
  return x;
}

std::optional<double> uniformResult(const Graph &g, const Node &n, std::span<const double> fills) {
  const OpInfo &op = opInfo(n.op);
  if (op.pointwise) { // numpy broadcasting of rank-0 operands: the result is that one value
    std::vector<RefTensor<double>> in;
    for (size_t i = 0; i < fills.size(); ++i)
      in.push_back(filledTensor(Type{g.type(n.operands[i]).dtype, {}}, fills[i]));
    std::vector<RefTensor<double>> out; // n's results as rank-0 values of their dtypes
    for (ValueId r : n.results)
      out.emplace_back(Type{g.type(r).dtype, {}});
    std::vector<const RefTensor<double> *> ptrs;
    for (const RefTensor<double> &t : in)
      ptrs.push_back(&t);
    if (Status s = op.ref64(n.attrs, ptrs, out); !s || out.size() != 1)
      return std::nullopt;
    if (!out[0].isFloatStorage() && static_cast<int64_t>(out[0].get(0)) != out[0].i[0])
      return std::nullopt; // an integer no double holds exactly
    return out[0].get(0);
  }
  if (op.movesElements && !fills.empty()) {
    for (double f : fills)
      if (!(f == fills[0]))
        return std::nullopt;
    if (n.op == OpKind::Pad && n.attrs.getFloat("value") != fills[0] &&
        g.type(n.results[0]) != g.type(n.operands[0]))
      return std::nullopt; // the fill shows, and it differs
    return fills[0];
  }
  return std::nullopt;
}

template Expected<std::vector<RefTensor<float>>>
evaluateNode<float>(const Graph &, NodeId, std::span<const RefTensor<float> *const>);
template Expected<std::vector<RefTensor<double>>>
evaluateNode<double>(const Graph &, NodeId, std::span<const RefTensor<double> *const>);
template Status evaluate<float>(const Graph &, std::vector<RefTensor<float>> &);
template Status evaluate<double>(const Graph &, std::vector<RefTensor<double>> &);

} // namespace kiln::ir

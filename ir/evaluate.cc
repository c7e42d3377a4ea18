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

template <class F> Status evaluate(const Graph &g, std::vector<RefTensor<F>> &values) {
  values.resize(g.numValues());
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()); ++id) {
    const Node &n = g.node(id);
    std::vector<const RefTensor<F> *> in;
    for (ValueId v : n.operands)
      in.push_back(&values[v]);
    std::vector<RefTensor<F>> out;
    for (ValueId r : n.results)
      out.emplace_back(g.type(r));
    if (Status s = refOf<F>(opInfo(n.op))(n.attrs, in, out); !s)
      return makeError("{}: {}: {}", placeOf(n, id), mnemonic(n.op), s.error().message);
    for (size_t k = 0; k < out.size(); ++k) {
      roundIfBf16(out[k]);
      values[n.results[k]] = std::move(out[k]);
    }
  }
  return {};
}

template Status evaluate<float>(const Graph &, std::vector<RefTensor<float>> &);
template Status evaluate<double>(const Graph &, std::vector<RefTensor<double>> &);

} // namespace kiln::ir

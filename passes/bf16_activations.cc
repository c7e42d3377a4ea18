// Mixed precision: a value that only bf16 products read is stored in bf16.
//   y = fusion(..){.., output k = x}, every use of y (through reshapes) an operand of a matmul
//   with bf16_products (or a region's input that only such matmuls read)
//     =>  y = fusion(..){.., %c = cast(x){dtype = bf16}, output k = %c} : bf16[..]
//         (its reshapes bf16, the reading regions' inputs bf16)
//   .., y, .. = layer_norm / rms_norm / add_layer_norm / add_rms_norm(..), y read so
//     =>  .., y, .. = the norm(..){bf16_y = true} : .., bf16[..], ..
// The products round their operands to bf16 anyway (ir/ops/matmul.h), so they read the very
// values they multiplied before and every result keeps its bits. The value takes half the bytes:
// in the arena (a GELU's output saved for its weight gradient), where its region writes it, and
// where each product's packing reads it (runtime/kernels/gemm.h: MatrixRef::bf16). What it
// stores is the benchmark GPT's GELU outputs, the logits' gradient and the norms' y (the q, k, v
// and first MLP products' input, forward and in their weight gradients; the norms' backward
// reads x and the statistics, not y): values that only matmuls read. The norms' y took the
// benchmark GPT's training arena from 121.3 to 112.3 MiB; its step's time stayed within the
// host's drift (6 alternating runs). Runs after elementwise fusion (in "lower"), which makes the
// regions whose outputs these are; it changes nothing where no matmul has bf16 products.
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "ir/ops/region.h"
#include "passes/passes.h"

namespace kiln::passes {
using namespace kiln::ir;

namespace {

bool bf16Product(const Node &n) {
  return n.op == OpKind::Matmul && n.attrs.getBool("bf16_products");
}

// Whether any matmul of g, or of a region's body, has bf16 products (else the pass has nothing
// to do, and returns before any other work).
bool hasBf16Products(const Graph &g) {
  for (const Node &n : g.nodes())
    if (!n.erased && (bf16Product(n) || (n.op == OpKind::Fusion && hasBf16Products(regionBody(n)))))
      return true;
  return false;
}

// Per input of region n's body: whether the body reads it only as operands of matmuls with bf16
// products (and does not output it). One walk of the body for all its inputs.
std::vector<char> inputsOnlyProductsRead(const Node &n) {
  const Graph &body = regionBody(n);
  std::vector<char> only(body.args().size(), 1);
  auto argOf = [&](ValueId v) { return body.value(v).def == kNone ? body.value(v).index : -1; };
  for (const Output &o : body.outputs())
    if (const int32_t a = argOf(o.value); a >= 0)
      only[static_cast<size_t>(a)] = 0;
  for (const Node &b : body.nodes())
    if (!b.erased && !bf16Product(b))
      for (ValueId v : b.operands)
        if (const int32_t a = argOf(v); a >= 0)
          only[static_cast<size_t>(a)] = 0;
  return only;
}

// Region n with its body's inputs `retyped` stored in bf16 (its matmuls take them as they are)
// and its outputs `cast` rounded to bf16 by casts at the end of its body: one copy of the body
// for all of a region's changes (a copy per change made a region of many outputs quadratic).
Status editRegion(Node &n, const std::vector<size_t> &retyped, const std::vector<size_t> &cast) {
  auto body = std::make_shared<Graph>(regionBody(n));
  for (size_t i : retyped)
    body->setArgDType(static_cast<int32_t>(i), DType::BF16);
  std::vector<Output> outputs(body->outputs().begin(), body->outputs().end());
  for (size_t k : cast) {
    Expected<NodeId> c =
        body->addNode(OpKind::Cast, {outputs[k].value}, {{"dtype", DType::BF16}}, n.loc);
    if (!c)
      return c.error();
    outputs[k].value = body->result(*c);
  }
  body->setOutputs(std::move(outputs));
  return n.attrs.set("body", Region{std::move(body)});
}

} // namespace

Expected<bool> runBf16Activations(Graph &g, PassStats &stats) {
  if (!hasBf16Products(g))
    return false;
  const std::vector<std::vector<NodeId>> users = g.users();
  std::vector<bool> isOutput(static_cast<size_t>(g.numValues()), false);
  for (const Output &o : g.outputs())
    isOutput[static_cast<size_t>(o.value)] = true;
  // inputsOnlyProductsRead per region node, made on first need. The edits (editRegion) wait
  // until the walk is over, so the bodies it reads stay as they were.
  std::vector<std::optional<std::vector<char>>> onlyProductsRead(g.nodes().size());
  auto readsOnlyProducts = [&](NodeId u, size_t i) {
    auto &only = onlyProductsRead[static_cast<size_t>(u)];
    if (!only)
      only = inputsOnlyProductsRead(g.node(u));
    return (*only)[i] != 0;
  };
  std::map<NodeId, std::pair<std::vector<size_t>, std::vector<size_t>>> edits; // retyped, cast
  // Every use of v an operand of bf16 products: a matmul's, a region's that only such matmuls
  // read, or through a view (a reshape) whose every use is one.
  std::function<bool(ValueId)> onlyProducts = [&](ValueId v) {
    if (isOutput[static_cast<size_t>(v)] || users[static_cast<size_t>(v)].empty())
      return false;
    for (NodeId u : users[static_cast<size_t>(v)]) {
      const Node &n = g.node(u);
      bool product = bf16Product(n);
      if (n.op == OpKind::Fusion) {
        product = true;
        for (size_t i = 0; i < n.operands.size(); ++i)
          product = product && (n.operands[i] != v || readsOnlyProducts(u, i));
      }
      if (opInfo(n.op).view)
        product = onlyProducts(n.results[0]);
      if (!product)
        return false;
    }
    return true;
  };
  // v and its views stored in bf16, and the regions that read them told so.
  std::function<void(ValueId)> store = [&](ValueId v) {
    g.setDType(v, DType::BF16);
    for (NodeId u : users[static_cast<size_t>(v)]) {
      const Node &n = g.node(u);
      if (opInfo(n.op).view)
        store(n.results[0]);
      else if (n.op == OpKind::Fusion)
        for (size_t i = 0; i < n.operands.size(); ++i)
          if (n.operands[i] == v)
            edits[u].first.push_back(i);
    }
  };
  int64_t stored = 0, bytes = 0;
  auto stores = [&](ValueId v) {
    return g.type(v).dtype == DType::F32 && g.type(v).rank() >= 2 && onlyProducts(v);
  };
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()); ++id) {
    if (g.node(id).erased)
      continue;
    if (const int y = opInfo(g.node(id).op).bf16YResult; y >= 0) {
      const ValueId v = g.node(id).results[static_cast<size_t>(y)];
      if (!stores(v))
        continue;
      if (Status s = g.node(id).attrs.set("bf16_y", true); !s)
        return s.error();
      store(v);
      ++stored;
      bytes += 2 * g.type(v).numElements();
      continue;
    }
    if (g.node(id).op != OpKind::Fusion)
      continue;
    for (size_t k = 0; k < g.node(id).results.size(); ++k) {
      const ValueId v = g.node(id).results[k];
      const Graph &body = regionBody(g.node(id));
      const ValueId x = body.outputs()[k].value;
      const NodeId def = body.value(x).def;
      if ((def != kNone && regionRole(body.node(def).op) == RegionRole::Reduction) || !stores(v))
        continue;
      edits[id].second.push_back(k);
      store(v);
      ++stored;
      bytes += 2 * g.type(v).numElements();
    }
  }
  for (auto &[id, edit] : edits)
    if (Status s = editRegion(g.node(id), edit.first, edit.second); !s)
      return s.error();
  if (stored == 0)
    return false;
  stats.count("{} values only bf16 products read stored in bf16", stored);
  stats.count("{} bytes saved by them", bytes);
  return true;
}

} // namespace kiln::passes

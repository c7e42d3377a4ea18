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
#include <memory>

#include "ir/ops/region.h"
#include "passes/passes.h"

namespace kiln::passes {
using namespace kiln::ir;

namespace {

bool bf16Product(const Node &n) {
  return n.op == OpKind::Matmul && n.attrs.getBool("bf16_products");
}

// Whether region n's body reads its input i only as operands of matmuls with bf16 products.
bool bodyReadsOnlyProducts(const Node &n, size_t i) {
  const Graph &body = regionBody(n);
  const ValueId in = body.args()[i].value;
  for (const Output &o : body.outputs())
    if (o.value == in)
      return false;
  for (const Node &b : body.nodes())
    for (ValueId v : b.operands)
      if (v == in && !bf16Product(b))
        return false;
  return true;
}

// Region n with its body's input i stored in bf16 (its matmuls take it as it is).
Status retypeRegionInput(Node &n, size_t i) {
  auto body = std::make_shared<Graph>(regionBody(n));
  body->setArgDType(static_cast<int32_t>(i), DType::BF16);
  return n.attrs.set("body", Region{std::move(body)});
}

// Region n with its output k rounded to bf16 by a cast at the end of its body.
Status castRegionOutput(Node &n, size_t k) {
  auto body = std::make_shared<Graph>(regionBody(n));
  std::vector<Output> outputs(body->outputs().begin(), body->outputs().end());
  const ValueId x = outputs[k].value;
  Expected<NodeId> cast = body->addNode(OpKind::Cast, {x}, {{"dtype", DType::BF16}}, n.loc);
  if (!cast)
    return cast.error();
  outputs[k].value = body->result(*cast);
  body->setOutputs(std::move(outputs));
  return n.attrs.set("body", Region{std::move(body)});
}

} // namespace

Expected<bool> runBf16Activations(Graph &g, PassStats &stats) {
  const std::vector<std::vector<NodeId>> users = g.users();
  std::vector<bool> isOutput(static_cast<size_t>(g.numValues()), false);
  for (const Output &o : g.outputs())
    isOutput[static_cast<size_t>(o.value)] = true;
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
          product = product && (n.operands[i] != v || bodyReadsOnlyProducts(n, i));
      }
      if (opInfo(n.op).view)
        product = onlyProducts(n.results[0]);
      if (!product)
        return false;
    }
    return true;
  };
  // v and its views stored in bf16, and the regions that read them told so.
  std::function<Status(ValueId)> store = [&](ValueId v) -> Status {
    g.setDType(v, DType::BF16);
    for (NodeId u : users[static_cast<size_t>(v)]) {
      Node &n = g.node(u);
      if (opInfo(n.op).view) {
        if (Status s = store(n.results[0]); !s)
          return s;
        continue;
      }
      if (n.op != OpKind::Fusion)
        continue;
      for (size_t i = 0; i < n.operands.size(); ++i)
        if (n.operands[i] == v &&
            regionBody(n).type(regionBody(n).args()[i].value).dtype != DType::BF16)
          if (Status s = retypeRegionInput(n, i); !s)
            return s;
    }
    return {};
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
      if (Status s = store(v); !s)
        return s.error();
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
      if (Status s = castRegionOutput(g.node(id), k); !s)
        return s.error();
      if (Status s = store(v); !s)
        return s.error();
      ++stored;
      bytes += 2 * g.type(v).numElements();
    }
  }
  if (stored == 0)
    return false;
  stats.count("{} values only bf16 products read stored in bf16", stored);
  stats.count("{} bytes saved by them", bytes);
  return true;
}

} // namespace kiln::passes

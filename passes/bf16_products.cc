// Mixed precision: every f32 matmul and attention takes bf16 products.
//   matmul(a, b){...}  =>  matmul(a, b){..., bf16_products = true}
//   attention(q, k, v, ..){...}  =>  attention(q, k, v, ..){..., bf16_products = true}
//   (attention_backward likewise)
// Each operand element is rounded to bf16 where it is multiplied, the products (exact in f32)
// are summed in f32 (ir/ops/matmul.h); the GEMM rounds while it packs (runtime/kernels/gemm.cc),
// so the graph gains no cast and no bf16 copy of an operand. What stays f32: every other op --
// norms, softmax and its statistics, the loss, reductions, the optimizer -- and every value in
// memory, parameters (the master weights) and optimizer moments included. Attention's two
// products (and the backward's four) round their operands the same way (ir/ops/fused.h); its
// softmax and log-sum-exp stay f32.
// The stages run it after the graph's other passes, before lowering (passes/stages.h), so that
// the backward's and the fused graph's matmuls are marked too; marked before autodiff, a
// matmul's gradient products take its precision (matmul_grad.cc).
#include <memory>

#include "ir/ops/region.h"
#include "passes/passes.h"

namespace kiln::passes {

namespace {

// Marks g's f32 products, those in its regions' bodies included (a graph read from a file may be
// lowered already: `kiln dump --stage=optimized`); counts them and the f64 and bf16 ones it
// leaves.
Status mark(ir::Graph &g, int64_t &marked, int64_t &f64, int64_t &bf16) {
  for (ir::NodeId id = 0; id < static_cast<ir::NodeId>(g.nodes().size()); ++id) {
    ir::Node &n = g.node(id);
    if (n.erased)
      continue;
    if (n.op == ir::OpKind::Fusion) {
      auto body = std::make_shared<ir::Graph>(ir::regionBody(n));
      const int64_t before = marked;
      if (Status s = mark(*body, marked, f64, bf16); !s)
        return s;
      if (marked > before)
        if (Status s = n.attrs.set("body", ir::Region{std::move(body)}); !s)
          return s;
      continue;
    }
    const bool products = n.op == ir::OpKind::Matmul || n.op == ir::OpKind::Attention ||
                          n.op == ir::OpKind::AttentionBackward;
    if (!products || n.attrs.getBool("bf16_products"))
      continue;
    if (g.type(n.results[0]).dtype != ir::DType::F32) {
      (g.type(n.results[0]).dtype == ir::DType::F64 ? f64 : bf16) += 1;
      continue;
    }
    if (Status s = n.attrs.set("bf16_products", true); !s)
      return s;
    ++marked;
  }
  return {};
}

} // namespace

Expected<bool> runBf16Products(ir::Graph &g, PassStats &stats) {
  int64_t marked = 0, f64 = 0, bf16 = 0;
  if (Status s = mark(g, marked, f64, bf16); !s)
    return s.error();
  // Asked of a graph whose products are all f64 or bf16 (a model built with dtype=f64 or bf16),
  // mixed precision would silently be the graph unchanged.
  if (marked == 0 && f64 + bf16 > 0)
    return makeError("bf16 products round f32 operands; this graph's {} matmuls and attentions "
                     "are {} (a model of dtype {}: leave out --precision bf16, or build it in "
                     "f32)",
                     f64 + bf16, f64 > 0 ? "f64" : "bf16", f64 > 0 ? "f64" : "bf16");
  if (marked == 0)
    return false;
  stats.count("{} matmuls and attentions take bf16 products", marked);
  return true;
}

} // namespace kiln::passes

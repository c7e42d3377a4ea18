// Head-transpose folding into attention:
//   attention(transpose(q'), transpose(k'), transpose(v') [, mask] [, bias])   (perm [0,2,1,3])
//     =>  out' , lse = attention(q', k', v' [, mask] [, bias]){bthd = true}
//         out = transpose(out'){perm = [0,2,1,3]}
// A model splits heads as reshape([B, T, D] -> [B, T, H, Dh]) then a transpose to attention's
// [B, H, T, Dh], and merges them back by the inverse transpose: four copies of an activation per
// layer (twice as many reads and writes in a training step, with the gradients' transposes). In
// the bthd layout attention reads q', k', v' where they are and writes out' where the merge
// wants it; the transpose left on out' meets the model's merge transpose and cleanup's simplify
// cancels the pair (transpose(transpose(x)) with inverse perms => x). Folds only when all three
// operands are such transposes, so nothing is copied that was not before; the transposes stay
// if anything else reads them (DCE removes them otherwise).
#include <vector>

#include "ir/builder.h"
#include "passes/passes.h"
#include "passes/rewrite.h"

namespace kiln::passes {
namespace {

const std::vector<int64_t> kSwapHeads = {0, 2, 1, 3};

// The source of v if v = transpose(x){perm = [0,2,1,3]}, else kNone.
ir::ValueId headTransposeSource(const ir::Graph &g, ir::ValueId v) {
  const ir::NodeId d = g.value(v).def;
  if (d == ir::kNone)
    return ir::kNone;
  const ir::Node &t = g.node(d);
  return !t.erased && t.op == ir::OpKind::Transpose && t.attrs.getInts("perm") == kSwapHeads
             ? t.operands[0]
             : ir::kNone;
}

// attention %id in the [B, H, T, D] layout whose q, k and v are each a head transpose.
Expected<bool> foldHeadTranspose(Rewriter &r, ir::NodeId id) {
  ir::Graph &g = r.g;
  const ir::Node &n = g.node(id);
  if (n.attrs.getBool("bthd"))
    return false;
  std::vector<ir::ValueId> operands = n.operands; // a copy: emitting moves the nodes
  bool all = true;
  for (size_t i = 0; i < 3 && all; ++i)
    all = (operands[i] = headTransposeSource(g, operands[i])) != ir::kNone;
  if (!all)
    return false;
  ir::Attrs attrs = n.attrs;
  if (Status s = attrs.set("bthd", true); !s)
    return s.error();
  const ir::ValueId out = n.results[0], lse = n.results[1];
  const ir::SourceLoc loc = n.loc;
  const ir::NodeId gradOf = n.gradOf;
  Expected<ir::NodeId> att = g.addNode(ir::OpKind::Attention, operands, std::move(attrs), loc);
  if (!att)
    return makeError("fold-head-transpose: attention %{}: {}", out, att.error().message);
  ir::Builder b(g, loc, gradOf);
  r.replace(out, b.emit(ir::OpKind::Transpose, {g.node(*att).results[0]}, {{"perm", kSwapHeads}}));
  r.replace(lse, g.node(*att).results[1]);
  g.eraseNode(id, *att);
  return true;
}

} // namespace

Expected<bool> runFoldHeadTranspose(ir::Graph &g, PassStats &stats) {
  return rewriteNodes(g, ir::OpKind::Attention, stats, "attentions given the bthd layout: {}",
                      &foldHeadTranspose);
}

} // namespace kiln::passes

// Transpose folding into matmul:
//   matmul(transpose(a){perm swaps the last two dims}, b){transpose_a = t}
//     =>  matmul(a, b){transpose_a = !t}                    (and likewise for b)
// matmul reads either operand as stored or transposed in its last two dims, so a transpose that
// only swaps those is free there: (A^T)^T = A. Transposes that move a batch dim ([0,2,1,3] in
// attention's head split) are not matrix transposes and stay. The transpose node itself stays if
// anything else uses it (DCE removes it otherwise).
#include <vector>

#include "passes/passes.h"

namespace kiln::passes {
namespace {

// [0, 1, ..., r-3, r-1, r-2] for r >= 2.
bool swapsLastTwo(const std::vector<int64_t> &perm) {
  size_t r = perm.size();
  if (r < 2 || perm[r - 2] != static_cast<int64_t>(r - 1) ||
      perm[r - 1] != static_cast<int64_t>(r - 2))
    return false;
  for (size_t i = 0; i + 2 < r; ++i)
    if (perm[i] != static_cast<int64_t>(i))
      return false;
  return true;
}

} // namespace

Expected<bool> runFoldTranspose(ir::Graph &g, PassStats &stats) {
  int64_t folded = 0;
  for (ir::NodeId id = 0; id < static_cast<ir::NodeId>(g.nodes().size()); ++id) {
    ir::Node &n = g.node(id);
    if (n.erased || n.op != ir::OpKind::Matmul)
      continue;
    for (auto [slot, flag] :
         {std::pair{size_t{0}, "transpose_a"}, std::pair{size_t{1}, "transpose_b"}}) {
      // A chain of such transposes folds one at a time.
      for (;;) {
        ir::NodeId d = g.value(n.operands[slot]).def;
        if (d == ir::kNone)
          break;
        const ir::Node &t = g.node(d);
        if (t.op != ir::OpKind::Transpose || !swapsLastTwo(t.attrs.getInts("perm")))
          break;
        // matmul(a^T){t} reads a^T transposed iff t: the same as reading a transposed iff !t.
        n.operands[slot] = t.operands[0];
        [[maybe_unused]] Status s = n.attrs.set(flag, !n.attrs.getBool(flag));
        ++folded;
      }
    }
  }
  if (folded == 0)
    return false;
  g.dropMemoryPlan(); // the matmuls were edited in place: lifetimes changed
  stats.count("folded {} transposes into matmul", folded);
  return true;
}

} // namespace kiln::passes

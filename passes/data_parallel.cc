// Data parallelism: N ranks each run the training step on their own slice of the global batch,
// and the update must be the whole batch's, so each rank's gradients and loss become their mean
// over the ranks:
//   gradient(P) = g  =>  gradient(P) = all_reduce_wait(all_reduce_start(g){ranks = N}){ranks = N}
//   loss = l         =>  loss = all_reduce(l){ranks = N}
// The mean loss of N slices of equal weight is the whole batch's mean loss, and its gradient the
// mean of theirs (a task whose slices score different numbers of targets, mlm's masks, weighs
// each rank's mean alike, as PyTorch's DistributedDataParallel does). It runs between autodiff and
// the optimizer (passes/stages.cc), so that clipping, the non-finite guard and the update see the
// averaged values: every rank computes the same update from the same numbers. A gradient's
// reduction is split in start and wait so that it can run while the backward goes on
// (schedule-collectives starts it as soon as the gradient is made); the loss, one number, is
// reduced in one op.
#include "ir/builder.h"
#include "passes/passes.h"

namespace kiln::passes {

Expected<bool> averageOverRanks(ir::Graph &g, int64_t ranks, PassStats &stats) {
  if (ranks < 1)
    return makeError("data-parallel: ranks must be at least 1, got {}", ranks);
  if (ranks == 1)
    return false;
  std::vector<ir::Output> outputs(g.outputs().begin(), g.outputs().end());
  ir::Builder b(g);
  int64_t reduced = 0, floats = 0;
  for (ir::Output &o : outputs) {
    if (o.role != ir::OutputRole::Gradient && o.role != ir::OutputRole::Loss)
      continue;
    floats += g.type(o.value).numElements();
    if (o.role == ir::OutputRole::Loss) {
      o.value = b.emit(ir::OpKind::AllReduce, {o.value}, {{"ranks", ranks}});
    } else {
      const ir::ValueId pending = b.emit(ir::OpKind::AllReduceStart, {o.value}, {{"ranks", ranks}});
      o.value = b.emit(ir::OpKind::AllReduceWait, {pending}, {{"ranks", ranks}});
    }
    ++reduced;
  }
  if (reduced == 0)
    return makeError("data-parallel: the graph has no loss or gradient output to average");
  g.setOutputs(std::move(outputs));
  stats.count("{} gradients and losses averaged over the ranks", reduced);
  stats.count("{} floats all-reduced per step", floats);
  return true;
}

} // namespace kiln::passes

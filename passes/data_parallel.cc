// Data parallelism: N ranks each run the training step on their own slice of the global batch,
// and the update must be the whole batch's, so each rank's gradients and loss become their mean
// over the ranks. The gradients, in the order the backward makes them, are gathered in buckets
// (PyTorch DDP's): one message per bucket, where one per gradient would pay the network's latency
// (about 2(N-1) hops of it in a ring) for each of a model's hundreds of tensors:
//   gradients(P1..Pk) = g1..gk  =>
//     b = concat(reshape(g1){[n1]}, .., reshape(gk){[nk]}){axis = 0}
//     w = all_reduce_wait(all_reduce_start(b){ranks = N}){ranks = N}
//     gradient(Pi) = reshape(slice(w){axis = 0, start = n1+..+n(i-1), end = n1+..+ni}){shape(gi)}
//   (a bucket of one gradient is reduced as it is: all_reduce_wait(all_reduce_start(g)))
//   loss = l  =>  loss = all_reduce(l){ranks = N}
// With the sharded optimizer (ZeRO stage 1) the gradients are left as they are: its reduce-scatter
// averages them (passes/optimizer.cc).
// A bucket closes once it holds bucketBytes, the first one at 1 MiB already (DDP's
// first_bucket_bytes: a reduction starts early in the backward, where one bucket of the whole
// model would start only at its end); a gradient of a bucket's size or more has one of its own
// (no copy: concat and slice copy their bytes, as DDP's buckets do); bucketBytes = 0 gives each
// gradient its own. The mean loss of N slices of equal weight is the whole batch's mean
// loss, and its gradient the mean of theirs (a task whose slices score different numbers of
// targets, mlm's masks, weighs each rank's mean alike, as DDP does). It runs between autodiff and
// the optimizer (passes/stages.cc), so that clipping, the non-finite guard and the update see the
// averaged values: every rank computes the same update from the same numbers. A reduction is
// split in start and wait so that it can run while the backward goes on (schedule-collectives
// starts each bucket as soon as its last gradient is made); the loss, one number, is reduced in
// one op.
#include <algorithm>

#include "ir/builder.h"
#include "passes/passes.h"

namespace kiln::passes {

namespace {

struct Gradient {
  size_t output;     // its index among the graph's outputs
  ir::NodeId madeBy; // the node that makes it (kNone: an argument), for the backward's order
  int64_t bytes;
};

// One bucket's reduction: the outputs' values become the ranks' means.
void reduceBucket(ir::Graph &g, std::vector<ir::Output> &outputs, std::span<const Gradient> bucket,
                  int64_t ranks) {
  ir::Builder b(g);
  auto reduce = [&](ir::ValueId v) {
    const ir::ValueId pending = b.emit(ir::OpKind::AllReduceStart, {v}, {{"ranks", ranks}});
    return b.emit(ir::OpKind::AllReduceWait, {pending}, {{"ranks", ranks}});
  };
  if (bucket.size() == 1) {
    ir::ValueId &v = outputs[bucket[0].output].value;
    v = reduce(v);
    return;
  }
  std::vector<ir::ValueId> flat;
  std::vector<ir::Shape> shapes;
  for (const Gradient &x : bucket) {
    const ir::ValueId v = outputs[x.output].value;
    shapes.push_back(g.type(v).shape);
    flat.push_back(b.reshape(v, {g.type(v).numElements()}));
  }
  const ir::ValueId mean = reduce(b.concat(flat, 0));
  int64_t start = 0;
  for (size_t i = 0; i < bucket.size(); ++i) {
    const int64_t end = start + g.type(flat[i]).numElements();
    const ir::ValueId part =
        b.emit(ir::OpKind::Slice, {mean}, {{"axis", int64_t{0}}, {"start", start}, {"end", end}});
    outputs[bucket[i].output].value = b.reshape(part, shapes[i]);
    start = end;
  }
}

} // namespace

Expected<bool> averageOverRanks(ir::Graph &g, const DataParallel &dp, PassStats &stats) {
  if (dp.ranks < 1)
    return makeError("data-parallel: ranks must be at least 1, got {}", dp.ranks);
  if (dp.bucketBytes < 0)
    return makeError("data-parallel: the bucket size must be at least 0 bytes, got {}",
                     dp.bucketBytes);
  if (dp.ranks == 1)
    return false;
  std::vector<ir::Output> outputs(g.outputs().begin(), g.outputs().end());
  std::vector<Gradient> gradients;
  int64_t losses = 0, floats = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    ir::Output &o = outputs[i];
    // The reductions average f32 (runtime/kernel_abi.h kiln_all_reduce); a model of another dtype
    // aborted on an ill-typed node.
    if ((o.role == ir::OutputRole::Loss || o.role == ir::OutputRole::Gradient) &&
        g.type(o.value).dtype != DType::F32)
      return makeError("data-parallel: output \"{}\" is {}: the ranks average f32 losses and "
                       "gradients (a model of --set dtype=f32; --precision bf16 keeps f32 weights "
                       "and gradients, with bf16 products)",
                       o.name, typeString(g.type(o.value)));
    if (o.role == ir::OutputRole::Loss) {
      o.value = ir::Builder(g).emit(ir::OpKind::AllReduce, {o.value}, {{"ranks", dp.ranks}});
      ++losses, ++floats;
    } else if (o.role == ir::OutputRole::Gradient && !dp.shardOptimizer) {
      const ir::Type &t = g.type(o.value);
      gradients.push_back({i, g.value(o.value).def, t.bytes()});
      floats += t.numElements();
    }
  }
  if (losses == 0 && gradients.empty())
    return makeError("data-parallel: the graph has no loss or gradient output to average");
  // The backward's order (an argument's gradient first): buckets fill as the step makes them.
  std::stable_sort(gradients.begin(), gradients.end(), [](const Gradient &a, const Gradient &b) {
    return (a.madeBy == ir::kNone ? -1 : int64_t{a.madeBy}) <
           (b.madeBy == ir::kNone ? -1 : int64_t{b.madeBy});
  });
  int64_t buckets = 0;
  size_t first = 0, bytes = 0; // the open bucket: gradients[first, i)
  auto close = [&](size_t end) {
    if (end > first) {
      reduceBucket(g, outputs, std::span(gradients).subspan(first, end - first), dp.ranks);
      ++buckets;
    }
    first = end, bytes = 0;
  };
  for (size_t i = 0; i < gradients.size(); ++i) {
    const int64_t cap =
        buckets == 0 ? std::min(DataParallel::kFirstBucketBytes, dp.bucketBytes) : dp.bucketBytes;
    if (gradients[i].bytes >= cap) { // its own bucket
      close(i);
      close(i + 1);
      continue;
    }
    bytes += static_cast<size_t>(gradients[i].bytes);
    if (static_cast<int64_t>(bytes) >= cap)
      close(i + 1);
  }
  close(gradients.size());
  g.setOutputs(std::move(outputs));
  stats.count("{} gradients and losses averaged over the ranks",
              losses + static_cast<int64_t>(gradients.size()));
  stats.count("{} reductions of gradients (buckets) per step", buckets);
  stats.count("{} floats all-reduced per step", floats);
  return true;
}

} // namespace kiln::passes

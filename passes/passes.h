// Every graph pass's entry point (the registry in registry.cc lists them with their names). Each
// is defined in its own file, which states its rewrite at the top.
#pragma once

#include <set>
#include <string>

#include "passes/pass.h"

namespace kiln::passes {

Expected<bool> runDce(ir::Graph &g, PassStats &stats);                 // dce.cc
Expected<bool> runCse(ir::Graph &g, PassStats &stats);                 // cse.cc
Expected<bool> runFoldConstants(ir::Graph &g, PassStats &stats);       // fold_constants.cc
Expected<bool> runSimplify(ir::Graph &g, PassStats &stats);            // simplify.cc
Expected<bool> runFoldTranspose(ir::Graph &g, PassStats &stats);       // fold_transpose.cc
Expected<bool> runFoldBatchSum(ir::Graph &g, PassStats &stats);        // fold_batch_sum.cc
Expected<bool> runFoldHeadTranspose(ir::Graph &g, PassStats &stats);   // fold_head_transpose.cc
Expected<bool> runFoldScatterAdd(ir::Graph &g, PassStats &stats);      // fold_scatter_add.cc
Expected<bool> runFuseAttention(ir::Graph &g, PassStats &stats);       // fuse_attention.cc
Expected<bool> runFuseLayerNorm(ir::Graph &g, PassStats &stats);       // fuse_layer_norm.cc
Expected<bool> runFuseCrossEntropy(ir::Graph &g, PassStats &stats);    // fuse_cross_entropy.cc
Expected<bool> runFuseElementwise(ir::Graph &g, PassStats &stats);     // fuse_elementwise.cc
Expected<bool> runNoDropout(ir::Graph &g, PassStats &stats);           // no_dropout.cc
Expected<bool> runAutodiff(ir::Graph &g, PassStats &stats);            // stages.cc
Expected<bool> runAdamW(ir::Graph &g, PassStats &stats);               // stages.cc
Expected<bool> runPlanMemory(ir::Graph &g, PassStats &stats);          // memory_plan.cc
Expected<bool> runBf16Products(ir::Graph &g, PassStats &stats);        // bf16_products.cc
Expected<bool> runBf16Weights(ir::Graph &g, PassStats &stats);         // bf16_weights.cc
Expected<bool> runBf16Activations(ir::Graph &g, PassStats &stats);     // bf16_activations.cc
Expected<bool> runBf16WeightCopies(ir::Graph &g, PassStats &stats);    // bf16_weight_copies.cc
Expected<bool> runScheduleCollectives(ir::Graph &g, PassStats &stats); // schedule_collectives.cc
Expected<bool> runScheduleUpdates(ir::Graph &g, PassStats &stats);     // schedule_updates.cc
// How a data-parallel step averages its gradients: over `ranks` ranks, gathered in buckets that
// close once they hold bucketBytes (0: each gradient reduced on its own; 25 MiB by default, as
// PyTorch DDP's bucket_cap_mb), the first at 1 MiB; or, shardOptimizer (ZeRO stage 1), left to
// the sharded optimizer's reduce-scatter (passes/optimizer.h), the loss alone averaged here.
struct DataParallel {
  static constexpr int64_t kDefaultBucketBytes = int64_t{25} << 20;
  static constexpr int64_t kFirstBucketBytes = int64_t{1} << 20; // (at most; see the pass)
  int64_t ranks = 1;
  int64_t bucketBytes = kDefaultBucketBytes;
  bool shardOptimizer = false;
};
// Not in the registry (it takes the ranks): trainingStep runs it.
Expected<bool> averageOverRanks(ir::Graph &g, const DataParallel &dp,
                                PassStats &stats); // data_parallel.cc
// Not in the registry (it takes names): the f32 params named in `names` that only bf16 products
// and lookups read stored in bf16, as bf16-weights stores those a product reads (their lookups
// widened); how many. passes::optimizedForwards runs it (bf16_weights.cc).
Expected<int64_t> storeWeightsInBf16(ir::Graph &g, const std::set<std::string> &names);

} // namespace kiln::passes

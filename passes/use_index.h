// The uses of a graph's values, kept current while a fusion pass (fuse_attention.cc,
// fuse_layer_norm.cc) rewrites the graph match by match: who reads a value and how often, whether
// one value is computed from another, redirecting uses and dropping what died. Asked per match,
// these would each walk the whole graph (Graph::users, useCounts, replaceAllUses), making the
// pass quadratic in depth; kept here, each costs about the uses it touches.
//
// Nodes the pass appends (through a Builder or Graph::addNode) are taken in on the next call.
// Every other edit of uses goes through this index: replaceAllUses and eraseDead here, not the
// Graph's own, and no operand written through Graph::node().
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ir/graph.h"

namespace kiln::passes {

class UseIndex {
public:
  explicit UseIndex(ir::Graph &g);

  // The live nodes that read v, in node order, once per operand that reads it (Graph::users()).
  std::span<const ir::NodeId> users(ir::ValueId v);
  // Uses of v by live nodes and graph outputs (Graph::useCounts()).
  int32_t useCount(ir::ValueId v);
  bool isOutput(ir::ValueId v);

  // Graph::replaceAllUses(from, to), costing the uses of `from`.
  void replaceAllUses(ir::ValueId from, ir::ValueId to);
  // Erases the nodes among `seeds` (and, transitively, their operands' defining nodes) whose
  // results are no longer used by a live node or an output.
  void eraseDead(std::span<const ir::NodeId> seeds);

  // Whether `from` is computed from `target` (or is it). A search back from `from` that stops at
  // nodes placed before target's in a topological numbering kept for the graph under rewrite (one
  // layer of a model does not walk the layers below it).
  bool dependsOn(ir::ValueId from, ir::ValueId target);
  // Whether dependsOn still stops early: no redirect has broken the numbering (for tests).
  bool pruning() const { return ordered_; }

private:
  void sync();
  void dropErased(ir::ValueId v);

  ir::Graph &g_;
  ir::NodeId synced_ = 0;                      // nodes taken in so far
  std::vector<std::vector<ir::NodeId>> users_; // per value; may hold erased nodes until asked
  std::vector<int32_t> liveUses_;              // per value: operands of live nodes reading it
  std::vector<int32_t> outputUses_;            // per value: graph outputs naming it
  // A topological numbering: every node's is above those of the nodes defining its operands.
  // `ordered_` is false once an edit broke that (a use redirected to a value numbered later);
  // dependsOn then searches without stopping early.
  std::vector<int64_t> rank_;
  bool ordered_ = true;
  std::vector<uint32_t> seen_; // dependsOn's visited marks, valid when equal to stamp_
  uint32_t stamp_ = 0;
};

} // namespace kiln::passes

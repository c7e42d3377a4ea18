// Elementwise fusion and matmul epilogues:
//   y1 = f(x); y2 = g(y1, z); r = reduce(y2)  =>  y2, r = fusion(x, z) {body = f, g, reduce}
//   m = matmul(a, b); y = act(m + bias) + res  =>  y = fusion(a, b, bias, res) {body = matmul, ..}
// Groups of pointwise ops over one iteration space (their common result shape) become one region
// op (ir/ops/region.h) whose body holds them, so a backend runs them as one loop nest and no
// intermediate goes to memory. A reduction of a group's value joins it as a sink; a matmul
// starts a group, and the pointwise ops on its result join it as the matmul's epilogue.
// Constants used by a group are copied into its body. Groups of a single op stay as they are.
//
// One walk in node order, greedy: a pointwise node joins the groups of its operands' producers
// that share its result shape. Merging must not make a cycle: a region runs where its last
// member ran, so every outside user of a group's values must come after the node that joins;
// a group whose value is used by an earlier outsider stays apart.
// Linear in the graph: building a region touches only its members, their operands and users (no
// per-region table over all values), and the uses of the regions' results are redirected in one
// sweep at the end rather than by a walk of the whole graph per result.
#include <algorithm>
#include <cassert>
#include <memory>

#include <fmt/format.h>

#include "ir/ops/region.h"
#include "passes/passes.h"

namespace kiln::passes {
using namespace kiln::ir;

namespace {

struct Group {
  std::vector<NodeId> members; // in node order once built
  Shape space;
  bool hasMatmul = false;
  bool hasReduction = false;
  bool backward = false; // its members are backward nodes (gradOf set)
  bool dead = false;     // merged into another group
  // A node already walked reads one of its values from outside it: no later node may join it.
  bool usedOutside = false;
};

class Fuser {
public:
  explicit Fuser(Graph &g)
      : g_(g), users_(g.users()), groupOf_(g.nodes().size(), -1), map_(g.numValues(), kNone),
        isGraphOutput_(g.numValues(), false), repl_(g.numValues(), kNone),
        reaches_(g.numValues(), 0) {
    for (const Output &o : g.outputs())
      isGraphOutput_[o.value] = true;
  }

  void group() {
    for (NodeId id = 0; id < static_cast<NodeId>(g_.nodes().size()); ++id) {
      const Node &n = g_.node(id);
      if (n.erased)
        continue;
      if (n.results.size() == 1) {
        const Shape &out = g_.type(n.results[0]).shape;
        switch (regionRole(n.op)) {
        case RegionRole::None:
          break;
        case RegionRole::Matmul:
          newGroup(id, out, /*matmul=*/true);
          break;
        case RegionRole::Reduction:
          joinReduction(id);
          break;
        case RegionRole::Pointwise:
          if (n.op != OpKind::Constant) // constants are copied into the bodies that use them
            joinPointwise(id, out);
          break;
        }
      }
      noteOutsideUses(id);
    }
  }

  // Replaces each group of two or more members by a fusion node. The members' results that are
  // used outside keep their value ids in the graph until the end, where every use reads the
  // region's result instead (the regions' inputs are found by what defines them, so a region that
  // reads an earlier region's result sees one of its members, outside its own group).
  Status rewrite(PassStats &stats) {
    for (Group &grp : groups_) {
      if (grp.dead || grp.members.size() < 2)
        continue;
      std::sort(grp.members.begin(), grp.members.end());
      Expected<bool> built = build(grp);
      if (!built)
        return built.error();
      if (!*built)
        continue;
      stats.count(grp.hasMatmul ? "fused {} matmul epilogues" : "made {} elementwise regions");
      stats.count("moved {} nodes into regions", static_cast<int64_t>(grp.members.size()));
      ++regions_;
    }
    if (regions_ > 0)
      g_.replaceUses(repl_);
    return {};
  }

  int regions() const { return regions_; }

private:
  bool producedByReduction(ValueId v) const {
    NodeId d = g_.value(v).def;
    return d != kNone && regionRole(g_.node(d).op) == RegionRole::Reduction;
  }

  int newGroup(NodeId id, const Shape &space, bool matmul) {
    groups_.push_back(Group{{id}, space, matmul, false, isBackward(id), false});
    groupOf_[id] = static_cast<int>(groups_.size()) - 1;
    return groupOf_[id];
  }

  bool isBackward(NodeId id) const { return g_.node(id).gradOf != kNone; }
  // Whether node id, not a backward node, reads a value of backward group k that no reduction
  // reads through pointwise ops: an update that takes its gradient alone (not a clipping's or a
  // guard's global norm, which needs every gradient first: the gradient stays a value there).
  bool isUpdateOf(int k, NodeId id) {
    if (!groups_[k].backward || isBackward(id))
      return false;
    bool reads = false;
    for (ValueId v : g_.node(id).operands)
      if (NodeId d = g_.value(v).def; d != kNone && groupOf_[d] == k) {
        if (reachesReduction(v))
          return false;
        reads = true;
      }
    return reads;
  }
  // Whether a reduction reads v, directly or through pointwise ops (memoized: 1 no, 2 yes).
  bool reachesReduction(ValueId v) {
    if (reaches_[v] == 0) {
      reaches_[v] = 1;
      for (NodeId u : users_[v]) {
        const RegionRole role = regionRole(g_.node(u).op);
        if (role == RegionRole::Reduction ||
            (role == RegionRole::Pointwise && reachesReduction(g_.node(u).results[0])))
          reaches_[v] = 2;
      }
    }
    return reaches_[v] == 2;
  }

  // Whether node `id` may join group k: the same phase (forward or update vs backward: a region
  // stays one of them, so dumps and the memory report keep their meaning), except that an update
  // joins the backward matmul that makes its gradient, as its epilogue (the region is then an
  // update, which schedule-updates moves up to its operands), and no outside user of the group's
  // values comes before it (usedOutside).
  bool mayJoin(int k, NodeId id) {
    if (groups_[k].backward != isBackward(id) && !(groups_[k].hasMatmul && isUpdateOf(k, id)))
      return false;
    return !groups_[k].usedOutside;
  }

  // Marks the groups whose values the walked node `id` reads without having joined them. Such a
  // group stays marked: it takes no later node (mayJoin), so it never merges with the node's
  // group either, and its outside users stay outside. A flag set once per use instead of a walk
  // of the group's members and their users at every join, which made long chains quadratic
  // (a chain of 40k pointwise ops took 48 s).
  void noteOutsideUses(NodeId id) {
    for (ValueId v : g_.node(id).operands)
      if (NodeId d = g_.value(v).def; d != kNone && groupOf_[d] >= 0 && groupOf_[d] != groupOf_[id])
        groups_[groupOf_[d]].usedOutside = true;
  }

  // Whether node id reads a reduction of group k: a reduction's result leaves its region.
  bool readsReductionOf(int k, NodeId id) const {
    for (ValueId v : g_.node(id).operands) {
      NodeId d = g_.value(v).def;
      if (d != kNone && groupOf_[d] == k && producedByReduction(v))
        return true;
    }
    return false;
  }

  void add(int k, NodeId id) {
    groups_[k].members.push_back(id);
    groupOf_[id] = k;
  }

  void merge(int into, int from) {
    for (NodeId m : groups_[from].members)
      add(into, m);
    groups_[into].hasMatmul = groups_[into].hasMatmul || groups_[from].hasMatmul;
    groups_[into].hasReduction = groups_[into].hasReduction || groups_[from].hasReduction;
    groups_[into].usedOutside = groups_[into].usedOutside || groups_[from].usedOutside;
    groups_[from].members.clear();
    groups_[from].dead = true;
  }

  // The group of the node defining v, if v is a non-reduction value of a live group.
  int groupOfValue(ValueId v) const {
    NodeId d = g_.value(v).def;
    if (d == kNone || producedByReduction(v))
      return -1;
    int k = groupOf_[d];
    return k >= 0 && !groups_[k].dead ? k : -1;
  }

  void joinPointwise(NodeId id, const Shape &out) {
    std::vector<int> candidates;
    bool matmul = false;
    for (ValueId v : g_.node(id).operands) {
      int k = groupOfValue(v);
      if (k < 0 || groups_[k].space != out ||
          std::find(candidates.begin(), candidates.end(), k) != candidates.end())
        continue;
      if (groups_[k].hasMatmul && matmul) // one matmul per region
        continue;
      if (groups_[k].hasMatmul && groups_[k].hasReduction)
        continue;
      if (!mayJoin(k, id) || readsReductionOf(k, id))
        continue;
      // A matmul region cannot take a group that reduces, nor the reverse.
      bool reduces = groups_[k].hasReduction;
      bool otherMatmul = matmul, otherReduces = false;
      for (int c : candidates)
        otherReduces = otherReduces || groups_[c].hasReduction;
      if ((groups_[k].hasMatmul && otherReduces) || (reduces && otherMatmul))
        continue;
      matmul = matmul || groups_[k].hasMatmul;
      candidates.push_back(k);
    }
    if (candidates.empty()) {
      newGroup(id, out, false);
      return;
    }
    int into = candidates[0];
    for (size_t c = 1; c < candidates.size(); ++c)
      merge(into, candidates[c]);
    add(into, id);
    groups_[into].backward = isBackward(id); // (an update joined a gradient's matmul)
  }

  // reduce(y) joins y's group as a sink when it reduces a value of the group's whole space.
  void joinReduction(NodeId id) {
    ValueId x = g_.node(id).operands[0];
    int k = groupOfValue(x);
    if (k < 0 || groups_[k].hasMatmul || g_.type(x).shape != groups_[k].space || !mayJoin(k, id))
      return;
    add(k, id);
    groups_[k].hasReduction = true;
  }

  // Builds the group's region and rewires the graph; false (nothing done) for a group with no
  // input (constants only: fold-constants' business) or no result used outside (dead: dce's).
  // An Error here is a bug of this pass (a group that breaks a region rule), reported with the
  // place of the group's last node rather than asserted, so that a user's run says where.
  Expected<bool> build(const Group &grp) {
    // map_ (graph value -> body value) holds only what the previous build set: clear that.
    for (ValueId v : mapped_)
      map_[v] = kNone;
    mapped_.clear();
    auto setMap = [&](ValueId v, ValueId to) {
      map_[v] = to;
      mapped_.push_back(v);
    };
    auto body = std::make_shared<Graph>("fusion");
    std::vector<ValueId> inputs;
    // An operand in the body: a member's result, an input, or a constant copied in on first use.
    auto bodyValue = [&](ValueId v) {
      if (map_[v] == kNone) {
        const Node &c = g_.node(g_.value(v).def);
        assert(c.op == OpKind::Constant && "an operand that is neither input nor member");
        setMap(v, body->result(*body->addNode(OpKind::Constant, {}, c.attrs, c.loc)));
      }
      return map_[v];
    };
    // Outputs: member results used outside the group or by the graph's outputs.
    std::vector<ValueId> outs;
    for (NodeId m : grp.members) {
      ValueId r = g_.node(m).results[0];
      bool outside = isGraphOutput_[r];
      for (NodeId u : users_[r])
        outside = outside || !inGroup(grp, u);
      if (outside)
        outs.push_back(r);
    }
    // Inputs first, in order of first use, so that the body's arguments precede its nodes. The
    // matmul's operands are always inputs (a region's matmul reads body inputs), constant or not.
    for (NodeId m : grp.members)
      for (ValueId v : g_.node(m).operands) {
        NodeId d = g_.value(v).def;
        bool constant = d != kNone && g_.node(d).op == OpKind::Constant;
        if (!inGroup(grp, d) && (!constant || g_.node(m).op == OpKind::Matmul) &&
            map_[v] == kNone) {
          setMap(v, body->addInput(fmt::format("in{}", inputs.size()), g_.type(v)));
          inputs.push_back(v);
        }
      }
    if (outs.empty() || inputs.empty())
      return false;
    for (NodeId m : grp.members) {
      const Node &n = g_.node(m);
      std::vector<ValueId> operands;
      for (ValueId v : n.operands)
        operands.push_back(bodyValue(v));
      Expected<NodeId> b = body->addNode(n.op, operands, n.attrs, n.loc);
      if (!b)
        return makeError("{}: {}: {}", placeOf(n, m), mnemonic(n.op), b.error().message);
      setMap(n.results[0], body->result(*b));
    }
    for (size_t k = 0; k < outs.size(); ++k)
      body->addOutput(fmt::format("out{}", k), map_[outs[k]]);
    const Node &last = g_.node(grp.members.back());
    SourceLoc loc = last.loc;
    NodeId gradOf = last.gradOf;
    Attrs attrs(opInfo(OpKind::Fusion).attrs);
    Status s = attrs.set("body", Region{std::move(body)});
    assert(s);
    (void)s;
    Expected<NodeId> fused = g_.addNode(OpKind::Fusion, inputs, std::move(attrs), loc);
    if (!fused)
      return makeError("{}: the region ending here is invalid: {}",
                       placeOf(last, grp.members.back()), fused.error().message);
    g_.node(*fused).gradOf = gradOf;
    for (size_t k = 0; k < outs.size(); ++k)
      repl_[outs[k]] = g_.node(*fused).results[k];
    for (NodeId m : grp.members)
      g_.eraseNode(m, *fused);
    return true;
  }

  bool inGroup(const Group &grp, NodeId n) const {
    return n >= 0 && n < static_cast<NodeId>(groupOf_.size()) && groupOf_[n] >= 0 &&
           &groups_[groupOf_[n]] == &grp;
  }
  Graph &g_;
  std::vector<std::vector<NodeId>> users_;
  std::vector<int> groupOf_;
  std::vector<Group> groups_;
  std::vector<ValueId> map_;        // during a build: graph value -> the body's value
  std::vector<ValueId> mapped_;     // the values map_ has set
  std::vector<bool> isGraphOutput_; // per value of the graph as it was before any region
  std::vector<ValueId> repl_;       // a member result used outside -> its region's result
  std::vector<uint8_t> reaches_;    // reachesReduction's memo, per value
  int regions_ = 0;
};

} // namespace

Expected<bool> runFuseElementwise(Graph &g, PassStats &stats) {
  Fuser f(g);
  f.group();
  if (Status s = f.rewrite(stats); !s)
    return makeError("fuse-elementwise: {}", s.error().message);
  if (f.regions() == 0)
    return false;
  g.compact();
  return true;
}

} // namespace kiln::passes

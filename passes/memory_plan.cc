// Memory planning: liveness -> buffers (in-place and view sharing) -> offsets (best fit) -> the
// graph's MemoryPlan; and the memory report. See memory_plan.h. Linear but for the placement,
// O(n log n) in practice (best_fit.cc; comparing every pair of buffers made it quadratic).
//
// A buffer is a run of bytes that one or more values occupy in turn: a value starts its own, or
// joins its operand's (in place: the operand dies at this node; view: reshape). A buffer is live
// from the node of its first value to the last use of any of its values (closed interval: at a
// node, the operands it reads and the results it writes are all live). Two buffers whose
// intervals intersect get disjoint bytes; all others may reuse the same bytes.
#include "passes/memory_plan.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "ir/ops/region.h"
#include "passes/best_fit.h"
#include "passes/passes.h"

namespace kiln::passes {
using namespace kiln::ir;

namespace {

int64_t alignUp(int64_t bytes) {
  return (bytes + kMemAlignment - 1) / kMemAlignment * kMemAlignment;
}

// Arena values into buffers: each node result that `inArena` takes starts a buffer or joins its
// operand's (in place, view). Sets each slot's bytes/share/of and bufferOf; offsets come later.
std::vector<Lifetime> formBuffers(const Graph &g, const PlanOptions &o,
                                  const std::vector<bool> &inArena, MemoryPlan &plan,
                                  std::vector<int32_t> &bufferOf) {
  std::vector<int32_t> last = lastUses(g);
  std::vector<Lifetime> buffers;
  for (NodeId n = 0; n < static_cast<NodeId>(g.nodes().size()); ++n) {
    const Node &node = g.node(n);
    assert(!node.erased && "planMemory needs a compacted graph");
    for (int k = 0; k < static_cast<int>(node.results.size()); ++k) {
      ValueId r = node.results[k];
      if (!inArena[r])
        continue;
      MemorySlot &slot = plan.slots[r];
      slot = MemorySlot{MemRegion::Arena, -1, g.type(r).bytes()};
      if (o.views && opInfo(node.op).view && inArena[node.operands[0]]) {
        slot.share = MemorySlot::Share::View;
        slot.of = node.operands[0];
      } else if (o.inPlace) {
        // The operand's buffer must end here: its members so far are all the values that can
        // still read it (a later view would be a later use), so its `end` is final. If an
        // earlier result of this node took it, it is not free (even if that result dies here).
        // Every operand in v's buffer (v itself, a view of it) must be read element for
        // element: a matmul reading a view of the buffer would see its rows overwritten.
        auto everyAliasAllows = [&](ValueId v) {
          for (ValueId u : node.operands)
            if (inArena[u] && bufferOf[u] == bufferOf[v] && !mayWriteOver(node, k, u))
              return false;
          return true;
        };
        auto takenByEarlierResult = [&](ValueId v) {
          for (int e = 0; e < k; ++e)
            if (bufferOf[node.results[e]] == bufferOf[v])
              return true;
          return false;
        };
        for (ValueId v : node.operands)
          if (inArena[v] && buffers[bufferOf[v]].end == n &&
              g.type(v).numElements() == g.type(r).numElements() &&
              plan.slots[v].bytes == slot.bytes && !takenByEarlierResult(v) &&
              everyAliasAllows(v)) {
            slot.share = MemorySlot::Share::InPlace;
            slot.of = v;
            break;
          }
      }
      if (slot.share != MemorySlot::Share::None) {
        int32_t b = bufferOf[r] = bufferOf[slot.of];
        buffers[b].end = std::max(buffers[b].end, last[r]);
      } else {
        bufferOf[r] = static_cast<int32_t>(buffers.size());
        buffers.push_back({n, last[r], alignUp(slot.bytes)});
      }
    }
  }
  return buffers;
}

// The smaller arena of the planner's two orders (best_fit.h).
Placement assignOffsets(const std::vector<Lifetime> &buffers) {
  Orders o = plannerOrders(buffers);
  Placement a = placeBestFit(buffers, o.largestFirst), b = placeBestFit(buffers, o.byStart);
  return b.peak < a.peak ? std::move(b) : std::move(a);
}

} // namespace

namespace {

// Where the update of argument `arg` (value u) can be written back without a copy: over the
// argument's own slot once nothing reads the old value any more -- strictly before u's node, or
// at u's node itself if that node reads it element for element (in place). False: u is planned
// as any other value and copied back at the end of the step (ir::updateCopies).
bool updateInPlace(const Graph &g, const PlanOptions &o, ValueId u, ValueId arg,
                   const std::vector<int32_t> &last, MemoryPlan &plan) {
  NodeId n = g.value(u).def;
  const MemorySlot &home = plan.slots[arg];
  MemorySlot slot{MemRegion::Weights, home.offset, g.type(u).bytes()};
  if (last[arg] < n) {
    plan.slots[u] = slot;
    return true;
  }
  if (last[arg] == n && o.inPlace && mayWriteOver(g.node(n), g.value(u).index, arg) &&
      g.type(arg).numElements() == g.type(u).numElements() && home.bytes == slot.bytes) {
    slot.share = MemorySlot::Share::InPlace;
    slot.of = arg;
    plan.slots[u] = slot;
    return true;
  }
  return false;
}

} // namespace

MemoryPlan planMemory(const Graph &g, const PlanOptions &options) {
  MemoryPlan plan;
  plan.slots.assign(g.numValues(), MemorySlot{});
  plan.scratch.assign(g.nodes().size(), 0);
  std::vector<bool> placed(g.numValues(), false);
  // Regions without reuse: values one after another, each 64-byte aligned.
  auto append = [&](MemRegion r, ValueId v) {
    plan.slots[v] = MemorySlot{r, plan.bytes(r), g.type(v).bytes()};
    plan.bytes(r) += alignUp(g.type(v).bytes());
    placed[v] = true;
  };
  // Arguments: parameters and state in weights, inputs in io, in argument order.
  for (const Arg &a : g.args())
    append(a.kind == Arg::Kind::Input ? MemRegion::IO : MemRegion::Weights, a.value);
  // Updates written back over their arguments where they can be.
  std::vector<bool> constant = loadTimeConstants(g);
  std::vector<int32_t> last = lastUses(g);
  std::vector<ValueId> update = updateValues(g);
  for (size_t a = 0; a < update.size(); ++a) {
    ValueId u = update[a];
    if (u != kNone && !placed[u] && !constant[u] &&
        updateInPlace(g, options, u, g.args()[a].value, last, plan))
      placed[u] = true;
  }
  // Load-time constants, then the outputs (in output order), then the arena for the rest.
  for (const Node &n : g.nodes())
    for (ValueId r : n.results)
      if (constant[r] && !placed[r])
        append(MemRegion::Constants, r);
  for (const Output &o : g.outputs())
    if (!placed[o.value])
      append(MemRegion::IO, o.value);
  std::vector<bool> inArena(g.numValues(), false);
  for (const Node &n : g.nodes())
    for (ValueId r : n.results)
      inArena[r] = !placed[r];
  std::vector<int32_t> bufferOf(g.numValues(), kNone);
  std::vector<Lifetime> buffers = formBuffers(g, options, inArena, plan, bufferOf);
  Placement placement = assignOffsets(buffers);
  plan.bytes(MemRegion::Arena) = placement.peak;
  for (ValueId v = 0; v < g.numValues(); ++v)
    if (inArena[v])
      plan.slots[v].offset = placement.offsets[bufferOf[v]];
  // Scratch: each node's kernel workspace from the start of the region, as large as the largest.
  for (NodeId n = 0; n < static_cast<NodeId>(g.nodes().size()); ++n) {
    const OpInfo &op = opInfo(g.node(n).op);
    plan.scratch[n] = op.scratchBytes ? alignUp(op.scratchBytes(g, g.node(n))) : 0;
    plan.bytes(MemRegion::Scratch) = std::max(plan.bytes(MemRegion::Scratch), plan.scratch[n]);
  }
  return plan;
}

Expected<bool> runPlanMemory(Graph &g, PassStats &stats) {
  bool hadErased =
      std::any_of(g.nodes().begin(), g.nodes().end(), [](const Node &n) { return n.erased; });
  std::optional<MemoryPlan> before;
  if (g.memoryPlan())
    before = *g.memoryPlan();
  g.compact(); // drops any plan: offsets are per value, and compact renumbers values
  MemoryPlan plan = planMemory(g);
  bool changed = hadErased || !before || *before != plan;
  g.setMemoryPlan(std::move(plan));
  MemoryStats s = memoryStats(g);
  stats.count("buffers planned", s.buffers);
  stats.count("in place", s.inPlace);
  stats.count("views", s.views);
  stats.count("arena bytes", s.arenaBytes);
  stats.count("bytes saved by reuse", s.bufferBytes - s.arenaBytes);
  stats.count("updates in place", s.updatesInPlace);
  stats.count("updates copied back", s.updateCopies);
  stats.count("total bytes", s.totalBytes);
  return changed;
}

// ---- The report ----

namespace {

// The gradient values of a graph: its gradient outputs, and in a training step (whose optimizer
// nodes are not backward nodes) the backward values that the nodes making its updates read, but
// for the factors of a gradient that an update's region makes itself (its matmul's operands:
// schedule-updates), the gradient being no value there.
std::vector<bool> gradientValues(const Graph &g) {
  std::vector<bool> grad(g.numValues(), false), seen(g.numValues(), false);
  std::vector<ValueId> stack;
  for (const Output &o : g.outputs()) {
    if (o.role == OutputRole::Gradient && g.value(o.value).def != kNone)
      grad[o.value] = true;
    if (o.role == OutputRole::Update)
      stack.push_back(o.value);
  }
  while (!stack.empty()) {
    ValueId v = stack.back();
    stack.pop_back();
    NodeId d = g.value(v).def;
    if (seen[v] || d == kNone)
      continue;
    seen[v] = true;
    if (g.node(d).gradOf != kNone)
      grad[v] = true; // the optimizer's input; do not walk into the backward graph
    else
      for (size_t i = 0; i < g.node(d).operands.size(); ++i) {
        const Node &n = g.node(d);
        if (n.op != OpKind::Fusion ||
            !matmulReadsInput(regionBody(n), regionBody(n).args()[i].value))
          stack.push_back(n.operands[i]);
      }
  }
  return grad;
}

// "1,283,712"
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

} // namespace

namespace {

// The arena's buffers (their counts and bytes, in place and views among them) and its live lower
// bound: at each node, the bytes of the arena buffers live there (a value that shares its
// operand's buffer adds nothing).
void arenaStats(const Graph &g, const MemoryPlan &plan, MemoryStats &s) {
  // The arena's live lower bound: at each node, the bytes of the arena buffers live there (a value
  // that shares its operand's buffer adds nothing).
  std::vector<int32_t> last = lastUses(g);
  int32_t count = static_cast<int32_t>(g.nodes().size());
  std::vector<int64_t> delta(count + 2, 0);
  std::vector<int32_t> end(g.numValues(), kNone), root(g.numValues(), kNone);
  for (NodeId n = 0; n < count; ++n)
    for (ValueId r : g.node(n).results) {
      const MemorySlot &slot = plan.slots[r];
      if (slot.region != MemRegion::Arena)
        continue;
      ++s.buffers;
      s.bufferBytes += alignUp(slot.bytes);
      s.inPlace += slot.share == MemorySlot::Share::InPlace;
      s.views += slot.share == MemorySlot::Share::View;
      root[r] = slot.share == MemorySlot::Share::None ? r : root[slot.of];
      end[root[r]] = std::max(end[root[r]], last[r]);
    }
  for (ValueId v = 0; v < g.numValues(); ++v)
    if (root[v] == v) {
      delta[g.value(v).def] += alignUp(plan.slots[v].bytes);
      delta[end[v] + 1] -= alignUp(plan.slots[v].bytes);
    }
  int64_t live = 0;
  for (int32_t n = 0; n <= count; ++n)
    s.liveBound = std::max(s.liveBound, live += delta[n]);
}

} // namespace

MemoryStats memoryStats(const Graph &in) {
  // The graph the plan is for: `in`, or a compacted copy that this function plans.
  Graph copy;
  std::optional<MemoryPlan> own;
  if (!in.memoryPlan()) {
    copy = in;
    copy.compact();
    own = planMemory(copy);
  }
  const Graph &g = own ? copy : in;
  const MemoryPlan &plan = own ? *own : *in.memoryPlan();

  MemoryStats s;
  s.regionBytes = plan.regionBytes;
  for (int64_t b : plan.regionBytes)
    s.totalBytes += b;
  s.arenaBytes = plan.bytes(MemRegion::Arena);
  for (const Arg &a : g.args()) {
    int64_t bytes = g.type(a.value).bytes();
    switch (a.kind) {
    case Arg::Kind::Param:
      s.paramBytes += bytes, ++s.params;
      break;
    case Arg::Kind::State:
      if (!bf16CopySource(a.name).empty())
        s.copyBytes += bytes, ++s.copies;
      else
        s.stateBytes += bytes, ++s.states;
      break;
    case Arg::Kind::Input:
      s.inputBytes += bytes, ++s.inputs;
      break;
    }
  }
  std::vector<bool> counted(g.numValues(), false);
  for (const Output &o : g.outputs())
    if (plan.slots[o.value].region == MemRegion::IO && g.value(o.value).def != kNone &&
        !counted[o.value]) {
      counted[o.value] = true;
      s.outputBytes += g.type(o.value).bytes(), ++s.outputs;
    }
  s.updateCopies = static_cast<int32_t>(updateCopies(g, plan).size());
  for (ValueId u : updateValues(g))
    if (u != kNone && plan.slots[u].region == MemRegion::Weights)
      ++s.updatesInPlace;
  std::vector<bool> grad = gradientValues(g), saved(g.numValues(), false);
  for (const Node &n : g.nodes())
    if (n.gradOf != kNone)
      for (ValueId v : n.operands)
        if (NodeId d = g.value(v).def; d != kNone && g.node(d).gradOf == kNone)
          saved[v] = true;
  for (ValueId v = 0; v < g.numValues(); ++v) {
    if (grad[v])
      s.gradBytes += g.type(v).bytes(), ++s.grads;
    if (saved[v])
      s.savedBytes += g.type(v).bytes(), ++s.saved;
    if (g.value(v).def != kNone && plan.slots[v].region == MemRegion::Constants)
      s.constantBytes += g.type(v).bytes(), ++s.constants;
  }

  arenaStats(g, plan, s);
  return s;
}

std::string memoryReport(const Graph &g) {
  MemoryStats s = memoryStats(g);
  std::string out = fmt::format("memory of @{} (bytes, planned before any run)\n", g.name());
  auto line = [&](std::string_view what, int64_t bytes, std::string note) {
    out += fmt::format("  {:<20}{:>15}  ({}{}{})\n", what, grouped(bytes), bytesString(bytes),
                       note.empty() ? "" : ", ", note);
  };
  auto count = [](int32_t n, std::string_view what) {
    return fmt::format("{} {}{}", grouped(n), what, n == 1 ? "" : "s");
  };
  auto region = [&](MemRegion r) { return s.regionBytes[static_cast<int>(r)]; };
  out += "  regions\n";
  line("  weights", region(MemRegion::Weights),
       fmt::format("{} of parameters in {}, {} of optimizer state in {}{}; {} updated in place, "
                   "{} copied back",
                   bytesString(s.paramBytes), count(s.params, "tensor"), bytesString(s.stateBytes),
                   count(s.states, "tensor"),
                   s.copies == 0 ? std::string()
                                 : fmt::format(", {} of bf16 copies of weights in {}",
                                               bytesString(s.copyBytes), count(s.copies, "tensor")),
                   grouped(s.updatesInPlace), grouped(s.updateCopies)));
  line("  io", region(MemRegion::IO),
       fmt::format("{} in, {} out", count(s.inputs, "input"), count(s.outputs, "output")));
  line("  constants", region(MemRegion::Constants),
       count(s.constants, "value") + " computed once at load");
  line("  arena", region(MemRegion::Arena),
       fmt::format("the planned peak of the activations; {} in place, {} views", grouped(s.inPlace),
                   grouped(s.views)));
  line("  scratch", region(MemRegion::Scratch), "the largest kernel workspace");
  line("total", s.totalBytes, "all a step needs, each tensor held once");
  out += "  in the arena\n";
  line("  gradients", s.gradBytes, count(s.grads, "value"));
  line("  saved for backward", s.savedBytes,
       count(s.saved, "forward value") + " read by backward nodes");
  line("  sum of all buffers", s.bufferBytes, count(s.buffers, "node result") + ", no reuse");
  double pct =
      s.bufferBytes > 0 ? 100.0 * double(s.bufferBytes - s.arenaBytes) / double(s.bufferBytes) : 0;
  out += fmt::format("  {:<20}{:>15}  ({:.1f}% of the sum)\n", "  saving",
                     grouped(s.bufferBytes - s.arenaBytes), pct);
  line("  live lower bound", s.liveBound,
       fmt::format("most bytes live at one node; the peak is {:.3f}x it",
                   s.liveBound > 0 ? double(s.arenaBytes) / double(s.liveBound) : 1.0));
  return out;
}

} // namespace kiln::passes

// Memory planning (passes/memory_plan.h): the plan never puts two live values in the same bytes
// (checked here by an independent liveness oracle on every zoo model's training step), in-place
// and view sharing happen exactly where legal, reuse beats one buffer per value, the plan is part
// of the IR text and the verifier rejects bad plans at their line:col. (Attention's peak over T:
// memory_plan_attention_test.cc.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ir/builder.h"
#include "ir/ops/region.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "models/zoo.h"
#include "passes/autodiff.h"
#include "passes/memory_plan.h"
#include "passes/optimizer.h"
#include "passes/passes.h"
#include "passes/stages.h"

namespace kiln::memory_plan_test {
namespace {
using namespace ir;
using Share = MemorySlot::Share;

Graph parseOk(std::string_view text) {
  ParseResult r = parseGraph(text);
  EXPECT_TRUE(r.errors.empty()) << r.errors.front().message;
  return r.graph ? std::move(*r.graph) : Graph();
}

std::vector<std::string> parseErrors(std::string_view text) {
  std::vector<std::string> out;
  for (const Error &e : parseGraph(text).errors)
    out.push_back(e.message);
  return out;
}

// The full training step of a zoo model: forward with loss, backward, AdamW update.
Graph trainingStep(std::string_view model, std::vector<models::Setting> settings = {}) {
  settings.push_back({"loss", "true"});
  Expected<Graph> fwd = models::buildModel(model, settings);
  EXPECT_TRUE(fwd.ok()) << fwd.error().message;
  Expected<Graph> grads = passes::differentiate(*fwd);
  EXPECT_TRUE(grads.ok()) << grads.error().message;
  Expected<Graph> step = passes::buildTrainingStep(*grads, passes::OptimizerConfig{});
  EXPECT_TRUE(step.ok()) << step.error().message;
  Graph g = std::move(*step);
  g.compact();
  return g;
}

// The same step as `kiln dump --stage=train` compiles it: fused, lowered into regions, planned.
Graph loweredStep(std::string_view model, std::vector<models::Setting> settings = {},
                  const passes::OptimizerConfig &optimizer = {}) {
  settings.push_back({"loss", "true"});
  Expected<Graph> fwd = models::buildModel(model, settings);
  EXPECT_TRUE(fwd.ok()) << fwd.error().message;
  Expected<Graph> step = passes::trainingStep(std::move(*fwd), optimizer);
  EXPECT_TRUE(step.ok()) << step.error().message;
  return std::move(*step);
}

// Whether result r of a region may be written over operand j, decided from the body alone: the
// input is of r's shape, r is no reduction's, and no matmul reads the input.
bool regionReadsElementForElement(const Node &node, int r, int j) {
  const Graph &body = regionBody(node);
  ValueId in = body.args()[j].value, out = body.outputs()[r].value;
  NodeId def = body.value(out).def;
  if (body.type(in).shape != body.type(out).shape ||
      (def != kNone &&
       (body.node(def).op == OpKind::ReduceSum || body.node(def).op == OpKind::ReduceMean ||
        body.node(def).op == OpKind::ReduceMax)))
    return false;
  for (const Node &b : body.nodes())
    if (b.op == OpKind::Matmul && (b.operands[0] == in || b.operands[1] == in))
      return false;
  return true;
}

// `text` with its first `from` replaced by `to` (a test failure if it has none).
std::string edited(std::string text, std::string_view from, std::string_view to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from << " not in\n" << text;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

// A graph from IR text, memory-planned by the planner and verified.
Graph plannedText(std::string_view text) {
  ir::ParseResult parsed = ir::parseGraph(text);
  EXPECT_TRUE(parsed.graph) << parsed.errors[0].message;
  Graph g = parsed.graph ? std::move(*parsed.graph) : Graph();
  g.setMemoryPlan(passes::planMemory(g));
  std::vector<Error> errors = verify(g);
  EXPECT_TRUE(errors.empty()) << errors[0].message;
  return g;
}

Graph planned(Graph g) {
  g.setMemoryPlan(passes::planMemory(g));
  return g;
}

// The oracle, written without the planner's or the verifier's code. Every value has a slot of
// its type's bytes, aligned, inside its region, and in the region it belongs in (arguments in
// weights or io; a node result in constants only if computed from constants, in weights only as
// the update taking its argument's bytes, in io only as an output). Lifetimes: arguments and
// constants from before the first node; inputs, outputs, constants and parameters or state that
// no update overwrites to after the last. Two values of a region live at a common node have
// disjoint bytes, unless one took the other's legally (a reshape's view, or in place over an
// operand read element for element whose every holder is dead after this node).
void expectSoundPlan(const Graph &g, const MemoryPlan &plan) {
  int32_t count = static_cast<int32_t>(g.nodes().size());
  ASSERT_EQ(plan.slots.size(), static_cast<size_t>(g.numValues()));
  std::vector<int32_t> start(g.numValues(), -1), last(g.numValues(), -1), root(g.numValues(), -1),
      updateOf(g.numValues(), -1);
  std::vector<bool> output(g.numValues(), false);
  for (int32_t n = 0; n < count; ++n) {
    for (ValueId v : g.node(n).operands)
      last[v] = n;
    for (ValueId r : g.node(n).results)
      start[r] = last[r] = n;
  }
  for (const Output &o : g.outputs()) {
    output[o.value] = true;
    if (o.role == OutputRole::Update)
      updateOf[o.value] = o.arg;
  }
  auto home = [&](ValueId v) { return std::pair(plan.slots[v].region, plan.slots[v].offset); };
  std::vector<int32_t> end = last;
  for (ValueId v = 0; v < g.numValues(); ++v) {
    const MemorySlot &s = plan.slots[v];
    ASSERT_EQ(s.bytes, g.type(v).bytes());
    ASSERT_GE(s.offset, 0);
    ASSERT_EQ(s.offset % 64, 0);
    ASSERT_LE(s.offset + s.bytes, plan.bytes(s.region));
    ASSERT_NE(s.region, MemRegion::Scratch);
    if (output[v] || s.region == MemRegion::Constants)
      end[v] = count;
    if (s.region == MemRegion::Constants)
      start[v] = -1;
  }
  for (size_t a = 0; a < g.args().size(); ++a) {
    ValueId v = g.args()[a].value;
    bool input = g.args()[a].kind == Arg::Kind::Input;
    ASSERT_EQ(plan.slots[v].region, input ? MemRegion::IO : MemRegion::Weights);
    ASSERT_EQ(plan.slots[v].share, Share::None);
    bool overwritten = false;
    for (ValueId u = 0; u < g.numValues(); ++u)
      overwritten =
          overwritten || (u != v && updateOf[u] == static_cast<int32_t>(a) && home(u) == home(v));
    end[v] = overwritten ? last[v] : count;
    root[v] = v;
  }
  std::vector<std::vector<ValueId>> members(g.numValues());
  for (size_t a = 0; a < g.args().size(); ++a)
    members[g.args()[a].value].push_back(g.args()[a].value);
  for (int32_t n = 0; n < count; ++n) {
    const Node &node = g.node(n);
    for (int k = 0; k < static_cast<int>(node.results.size()); ++k) {
      ValueId r = node.results[k];
      const MemorySlot &s = plan.slots[r];
      if (s.region == MemRegion::Constants) {
        for (ValueId v : node.operands)
          ASSERT_EQ(plan.slots[v].region, MemRegion::Constants) << "filled at load from "
                                                                << "what is not there yet";
      }
      if (s.region == MemRegion::Weights) {
        ASSERT_GE(updateOf[r], 0) << "only an update goes to weights";
        ASSERT_TRUE(home(r) == home(g.args()[updateOf[r]].value)) << "at its argument's bytes";
      }
      if (s.region == MemRegion::IO) {
        ASSERT_TRUE(output[r]) << "only outputs go to io";
      }
      if (s.share == Share::None) {
        root[r] = r;
      } else {
        ASSERT_NE(std::find(node.operands.begin(), node.operands.end(), s.of), node.operands.end());
        ASSERT_TRUE(home(s.of) == home(r));
        if (g.value(s.of).def == kNone) {
          ASSERT_TRUE(s.share == Share::InPlace && updateOf[r] == g.value(s.of).index)
              << "an argument's bytes are taken only by its own update";
        }
        if (s.share == Share::View) {
          ASSERT_EQ(node.op, OpKind::Reshape);
        } else {
          ASSERT_EQ(g.type(s.of).numElements(), g.type(r).numElements());
          ASSERT_EQ(g.type(s.of).bytes(), g.type(r).bytes());
          if (node.op == OpKind::Fusion) {
            for (size_t j = 0; j < node.operands.size(); ++j) {
              if (node.operands[j] == s.of) {
                ASSERT_TRUE(regionReadsElementForElement(node, k, static_cast<int>(j)));
              }
            }
            for (int e = 0; e < k; ++e)
              ASSERT_NE(plan.slots[node.results[e]].of, s.of) << "two results in one buffer";
          } else {
            ASSERT_TRUE(opInfo(node.op).writesOver) << mnemonic(node.op);
          }
          for (ValueId m : members[root[s.of]])
            ASSERT_LE(last[m], n) << "in place over a buffer still read after node " << n;
        }
        root[r] = root[s.of];
      }
      members[root[r]].push_back(r);
    }
  }
  // Buffer lifetimes [first start, last end of any member]; pairwise disjoint in time or bytes.
  struct Buf {
    MemRegion region;
    int32_t start, end;
    int64_t lo, hi;
  };
  std::vector<Buf> bufs;
  for (ValueId v = 0; v < g.numValues(); ++v)
    if (root[v] == v && plan.slots[v].bytes > 0) {
      Buf b{plan.slots[v].region, start[v], end[v], plan.slots[v].offset,
            plan.slots[v].offset + plan.slots[v].bytes};
      for (ValueId m : members[v])
        b.end = std::max(b.end, end[m]);
      bufs.push_back(b);
    }
  int64_t checked = 0;
  for (size_t i = 0; i < bufs.size(); ++i)
    for (size_t j = i + 1; j < bufs.size(); ++j)
      if (bufs[i].region == bufs[j].region && bufs[i].start <= bufs[j].end &&
          bufs[j].start <= bufs[i].end) {
        ++checked;
        ASSERT_TRUE(bufs[i].hi <= bufs[j].lo || bufs[j].hi <= bufs[i].lo)
            << "buffers live at the same time share bytes of " << memRegionName(bufs[i].region)
            << ": [" << bufs[i].lo << ", " << bufs[i].hi << ") and [" << bufs[j].lo << ", "
            << bufs[j].hi << ")";
      }
  EXPECT_GT(checked, 0) << "the oracle compared nothing";
}

TEST(MemoryPlanZoo, NoTwoLiveValuesShareBytesInAnyTrainingStep) {
  struct Case {
    std::string model;
    std::vector<models::Setting> settings;
  };
  std::vector<Case> cases;
  for (const models::ModelEntry &m : models::allModels())
    cases.push_back({std::string(m.name), {}});
  cases.push_back({"gpt", {{"position", "rope"}, {"n_kv_heads", "1"}, {"activation", "swiglu"}}});
  cases.push_back({"gpt", {{"norm_kind", "rmsnorm"}, {"dropout", "0.1"}, {"position", "alibi"}}});
  cases.push_back({"bert", {{"norm", "pre"}, {"position", "relative"}}});
  for (const Case &c : cases) {
    SCOPED_TRACE(c.model + (c.settings.empty() ? "" : " " + c.settings[0].key));
    Graph lowered = loweredStep(c.model, c.settings);
    ASSERT_NE(lowered.memoryPlan(), nullptr);
    expectSoundPlan(lowered, *lowered.memoryPlan());
    EXPECT_TRUE(verify(lowered).empty());
    passes::MemoryStats ls = passes::memoryStats(lowered);
    // A weight's gradient made in its update's region (schedule-updates) is no value; the
    // others (biases, norms' weights, embeddings) are.
    EXPECT_GT(ls.grads, 0);
    EXPECT_LT(ls.grads, ls.params) << "no weight's update takes its gradient's matmul";
    EXPECT_LT(ls.gradBytes, ls.paramBytes);
    EXPECT_GT(ls.inPlace, 0);
    Graph g = planned(trainingStep(c.model, c.settings));
    expectSoundPlan(g, *g.memoryPlan());
    std::vector<Error> errors = verify(g);
    EXPECT_TRUE(errors.empty()) << errors.front().message;
    passes::MemoryStats s = passes::memoryStats(g);
    EXPECT_GT(s.inPlace, 0);
    EXPECT_GT(s.views, 0);
    EXPECT_LE(s.liveBound, s.arenaBytes); // no plan beats the bytes live at one node
    EXPECT_LT(s.arenaBytes, s.bufferBytes);
  }
}

// A step whose updates wait for the gradients' global norm (kiln train's guard against a
// non-finite step, clipping) keeps every gradient a value: an update that took its gradient's
// matmul could not wait for the others (fuse-elementwise: isUpdateOf).
TEST(MemoryPlanZoo, GuardedOrClippedStepsKeepEveryGradient) {
  passes::OptimizerConfig guarded, clipped;
  guarded.guardNonFinite = true;
  clipped.clipNorm = 1.0;
  for (const passes::OptimizerConfig &c : {guarded, clipped}) {
    SCOPED_TRACE(c.guardNonFinite ? "guarded" : "clipped");
    Graph lowered = loweredStep("gpt", {}, c);
    ASSERT_NE(lowered.memoryPlan(), nullptr);
    expectSoundPlan(lowered, *lowered.memoryPlan());
    passes::MemoryStats s = passes::memoryStats(lowered);
    EXPECT_EQ(s.grads, s.params);
    EXPECT_EQ(s.gradBytes, s.paramBytes);
  }
}

// Every sharing decision on one small graph: where it must happen and each reason it must not.
TEST(MemoryPlanSharing, InPlaceAndViewsExactlyWhereLegal) {
  Graph g = parseOk(R"(graph @t {
  %x = input "x" : f32[4,8]
  %w = param "w" init zeros : f32[8,8]
  %a = exp(%x) : f32[4,8]
  %b = neg(%a) : f32[4,8]
  %s = reduce_sum(%b) {axes = [-1], keepdims = true} : f32[4,1]
  %c = tanh(%b) : f32[4,8]
  %m = mul(%s, %c) : f32[4,8]
  %u = sin(%c) : f32[4,8]
  %t = transpose(%m) {perm = [1, 0]} : f32[8,4]
  %mm = matmul(%u, %w) : f32[4,8]
  %r = reshape(%mm) {shape = [32]} : f32[32]
  %z = exp(%mm) : f32[4,8]
  %o = neg(%t) : f32[8,4]
  %q = cos(%o) : f32[8,4]
  %k = cast(%r) {dtype = f64} : f64[32]
  output "o" = %o
  output "q" = %q
  output "k" = %k
  output "z" = %z
})");
  MemoryPlan plan = passes::planMemory(g);
  auto slot = [&](NodeId n) { return plan.slots[g.result(n)]; };
  auto res = [&](NodeId n) { return g.result(n); };
  // a = exp(x): x is caller-owned.
  EXPECT_EQ(slot(0).share, Share::None);
  // b = neg(a): a dies here, same size: in place.
  EXPECT_EQ(slot(1).share, Share::InPlace);
  EXPECT_EQ(slot(1).of, res(0));
  // c = tanh(b): b's last use (s read it before).
  EXPECT_EQ(slot(3).share, Share::InPlace);
  EXPECT_EQ(slot(3).of, res(1));
  // m = mul(s, c): s dies but is broadcast (4 of 32 elements); c is used later.
  EXPECT_EQ(slot(4).share, Share::None);
  // u = sin(c): c dies here.
  EXPECT_EQ(slot(5).share, Share::InPlace);
  EXPECT_EQ(slot(5).of, res(3));
  // t = transpose(m), mm = matmul(u, w): operands die, same size, but these read other positions.
  EXPECT_EQ(slot(6).share, Share::None);
  EXPECT_EQ(slot(7).share, Share::None);
  // r = reshape(mm): a view of mm's bytes.
  EXPECT_EQ(slot(8).share, Share::View);
  EXPECT_EQ(slot(8).of, res(7));
  // z = exp(mm): mm's last use, but its view r is read later, so its bytes are still needed.
  EXPECT_EQ(slot(9).share, Share::None);
  // o = neg(t): t dies, but o is an output: it goes to io, in bytes of its own.
  EXPECT_EQ(slot(10).share, Share::None);
  EXPECT_EQ(slot(10).region, MemRegion::IO);
  // q = cos(o): o is an output, never overwritten.
  EXPECT_EQ(slot(11).share, Share::None);
  // k = cast(r) to f64: twice the bytes.
  EXPECT_EQ(slot(12).share, Share::None);
  for (ValueId v : {res(9), res(10), res(11), res(12)})
    EXPECT_EQ(plan.slots[v].region, MemRegion::IO);
  for (NodeId n : {0, 1, 2, 3, 4, 5, 6, 7, 8})
    EXPECT_EQ(slot(n).region, MemRegion::Arena) << n;
  EXPECT_EQ(plan.slots[g.args()[0].value].region, MemRegion::IO);
  EXPECT_EQ(plan.slots[g.args()[1].value].region, MemRegion::Weights);

  g.setMemoryPlan(plan);
  expectSoundPlan(g, plan);
  EXPECT_TRUE(verify(g).empty());

  // The switches turn sharing off.
  MemoryPlan none = passes::planMemory(g, {.inPlace = false, .views = false});
  for (const MemorySlot &s : none.slots)
    EXPECT_EQ(s.share, Share::None);
  EXPECT_GE(none.bytes(MemRegion::Arena), plan.bytes(MemRegion::Arena));
}

TEST(MemoryPlanSharing, OpTableSaysWhoMayShare) {
  for (OpKind op :
       {OpKind::Add, OpKind::Exp, OpKind::Select, OpKind::Cast, OpKind::Dropout, OpKind::Fusion})
    EXPECT_TRUE(opInfo(op).writesOver) << mnemonic(op);
  for (OpKind op : {OpKind::Matmul, OpKind::Transpose, OpKind::Reshape, OpKind::Softmax,
                    OpKind::ReduceSum, OpKind::Gather, OpKind::Concat, OpKind::Attention})
    EXPECT_FALSE(opInfo(op).writesOver) << mnemonic(op);
  EXPECT_TRUE(opInfo(OpKind::Reshape).view);
  EXPECT_FALSE(opInfo(OpKind::Transpose).view);
}

// A region writes a result over an input of its whole iteration space that dies there, never
// over what its matmul reads or a smaller (broadcast) input, never into a reduction's result,
// and never two results into one buffer.
TEST(MemoryPlanSharing, RegionsShareOnlyElementForElement) {
  Graph g = plannedText(R"(graph @regions {
  %x = input "x" : f32[4,8]
  %w = input "w" : f32[8,8]
  %b = input "b" : f32[8]
  %e = exp(%x) : f32[4,8]
  %t = tanh(%x) : f32[4,8]
  %y, %z, %s = fusion(%e, %t, %b) {body = graph @fusion {
    %0 = input "in0" : f32[4,8]
    %1 = input "in1" : f32[4,8]
    %2 = input "in2" : f32[8]
    %3 = mul(%0, %1) : f32[4,8]
    %4 = add(%3, %2) : f32[4,8]
    %5 = neg(%4) : f32[4,8]
    %6 = reduce_sum(%4) {axes = [1]} : f32[4]
    output "out0" = %4
    output "out1" = %5
    output "out2" = %6
  }} : f32[4,8], f32[4,8], f32[4]
  %m = fusion(%y, %w, %z) {body = graph @fusion {
    %0 = input "in0" : f32[4,8]
    %1 = input "in1" : f32[8,8]
    %2 = input "in2" : f32[4,8]
    %3 = matmul(%0, %1) : f32[4,8]
    %4 = add(%3, %2) : f32[4,8]
    output "out0" = %4
  }} : f32[4,8]
  %o = neg(%m) : f32[4,8]
  output "o" = %o
  output "s" = %s
}
)");
  const MemoryPlan &plan = *g.memoryPlan();
  const Node &first = g.node(2), &second = g.node(3);
  // %y over %e, %z over %t (each input once), the row sums in a buffer of their own.
  EXPECT_EQ(plan.slots[first.results[0]].share, Share::InPlace);
  EXPECT_EQ(plan.slots[first.results[0]].of, first.operands[0]);
  EXPECT_EQ(plan.slots[first.results[1]].share, Share::InPlace);
  EXPECT_EQ(plan.slots[first.results[1]].of, first.operands[1]);
  EXPECT_EQ(plan.slots[first.results[2]].share, Share::None);
  EXPECT_EQ(plan.slots[first.results[2]].region, MemRegion::IO) << "an output";
  // The epilogue writes over the residual %z, not over %y, which its matmul reads.
  EXPECT_EQ(plan.slots[second.results[0]].share, Share::InPlace);
  EXPECT_EQ(plan.slots[second.results[0]].of, second.operands[2]);
  EXPECT_FALSE(mayWriteOver(second, 0, second.operands[0]));
  EXPECT_FALSE(mayWriteOver(first, 0, first.operands[2])) << "b is broadcast: read elsewhere";
  EXPECT_FALSE(mayWriteOver(first, 2, first.operands[0])) << "a reduction's result";

  // The verifier rejects the same sharing written by hand.
  std::vector<std::string> errors = parseErrors(edited(print(g), "inplace=%4)", "inplace=%3)"));
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors[0].find("which an earlier result already took"), std::string::npos) << errors[0];
}

// A value passed at two positions is written over only if every position allows it: here the
// matmul reads %x as in1, so the epilogue's in2 (the same %x) does not make it free.
TEST(MemoryPlanSharing, AValueAtTwoPositionsMustBeFreeAtBoth) {
  Graph g = plannedText(R"(graph @twice {
  %a = input "a" : f32[4,4]
  %b = input "b" : f32[4,4]
  %x = exp(%b) : f32[4,4]
  %m = fusion(%a, %x, %x) {body = graph @fusion {
    %0 = input "in0" : f32[4,4]
    %1 = input "in1" : f32[4,4]
    %2 = input "in2" : f32[4,4]
    %3 = matmul(%0, %1) : f32[4,4]
    %4 = add(%3, %2) : f32[4,4]
    output "out0" = %4
  }} : f32[4,4]
  output "m" = %m
}
)");
  EXPECT_FALSE(mayWriteOver(g.node(1), 0, g.node(1).operands[1]));
  EXPECT_EQ(g.memoryPlan()->slots[g.node(1).results[0]].share, Share::None);
  std::vector<std::string> errors =
      parseErrors(edited(print(g), "bytes=64) scratch(12352)\n  output",
                         "bytes=64, inplace=%2) scratch(12352)\n  output"));
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors[0].find("cannot be in place of %2"), std::string::npos) << errors[0];
}

// The same bytes under another name: %4 is a view of %2, which the region's matmul reads by
// rows, so the epilogue may not write its tiles over %4.
TEST(MemoryPlanSharing, AViewOfWhatTheMatmulReadsIsNotWrittenOver) {
  Graph g = plannedText(R"(graph @v2 {
  %x = input "x" : f32[4,4]
  %w = input "w" : f32[4,4]
  %a = exp(%x) : f32[4,4]
  %r = reshape(%a) {shape = [16]} : f32[16]
  %r2 = reshape(%r) {shape = [4,4]} : f32[4,4]
  %y = fusion(%a, %w, %r2) {body = graph @fusion {
    %0 = input "in0" : f32[4,4]
    %1 = input "in1" : f32[4,4]
    %2 = input "in2" : f32[4,4]
    %3 = matmul(%0, %1) : f32[4,4]
    %4 = add(%3, %2) : f32[4,4]
    output "out0" = %4
  }} : f32[4,4]
  %o = neg(%y) : f32[4,4]
  output "o" = %o
}
)");
  EXPECT_EQ(g.memoryPlan()->slots[g.node(3).results[0]].share, Share::None);
  // Written by hand, the verifier refuses it.
  std::vector<std::string> errors =
      parseErrors(edited(print(g), "}} : f32[4,4] mem(arena, offset=64, bytes=64)",
                         "}} : f32[4,4] mem(arena, offset=0, bytes=64, inplace=%4)"));
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors[0].find("overwrites bytes that the op also reads as %2 other than element for "
                           "element"),
            std::string::npos)
      << errors[0];
}

TEST(MemoryPlanGpt, ReuseCutsThePeakWellBelowTheSumOfBuffers) {
  Graph g = planned(trainingStep("gpt"));
  passes::MemoryStats s = passes::memoryStats(g);
  std::string report = passes::memoryReport(g);
  std::printf("%s", report.c_str());
  // One buffer per value would need every activation, gradient and temporary at once; the plan
  // keeps only what is live together: under a quarter of that.
  EXPECT_LT(static_cast<double>(s.arenaBytes), 0.25 * static_cast<double>(s.bufferBytes));
  // And it is close to the best any placement of these buffers can do.
  EXPECT_LT(static_cast<double>(s.arenaBytes), 1.25 * static_cast<double>(s.liveBound));
  // The saved activations and the gradients are in the arena, so the peak holds at least them.
  EXPECT_GE(s.arenaBytes, s.savedBytes);
  EXPECT_GE(s.arenaBytes, s.gradBytes);
  // Every parameter has one gradient of its size.
  EXPECT_EQ(s.gradBytes, s.paramBytes);
  EXPECT_GT(s.grads, 0);
  EXPECT_EQ(s.grads, s.params);
  // AdamW: two moments per parameter, plus the step counter.
  EXPECT_EQ(s.stateBytes, 2 * s.paramBytes + 4);
  // Weights and moments are held once: every update is written over its argument in place.
  EXPECT_EQ(s.updatesInPlace, s.params + s.states);
  EXPECT_EQ(s.updateCopies, 0);
  int64_t weights = s.regionBytes[static_cast<int>(MemRegion::Weights)];
  EXPECT_GE(weights, s.paramBytes + s.stateBytes);
  EXPECT_LT(weights, s.paramBytes + s.stateBytes + 64 * (s.params + s.states));
  int64_t sum = 0;
  for (int64_t b : s.regionBytes)
    sum += b;
  EXPECT_EQ(s.totalBytes, sum);

  // The report shows each number.
  auto has = [&](std::string_view label, int64_t bytes) {
    std::string digits = std::to_string(bytes), grouped;
    for (size_t i = 0; i < digits.size(); ++i)
      grouped += (i > 0 && (digits.size() - i) % 3 == 0 ? "," : "") + std::string(1, digits[i]);
    size_t at = report.find(std::string(label));
    ASSERT_NE(at, std::string::npos) << label;
    EXPECT_NE(report.substr(at, report.find('\n', at) - at).find(grouped), std::string::npos)
        << label << " should read " << grouped;
  };
  for (MemRegion r : kAllMemRegions)
    has(std::string("  ") + std::string(memRegionName(r)) + " ",
        s.regionBytes[static_cast<int>(r)]);
  has("total", s.totalBytes);
  has("gradients", s.gradBytes);
  has("saved for backward", s.savedBytes);
  has("sum of all buffers", s.bufferBytes);
  has("saving", s.bufferBytes - s.arenaBytes);
  EXPECT_NE(report.find("% of the sum"), std::string::npos);
}

TEST(MemoryPlanReport, UnplannedGraphsArePlannedForTheReport) {
  Graph g = trainingStep("gpt");
  ASSERT_EQ(g.memoryPlan(), nullptr);
  EXPECT_EQ(passes::memoryReport(g), passes::memoryReport(planned(g)));
  // A graph with outputs "grad.*" (autodiff without an optimizer) counts those as gradients.
  std::vector<models::Setting> training = {{"loss", "true"}};
  Expected<Graph> fwd = models::buildModel("gpt", training);
  ASSERT_TRUE(fwd.ok());
  Expected<Graph> grads = passes::differentiate(*fwd);
  ASSERT_TRUE(grads.ok());
  passes::MemoryStats s = passes::memoryStats(*grads);
  EXPECT_EQ(s.gradBytes, s.paramBytes);
  EXPECT_EQ(s.stateBytes, 0);
}

TEST(MemoryPlanText, PlannedGraphsRoundTrip) {
  Graph g = planned(trainingStep("transformer"));
  std::string text = print(g);
  EXPECT_NE(text.find(" mem(constants="), std::string::npos);
  EXPECT_NE(text.find(", inplace=%"), std::string::npos);
  EXPECT_NE(text.find(", view=%"), std::string::npos);
  ParseResult r = parseGraph(text);
  ASSERT_TRUE(r.errors.empty()) << r.errors.front().message;
  ASSERT_NE(r.graph->memoryPlan(), nullptr);
  EXPECT_EQ(*r.graph->memoryPlan(), *g.memoryPlan());
  EXPECT_EQ(print(*r.graph), text);
  // The plan-memory pass over the parsed graph finds the plan it already has.
  passes::PassStats stats;
  Expected<bool> changed = passes::runPlanMemory(*r.graph, stats);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(print(*r.graph), text);
}

TEST(MemoryPlanText, ShowsTheFormat) {
  Graph g = parseOk(R"(graph @f {
  %0 = input "x" : f32[4,8]
  %1 = exp(%0) : f32[4,8]
  %2 = reshape(%1) {shape = [32]} : f32[32]
  %3 = neg(%2) : f32[32]
  output "y" = %3
})");
  g.setMemoryPlan(passes::planMemory(g));
  EXPECT_EQ(print(g), R"(graph @f mem(constants=0, weights=0, io=256, arena=128, scratch=0) {
  %0 = input "x" : f32[4,8] mem(io, offset=0, bytes=128)
  %1 = exp(%0) : f32[4,8] mem(arena, offset=0, bytes=128)
  %2 = reshape(%1) {shape = [32]} : f32[32] mem(arena, offset=0, bytes=128, view=%1)
  %3 = neg(%2) : f32[32] mem(io, offset=128, bytes=128)
  output "y" = %3
}
)");
}

// A valid planned graph (the planner's own plan), then one mistake at a time, each reported at its
// line:col: the update of w is written over w's bytes in place.
constexpr std::string_view kPlanned =
    R"(graph @p mem(constants=0, weights=128, io=256, arena=256, scratch=0) {
  %0 = input "x" : f32[4,8] mem(io, offset=0, bytes=128)
  %1 = param "w" init zeros : f32[4,8] mem(weights, offset=0, bytes=128)
  %2 = exp(%0) : f32[4,8] mem(arena, offset=0, bytes=128)
  %3 = neg(%2) : f32[4,8] mem(arena, offset=128, bytes=128)
  %4 = add(%2, %3) : f32[4,8] mem(arena, offset=0, bytes=128, inplace=%2)
  %5 = mul(%4, %1) : f32[4,8] mem(io, offset=128, bytes=128)
  %6 = sub(%1, %5) : f32[4,8] mem(weights, offset=0, bytes=128, inplace=%1)
  output "y" = %5
  output "new.w" = %6 update("w")
}
)";

std::string edit(std::string_view from, std::string_view to) {
  return edited(std::string(kPlanned), from, to);
}

TEST(MemoryPlanText, ThePlannerWritesTheValidPlan) {
  Graph g = parseOk(kPlanned);
  EXPECT_TRUE(verify(g).empty());
  g.dropMemoryPlan();
  g.setMemoryPlan(passes::planMemory(g));
  EXPECT_EQ(print(g), kPlanned);
}

TEST(MemoryPlanText, BadPlansAreRejectedWithTheirPlace) {
  EXPECT_EQ(print(parseOk(kPlanned)), kPlanned);
  using V = std::vector<std::string>;
  // Two live values in the same bytes.
  EXPECT_EQ(parseErrors(edit("offset=128, bytes=128)\n  %4", "offset=64, bytes=128)\n  %4")),
            V{"5:3: neg: memory plan: result 0 at arena bytes [64, 192) overlaps result 0 of 4:3 "
              "at bytes [0, 128), which is still live"});
  // In place over a value read later, over an output, by an op that reads other positions.
  EXPECT_EQ(parseErrors(edit("  output \"y\" = %5", "  %7 = exp(%2) : f32[4,8] mem(arena, "
                                                    "offset=128, bytes=128)\n  output \"y\" = %5")),
            V{"6:3: add: memory plan: result 0 overwrites an operand that is still needed (used "
              "at 9:3)"});
  EXPECT_EQ(parseErrors(edit("  output \"y\" = %5", "  output \"y\" = %5\n  output \"e\" = %2")),
            V{"6:3: add: memory plan: result 0 overwrites an operand that is still needed (an "
              "output, or a value kept for the next step)"});
  EXPECT_EQ(parseErrors(edit("  output \"y\" = %5",
                             "  %7 = exp(%5) : f32[4,8] mem(arena, offset=128, bytes=128)\n"
                             "  %8 = transpose(%7) {perm = [1, 0]} : f32[8,4] mem(arena, "
                             "offset=128, bytes=128, inplace=%7)\n  output \"y\" = %5\n"
                             "  output \"z\" = %8")),
            V{"10:3: transpose: memory plan: result 0 cannot be in place of %7: the op reads it "
              "other than element for element"});
  EXPECT_EQ(parseErrors(edit("inplace=%2", "view=%2")),
            V{"6:3: add: memory plan: result 0 cannot be a view: only reshape's can"});
  EXPECT_EQ(parseErrors(edit("inplace=%2", "inplace=%0")),
            V{"6:3: add: memory plan: result 0 is in place of %0, which is not an operand"});
  // An update in place over its argument while the old value is still read later, and one that
  // takes its argument's bytes (not in place) while the argument is still live.
  EXPECT_EQ(parseErrors(edit("  output \"y\" = %5", "  %7 = neg(%1) : f32[4,8] mem(arena, "
                                                    "offset=0, bytes=128)\n  output \"y\" = %5")),
            V{"8:3: sub: memory plan: result 0 overwrites an operand that is still needed (used "
              "at 9:3)"});
  EXPECT_EQ(parseErrors(edit("%6 = sub(%1, %5) : f32[4,8] mem(weights, offset=0, bytes=128, "
                             "inplace=%1)",
                             "%6 = neg(%5) : f32[4,8] mem(weights, offset=0, bytes=128)\n  %7 = "
                             "exp(%1) : f32[4,8] mem(arena, offset=0, bytes=128)")),
            V{"8:3: neg: memory plan: result 0 at weights bytes [0, 128) overlaps argument \"w\" "
              "at bytes [0, 128), which is still live"});
  // Values outside the region they belong in.
  EXPECT_EQ(
      parseErrors(edit("mem(weights, offset=0, bytes=128)\n", "mem(io, offset=0, "
                                                              "bytes=128)\n")),
      (V{"3:8: argument \"w\": memory plan: a parameter or state belongs in weights, with "
         "bytes of its own",
         "8:3: sub: memory plan: result 0 is in place of its operand but at weights offset 0, "
         "not the operand's io offset 0"}));
  EXPECT_EQ(parseErrors(edit("%3 = neg(%2) : f32[4,8] mem(arena, offset=128,",
                             "%3 = neg(%2) : f32[4,8] mem(weights, offset=0,")),
            V{"5:3: neg: memory plan: result 0 is in weights, but it is not the update of the "
              "argument whose bytes it takes"});
  EXPECT_EQ(parseErrors(edited(edit("%3 = neg(%2) : f32[4,8] mem(arena, offset=128,",
                                    "%3 = neg(%2) : f32[4,8] mem(constants, offset=0,"),
                               "constants=0", "constants=128")),
            V{"5:3: neg: memory plan: result 0 is in constants, but it is not computed from "
              "attributes alone (it cannot be filled at load)"});
  EXPECT_EQ(parseErrors(edit("%3 = neg(%2) : f32[4,8] mem(arena,", "%3 = neg(%2) : f32[4,8] "
                                                                   "mem(io,")),
            V{"5:3: neg: memory plan: result 0 is in io, but it is not an output"});
  // Slots that disagree with the type, the alignment, the region.
  EXPECT_EQ(parseErrors(edit("offset=128, bytes=128)\n  %4", "offset=128, bytes=64)\n  %4")),
            V{"5:3: neg: memory plan: result 0 is f32[4,8] (128 bytes), but its slot has 64 "
              "bytes"});
  EXPECT_EQ(parseErrors(edit("offset=128, bytes=128)\n  %4", "offset=160, bytes=128)\n  %4")),
            V{"5:3: neg: memory plan: result 0: offset must be a non-negative multiple of 64, "
              "found 160"});
  EXPECT_EQ(parseErrors(edit("arena=256", "arena=192")),
            V{"5:3: neg: memory plan: result 0 ends at byte 256, past arena bytes 192"});
  EXPECT_EQ(parseErrors(edit("arena=256", "arena=100")),
            (V{"1:1: graph: memory plan: arena bytes must be a non-negative multiple of 64, found "
               "100",
               "4:3: exp: memory plan: result 0 ends at byte 128, past arena bytes 100",
               "5:3: neg: memory plan: result 0 ends at byte 256, past arena bytes 100",
               "6:3: add: memory plan: result 0 ends at byte 128, past arena bytes 100"}));
  // Kernel workspace: at least what the op needs.
  EXPECT_EQ(parseErrors(edit("  output \"y\" = %5",
                             "  %7 = matmul(%5, %5) {transpose_b = true} : f32[4,4] mem(arena, "
                             "offset=128, bytes=64)\n  output \"y\" = %5\n  output \"z\" = %7")),
            V{"9:3: matmul: memory plan: scratch of 0 bytes, but the op needs 23552 and the region "
              "has 0"});
  // A plan is all or nothing, one mem(...) per value.
  EXPECT_EQ(parseErrors(edit(" mem(constants=0, weights=128, io=256, arena=256, scratch=0)", "")),
            V{"2:29: mem(...) and scratch(...) need the region sizes in the header: "
              "mem(constants=C, weights=W, io=I, arena=A, scratch=S) after the graph name"});
  EXPECT_EQ(parseErrors(edit(" mem(arena, offset=128, bytes=128)", "")),
            V{"5:3: the graph has a memory plan (mem(...) in its header), so every argument and "
              "node result needs mem(...)"});
  EXPECT_EQ(parseErrors(edit(" mem(io, offset=0, bytes=128)\n", "\n")),
            V{"2:8: the graph has a memory plan (mem(...) in its header), so every argument and "
              "node result needs mem(...)"});
  EXPECT_EQ(parseErrors(edit("bytes=128)\n  %3", "bytes=128) mem(arena, offset=0, "
                                                 "bytes=128)\n  %3")),
            V{"4:27: expected one mem(...) per result (1), found 2"});
  EXPECT_EQ(parseErrors(edit("offset=0, bytes=128)\n  %3", "offset=0)\n  %3")),
            V{"4:46: expected ',' and bytes=B after the offset, found ')'"});
  EXPECT_EQ(parseErrors(edit("inplace=%2", "inplace=%9")), V{"6:71: value %9 is not defined"});
}

TEST(MemoryPlanGraph, AnyRewriteDropsThePlan) {
  Graph base = planned(parseOk(R"(graph @d {
  %0 = input "x" : f32[4]
  %1 = exp(%0) : f32[4]
  %2 = neg(%1) : f32[4]
  %3 = tanh(%2) : f32[4]
  output "y" = %3
})"));
  ASSERT_NE(base.memoryPlan(), nullptr);
  std::vector<std::pair<const char *, void (*)(Graph &)>> rewrites = {
      {"addNode", [](Graph &g) { (void)g.addNode(OpKind::Exp, {g.result(1)}); }},
      {"addInput",
       [](Graph &g) {
         g.addInput("z", Type{DType::F32, {}});
       }},
      {"addOutput", [](Graph &g) { g.addOutput("e", g.result(0)); }},
      {"setOutputs",
       [](Graph &g) {
         g.setOutputs({{"y", g.result(0)}});
       }},
      {"replaceAllUses", [](Graph &g) { g.replaceAllUses(g.result(1), g.result(0)); }},
      {"eraseNode", [](Graph &g) { g.eraseNode(1); }},
      {"compact that renumbers",
       [](Graph &g) {
         g.addInput("z", Type{DType::F32, {}}); // numbered after the node results
         g.setMemoryPlan(passes::planMemory(g));
         g.compact(); // arguments first: every node result's number moves
       }},
  };
  for (auto &[name, rewrite] : rewrites) {
    Graph g = base;
    EXPECT_NE(g.memoryPlan(), nullptr);
    rewrite(g);
    EXPECT_EQ(g.memoryPlan(), nullptr) << name;
  }
  // A compact that changes nothing keeps the plan (the pass manager compacts after every pass).
  Graph same = base;
  same.compact();
  ASSERT_NE(same.memoryPlan(), nullptr);
  EXPECT_EQ(*same.memoryPlan(), *base.memoryPlan());
  // A stale plan left by a direct edit is caught by the verifier.
  Graph g = base;
  g.node(1).operands[0] = g.args()[0].value; // neg(x): the plan still says in place of %1
  EXPECT_FALSE(verify(g).empty());
}

TEST(MemoryPlanPass, RegisteredAndIdempotent) {
  const passes::PassInfo *pass = passes::findPass("plan-memory");
  ASSERT_NE(pass, nullptr);
  Graph g = trainingStep("bert");
  passes::PassStats stats;
  Expected<bool> changed = pass->run(g, stats);
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  ASSERT_NE(g.memoryPlan(), nullptr);
  EXPECT_TRUE(verify(g).empty());
  int64_t arena = 0;
  for (const auto &[what, n] : stats.entries())
    if (what == "arena bytes")
      arena = n;
  EXPECT_EQ(arena, g.memoryPlan()->bytes(MemRegion::Arena));
  changed = pass->run(g, stats);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
}

} // namespace
} // namespace kiln::memory_plan_test

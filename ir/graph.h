// The IR graph: SSA values with static types; named inputs, parameters (PyTorch-style
// hierarchical names) and outputs; nodes in topological (insertion) order, each carrying the DSL
// source location that made it. A node can only use values that already exist, so insertion
// order is always a valid execution order.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ir/attrs.h"
#include "ir/memory_plan.h"
#include "ir/op.h"
#include "ir/types.h"
#include "support/param_init.h"
#include "support/status.h"

namespace kiln::ir {

using ValueId = int32_t;
using NodeId = int32_t;
inline constexpr int32_t kNone = -1;

// Where a node came from in DSL code: the model's line that called the DSL (the caller of the
// library layer: std::source_location of the outermost module call, file relative to the repo
// root) and the module it ran in, by its parameter path ("blocks.3.attn", "" outside any module),
// as MLIR's named locations give both. Empty for nodes written by hand in IR text or made by a
// pass without one. Passes and autodiff copy it to what they make of a node.
struct SourceLoc {
  std::string file;
  uint32_t line = 0;
  std::string scope = {};
  bool empty() const { return file.empty(); }
  bool operator==(const SourceLoc &) const = default;
};

// Where a node was in IR text (1-based), for diagnostics on parsed graphs; never printed.
struct TextPos {
  uint32_t line = 0, col = 0;
  bool empty() const { return line == 0; }
};

// Initializers and domains are support/param_init.h's, shared with the runtime.
using kiln::Domain;
using kiln::domainName;
using kiln::ParamInit;
std::string paramInitString(const ParamInit &init); // "zeros", "normal(0.02)", ...
// A scale is a finite number >= 0 (a std, a bound, a gain); the Error says which is wrong.
Status checkParamInit(const ParamInit &init);

struct Value {
  Type type;
  NodeId def = kNone; // defining node, or kNone for a graph argument
  int32_t index = 0;  // result index in `def`, or argument index
};

struct Arg {
  // Input: data fed per run. Param: trainable weights. State: carried between runs but not
  // trained (optimizer moments, step counter).
  enum class Kind : uint8_t { Input, Param, State };
  Kind kind;
  std::string name; // input name, or hierarchical parameter name ("blocks.0.attn.qkv.weight")
  ValueId value;
  ParamInit init; // parameters and state only
  // Integer inputs only: values lie in [0, range) (e.g. vocabulary size); 0 = unstated.
  int64_t range = 0;
  Domain domain = Domain::Real; // parameters and state only
};

struct Node {
  OpKind op;
  std::vector<ValueId> operands;
  std::vector<ValueId> results;
  Attrs attrs;
  SourceLoc loc;
  TextPos pos;
  NodeId gradOf = kNone;     // for backward nodes: the forward node this is part of the gradient of
  bool erased = false;       // removed by a pass; gone after Graph::compact()
  NodeId replacedBy = kNone; // erased: the node that took its place, where gradOf links move
};

// A node's operand by its name in the op record (ir/op.h operandIndex): operandOf(n, "bias"),
// kNone where an optional operand is absent.
ValueId operandOf(const Node &n, std::string_view name);

// What an output is, which is how runners and passes find outputs (never by their names, which are
// for people): a value the graph computes, the loss (one scalar float, what autodiff
// differentiates and a trainer reports), the gradient of an argument (autodiff's results), or the
// update of a parameter or state argument (its value for the next step: a training step's new
// weights and optimizer state, which a runner writes back over the argument).
enum class OutputRole : uint8_t { Value, Loss, Gradient, Update };
std::string_view outputRoleName(OutputRole r); // "value", "loss", "gradient", "update"

struct Output {
  std::string name;
  ValueId value;
  OutputRole role = OutputRole::Value;
  int32_t arg = kNone; // Gradient, Update: the argument's index in Graph::args()
};

// Whether result `result` of node n may be written over the buffer of value `operand`: at every
// position at which n reads `operand`, its op's record allows it (OpInfo::writesOver). Sizes are
// the caller's check.
bool mayWriteOver(const Node &n, int result, ValueId operand);

class Graph {
public:
  explicit Graph(std::string name = "main") : name_(std::move(name)) {}

  const std::string &name() const { return name_; }
  void setName(std::string name) { name_ = std::move(name); }

  ValueId addInput(std::string name, Type type, int64_t range = 0);
  ValueId addParam(std::string name, Type type, ParamInit init = {}, Domain domain = Domain::Real);
  ValueId addState(std::string name, Type type, ParamInit init = {}, Domain domain = Domain::Real);
  // Changes argument `arg`'s dtype (bf16-weights stores weights read only by bf16 products in
  // bf16); the caller keeps the graph valid: every user must accept the new type.
  void setArgDType(int32_t arg, DType dtype) { setDType(args_[arg].value, dtype); }
  // Changes value v's dtype (bf16-activations stores a value only bf16 products read in bf16);
  // the caller keeps the graph valid: v's node must make it, and every user accept it.
  void setDType(ValueId v, DType dtype) {
    values_[v].type.dtype = dtype;
    plan_.reset();
  }
  // Replaces the outputs (passes that restructure a graph's interface use this).
  void setOutputs(std::vector<Output> outputs) {
    outputs_ = std::move(outputs);
    plan_.reset();
  }

  // Appends a node, inferring its result types. Errors (bad operand count, attribute, shapes)
  // are unprefixed; the caller adds the op name and place.
  Expected<NodeId> addNode(OpKind op, std::span<const ValueId> operands, Attrs attrs,
                           SourceLoc loc = {});
  Expected<NodeId> addNode(OpKind op, std::initializer_list<ValueId> operands,
                           std::initializer_list<AttrInit> attrs = {}, SourceLoc loc = {});
  // Appends a node with given result types, unchecked (the parser uses this, then verifies).
  NodeId addNodeUnchecked(OpKind op, std::vector<ValueId> operands, Attrs attrs,
                          std::span<const Type> resultTypes, SourceLoc loc = {}, TextPos pos = {});

  void addOutput(std::string name, ValueId value, OutputRole role = OutputRole::Value,
                 int32_t arg = kNone);

  const Value &value(ValueId v) const { return values_[v]; }
  const Type &type(ValueId v) const { return values_[v].type; }
  int32_t numValues() const { return static_cast<int32_t>(values_.size()); }
  const Node &node(NodeId n) const { return nodes_[n]; }
  Node &node(NodeId n) { return nodes_[n]; }
  std::span<const Node> nodes() const { return nodes_; }
  std::span<const Arg> args() const { return args_; }
  std::span<const Output> outputs() const { return outputs_; }
  const Arg *findArg(std::string_view name) const; // input or param by name
  const Output *findOutput(std::string_view name) const;
  // The output of `role` (for Gradient and Update: of argument index `arg`); nullptr if none.
  const Output *findOutput(OutputRole role, int32_t arg = kNone) const;
  // The index of the argument named `name`, or kNone.
  int32_t argIndex(std::string_view name) const;

  // The single result of node n (asserts it has exactly one).
  ValueId result(NodeId n) const;

  // ---- Rewriting (passes) ----
  // A pass appends new nodes, redirects uses to them and erases what they replace; compact()
  // then restores the invariants: no erased nodes, nodes in a topological order that keeps the
  // original order wherever it is valid (a new node lands just before its first user), and
  // values numbered canonically (arguments, then node results in order).
  void replaceAllUses(ValueId from, ValueId to); // in node operands and outputs
  // replaceAllUses for many values in one walk (each call above walks the whole graph): every
  // use of a value v with to[v] != kNone reads to[v] instead, or what that is replaced by in
  // turn. `to` may be shorter than numValues(); values past its end stay.
  void replaceUses(std::span<const ValueId> to);
  // `replacedBy`: the node that now computes what n did (a merged duplicate, a region holding
  // it); backward nodes whose gradOf is n then point there, instead of losing the link.
  void eraseNode(NodeId n, NodeId replacedBy = kNone) {
    nodes_[n].erased = true;
    nodes_[n].replacedBy = replacedBy;
    plan_.reset();
  }
  void compact();
  // Puts the live nodes in `order` (each once; every operand defined by an earlier node or an
  // argument) and renumbers as compact() does, which keeps that order from then on: how a pass
  // schedules, e.g. a collective's start right after its operand is made (schedule_collectives).
  void reorder(std::span<const NodeId> order);
  // Whether compact() would change nothing: no erased node, every operand defined by an earlier
  // node or an argument, values numbered canonically.
  bool isCompact() const;
  // For each value, the nodes that use it (once per use, in node order); erased nodes excluded.
  std::vector<std::vector<NodeId>> users() const;
  // How many times each value is used by live nodes plus graph outputs.
  std::vector<int32_t> useCounts() const;

  // ---- Memory plan ----
  // Any rewrite above (adding arguments, nodes or outputs, replaceAllUses, eraseNode, a compact
  // that moves or renumbers anything) drops the plan, since its offsets and lifetimes no longer
  // describe the graph. Code that edits
  // a node through node(n) must call dropMemoryPlan() itself (ir::verify reports a stale plan).
  const MemoryPlan *memoryPlan() const { return plan_ ? &*plan_ : nullptr; }
  void setMemoryPlan(MemoryPlan plan) { plan_ = std::move(plan); }
  void dropMemoryPlan() { plan_.reset(); }

private:
  ValueId newValue(Type type, NodeId def, int32_t index);
  void applyOrder(const std::vector<NodeId> &order); // compact()'s renumbering in `order`

  std::string name_;
  std::vector<Value> values_;
  std::vector<Arg> args_;
  std::vector<Node> nodes_;
  std::vector<Output> outputs_;
  std::optional<MemoryPlan> plan_;
};

// Every problem in the graph (operand references, arity, attribute kinds, types that differ from
// inference, duplicate names, missing outputs), each prefixed with the node's place: its IR text
// line:col when parsed, its DSL file:line when built, else "node #N". Empty if valid.
std::vector<Error> verify(const Graph &g);
// One output's role on its own (part of verify, which also allows at most one loss and one update
// per argument): a loss is a float scalar and names no argument; a gradient is of an argument,
// with its type (several: of several losses); an update is of a parameter or state, with its
// type. `defined`: whether o.value is a value of g (its type is only checked then).
Status checkOutputRole(const Graph &g, const Output &o, bool defined = true);
// The place a node's diagnostics start with (see verify).
std::string placeOf(const Node &n, NodeId id);

// Liveness in node order, the basis of memory planning: for each value, the position of the last
// node that uses it; numNodes for a graph output (outputs live to the end); its defining node for
// an unused node result (the node still writes it); kNone for an unused argument.
std::vector<int32_t> lastUses(const Graph &g);
// For each value, whether it is computed from attributes alone (constant, iota, tri, and nodes
// whose operands all are): what a backend computes once at load (MemRegion::Constants).
std::vector<bool> loadTimeConstants(const Graph &g);
// For each argument (by index), the value of its update output, or kNone.
std::vector<ValueId> updateValues(const Graph &g);
// An update that a plan could not write in place over its argument (the old value is read after
// the update is computed, or the update is another argument or a constant): a backend copies
// `from` over argument `arg`'s slot at the end of the step.
struct UpdateCopy {
  ValueId from;
  int32_t arg;
};
std::vector<UpdateCopy> updateCopies(const Graph &g, const MemoryPlan &plan);
// The memory plan's problems (part of verify when a plan is present; only run on an otherwise
// valid graph): slots that disagree with the types; values outside their region (an argument
// outside weights or io, a result in constants that is not computed from attributes, in weights
// that is not the update taking its argument's bytes, in io that is not an output); offsets off
// kMemAlignment or past their region; illegal in-place or view sharing; scratch smaller than the
// op needs; and two buffers of a region that overlap while both are live.
std::vector<Error> verifyMemoryPlan(const Graph &g);

} // namespace kiln::ir

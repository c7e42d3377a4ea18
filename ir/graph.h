// The IR graph: SSA values with static types; named inputs, parameters (PyTorch-style
// hierarchical names) and outputs; nodes in topological (insertion) order, each carrying the DSL
// source location that made it. A node can only use values that already exist, so insertion
// order is always a valid execution order.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "ir/attrs.h"
#include "ir/op.h"
#include "ir/types.h"
#include "support/status.h"

namespace kiln::ir {

using ValueId = int32_t;
using NodeId = int32_t;
inline constexpr int32_t kNone = -1;

// Where a node came from in DSL code (std::source_location, file relative to the repo root).
// Empty for nodes written by hand in IR text or made by a pass without one.
struct SourceLoc {
  std::string file;
  uint32_t line = 0;
  bool empty() const { return file.empty(); }
  bool operator==(const SourceLoc &) const = default;
};

// Where a node was in IR text (1-based), for diagnostics on parsed graphs; never printed.
struct TextPos {
  uint32_t line = 0, col = 0;
  bool empty() const { return line == 0; }
};

// How a parameter is initialised when a runner makes fresh weights.
struct ParamInit {
  enum class Kind : uint8_t { Zeros, Ones, Normal, Uniform, XavierUniform };
  Kind kind = Kind::Zeros;
  double scale = 0; // Normal: std; Uniform: bound b of U(-b, b); XavierUniform: gain
  bool operator==(const ParamInit &) const = default;
};
std::string paramInitString(const ParamInit &init); // "zeros", "normal(0.02)", ...

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
  ParamInit init;    // parameters and state only
  int64_t range = 0; // integer inputs only: values lie in [0, range) (e.g. vocabulary size); 0 = unstated
};

struct Node {
  OpKind op;
  std::vector<ValueId> operands;
  std::vector<ValueId> results;
  Attrs attrs;
  SourceLoc loc;
  TextPos pos;
  NodeId gradOf = kNone; // for backward nodes: the forward node this is part of the gradient of
};

struct Output {
  std::string name;
  ValueId value;
};

class Graph {
public:
  explicit Graph(std::string name = "main") : name_(std::move(name)) {}

  const std::string &name() const { return name_; }
  void setName(std::string name) { name_ = std::move(name); }

  ValueId addInput(std::string name, Type type, int64_t range = 0);
  ValueId addParam(std::string name, Type type, ParamInit init = {});
  ValueId addState(std::string name, Type type, ParamInit init = {});
  // Replaces the outputs (passes that restructure a graph's interface use this).
  void setOutputs(std::vector<Output> outputs) { outputs_ = std::move(outputs); }

  // Appends a node, inferring its result types. Errors (bad operand count, attribute, shapes)
  // are unprefixed; the caller adds the op name and place.
  Expected<NodeId> addNode(OpKind op, std::span<const ValueId> operands, Attrs attrs,
                           SourceLoc loc = {});
  Expected<NodeId> addNode(OpKind op, std::initializer_list<ValueId> operands,
                           std::initializer_list<AttrInit> attrs = {}, SourceLoc loc = {});
  // Appends a node with given result types, unchecked (the parser uses this, then verifies).
  NodeId addNodeUnchecked(OpKind op, std::vector<ValueId> operands, Attrs attrs,
                          std::span<const Type> resultTypes, SourceLoc loc = {}, TextPos pos = {});

  void addOutput(std::string name, ValueId value);

  const Value &value(ValueId v) const { return values_[v]; }
  const Type &type(ValueId v) const { return values_[v].type; }
  int32_t numValues() const { return static_cast<int32_t>(values_.size()); }
  const Node &node(NodeId n) const { return nodes_[n]; }
  Node &node(NodeId n) { return nodes_[n]; }
  std::span<const Node> nodes() const { return nodes_; }
  std::span<const Arg> args() const { return args_; }
  std::span<const Output> outputs() const { return outputs_; }
  const Arg *findArg(std::string_view name) const;      // input or param by name
  const Output *findOutput(std::string_view name) const;

  // The single result of node n (asserts it has exactly one).
  ValueId result(NodeId n) const;

private:
  ValueId newValue(Type type, NodeId def, int32_t index);

  std::string name_;
  std::vector<Value> values_;
  std::vector<Arg> args_;
  std::vector<Node> nodes_;
  std::vector<Output> outputs_;
};

// Every problem in the graph (operand references, arity, attribute kinds, types that differ from
// inference, duplicate names, missing outputs), each prefixed with the node's place: its IR text
// line:col when parsed, its DSL file:line when built, else "node #N". Empty if valid.
std::vector<Error> verify(const Graph &g);
// The place a node's diagnostics start with (see verify).
std::string placeOf(const Node &n, NodeId id);

} // namespace kiln::ir

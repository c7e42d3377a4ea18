// The DSL's model context: a Builder owns the ir::Graph being built, hands out parameter names
// by module scope (PyTorch style, "blocks.0.attn.q_proj.weight") and turns every shape or dtype
// mistake into a DslError that names the user's line, even from deep inside an nn module.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <source_location>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "ir/graph.h"

namespace kiln::frontend {

class Tensor;

// A user mistake found while building: "FILE:LINE: OP: DETAIL", or, when the op ran inside a
// module call, "USER_FILE:LINE: in MODULE: OP_FILE:LINE: OP: DETAIL". The CLI catches it.
class DslError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

ir::SourceLoc toSourceLoc(const std::source_location &loc);

// What the DSL calls a default-constructed Tensor in its errors (Builder::use, Tensor::builder).
inline constexpr std::string_view kEmptyTensor =
    "an empty Tensor (default-constructed, never given a value)";

class Builder {
public:
  // `dtype` is the default dtype of parameters and of float inputs made with `floatInput`;
  // `seed` is the first dropout stream (each dropout node draws the next one).
  explicit Builder(std::string graphName = "main", ir::DType dtype = ir::DType::F32,
                   int64_t seed = 0);
  Builder(const Builder &) = delete;
  Builder &operator=(const Builder &) = delete;

  ir::DType dtype() const { return dtype_; }
  const ir::Graph &graph() const { return graph_; }
  // Moves the graph out; the builder must not be used afterwards. DslError if the graph has no
  // output (nothing would be computed).
  ir::Graph finish(std::source_location loc = std::source_location::current());

  // ---- Graph interface ----
  // An integer input's `range` states that its values lie in [0, range) (e.g. the vocabulary).
  Tensor input(std::string name, ir::Type type, int64_t range = 0,
               std::source_location loc = std::source_location::current());
  // A parameter of the builder's dtype. `name` is the full hierarchical name; it must be unique.
  Tensor param(std::string name, ir::Shape shape, ir::ParamInit init,
               std::source_location loc = std::source_location::current());
  // State: a tensor the program keeps from one run to the next (zeros before the first), such
  // as a KV cache. `update` gives its value after this run, which the runner writes over it.
  Tensor state(std::string name, ir::Type type,
               std::source_location loc = std::source_location::current());
  void update(const Tensor &state, const Tensor &next,
              std::source_location loc = std::source_location::current());
  void output(std::string name, const Tensor &value,
              std::source_location loc = std::source_location::current());
  // The graph's loss: a float scalar output that autodiff differentiates and trainers report.
  void loss(std::string name, const Tensor &value,
            std::source_location loc = std::source_location::current());

  // ---- Values made from attributes ----
  Tensor constant(double value, ir::Shape shape, ir::DType dtype,
                  std::source_location loc = std::source_location::current());
  // A rank-0 constant, which broadcasts against anything.
  Tensor scalar(double value, ir::DType dtype,
                std::source_location loc = std::source_location::current());
  // Element (..., j along `axis`, ...) is j.
  Tensor iota(ir::Shape shape, int64_t axis, ir::DType dtype = ir::DType::I64,
              std::source_location loc = std::source_location::current());
  // Over the last two dims: lower ? c - r <= diagonal : c - r >= diagonal (as 1/0 or bool).
  Tensor tri(ir::Shape shape, int64_t diagonal = 0, bool lower = true,
             ir::DType dtype = ir::DType::Bool,
             std::source_location loc = std::source_location::current());

  // ---- Used by Tensor and nn: append one node, or fail with the user's place ----
  // The value of `t` as an operand of `op` at `loc`: a DslError where t is an empty Tensor or
  // another Builder's (its id would name another value of this graph: a foreign weight silently
  // read as one of ours).
  ir::ValueId use(const Tensor &t, std::string_view op, const std::source_location &loc) const;
  Tensor op(ir::OpKind kind, std::span<const ir::ValueId> operands,
            std::initializer_list<ir::AttrInit> attrs, const std::source_location &loc);
  std::vector<Tensor> opMulti(ir::OpKind kind, std::span<const ir::ValueId> operands,
                              std::initializer_list<ir::AttrInit> attrs,
                              const std::source_location &loc);
  [[noreturn]] void fail(std::string_view what, const std::source_location &loc,
                         std::string_view detail) const;
  // A node's location (ir::SourceLoc): inside module calls, the outermost call's place (the
  // model's line) and the innermost module's path; else `loc` itself.
  ir::SourceLoc nodeLoc(const std::source_location &loc) const;
  // The next dropout rng stream: distinct per dropout node, reproducible from the seed; after
  // 2^63 - 1 (a seed's largest value) it goes on from 0 (the sum overflowed into negative seeds).
  int64_t nextDropoutSeed() {
    const int64_t seed = nextSeed_;
    nextSeed_ = static_cast<int64_t>((static_cast<uint64_t>(seed) + 1) & INT64_MAX);
    return seed;
  }

  // ---- Probes: named intermediate values offered for inspection (attention maps) ----
  // Kept only while probing is on, so that a graph built without it has no trace of them.
  void setProbing(bool on) { probing_ = on; }
  void probe(std::string name, const Tensor &value,
             std::source_location loc = std::source_location::current());
  const std::vector<std::pair<std::string, ir::ValueId>> &probes() const { return probes_; }

  // ---- Module call frames ----
  // While a CallFrame lives, errors start at the outermost frame's place (the user's line) and
  // name the innermost module. Modules push one per call (RAII, so exceptions unwind it).
  class CallFrame {
  public:
    CallFrame(Builder &b, std::string module, const std::source_location &loc);
    ~CallFrame();
    CallFrame(const CallFrame &) = delete;
    CallFrame &operator=(const CallFrame &) = delete;

  private:
    Builder &b_;
  };

private:
  struct Frame {
    std::string module;
    ir::SourceLoc loc;
  };

  ir::Graph graph_;
  ir::DType dtype_;
  int64_t nextSeed_;
  std::vector<Frame> frames_;
  bool probing_ = false;
  std::vector<std::pair<std::string, ir::ValueId>> probes_;
  // The argument and output names taken so far: a lookup per name, not a scan of all of them
  // (a deep model has tens of thousands of parameters). Lookups only, so no order leaks out.
  std::unordered_set<std::string> argNames_, outputNames_;
};

// A place in the module hierarchy: the builder plus a dotted name prefix. Modules take one and
// hand `child("q_proj")` / `child(0)` to their submodules, so names follow the object tree.
class Scope {
public:
  explicit Scope(Builder &b, std::string path = {}) : b_(&b), path_(std::move(path)) {}

  Builder &builder() const { return *b_; }
  const std::string &path() const { return path_; }
  Scope child(std::string_view name) const;
  Scope child(int64_t index) const { return child(std::to_string(index)); }
  // The full name of a leaf (a parameter) in this scope: "blocks.0.ln1" + "weight".
  std::string qualify(std::string_view leaf) const;

private:
  Builder *b_;
  std::string path_;
};

} // namespace kiln::frontend

// The canonical text form of an IR graph: what `kiln dump` and `--print-ir-after` show, what
// golden tests check with FileCheck, and what ir/parser.h reads back (print(parse(print(g))) ==
// print(g)). Canonical means deterministic: values are renumbered, defaults are left out.
#pragma once

#include <string>

#include "ir/graph.h"

namespace kiln::ir {

// One statement per line, types on every value:
//
//   graph @gpt {
//     %0 = input "tokens" range(256) : i64[2,16]
//     %1 = param "wte.weight" init normal(0.02) : f32[256,64]
//     %2 = gather(%1, %0) : f32[2,16,64] loc("models/gpt.cc":42)
//     %3 = reduce_mean(%2) {axes = [-1], keepdims = true} : f32[2,16,1]
//     %4 = add(%2, %3) : f32[2,16,64] grad_of(%3)
//     output "logits" = %4
//   }
//
// Values are numbered arguments first (in argument order), then node results in node order; a
// multi-result node reads `%5, %6 = op(...) : t1, t2`. Attributes appear in declaration order
// when required or different from their default. `grad_of(%v)` names the first result of the
// forward node; `loc(...)` is the DSL source line (ir::SourceLoc), `loc("blocks.0.attn"(
// "models/gpt.cc":57))` with the module that made the node, as MLIR writes a named location.
// `range(N)` is shown only when set, as are `domain(D)` of a parameter or state and an output's
// role: `loss`, `gradient("arg")` or `update("arg")`. A graph with a memory plan (ir/memory_plan.h)
// shows it: the header gives each region's size, `graph @gpt mem(constants=C, weights=W, io=I,
// arena=A, scratch=S) {`, every argument and node result its slot, `mem(REGION, offset=O,
// bytes=B)`, where a result that takes an operand's bytes adds `, inplace=%v` (%v dies here, read
// element for element) or `, view=%v` (reshape); and a node with kernel workspace `scratch(N)`. A
// region op holds its body graph as an attribute, printed in place and indented, with its own value
// numbering (a body sees only its own inputs):
//     %7 = fusion(%3, %5) {body = graph @fusion {
//       %0 = input "in0" : f32[2,8]
//       %1 = input "in1" : f32[8]
//       %2 = add(%0, %1) : f32[2,8]
//       output "out0" = %2
//     }} : f32[2,8]
// Graphs that fail verification still print (a bad operand reads %invalid.N) so that they can
// be looked at.
struct PrintOptions {
  bool locations = true; // loc(...)
  bool memory = true;    // the memory plan: mem(...) and scratch(...)
};
std::string print(const Graph &g, const PrintOptions &options = {});

} // namespace kiln::ir

// A fusion region as the Highway backend runs it: a tile program over the region's iteration
// space S (rows: S without its last axis; columns: its last axis), each body value's source, one
// instruction per pointwise op, and where the inputs, outputs and trailing reductions live. The
// interpreter in fusion.cc runs it; a backend that compiles regions (codegen/llvm) turns the same
// description into machine code and sets `native`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codegen/common/lowering.h"
#include "ir/op.h"
#include "runtime/kernel_abi.h"
#include "runtime/kernels/reduce.h"

namespace kiln::codegen {

// Where a body value comes from at each element of S.
struct Source {
  enum Kind : uint8_t { Computed, Fill, Input, Matmul } kind = Computed;
  float fill = 0;
  int input = -1; // Input: the body input's index
};

// Element (row, col) of S (rows: S without its last axis, flattened) in a tensor read (or
// reduced) along S: at rowOffset(row) + col * colStride elements.
struct RowMap {
  int64_t colStride = 0;
  std::vector<int64_t> outerDims, outerStrides; // S's leading axes and the tensor's strides on them
  bool linear = true;                           // then rowOffset(row) = row * rowStride
  int64_t rowStride = 0;
  RowMap() = default;
  // t broadcast to S (stride 0 on the axes where t has size 1 or none).
  RowMap(const ir::Shape &t, const ir::Shape &space) {
    std::vector<int64_t> strides = broadcastStrides(t, space);
    colStride = strides.back();
    outerDims.assign(space.begin(), space.end() - 1);
    outerStrides.assign(strides.begin(), strides.end() - 1);
    // Linear in the row when each leading axis of more than one element steps by the next such
    // axis's whole extent (a dense tensor; a broadcast one, all strides 0): no division per row.
    int64_t inner = -1; // what the next axis of more than one element spans: stride x size
    for (size_t d = outerDims.size(); d-- > 0;) {
      if (outerDims[d] == 1)
        continue;
      if (inner < 0)
        rowStride = outerStrides[d];
      else
        linear = linear && outerStrides[d] == inner;
      inner = outerStrides[d] * outerDims[d];
    }
  }
  int64_t rowOffset(int64_t row) const {
    if (linear)
      return row * rowStride;
    int64_t off = 0;
    for (int64_t d = static_cast<int64_t>(outerDims.size()) - 1; d >= 0; --d) {
      off += (row % outerDims[d]) * outerStrides[d];
      row /= outerDims[d];
    }
    return off;
  }
};

// A body input read along S: bool inputs are bytes; i64 inputs (labels, positions: compared,
// cast, or in integer arithmetic that stays exact, see exactIntegers in fusion.cc) are read as
// floats, exact while |x| <= TileProgram::intBound, which the step checks before each run.
struct InputMap : RowMap {
  Place place;
  bool isBool = false, isI64 = false;
  int64_t elements = 0;
};

// A reduction at the end of the body (reduce_sum / reduce_mean / reduce_max of the S-shaped
// value `value`), its result's elements mapped like an input broadcast to S (stride 0 on the
// reduced axes, keepdims or not: the same bytes). Sums and maxima run in float, each output over
// its elements in one fixed order: row after row; within a row, lane l of 16 takes the columns
// c = l mod 16, and the 16 lanes are summed in order at the row's end.
struct ReductionMap : RowMap {
  int value = -1;
  kernels::Reduce kind = kernels::Reduce::Sum;
  Place place;
  int64_t outSize = 1, count = 1; // elements of the result, and of S reduced into each
  bool lastReduced = false;
  bool rowLocal = false; // every leading axis kept: each row of S has an output element of its own
};
struct Instr {
  ir::OpKind op;
  int dst, a = -1, b = -1, c = -1;
  ir::CastTo cast = ir::CastTo::Same; // a cast's: to bool (x != 0), to bf16 (rounded), else as is
};

// An output stored over S: f32, bool (bytes), bf16 (a value a cast rounded: its high halves) or
// i64 (an integer the body computed exactly as a float).
struct OutputMap {
  enum class As : uint8_t { F32, Bool, Bf16, I64 };
  int value;
  Place place;
  As as = As::F32;
};

struct TileProgram {
  std::string name; // fusion_N after the region's first result %N, for generated code
  ir::Shape space;
  int64_t rows = 1, cols = 1;
  std::vector<Source> sources; // per body value
  std::vector<InputMap> inputs;
  std::vector<Instr> instrs;
  std::vector<OutputMap> outputs;
  std::vector<ReductionMap> reductions;
  // A chunk's worth of each Fill source's value, source after source, which the interpreter
  // reads in place instead of filling a buffer at every call.
  std::vector<float> fills;
  bool hasI64 = false;
  // The magnitude up to which its i64 inputs keep its integer arithmetic exact (kiln_region_args'
  // int_bound; fusion.cc: exactIntegers).
  int64_t intBound = int64_t{1} << 24;
  // Per instruction: the output it writes straight into its place instead of a buffer, or -1
  // (see directOutputs in fusion.cc).
  std::vector<int> direct;
  // The outputs written directly that are not in place over an input, whose next segments the
  // interpreter prefetches (an input's own are already).
  std::vector<int> prefetched;
  // Rows: every reduction reduces the last axis (a part owns whole rows); Columns: none does (a
  // part owns a block of columns and walks every row).
  enum class Mode : uint8_t { Rows, Columns } mode = Mode::Rows;
  // Rows mode over short rows of dense inputs: the same program over groups of whole rows, a group
  // one row of grouped->cols (a multiple of cols) columns, its elements contiguous in every input
  // and output, which the interpreter runs an instruction at a time while still summing each row
  // into its own lanes. The same bits, with the instructions' calls and set-up paid once a group,
  // not a row.
  std::shared_ptr<const TileProgram> grouped;

  // The body compiled to machine code by a backend that compiles regions (codegen/llvm), a
  // kiln_rows_fn (runtime/kernel_abi.h; ctx unused) computing what the interpreter's does (the
  // same bits), which the region's call then links in its place. `owner` keeps the code alive.
  kiln_rows_fn native = nullptr;
  std::shared_ptr<const void> owner;
};

} // namespace kiln::codegen

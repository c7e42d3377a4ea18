// A fusion region's tile program (codegen/common/tile_program.h) as one LLVM function with the
// signature of TileProgram::Native: a loop over rows, and over each row's columns 16 floats at a
// time (a masked vector for the last few), every body value in a register, inputs read through
// their broadcast strides, outputs stored once the vector's values are all computed. What the
// interpreter does per row segment through L1 buffers, this does per vector in registers.
#pragma once

#include <string>

#include <llvm/IR/Module.h>

#include "codegen/common/tile_program.h"

namespace kiln::llvmgen {

// Adds `void name(ptr ctx, ptr bases, i64 r0, i64 r1, i64 c0, i64 n, ptr mm, i64 ldc, ptr lanes)`
// (a kiln_rows_fn of runtime/kernel_abi.h) to m.
llvm::Function *emitTileProgram(const codegen::TileProgram &p, llvm::Module &m,
                                const std::string &name);

} // namespace kiln::llvmgen

// exp, erf and tanh as LLVM IR on float vectors, our own polynomials (LLVM 19 would scalarize a
// vector llvm.exp into one expf call per lane): runtime/kernels/vector_math.inc, the one
// definition the Highway kernels' vExp, vErf and vTanh instantiate too, so a region computes the
// same bits on both backends; the methods are explained there.
#pragma once

#include <llvm/IR/IRBuilder.h>

namespace kiln::llvmgen {

class VectorMath {
public:
  VectorMath(llvm::IRBuilder<> &b, llvm::Type *vector) : b_(b), vt_(vector) {}

  llvm::Value *splat(float c) const;
  llvm::Value *isNaN(llvm::Value *x) const;
  llvm::Value *exp(llvm::Value *x) const;
  llvm::Value *erf(llvm::Value *x) const;
  llvm::Value *tanh(llvm::Value *x) const;

private:
  llvm::IRBuilder<> &b_;
  llvm::Type *vt_;
};

} // namespace kiln::llvmgen

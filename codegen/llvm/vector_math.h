// exp, erf and tanh as LLVM IR on float vectors, our own polynomials (LLVM 19 would scalarize a
// vector llvm.exp into one expf call per lane). The same operations in the same order as the
// Highway kernels' vExp, vErf and vTanh (runtime/kernels/vmath-inl.h), so a region computes the
// same bits on both backends; the methods are explained there.
#pragma once

#include <llvm/IR/IRBuilder.h>

namespace kiln::llvmgen {

class VectorMath {
public:
  VectorMath(llvm::IRBuilder<> &b, llvm::Type *vector) : b_(b), vt_(vector) {}

  llvm::Value *splat(float c) const;
  llvm::Value *fma(llvm::Value *x, llvm::Value *y, llvm::Value *z) const; // x y + z, one rounding
  llvm::Value *isNaN(llvm::Value *x) const;
  llvm::Value *exp(llvm::Value *x) const;
  llvm::Value *erf(llvm::Value *x) const;
  llvm::Value *tanh(llvm::Value *x) const;

private:
  llvm::Value *expPoly(llvm::Value *r) const;
  llvm::Value *lookup8(llvm::Value *i, const float *table) const; // table[i] per lane

  llvm::IRBuilder<> &b_;
  llvm::Type *vt_;
};

} // namespace kiln::llvmgen

// The kernel ABI (see kernel_abi.h) over the C++ kernels.
#include "runtime/kernel_abi.h"

#include "runtime/kernels/gemm.h"
#include "runtime/thread_pool.h"
#include "support/memory_region.h"

namespace {

uint8_t *at(const kiln_run *run, kiln_place p) {
  return run->bases[p.region] + p.offset;
}

kiln::kernels::MatrixRef matrix(const kiln_run *run, const kiln_matrix &m) {
  return {reinterpret_cast<const float *>(at(run, m.at)), m.row_stride, m.col_stride,
          m.batch_stride};
}

struct Epilogue {
  const kiln_run *run;
  const kiln_gemm_args *args;
};

void epilogue(void *ctx, int64_t batch, int64_t row, int64_t col, int64_t rows, int64_t cols,
              float *c, int64_t ldc) {
  const auto *e = static_cast<const Epilogue *>(ctx);
  const int64_t r0 = batch * e->args->rows_per_batch + row;
  e->args->epilogue(e->args->epilogue_ctx, e->run->bases, r0, r0 + rows, col, cols, c, ldc,
                    nullptr);
}

} // namespace

extern "C" void kiln_gemm(const kiln_run *run, const kiln_gemm_args *args) {
  kiln::kernels::Gemm g;
  g.batch = args->batch, g.m = args->m, g.n = args->n, g.k = args->k;
  g.a = matrix(run, args->a), g.b = matrix(run, args->b);
  g.c = reinterpret_cast<float *>(at(run, args->c));
  g.ldc = args->ldc, g.cBatchStride = args->c_batch_stride;
  g.accumulate = args->accumulate != 0;
  const Epilogue e{run, args};
  if (args->epilogue)
    g.epilogue = {&epilogue, const_cast<Epilogue *>(&e)};
  float *scratch =
      reinterpret_cast<float *>(run->bases[static_cast<int>(kiln::MemRegion::Scratch)]);
  kiln::kernels::gemm(g, static_cast<kiln::runtime::ThreadPool *>(run->pool), scratch);
}

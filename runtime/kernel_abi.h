/* The kernel ABI: the runtime's kernels as C functions over planned memory. The executor's steps
 * call them, and so will the whole programs that the LLVM backend generates (JIT, or a compiled
 * bundle that links only the runtime): one interface, plain data only. A tensor is a place in the
 * memory plan (a region and a byte offset) resolved against the run's region bases, so a
 * generated program can hold every call's arguments as constants. C11 and C++. (So far: GEMM, and
 * the fusion regions' row functions; the other kernels join as whole programs are generated.) */
#ifndef KILN_RUNTIME_KERNEL_ABI_H_
#define KILN_RUNTIME_KERNEL_ABI_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What every call sees: each memory region's base (indexed by kiln::MemRegion: constants,
 * weights, io, arena, scratch) and the thread pool (a kiln::runtime::ThreadPool; null: the
 * calling thread only). */
typedef struct kiln_run {
  uint8_t *const *bases;
  void *pool;
} kiln_run;

typedef struct kiln_place {
  int64_t region; /* a kiln::MemRegion */
  int64_t offset; /* bytes from the region's base */
} kiln_place;

/* A strided f32 matrix: element (b, i, j) at place + 4 (b batch_stride + i row_stride +
 * j col_stride) bytes. */
typedef struct kiln_matrix {
  kiln_place at;
  int64_t row_stride, col_stride, batch_stride;
} kiln_matrix;

/* A fusion region's body over rows [r0, r1) and columns [c0, c0 + n) of its iteration space; a
 * matmul region reads its product's finished block at mm (row r0 first, row stride ldc floats);
 * rows-mode reductions accumulate into lanes. The LLVM backend generates these (ctx unused); the
 * interpreter's entry takes its program as ctx. */
typedef void (*kiln_rows_fn)(const void *ctx, uint8_t *const *bases, int64_t r0, int64_t r1,
                             int64_t c0, int64_t n, const float *mm, int64_t ldc, float *lanes);

/* C (+)= A B, batched, f32, with the GEMM's workspace at the start of the scratch region. If
 * epilogue is not null it runs on each finished block of C, as rows of its region: batch item
 * z's row i is row z rows_per_batch + i. */
typedef struct kiln_gemm_args {
  int64_t batch, m, n, k;
  kiln_matrix a, b; /* logical [m, k] and [k, n] */
  kiln_place c;     /* [m, n]: row stride ldc, batch stride c_batch_stride (floats) */
  int64_t ldc, c_batch_stride;
  int64_t accumulate; /* nonzero: C += A B (a gradient's accumulation), else C = A B */
  kiln_rows_fn epilogue;
  const void *epilogue_ctx;
  int64_t rows_per_batch;
} kiln_gemm_args;

void kiln_gemm(const kiln_run *run, const kiln_gemm_args *args);

#ifdef __cplusplus
}
#endif

#endif /* KILN_RUNTIME_KERNEL_ABI_H_ */

/* The kernel ABI: the runtime's kernels as C functions over planned memory. The executor's steps
 * are calls of these functions with plain-data arguments, and whole programs that the LLVM
 * backend generates (a compiled bundle links only the runtime) make the same calls with the same
 * arguments held as constants: one interface, plain data only. A tensor is a place in the memory
 * plan (a region and a byte offset) resolved against the run's region bases. C11 and C++.
 *
 * Every kernel has the type kiln_kernel: its args point at its own struct below (named after it),
 * which is a whole number of 8-byte words whose only pointers are a kiln_rows_fn and the context
 * word that follows it (so a generated program can hold the words as a constant with the
 * function linked by name). A kernel returns KILN_OK or a kiln_status; it writes nothing before it
 * knows it will succeed. */
#ifndef KILN_RUNTIME_KERNEL_ABI_H_
#define KILN_RUNTIME_KERNEL_ABI_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What every call sees: each memory region's base (indexed by kiln::MemRegion: constants,
 * weights, io, arena, scratch), the thread pool (a kiln::runtime::ThreadPool; null: the
 * calling thread only) and the ranks of a data-parallel run (a kiln::runtime::Communicator;
 * null: this process alone). */
typedef struct kiln_run {
  uint8_t *const *bases;
  void *pool;
  void *comm;
} kiln_run;

enum {
  KILN_OK = 0,
  KILN_INDEX_OUT_OF_RANGE = 1, /* gather / scatter_add: an index outside [0, size) */
  KILN_INEXACT_INTEGER = 2,    /* a fusion region's integer input beyond its int_bound */
  KILN_RANKS_DIFFER = 3,     /* a collective compiled for another number of ranks than the run's */
  KILN_COLLECTIVE_FAILED = 4 /* MPI reported an error in a collective */
};
const char *kiln_status_message(int32_t status);

typedef int32_t (*kiln_kernel)(const kiln_run *run, const void *args);

typedef struct kiln_place {
  int64_t region; /* a kiln::MemRegion; -1: absent (an optional operand) */
  int64_t offset; /* bytes from the region's base */
} kiln_place;

/* A strided f32 matrix: element (b, i, j) at place + 4 (b batch_stride + i row_stride +
 * j col_stride) bytes; or, bf16 nonzero, of bf16 elements at 2 (...) bytes (an operand of bf16
 * products stored in bf16: a weight or an activation, kernels::MatrixRef::bf16). */
typedef struct kiln_matrix {
  kiln_place at;
  int64_t row_stride, col_stride, batch_stride;
  int64_t bf16;
} kiln_matrix;

/* A fusion region's body over rows [r0, r1) and columns [c0, c0 + n) of its iteration space; a
 * matmul region reads its product's finished block at mm (row r0 first, row stride ldc floats).
 * Trailing reductions: in rows mode into lanes (16 per row and reduction, row after row, c0 a
 * multiple of 16); in columns mode straight into their results, or, where lanes is not null, into
 * lanes: reduction k's element at its offset in its result plus the earlier reductions' out_size.
 * The LLVM backend generates these
 * (ctx unused); the interpreter's takes its program as ctx. */
typedef void (*kiln_rows_fn)(const void *ctx, uint8_t *const *bases, int64_t r0, int64_t r1,
                             int64_t c0, int64_t n, const float *mm, int64_t ldc, float *lanes);

/* kiln_gemm: C (+)= A B, batched, f32, with the GEMM's workspace at the start of the scratch
 * region. If epilogue is not null it runs on each finished block of C, as rows of its region:
 * batch item z's row i is row z rows_per_batch + i. */
typedef struct kiln_gemm_args {
  int64_t batch, m, n, k;
  kiln_matrix a, b; /* logical [m, k] and [k, n] */
  kiln_place c;     /* [m, n]: row stride ldc, batch stride c_batch_stride (floats) */
  int64_t ldc, c_batch_stride;
  int64_t accumulate; /* nonzero: C += A B (a gradient's accumulation), else C = A B */
  kiln_rows_fn epilogue;
  const void *epilogue_ctx;
  int64_t rows_per_batch;
  int64_t bf16_products; /* nonzero: A and B rounded to bf16, f32 sums (kernels::Gemm::bf16) */
} kiln_gemm_args;
int32_t kiln_gemm(const kiln_run *run, const void *args);

/* kiln_region: a fusion region without a matmul over its rows x cols iteration space, in parts of
 * rows_per_part rows (columns mode: of column_width columns; where every result is one row, parts
 * of rows with partial results combined in part order), fixed by size so that no sum depends on
 * the threads. A reduction's result element of row r is at
 * sum_d ((r / prod(outer_dims[d+1..])) mod outer_dims[d]) outer_strides[d] + column * col_stride
 * (the strides 0 on reduced axes); rows mode sums each row's 16 lanes in order, combines rows
 * that share a result part after part, and divides a mean by count at the end. */
enum { KILN_REDUCE_SUM = 0, KILN_REDUCE_MEAN = 1, KILN_REDUCE_MAX = 2 };
enum { KILN_REGION_ELEMENTWISE = 0, KILN_REGION_ROWS = 1, KILN_REGION_COLUMNS = 2 };
#define KILN_MAX_RANK 8
#define KILN_MAX_INT_INPUTS 4
typedef struct kiln_reduction {
  int64_t kind;
  kiln_place at;
  int64_t out_size, count; /* elements of the result, and elements reduced into each */
  int64_t row_local;       /* every leading axis kept: each row has a result element of its own */
  int64_t col_stride, rank;
  int64_t outer_dims[KILN_MAX_RANK], outer_strides[KILN_MAX_RANK];
} kiln_reduction;
typedef struct kiln_region_args {
  kiln_rows_fn rows;
  const void *ctx;
  int64_t mode, row_count, cols, rows_per_part, column_width;
  /* Integer inputs that the body reads as floats: its arithmetic on them is exact while
   * |x| <= int_bound (codegen/common/fusion.cc: exactIntegers), checked first (else
   * KILN_INEXACT_INTEGER). */
  int64_t int_inputs, int_bound;
  kiln_place ints[KILN_MAX_INT_INPUTS];
  int64_t int_elements[KILN_MAX_INT_INPUTS];
  int64_t reduction_count; /* the args are followed by this many kiln_reduction */
} kiln_region_args;
static inline const kiln_reduction *kiln_region_reductions(const kiln_region_args *a) {
  return (const kiln_reduction *)(a + 1);
}
int32_t kiln_region(const kiln_run *run, const void *args);

/* kiln_attention, kiln_attention_backward: flash-style attention over f32 [batch, heads, T, d]
 * (runtime/kernels/attention.h); mask (bool) and bias read through strides over the logits'
 * [batch, hq, tq, tk] (0: broadcast); an absent one has region -1. Tiles in the scratch region.
 * Forward: out, lse. Backward: in q k v out lse dout, results dq dk dv (dbias). */
typedef struct kiln_attention_args {
  int64_t batch, hq, hkv, tq, tk, d, dv;
  float scale;
  int32_t causal;
  int32_t bthd; /* q, k, v, out (and their gradients) [B, T, H, D] instead of [B, H, T, D] */
  double dropout;
  uint64_t seed;
  int64_t window;        /* sliding window: |i - j| < window; 0: none */
  int64_t bf16_products; /* nonzero: products of bf16-rounded operands (kernels::Attention::bf16) */
  kiln_place q, k, v, mask, bias;
  int64_t mask_strides[4], bias_strides[4];
  int64_t bias_elements;
  kiln_place out, lse, dout;        /* forward results; backward inputs */
  kiln_place dq, dk, dvalue, dbias; /* backward results (dbias absent without a bias) */
  kiln_place step; /* the dropout's training step (an f32 scalar), as kiln_dropout's */
} kiln_attention_args;
int32_t kiln_attention(const kiln_run *run, const void *args);
int32_t kiln_attention_backward(const kiln_run *run, const void *args);

/* kiln_norm: layer_norm / rms_norm of (a + b) over rows of n (runtime/kernels/norm.h); a and b
 * repeat by whole rows (a_rows, b_rows); absent places have region -1; y_bf16: y is stored as
 * bf16 (the norms' bf16_y). kiln_norm_backward: dx and dweight from x, mean, rstd, dy, weight. */
typedef struct kiln_norm_args {
  int64_t rows, n, centered;
  double eps;
  kiln_place a, b;
  int64_t a_rows, b_rows;
  kiln_place weight, bias, sum, y, mean, rstd;
  int64_t y_bf16;
} kiln_norm_args;
int32_t kiln_norm(const kiln_run *run, const void *args);
typedef struct kiln_norm_backward_args {
  int64_t rows, n;
  kiln_place x, mean, rstd, dy, weight, dx, dweight;
} kiln_norm_backward_args;
int32_t kiln_norm_backward(const kiln_run *run, const void *args);

/* kiln_gather: out[k] = data[index[k]] for rows of row_floats f32 (count indices into size rows);
 * kiln_scatter_add: out (size rows) = 0, then out[index[k]] += data[k] in index order; with a
 * base, out = base, then out[r] = base[r] + (0 + the data rows of index r in order) for each row r
 * some index names (out may be base: then only those rows are written). Indices are i64, checked
 * before anything is written. */
typedef struct kiln_index_args {
  int64_t count, size, row_floats;
  kiln_place data, index, out;
  kiln_place base; /* kiln_scatter_add only; region -1: none */
  int64_t widen;   /* kiln_gather only: data holds bf16 rows, out f32 (gather's `widen`) */
} kiln_index_args;
int32_t kiln_gather(const kiln_run *run, const void *args);
int32_t kiln_scatter_add(const kiln_run *run, const void *args);

/* kiln_update_slice: base viewed as [rows, outer, size, inner] elements of elem_bytes: out = base
 * (nothing to copy where out is base), then out[i, o, index[i], :] = update[i, o, 0, :] for each
 * row i whose i64 index is in [0, size) (update_slice). */
typedef struct kiln_update_slice_args {
  int64_t rows, outer, size, inner, elem_bytes;
  kiln_place base, update, index, out;
} kiln_update_slice_args;
int32_t kiln_update_slice(const kiln_run *run, const void *args);

/* kiln_softmax, kiln_log_softmax: over rows of n f32. */
typedef struct kiln_rows_args {
  int64_t rows, n;
  kiln_place x, y;
} kiln_rows_args;
int32_t kiln_softmax(const kiln_run *run, const void *args);
int32_t kiln_log_softmax(const kiln_run *run, const void *args);

/* kiln_cross_entropy: over rows of n f32 logits x and their class ids (one a row: i64, or i32
 * where targets_i32), loss[r] and lse[r] (cross_entropy), smoothing its label_smoothing. A target
 * outside [0, n) other than ignore_index gives KILN_INDEX_OUT_OF_RANGE. */
typedef struct kiln_cross_entropy_args {
  int64_t rows, n, targets_i32, ignore_index;
  double smoothing;
  kiln_place x, targets, loss, lse;
} kiln_cross_entropy_args;
int32_t kiln_cross_entropy(const kiln_run *run, const void *args);

/* kiln_reduce: x as f32 [outer, n, inner] reduced over n (kind: KILN_REDUCE_*). */
typedef struct kiln_reduce_args {
  int64_t kind, outer, n, inner;
  kiln_place x, y;
} kiln_reduce_args;
int32_t kiln_reduce(const kiln_run *run, const void *args);

/* kiln_permute: y = x with its axes permuted (y's axis d is x's axis perm[d]), elements of
 * element_bytes. */
typedef struct kiln_permute_args {
  int64_t rank, element_bytes;
  int64_t shape[KILN_MAX_RANK], perm[KILN_MAX_RANK];
  kiln_place x, y;
} kiln_permute_args;
int32_t kiln_permute(const kiln_run *run, const void *args);

/* kiln_copy: bytes from x to y (which may overlap). */
typedef struct kiln_copy_args {
  int64_t bytes;
  kiln_place x, y;
} kiln_copy_args;
int32_t kiln_copy(const kiln_run *run, const void *args);

/* kiln_fill: count elements of element_bytes (<= 8) at y, each the low bytes of bits. */
typedef struct kiln_fill_args {
  int64_t count, element_bytes;
  uint64_t bits;
  kiln_place y;
} kiln_fill_args;
int32_t kiln_fill(const kiln_run *run, const void *args);

/* kiln_strided_copy: y[i] = x[i] over index i of shape (rank axes), at element strides
 * x_strides / y_strides from x and y (x stride 0: broadcast): what slice, pad, concat and
 * broadcast are. */
typedef struct kiln_strided_copy_args {
  int64_t rank, element_bytes;
  int64_t shape[KILN_MAX_RANK], x_strides[KILN_MAX_RANK], y_strides[KILN_MAX_RANK];
  kiln_place x, y;
} kiln_strided_copy_args;
int32_t kiln_strided_copy(const kiln_run *run, const void *args);

/* kiln_dropout: y[k] = x[k] / (1 - p) (in f32) if rng::uniform(rng::stepSeed(seed, step),
 * r count + k) >= p (support/rng.h), else 0, over count f32: the dropout op's bits, on the run's
 * rank r (0 alone: a data-parallel rank's x is its rows of the global batch). step: an f32
 * scalar, the training step's count (absent, region -1: step 0). kiln_attention numbers its
 * dropout likewise from batch r batch. */
typedef struct kiln_dropout_args {
  int64_t count;
  double p;
  uint64_t seed;
  kiln_place x, y, step;
} kiln_dropout_args;
int32_t kiln_dropout(const kiln_run *run, const void *args);

/* kiln_all_reduce: y = the mean over the run's ranks of each rank's x (count f32; y may be x), the
 * ranks the program was compiled for (the all_reduce op's `ranks`): KILN_RANKS_DIFFER where the
 * run has another number. */
typedef struct kiln_all_reduce_args {
  int64_t count, ranks;
  kiln_place x, y;
} kiln_all_reduce_args;
int32_t kiln_all_reduce(const kiln_run *run, const void *args);
/* kiln_all_reduce_start: the same begun (y's bytes, x copied there first, handed to the
 * communicator) and returning at once; kiln_all_reduce_wait (its args' x: the start's y; y: the
 * result, which may be the same place) waits for it to finish. */
int32_t kiln_all_reduce_start(const kiln_run *run, const void *args);
int32_t kiln_all_reduce_wait(const kiln_run *run, const void *args);
/* The sharded optimizer's, over the same args, `count` being one rank's part C (x and y do not
 * overlap): kiln_reduce_scatter, y[C] = rank r's part [rC, (r+1)C) of the ranks' mean of x[N C]
 * (the reduce_scatter op sends a piece of its part at a time, its x packed in the scratch region);
 * kiln_all_gather, y[N C] = every rank's x[C] in rank order. */
int32_t kiln_reduce_scatter(const kiln_run *run, const void *args);
int32_t kiln_all_gather(const kiln_run *run, const void *args);
/* kiln_rank_chunk: one operand's share of y[C] = x[rC, (r+1)C), x being the rank_chunk op's
 * operands joined: this operand (`elements` f32 at x) is x[offset, offset + elements), and what of
 * it lies in rank r's part is copied to its place in y (no communication). */
typedef struct kiln_rank_chunk_args {
  int64_t count, ranks, offset, elements;
  kiln_place x, y;
} kiln_rank_chunk_args;
int32_t kiln_rank_chunk(const kiln_run *run, const void *args);

/* Every kernel, for tables of them: X(name) each. */
#define KILN_KERNELS(X)                                                                            \
  X(kiln_gemm)                                                                                     \
  X(kiln_region)                                                                                   \
  X(kiln_attention)                                                                                \
  X(kiln_attention_backward)                                                                       \
  X(kiln_norm)                                                                                     \
  X(kiln_norm_backward)                                                                            \
  X(kiln_gather)                                                                                   \
  X(kiln_scatter_add)                                                                              \
  X(kiln_update_slice)                                                                             \
  X(kiln_softmax)                                                                                  \
  X(kiln_log_softmax)                                                                              \
  X(kiln_cross_entropy)                                                                            \
  X(kiln_reduce)                                                                                   \
  X(kiln_permute)                                                                                  \
  X(kiln_copy)                                                                                     \
  X(kiln_fill)                                                                                     \
  X(kiln_strided_copy)                                                                             \
  X(kiln_dropout)                                                                                  \
  X(kiln_all_reduce)                                                                               \
  X(kiln_all_reduce_start)                                                                         \
  X(kiln_all_reduce_wait)                                                                          \
  X(kiln_reduce_scatter)                                                                           \
  X(kiln_all_gather)                                                                               \
  X(kiln_rank_chunk)

#ifdef __cplusplus
}
#endif

#endif /* KILN_RUNTIME_KERNEL_ABI_H_ */

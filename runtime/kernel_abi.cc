// The kernel ABI (see kernel_abi.h) over the C++ kernels, and the fusion regions' walk over rows
// and columns (kiln_region), which calls a region's rows function in fixed parts.
#include "runtime/kernel_abi.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/kernels/attention.h"
#include "runtime/kernels/gemm.h"
#include "runtime/kernels/norm.h"
#include "runtime/kernels/permute.h"
#include "runtime/kernels/reduce.h"
#include "runtime/kernels/softmax.h"
#include "runtime/thread_pool.h"
#include "support/bf16.h"
#include "support/memory_region.h"
#include "support/rng.h"

namespace {

using kiln::kernels::Reduce;
using kiln::runtime::runParts;
using kiln::runtime::ThreadPool;

template <class T = float> T *at(const kiln_run *run, kiln_place p) {
  return p.region < 0 ? nullptr : reinterpret_cast<T *>(run->bases[p.region] + p.offset);
}
// The run's rank (0: this process alone). A data-parallel rank's tensors are its rows of the
// global batch, rank r's first element being r times its count: a dropout numbers its elements
// from there, so that ranks draw the masks of one process of the global batch (where each rank
// drew the same mask over its own rows, as DistributedDataParallel with one seed does).
int64_t rankOf(const kiln_run *run) {
  const auto *comm = static_cast<const kiln::runtime::Communicator *>(run->comm);
  return comm ? comm->rank() : 0;
}
// A dropout's stream at the run's training step (an f32 scalar at `step`; absent: step 0).
uint64_t seedAtStep(const kiln_run *run, uint64_t seed, kiln_place step) {
  const float *s = at(run, step);
  return s ? kiln::rng::stepSeed(seed, kiln::rng::stepCount(*s)) : seed;
}
ThreadPool *poolOf(const kiln_run *run) {
  return static_cast<ThreadPool *>(run->pool);
}
float *scratchOf(const kiln_run *run) {
  return at(run, {static_cast<int64_t>(kiln::MemRegion::Scratch), 0});
}

kiln::kernels::MatrixRef matrix(const kiln_run *run, const kiln_matrix &m) {
  if (m.bf16)
    return {nullptr, m.row_stride, m.col_stride, m.batch_stride, at<const uint16_t>(run, m.at)};
  return {at(run, m.at), m.row_stride, m.col_stride, m.batch_stride};
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

// ---- kiln_region ----
constexpr int kLanes = 16;

Reduce kindOf(const kiln_reduction &m) {
  return static_cast<Reduce>(m.kind); // KILN_REDUCE_* match kernels::Reduce
}
int64_t rowOffset(const kiln_reduction &m, int64_t row) {
  int64_t off = 0;
  for (int64_t d = m.rank - 1; d >= 0; --d) {
    off += (row % m.outer_dims[d]) * m.outer_strides[d];
    row /= m.outer_dims[d];
  }
  return off;
}
float finishLanes(Reduce kind, const float *lanes) {
  float acc = kiln::kernels::reduceInit(kind);
  for (int l = 0; l < kLanes; ++l)
    acc = kiln::kernels::reduceCombine(kind, acc, lanes[l]);
  return acc;
}
float finishMean(const kiln_reduction &m, float acc) {
  return kindOf(m) == Reduce::Mean ? acc / static_cast<float>(m.count) : acc;
}

// Elementwise: parts of whole rows, each one call of the rows function over all its columns, so
// that every stream is read and written in address order. Called a block of columns at a time
// (512 columns of each row, then the next 512), the prefetchers followed runs 2 KiB long and
// 2 KiB apart badly: kiln_rows_bench's llvm triad ran at 59% of the plain triad's bandwidth and
// bias+GELU at 53% of the copy's; by whole rows, at 89-91% and 73-100% (medians of three runs).
void elementwise(const kiln_run *run, const kiln_region_args &a) {
  const int64_t parts = (a.row_count + a.rows_per_part - 1) / a.rows_per_part;
  runParts(poolOf(run), parts, [&](int64_t q, int) {
    const int64_t r0 = q * a.rows_per_part, r1 = std::min(a.row_count, r0 + a.rows_per_part);
    a.rows(a.ctx, run->bases, r0, r1, 0, a.cols, nullptr, 0, nullptr);
  });
}

// Rows mode: parts of whole rows (one call over all columns, as elementwise). Per row, each
// reduction's 16 lanes; a row-local result is stored at the row's end, the others combine into the
// part's partial results, which are combined part after part in order at the end (so no sum depends
// on the threads).
void rowReductions(const kiln_run *run, const kiln_region_args &a) {
  const int64_t perPart = a.rows_per_part, parts = (a.row_count + perPart - 1) / perPart;
  const int64_t nr = a.reduction_count;
  const kiln_reduction *rs = kiln_region_reductions(&a);
  std::vector<int64_t> partialAt(nr, -1);
  int64_t partialSize = 0;
  for (int64_t k = 0; k < nr; ++k)
    if (!rs[k].row_local)
      partialAt[k] = partialSize, partialSize += rs[k].out_size;
  std::vector<float> partials(static_cast<size_t>(partialSize * parts));
  for (int64_t k = 0; k < nr; ++k)
    if (partialAt[k] >= 0)
      for (int64_t q = 0; q < parts; ++q)
        std::fill_n(partials.begin() + q * partialSize + partialAt[k], rs[k].out_size,
                    kiln::kernels::reduceInit(kindOf(rs[k])));
  runParts(poolOf(run), parts, [&](int64_t q, int) {
    const int64_t r0 = q * perPart, r1 = std::min(a.row_count, r0 + perPart);
    std::vector<float> lanes(static_cast<size_t>((r1 - r0) * nr * kLanes));
    for (int64_t k = 0; k < nr; ++k)
      for (int64_t r = r0; r < r1; ++r)
        std::fill_n(lanes.begin() + ((r - r0) * nr + k) * kLanes, kLanes,
                    kiln::kernels::reduceInit(kindOf(rs[k])));
    a.rows(a.ctx, run->bases, r0, r1, 0, a.cols, nullptr, 0, lanes.data());
    for (int64_t k = 0; k < nr; ++k) {
      const kiln_reduction &m = rs[k];
      for (int64_t r = r0; r < r1; ++r) {
        const float x = finishLanes(kindOf(m), &lanes[((r - r0) * nr + k) * kLanes]);
        if (m.row_local) {
          at(run, m.at)[rowOffset(m, r)] = finishMean(m, x);
        } else {
          float &acc = partials[q * partialSize + partialAt[k] + rowOffset(m, r)];
          acc = kiln::kernels::reduceCombine(kindOf(m), acc, x);
        }
      }
    }
  });
  for (int64_t k = 0; k < nr; ++k) {
    const kiln_reduction &m = rs[k];
    if (partialAt[k] < 0)
      continue;
    float *out = at(run, m.at);
    for (int64_t o = 0; o < m.out_size; ++o) {
      float acc = kiln::kernels::reduceInit(kindOf(m));
      for (int64_t q = 0; q < parts; ++q)
        acc = kiln::kernels::reduceCombine(kindOf(m), acc,
                                           partials[q * partialSize + partialAt[k] + o]);
      out[o] = finishMean(m, acc);
    }
  }
}

// Columns mode where every result is one row (a bias gradient): parts of rows, each summing its
// rows, whole rows in order, into partial results of its own (the rows function's lanes), which
// combine part after part at the end. Whole rows stream from memory; a part of columns would read
// a few hundred bytes of each row, 4 KiB apart, which the prefetchers follow badly
// (kiln_rows_bench, llvm column sum of [16384, 1024]: 53% of copy bandwidth that way; whole rows:
// above a plain dot loop's read bandwidth). At most kMaxColumnParts parts, fixed by size.
constexpr int64_t kMaxColumnParts = 64;
bool oneRowResults(const kiln_region_args &a) {
  const kiln_reduction *ms = kiln_region_reductions(&a);
  return std::all_of(ms, ms + a.reduction_count,
                     [&](const kiln_reduction &m) { return m.out_size == a.cols; });
}
void columnPartials(const kiln_run *run, const kiln_region_args &a) {
  const int64_t perPart =
      std::max(a.rows_per_part, (a.row_count + kMaxColumnParts - 1) / kMaxColumnParts);
  const int64_t parts = (a.row_count + perPart - 1) / perPart, cols = a.cols;
  const kiln_reduction *ms = kiln_region_reductions(&a);
  const int64_t nr = a.reduction_count, width = nr * cols;
  std::vector<float> partials(static_cast<size_t>(parts * width));
  for (int64_t q = 0; q < parts; ++q)
    for (int64_t k = 0; k < nr; ++k)
      std::fill_n(partials.begin() + q * width + k * cols, cols,
                  kiln::kernels::reduceInit(kindOf(ms[k])));
  runParts(poolOf(run), parts, [&](int64_t q, int) {
    const int64_t r0 = q * perPart, r1 = std::min(a.row_count, r0 + perPart);
    a.rows(a.ctx, run->bases, r0, r1, 0, cols, nullptr, 0, partials.data() + q * width);
  });
  for (int64_t k = 0; k < nr; ++k) {
    float *out = at(run, ms[k].at);
    std::fill_n(out, cols, kiln::kernels::reduceInit(kindOf(ms[k])));
    for (int64_t q = 0; q < parts; ++q)
      kiln::kernels::combineRow(kindOf(ms[k]), &partials[q * width + k * cols], out, cols);
    for (int64_t c = 0; c < cols; ++c)
      out[c] = finishMean(ms[k], out[c]);
  }
}

// Columns mode otherwise: parts are blocks of column_width columns; each walks every row in order
// and the rows function accumulates straight into the results (which take no input's bytes).
void columnReductions(const kiln_run *run, const kiln_region_args &a) {
  if (oneRowResults(a))
    return columnPartials(run, a);
  const int64_t width = a.column_width, parts = (a.cols + width - 1) / width;
  const kiln_reduction *ms = kiln_region_reductions(&a), *end = ms + a.reduction_count;
  runParts(poolOf(run), parts, [&](int64_t q, int) {
    const int64_t c0 = q * width, n = std::min(width, a.cols - c0);
    for (const kiln_reduction *m = ms; m != end; ++m) {
      float *out = at(run, m->at);
      for (int64_t o = 0; o < m->out_size; o += a.cols)
        std::fill_n(out + o + c0, n, kiln::kernels::reduceInit(kindOf(*m)));
    }
    a.rows(a.ctx, run->bases, 0, a.row_count, c0, n, nullptr, 0, nullptr);
    for (const kiln_reduction *m = ms; m != end; ++m)
      if (kindOf(*m) == Reduce::Mean) {
        float *out = at(run, m->at);
        for (int64_t o = 0; o < m->out_size; o += a.cols)
          for (int64_t j = 0; j < n; ++j)
            out[o + c0 + j] = finishMean(*m, out[o + c0 + j]);
      }
  });
}

} // namespace

extern "C" const char *kiln_status_message(int32_t status) {
  switch (status) {
  case KILN_OK:
    return "ok";
  case KILN_INDEX_OUT_OF_RANGE:
    return "an index is out of range";
  case KILN_INEXACT_INTEGER:
    return "an integer input exceeds its fusion region's bound (int_bound: the region computes on "
           "it in f32)";
  case KILN_RANKS_DIFFER:
    return "the program was compiled for another number of ranks than this run has";
  case KILN_COLLECTIVE_FAILED:
    return "a collective operation failed (MPI reported an error)";
  default:
    return "unknown status";
  }
}

extern "C" int32_t kiln_gemm(const kiln_run *run, const void *args) {
  const auto *a = static_cast<const kiln_gemm_args *>(args);
  kiln::kernels::Gemm g;
  g.batch = a->batch, g.m = a->m, g.n = a->n, g.k = a->k;
  g.a = matrix(run, a->a), g.b = matrix(run, a->b);
  g.c = at(run, a->c);
  g.ldc = a->ldc, g.cBatchStride = a->c_batch_stride;
  g.accumulate = a->accumulate != 0;
  g.bf16 = a->bf16_products != 0;
  const Epilogue e{run, a};
  if (a->epilogue)
    g.epilogue = {&epilogue, const_cast<Epilogue *>(&e)};
  kiln::kernels::gemm(g, poolOf(run), scratchOf(run));
  return KILN_OK;
}

extern "C" int32_t kiln_region(const kiln_run *run, const void *args) {
  const auto &a = *static_cast<const kiln_region_args *>(args);
  for (int64_t i = 0; i < a.int_inputs; ++i) {
    const int64_t *x = at<int64_t>(run, a.ints[i]);
    for (int64_t k = 0; k < a.int_elements[i]; ++k)
      if (x[k] > a.int_bound || x[k] < -a.int_bound)
        return KILN_INEXACT_INTEGER;
  }
  if (a.mode == KILN_REGION_ROWS)
    rowReductions(run, a);
  else if (a.mode == KILN_REGION_COLUMNS)
    columnReductions(run, a);
  else
    elementwise(run, a);
  return KILN_OK;
}

namespace {

kiln::kernels::Attention attentionOf(const kiln_run *run, const kiln_attention_args &a) {
  kiln::kernels::Attention k;
  k.batch = a.batch, k.hq = a.hq, k.hkv = a.hkv, k.tq = a.tq, k.tk = a.tk, k.d = a.d, k.dv = a.dv;
  k.scale = a.scale, k.causal = a.causal != 0, k.dropout = a.dropout;
  k.seed = seedAtStep(run, a.seed, a.step), k.firstBatch = rankOf(run) * a.batch;
  k.band = a.window, k.bthd = a.bthd != 0, k.bf16 = a.bf16_products != 0;
  k.q = at(run, a.q), k.k = at(run, a.k), k.v = at(run, a.v);
  k.mask = at<uint8_t>(run, a.mask), k.bias = at(run, a.bias);
  std::copy(a.mask_strides, a.mask_strides + 4, k.maskStrides.begin());
  std::copy(a.bias_strides, a.bias_strides + 4, k.biasStrides.begin());
  return k;
}

} // namespace

extern "C" int32_t kiln_attention(const kiln_run *run, const void *args) {
  const auto &a = *static_cast<const kiln_attention_args *>(args);
  kiln::kernels::attentionForward(attentionOf(run, a), at(run, a.out), at(run, a.lse),
                                  scratchOf(run), poolOf(run));
  return KILN_OK;
}

extern "C" int32_t kiln_attention_backward(const kiln_run *run, const void *args) {
  const auto &a = *static_cast<const kiln_attention_args *>(args);
  kiln::kernels::attentionBackward(attentionOf(run, a), at(run, a.out), at(run, a.lse),
                                   at(run, a.dout), at(run, a.dq), at(run, a.dk), at(run, a.dvalue),
                                   at(run, a.dbias), a.bias_elements, scratchOf(run), poolOf(run));
  return KILN_OK;
}

extern "C" int32_t kiln_norm(const kiln_run *run, const void *args) {
  const auto &a = *static_cast<const kiln_norm_args *>(args);
  kiln::kernels::NormForward f;
  f.rows = a.rows, f.n = a.n, f.centered = a.centered != 0, f.eps = static_cast<float>(a.eps);
  f.a = at(run, a.a), f.aRows = a.a_rows;
  f.b = at(run, a.b), f.bRows = a.b_rows, f.sum = at(run, a.sum);
  f.weight = at(run, a.weight), f.bias = at(run, a.bias);
  if (a.y_bf16)
    f.yBf16 = at<uint16_t>(run, a.y);
  else
    f.y = at(run, a.y);
  f.mean = at(run, a.mean), f.rstd = at(run, a.rstd);
  kiln::kernels::normForward(f, poolOf(run));
  return KILN_OK;
}

extern "C" int32_t kiln_norm_backward(const kiln_run *run, const void *args) {
  const auto &a = *static_cast<const kiln_norm_backward_args *>(args);
  kiln::kernels::NormBackward b;
  b.rows = a.rows, b.n = a.n;
  b.x = at(run, a.x), b.mean = at(run, a.mean), b.rstd = at(run, a.rstd), b.dy = at(run, a.dy);
  b.weight = at(run, a.weight), b.dx = at(run, a.dx), b.dweight = at(run, a.dweight);
  kiln::kernels::normBackward(b, poolOf(run));
  return KILN_OK;
}

namespace {

// An index op's places resolved, its indices checked first: ix null if one is out of range.
struct Indexed {
  const int64_t *ix = nullptr;
  const float *src = nullptr;
  float *dst = nullptr;
};
Indexed indexed(const kiln_run *run, const kiln_index_args &a) {
  const int64_t *ix = at<int64_t>(run, a.index);
  for (int64_t k = 0; k < a.count; ++k)
    if (ix[k] < 0 || ix[k] >= a.size)
      return {};
  return {ix, at(run, a.data), at(run, a.out)};
}

} // namespace

// On the calling thread: a decoding step writes B x H rows of D elements (a KV cache's slices),
// too few to share out.
extern "C" int32_t kiln_update_slice(const kiln_run *run, const void *args) {
  const auto &a = *static_cast<const kiln_update_slice_args *>(args);
  const auto *base = at<const uint8_t>(run, a.base), *update = at<const uint8_t>(run, a.update);
  auto *out = at<uint8_t>(run, a.out);
  const int64_t *index = at<const int64_t>(run, a.index);
  const int64_t slice = a.inner * a.elem_bytes; // bytes
  if (out != base)
    std::memcpy(out, base, static_cast<size_t>(a.rows * a.outer * a.size * slice));
  for (int64_t i = 0; i < a.rows; ++i) {
    if (index[i] < 0 || index[i] >= a.size)
      continue;
    for (int64_t o = 0; o < a.outer; ++o)
      std::memcpy(out + ((i * a.outer + o) * a.size + index[i]) * slice,
                  update + (i * a.outer + o) * slice, static_cast<size_t>(slice));
  }
  return KILN_OK;
}

// Parts of whole rows (a copy: any split gives the same bytes); widen: rows of bf16, each element
// widened to the f32 of its value.
extern "C" int32_t kiln_gather(const kiln_run *run, const void *args) {
  const auto &a = *static_cast<const kiln_index_args *>(args);
  const Indexed x = indexed(run, a);
  if (!x.ix)
    return KILN_INDEX_OUT_OF_RANGE;
  const int64_t *ix = x.ix, row = a.row_floats;
  const auto *bf16 = a.widen ? at<uint16_t>(run, a.data) : nullptr;
  const int64_t perPart = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, row));
  runParts(poolOf(run), (a.count + perPart - 1) / perPart, [&](int64_t q, int) {
    for (int64_t k = q * perPart; k < std::min(a.count, (q + 1) * perPart); ++k) {
      if (!bf16) {
        std::memcpy(x.dst + k * row, x.src + ix[k] * row, sizeof(float) * row);
        continue;
      }
      const uint16_t *from = bf16 + ix[k] * row;
      for (int64_t j = 0; j < row; ++j)
        x.dst[k * row + j] = kiln::fromBf16Bits(from[j]);
    }
  });
  return KILN_OK;
}

// Each update row added in index order, as the reference does (bit for bit); the threads split
// the columns, never the rows. With a base, each named row's updates sum into a row of their own
// (from 0, in index order), which is then added to the base's row: the bits of
// add(base, scatter_add(...)) on those rows, and no pass over the others when out is the base.
// Rows add on the SIMD target's vectors (reduce.h's combineRow): the compiler left the plain loop
// scalar, and the benchmark GPT's embedding gradient took 0.32-0.35 ms instead of 0.15-0.17.
extern "C" int32_t kiln_scatter_add(const kiln_run *run, const void *args) {
  const auto &a = *static_cast<const kiln_index_args *>(args);
  const Indexed x = indexed(run, a);
  if (!x.ix)
    return KILN_INDEX_OUT_OF_RANGE;
  const int64_t *ix = x.ix, row = a.row_floats;
  constexpr int64_t kColumns = 256;
  const int64_t parts = (row + kColumns - 1) / kColumns;
  const float *base = at(run, a.base);
  if (!base) {
    runParts(poolOf(run), parts, [&](int64_t q, int) {
      const int64_t c0 = q * kColumns, w = std::min(kColumns, row - c0);
      for (int64_t r = 0; r < a.size; ++r)
        std::fill_n(x.dst + r * row + c0, w, 0.0f);
      for (int64_t k = 0; k < a.count; ++k)
        kiln::kernels::combineRow(Reduce::Sum, x.src + k * row + c0, x.dst + ix[k] * row + c0, w);
    });
    return KILN_OK;
  }
  if (base != x.dst)
    std::memcpy(x.dst, base, sizeof(float) * a.size * row);
  // The named rows, each once (in order of first appearance), and each index's slot among them.
  std::vector<int64_t> named, slot(a.count);
  std::unordered_map<int64_t, int64_t> slotOf;
  for (int64_t k = 0; k < a.count; ++k) {
    auto [it, fresh] = slotOf.try_emplace(ix[k], static_cast<int64_t>(named.size()));
    if (fresh)
      named.push_back(ix[k]);
    slot[k] = it->second;
  }
  runParts(poolOf(run), parts, [&](int64_t q, int) {
    const int64_t c0 = q * kColumns, w = std::min(kColumns, row - c0);
    std::vector<float> sums(named.size() * w, 0.0f);
    for (int64_t k = 0; k < a.count; ++k)
      kiln::kernels::combineRow(Reduce::Sum, x.src + k * row + c0, sums.data() + slot[k] * w, w);
    for (size_t s = 0; s < named.size(); ++s)
      kiln::kernels::combineRow(Reduce::Sum, sums.data() + s * w, x.dst + named[s] * row + c0, w);
  });
  return KILN_OK;
}

extern "C" int32_t kiln_softmax(const kiln_run *run, const void *args) {
  const auto &a = *static_cast<const kiln_rows_args *>(args);
  kiln::kernels::softmaxRows(at(run, a.x), at(run, a.y), a.rows, a.n, poolOf(run));
  return KILN_OK;
}

extern "C" int32_t kiln_log_softmax(const kiln_run *run, const void *args) {
  const auto &a = *static_cast<const kiln_rows_args *>(args);
  kiln::kernels::logSoftmaxRows(at(run, a.x), at(run, a.y), a.rows, a.n, poolOf(run));
  return KILN_OK;
}

extern "C" int32_t kiln_cross_entropy(const kiln_run *run, const void *args) {
  const auto &a = *static_cast<const kiln_cross_entropy_args *>(args);
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t t = a.targets_i32 != 0 ? at<const int32_t>(run, a.targets)[r]
                                         : at<const int64_t>(run, a.targets)[r];
    if ((t < 0 || t >= a.n) && t != a.ignore_index)
      return KILN_INDEX_OUT_OF_RANGE;
  }
  kiln::kernels::crossEntropyRows(at(run, a.x), at<const void>(run, a.targets), a.targets_i32 != 0,
                                  at(run, a.loss), at(run, a.lse), a.rows, a.n,
                                  static_cast<float>(a.smoothing), poolOf(run));
  return KILN_OK;
}

extern "C" int32_t kiln_reduce(const kiln_run *run, const void *args) {
  const auto &a = *static_cast<const kiln_reduce_args *>(args);
  kiln::kernels::reduceMiddle(static_cast<Reduce>(a.kind), at(run, a.x), at(run, a.y), a.outer, a.n,
                              a.inner, poolOf(run));
  return KILN_OK;
}

extern "C" int32_t kiln_permute(const kiln_run *run, const void *args) {
  const auto &a = *static_cast<const kiln_permute_args *>(args);
  kiln::kernels::permute(
      at<uint8_t>(run, a.x), at<uint8_t>(run, a.y), std::vector<int64_t>(a.shape, a.shape + a.rank),
      std::vector<int64_t>(a.perm, a.perm + a.rank), a.element_bytes, poolOf(run));
  return KILN_OK;
}

extern "C" int32_t kiln_copy(const kiln_run *run, const void *args) {
  const auto &a = *static_cast<const kiln_copy_args *>(args);
  std::memmove(at<uint8_t>(run, a.y), at<uint8_t>(run, a.x), static_cast<size_t>(a.bytes));
  return KILN_OK;
}

namespace {
// The run's communicator (null: this process alone), if it has the ranks the program was
// compiled for.
bool sameRanks(const kiln_run *run, int64_t ranks) {
  const auto *comm = static_cast<const kiln::runtime::Communicator *>(run->comm);
  return (comm ? comm->size() : 1) == ranks;
}

// all_reduce and all_reduce_start: the run's communicator, checked against the ranks the program
// was compiled for, takes y (x's bytes copied there) through `reduce` (blocking, or started).
int32_t reduceInto(const kiln_run *run, const void *args,
                   kiln::Status (kiln::runtime::Communicator::*reduce)(float *, int64_t)) {
  const auto &a = *static_cast<const kiln_all_reduce_args *>(args);
  if (!sameRanks(run, a.ranks))
    return KILN_RANKS_DIFFER;
  auto *comm = static_cast<kiln::runtime::Communicator *>(run->comm);
  float *y = at(run, a.y);
  std::memmove(y, at(run, a.x), static_cast<size_t>(a.count) * sizeof(float));
  if (comm && !(comm->*reduce)(y, a.count))
    return KILN_COLLECTIVE_FAILED;
  return KILN_OK;
}
} // namespace

extern "C" int32_t kiln_all_reduce(const kiln_run *run, const void *args) {
  return reduceInto(run, args, &kiln::runtime::Communicator::allReduceMean);
}

extern "C" int32_t kiln_all_reduce_start(const kiln_run *run, const void *args) {
  return reduceInto(run, args, &kiln::runtime::Communicator::start);
}

extern "C" int32_t kiln_all_reduce_wait(const kiln_run *run, const void *args) {
  const auto &a = *static_cast<const kiln_all_reduce_args *>(args);
  if (!sameRanks(run, a.ranks))
    return KILN_RANKS_DIFFER;
  auto *comm = static_cast<kiln::runtime::Communicator *>(run->comm);
  float *pending = at(run, a.x);
  if (comm && !comm->finish(pending))
    return KILN_COLLECTIVE_FAILED;
  std::memmove(at(run, a.y), pending, static_cast<size_t>(a.count) * sizeof(float));
  return KILN_OK;
}

namespace {
// The sharded optimizer's kernels: the run's communicator (checked against the ranks the program
// was compiled for) takes x and y through `op`.
int32_t shardCollective(const kiln_run *run, const void *args,
                        kiln::Status (kiln::runtime::Communicator::*op)(const float *, float *,
                                                                        int64_t)) {
  const auto &a = *static_cast<const kiln_all_reduce_args *>(args);
  if (!sameRanks(run, a.ranks))
    return KILN_RANKS_DIFFER;
  auto *comm = static_cast<kiln::runtime::Communicator *>(run->comm);
  const float *x = at(run, a.x);
  float *y = at(run, a.y);
  if (!comm) { // one rank: each is the identity
    std::memmove(y, x, static_cast<size_t>(a.count) * sizeof(float));
    return KILN_OK;
  }
  return (comm->*op)(x, y, a.count) ? KILN_OK : KILN_COLLECTIVE_FAILED;
}
} // namespace

extern "C" int32_t kiln_reduce_scatter(const kiln_run *run, const void *args) {
  return shardCollective(run, args, &kiln::runtime::Communicator::reduceScatterMean);
}

extern "C" int32_t kiln_all_gather(const kiln_run *run, const void *args) {
  return shardCollective(run, args, &kiln::runtime::Communicator::allGather);
}

extern "C" int32_t kiln_rank_chunk(const kiln_run *run, const void *args) {
  const auto &a = *static_cast<const kiln_rank_chunk_args *>(args);
  if (!sameRanks(run, a.ranks))
    return KILN_RANKS_DIFFER;
  const auto *comm = static_cast<const kiln::runtime::Communicator *>(run->comm);
  const int64_t first = (comm ? comm->rank() : 0) * a.count; // the part is [first, first + count)
  const int64_t from = std::max(first, a.offset),
                to = std::min(first + a.count, a.offset + a.elements);
  if (from < to)
    std::memmove(at(run, a.y) + (from - first), at(run, a.x) + (from - a.offset),
                 static_cast<size_t>(to - from) * sizeof(float));
  return KILN_OK;
}

namespace {

// count elements of type T at y, each the low bytes of bits (little-endian).
template <typename T> void fillWith(uint8_t *y, int64_t count, uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof v);
  std::fill_n(reinterpret_cast<T *>(y), count, v);
}

} // namespace

// By the element's width, so that the fill is one vectorized loop: a memcpy of a runtime width
// per element was a call per element (pad's fill of GPT-2's position-embedding gradient, 786k
// elements, took 0.7 ms of a step).
extern "C" int32_t kiln_fill(const kiln_run *run, const void *args) {
  const auto &a = *static_cast<const kiln_fill_args *>(args);
  uint8_t *y = at<uint8_t>(run, a.y);
  switch (a.element_bytes) {
  case 1:
    fillWith<uint8_t>(y, a.count, a.bits);
    break;
  case 2:
    fillWith<uint16_t>(y, a.count, a.bits);
    break;
  case 4:
    fillWith<uint32_t>(y, a.count, a.bits);
    break;
  default: // 8 (the ABI allows no more)
    fillWith<uint64_t>(y, a.count, a.bits);
  }
  return KILN_OK;
}

namespace {

// Axes [d, rank) of a strided copy; the innermost axis with unit strides on both sides is one
// memcpy.
void copyAxes(const kiln_strided_copy_args &a, int64_t d, const uint8_t *x, uint8_t *y) {
  const int64_t e = a.element_bytes, n = a.shape[d];
  if (d == a.rank - 1) {
    if (a.x_strides[d] == 1 && a.y_strides[d] == 1) {
      std::memcpy(y, x, static_cast<size_t>(n * e));
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(y + i * a.y_strides[d] * e, x + i * a.x_strides[d] * e, static_cast<size_t>(e));
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    copyAxes(a, d + 1, x + i * a.x_strides[d] * e, y + i * a.y_strides[d] * e);
}

} // namespace

// On the calling thread: slices, pads, concats and broadcasts are small in these models.
extern "C" int32_t kiln_strided_copy(const kiln_run *run, const void *args) {
  const auto &a = *static_cast<const kiln_strided_copy_args *>(args);
  for (int64_t d = 0; d < a.rank; ++d)
    if (a.shape[d] == 0)
      return KILN_OK;
  const uint8_t *x = at<uint8_t>(run, a.x);
  uint8_t *y = at<uint8_t>(run, a.y);
  if (a.rank == 0)
    std::memcpy(y, x, static_cast<size_t>(a.element_bytes));
  else
    copyAxes(a, 0, x, y);
  return KILN_OK;
}

// Fixed parts; each element on its own, so any split gives the reference's bits.
extern "C" int32_t kiln_dropout(const kiln_run *run, const void *args) {
  const auto &a = *static_cast<const kiln_dropout_args *>(args);
  const float *x = at(run, a.x);
  float *y = at(run, a.y);
  const float scale = 1.0f / static_cast<float>(1 - a.p);
  const uint64_t seed = seedAtStep(run, a.seed, a.step);
  const uint64_t first = static_cast<uint64_t>(rankOf(run) * a.count);
  constexpr int64_t kPart = 1 << 14;
  runParts(poolOf(run), (a.count + kPart - 1) / kPart, [&](int64_t q, int) {
    for (int64_t k = q * kPart; k < std::min(a.count, (q + 1) * kPart); ++k)
      y[k] = kiln::rng::uniform(seed, first + static_cast<uint64_t>(k)) >= a.p ? x[k] * scale
                                                                                : 0.0f;
  });
  return KILN_OK;
}

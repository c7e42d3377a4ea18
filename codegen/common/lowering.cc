// The lowering table and the lowerings of whole ops (see lowering.h); fusion regions are in
// fusion.cc.
#include "codegen/common/lowering.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "codegen/common/pointwise.h"
#include "ir/evaluate.h"
#include "ir/ops/collective.h"
#include "ir/ops/constant.h"
#include "ir/ops/elementwise.h"
#include "ir/ops/fused.h"
#include "ir/ops/matmul.h"
#include "ir/ops/reduce.h"
#include "ir/ops/region.h"
#include "ir/ops/shape.h"
#include "runtime/kernels/attention.h"
#include "runtime/kernels/permute.h"
#include "runtime/kernels/reduce.h"
#include "runtime/kernels/softmax.h"
#include "support/element.h"
#include "support/workspace.h"

namespace kiln::codegen {
using namespace kiln::ir;

namespace {

struct Operand {
  Place place;
  Type type;
};

std::vector<Operand> operandsOf(const Lowering &l, std::span<const ValueId> vs) {
  std::vector<Operand> out;
  for (ValueId v : vs)
    out.push_back({l.place(v), l.type(v)});
  return out;
}

void readInto(const runtime::StepContext &ctx, const Operand &o, RefTensor<float> &t) {
  const uint8_t *p = ctx.at<uint8_t>(o.place.region, o.place.offset);
  if (o.type.dtype == DType::F32) {
    std::memcpy(t.f.data(), p, t.f.size() * sizeof(float));
    return;
  }
  const int64_t bytes = dtypeBytes(o.type.dtype);
  for (int64_t k = 0; k < t.size(); ++k) {
    if (t.isFloatStorage())
      t.f[k] = static_cast<float>(element::get(o.type.dtype, p + k * bytes));
    else
      t.i[k] = element::getInt(o.type.dtype, p + k * bytes);
  }
}

void writeFrom(const runtime::StepContext &ctx, const Operand &o, const RefTensor<float> &t) {
  uint8_t *p = ctx.at<uint8_t>(o.place.region, o.place.offset);
  if (o.type.dtype == DType::F32) {
    std::memcpy(p, t.f.data(), t.f.size() * sizeof(float));
    return;
  }
  const int64_t bytes = dtypeBytes(o.type.dtype);
  for (int64_t k = 0; k < t.size(); ++k) {
    if (t.isFloatStorage())
      element::set(o.type.dtype, p + k * bytes, t.f[k]);
    else
      element::setInt(o.type.dtype, p + k * bytes, t.i[k]);
  }
}

// reshape: nothing to do when the plan made it a view (the same bytes), else a copy.
runtime::Step lowerReshape(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  Place from = l.place(n.operands[0]), to = l.place(n.results[0]);
  if (from.region == to.region && from.offset == to.offset)
    return {"reshape (view)", {}, {}};
  return kernelStep("reshape", &kiln_copy, "kiln_copy",
                    kiln_copy_args{l.type(n.results[0]).bytes(), abiPlace(from), abiPlace(to)});
}

// transpose of any dtype: a permuting copy.
runtime::Step lowerTranspose(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  const Type &x = l.type(n.operands[0]);
  if (x.rank() > KILN_MAX_RANK)
    return lowerReference(l, id);
  kiln_permute_args a{};
  a.rank = x.rank(), a.element_bytes = dtypeBytes(x.dtype);
  std::vector<int64_t> perm = n.attrs.getInts("perm");
  for (int64_t d = 0; d < x.rank(); ++d)
    a.shape[d] = x.shape[d], a.perm[d] = perm[d];
  a.x = abiPlace(l.place(n.operands[0])), a.y = abiPlace(l.place(n.results[0]));
  return kernelStep("transpose", &kiln_permute, "kiln_permute", a);
}

// softmax / log_softmax of f32 over the last axis.
runtime::Step lowerSoftmax(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  const Type &x = l.type(n.operands[0]);
  if (x.dtype != DType::F32 || x.shape.empty() ||
      *normalizeAxis(n.attrs.getInt("axis"), x.rank()) != x.rank() - 1)
    return lowerReference(l, id);
  const int64_t cols = x.shape.back(), rows = cols == 0 ? 0 : x.numElements() / cols;
  const kiln_rows_args a{rows, cols, abiPlace(l.place(n.operands[0])),
                         abiPlace(l.place(n.results[0]))};
  if (n.op == OpKind::Softmax)
    return kernelStep("softmax", &kiln_softmax, "kiln_softmax", a);
  return kernelStep("log_softmax", &kiln_log_softmax, "kiln_log_softmax", a);
}

// cross_entropy of f32 logits.
runtime::Step lowerCrossEntropy(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  const Type &x = l.type(n.operands[0]);
  if (x.dtype != DType::F32)
    return lowerReference(l, id);
  const int64_t cols = x.shape.back(), rows = l.type(n.results[0]).numElements();
  kiln_cross_entropy_args a{};
  a.rows = rows, a.n = cols, a.smoothing = n.attrs.getFloat("label_smoothing");
  a.ignore_index = n.attrs.getInt("ignore_index");
  a.targets_i32 = l.type(n.operands[1]).dtype == DType::I32;
  a.x = abiPlace(l.place(n.operands[0])), a.targets = abiPlace(l.place(n.operands[1]));
  a.loss = abiPlace(l.place(n.results[0])), a.lse = abiPlace(l.place(n.results[1]));
  runtime::Step s = kernelStep("cross_entropy", &kiln_cross_entropy, "kiln_cross_entropy", a);
  s.run = lowerReference(l, id).run; // (a target out of range: the reference's error, at the node)
  return s;
}

// The place of a dropout's f32 step operand (absent: region -1, step 0); nullopt for a step of
// another dtype (which the kernels do not read: the reference runs such a node).
std::optional<kiln_place> stepPlace(const Lowering &l, ValueId step) {
  if (step == kNone)
    return kiln_place{-1, 0};
  if (l.type(step).dtype != DType::F32)
    return std::nullopt;
  return abiPlace(l.place(step));
}

// dropout of f32: its counter-based stream, element by element.
runtime::Step lowerDropout(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  const Type &y = l.type(n.results[0]);
  const std::optional<kiln_place> step = stepPlace(l, operandOf(n, "step"));
  if (y.dtype != DType::F32 || !step)
    return lowerReference(l, id);
  kiln_dropout_args a{};
  a.count = y.numElements(), a.p = n.attrs.getFloat("p");
  a.seed = static_cast<uint64_t>(n.attrs.getInt("seed"));
  a.x = abiPlace(l.place(n.operands[0])), a.y = abiPlace(l.place(n.results[0]));
  a.step = *step;
  return kernelStep("dropout", &kiln_dropout, "kiln_dropout", a);
}

// all_reduce, all_reduce_start, all_reduce_wait: the run's Communicator (MPI's world under
// mpirun), in place where the plan put y over x.
runtime::Step lowerAllReduce(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  kiln_all_reduce_args a{};
  a.count = l.type(n.results[0]).numElements(), a.ranks = n.attrs.getInt("ranks");
  a.x = abiPlace(l.place(n.operands[0])), a.y = abiPlace(l.place(n.results[0]));
  if (n.op == OpKind::AllReduceStart)
    return kernelStep("all_reduce_start", &kiln_all_reduce_start, "kiln_all_reduce_start", a);
  if (n.op == OpKind::AllReduceWait)
    return kernelStep("all_reduce_wait", &kiln_all_reduce_wait, "kiln_all_reduce_wait", a);
  return kernelStep("all_reduce", &kiln_all_reduce, "kiln_all_reduce", a);
}

// reduce_scatter of the joined operands x, a message per piece of y (reduceScatterPiece): the
// ranks' pieces, x[kC + j, kC + j + len) for k = 0..N-1, are copied from the operands they lie in
// to the scratch region one after the other, and reduce-scattered into y[j, j + len).
runtime::Step lowerReduceScatter(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  runtime::Step s;
  s.kind = "reduce_scatter";
  const int64_t ranks = n.attrs.getInt("ranks"), part = l.type(n.results[0]).numElements();
  const int64_t piece = reduceScatterPiece(ranks, part);
  const Place out = l.place(n.results[0]), scratch{MemRegion::Scratch, 0};
  auto at = [](Place p, int64_t floats) {
    return abiPlace(Place{p.region, p.offset + floats * int64_t{sizeof(float)}});
  };
  for (int64_t j = 0; j < part; j += piece) {
    const int64_t len = std::min(piece, part - j);
    for (int64_t k = 0; k < ranks; ++k) {
      const int64_t first = k * part + j, last = first + len; // of the joined x
      int64_t offset = 0;
      for (ValueId x : n.operands) {
        const int64_t elements = l.type(x).numElements();
        const int64_t from = std::max(first, offset), to = std::min(last, offset + elements);
        if (from < to) {
          const kiln_copy_args c{(to - from) * int64_t{sizeof(float)},
                                 at(l.place(x), from - offset),
                                 at(scratch, k * len + from - first)};
          s.calls.push_back(runtime::KernelCall::of(&kiln_copy, "kiln_copy", c));
        }
        offset += elements;
      }
    }
    const kiln_all_reduce_args a{len, ranks, at(scratch, 0), at(out, j)};
    s.calls.push_back(runtime::KernelCall::of(&kiln_reduce_scatter, "kiln_reduce_scatter", a));
  }
  return s;
}

// rank_chunk: a call per operand, each copying what of it lies in the rank's part.
runtime::Step lowerRankChunk(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  runtime::Step s;
  s.kind = "rank_chunk";
  kiln_rank_chunk_args a{};
  a.count = l.type(n.results[0]).numElements(), a.ranks = n.attrs.getInt("ranks");
  a.y = abiPlace(l.place(n.results[0]));
  for (ValueId x : n.operands) {
    a.elements = l.type(x).numElements(), a.x = abiPlace(l.place(x));
    s.calls.push_back(runtime::KernelCall::of(&kiln_rank_chunk, "kiln_rank_chunk", a));
    a.offset += a.elements;
  }
  return s;
}

// all_gather: the run's Communicator; count is one rank's part.
runtime::Step lowerAllGather(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  kiln_all_reduce_args a{};
  a.ranks = n.attrs.getInt("ranks");
  a.count = l.type(n.operands[0]).numElements();
  a.x = abiPlace(l.place(n.operands[0])), a.y = abiPlace(l.place(n.results[0]));
  return kernelStep("all_gather", &kiln_all_gather, "kiln_all_gather", a);
}

// reduce_sum / reduce_mean / reduce_max of f32 over adjacent axes: x as [outer, n, inner].
runtime::Step lowerReduce(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  const Type &x = l.type(n.operands[0]);
  std::vector<bool> axes = reducedAxes(n.attrs, static_cast<int64_t>(x.shape.size()));
  int64_t first = -1, last = -1;
  for (size_t d = 0; d < axes.size(); ++d)
    if (axes[d]) {
      if (first < 0)
        first = static_cast<int64_t>(d);
      else if (last + 1 != static_cast<int64_t>(d))
        return lowerReference(l, id);
      last = static_cast<int64_t>(d);
    }
  if (x.dtype != DType::F32 || first < 0)
    return lowerReference(l, id);
  int64_t outer = 1, count = 1, inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(x.shape.size()); ++d)
    (d < first ? outer : d <= last ? count : inner) *= x.shape[d];
  if (count == 0)
    return lowerReference(l, id);
  const kiln_reduce_args a{
      static_cast<int64_t>(reduceKind(n.op)), outer, count, inner, abiPlace(l.place(n.operands[0])),
      abiPlace(l.place(n.results[0]))};
  return kernelStep(std::string(mnemonic(n.op)), &kiln_reduce, "kiln_reduce", a);
}

} // namespace

kernels::Reduce reduceKind(OpKind op) {
  return op == OpKind::ReduceSum    ? kernels::Reduce::Sum
         : op == OpKind::ReduceMean ? kernels::Reduce::Mean
                                    : kernels::Reduce::Max;
}

runtime::Step lowerReference(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  std::vector<Operand> ins = operandsOf(l, n.operands), outs = operandsOf(l, n.results);
  std::shared_ptr<const Graph> g = l.g;
  // A region names its body's ops, so that what no kernel runs can be told apart.
  const std::string kind =
      (n.op == OpKind::Fusion ? regionKind(n) : std::string(mnemonic(n.op))) + " (reference)";
  return {kind, {}, [g, id, ins, outs](const runtime::StepContext &ctx) -> Status {
            std::vector<RefTensor<float>> in;
            in.reserve(ins.size());
            std::vector<const RefTensor<float> *> ptrs;
            for (const Operand &o : ins) {
              readInto(ctx, o, in.emplace_back(o.type));
              ptrs.push_back(&in.back());
            }
            Expected<std::vector<RefTensor<float>>> results = evaluateNode<float>(*g, id, ptrs);
            if (!results)
              return results.error();
            for (size_t j = 0; j < outs.size(); ++j)
              writeFrom(ctx, outs[j], (*results)[j]);
            return Status{};
          }};
}

std::vector<int64_t> broadcastStrides(const Shape &t, const Shape &space) {
  std::vector<int64_t> strides(space.size(), 0);
  int64_t stride = 1;
  for (int64_t d = static_cast<int64_t>(t.size()) - 1, s = static_cast<int64_t>(space.size()) - 1;
       d >= 0 && s >= 0; --d, --s) {
    strides[s] = t[d] == 1 ? 0 : stride;
    stride *= t[d];
  }
  return strides;
}

// attention / attention_backward of f32: the flash-style kernels, masks, biases and dropout
// included (GQA reads kv heads in place); their tiles in the plan's scratch.
runtime::Step lowerAttention(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  const bool backward = n.op == OpKind::AttentionBackward;
  const std::optional<kiln_place> step = stepPlace(l, operandOf(n, "step"));
  if (l.type(n.operands[0]).dtype != DType::F32 || !step)
    return lowerReference(l, id);
  const ir::AttentionDims dims = ir::attentionDims(*l.g, n);
  kiln_attention_args a{};
  a.batch = dims.b, a.hq = dims.hq, a.tq = dims.tq, a.d = dims.d;
  a.hkv = dims.hkv, a.tk = dims.tk, a.dv = dims.dv;
  a.bthd = dims.bthd;
  a.scale = static_cast<float>(n.attrs.getFloat("scale"));
  a.causal = n.attrs.getBool("causal");
  a.window = n.attrs.getInt("window");
  a.bf16_products = n.attrs.getBool("bf16_products");
  a.dropout = n.attrs.getFloat("dropout");
  a.seed = static_cast<uint64_t>(n.attrs.getInt("seed"));
  a.step = *step;
  auto in = [&](size_t i) { return abiPlace(l.place(n.operands[i])); };
  auto out = [&](size_t i) { return abiPlace(l.place(n.results[i])); };
  a.q = in(0), a.k = in(1), a.v = in(2);
  a.mask = a.bias = a.dbias = kiln_place{-1, 0};
  const Shape logits = {a.batch, a.hq, a.tq, a.tk};
  if (ValueId mask = operandOf(n, "mask"); mask != kNone) {
    std::vector<int64_t> st = broadcastStrides(l.type(mask).shape, logits);
    std::copy(st.begin(), st.end(), a.mask_strides);
    a.mask = abiPlace(l.place(mask));
  }
  if (ValueId bias = operandOf(n, "bias"); bias != kNone) {
    std::vector<int64_t> st = broadcastStrides(l.type(bias).shape, logits);
    std::copy(st.begin(), st.end(), a.bias_strides);
    a.bias_elements = l.type(bias).numElements();
    a.bias = abiPlace(l.place(bias));
  }
  if (!backward) {
    a.out = out(0), a.lse = out(1);
    return kernelStep("attention", &kiln_attention, "kiln_attention", a);
  }
  a.out = in(3), a.lse = in(4), a.dout = in(5);
  a.dq = out(0), a.dk = out(1), a.dvalue = out(2);
  if (a.bias.region >= 0)
    a.dbias = out(3);
  return kernelStep("attention_backward", &kiln_attention_backward, "kiln_attention_backward", a);
}

// Batch dimensions flatten to one index z when each operand either has all of the output's batch
// dimensions (stride: its matrix size) or none of them (stride 0, broadcast).
std::optional<kernels::Gemm> gemmOf(const Graph &graph, const Node &mm) {
  const Type &a = graph.type(mm.operands[0]), &b = graph.type(mm.operands[1]);
  const Type &out = graph.type(mm.results[0]);
  const bool ta = mm.attrs.getBool("transpose_a"), tb = mm.attrs.getBool("transpose_b");
  // An f32 product has f32 operands, or (bf16 products) each f32 or bf16 (ir/ops/matmul.cc).
  if (out.dtype != DType::F32)
    return std::nullopt;
  const Shape &so = out.shape;
  const int64_t r = static_cast<int64_t>(so.size());
  kernels::Gemm g;
  g.bf16 = mm.attrs.getBool("bf16_products");
  g.m = so[r - 2], g.n = so[r - 1];
  g.k = ta ? a.shape[a.shape.size() - 2] : a.shape.back();
  g.batch = 1;
  for (int64_t d = 0; d < r - 2; ++d)
    g.batch *= so[d];
  auto batchStride = [&](const Type &t, int64_t matrix) -> std::optional<int64_t> {
    int64_t own = 1;
    for (size_t d = 0; d + 2 < t.shape.size(); ++d)
      own *= t.shape[d];
    if (own == 1)
      return 0;
    if (own == g.batch && t.shape.size() == so.size())
      return matrix;
    return std::nullopt;
  };
  std::optional<int64_t> sa = batchStride(a, g.m * g.k), sb = batchStride(b, g.k * g.n);
  if (!sa || !sb)
    return std::nullopt;
  g.a = ta ? kernels::MatrixRef{nullptr, 1, g.m, *sa} : kernels::MatrixRef{nullptr, g.k, 1, *sa};
  g.b = tb ? kernels::MatrixRef{nullptr, 1, g.k, *sb} : kernels::MatrixRef{nullptr, g.n, 1, *sb};
  g.ldc = g.n, g.cBatchStride = g.m * g.n;
  // A weight shared by the whole batch times row-major A: one GEMM of batch * m rows.
  if (*sb == 0 && !ta && g.batch > 1) {
    g.m *= g.batch, g.batch = 1;
    g.a.batchStride = g.cBatchStride = 0;
  }
  return g;
}

kiln_gemm_args gemmArgs(const kernels::Gemm &shape, Place a, Place b, Place c, bool aBf16,
                        bool bBf16) {
  auto matrix = [&](const kernels::MatrixRef &m, Place p, bool bf16) {
    return kiln_matrix{abiPlace(p), m.rowStride, m.colStride, m.batchStride, bf16};
  };
  kiln_gemm_args args{};
  args.batch = shape.batch, args.m = shape.m, args.n = shape.n, args.k = shape.k;
  args.a = matrix(shape.a, a, aBf16), args.b = matrix(shape.b, b, bBf16), args.c = abiPlace(c);
  args.ldc = shape.ldc, args.c_batch_stride = shape.cBatchStride;
  args.accumulate = shape.accumulate;
  args.bf16_products = shape.bf16;
  return args;
}

runtime::Step lowerMatmul(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  std::optional<kernels::Gemm> shape = gemmOf(*l.g, n);
  if (!shape)
    return lowerReference(l, id);
  const kiln_gemm_args args = gemmArgs(
      *shape, l.place(n.operands[0]), l.place(n.operands[1]), l.place(n.results[0]),
      l.type(n.operands[0]).dtype == DType::BF16, l.type(n.operands[1]).dtype == DType::BF16);
  return kernelStep("matmul", &kiln_gemm, "kiln_gemm", args);
}

namespace {

// The ops with a lowering of their own. Every other op lowers by its record's traits: a pointwise
// op as a one-op region (its formula, fusion.cc), anything else by its reference semantics on the
// node's bytes (constant, iota and tri among them: they run once, at load, as constants).
constexpr std::pair<OpKind, LowerFn> kOwnLowering[] = {
    {OpKind::Matmul, &lowerMatmul},
    {OpKind::Fusion, &lowerFusion},
    {OpKind::Reshape, &lowerReshape},
    {OpKind::ReduceSum, &lowerReduce},
    {OpKind::ReduceMean, &lowerReduce},
    {OpKind::ReduceMax, &lowerReduce},
    {OpKind::Attention, &lowerAttention},
    {OpKind::AttentionBackward, &lowerAttention},
    {OpKind::Transpose, &lowerTranspose},
    {OpKind::Softmax, &lowerSoftmax},
    {OpKind::LogSoftmax, &lowerSoftmax},
    {OpKind::CrossEntropy, &lowerCrossEntropy},
    {OpKind::Gather, &lowerIndex},
    {OpKind::ScatterAdd, &lowerIndex},
    {OpKind::UpdateSlice, &lowerUpdateSlice},
    {OpKind::LayerNorm, &lowerNorm},
    {OpKind::LayerNormBackward, &lowerNorm},
    {OpKind::RmsNorm, &lowerNorm},
    {OpKind::RmsNormBackward, &lowerNorm},
    {OpKind::AddLayerNorm, &lowerNorm},
    {OpKind::AddRmsNorm, &lowerNorm},
    {OpKind::StopGradient, &lowerStopGradient}, // the identity: a copy
    {OpKind::Broadcast, &lowerBroadcast},
    {OpKind::Slice, &lowerSlice},
    {OpKind::Pad, &lowerPad},
    {OpKind::Concat, &lowerConcat},
    {OpKind::Dropout, &lowerDropout},
    {OpKind::AllReduce, &lowerAllReduce},
    {OpKind::AllReduceStart, &lowerAllReduce},
    {OpKind::AllReduceWait, &lowerAllReduce},
    {OpKind::ReduceScatter, &lowerReduceScatter},
    {OpKind::AllGather, &lowerAllGather},
    {OpKind::RankChunk, &lowerRankChunk},
};

constexpr OpInfo const *kRecords[] = {
#define KILN_OP(Name, family) &k##Name##Op,
#include "ir/ops.def"
#undef KILN_OP
};

constexpr std::array<LowerFn, kNumOps> kLowering = [] {
  std::array<LowerFn, kNumOps> table{};
  for (int k = 0; k < kNumOps; ++k)
    table[k] = kRecords[k]->pointwise ? &lowerPointwise : &lowerReference;
  for (auto [kind, fn] : kOwnLowering)
    table[static_cast<size_t>(kind)] = fn;
  return table;
}();

} // namespace

LowerFn lowering(OpKind kind) {
  return kLowering[static_cast<size_t>(kind)];
}

bool hasKernel(OpKind kind) {
  return lowering(kind) != &lowerReference;
}

} // namespace kiln::codegen

// Fusion regions on the Highway backend: the body runs row by row through a small interpreter
// whose every instruction is one loop over a row segment (at most kChunk elements) of the
// iteration space S, so no intermediate value of the body ever goes to memory beyond an L1-sized
// buffer; the loops are those of pointwise.h (the op's own scalar function, vectorized for the
// CPU's SIMD target), so an element is computed exactly as the reference does, except exp, log,
// tanh, erf and the activations made of them, which go to the vectorized math of
// runtime/kernels/vmath.h (within 1-5 ulps of the reference's libm there).
// A region with a matmul runs it as a GEMM whose epilogue is this interpreter over each finished
// block of C (still in L2). Trailing reductions accumulate as the rows go by (see ReductionMap);
// regions with values other than f32 and bool run by reference. Where a backend compiled a
// region's program (codegen/llvm sets TileProgram::native), that code runs instead of the
// interpreter, in the same parts and order.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "codegen/highway/lowering.h"
#include "codegen/highway/pointwise.h"
#include "codegen/highway/tile_program.h"
#include "ir/ops/reduce.h"
#include "ir/ops/region.h"
#include "support/workspace.h"

namespace kiln::highway {
using namespace kiln::ir;

namespace {

constexpr int64_t kChunk = 512; // floats per value buffer: 2 KiB, all of a body's fit in L1

constexpr int64_t kExactInFloat = int64_t{1} << 24;

bool supportedValue(const Type &t) {
  return t.dtype == DType::F32 || t.dtype == DType::Bool;
}

// Whether every use of body value v is a comparison (where integers read as floats compare the
// same, while they are exact), and v is no output.
bool onlyCompared(const Graph &body, ValueId v) {
  for (const Node &n : body.nodes())
    for (ValueId o : n.operands)
      if (o == v && n.op != OpKind::Eq && n.op != OpKind::Ne && n.op != OpKind::Lt &&
          n.op != OpKind::Le && n.op != OpKind::Gt && n.op != OpKind::Ge)
        return false;
  for (const Output &o : body.outputs())
    if (o.value == v)
      return false;
  return true;
}

// What a region may hold by the op records' own trait (its pointwise ops and its one matmul),
// on f32 and bool values: runPointwise covers every pointwise op.
bool supportedOp(const Node &n, const Graph &body) {
  RegionRole role = regionRole(n.op);
  if (role != RegionRole::Pointwise && role != RegionRole::Matmul)
    return false;
  for (ValueId v : n.results)
    if (!supportedValue(body.type(v)))
      return false;
  return true;
}

ReductionMap reductionMap(const Node &n, const Graph &body, const Shape &space) {
  std::vector<bool> axes = reducedAxes(n.attrs, static_cast<int64_t>(space.size()));
  Shape kept = space;
  for (size_t d = 0; d < space.size(); ++d)
    if (axes[d])
      kept[d] = 1;
  ReductionMap m;
  static_cast<RowMap &>(m) = RowMap(kept, space);
  m.value = n.operands[0];
  m.kind = reduceKind(n.op);
  m.lastReduced = axes.back() || space.back() == 1;
  m.rowLocal = true;
  for (size_t d = 0; d + 1 < space.size(); ++d) {
    m.outSize *= kept[d];
    m.rowLocal = m.rowLocal && (!axes[d] || space[d] == 1);
  }
  m.outSize *= kept.back();
  const int64_t total = body.type(n.operands[0]).numElements();
  m.count = m.outSize == 0 ? 0 : total / m.outSize;
  return m;
}

// Rows per part of the rows walk (by size only: the same parts at any thread count).
int64_t rowsPerPart(const TileProgram &p) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, p.cols));
}

// The region as a tile program, or nullopt if it holds what the interpreter does not run.
std::optional<TileProgram> compileBody(const Lowering &l, const Node &region) {
  const Graph &body = regionBody(region);
  Expected<RegionInfo> info = analyzeRegion(body);
  if (!info || info->space.empty())
    return std::nullopt;
  TileProgram p;
  p.space = info->space;
  p.cols = p.space.back();
  for (size_t d = 0; d + 1 < p.space.size(); ++d)
    p.rows *= p.space[d];
  p.sources.resize(body.numValues());
  for (size_t i = 0; i < body.args().size(); ++i) {
    ValueId v = body.args()[i].value;
    const Type &t = body.type(v);
    const bool i64 = t.dtype == DType::I64 && onlyCompared(body, v);
    if (!supportedValue(t) && !i64)
      return std::nullopt;
    p.sources[v] = {Source::Input, 0, static_cast<int>(i)};
    InputMap in;
    static_cast<RowMap &>(in) = RowMap(t.shape, p.space);
    in.place = l.place(region.operands[i]);
    in.isBool = t.dtype == DType::Bool;
    in.isI64 = i64;
    in.elements = t.numElements();
    p.hasI64 = p.hasI64 || i64;
    p.inputs.push_back(std::move(in));
  }
  for (NodeId id = 0; id < static_cast<NodeId>(body.nodes().size()); ++id) {
    const Node &n = body.node(id);
    ValueId r = n.results[0];
    if (regionRole(n.op) == RegionRole::Reduction) {
      if (body.type(r).dtype != DType::F32 || body.type(n.operands[0]).dtype != DType::F32)
        return std::nullopt;
      continue; // accumulated as rows go by, once its output is known (below)
    }
    if (n.op == OpKind::Constant && body.type(r).dtype == DType::I64) {
      const double c = n.attrs.getFloat("value");
      if (!onlyCompared(body, r) || std::fabs(c) > static_cast<double>(kExactInFloat))
        return std::nullopt;
      p.sources[r] = {Source::Fill, static_cast<float>(c)};
      continue;
    }
    if (!supportedOp(n, body))
      return std::nullopt;
    if (n.op == OpKind::Constant) {
      p.sources[r] = {Source::Fill, static_cast<float>(n.attrs.getFloat("value"))};
      continue;
    }
    if (n.op == OpKind::Matmul) {
      if (body.type(r).shape != p.space)
        return std::nullopt;
      p.sources[r] = {Source::Matmul};
      continue;
    }
    if (n.op == OpKind::Cast && !supportedValue(body.type(n.operands[0])))
      return std::nullopt;
    Instr in{n.op, r};
    in.toBool = n.op == OpKind::Cast && body.type(r).dtype == DType::Bool;
    if (n.operands.size() > 0)
      in.a = n.operands[0];
    if (n.operands.size() > 1)
      in.b = n.operands[1];
    if (n.operands.size() > 2)
      in.c = n.operands[2];
    p.instrs.push_back(in);
  }
  for (size_t k = 0; k < body.outputs().size(); ++k) {
    ValueId v = body.outputs()[k].value;
    const Value &val = body.value(v);
    if (val.def != kNone && regionRole(body.node(val.def).op) == RegionRole::Reduction) {
      p.reductions.push_back(reductionMap(body.node(val.def), body, p.space));
      p.reductions.back().place = l.place(region.results[k]);
      continue;
    }
    if (body.type(v).shape != p.space || !supportedValue(body.type(v)))
      return std::nullopt;
    p.outputs.push_back({v, l.place(region.results[k]), body.type(v).dtype == DType::Bool});
  }
  if (!p.reductions.empty()) {
    const bool last = p.reductions[0].lastReduced;
    for (const ReductionMap &r : p.reductions)
      if (r.lastReduced != last)
        return std::nullopt; // mixed: not one of the two walks
    p.mode = last ? TileProgram::Mode::Rows : TileProgram::Mode::Columns;
    // Rows mode keeps a partial result per part of rows for the sums across rows: at most 16 MiB
    // of them, else the region runs by reference.
    const int64_t parts = (p.rows + rowsPerPart(p) - 1) / rowsPerPart(p);
    int64_t partial = 0;
    for (const ReductionMap &r : p.reductions)
      partial += r.rowLocal ? 0 : r.outSize;
    if (last && partial > (int64_t{1} << 22) / std::max<int64_t>(1, parts))
      return std::nullopt;
  }
  // (Not with reductions: they read their values after the row's last instruction, and one of
  // them may be an input the output overwrites in place.)
  p.lastIsOnlyOutput = p.outputs.size() == 1 && !p.outputs[0].isBool && !p.instrs.empty() &&
                       p.instrs.back().dst == p.outputs[0].value && p.reductions.empty();
  return p;
}

struct NoSink {
  void operator()(int64_t, const std::vector<const float *> &) const {}
};

// Runs rows [r0, r1) of the body, columns [c0, c0 + n) (n <= kChunk); `mm` is the matmul's
// finished block (row stride ldc) if the region has one, its row r0 at mm. sink(r, values) sees
// every value of row r's segment before the outputs are stored (the reductions read it).
template <class Sink = NoSink>
void runRows(const TileProgram &p, const runtime::StepContext &ctx, int64_t r0, int64_t r1,
             int64_t c0, int64_t n, const float *mm, int64_t ldc, const Sink &sink = {}) {
  if constexpr (std::is_same_v<Sink, NoSink>)
    if (p.native)
      return p.native(nullptr, ctx.base.data(), r0, r1, c0, n, mm, ldc, nullptr);
  thread_local std::vector<float> buffers;
  thread_local std::vector<const float *> ptr;
  const size_t values = p.sources.size();
  if (buffers.size() < values * kChunk)
    buffers.resize(values * kChunk);
  ptr.assign(values, nullptr);
  auto buf = [&](size_t v) { return buffers.data() + v * kChunk; };
  for (size_t v = 0; v < values; ++v)
    if (p.sources[v].kind == Source::Fill) {
      std::fill(buf(v), buf(v) + n, p.sources[v].fill);
      ptr[v] = buf(v);
    }
  for (int64_t r = r0; r < r1; ++r) {
    for (size_t v = 0; v < values; ++v) {
      const Source &s = p.sources[v];
      if (s.kind == Source::Matmul) {
        ptr[v] = mm + (r - r0) * ldc;
      } else if (s.kind == Source::Input) {
        const InputMap &in = p.inputs[s.input];
        int64_t at = in.rowOffset(r) + c0 * in.colStride;
        if (in.isBool) {
          const uint8_t *bytes = ctx.at<uint8_t>(in.place.region, in.place.offset) + at;
          for (int64_t j = 0; j < n; ++j)
            buf(v)[j] = bytes[j * in.colStride] ? 1.0f : 0.0f;
          ptr[v] = buf(v);
        } else if (in.isI64) {
          const int64_t *ints = ctx.at<int64_t>(in.place.region, in.place.offset) + at;
          for (int64_t j = 0; j < n; ++j)
            buf(v)[j] = static_cast<float>(ints[j * in.colStride]);
          ptr[v] = buf(v);
        } else if (in.colStride == 1) {
          ptr[v] = ctx.at(in.place.region, in.place.offset) + at;
        } else {
          std::fill(buf(v), buf(v) + n, ctx.at(in.place.region, in.place.offset)[at]);
          ptr[v] = buf(v);
        }
      }
    }
    for (const Instr &in : p.instrs) {
      // The one output, computed last, goes straight to its place: every input the last
      // instruction reads is either a buffer or the same element of the same place (an output in
      // place over an input or the GEMM's block has its shape), read before it is written.
      float *d =
          &in == &p.instrs.back() && p.lastIsOnlyOutput
              ? ctx.at(p.outputs[0].place.region, p.outputs[0].place.offset) + r * p.cols + c0
              : buf(in.dst);
      runPointwise(in.op, in.toBool, d, ptr[in.a], in.b >= 0 ? ptr[in.b] : nullptr,
                   in.c >= 0 ? ptr[in.c] : nullptr, n);
      ptr[in.dst] = d;
    }
    sink(r, ptr);
    // Every value of this row segment is computed before any output is stored, so an output
    // in place over an input (or over the GEMM's block) reads nothing it has overwritten.
    for (const OutputMap &o : p.outputs) {
      const int64_t at = r * p.cols + c0;
      if (o.isBool) {
        uint8_t *to = ctx.at<uint8_t>(o.place.region, o.place.offset) + at;
        for (int64_t j = 0; j < n; ++j)
          to[j] = ptr[o.value][j] != 0;
        continue;
      }
      float *to = ctx.at(o.place.region, o.place.offset) + at;
      if (to != ptr[o.value]) // the GEMM's block may already be this output
        std::memmove(to, ptr[o.value], static_cast<size_t>(n) * sizeof(float));
    }
  }
}

// Rows split over the threads in fixed parts (pointwise: no sums, so any split gives the same).
runtime::Step elementwiseStep(std::shared_ptr<const TileProgram> p, std::string kind) {
  return {std::move(kind), [p](const runtime::StepContext &ctx) {
            const int64_t perPart = rowsPerPart(*p);
            const int64_t parts = (p->rows + perPart - 1) / perPart;
            ctx.pool->run(parts, [&](int64_t q, int) {
              const int64_t r0 = q * perPart, r1 = std::min(p->rows, r0 + perPart);
              for (int64_t c0 = 0; c0 < p->cols; c0 += kChunk)
                runRows(*p, ctx, r0, r1, c0, std::min(kChunk, p->cols - c0), nullptr, 0);
            });
            return Status{};
          }};
}

// ---- Reductions ----
// Sums and maxima by kernels::reduceInit / reduceCombine (float, max propagating NaN).
constexpr int kLanes = 16;
constexpr int64_t kColumns = 64; // a columns-mode part: a multiple of kLanes

// lanes[(c0 + j) mod kLanes] takes x[j], j < n (c0 is a multiple of kLanes).
void accumulateLanes(kernels::Reduce kind, float *lanes, const float *x, int64_t n) {
  int64_t j = 0;
  if (kind == kernels::Reduce::Max) {
    for (; j < n; ++j)
      lanes[j % kLanes] = kernels::reduceCombine(kind, lanes[j % kLanes], x[j]);
    return;
  }
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l)
      lanes[l] += x[j + l];
  for (; j < n; ++j)
    lanes[j % kLanes] += x[j];
}
float finishLanes(kernels::Reduce kind, const float *lanes) {
  float acc = kernels::reduceInit(kind);
  for (int l = 0; l < kLanes; ++l)
    acc = kernels::reduceCombine(kind, acc, lanes[l]);
  return acc;
}
float finishMean(const ReductionMap &m, float acc) {
  return m.kind == kernels::Reduce::Mean ? acc / static_cast<float>(m.count) : acc;
}

// Rows mode: parts of whole rows (fixed by size). Per row, each reduction's 16 lanes; a row-local
// result is stored at the row's end, the others combine into the part's partial results, which
// are combined part after part in order at the end (so no sum depends on the threads).
runtime::Step rowReductionStep(std::shared_ptr<const TileProgram> p, std::string kind) {
  const int64_t perPart = rowsPerPart(*p);
  const int64_t parts = (p->rows + perPart - 1) / perPart;
  return {std::move(kind), [p, perPart, parts](const runtime::StepContext &ctx) {
            const size_t nr = p->reductions.size();
            std::vector<int64_t> partialAt(nr, -1);
            int64_t partialSize = 0;
            for (size_t k = 0; k < nr; ++k)
              if (!p->reductions[k].rowLocal)
                partialAt[k] = partialSize, partialSize += p->reductions[k].outSize;
            std::vector<float> partials(static_cast<size_t>(partialSize * parts));
            for (size_t k = 0; k < nr; ++k)
              if (partialAt[k] >= 0)
                for (int64_t q = 0; q < parts; ++q)
                  std::fill_n(partials.begin() + q * partialSize + partialAt[k],
                              p->reductions[k].outSize, kernels::reduceInit(p->reductions[k].kind));
            ctx.pool->run(parts, [&](int64_t q, int) {
              const int64_t r0 = q * perPart, r1 = std::min(p->rows, r0 + perPart);
              std::vector<float> lanes(static_cast<size_t>((r1 - r0) * nr * kLanes));
              for (size_t k = 0; k < nr; ++k)
                for (int64_t r = r0; r < r1; ++r)
                  std::fill_n(lanes.begin() + ((r - r0) * nr + k) * kLanes, kLanes,
                              kernels::reduceInit(p->reductions[k].kind));
              for (int64_t c0 = 0; c0 < p->cols; c0 += kChunk) {
                const int64_t n = std::min(kChunk, p->cols - c0);
                if (p->native) {
                  p->native(nullptr, ctx.base.data(), r0, r1, c0, n, nullptr, 0, lanes.data());
                  continue;
                }
                runRows(*p, ctx, r0, r1, c0, n, nullptr, 0,
                        [&](int64_t r, const std::vector<const float *> &v) {
                          for (size_t k = 0; k < nr; ++k)
                            accumulateLanes(p->reductions[k].kind,
                                            &lanes[((r - r0) * nr + k) * kLanes],
                                            v[p->reductions[k].value], n);
                        });
              }
              for (size_t k = 0; k < nr; ++k) {
                const ReductionMap &m = p->reductions[k];
                for (int64_t r = r0; r < r1; ++r) {
                  const float x = finishLanes(m.kind, &lanes[((r - r0) * nr + k) * kLanes]);
                  if (m.rowLocal) {
                    ctx.at(m.place.region, m.place.offset)[m.rowOffset(r)] = finishMean(m, x);
                  } else {
                    float &acc = partials[q * partialSize + partialAt[k] + m.rowOffset(r)];
                    acc = kernels::reduceCombine(m.kind, acc, x);
                  }
                }
              }
            });
            for (size_t k = 0; k < nr; ++k) {
              const ReductionMap &m = p->reductions[k];
              if (partialAt[k] < 0)
                continue;
              float *out = ctx.at(m.place.region, m.place.offset);
              for (int64_t o = 0; o < m.outSize; ++o) {
                float acc = kernels::reduceInit(m.kind);
                for (int64_t q = 0; q < parts; ++q)
                  acc = kernels::reduceCombine(m.kind, acc,
                                               partials[q * partialSize + partialAt[k] + o]);
                out[o] = finishMean(m, acc);
              }
            }
            return Status{};
          }};
}

// Columns mode: parts are blocks of kColumns columns; each walks every row in order and
// accumulates straight into the results (which take no input's bytes).
runtime::Step columnReductionStep(std::shared_ptr<const TileProgram> p, std::string kind) {
  return {std::move(kind), [p](const runtime::StepContext &ctx) {
            // Compiled code keeps no row segment in buffers: wider parts (a quarter of the columns,
            // up to 512) read longer runs of each row (any split sums each result in row order).
            const int64_t width =
                p->native ? std::clamp<int64_t>((p->cols / 4 + kLanes - 1) / kLanes * kLanes,
                                                kColumns, 512)
                          : kColumns;
            const int64_t parts = (p->cols + width - 1) / width;
            ctx.pool->run(parts, [&](int64_t q, int) {
              const int64_t c0 = q * width, n = std::min(width, p->cols - c0);
              for (const ReductionMap &m : p->reductions) {
                float *out = ctx.at(m.place.region, m.place.offset);
                for (int64_t o = 0; o < m.outSize; o += p->cols)
                  std::fill_n(out + o + c0, n, kernels::reduceInit(m.kind));
              }
              if (p->native)
                p->native(nullptr, ctx.base.data(), 0, p->rows, c0, n, nullptr, 0, nullptr);
              else
                runRows(*p, ctx, 0, p->rows, c0, n, nullptr, 0,
                        [&](int64_t r, const std::vector<const float *> &v) {
                          for (const ReductionMap &m : p->reductions) {
                            float *out =
                                ctx.at(m.place.region, m.place.offset) + m.rowOffset(r) + c0;
                            const float *x = v[m.value];
                            if (m.kind == kernels::Reduce::Max)
                              for (int64_t j = 0; j < n; ++j)
                                out[j] = kernels::reduceCombine(m.kind, out[j], x[j]);
                            else
                              for (int64_t j = 0; j < n; ++j)
                                out[j] += x[j];
                          }
                        });
              for (const ReductionMap &m : p->reductions)
                if (m.kind == kernels::Reduce::Mean) {
                  float *out = ctx.at(m.place.region, m.place.offset);
                  for (int64_t o = 0; o < m.outSize; o += p->cols)
                    for (int64_t j = 0; j < n; ++j)
                      out[o + c0 + j] = finishMean(m, out[o + c0 + j]);
                }
            });
            return Status{};
          }};
}

// The region's rows as the kernel ABI's epilogue (kiln_rows_fn) calls them, ctx its program: a
// chunk of columns at a time through runRows (which runs the compiled code where there is some).
void regionRows(const void *ctx, uint8_t *const *bases, int64_t r0, int64_t r1, int64_t c0,
                int64_t n, const float *mm, int64_t ldc, float *) {
  const auto &p = *static_cast<const TileProgram *>(ctx);
  runtime::StepContext step;
  std::copy(bases, bases + kNumMemRegions, step.base.begin());
  for (int64_t c = 0; c < n; c += kChunk)
    runRows(p, step, r0, r1, c0 + c, std::min(kChunk, n - c), mm + c, ldc);
}

// The GEMM (kiln_gemm) writes C into a result of shape S that takes no input's bytes (else into
// the node's scratch past its workspace, which the op record counts), and its epilogue runs the
// body over each finished block.
std::optional<runtime::Step> matmulStep(const Lowering &l, const Node &n,
                                        std::shared_ptr<const TileProgram> p, std::string kind) {
  const Graph &body = regionBody(n);
  const Node *mm = nullptr;
  for (const Node &b : body.nodes())
    if (b.op == OpKind::Matmul)
      mm = &b;
  auto inputIndex = [&](ValueId v) {
    for (size_t i = 0; i < body.args().size(); ++i)
      if (body.args()[i].value == v)
        return static_cast<int>(i);
    return -1;
  };
  int ia = inputIndex(mm->operands[0]), ib = inputIndex(mm->operands[1]);
  std::optional<kernels::Gemm> g =
      gemmShape(body.type(mm->operands[0]), body.type(mm->operands[1]), body.type(mm->results[0]),
                mm->attrs.getBool("transpose_a"), mm->attrs.getBool("transpose_b"));
  if (ia < 0 || ib < 0 || !g)
    return std::nullopt;
  // A result with bytes of its own takes C, else the scratch past the GEMM's workspace does.
  Place c{MemRegion::Scratch,
          workspace::regionBlockOffset(opInfo(OpKind::Matmul).scratchBytes(body, *mm))};
  for (size_t k = 0; k < n.results.size(); ++k)
    if (p->outputs[k].isBool == false &&
        l.plan->slots[n.results[k]].share == MemorySlot::Share::None) {
      c = l.place(n.results[k]);
      break;
    }
  kiln_gemm_args args = gemmArgs(*g, l.place(n.operands[ia]), l.place(n.operands[ib]), c);
  args.epilogue = &regionRows;
  args.epilogue_ctx = p.get();
  args.rows_per_batch = g->batch > 1 ? g->m : p->rows;
  return runtime::Step{std::move(kind), [p, args](const runtime::StepContext &ctx) {
                         const kiln_run run{ctx.base.data(), ctx.pool};
                         kiln_gemm(&run, &args);
                         return Status{};
                       }};
}

} // namespace

runtime::Step lowerFusion(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  std::optional<TileProgram> prog = compileBody(l, n);
  if (!prog)
    return lowerReference(l, id);
  auto p = std::make_shared<TileProgram>(std::move(*prog));
  p->name = "fusion_" + std::to_string(n.results[0]);
  if (l.programs)
    l.programs->push_back(p);
  std::string kind = "fusion{";
  bool hasMatmul = false;
  for (const Node &b : regionBody(n).nodes()) {
    hasMatmul = hasMatmul || b.op == OpKind::Matmul;
    if (b.op != OpKind::Constant)
      kind += std::string(kind.back() == '{' ? "" : " ") + std::string(mnemonic(b.op));
  }
  kind += "}";
  std::optional<runtime::Step> step;
  if (!p->reductions.empty())
    step = p->mode == TileProgram::Mode::Rows ? rowReductionStep(p, kind)
                                              : columnReductionStep(p, kind);
  else if (!hasMatmul)
    step = elementwiseStep(p, kind);
  else
    step = matmulStep(l, n, p, kind);
  if (!step)
    return lowerReference(l, id);
  if (!p->hasI64)
    return std::move(*step);
  // Integers beyond 2^24 would not read exactly as floats: then the reference runs instead.
  return {kind, [p, fast = std::move(step->run),
                 ref = lowerReference(l, id).run](const runtime::StepContext &ctx) {
            for (const InputMap &in : p->inputs) {
              if (!in.isI64)
                continue;
              const int64_t *x = ctx.at<int64_t>(in.place.region, in.place.offset);
              for (int64_t k = 0; k < in.elements; ++k)
                if (x[k] > kExactInFloat || x[k] < -kExactInFloat)
                  return ref(ctx);
            }
            return fast(ctx);
          }};
}

} // namespace kiln::highway

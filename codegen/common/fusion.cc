// Fusion regions on the Highway backend: the body runs row by row through a small interpreter
// whose every instruction is one loop over a row segment (at most kChunk elements) of the
// iteration space S, so no intermediate value of the body ever goes to memory beyond an L1-sized
// buffer; the loops are those of pointwise.h (the op's formula on the CPU's SIMD vectors), so an
// element is computed with the reference's operations, exp, tanh and erf being the vectorized
// math of runtime/kernels/vmath-inl.h (within 1-3 ulps of the reference's libm).
// A region is a call of the kernel ABI: kiln_region walks its rows (and columns) in fixed parts,
// a region with a matmul is a GEMM (kiln_gemm) whose epilogue runs over each finished block of C
// (still in L2); either calls the region's rows function, this interpreter (interpretRows) until
// a backend that compiles regions (codegen/llvm) links its machine code in its place, which then
// runs in the same parts and order. Trailing reductions accumulate as the rows go by (see
// ReductionMap); regions with values other than f32, bool, bf16 stores and exact integers
// (exactIntegers) run by reference.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <optional>
#include <span>
#include <utility>

#include <fmt/format.h>

#include "codegen/common/lowering.h"
#include "codegen/common/pointwise.h"
#include "codegen/common/tile_program.h"
#include "ir/ops/reduce.h"
#include "ir/ops/region.h"
#include "ir/ref_tensor.h"
#include "support/workspace.h"

namespace kiln::codegen {
using namespace kiln::ir;

namespace {

constexpr int64_t kChunk = 512;      // floats per value buffer: 2 KiB, all of a body's fit in L1
constexpr int64_t kLinesFloats = 16; // floats per cache line

constexpr int64_t kExactInFloat = int64_t{1} << 24;

bool supportedValue(const Type &t) {
  return t.dtype == DType::F32 || t.dtype == DType::Bool;
}

// Integers in a region's f32 arithmetic (positions and labels made features and masks, a decoding
// step's clipped relative distances): f32 holds every integer within 2^24 exactly, and an op
// exact on integers (OpInfo::exactOnIntegers: add, sub, neg, max, min, each monotonic in every
// operand) takes its result's extremes at its operands' ranges' corners. With the i64 inputs
// within `bound` (kiln_region checks them before each run) and the constants as they are, a value
// whose range stays within 2^24 is computed exactly: those values, per body value. A region
// takes its inputs within the largest bound, from 2^24 halved down to 2^16, at which every
// integer it computes is exact (TileProgram::intBound): pos - j of two inputs within 2^24 may
// reach 2^25, within 2^23 it stays exact; else it runs by reference.
std::vector<bool> exactIntegers(const Graph &body, int64_t bound) {
  std::vector<std::optional<std::pair<int64_t, int64_t>>> range(body.numValues());
  for (const Arg &a : body.args())
    if (body.type(a.value).dtype == DType::I64)
      range[a.value] = {-bound, bound};
  for (const Node &n : body.nodes()) {
    const ValueId r = n.results[0];
    if (body.type(r).dtype != DType::I64)
      continue;
    int64_t lo = 0, hi = 0;
    if (n.op == OpKind::Constant) {
      const double c = n.attrs.getFloat("value");
      if (!(std::fabs(c) <= static_cast<double>(kExactInFloat)))
        continue;
      lo = hi = static_cast<int64_t>(c);
    } else {
      bool known = opInfo(n.op).exactOnIntegers;
      for (ValueId o : n.operands)
        known = known && range[o].has_value();
      if (!known)
        continue;
      // The operands' corners, 2^operands of them, as one call of the op's reference loop.
      const size_t arity = n.operands.size(), corners = size_t{1} << arity;
      std::vector<RefTensor<double>> in(arity,
                                        RefTensor<double>(Type{DType::I64, {int64_t(corners)}}));
      for (size_t k = 0; k < corners; ++k)
        for (size_t i = 0; i < arity; ++i)
          in[i].i[k] = (k >> i & 1) ? range[n.operands[i]]->second : range[n.operands[i]]->first;
      std::vector<const RefTensor<double> *> ins;
      for (const RefTensor<double> &t : in)
        ins.push_back(&t);
      RefTensor<double> out(Type{DType::I64, {int64_t(corners)}});
      if (!opInfo(n.op).ref64(n.attrs, ins, std::span<RefTensor<double>>(&out, 1)))
        continue;
      lo = *std::min_element(out.i.begin(), out.i.end());
      hi = *std::max_element(out.i.begin(), out.i.end());
    }
    if (lo >= -kExactInFloat && hi <= kExactInFloat)
      range[r] = {lo, hi};
  }
  std::vector<bool> exact(range.size());
  for (size_t v = 0; v < range.size(); ++v)
    exact[v] = range[v].has_value();
  return exact;
}

// Whether every use of body value v is a comparison, a cast to f32 or bool, or an integer op exact
// on integers whose result is exact (exactIntegers) and reads so in turn (where integers read as
// floats compare, convert and add the same: positions made features and masks); and v is no
// output, or an exact integer (stored as i64).
bool readsAsFloat(const Graph &body, ValueId v, const std::vector<bool> &exact) {
  for (const Node &n : body.nodes())
    for (ValueId o : n.operands)
      if (o == v && !opInfo(n.op).comparison &&
          !(n.op == OpKind::Cast && supportedValue(body.type(n.results[0]))) &&
          !(opInfo(n.op).exactOnIntegers && body.type(n.results[0]).dtype == DType::I64 &&
            exact[n.results[0]] && readsAsFloat(body, n.results[0], exact)))
        return false;
  for (const Output &o : body.outputs())
    if (o.value == v && !(body.type(v).dtype == DType::I64 && exact[v]))
      return false;
  return true;
}

// What a region may hold by the op records' own trait (its pointwise ops and its one matmul),
// on f32 and bool values: runPointwise covers every pointwise op. A cast to bf16 holds its
// rounded value as an f32 (ir::CastTo::Bf16), to be stored as bf16.
bool supportedOp(const Node &n, const Graph &body) {
  RegionRole role = regionRole(n.op);
  if (role != RegionRole::Pointwise && role != RegionRole::Matmul)
    return false;
  for (ValueId v : n.results)
    if (!supportedValue(body.type(v)) &&
        !(n.op == OpKind::Cast && body.type(v).dtype == DType::BF16))
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

// Which instructions write their result straight into an output's place (per instruction: the
// output, or -1). Each row segment's values are all computed before its outputs are stored, so
// an output may overwrite an input it shares bytes with (in place, as the optimizer's updates
// are). An instruction writes f32 output o directly if no source that may share o's bytes is read
// after it: an input whose bytes meet o's, or the GEMM's block (which may be o). Reads are the
// instructions', then the reductions' and the stored outputs' at the row's end. The instruction
// itself may read such a source only where it is o exactly (each element read before it is
// written in its place). AdamW's three moments and weight then cost no copies of the segment.
// Sets p.direct and p.prefetched.
void directOutputs(TileProgram &p) {
  const int end = static_cast<int>(p.instrs.size());
  std::vector<int> lastRead(p.sources.size(), -1);
  p.direct.assign(p.instrs.size(), -1);
  for (int k = 0; k < end; ++k)
    for (int v : {p.instrs[k].a, p.instrs[k].b, p.instrs[k].c})
      if (v >= 0)
        lastRead[v] = k;
  std::vector<int> writer(p.sources.size(), -1);
  for (int k = 0; k < end; ++k)
    writer[p.instrs[k].dst] = k;
  for (const ReductionMap &m : p.reductions)
    lastRead[m.value] = end;
  for (const OutputMap &q : p.outputs) // an input (or the block) stored as it is
    if (writer[q.value] < 0)
      lastRead[q.value] = end;
  for (size_t o = 0; o < p.outputs.size(); ++o) {
    const OutputMap &out = p.outputs[o];
    const int k = writer[out.value];
    bool once = true; // (an output value named twice is stored from its buffer)
    for (size_t q = 0; q < p.outputs.size(); ++q)
      once = once && (q == o || p.outputs[q].value != out.value);
    if (out.as != OutputMap::As::F32 || k < 0 || !once)
      continue;
    const int64_t bytes = p.rows * p.cols * 4;
    bool safe = true, inPlace = false;
    for (size_t v = 0; v < p.sources.size() && safe; ++v) {
      const Source &s = p.sources[v];
      bool meets = s.kind == Source::Matmul, exact = meets;
      if (s.kind == Source::Input) {
        const InputMap &in = p.inputs[s.input];
        const int64_t inBytes = in.elements * (in.isBool ? 1 : in.isI64 ? 8 : 4);
        meets = in.place.region == out.place.region && in.place.offset < out.place.offset + bytes &&
                out.place.offset < in.place.offset + inBytes;
        exact = in.place.offset == out.place.offset && in.colStride == 1 &&
                (p.rows == 1 || (in.linear && in.rowStride == p.cols)) && !in.isBool && !in.isI64;
      }
      safe = !meets || lastRead[v] < k || (lastRead[v] == k && exact);
      inPlace = inPlace || (s.kind == Source::Input && meets && exact);
    }
    if (!safe)
      continue;
    p.direct[k] = static_cast<int>(o);
    if (!inPlace)
      p.prefetched.push_back(static_cast<int>(o));
  }
}

// Rows per part of the rows walk (by size only: the same parts at any thread count).
int64_t rowsPerPart(const TileProgram &p) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, p.cols));
}

// Rows mode whose rows fill less than half a chunk, where every input is dense (row r at
// r x cols) or one scalar: p.grouped, the program over groups of whole rows (see TileProgram).
// The loss of kiln_attention_bench (a sum over [8, 1024, 64]) ran its two instructions, their
// set-up and its prefetches 8192 times a step: 0.14 ms of fused/1024's 9.2; in groups of 8 rows,
// 0.10-0.11 ms (the executor's step profile, 2 runs each).
void groupRows(TileProgram &p) {
  if (p.mode != TileProgram::Mode::Rows || p.reductions.empty() || 2 * p.cols > kChunk)
    return;
  for (const Source &s : p.sources)
    if (s.kind == Source::Matmul)
      return;
  for (const InputMap &in : p.inputs) {
    const bool dense = in.colStride == 1 && in.rowStride == p.cols;
    const bool scalar = in.colStride == 0 && in.rowStride == 0;
    if (!in.linear || !(dense || scalar))
      return;
  }
  const int64_t rows = kChunk / p.cols; // a group's
  auto g = std::make_shared<TileProgram>(p);
  g->cols = rows * p.cols;
  g->rows = (p.rows + rows - 1) / rows;
  for (InputMap &in : g->inputs)
    in.rowStride *= rows;
  p.grouped = std::move(g);
}

// Whether body value v is read only as an operand of matmuls (a weight or an activation stored in
// bf16, which the GEMM reads itself: no tile of it is read).
bool onlyGemmOperand(const Graph &body, ValueId v) {
  for (const Node &n : body.nodes())
    for (ValueId o : n.operands)
      if (o == v && n.op != OpKind::Matmul)
        return false;
  return true;
}

// The region as a tile program, or nullopt if it holds what the interpreter does not run.
// The tile program's inputs from the region's operands (false: one it cannot read).
bool mapInputs(const Lowering &l, const Node &region, const Graph &body,
               const std::vector<bool> &exact, TileProgram &p) {
  for (size_t i = 0; i < body.args().size(); ++i) {
    ValueId v = body.args()[i].value;
    const Type &t = body.type(v);
    const bool i64 = t.dtype == DType::I64 && readsAsFloat(body, v, exact);
    const bool gemmOperand = t.dtype == DType::BF16 && onlyGemmOperand(body, v);
    if (!supportedValue(t) && !i64 && !gemmOperand)
      return false;
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
  return true;
}

// The body's nodes as sources (constants, the matmul's block) and instructions; reductions are
// mapped with the outputs (false: a node it cannot run).
bool mapNodes(const Graph &body, const std::vector<bool> &exact, TileProgram &p) {
  for (NodeId id = 0; id < static_cast<NodeId>(body.nodes().size()); ++id) {
    const Node &n = body.node(id);
    ValueId r = n.results[0];
    if (regionRole(n.op) == RegionRole::Reduction) {
      if (body.type(r).dtype != DType::F32 || body.type(n.operands[0]).dtype != DType::F32)
        return false;
      continue; // accumulated as rows go by, once its output is known (mapOutputs)
    }
    if (n.op == OpKind::Constant && body.type(r).dtype == DType::I64) {
      const double c = n.attrs.getFloat("value");
      if (!exact[r] || !readsAsFloat(body, r, exact))
        return false;
      p.sources[r] = {Source::Fill, static_cast<float>(c)};
      continue;
    }
    // (Its operands are i64 inputs, constants or such ops, which read as floats in turn.)
    const bool integer = opInfo(n.op).exactOnIntegers && body.type(r).dtype == DType::I64 &&
                         exact[r] && readsAsFloat(body, r, exact);
    if (!integer && !supportedOp(n, body))
      return false;
    if (n.op == OpKind::Constant) {
      p.sources[r] = {Source::Fill, static_cast<float>(n.attrs.getFloat("value"))};
      continue;
    }
    if (n.op == OpKind::Matmul) {
      if (body.type(r).shape != p.space)
        return false;
      p.sources[r] = {Source::Matmul};
      continue;
    }
    // (An i64 operand is an input or a constant that reads as float, checked above.)
    if (n.op == OpKind::Cast && !supportedValue(body.type(n.operands[0])) &&
        body.type(n.operands[0]).dtype != DType::I64)
      return false;
    Instr in{n.op, r};
    if (n.op == OpKind::Cast)
      in.cast = body.type(r).dtype == DType::Bool   ? ir::CastTo::Bool
                : body.type(r).dtype == DType::BF16 ? ir::CastTo::Bf16
                                                    : ir::CastTo::Same;
    if (n.operands.size() > 0)
      in.a = n.operands[0];
    if (n.operands.size() > 1)
      in.b = n.operands[1];
    if (n.operands.size() > 2)
      in.c = n.operands[2];
    p.instrs.push_back(in);
  }
  return true;
}

// The region's results: reductions' accumulators, or values stored over S (false: one it cannot
// write); then the walk the reductions need, rows or columns (false: mixed, or partial results
// past 16 MiB).
bool mapOutputs(const Lowering &l, const Node &region, const Graph &body, const Shape &space,
                const std::vector<bool> &exact, TileProgram &p) {
  for (size_t k = 0; k < body.outputs().size(); ++k) {
    ValueId v = body.outputs()[k].value;
    const Value &val = body.value(v);
    if (val.def != kNone && regionRole(body.node(val.def).op) == RegionRole::Reduction) {
      p.reductions.push_back(reductionMap(body.node(val.def), body, p.space));
      p.reductions.back().place = l.place(region.results[k]);
      continue;
    }
    const DType dtype = body.type(v).dtype;
    using As = OutputMap::As;
    std::optional<As> as;
    if (dtype == DType::Bool)
      as = As::Bool;
    else if (dtype == DType::BF16)
      as = As::Bf16;
    else if (dtype == DType::I64 && exact[v])
      as = As::I64;
    else if (supportedValue(body.type(v)))
      as = As::F32;
    if (body.type(v).shape != space || !as)
      return false;
    p.outputs.push_back({v, l.place(region.results[k]), *as});
  }
  if (p.reductions.empty())
    return true;
  const bool last = p.reductions[0].lastReduced;
  for (const ReductionMap &r : p.reductions)
    if (r.lastReduced != last)
      return false; // mixed: not one of the two walks
  p.mode = last ? TileProgram::Mode::Rows : TileProgram::Mode::Columns;
  // Rows mode keeps a partial result per part of rows for the sums across rows: at most 16 MiB
  // of them, else the region runs by reference.
  const int64_t parts = (p.rows + rowsPerPart(p) - 1) / rowsPerPart(p);
  int64_t partial = 0;
  for (const ReductionMap &r : p.reductions)
    partial += r.rowLocal ? 0 : r.outSize;
  return !(last && partial > (int64_t{1} << 22) / std::max<int64_t>(1, parts));
}

std::optional<TileProgram> compileBody(const Lowering &l, const Node &region) {
  const Graph &body = regionBody(region);
  Expected<RegionInfo> info = analyzeRegion(body);
  if (!info || (info->space.empty() && !info->reductions.empty()))
    return std::nullopt;
  TileProgram p;
  p.space = info->space.empty() ? Shape{1} : info->space; // a scalar: one row of one column
  p.cols = p.space.back();
  for (size_t d = 0; d + 1 < p.space.size(); ++d)
    p.rows *= p.space[d];
  p.sources.resize(body.numValues());
  // The integer inputs' bound (exactIntegers).
  std::vector<bool> exact = exactIntegers(body, p.intBound);
  auto allExact = [&body](const std::vector<bool> &e) {
    for (const Node &n : body.nodes())
      if (opInfo(n.op).exactOnIntegers && body.type(n.results[0]).dtype == DType::I64 &&
          !e[n.results[0]])
        return false;
    return true;
  };
  while (!allExact(exact) && p.intBound > int64_t{1} << 16)
    p.intBound /= 2, exact = exactIntegers(body, p.intBound);
  if (!mapInputs(l, region, body, exact, p) || !mapNodes(body, exact, p) ||
      !mapOutputs(l, region, body, info->space, exact, p))
    return std::nullopt;
  for (const Source &s : p.sources)
    if (s.kind == Source::Fill)
      p.fills.insert(p.fills.end(), kChunk, s.fill);
  directOutputs(p);
  groupRows(p);
  return p;
}

struct NoSink {
  void operator()(int64_t, const std::vector<const float *> &) const {}
};

// What a broadcast input's buffer holds: `count` copies of the element at `from`. Kept across the
// runRows calls of one interpretRows call (its chunks, and its rows one by one where they are
// wider than a chunk), in which no other program uses the thread's buffers: a scalar (an
// optimizer's learning rate) is filled once a call. Reset at every row and chunk, GPT-2's AdamW
// update (rows of 3072) refilled each of its scalars 512 floats at a time per 512 elements.
struct Filled {
  const float *from = nullptr;
  int64_t count = 0;
};

// The thread's buffers, kept with their capacity from call to call.
struct ThreadBuffers {
  std::vector<float> values;
  std::vector<const float *> ptr, ahead;
  std::vector<Filled> filled;
};

// What one interpretRows call sets up once for all its chunks and rows: the step's bases, the
// value buffers (kChunk floats per body value, from a cache line on, so that no vector load or
// store of them spans two lines), each value's pointer (the Fill sources' set here for good) and
// the broadcast inputs' fills.
struct Frame {
  runtime::StepContext step;
  ThreadBuffers &t;
  float *first = nullptr;
  float *buf(size_t v) const { return first + v * kChunk; }

  Frame(const TileProgram &p, uint8_t *const *bases, ThreadBuffers &threads) : t(threads) {
    std::copy(bases, bases + kNumMemRegions, step.base.begin());
    const size_t values = p.sources.size();
    if (t.values.size() < values * kChunk + kLinesFloats)
      t.values.resize(values * kChunk + kLinesFloats);
    first = t.values.data() +
            (-reinterpret_cast<uintptr_t>(t.values.data()) / sizeof(float) % kLinesFloats);
    t.filled.assign(values, Filled{});
    t.ptr.assign(values, nullptr);
    const float *fill = p.fills.data();
    for (size_t v = 0; v < values; ++v)
      if (p.sources[v].kind == Source::Fill)
        t.ptr[v] = std::exchange(fill, fill + kChunk);
  }
};

// Runs rows [r0, r1) of the body, columns [c0, c0 + n) (n <= kChunk); `mm` is the matmul's
// finished block (row stride ldc) if the region has one, its row r0 at mm. sink(r, values) sees
// every value of row r's segment before the outputs are stored (the reductions read it).
// wrapTo >= 0: the segment ends its row's part of a GEMM's block of C, whose next row starts at
// column wrapTo: the inputs' next segments to request are there, not past this one (another
// block's, which another thread may be computing). GPT-2 124M's bf16 step (Highway), where each
// weight's update is its gradient's epilogue (AdamW, over rows of 768 or 3072): 1.7% faster,
// 3 alternating runs.
template <class Sink = NoSink>
void runRows(const TileProgram &p, Frame &f, int64_t r0, int64_t r1, int64_t c0, int64_t n,
             const float *mm, int64_t ldc, const Sink &sink = {}, int64_t wrapTo = -1) {
  const runtime::StepContext &ctx = f.step;
  std::vector<const float *> &ptr = f.t.ptr, &ahead = f.t.ahead;
  std::vector<Filled> &filled = f.t.filled;
  const size_t values = p.sources.size();
  const int64_t lines = (n + kLinesFloats - 1) / kLinesFloats; // of a segment
  const int64_t m = std::max<int64_t>(1, static_cast<int64_t>(p.instrs.size()));
  for (int64_t r = r0; r < r1; ++r) {
    ahead.clear();
    for (size_t v = 0; v < values; ++v) {
      const Source &s = p.sources[v];
      if (s.kind == Source::Matmul) {
        ptr[v] = mm + (r - r0) * ldc;
      } else if (s.kind == Source::Input) {
        const InputMap &in = p.inputs[s.input];
        int64_t at = in.rowOffset(r) + c0 * in.colStride;
        if (in.isBool) {
          boolsToFloats(f.buf(v), ctx.at<uint8_t>(in.place.region, in.place.offset) + at,
                        in.colStride, n);
          ptr[v] = f.buf(v);
        } else if (in.isI64) {
          intsToFloats(f.buf(v), ctx.at<int64_t>(in.place.region, in.place.offset) + at,
                       in.colStride, n);
          ptr[v] = f.buf(v);
        } else if (in.colStride == 1) {
          const float *base = ctx.at(in.place.region, in.place.offset);
          ptr[v] = base + at;
          ahead.push_back(wrapTo < 0 ? ptr[v] + n : base + in.rowOffset(r + 1) + wrapTo);
        } else { // a value broadcast along the row: filled once per element it takes
          const float *x = ctx.at(in.place.region, in.place.offset) + at;
          if (x != filled[v].from || n > filled[v].count) {
            std::fill(f.buf(v), f.buf(v) + n, *x);
            filled[v] = {x, n};
          }
          ptr[v] = f.buf(v);
        }
      }
    }
    // The outputs written directly have their next segment requested as the inputs do (below),
    // unless in place over an input (p.prefetched), or in a GEMM's epilogue, where the next
    // segment is another block of C, which another thread may be writing. kiln_rows_bench,
    // against none: AdamW (three outputs, not in place) 15.8 -> 13.6 ms, triad 4.7 -> 4.4 ms.
    if (!mm)
      for (int o : p.prefetched)
        ahead.push_back(ctx.at(p.outputs[o].place.region, p.outputs[o].place.offset) + r * p.cols +
                        c0 + n);
    // The segment after this one of each input read in place (the rest of the row, or the next
    // row of a row-major input), requested while this one computes, a share of its lines before
    // each instruction: requested all at once they filled the core's miss buffers and stalled it
    // until they came. kiln_rows_bench, interpreter, against all at once (3 alternating runs):
    // AdamW 13.0-13.7 -> 17.3-18.7 GB/s, triad 16.6-19.9 -> 19.3-22.4, the other regions within
    // noise; 2 or 4 segments ahead, or prefetching to L2 only, was no better.
    int64_t k = 0;
    for (const Instr &in : p.instrs) {
      for (const float *x : ahead)
        for (int64_t l = k * lines / m; l < (k + 1) * lines / m; ++l)
          __builtin_prefetch(x + l * kLinesFloats);
      ++k;
      // An output that no later read can see overwritten goes straight to its place.
      const int o = p.direct[k - 1];
      float *d =
          o >= 0 ? ctx.at(p.outputs[o].place.region, p.outputs[o].place.offset) + r * p.cols + c0
                 : f.buf(in.dst);
      runPointwise(in.op, in.cast, d, ptr[in.a], in.b >= 0 ? ptr[in.b] : nullptr,
                   in.c >= 0 ? ptr[in.c] : nullptr, n);
      ptr[in.dst] = d;
    }
    sink(r, ptr);
    // The other outputs are stored once every value of the row segment is computed, so that one
    // in place over an input (or over the GEMM's block) overwrites nothing still to be read.
    for (const OutputMap &o : p.outputs) {
      const int64_t at = r * p.cols + c0;
      if (o.as == OutputMap::As::Bool) {
        uint8_t *to = ctx.at<uint8_t>(o.place.region, o.place.offset) + at;
        for (int64_t j = 0; j < n; ++j)
          to[j] = ptr[o.value][j] != 0;
        continue;
      }
      if (o.as == OutputMap::As::I64) { // an exact integer (exactIntegers)
        int64_t *to = ctx.at<int64_t>(o.place.region, o.place.offset) + at;
        for (int64_t j = 0; j < n; ++j)
          to[j] = static_cast<int64_t>(ptr[o.value][j]);
        continue;
      }
      if (o.as == OutputMap::As::Bf16) { // rounded by its cast: the high half is the bf16
        storeBf16Halves(ctx.at<uint16_t>(o.place.region, o.place.offset) + at, ptr[o.value], n);
        continue;
      }
      float *to = ctx.at(o.place.region, o.place.offset) + at;
      if (to != ptr[o.value]) // the GEMM's block may already be this output
        std::memmove(to, ptr[o.value], static_cast<size_t>(n) * sizeof(float));
    }
  }
}

// ---- Reductions ----
// Sums and maxima by kernels::reduceInit / reduceCombine (float, max propagating NaN).
constexpr int kLanes = kSumLanes;

// lanes[(c0 + j) mod kLanes] takes x[j], j < n (c0 is a multiple of kLanes).
void accumulateLanes(kernels::Reduce kind, float *lanes, const float *x, int64_t n) {
  if (kind != kernels::Reduce::Max)
    return accumulateSum(lanes, x, n);
  for (int64_t j = 0; j < n; ++j)
    lanes[j % kLanes] = kernels::reduceCombine(kind, lanes[j % kLanes], x[j]);
}

// Rows [r0, r1), columns [c0, c0 + n) of the body, a chunk of columns at a time. Reductions as
// the ABI has them: rows mode into lanes, columns mode into the results (or the partial results
// at lanes).
void interpretPart(const TileProgram &p, Frame &f, int64_t r0, int64_t r1, int64_t c0, int64_t n,
                   const float *mm, int64_t ldc, float *lanes) {
  const size_t nr = p.reductions.size();
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t w = std::min(kChunk, n - c);
    if (nr == 0) {
      runRows(p, f, r0, r1, c0 + c, w, mm ? mm + c : nullptr, ldc, NoSink{},
              mm && c + w >= n ? c0 : -1);
    } else if (p.mode == TileProgram::Mode::Rows) {
      // Row r's values (from column `at` of v's segment) into its lanes.
      auto sink = [&](int64_t r, const std::vector<const float *> &v, int64_t at) {
        for (size_t k = 0; k < nr; ++k)
          accumulateLanes(p.reductions[k].kind, &lanes[((r - r0) * nr + k) * kLanes],
                          v[p.reductions[k].value] + at, w);
      };
      auto rowByRow = [&](int64_t from, int64_t to) {
        runRows(p, f, from, to, c0 + c, w, nullptr, 0,
                [&](int64_t r, const std::vector<const float *> &v) { sink(r, v, 0); });
      };
      const int64_t g = p.grouped ? p.grouped->cols / p.cols : 1; // rows a group
      const int64_t gBegin = (r0 + g - 1) / g * g, gEnd = std::max(gBegin, r1 / g * g);
      if (!p.grouped || w != p.cols || gBegin >= gEnd) {
        rowByRow(r0, r1);
        continue;
      }
      rowByRow(r0, gBegin);
      runRows(*p.grouped, f, gBegin / g, gEnd / g, 0, g * w, nullptr, 0,
              [&](int64_t group, const std::vector<const float *> &v) {
                for (int64_t i = 0; i < g; ++i)
                  sink(group * g + i, v, i * w);
              });
      rowByRow(gEnd, r1);
    } else {
      runRows(p, f, r0, r1, c0 + c, w, nullptr, 0,
              [&](int64_t r, const std::vector<const float *> &v) {
                float *partial = lanes;
                for (const ReductionMap &m : p.reductions) {
                  float *out = (partial ? partial : f.step.at(m.place.region, m.place.offset)) +
                               m.rowOffset(r) + c0 + c;
                  if (partial)
                    partial += m.outSize;
                  kernels::combineRow(m.kind, v[m.value], out, w);
                }
              });
    }
  }
}

// The interpreter as the region's kiln_rows_fn (ctx: its program): what kiln_region's walks and
// kiln_gemm's epilogue call where no backend compiled the region. Rows wider than a chunk go one
// at a time, so that every stream is walked in address order (see kernel_abi.cc's elementwise).
void interpretRows(const void *ctx, uint8_t *const *bases, int64_t r0, int64_t r1, int64_t c0,
                   int64_t n, const float *mm, int64_t ldc, float *lanes) {
  const auto &p = *static_cast<const TileProgram *>(ctx);
  thread_local ThreadBuffers buffers;
  Frame f(p, bases, buffers);
  if (n <= kChunk || r1 - r0 == 1)
    return interpretPart(p, f, r0, r1, c0, n, mm, ldc, lanes);
  const int64_t laneStride =
      p.mode == TileProgram::Mode::Rows ? static_cast<int64_t>(p.reductions.size()) * kLanes : 0;
  for (int64_t r = r0; r < r1; ++r)
    interpretPart(p, f, r, r + 1, c0, n, mm ? mm + (r - r0) * ldc : nullptr, ldc,
                  lanes ? lanes + (r - r0) * laneStride : nullptr);
}

// Where a kiln_rows_fn sits in an args struct, as a word index, for KernelCall::links.
constexpr size_t wordOf(size_t offset) {
  return offset / sizeof(uint64_t);
}

// A region without a matmul as a kiln_region call: its walk (elementwise, or the reductions'
// rows or columns mode) and their results, the interpreter as its rows function until a backend
// links its compiled one. nullopt past the ABI's limits (rank, integer inputs).
std::optional<runtime::Step> regionStep(std::shared_ptr<const TileProgram> p, std::string kind) {
  kiln_region_args a{};
  a.rows = &interpretRows, a.ctx = p.get();
  a.mode = p->reductions.empty()                ? KILN_REGION_ELEMENTWISE
           : p->mode == TileProgram::Mode::Rows ? KILN_REGION_ROWS
                                                : KILN_REGION_COLUMNS;
  a.row_count = p->rows, a.cols = p->cols;
  a.rows_per_part = rowsPerPart(*p);
  // Columns mode with results of more than one row: parts of a quarter of the columns (a
  // multiple of 16 from 64 to 512), so each reads runs of at least 256 bytes of every row (any
  // split sums each result in row order). One-row results go by parts of rows (kernel_abi.cc).
  a.column_width = std::clamp<int64_t>((p->cols / 4 + kLanes - 1) / kLanes * kLanes, 64, 512);
  a.int_bound = p->intBound;
  for (const InputMap &in : p->inputs) {
    if (!in.isI64)
      continue;
    if (a.int_inputs == KILN_MAX_INT_INPUTS)
      return std::nullopt;
    a.ints[a.int_inputs] = abiPlace(in.place), a.int_elements[a.int_inputs++] = in.elements;
  }
  a.reduction_count = static_cast<int64_t>(p->reductions.size());
  std::vector<kiln_reduction> rs;
  for (const ReductionMap &m : p->reductions) {
    kiln_reduction r{};
    r.kind = static_cast<int64_t>(m.kind), r.at = abiPlace(m.place);
    r.out_size = m.outSize, r.count = m.count, r.row_local = m.rowLocal;
    r.col_stride = m.colStride, r.rank = static_cast<int64_t>(m.outerDims.size());
    if (r.rank > KILN_MAX_RANK)
      return std::nullopt;
    std::copy(m.outerDims.begin(), m.outerDims.end(), r.outer_dims);
    std::copy(m.outerStrides.begin(), m.outerStrides.end(), r.outer_strides);
    rs.push_back(r);
  }
  static_assert(sizeof(kiln_region_args) % 8 == 0 && sizeof(kiln_reduction) % 8 == 0);
  runtime::Step s;
  s.kind = std::move(kind);
  runtime::KernelCall &call =
      s.calls.emplace_back(runtime::KernelCall::of(&kiln_region, "kiln_region", a));
  const size_t words = sizeof(kiln_reduction) / 8 * rs.size();
  call.args.resize(call.args.size() + words);
  if (words > 0)
    std::memcpy(call.args.data() + sizeof(a) / 8, rs.data(), words * 8);
  call.links.push_back({wordOf(offsetof(kiln_region_args, rows)), p->name});
  call.keep = std::move(p);
  return s;
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
  std::optional<kernels::Gemm> g = gemmOf(body, *mm);
  if (ia < 0 || ib < 0 || !g)
    return std::nullopt;
  // A result with bytes of its own takes C, else the scratch past the GEMM's workspace does.
  Place c{MemRegion::Scratch,
          workspace::regionBlockOffset(opInfo(OpKind::Matmul).scratchBytes(body, *mm))};
  for (size_t k = 0; k < n.results.size(); ++k)
    if (p->outputs[k].as == OutputMap::As::F32 &&
        l.plan->slots[n.results[k]].share == MemorySlot::Share::None) {
      c = l.place(n.results[k]);
      break;
    }
  kiln_gemm_args args = gemmArgs(*g, l.place(n.operands[ia]), l.place(n.operands[ib]), c,
                                 body.type(mm->operands[0]).dtype == ir::DType::BF16,
                                 body.type(mm->operands[1]).dtype == ir::DType::BF16);
  args.epilogue = &interpretRows;
  args.epilogue_ctx = p.get();
  args.rows_per_batch = g->batch > 1 ? g->m : p->rows;
  runtime::Step s = kernelStep(std::move(kind), &kiln_gemm, "kiln_gemm", args);
  s.calls[0].links.push_back({wordOf(offsetof(kiln_gemm_args, epilogue)), p->name});
  s.calls[0].keep = std::move(p);
  return s;
}

} // namespace

// Region node n (the graph's node id, or a one-op region made for it) as a step.
runtime::Step lowerRegion(const Lowering &l, NodeId id, const Node &n);

std::string regionKind(const Node &region) {
  std::string kind = "fusion{";
  for (const Node &b : regionBody(region).nodes())
    if (b.op != OpKind::Constant)
      kind += std::string(kind.back() == '{' ? "" : " ") + std::string(mnemonic(b.op));
  return kind + "}";
}

runtime::Step lowerFusion(const Lowering &l, NodeId id) {
  return lowerRegion(l, id, l.g->node(id));
}

// A pointwise op alone: a region whose body is that op (its operands the body's inputs).
runtime::Step lowerPointwise(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  if (regionRole(n.op) != RegionRole::Pointwise || n.op == OpKind::Constant)
    return lowerReference(l, id);
  auto body = std::make_shared<Graph>("fusion");
  std::vector<ValueId> in;
  for (ValueId v : n.operands)
    in.push_back(body->addInput(fmt::format("in{}", in.size()), l.type(v)));
  Expected<NodeId> op = body->addNode(n.op, in, n.attrs, n.loc);
  if (!op)
    return lowerReference(l, id);
  body->addOutput("out0", body->result(*op));
  Node region;
  region.op = OpKind::Fusion, region.operands = n.operands, region.results = n.results;
  region.attrs = Attrs(opInfo(OpKind::Fusion).attrs), region.loc = n.loc;
  if (!region.attrs.set("body", Region{std::move(body)}))
    return lowerReference(l, id);
  runtime::Step s = lowerRegion(l, id, region);
  s.kind = mnemonic(n.op);
  return s;
}

runtime::Step lowerRegion(const Lowering &l, NodeId id, const Node &n) {
  std::optional<TileProgram> prog = compileBody(l, n);
  if (!prog)
    return lowerReference(l, id);
  auto p = std::make_shared<TileProgram>(std::move(*prog));
  p->name = "fusion_" + std::to_string(n.results[0]);
  const std::string kind = regionKind(n);
  bool hasMatmul = false;
  for (const Node &b : regionBody(n).nodes())
    hasMatmul = hasMatmul || b.op == OpKind::Matmul;
  if (hasMatmul && (p->hasI64 || !p->reductions.empty()))
    return lowerReference(l, id); // (the fusion pass makes neither)
  std::optional<runtime::Step> step = hasMatmul ? matmulStep(l, n, p, kind) : regionStep(p, kind);
  if (!step)
    return lowerReference(l, id);
  if (l.programs)
    l.programs->push_back(p);
  // A run whose integer inputs exceed intBound (kiln_region's check) runs the reference instead.
  if (p->hasI64)
    step->run = lowerReference(l, id).run;
  return std::move(*step);
}

} // namespace kiln::codegen

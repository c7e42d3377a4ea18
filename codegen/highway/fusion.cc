// Fusion regions on the Highway backend: the body runs row by row through a small interpreter
// whose every instruction is one loop over a row segment (at most kChunk elements) of the
// iteration space S, so no intermediate value of the body ever goes to memory beyond an L1-sized
// buffer; the loops are plain float loops that the compiler vectorizes, each calling the op's own
// scalar functor (ir/ops/elementwise.h), so an element is computed exactly as the reference does.
// A region with a matmul runs it as a GEMM whose epilogue is this interpreter over each finished
// block of C (still in L2). Regions with trailing reductions, or values other than f32 and bool,
// run by reference for now.
#include <cassert>
#include <cstring>

#include "codegen/highway/lowering.h"
#include "ir/ops/elementwise.h"
#include "ir/ops/region.h"

namespace kiln::highway {
using namespace kiln::ir;

namespace {

constexpr int64_t kChunk = 512; // floats per value buffer: 2 KiB, all of a body's fit in L1

// Where a body value comes from at each element of S.
struct Source {
  enum Kind : uint8_t { Computed, Fill, Input, Matmul } kind = Computed;
  float fill = 0;
  int input = -1; // Input: the body input's index
};

// A body input read at element (row, col) of S (rows: S without its last axis, flattened):
// at rowOffset(row) + col * colStride elements from its place; bool inputs are bytes.
struct InputMap {
  Place place;
  bool isBool = false;
  int64_t colStride = 0;
  std::vector<int64_t> outerDims, outerStrides; // S's leading axes and the input's strides on them
  int64_t rowOffset(int64_t row) const {
    int64_t off = 0;
    for (int64_t d = static_cast<int64_t>(outerDims.size()) - 1; d >= 0; --d) {
      off += (row % outerDims[d]) * outerStrides[d];
      row /= outerDims[d];
    }
    return off;
  }
};

struct Instr {
  OpKind op;
  int dst, a = -1, b = -1, c = -1;
  bool toBool = false; // cast: to bool (x != 0), else the value as it is
};

struct OutputMap {
  int value;
  Place place;
  bool isBool = false;
};

struct TileProgram {
  Shape space;
  int64_t rows = 1, cols = 1;
  std::vector<Source> sources; // per body value
  std::vector<InputMap> inputs;
  std::vector<Instr> instrs;
  std::vector<OutputMap> outputs;
};

bool supportedValue(const Type &t) {
  return t.dtype == DType::F32 || t.dtype == DType::Bool;
}

// What a region may hold by the op records' own trait (its pointwise ops and its one matmul),
// on f32 and bool values: runInstr covers every pointwise op.
bool supportedOp(const Node &n, const Graph &body) {
  RegionRole role = regionRole(n.op);
  if (role != RegionRole::Pointwise && role != RegionRole::Matmul)
    return false;
  for (ValueId v : n.results)
    if (!supportedValue(body.type(v)))
      return false;
  return true;
}

// The region as a tile program, or nullopt if it holds what the interpreter does not run.
std::optional<TileProgram> compileBody(const Lowering &l, const Node &region) {
  const Graph &body = regionBody(region);
  Expected<RegionInfo> info = analyzeRegion(body);
  if (!info || !info->reductions.empty() || info->space.empty())
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
    if (!supportedValue(t))
      return std::nullopt;
    p.sources[v] = {Source::Input, 0, static_cast<int>(i)};
    InputMap in;
    in.place = l.place(region.operands[i]);
    in.isBool = t.dtype == DType::Bool;
    std::vector<int64_t> strides = broadcastStrides(t.shape, p.space);
    in.colStride = strides.back();
    in.outerDims.assign(p.space.begin(), p.space.end() - 1);
    in.outerStrides.assign(strides.begin(), strides.end() - 1);
    p.inputs.push_back(std::move(in));
  }
  for (NodeId id = 0; id < static_cast<NodeId>(body.nodes().size()); ++id) {
    const Node &n = body.node(id);
    if (!supportedOp(n, body))
      return std::nullopt;
    ValueId r = n.results[0];
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
    if (body.type(v).shape != p.space || !supportedValue(body.type(v)))
      return std::nullopt;
    p.outputs.push_back({v, l.place(region.results[k]), body.type(v).dtype == DType::Bool});
  }
  return p;
}

template <class Op> void unary(float *d, const float *a, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    d[j] = Op::template f<float>(a[j]);
}
template <class Op> void binary(float *d, const float *a, const float *b, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    d[j] = static_cast<float>(Op::template f<float>(a[j], b[j]));
}

void runInstr(const Instr &in, float *d, const float *a, const float *b, const float *c,
              int64_t n) {
  namespace s = scalar;
  switch (in.op) {
  case OpKind::Neg:
    return unary<s::Neg>(d, a, n);
  case OpKind::Abs:
    return unary<s::Abs>(d, a, n);
  case OpKind::Exp:
    return unary<s::Exp>(d, a, n);
  case OpKind::Log:
    return unary<s::Log>(d, a, n);
  case OpKind::Sqrt:
    return unary<s::Sqrt>(d, a, n);
  case OpKind::Rsqrt:
    return unary<s::Rsqrt>(d, a, n);
  case OpKind::Tanh:
    return unary<s::Tanh>(d, a, n);
  case OpKind::Sigmoid:
    return unary<s::Sigmoid>(d, a, n);
  case OpKind::Relu:
    return unary<s::Relu>(d, a, n);
  case OpKind::Gelu:
    return unary<s::Gelu>(d, a, n);
  case OpKind::GeluTanh:
    return unary<s::GeluTanh>(d, a, n);
  case OpKind::Silu:
    return unary<s::Silu>(d, a, n);
  case OpKind::Sin:
    return unary<s::Sin>(d, a, n);
  case OpKind::Cos:
    return unary<s::Cos>(d, a, n);
  case OpKind::Erf:
    return unary<s::Erf>(d, a, n);
  case OpKind::LogicalNot:
    return unary<s::LogicalNot>(d, a, n);
  case OpKind::StopGradient:
  case OpKind::Broadcast:
    return unary<s::Identity>(d, a, n);
  // f32 <-> bool: a bool is 0 or 1 here; to bool is x != 0.
  case OpKind::Cast:
    for (int64_t j = 0; j < n; ++j)
      d[j] = in.toBool ? (a[j] != 0 ? 1.0f : 0.0f) : a[j];
    return;
  case OpKind::Add:
    return binary<s::Add>(d, a, b, n);
  case OpKind::Sub:
    return binary<s::Sub>(d, a, b, n);
  case OpKind::Mul:
    return binary<s::Mul>(d, a, b, n);
  case OpKind::Div:
    return binary<s::Div>(d, a, b, n);
  case OpKind::Max:
    return binary<s::Max>(d, a, b, n);
  case OpKind::Min:
    return binary<s::Min>(d, a, b, n);
  case OpKind::Pow:
    return binary<s::Pow>(d, a, b, n);
  case OpKind::LogicalAnd:
    return binary<s::LogicalAnd>(d, a, b, n);
  case OpKind::LogicalOr:
    return binary<s::LogicalOr>(d, a, b, n);
  case OpKind::Eq:
    return binary<s::Eq>(d, a, b, n);
  case OpKind::Ne:
    return binary<s::Ne>(d, a, b, n);
  case OpKind::Lt:
    return binary<s::Lt>(d, a, b, n);
  case OpKind::Le:
    return binary<s::Le>(d, a, b, n);
  case OpKind::Gt:
    return binary<s::Gt>(d, a, b, n);
  case OpKind::Ge:
    return binary<s::Ge>(d, a, b, n);
  case OpKind::Select:
    for (int64_t j = 0; j < n; ++j)
      d[j] = a[j] != 0 ? b[j] : c[j];
    return;
  default: // supportedOp admits only the pointwise ops above
    assert(false && "a pointwise op without a case in runInstr");
    return;
  }
}

// Runs rows [r0, r1) of the body, columns [c0, c0 + n) (n <= kChunk); `mm` is the matmul's
// finished block (row stride ldc) if the region has one, its row r0 at mm.
void runRows(const TileProgram &p, const runtime::StepContext &ctx, int64_t r0, int64_t r1,
             int64_t c0, int64_t n, const float *mm, int64_t ldc) {
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
        } else if (in.colStride == 1) {
          ptr[v] = ctx.at(in.place.region, in.place.offset) + at;
        } else {
          std::fill(buf(v), buf(v) + n, ctx.at(in.place.region, in.place.offset)[at]);
          ptr[v] = buf(v);
        }
      }
    }
    for (const Instr &in : p.instrs) {
      float *d = buf(in.dst);
      runInstr(in, d, ptr[in.a], in.b >= 0 ? ptr[in.b] : nullptr, in.c >= 0 ? ptr[in.c] : nullptr,
               n);
      ptr[in.dst] = d;
    }
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
            const int64_t rowsPerPart = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, p->cols));
            const int64_t parts = (p->rows + rowsPerPart - 1) / rowsPerPart;
            ctx.pool->run(parts, [&](int64_t q, int) {
              const int64_t r0 = q * rowsPerPart, r1 = std::min(p->rows, r0 + rowsPerPart);
              for (int64_t c0 = 0; c0 < p->cols; c0 += kChunk)
                runRows(*p, ctx, r0, r1, c0, std::min(kChunk, p->cols - c0), nullptr, 0);
            });
            return Status{};
          }};
}

// The GEMM writes C into a result of shape S that takes no input's bytes (else into a buffer of
// its own), and its epilogue runs the body over each finished block.
struct MatmulRegion {
  std::shared_ptr<const TileProgram> p;
  kernels::Gemm gemm;
  Place a, b;
  std::optional<Place> c; // else `own`
  std::shared_ptr<std::vector<float>> own;
  int64_t m = 0; // rows of one batch item of C
};

void epilogue(void *ctx, int64_t batch, int64_t row, int64_t col, int64_t rows, int64_t cols,
              float *c, int64_t ldc) {
  auto *e = static_cast<std::pair<const MatmulRegion *, const runtime::StepContext *> *>(ctx);
  const MatmulRegion &mr = *e->first;
  const int64_t r0 = batch * mr.m + row;
  for (int64_t c0 = 0; c0 < cols; c0 += kChunk)
    runRows(*mr.p, *e->second, r0, r0 + rows, col + c0, std::min(kChunk, cols - c0), c + c0, ldc);
}

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
  auto mr = std::make_shared<MatmulRegion>();
  mr->p = p, mr->gemm = *g;
  mr->a = l.place(n.operands[ia]), mr->b = l.place(n.operands[ib]);
  mr->m = g->batch > 1 ? g->m : p->rows;
  for (size_t k = 0; k < n.results.size() && !mr->c; ++k)
    if (p->outputs[k].isBool == false &&
        l.plan->slots[n.results[k]].share == MemorySlot::Share::None)
      mr->c = l.place(n.results[k]);
  if (!mr->c)
    mr->own = std::make_shared<std::vector<float>>(static_cast<size_t>(p->rows * p->cols));
  return runtime::Step{
      std::move(kind), [mr](const runtime::StepContext &ctx) {
        kernels::Gemm run = mr->gemm;
        run.a.data = ctx.at(mr->a.region, mr->a.offset);
        run.b.data = ctx.at(mr->b.region, mr->b.offset);
        run.c = mr->c ? ctx.at(mr->c->region, mr->c->offset) : mr->own->data();
        std::pair<const MatmulRegion *, const runtime::StepContext *> e{mr.get(), &ctx};
        run.epilogue = {&epilogue, &e};
        kernels::gemm(run, ctx.pool, ctx.at(MemRegion::Scratch, 0));
        return Status{};
      }};
}

} // namespace

runtime::Step lowerFusion(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  std::optional<TileProgram> prog = compileBody(l, n);
  if (!prog)
    return lowerReference(l, id);
  auto p = std::make_shared<const TileProgram>(std::move(*prog));
  std::string kind = "fusion{";
  bool hasMatmul = false;
  for (const Node &b : regionBody(n).nodes()) {
    hasMatmul = hasMatmul || b.op == OpKind::Matmul;
    if (b.op != OpKind::Constant)
      kind += std::string(kind.back() == '{' ? "" : " ") + std::string(mnemonic(b.op));
  }
  kind += "}";
  if (!hasMatmul)
    return elementwiseStep(p, kind);
  if (std::optional<runtime::Step> s = matmulStep(l, n, p, kind))
    return std::move(*s);
  return lowerReference(l, id);
}

} // namespace kiln::highway

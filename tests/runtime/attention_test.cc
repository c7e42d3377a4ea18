// The flash attention kernels against the reference semantics (ir/ops/fused.h, run by the
// reference interpreter on the same arguments), on every compiled SIMD target: odd sizes around
// the tiles (112 query rows, 224 keys), GQA and MQA, causal, masks and biases of every broadcast
// (full, per head, per key; a row bias has dbias 0 in exact arithmetic), dropout, fully masked
// rows, sliding windows; and the same bits at 1 and 2 threads, dbias included where it broadcasts
// over the batch and the heads, and with keys packed whole or a tile at a time.
#include "runtime/kernels/attention.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "codegen/reference/interpreter.h"
#include "runtime/kernels/gemm.h"
#include "runtime/thread_pool.h"
#include "support/workspace.h"
#include "tests/util/compare.h"
#include "tests/util/simd_targets.h"

namespace kiln::kernels::attention_test {
namespace {

using ir::DType, ir::Shape, ir::Type, ir::ValueId;

struct Case {
  int64_t b, hq, hkv, tq, tk, d, dv;
  bool causal = false;
  Shape mask = {}, bias = {}; // empty: none
  double dropout = 0;
  int64_t window = 0; // sliding window
  bool bthd = false;  // q, k, v, out in [B, T, H, D]
  bool bf16 = false;  // bf16 products
};

// [B, H, T, width] or, with bthd, [B, T, H, width].
Shape layout(const Case &c, int64_t heads, int64_t len, int64_t width) {
  return c.bthd ? Shape{c.b, len, heads, width} : Shape{c.b, heads, len, width};
}

// The case as a graph: inputs q, k, v, dout [, mask] [, bias]; attention and its backward; outputs
// out, lse, dq, dk, dv [, dbias].
ir::Graph caseGraph(const Case &c) {
  ir::Graph g("attention");
  const ValueId q = g.addInput("q", Type{DType::F32, layout(c, c.hq, c.tq, c.d)});
  const ValueId k = g.addInput("k", Type{DType::F32, layout(c, c.hkv, c.tk, c.d)});
  const ValueId v = g.addInput("v", Type{DType::F32, layout(c, c.hkv, c.tk, c.dv)});
  const ValueId dout = g.addInput("dout", Type{DType::F32, layout(c, c.hq, c.tq, c.dv)});
  std::vector<ValueId> optional;
  if (!c.mask.empty())
    optional.push_back(g.addInput("mask", Type{DType::Bool, c.mask}));
  if (!c.bias.empty())
    optional.push_back(g.addInput("bias", Type{DType::F32, c.bias}));
  ir::Attrs attrs(ir::opInfo(ir::OpKind::Attention).attrs);
  for (const ir::AttrInit &a : std::initializer_list<ir::AttrInit>{{"scale", 0.3},
                                                                   {"causal", c.causal},
                                                                   {"q_heads", c.hq},
                                                                   {"kv_heads", c.hkv},
                                                                   {"has_mask", !c.mask.empty()},
                                                                   {"has_bias", !c.bias.empty()},
                                                                   {"dropout", c.dropout},
                                                                   {"seed", int64_t{11}},
                                                                   {"window", c.window},
                                                                   {"bthd", c.bthd},
                                                                   {"bf16_products", c.bf16}})
    EXPECT_TRUE(attrs.set(a.first, a.second).ok()) << a.first;
  std::vector<ValueId> in = {q, k, v};
  in.insert(in.end(), optional.begin(), optional.end());
  Expected<ir::NodeId> fwd = g.addNode(ir::OpKind::Attention, in, attrs);
  EXPECT_TRUE(fwd.ok()) << fwd.error().message;
  const ir::Node f = g.node(*fwd);
  std::vector<ValueId> bin = {q, k, v, f.results[0], f.results[1], dout};
  bin.insert(bin.end(), optional.begin(), optional.end());
  Expected<ir::NodeId> bwd = g.addNode(ir::OpKind::AttentionBackward, bin, attrs);
  EXPECT_TRUE(bwd.ok()) << bwd.error().message;
  const ir::Node bn = g.node(*bwd);
  g.addOutput("out", f.results[0]);
  g.addOutput("lse", f.results[1]);
  const char *names[] = {"dq", "dk", "dv", "dbias"};
  for (size_t r = 0; r < bn.results.size(); ++r)
    g.addOutput(names[r], bn.results[r]);
  return g;
}

// Strides of `shape` read at logits index [b, h, i, j] (0 where it broadcasts).
std::array<int64_t, 4> strides(const Shape &shape) {
  std::array<int64_t, 4> s{0, 0, 0, 0};
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    s[4 - shape.size() + d] = shape[d] == 1 ? 0 : stride;
    stride *= shape[d];
  }
  return s;
}

struct Result {
  std::vector<float> out, lse, dq, dk, dv, dbias;
};

// The forward, then the backward from its out and lse (or from `given`'s: the reference's).
Result runKernels(const Case &c, const std::vector<ir::RefTensor<float>> &args,
                  runtime::ThreadPool *pool, int64_t windowKeys = 0,
                  const std::vector<ir::RefTensor<float>> *given = nullptr) {
  Attention a;
  a.windowKeys = windowKeys;
  a.batch = c.b, a.hq = c.hq, a.hkv = c.hkv, a.tq = c.tq, a.tk = c.tk, a.d = c.d, a.dv = c.dv;
  a.scale = 0.3f, a.causal = c.causal, a.dropout = c.dropout, a.seed = 11, a.band = c.window;
  a.bthd = c.bthd, a.bf16 = c.bf16;
  a.q = args[0].f.data(), a.k = args[1].f.data(), a.v = args[2].f.data();
  size_t next = 4;
  std::vector<uint8_t> mask;
  if (!c.mask.empty()) {
    mask.assign(args[next].i.begin(), args[next].i.end());
    a.mask = mask.data(), a.maskStrides = strides(c.mask), ++next;
  }
  if (!c.bias.empty())
    a.bias = args[next].f.data(), a.biasStrides = strides(c.bias);
  Result r;
  r.out.assign(c.b * c.hq * c.tq * c.dv, -7), r.lse.assign(c.b * c.hq * c.tq, -7);
  r.dq.assign(args[0].f.size(), -7), r.dk.assign(args[1].f.size(), -7);
  r.dv.assign(args[2].f.size(), -7);
  const int64_t biasElements = a.bias ? static_cast<int64_t>(args[next].f.size()) : 0;
  r.dbias.assign(biasElements, -7);
  std::vector<float> scratch(workspace::attentionBytes(c.tq, c.tk, c.d, c.dv, true, a.bf16) / 4 +
                             16); // the larger layout
  float *s = scratch.data() + (16 - reinterpret_cast<uintptr_t>(scratch.data()) / 4 % 16) % 16;
  attentionForward(a, r.out.data(), r.lse.data(), s, pool);
  const float *out = given ? (*given)[0].f.data() : r.out.data();
  const float *lse = given ? (*given)[1].f.data() : r.lse.data();
  attentionBackward(a, out, lse, args[3].f.data(), r.dq.data(), r.dk.data(), r.dv.data(),
                    a.bias ? r.dbias.data() : nullptr, biasElements, s, pool);
  return r;
}

runtime::HostTensor host(const std::vector<float> &v) {
  runtime::HostTensor t(DType::F32, {static_cast<int64_t>(v.size())});
  for (size_t k = 0; k < v.size(); ++k)
    t.set(static_cast<int64_t>(k), v[k]);
  return t;
}

const std::vector<Case> &cases() {
  static const std::vector<Case> all = {
      {1, 1, 1, 1, 1, 1, 1},
      {2, 2, 2, 7, 17, 16, 16, true},
      {1, 4, 2, 129, 127, 64, 32, true},                               // GQA, causal, odd tiles
      {1, 3, 1, 65, 300, 16, 8, false, {1, 1, 65, 300}, {3, 65, 300}}, // MQA, mask, bias per head
      {2, 2, 2, 129, 129, 32, 32, true, {}, {1, 2, 129, 129}, 0.2},    // ALiBi-like bias, dropout
      {2, 3, 3, 17, 7, 8, 8, false, {17, 7}, {2, 3, 17, 7}, 0.5},      // full bias, sparse mask
      {2, 2, 2, 17, 20, 8, 8, false, {2, 1, 17, 1}, {2, 1, 1, 20}},    // masked rows, key bias
      {1, 2, 2, 200, 260, 64, 64},                                     // several tiles each way
      {1, 4, 2, 230, 500, 16, 16, true},                               // GQA, causal, 3 windows
      // Sliding windows: bands across tiles and packed windows, causal (the last W keys) or both
      // sides, with masks, biases and dropout; a band of 2 (3 keys; 1 would be the query alone,
      // whose gradients are 0 only in exact arithmetic); Tq != Tk; one wider than any distance.
      {1, 2, 1, 300, 300, 16, 16, true, {}, {}, 0, 40},
      {2, 2, 2, 250, 250, 16, 8, false, {2, 1, 1, 250}, {}, 0, 70},
      {1, 2, 2, 129, 129, 32, 32, true, {}, {1, 2, 129, 129}, 0.2, 5},
      {1, 1, 1, 500, 500, 8, 8, false, {}, {1, 1, 1, 500}, 0, 2},
      {1, 2, 2, 40, 300, 16, 16, true, {}, {}, 0, 100},
      {1, 4, 2, 230, 500, 16, 16, false, {}, {}, 0.1, 150},
      {1, 1, 1, 20, 20, 8, 8, true, {}, {}, 0, 1000},
      // bthd: the heads interleaved in each position's row (read and written through its stride)
      {1, 4, 2, 129, 127, 64, 32, true, {}, {}, 0, 0, true}, // GQA, causal, odd tiles
      {2, 3, 1, 65, 300, 16, 8, false, {2, 1, 1, 300}, {3, 65, 300}, 0.2, 0, true}, // MQA
      {1, 4, 2, 230, 500, 16, 16, true, {}, {}, 0, 150, true}, // windows, 3 packed
  };
  return all;
}

std::string label(const Case &c) {
  return (::testing::Message() << "case b" << c.b << " hq" << c.hq << " hkv" << c.hkv << " tq"
                               << c.tq << " tk" << c.tk << " d" << c.d << " dv" << c.dv
                               << " causal " << c.causal << " mask " << c.mask.size() << " bias "
                               << c.bias.size() << " dropout " << c.dropout << " window "
                               << c.window << " bthd " << c.bthd << " bf16 " << c.bf16)
      .GetString();
}

TEST(AttentionKernels, MatchTheReferenceOnEveryTarget) {
  runtime::ThreadPool pool(2);
  for (const Case &c : cases()) {
    SCOPED_TRACE(label(c));
    const ir::Graph g = caseGraph(c);
    const std::vector<ir::RefTensor<float>> args = reference::makeArgs<float>(g, 5);
    Expected<std::vector<ir::RefTensor<float>>> want = reference::run<float>(g, args);
    ASSERT_TRUE(want.ok()) << want.error().message;
    test_util::forEachSimdTarget([&] {
      const Result got = runKernels(c, args, &pool);
      const std::vector<float> *mine[] = {&got.out, &got.lse, &got.dq,
                                          &got.dk,  &got.dv,  &got.dbias};
      for (size_t o = 0; o < want->size(); ++o)
        EXPECT_TRUE(
            test_util::closeTo(host(*mine[o]), reference::toHost((*want)[o]), g.outputs()[o].name));
    });
  }
}

// The cases with bf16 products, x the kernels, y the reference of bf16 products, z the f32
// reference; the backward reads the reference's out and lse (so that it is judged alone). Every
// element |x - y| <= 1e-2 |y| + 1e-3 max|y|, and x is bf16's numbers, not f32's: RMS(x - y) <=
// 0.05 RMS(y - z) for every output. Measured: at most 1.4e-3 on f32 FMAs (dq, dk: an operand
// whose last f32 bit differs, from another sum order, may round to the neighbouring bf16), and
// 2.0e-3 on AMX (whose tiles sum in their own order) and on vdpbf16ps (Zen 5); without V rounded,
// out's ratio was 0.5-1.1.
// Each engine the CPU has (gemm.h: gemmBf16Engine): AMX's tiles and vdpbf16ps (on the AVX3
// targets), and the f32 micro-kernel (every target).
TEST(AttentionKernels, Bf16ProductsMatchTheirReferenceOnEveryTarget) {
  runtime::ThreadPool pool(2);
  for (int engine = 0; engine < 3; ++engine)
    for (Case c : cases()) {
      forbidAmx(engine > 0);
      forbidBf16Instructions(engine > 1);
      c.bf16 = true;
      SCOPED_TRACE(label(c));
      const ir::Graph g = caseGraph(c);
      Case f32 = c;
      f32.bf16 = false;
      const std::vector<ir::RefTensor<float>> args = reference::makeArgs<float>(g, 5);
      Expected<std::vector<ir::RefTensor<float>>> want = reference::run<float>(g, args),
                                                  wantF32 =
                                                      reference::run<float>(caseGraph(f32), args);
      ASSERT_TRUE(want.ok() && wantF32.ok());
      test_util::forEachSimdTarget([&] {
        SCOPED_TRACE(gemmBf16Engine());
        const Result got = runKernels(c, args, &pool, 0, &*want);
        const std::vector<float> *mine[] = {&got.out, &got.lse, &got.dq,
                                            &got.dk,  &got.dv,  &got.dbias};
        for (size_t o = 0; o < want->size(); ++o) {
          const std::string &name = g.outputs()[o].name;
          const runtime::HostTensor x = host(*mine[o]), y = reference::toHost((*want)[o]),
                                    z = reference::toHost((*wantF32)[o]);
          EXPECT_TRUE(test_util::closeTo(x, y, name, 1e-2, 1e-3));
          const double xy = test_util::rms(x, &y), yz = test_util::rms(y, &z);
          if (yz > 0) { // lse's rows of -inf make both NaN
            EXPECT_LE(xy, 0.05 * yz) << name;
          }
        }
      });
    }
  forbidAmx(false);
  forbidBf16Instructions(false);
}

void expectSameBits(const Result &a, const Result &b) {
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.lse, b.lse);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
  EXPECT_EQ(a.dbias, b.dbias);
}

TEST(AttentionKernels, SameBitsAtOneAndTwoThreads) {
  runtime::ThreadPool one(1), two(2);
  for (Case c : cases())
    for (bool bf16 : {false, true}) {
      c.bf16 = bf16;
      const ir::Graph g = caseGraph(c);
      const std::vector<ir::RefTensor<float>> args = reference::makeArgs<float>(g, 6);
      expectSameBits(runKernels(c, args, &one), runKernels(c, args, &two));
    }
}

// Keys packed a window of one tile at a time (as for long sequences) give the very bits of the
// whole head packed at once, with f32 or bf16 products.
TEST(AttentionKernels, SameBitsWindowByWindow) {
  runtime::ThreadPool pool(2);
  for (Case c : cases())
    for (bool bf16 : {false, true}) {
      c.bf16 = bf16;
      const ir::Graph g = caseGraph(c);
      const std::vector<ir::RefTensor<float>> args = reference::makeArgs<float>(g, 7);
      expectSameBits(runKernels(c, args, &pool), runKernels(c, args, &pool, 1));
    }
}

} // namespace
} // namespace kiln::kernels::attention_test

// Single ops and regions on the Highway backend against the reference, from IR text: fusion
// regions with trailing reductions (both walks: rows, where the last axis is reduced, and
// columns, where it is kept; row-local results and results summed across rows; sum, mean, max;
// several parts), transposes and data movement (slice, pad, concat, broadcast) of every element
// size, dropout, and pointwise ops alone (one-op regions). Each graph also gives the same bits at
// 1 and 2 threads, and on the llvm backend (its compiled regions sum in the interpreter's order).
// Tolerance: the default of test_util::closeTo (sums in another order).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <functional>

#include "codegen/common/executor_backend.h"
#include "codegen/common/lowering.h"
#include "ir/parser.h"
#include "runtime/weights.h"
#include "tests/util/compare.h"
#include "tests/util/executable.h"

namespace kiln::highway_ops_test {
namespace {

// Runs `text` on the reference and on the Highway backend at 1 and 2 threads, on the same random
// inputs, and compares every output; `kernelKind` is a step kind the Highway program must have
// (so the test fails if the graph fell back to the reference lowering). `prepare` may overwrite
// inputs (the same on every executable) after they are randomized.
void matchesReference(const std::string &text, const std::string &kernelKind,
                      const std::function<void(runtime::Executable &)> &prepare = {}) {
  ir::ParseResult parsed = ir::parseGraph(text);
  ASSERT_TRUE(parsed.graph) << parsed.errors[0].message;
  std::unique_ptr<runtime::Executable> want = testing_exe::reference(*parsed.graph, 1);
  ASSERT_TRUE(want);
  ASSERT_TRUE(runtime::randomizeInputs(*want, 2).ok());
  if (prepare)
    prepare(*want);
  ASSERT_TRUE(want->run().ok());
  std::vector<std::unique_ptr<runtime::Executor>> got;
  for (const char *backend : {"highway", "highway", "llvm"}) {
    const int threads = got.size() == 1 ? 1 : 2;
    std::unique_ptr<runtime::Executor> exe = testing_exe::fast(*parsed.graph, backend, threads);
    ASSERT_TRUE(exe);
    ASSERT_TRUE(runtime::randomizeInputs(*exe, 2).ok());
    if (prepare)
      prepare(*exe);
    Status st = exe->run();
    ASSERT_TRUE(st.ok()) << st.error().message;
    got.push_back(std::move(exe));
  }
  bool found = false;
  for (const std::string &kind : got[0]->stepKinds())
    found = found || kind == kernelKind;
  EXPECT_TRUE(found) << "no step of kind " << kernelKind;
  for (const runtime::Symbol &sym : got[0]->program().symbols) {
    if (sym.kind != runtime::Symbol::Kind::Output)
      continue;
    Expected<runtime::HostTensor> w = want->read(sym.name);
    ASSERT_TRUE(w.ok());
    EXPECT_TRUE(test_util::closeTo(got[0]->read(sym), *w, sym.name));
    EXPECT_TRUE(got[0]->read(sym) == got[1]->read(sym)) << sym.name << ": 1 vs 2 threads";
    EXPECT_TRUE(got[0]->read(sym) == got[2]->read(sym)) << sym.name << ": highway vs llvm";
  }
}

// A region over x: f32[shape] computing e = exp(x) * 0.5, which outputs e and `reduce`(e).
std::string reductionRegion(const std::string &shape, const std::string &reduce,
                            const std::string &outType) {
  return fmt::format(R"(graph @r {{
  %x = input "x" : f32[{0}]
  %e, %s = fusion(%x) {{body = graph @fusion {{
    %0 = input "in0" : f32[{0}]
    %1 = exp(%0) : f32[{0}]
    %2 = constant() {{value = 0.5}} : f32[]
    %3 = mul(%1, %2) : f32[{0}]
    %4 = {1}
    output "out0" = %3
    output "out1" = %4
  }}}} : f32[{0}], {2}
  output "e" = %e
  output "s" = %s
}}
)",
                     shape, reduce, outType);
}

TEST(HighwayOps, RegionReducingTheLastAxis) {
  const std::string kind = "fusion{exp mul reduce_sum}";
  // Row-local (one output per row), several parts of rows, columns not a multiple of 16. Rows this
  // short go through the interpreter in groups (13 rows of 37 here; 15 of 33 and 7 of 70 below),
  // the parts' first and last rows one by one where a part does not start or end on a group.
  matchesReference(reductionRegion("40,30,37",
                                   "reduce_sum(%3) {axes = [-1], keepdims = true} : f32[40,30,1]",
                                   "f32[40,30,1]"),
                   kind);
  // More columns than one chunk of the interpreter (512).
  matchesReference(reductionRegion("3,1100", "reduce_sum(%3) {axes = [1]} : f32[3]", "f32[3]"),
                   kind);
  // Everything to a scalar, over several parts (summed part after part).
  matchesReference(reductionRegion("700,33", "reduce_sum(%3) : f32[]", "f32[]"), kind);
  // A leading axis reduced with the last, another kept.
  matchesReference(reductionRegion("500,3,17", "reduce_sum(%3) {axes = [0,2]} : f32[3]", "f32[3]"),
                   kind);
  matchesReference(reductionRegion("9,70", "reduce_mean(%3) {axes = [1]} : f32[9]", "f32[9]"),
                   "fusion{exp mul reduce_mean}");
  matchesReference(reductionRegion("600,45", "reduce_max(%3) : f32[]", "f32[]"),
                   "fusion{exp mul reduce_max}");
}

TEST(HighwayOps, RegionKeepingTheLastAxis) {
  const std::string kind = "fusion{exp mul reduce_sum}";
  // Bias gradients: [B, T, C] summed over B and T, C not a multiple of the 64-column parts.
  matchesReference(reductionRegion("4,33,70", "reduce_sum(%3) {axes = [0,1]} : f32[70]", "f32[70]"),
                   kind);
  // Wider than the interpreter's chunk of 512 columns, rows in 3 parts (partial results
  // combined in order), each row ending in a masked vector.
  matchesReference(
      reductionRegion("3,5,2100", "reduce_sum(%3) {axes = [0,1]} : f32[2100]", "f32[2100]"), kind);
  // 2000 rows of 20 in 3 parts of rows, for a mean and a maximum.
  matchesReference(reductionRegion("2000,20", "reduce_mean(%3) {axes = [0]} : f32[20]", "f32[20]"),
                   "fusion{exp mul reduce_mean}");
  matchesReference(reductionRegion("2000,20", "reduce_max(%3) {axes = [0]} : f32[20]", "f32[20]"),
                   "fusion{exp mul reduce_max}");
  // A position embedding's gradient: over the batch only.
  matchesReference(reductionRegion("5,9,130",
                                   "reduce_sum(%3) {axes = [0], keepdims = true} : f32[1,9,130]",
                                   "f32[1,9,130]"),
                   kind);
  matchesReference(
      reductionRegion("5,9,130", "reduce_mean(%3) {axes = [1]} : f32[5,130]", "f32[5,130]"),
      "fusion{exp mul reduce_mean}");
  matchesReference(reductionRegion("7,1,3", "reduce_max(%3) {axes = [0]} : f32[1,3]", "f32[1,3]"),
                   "fusion{exp mul reduce_max}");
}

// A layer norm's weight and bias gradients: two results of one row each, kept apart in the
// partial results of each part of rows (1200 rows of 35: 3 parts).
TEST(HighwayOps, RegionWithTwoColumnSums) {
  matchesReference(R"(graph @g {
  %dy = input "dy" : f32[1200,35]
  %xh = input "xhat" : f32[1200,35]
  %dw, %db = fusion(%dy, %xh) {body = graph @fusion {
    %0 = input "in0" : f32[1200,35]
    %1 = input "in1" : f32[1200,35]
    %2 = mul(%0, %1) : f32[1200,35]
    %3 = reduce_sum(%2) {axes = [0]} : f32[35]
    %4 = reduce_sum(%0) {axes = [0]} : f32[35]
    output "out0" = %3
    output "out1" = %4
  }} : f32[35], f32[35]
  output "dw" = %dw
  output "db" = %db
}
)",
                   "fusion{mul reduce_sum reduce_sum}");
}

// Cross-entropy's pick: one-hot(labels) * log-probabilities summed per row, beside a full sum.
// The i64 labels are only compared, so they are read as floats while exact (|x| <= 2^24).
const char *kCrossEntropyPick = R"(graph @ce {
  %lab = input "labels" : i64[6,5,1]
  %iota = iota() {shape = [11], axis = 0} : i64[11]
  %lp = input "logp" : f32[6,5,11]
  %oh, %pick, %all, %keep = fusion(%lab, %iota, %lp) {body = graph @fusion {
    %0 = input "in0" : i64[6,5,1]
    %1 = input "in1" : i64[11]
    %2 = input "in2" : f32[6,5,11]
    %3 = eq(%0, %1) : bool[6,5,11]
    %4 = cast(%3) {dtype = f32} : f32[6,5,11]
    %5 = mul(%2, %4) : f32[6,5,11]
    %6 = reduce_sum(%5) {axes = [-1]} : f32[6,5]
    %7 = reduce_sum(%2) {axes = [1,2]} : f32[6]
    %8 = constant() {value = -100.0, dtype = i64} : i64[]
    %9 = ne(%0, %8) : bool[6,5,1]
    %10 = broadcast(%9) {shape = [6,5,11]} : bool[6,5,11]
    output "out0" = %4
    output "out1" = %6
    output "out2" = %7
    output "out3" = %10
  }} : f32[6,5,11], f32[6,5], f32[6], bool[6,5,11]
  output "onehot" = %oh
  output "pick" = %pick
  output "all" = %all
  output "keep" = %keep
}
)";

TEST(HighwayOps, RegionWithIntegerLabels) {
  const std::string kind = "fusion{eq cast mul reduce_sum reduce_sum ne broadcast}";
  matchesReference(kCrossEntropyPick, kind);
  // Integers beyond 2^24: 2^24 + 1 would read as the float 2^24 and equal it; the step notices
  // and runs the reference.
  matchesReference(R"(graph @big {
  %a = input "a" : i64[8]
  %b = input "b" : i64[8]
  %x = input "x" : f32[8]
  %y = fusion(%a, %b, %x) {body = graph @fusion {
    %0 = input "in0" : i64[8]
    %1 = input "in1" : i64[8]
    %2 = input "in2" : f32[8]
    %3 = eq(%0, %1) : bool[8]
    %4 = cast(%3) {dtype = f32} : f32[8]
    %5 = mul(%2, %4) : f32[8]
    output "out0" = %5
  }} : f32[8]
  output "y" = %y
}
)",
                   "fusion{eq cast mul}", [](runtime::Executable &exe) {
                     runtime::HostTensor a(ir::DType::I64, {8}), b(ir::DType::I64, {8});
                     for (int64_t k = 0; k < 8; ++k) {
                       a.setInt(k, (int64_t{1} << 24) + k % 2);
                       b.setInt(k, int64_t{1} << 24);
                     }
                     ASSERT_TRUE(exe.write("a", a).ok());
                     ASSERT_TRUE(exe.write("b", b).ok());
                   });
}

// A decoding step's relative positions: the clipped distance clamp(j - pos, -2, 2) + 2, an i64
// index the region computes as floats and stores (fusion.cc: exactIntegers). j - pos of two
// inputs within 2^24 could reach 2^25 and round, so the region takes its inputs within 2^23; past
// that the step notices and runs the reference.
TEST(HighwayOps, RegionStoresExactIntegers) {
  const char *text = R"(graph @rel {
  %p = input "pos" : i64[4,1]
  %j = iota() {shape = [6], axis = 0} : i64[6]
  %i = fusion(%j, %p) {body = graph @fusion {
    %0 = input "in0" : i64[6]
    %1 = input "in1" : i64[4,1]
    %2 = sub(%0, %1) : i64[4,6]
    %3 = constant() {value = -2.0, dtype = i64} : i64[]
    %4 = max(%2, %3) : i64[4,6]
    %5 = constant() {value = 2.0, dtype = i64} : i64[]
    %6 = min(%4, %5) : i64[4,6]
    %7 = add(%6, %5) : i64[4,6]
    output "out0" = %7
  }} : i64[4,6]
  output "index" = %i
}
)";
  for (const std::vector<int64_t> &pos :
       {std::vector<int64_t>{0, 3, 5, int64_t{1} << 23},
        std::vector<int64_t>{(int64_t{1} << 23) + 1, -(int64_t{1} << 24) + 1, 7, 2}})
    matchesReference(text, "fusion{sub max min add}", [&pos](runtime::Executable &exe) {
      runtime::HostTensor p(ir::DType::I64, {4, 1});
      for (int64_t k = 0; k < 4; ++k)
        p.setInt(k, pos[k]);
      ASSERT_TRUE(exe.write("pos", p).ok());
    });
}

// Positions made features (sinusoidal positions at each row's position, as a decoding step
// computes them): an i64 input cast to f32 reads as floats too, in a region or alone, so it is a
// kernel call (a bundle refuses a step by reference) and not "cast (reference)".
TEST(HighwayOps, IntegerPositionsCastToFloat) {
  matchesReference(R"(graph @pos {
  %p = input "pos" range(4096) : i64[4,3]
  %f = cast(%p) {dtype = f32} : f32[4,3]
  output "f" = %f
}
)",
                   "cast");
  matchesReference(R"(graph @scaled {
  %p = input "pos" range(4096) : i64[4,1]
  %x = input "x" : f32[4,16]
  %y = fusion(%p, %x) {body = graph @fusion {
    %0 = input "in0" : i64[4,1]
    %1 = input "in1" : f32[4,16]
    %2 = cast(%0) {dtype = f32} : f32[4,1]
    %3 = mul(%1, %2) : f32[4,16]
    %4 = sin(%3) : f32[4,16]
    output "out0" = %4
  }} : f32[4,16]
  output "y" = %y
}
)",
                   "fusion{cast mul sin}");
}

TEST(HighwayOps, RegionWithTwoReductionsAndABroadcastInput) {
  matchesReference(R"(graph @two {
  %a = input "a" : f32[20,1]
  %b = input "b" : f32[20,48]
  %s, %m = fusion(%a, %b) {body = graph @fusion {
    %0 = input "in0" : f32[20,1]
    %1 = input "in1" : f32[20,48]
    %2 = sub(%1, %0) : f32[20,48]
    %3 = reduce_sum(%2) {axes = [1]} : f32[20]
    %4 = reduce_max(%1) {axes = [1]} : f32[20]
    output "out0" = %3
    output "out1" = %4
  }} : f32[20], f32[20]
  output "s" = %s
  output "m" = %m
}
)",
                   "fusion{sub reduce_sum reduce_max}");
}

// Inputs broadcast along leading axes of the iteration space [4,1,5,24] (which has an axis of
// size 1): over the middle axis (a per-batch bias, whose row offsets are no multiple of the
// row), over the first (one per position), and a row vector.
TEST(HighwayOps, RegionWithInputsBroadcastAlongLeadingAxes) {
  matchesReference(R"(graph @bcast {
  %a = input "a" : f32[4,1,5,24]
  %b = input "b" : f32[4,1,1,24]
  %c = input "c" : f32[5,24]
  %e = input "e" : f32[24]
  %y = fusion(%a, %b, %c, %e) {body = graph @fusion {
    %0 = input "in0" : f32[4,1,5,24]
    %1 = input "in1" : f32[4,1,1,24]
    %2 = input "in2" : f32[5,24]
    %3 = input "in3" : f32[24]
    %4 = mul(%0, %1) : f32[4,1,5,24]
    %5 = sub(%4, %2) : f32[4,1,5,24]
    %6 = mul(%5, %3) : f32[4,1,5,24]
    output "out0" = %6
  }} : f32[4,1,5,24]
  output "y" = %y
}
)",
                   "fusion{mul sub mul}");
}

// Outputs written straight into their places: y takes the buffer of x (which dies here), and z,
// computed after y, still reads x. Writing y directly would overwrite the x that z reads, so only
// z may be written so (and w over nothing shared).
TEST(HighwayOps, RegionOutputInPlaceOverAnInputReadLater) {
  matchesReference(R"(graph @inplace {
  %a = input "a" : f32[300,40]
  %x = exp(%a) : f32[300,40]
  %y, %z = fusion(%x) {body = graph @fusion {
    %0 = input "in0" : f32[300,40]
    %1 = constant() {value = 2} : f32[]
    %2 = mul(%0, %1) : f32[300,40]
    %3 = constant() {value = 1} : f32[]
    %4 = add(%0, %3) : f32[300,40]
    output "out0" = %2
    output "out1" = %4
  }} : f32[300,40], f32[300,40]
  %w = sub(%y, %z) : f32[300,40]
  output "w" = %w
}
)",
                   "fusion{mul add}");
  // As an optimizer's update: each output takes the buffer of an input read for the last time
  // by the instruction that computes it (so both are written directly), and the second reads
  // the first back from its place.
  matchesReference(R"(graph @update {
  %a = input "a" : f32[300,40]
  %b = input "b" : f32[300,40]
  %x = exp(%a) : f32[300,40]
  %u = exp(%b) : f32[300,40]
  %y, %z = fusion(%x, %u) {body = graph @fusion {
    %0 = input "in0" : f32[300,40]
    %1 = input "in1" : f32[300,40]
    %2 = constant() {value = 2} : f32[]
    %3 = mul(%0, %2) : f32[300,40]
    %4 = add(%1, %3) : f32[300,40]
    output "out0" = %3
    output "out1" = %4
  }} : f32[300,40], f32[300,40]
  %w = sub(%y, %z) : f32[300,40]
  output "w" = %w
}
)",
                   "fusion{mul add}");
}

// Lone reductions over adjacent axes (the reduce kernel, not a region): middle axes with more
// outputs than one block of the kernel (1029 columns: two blocks, and a tail past whole vectors),
// a bias gradient's [B, T, C] over B and T, outputs so few that the rows split into chunks (2 and
// 5 chunks of an odd count of rows, two leading outputs), and a last axis (one sum per row); max
// with a NaN.
TEST(HighwayOps, LoneReductions) {
  for (const char *op : {"reduce_sum", "reduce_mean", "reduce_max"}) {
    auto check = [&](const std::string &in, const std::string &axes, const std::string &out) {
      const std::string text = fmt::format(R"(graph @r {{
  %x = input "x" : f32[{0}]
  %y = {1}(%x) {{axes = [{2}]}} : f32[{3}]
  output "y" = %y
}}
)",
                                           in, op, axes, out);
      matchesReference(text, op, [](runtime::Executable &exe) {
        Expected<runtime::HostTensor> x = exe.read("x");
        ASSERT_TRUE(x.ok());
        x->set(40, std::nan(""));
        ASSERT_TRUE(exe.write("x", *x).ok());
      });
    };
    check("3,37,1029", "1", "3,1029");
    check("4,9,35", "0, 1", "35");
    check("601,300", "0", "300");
    check("2,1999,171", "1", "2,171");
    check("5,300", "1", "5");
  }
}

TEST(HighwayOps, Transpose) {
  for (const char *dtype : {"f32", "bool", "i64"})
    for (const auto &[shape, perm, out] :
         std::vector<std::tuple<std::string, std::string, std::string>>{
             {"2,7,3,16", "0,2,1,3", "2,3,7,16"},
             {"17,129", "1,0", "129,17"},
             {"3,5,7", "2,0,1", "7,3,5"}})
      matchesReference(fmt::format(R"(graph @t {{
  %x = input "x" : {0}[{1}]
  %y = transpose(%x) {{perm = [{2}]}} : {0}[{3}]
  output "y" = %y
}}
)",
                                   dtype, shape, perm, out),
                       "transpose");
}

// slice (with a step), pad (interior and edges), concat (of three, in the middle axis), broadcast
// and stop_gradient: strided copies of every element size.
TEST(HighwayOps, DataMovement) {
  for (const char *dtype : {"f32", "bool", "i64", "bf16"}) {
    auto check = [&](const std::string &op, const std::string &body) {
      matchesReference(fmt::format(fmt::runtime(body), fmt::arg("t", dtype)), op);
    };
    check("slice", R"(graph @s {{
  %x = input "x" : {t}[5,11,3]
  %y = slice(%x) {{axis = 1, start = 2, end = 9, step = 3}} : {t}[5,3,3]
  output "y" = %y
}}
)");
    check("pad", R"(graph @p {{
  %x = input "x" : {t}[5,11,3]
  %y = pad(%x) {{axis = 0, low = 2, high = 1, interior = 1, value = 1}} : {t}[12,11,3]
  output "y" = %y
}}
)");
    check("concat", R"(graph @c {{
  %a = input "a" : {t}[2,3,4]
  %b = input "b" : {t}[2,1,4]
  %c = input "c" : {t}[2,5,4]
  %y = concat(%a, %b, %c) {{axis = -2}} : {t}[2,9,4]
  output "y" = %y
}}
)");
    check("broadcast", R"(graph @b {{
  %x = input "x" : {t}[3,1]
  %y = broadcast(%x) {{shape = [4,3,5]}} : {t}[4,3,5]
  output "y" = %y
}}
)");
    check("stop_gradient", R"(graph @g {{
  %x = input "x" : {t}[7,3]
  %y = stop_gradient(%x) : {t}[7,3]
  output "y" = %y
}}
)");
  }
}

TEST(HighwayOps, LogSoftmaxDropoutAndLonePointwiseOps) {
  matchesReference(R"(graph @ls {
  %x = input "x" : f32[7,3,1037]
  %y = log_softmax(%x) : f32[7,3,1037]
  output "y" = %y
}
)",
                   "log_softmax");
  matchesReference(R"(graph @d {
  %x = input "x" : f32[7,3,1037]
  %y = dropout(%x) {p = 0.25, seed = 7} : f32[7,3,1037]
  output "y" = %y
}
)",
                   "dropout");
  // A pointwise op that fusion left alone is a region of one op: same shapes, a broadcast
  // operand, scalars, integers compared.
  for (const char *op : {"add", "sub", "mul"})
    matchesReference(fmt::format(R"(graph @b {{
  %a = input "a" : f32[300,257]
  %b = input "b" : f32[300,257]
  %c = {}(%a, %b) : f32[300,257]
  output "c" = %c
}}
)",
                                 op),
                     op);
  matchesReference(R"(graph @b {
  %a = input "a" : f32[30,257]
  %b = input "b" : f32[257]
  %c = mul(%a, %b) : f32[30,257]
  output "c" = %c
}
)",
                   "mul");
  matchesReference(R"(graph @s {
  %a = input "a" : f32[]
  %b = input "b" : f32[]
  %c = div(%a, %b) : f32[]
  output "c" = %c
}
)",
                   "div");
  matchesReference(R"(graph @n {
  %a = input "a" range(5) : i64[4,9]
  %b = input "b" range(5) : i64[9]
  %c = ne(%a, %b) : bool[4,9]
  output "c" = %c
}
)",
                   "ne");
}

// Embedding lookup and its gradient: repeated indices add up (in index order, as the reference).
const char *kGatherScatter = R"(graph @gs {
  %t = input "table" : f32[11,300]
  %i = input "ids" : i64[4,5]
  %u = input "updates" : f32[4,5,300]
  %g = gather(%t, %i) : f32[4,5,300]
  %s = scatter_add(%i, %u) {size = 11} : f32[11,300]
  output "g" = %g
  output "s" = %s
}
)";

void writeIds(runtime::Executable &exe, int64_t bad) {
  runtime::HostTensor ids(ir::DType::I64, {4, 5});
  for (int64_t k = 0; k < 20; ++k)
    ids.setInt(k, k == 7 ? bad : (k * 7) % 11);
  ASSERT_TRUE(exe.write("ids", ids).ok());
}

TEST(HighwayOps, GatherAndScatterAdd) {
  matchesReference(kGatherScatter, "gather", [](runtime::Executable &e) { writeIds(e, 3); });
  matchesReference(kGatherScatter, "scatter_add", [](runtime::Executable &e) { writeIds(e, 3); });
  // An index out of range: the same error as the reference's, nothing crashes.
  ir::ParseResult parsed = ir::parseGraph(kGatherScatter);
  ASSERT_TRUE(parsed.graph);
  std::unique_ptr<runtime::Executable> want = testing_exe::reference(*parsed.graph, 1);
  std::unique_ptr<runtime::Executor> got = testing_exe::highway(*parsed.graph);
  ASSERT_TRUE(want && got);
  for (runtime::Executable *e : {want.get(), static_cast<runtime::Executable *>(got.get())}) {
    ASSERT_TRUE(runtime::randomizeInputs(*e, 2).ok());
    writeIds(*e, 11);
  }
  Status a = want->run(), b = got->run();
  ASSERT_FALSE(a.ok());
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(a.error().message, b.error().message);
  EXPECT_NE(b.error().message.find("index 11"), std::string::npos) << b.error().message;
}

// A tied embedding's gradient as the lower pipeline folds it: a scatter_add into the lm head's
// [V, D] term. In the term's bytes (h dies there) only the named rows are written, and every
// other row must keep the term's value; from an input's bytes (kept), the base is copied first.
// Repeated ids add in index order.
TEST(HighwayOps, ScatterAddIntoABase) {
  matchesReference(R"(graph @tied {
  %t = input "table" : f32[11,300]
  %i = input "ids" : i64[4,5]
  %u = input "updates" : f32[4,5,300]
  %h = mul(%t, %t) : f32[11,300]
  %y = scatter_add(%i, %u, %h) {size = 11} : f32[11,300]
  %z = tanh(%y) : f32[11,300]
  %c = scatter_add(%i, %u, %t) {size = 11} : f32[11,300]
  output "z" = %z
  output "c" = %c
}
)",
                   "scatter_add", [](runtime::Executable &e) { writeIds(e, 3); });
}

// A KV cache's write (update_slice): in the cache's bytes (c dies there) only the slices at the
// positions are written, the rest keeps the cache's values; from an input's bytes (kept: read
// again after), the cache is copied first; a position past the cache writes nothing. f32 and
// bf16 caches.
TEST(HighwayOps, UpdateSliceInPlaceAndNot) {
  for (const char *t : {"f32", "bf16"}) {
    SCOPED_TRACE(t);
    matchesReference(fmt::format(R"(graph @cache {{
  %k = input "k" : {0}[3,2,9,5]
  %u = input "u" : {0}[3,2,1,5]
  %p = input "pos" : i64[3]
  %c = mul(%k, %k) : {0}[3,2,9,5]
  %y = update_slice(%c, %u, %p) {{axis = 2}} : {0}[3,2,9,5]
  %z = update_slice(%k, %u, %p) {{axis = 2}} : {0}[3,2,9,5]
  %w = add(%z, %k) : {0}[3,2,9,5]
  output "y" = %y
  output "w" = %w
}}
)",
                                 t),
                     "update_slice", [](runtime::Executable &e) {
                       runtime::HostTensor pos(ir::DType::I64, {3});
                       pos.setInt(0, 4), pos.setInt(1, 9), pos.setInt(2, 0);
                       ASSERT_TRUE(e.write("pos", pos).ok());
                     });
  }
}

TEST(HighwayOps, Norms) {
  // add_layer_norm with a position table broadcast over the batch, row lengths that are not a
  // multiple of the vector width.
  matchesReference(R"(graph @n {
  %a = input "a" : f32[3,5,37]
  %p = input "p" : f32[5,37]
  %w = input "w" : f32[37]
  %b = input "b" : f32[37]
  %s, %y, %m, %r = add_layer_norm(%a, %p, %w, %b) : f32[3,5,37], f32[3,5,37], f32[3,5], f32[3,5]
  output "s" = %s
  output "y" = %y
  output "m" = %m
  output "r" = %r
}
)",
                   "add_layer_norm");
  // The same with the table's leading 1 spelt out.
  matchesReference(R"(graph @n {
  %a = input "a" : f32[3,5,37]
  %p = input "p" : f32[1,5,37]
  %s, %y, %m, %r = add_layer_norm(%p, %a) {has_weight = false, has_bias = false} : f32[3,5,37], f32[3,5,37], f32[3,5], f32[3,5]
  output "s" = %s
  output "y" = %y
  output "m" = %m
  output "r" = %r
}
)",
                   "add_layer_norm");
  matchesReference(R"(graph @n {
  %x = input "x" : f32[70,129]
  %y, %m, %r = layer_norm(%x) {has_weight = false, has_bias = false} : f32[70,129], f32[70], f32[70]
  output "y" = %y
  output "m" = %m
  output "r" = %r
}
)",
                   "layer_norm");
  matchesReference(R"(graph @n {
  %a = input "a" : f32[4,9,16]
  %b = input "b" : f32[4,9,16]
  %w = input "w" : f32[16]
  %s, %y, %r = add_rms_norm(%a, %b, %w) : f32[4,9,16], f32[4,9,16], f32[4,9]
  output "s" = %s
  output "y" = %y
  output "r" = %r
}
)",
                   "add_rms_norm");
  matchesReference(R"(graph @n {
  %x = input "x" : f32[40,33]
  %m = input "m" : f32[40]
  %r = input "r" : f32[40]
  %dy = input "dy" : f32[40,33]
  %w = input "w" : f32[33]
  %dx, %dw = layer_norm_backward(%x, %m, %r, %dy, %w) : f32[40,33], f32[33]
  output "dx" = %dx
  output "dw" = %dw
}
)",
                   "layer_norm_backward");
  matchesReference(R"(graph @n {
  %x = input "x" : f32[6,7,17]
  %r = input "r" : f32[6,7]
  %dy = input "dy" : f32[6,7,17]
  %dx = rms_norm_backward(%x, %r, %dy) {has_weight = false} : f32[6,7,17]
  output "dx" = %dx
}
)",
                   "rms_norm_backward");
}

} // namespace
} // namespace kiln::highway_ops_test

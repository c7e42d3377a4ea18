// The whole program as generated code (codegen/llvm/program_codegen.h): one function calling the
// kernel ABI with constant arguments, loaded through its bundle descriptor, computes what the
// executor's steps compute, bit for bit (the same kernels in the same order, the same compiled
// regions): training steps and forward passes of every model family, several variants. A failing
// kernel names its step; a program with a step that runs by reference is refused.
#include <gtest/gtest.h>

#include "codegen/llvm/backend.h"
#include "ir/parser.h"
#include "models/zoo.h"
#include "passes/optimizer.h"
#include "passes/stages.h"
#include "runtime/weights.h"
#include "tests/util/executable.h"

namespace kiln::whole_program_test {
namespace {

std::unique_ptr<runtime::Executor> wholeProgram(const ir::Graph &g) {
  llvmgen::Options options;
  options.threads = 2;
  Expected<std::unique_ptr<runtime::Executor>> exe =
      llvmgen::compileProgram(codegen::withMemoryPlan(g), options);
  EXPECT_TRUE(exe.ok()) << exe.error().message;
  return exe.ok() ? std::move(*exe) : nullptr;
}

// Runs both twice from the same weights and inputs (the second run sees the first's updates)
// and compares every symbol bit for bit.
void sameBits(const ir::Graph &g) {
  // (The executor with interpreted regions: compiled ones give the interpreter's bits.)
  std::unique_ptr<runtime::Executor> want = testing_exe::highway(g);
  std::unique_ptr<runtime::Executor> got = wholeProgram(g);
  ASSERT_TRUE(want && got);
  EXPECT_EQ(got->backend(), "bundle");
  ASSERT_EQ(want->program().symbols.size(), got->program().symbols.size());
  for (runtime::Executable *e : {static_cast<runtime::Executable *>(want.get()),
                                 static_cast<runtime::Executable *>(got.get())}) {
    ASSERT_TRUE(runtime::initWeights(*e, 3).ok());
    ASSERT_TRUE(runtime::randomizeInputs(*e, 4).ok());
    for (int run = 0; run < 2; ++run) {
      Status st = e->run();
      ASSERT_TRUE(st.ok()) << st.error().message;
    }
  }
  for (const runtime::Symbol &s : want->program().symbols) {
    const runtime::Symbol &t = got->program().symbols[want->program().indexOf(s)];
    EXPECT_EQ(s.name, t.name);
    EXPECT_EQ(s.shape, t.shape);
    EXPECT_TRUE(want->read(s) == got->read(t)) << s.name;
  }
}

TEST(WholeProgram, TrainingStepsAndForwardPassesAreTheExecutorsBits) {
  using Settings = std::vector<models::Setting>;
  for (const char *model : {"gpt", "bert", "transformer"})
    for (const Settings &s : std::vector<Settings>{
             {}, {{"position", "rope"}, {"dropout", "0.1"}, {"norm", "post"}, {"n_kv_heads", "2"}}})
      for (bool train : {true, false}) {
        SCOPED_TRACE(fmt::format("{} train={} {}", model, train, s.size()));
        Settings with = s;
        with.push_back({"loss", train ? "true" : "false"});
        Expected<ir::Graph> raw = models::buildModel(model, with);
        ASSERT_TRUE(raw.ok()) << raw.error().message;
        passes::OptimizerConfig adamw;
        adamw.clipNorm = 1, adamw.guardNonFinite = true;
        Expected<ir::Graph> g = train ? passes::trainingStep(std::move(*raw), adamw)
                                      : passes::optimizedForward(std::move(*raw));
        ASSERT_TRUE(g.ok()) << g.error().message;
        sameBits(*g);
      }
}

TEST(WholeProgram, AFailingKernelNamesItsStep) {
  ir::ParseResult parsed = ir::parseGraph(R"(graph @g {
  %t = input "table" : f32[11,3]
  %i = input "ids" : i64[4]
  %g = gather(%t, %i) : f32[4,3]
  output "g" = %g
}
)");
  ASSERT_TRUE(parsed.graph);
  std::unique_ptr<runtime::Executor> exe = wholeProgram(*parsed.graph);
  ASSERT_TRUE(exe);
  runtime::HostTensor ids(ir::DType::I64, {4});
  ids.setInt(2, 11);
  ASSERT_TRUE(exe->write("ids", ids).ok());
  Status st = exe->run();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message, "g: step 0 (gather): an index is out of range");
}

// A target that is neither a class nor the ignored id: an error at the step, on the reference,
// the kernels and a whole program (a training bundle scored it as nothing and still counted it
// in the mean, exit 0). The ignored id passes, inside [0, V) or outside.
TEST(WholeProgram, ATargetNeitherAClassNorIgnoredIsAnError) {
  for (int64_t ignored : {-100, 2})
    for (int64_t bad : {5, -1, -100}) {
      if (bad == ignored)
        continue;
      SCOPED_TRACE(fmt::format("ignore_index {}, target {}", ignored, bad));
      ir::ParseResult parsed = ir::parseGraph(fmt::format(R"(graph @g {{
  %x = input "x" : f32[4,5]
  %t = input "t" : i64[4]
  %l, %s = cross_entropy(%x, %t) {{ignore_index = {}}} : f32[4], f32[4]
  output "l" = %l
}}
)",
                                                          ignored));
      ASSERT_TRUE(parsed.graph) << parsed.errors[0].message;
      runtime::HostTensor t(ir::DType::I64, {4});
      t.setInt(1, ignored), t.setInt(2, 4);
      std::unique_ptr<runtime::Executable> ref = testing_exe::reference(*parsed.graph, 1);
      std::unique_ptr<runtime::Executor> fast = testing_exe::fast(*parsed.graph, "highway", 1);
      std::unique_ptr<runtime::Executor> whole = wholeProgram(*parsed.graph);
      for (runtime::Executable *exe : {ref.get(), static_cast<runtime::Executable *>(fast.get()),
                                       static_cast<runtime::Executable *>(whole.get())}) {
        ASSERT_TRUE(exe->write("t", t).ok());
        EXPECT_TRUE(exe->run().ok());
      }
      t.setInt(3, bad);
      const std::string want = fmt::format(
          "target {} at position 3 is outside the 5 classes [0, 5) and not the ignored id {}", bad,
          ignored);
      for (runtime::Executable *exe : {ref.get(), static_cast<runtime::Executable *>(fast.get())}) {
        ASSERT_TRUE(exe->write("t", t).ok());
        Status st = exe->run();
        ASSERT_FALSE(st.ok());
        EXPECT_NE(st.error().message.find(want), std::string::npos) << st.error().message;
      }
      ASSERT_TRUE(whole->write("t", t).ok());
      Status st = whole->run();
      ASSERT_FALSE(st.ok());
      EXPECT_EQ(st.error().message, "g: step 0 (cross_entropy): an index is out of range");
    }
}

// A region's integer arithmetic is exact in f32 within its inputs' bound (fusion.cc:
// exactIntegers): j - pos of two inputs within 2^24 may reach 2^25, so this region takes its
// inputs within 2^23 and stores j - pos exactly (as i64); past 2^23 a whole program, which has no
// reference to fall back on, reports it (2^23 + 1 + j could have been computed, rounded, from a
// bound of 2^24).
TEST(WholeProgram, ARegionsIntegersWithinTheirBoundAreExact) {
  ir::ParseResult parsed = ir::parseGraph(R"(graph @g {
  %p = input "pos" : i64[2,1]
  %j = iota() {shape = [6], axis = 0} : i64[6]
  %d = fusion(%j, %p) {body = graph @fusion {
    %0 = input "in0" : i64[6]
    %1 = input "in1" : i64[2,1]
    %2 = sub(%0, %1) : i64[2,6]
    output "out0" = %2
  }} : i64[2,6]
  output "d" = %d
}
)");
  ASSERT_TRUE(parsed.graph) << parsed.errors[0].message;
  std::unique_ptr<runtime::Executor> exe = wholeProgram(*parsed.graph);
  ASSERT_TRUE(exe);
  const int64_t bound = int64_t{1} << 23;
  runtime::HostTensor pos(ir::DType::I64, {2, 1});
  pos.setInt(0, -bound), pos.setInt(1, bound);
  ASSERT_TRUE(exe->write("pos", pos).ok());
  ASSERT_TRUE(exe->run().ok());
  const runtime::HostTensor d = *exe->read("d");
  for (int64_t j = 0; j < 6; ++j) {
    EXPECT_EQ(d.getInt(j), j + bound);
    EXPECT_EQ(d.getInt(6 + j), j - bound);
  }
  pos.setInt(0, -bound - 1);
  ASSERT_TRUE(exe->write("pos", pos).ok());
  Status st = exe->run();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message, "g: step 0 (fusion{sub}): an integer input exceeds its fusion "
                                "region's bound (int_bound: the region computes on it in f32)");
}

TEST(WholeProgram, AStepByReferenceIsRefused) {
  ir::ParseResult parsed = ir::parseGraph(R"(graph @g {
  %x = input "x" : bf16[4,8]
  %y = log_softmax(%x) : bf16[4,8]
  output "y" = %y
}
)");
  ASSERT_TRUE(parsed.graph);
  llvmgen::Options options;
  Expected<std::unique_ptr<runtime::Executor>> exe =
      llvmgen::compileProgram(codegen::withMemoryPlan(*parsed.graph), options);
  ASSERT_FALSE(exe.ok());
  EXPECT_NE(
      exe.error().message.find("step 0 (log_softmax (reference)) is no call of the kernel ABI"),
      std::string::npos)
      << exe.error().message;
}

} // namespace
} // namespace kiln::whole_program_test

// The LLVM backend's compiled fusion regions compute what the interpreter computes, bit for bit:
// one region holding every op with a formula, taken from the op table (bool, broadcast and
// constant sources; bool results; 37 columns, so every row ends in a masked vector), on inputs
// that sweep the special values (NaN, +-inf, +-0, subnormals, exp's overflow and underflow edges,
// erf's branch point). The module verifies and prints.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "codegen/llvm/backend.h"
#include "codegen/llvm/program_codegen.h"
#include "ir/parser.h"
#include "runtime/weights.h"
#include "tests/util/compare.h"
#include "tests/util/executable.h"

namespace kiln::llvm_codegen_test {
namespace {

struct OpCase {
  std::string op, operands, type; // e.g. "add", "%0, %1", "f32"
};

// One case per op with a formula (the op table's pointwise ops), its operands f32 where it
// accepts them and else bool, then the sources a region reads besides its plain inputs.
std::vector<OpCase> opCases() {
  std::vector<OpCase> cases;
  for (const ir::OpInfo *op : ir::allOps()) {
    if (!op->pointwise || op->kind == ir::OpKind::Cast)
      continue;
    const size_t n = op->operands.size();
    const bool select = op->kind == ir::OpKind::Select;
    const std::vector<ir::Type> f32(n, ir::Type{DType::F32, {5, 37}});
    const bool takesF32 =
        select || ir::inferTypes(op->kind, f32, ir::Attrs{}).ok(); // else it takes bools
    const std::string operands = select      ? "%2, %0, %1"
                                 : !takesF32 ? (n == 1 ? "%2" : "%2, %2")
                                 : n == 1    ? "%0"
                                             : "%0, %1";
    cases.push_back(
        {std::string(op->mnemonic), operands, op->comparison || !takesF32 ? "bool" : "f32"});
  }
  cases.push_back({"add", "%0, %3", "f32"}); // a row broadcast along the rows
  cases.push_back({"mul", "%0, %4", "f32"}); // a column broadcast along the columns
  cases.push_back({"mul", "%0, %5", "f32"}); // a constant
  cases.push_back({"cast", "%2", "f32"});
  cases.push_back({"cast", "%0", "bool"});
  cases.push_back({"cast", "%0", "bf16"}); // rounded (ties to even), stored as bf16
  return cases;
}

std::string regionText(const std::vector<OpCase> &cases) {
  const std::string s = "[5,37]";
  std::string body, types, results, outputs;
  for (size_t k = 0; k < cases.size(); ++k) {
    const OpCase &c = cases[k];
    const std::string attrs = c.op == "cast" ? fmt::format(" {{dtype = {}}}", c.type) : "";
    body += fmt::format("    %{} = {}({}){} : {}{}\n", k + 6, c.op, c.operands, attrs, c.type, s);
    body += fmt::format("    output \"out{}\" = %{}\n", k, k + 6);
    types += fmt::format("{}{}{}", k ? ", " : "", c.type, s);
    results += fmt::format("{}%r{}", k ? ", " : "", k);
    outputs += fmt::format("  output \"o{}\" = %r{}\n", k, k);
  }
  return fmt::format(R"(graph @ops {{
  %x = input "x" : f32{0}
  %y = input "y" : f32{0}
  %c = input "c" : bool{0}
  %b = input "b" : f32[37]
  %s = input "s" : f32[5,1]
  {1} = fusion(%x, %y, %c, %b, %s) {{body = graph @fusion {{
    %0 = input "in0" : f32{0}
    %1 = input "in1" : f32{0}
    %2 = input "in2" : bool{0}
    %3 = input "in3" : f32[37]
    %4 = input "in4" : f32[5,1]
    %5 = constant() {{value = 0.5}} : f32[]
{2}  }}}} : {3}
{4}}}
)",
                     s, results, body, types, outputs);
}

// Special values first, then a sweep over [-12, 12) (and y the sweep backwards).
void fillInputs(runtime::Executable &exe) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  const std::vector<float> special = {
      nan,    inf,   -inf,   0.0f,    -0.0f,   1e-40f,      -1e-40f,         88.7f,
      88.73f, 89.5f, -87.5f, -103.9f, -104.5f, -150.0f,     0.49f,           0.5f,
      0.51f,  -0.5f, 3.9f,   1e-4f,   -1e-4f,  1 + 0x1p-8f, 1 + 3 * 0x1p-8f, 3.4e38f};
  auto tensor = [&](std::vector<int64_t> shape, bool backwards) {
    runtime::HostTensor t(DType::F32, shape);
    auto *f = reinterpret_cast<float *>(t.raw().data());
    const int64_t n = t.raw().size() / 4;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = backwards ? n - 1 - k : k;
      f[k] = i < static_cast<int64_t>(special.size()) ? special[i] : -12.0f + 24.0f * k / n;
    }
    return t;
  };
  ASSERT_TRUE(exe.write("x", tensor({5, 37}, false)).ok());
  ASSERT_TRUE(exe.write("y", tensor({5, 37}, true)).ok());
  ASSERT_TRUE(exe.write("b", tensor({37}, true)).ok());
  ASSERT_TRUE(exe.write("s", tensor({5, 1}, false)).ok());
  runtime::HostTensor c(DType::Bool, {5, 37});
  for (size_t k = 0; k < c.raw().size(); ++k)
    c.raw()[k] = (k % 3) == 1;
  ASSERT_TRUE(exe.write("c", c).ok());
}

// Equal bytes, except that a NaN equals any NaN (IEEE leaves the sign and payload of a NaN result
// open, and the two compilers order a product's operands as they like).
bool sameBits(const runtime::HostTensor &a, const runtime::HostTensor &b) {
  if (a.dtype() != DType::F32)
    return a == b;
  const auto *x = reinterpret_cast<const float *>(a.raw().data());
  const auto *y = reinterpret_cast<const float *>(b.raw().data());
  for (size_t k = 0; k < a.raw().size() / 4; ++k)
    if (std::memcmp(x + k, y + k, 4) != 0 && !(std::isnan(x[k]) && std::isnan(y[k]))) {
      ADD_FAILURE() << "element " << k << ": " << x[k] << " vs " << y[k];
      return false;
    }
  return true;
}

TEST(LlvmCodegen, EveryPointwiseOpComputesTheInterpretersBits) {
  const std::vector<OpCase> cases = opCases();
  ir::ParseResult parsed = ir::parseGraph(regionText(cases));
  ASSERT_TRUE(parsed.graph) << parsed.errors[0].message;
  std::unique_ptr<runtime::Executor> interp = testing_exe::fast(*parsed.graph, "highway");
  std::unique_ptr<runtime::Executor> llvm = testing_exe::fast(*parsed.graph, "llvm");
  ASSERT_TRUE(interp && llvm);
  for (runtime::Executable *e : {static_cast<runtime::Executable *>(interp.get()),
                                 static_cast<runtime::Executable *>(llvm.get())}) {
    fillInputs(*e);
    Status st = e->run();
    ASSERT_TRUE(st.ok()) << st.error().message;
  }
  for (size_t k = 0; k < cases.size(); ++k) {
    const std::string name = fmt::format("o{}", k), &op = cases[k].op;
    SCOPED_TRACE(op + "(" + cases[k].operands + ")");
    Expected<runtime::HostTensor> got = llvm->read(name), interpreted = interp->read(name);
    ASSERT_TRUE(got.ok() && interpreted.ok());
    EXPECT_TRUE(sameBits(*got, *interpreted));
  }
}

TEST(LlvmCodegen, ModuleTextShowsTheEntryPointAndEachRegionAsAFunction) {
  ir::ParseResult parsed = ir::parseGraph(regionText(opCases()));
  ASSERT_TRUE(parsed.graph) << parsed.errors[0].message;
  ir::Graph planned = codegen::withMemoryPlan(*parsed.graph);
  const std::string prefix = llvmgen::cIdentifier(planned.name()) + "_";
  Expected<std::string> ll = llvmgen::moduleText(planned, {}, "forward", false);
  ASSERT_TRUE(ll.ok()) << ll.error().message;
  EXPECT_NE(ll->find("define i32 @" + prefix + "forward("), std::string::npos);
  EXPECT_NE(ll->find("@" + prefix + "bundle ="), std::string::npos);
  EXPECT_NE(ll->find("define void @" + prefix + "fusion_"), std::string::npos);
  EXPECT_NE(ll->find("<16 x float>"), std::string::npos);
  Expected<std::string> s = llvmgen::moduleText(planned, {}, "forward", true);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_NE(s->find(prefix + "fusion_"), std::string::npos);
  EXPECT_NE(s->find(prefix + "forward:"), std::string::npos);
}

TEST(LlvmCodegen, AnUnknownTargetCpuIsAClearError) {
  ir::ParseResult parsed = ir::parseGraph(regionText(opCases()));
  ASSERT_TRUE(parsed.graph);
  llvmgen::Options o;
  o.cpu = "pentium-9000";
  Expected<std::string> ll =
      llvmgen::moduleText(codegen::withMemoryPlan(*parsed.graph), o, "forward", false);
  ASSERT_FALSE(ll.ok());
  EXPECT_NE(ll.error().message.find("--target-cpu pentium-9000"), std::string::npos)
      << ll.error().message;
}

} // namespace
} // namespace kiln::llvm_codegen_test

// Golden results of the compilation pipelines, pinned so that a rewrite of a pass for speed (issue
// 14: compile time linear in depth) provably changes nothing: the printed optimized forward graph
// and training step, memory plan included (mem(...) on every value), of every zoo model in the
// backend variants and at depth, and the random property graphs after fuse-elementwise and
// plan-memory. Each text is pinned in compile_golden.inc by its 64-bit FNV-1a hash, the hash of
// the text without locations and memory plan (`kiln dump --no-loc`), and its op census (how many
// nodes of each op, regions' bodies included), recorded from the pipeline before the rewrite. A
// failure says what changed: only locations or the plan (a model's lines moved), or which ops
// came and went, or that the same ops changed order, types or attributes; and it prints the whole
// new table, to paste into compile_golden.inc once the differences (`kiln dump MODEL
// --stage=optimized|train [--no-loc]` before and after) are understood. The hashes hold for
// GCC and clang builds alike: no graph may depend on the order in which a compiler evaluates
// function arguments (tools/compare_compilers.sh diffs every stage of the zoo between the two).
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/printer.h"
#include "models/zoo.h"
#include "passes/passes.h"
#include "passes/stages.h"
#include "tests/util/model_variants.h"
#include "tests/util/random_graph.h"

namespace kiln::passes::compile_golden_test {
namespace {
using namespace kiln::ir;

struct Golden {
  std::string_view what;
  uint64_t hash;        // of the printed text
  uint64_t structure;   // of the text without locations and memory plan
  std::string_view ops; // the op census: "add 12, matmul 8, ..." in mnemonic order
};

constexpr Golden kGolden[] = {
#include "tests/passes/compile_golden.inc"
};

uint64_t fnv1a(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text)
    h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Each op's node count in g and its regions' bodies, as "add 12, matmul 8" (mnemonic order).
void countOps(const Graph &g, std::map<std::string_view, int> &count) {
  for (const Node &n : g.nodes()) {
    ++count[mnemonic(n.op)];
    for (const AttrValue &v : n.attrs.values())
      if (const auto *region = std::get_if<Region>(&v); region && region->graph)
        countOps(*region->graph, count);
  }
}
std::string census(std::span<const Graph> graphs) {
  std::map<std::string_view, int> count;
  for (const Graph &g : graphs)
    countOps(g, count);
  std::vector<std::string> parts;
  for (const auto &[op, k] : count)
    parts.push_back(fmt::format("{} {}", op, k));
  return fmt::format("{}", fmt::join(parts, ", "));
}

struct Computed {
  std::string what;
  uint64_t hash, structure;
  std::string ops;
};

Computed computed(std::string what, std::span<const Graph> graphs) {
  std::string text, bare;
  for (const Graph &g : graphs) {
    text += print(g);
    bare += print(g, {.locations = false, .memory = false});
  }
  return {std::move(what), fnv1a(text), fnv1a(bare), census(graphs)};
}

// The difference of two censuses, as "+2 softplus, -2 gelu_tanh" (empty: the same ops).
std::string censusDiff(std::string_view was, std::string_view now) {
  auto parse = [](std::string_view text) {
    std::map<std::string, int> m;
    std::istringstream in{std::string(text)};
    std::string op;
    int k = 0;
    while (in >> op >> k) {
      m[op] = k;
      in.ignore(2, ' '); // ", "
    }
    return m;
  };
  std::map<std::string, int> a = parse(was), b = parse(now), delta;
  for (const auto &[op, k] : a)
    delta[op] -= k;
  for (const auto &[op, k] : b)
    delta[op] += k;
  std::vector<std::string> parts;
  for (const auto &[op, k] : delta)
    if (k != 0)
      parts.push_back(fmt::format("{:+} {}", k, op));
  return fmt::format("{}", fmt::join(parts, ", "));
}

// Compares what a test computed with the table; on any difference, says which and prints the
// computed entries in the table's format.
void expectGolden(const std::vector<Computed> &got) {
  std::string table, diffs;
  for (const Computed &c : got) {
    table += fmt::format("    {{\"{}\", 0x{:016x}ull, 0x{:016x}ull,\n     \"{}\"}},\n", c.what,
                         c.hash, c.structure, c.ops);
    const Golden *want = nullptr;
    for (const Golden &g : kGolden)
      if (g.what == c.what)
        want = &g;
    if (!want)
      diffs += fmt::format("  {}: not in compile_golden.inc\n", c.what);
    else if (want->hash != c.hash) {
      const std::string ops = censusDiff(want->ops, c.ops);
      const char *what = want->structure == c.structure ? "only locations or the memory plan"
                         : ops.empty() ? "the same ops, in another order or with other types or "
                                         "attributes"
                                       : nullptr;
      diffs += fmt::format("  {}: 0x{:016x} instead of 0x{:016x}: {}\n", c.what, c.hash, want->hash,
                           what ? what : "ops " + ops);
    } else if (want->structure != c.structure || want->ops != c.ops)
      diffs += fmt::format("  {}: the same text, but its entry's other fields are out of date\n",
                           c.what);
  }
  EXPECT_TRUE(diffs.empty()) << "compiled results differ from the golden ones:\n"
                             << diffs << "the entries as computed now:\n"
                             << table;
}

// The optimized forward graph and the training step of one model variant, as `kiln dump
// --stage=optimized|train` makes them (train adds loss=true unless the variant sets it).
void stagesOf(std::string_view model, std::vector<models::Setting> settings,
              std::vector<Computed> &got) {
  std::string label = test_util::label(model, settings);
  Expected<Graph> fwd = models::buildModel(model, settings);
  ASSERT_TRUE(fwd) << label << ": " << fwd.error().message;
  Expected<Graph> optimized = optimizedForward(*fwd);
  ASSERT_TRUE(optimized) << label << ": " << optimized.error().message;
  got.push_back(computed(label + " optimized", std::span(&*optimized, 1)));
  bool hasLoss = false;
  for (const models::Setting &s : settings)
    hasLoss = hasLoss || s.key == "loss";
  if (!hasLoss)
    settings.push_back({"loss", "true"});
  Expected<Graph> withLossFwd = models::buildModel(model, settings);
  ASSERT_TRUE(withLossFwd) << label << ": " << withLossFwd.error().message;
  Expected<Graph> step = trainingStep(*withLossFwd, OptimizerConfig{});
  ASSERT_TRUE(step) << label << ": " << step.error().message;
  got.push_back(computed(label + " train", std::span(&*step, 1)));
}

// Every backend variant of `model`, and the model deeper at tiny widths (`depth`: its settings).
void expectModelGolden(std::string_view model, std::vector<models::Setting> depth) {
  std::vector<Computed> got;
  for (const std::vector<models::Setting> &v : test_util::backendVariants())
    stagesOf(model, v, got);
  depth.insert(depth.end(), {{"d_model", "16"}, {"n_heads", "2"}, {"d_ff", "16"}});
  stagesOf(model, depth, got);
  expectGolden(got);
}

TEST(CompileGolden, Gpt) {
  expectModelGolden("gpt", {{"n_layers", "24"}});
}

TEST(CompileGolden, Bert) {
  expectModelGolden("bert", {{"n_layers", "6"}, {"norm", "pre"}});
}

TEST(CompileGolden, Transformer) {
  expectModelGolden("transformer", {{"n_encoder_layers", "5"}, {"n_decoder_layers", "3"}});
}

// The random property graphs (tests/util/random_graph.h) with their loss, after fuse-elementwise
// and then plan-memory, in chunks of 20 seeds.
TEST(CompileGolden, RandomGraphs) {
  std::vector<Computed> got;
  for (uint64_t first = 1; first <= 300; first += 20) {
    std::vector<Graph> graphs;
    for (uint64_t seed = first; seed < first + 20; ++seed) {
      Graph g = test_util::withLoss(test_util::randomGraph(seed));
      PassStats stats;
      ASSERT_TRUE(runFuseElementwise(g, stats));
      ASSERT_TRUE(runPlanMemory(g, stats));
      graphs.push_back(std::move(g));
    }
    got.push_back(computed(fmt::format("random seeds {}-{}", first, first + 19), graphs));
  }
  expectGolden(got);
}

} // namespace
} // namespace kiln::passes::compile_golden_test

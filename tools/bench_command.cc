// `kiln bench` (see bench_command.h).
#include "tools/bench_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <fmt/format.h>
#include <sys/resource.h>

#include "ir/ops/fused.h"
#include "ir/ops/region.h"
#include "ir/printer.h"
#include "ir/summary.h"
#include "models/zoo.h"
#include "passes/pass_manager.h"
#include "passes/stages.h"
#include "runtime/executor.h"
#include "runtime/kernels/gemm.h"
#include "runtime/kernels/peak.h"
#include "runtime/kernels/target.h"
#include "runtime/thread_pool.h"
#include "runtime/training_session.h"
#include "runtime/weights.h"
#include "tools/cli_util.h"
#include "tools/ir_file.h"

namespace kiln::tools {

namespace {

int64_t product(const ir::Shape &s, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t n = 1;
  for (size_t d = from; d < std::min(to, s.size()); ++d)
    n *= s[d];
  return n;
}

int64_t matmulFlops(const ir::Graph &g, const ir::Node &n) {
  const ir::Shape &out = g.type(n.results[0]).shape;
  const ir::Shape &a = g.type(n.operands[0]).shape;
  int64_t k = n.attrs.getBool("transpose_a") ? a[a.size() - 2] : a.back();
  return 2 * product(out) * k;
}

// Attention: q k^T and p v are 2 (D + Dv) per (query, key) pair computed: Tq Tk per head, the
// pairs that causal masking and a sliding window leave (the kernels skip the rest; per tile, so
// this is the work a perfect kernel does). The flash backward recomputes q k^T and does four more
// products of that size.
int64_t attentionFlops(const ir::Graph &g, const ir::Node &n, bool backward) {
  const ir::AttentionDims a = ir::attentionDims(g, n);
  const int64_t tq = a.tq, tk = a.tk, w = n.attrs.getInt("window");
  const bool causal = n.attrs.getBool("causal");
  double perHead = 0; // allowed (i, j): j <= i if causal, |i - j| < w if w
  for (int64_t i = 0; i < tq; ++i) {
    const int64_t lo = w > 0 ? std::max<int64_t>(0, i - w + 1) : 0;
    int64_t hi = causal ? std::min(tk, i + 1) : tk;
    if (w > 0 && i < tk - w + 1)
      hi = std::min(hi, i + w);
    perHead += double(std::max<int64_t>(0, hi - lo));
  }
  const double pairs = double(a.b * a.hq) * perHead;
  const double d = double(a.d), dv = double(a.dv);
  return static_cast<int64_t>(2 * pairs * (backward ? 3 * d + 2 * dv : d + dv));
}

// The FLOPs of a node's products (matmuls, attention); elementwise work is not counted.
int64_t nodeFlops(const ir::Graph &g, const ir::Node &n) {
  if (n.op == ir::OpKind::Matmul)
    return matmulFlops(g, n);
  if (n.op == ir::OpKind::Attention || n.op == ir::OpKind::AttentionBackward)
    return attentionFlops(g, n, n.op == ir::OpKind::AttentionBackward);
  int64_t total = 0;
  if (n.op == ir::OpKind::Fusion)
    for (const ir::Node &b : ir::regionBody(n).nodes())
      total += nodeFlops(ir::regionBody(n), b);
  return total;
}

int64_t graphFlops(const ir::Graph &g) {
  int64_t total = 0;
  for (const ir::Node &n : g.nodes())
    total += nodeFlops(g, n);
  return total;
}

// What a step's node computes, for the list of slowest steps: "-> f32[..] from (f32[..],
// f32[..]^T)", its first result's type and its operands' (a matmul region's: the matmul's, ^T
// where the matmul reads it transposed).
std::string describeNode(const ir::Graph &g, const ir::Node &n) {
  const ir::Graph *body = &g;
  const ir::Node *core = &n;
  if (n.op == ir::OpKind::Fusion)
    for (const ir::Node &b : ir::regionBody(n).nodes())
      if (b.op == ir::OpKind::Matmul)
        body = &ir::regionBody(n), core = &b;
  std::string operands;
  for (size_t i = 0; i < core->operands.size(); ++i) {
    bool t = core->op == ir::OpKind::Matmul &&
             core->attrs.getBool(i == 0 ? "transpose_a" : "transpose_b");
    operands += fmt::format("{}{}{}", i ? ", " : "", ir::typeString(body->type(core->operands[i])),
                            t ? "^T" : "");
  }
  return fmt::format("-> {} from ({})", ir::typeString(g.type(n.results[0])), operands);
}

int64_t tokensPerStep(const ir::Graph &g) {
  for (const ir::Arg &a : g.args())
    if (a.kind == ir::Arg::Kind::Input && (a.name == "tokens" || a.name == "tgt"))
      return product(g.type(a.value).shape);
  return 0;
}

// This process's peak resident memory: VmHWM of /proc/self/status, which belongs to the program
// that exec made. getrusage's ru_maxrss survives exec, so a kiln started by a big parent (the
// PyTorch comparison script) would report the parent's peak; it is the fallback only.
double peakRssBytes() {
  if (std::FILE *f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    double kib = -1;
    while (kib < 0 && std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "VmHWM: %lf kB", &kib) != 1)
        kib = -1;
    std::fclose(f);
    if (kib >= 0)
      return kib * 1024;
  }
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) * 1024;
}

} // namespace

CLI::App *addBenchCommand(CLI::App &app, BenchArgs &a) {
  CLI::App *c = app.add_subcommand("bench", "Time a forward pass or a training step (--train) of "
                                            "a model on a backend, with a time table per op kind");
  c->add_option("model", a.model,
                "Model name, or an IR file (.kir, or --ir; with --train, one whose graph has a "
                "loss output)")
      ->required();
  c->add_flag("--ir", a.ir, "Treat MODEL as an IR file");
  addSettings(*c, a.sets);
  c->add_flag("--train", a.train, "Time a whole training step (AdamW) instead of a forward pass");
  addOverlap(*c, a.overlap);
  addDataParallel(*c, a.dp);
  CLI::Option *compile =
      c->add_flag("--compile", a.compile,
                  "Time the compiler instead: building the graph, the optimized and train stages "
                  "(--steps runs each, after --warmup) and printing them, per node and per pass");
  c->add_option("--steps", a.steps, "Timed runs")->check(integerIn(1, 1'000'000));
  c->add_option("--warmup", a.warmup, "Untimed runs first")->check(integerIn(0, 1'000'000));
  c->add_option("--top", a.top, "List the N slowest steps with their shapes and GFLOP/s (0: none)")
      ->check(integerIn(0, 1'000'000));
  addMaxMemory(*c, a.maxMemory);
  addBackend(*c, a.backend);
  addPrecision(*c, a.precision, false);
  // What times a run, refused with --compile (which times both stages and runs nothing; it
  // ignored them).
  for (const char *name : {"--train", "--top", "--max-memory", "--backend", "--threads",
                           "--target-cpu", "--overlap", "--shard-optimizer", "--bucket-mb"})
    compile->excludes(c->get_option(name));
  a.backend.name = "highway";
  return c;
}

namespace {

struct StageTimes {
  std::vector<double> seconds, printSeconds;
  std::vector<passes::PipelineReport> reports;
  int64_t nodesOut = 0;
};

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// `kiln bench --compile`: each stage from its raw graph (the forward's, and the training step's
// with its loss and kiln train's lengths), --warmup + --steps times.
void runCompileBench(const BenchArgs &a) {
  std::vector<models::Setting> settings = parseSettings(a.sets);
  std::vector<models::Setting> withLoss = settings;
  addDefaultSetting(withLoss, "loss", "true");
  if (!isIrFile(a.model, a.ir))
    addDefaultTargetLength(a.model, withLoss); // (as kiln train takes it)
  auto start = std::chrono::steady_clock::now();
  ir::Graph raw = modelGraph(a.model, a.ir, settings);
  double buildSeconds = secondsSince(start);
  ir::Graph rawTrain = isIrFile(a.model, a.ir) ? raw : modelGraph(a.model, a.ir, withLoss);
  requireLoss(rawTrain, a.model);
  const passes::Precision precision = productsOf(a.precision);
  auto nodes = [](const ir::Graph &g) { return static_cast<int64_t>(g.nodes().size()); };
  StageTimes stages[2];
  const char *names[2] = {"optimized", "train"};
  for (int s = 0; s < 2; ++s)
    for (int64_t k = 0; k < a.warmup + a.steps; ++k) {
      passes::PipelineReport report;
      ir::Graph in = s == 0 ? raw : rawTrain;
      start = std::chrono::steady_clock::now();
      ir::Graph out = s == 0 ? orThrow(passes::optimizedForward(std::move(in), &report, precision))
                             : orThrow(passes::trainingStep(std::move(in), {}, &report, precision));
      double seconds = secondsSince(start);
      start = std::chrono::steady_clock::now();
      std::string text = ir::print(out);
      double printSeconds = secondsSince(start);
      if (k < a.warmup)
        continue;
      stages[s].seconds.push_back(seconds);
      stages[s].printSeconds.push_back(printSeconds);
      stages[s].reports.push_back(std::move(report));
      stages[s].nodesOut = nodes(out);
    }
  fmt::print("compile time of @{} ({} nodes as built; medians of {} run{})\n", raw.name(),
             nodes(raw), a.steps, a.steps == 1 ? "" : "s");
  fmt::print("  {:<18} {:>10} {:>10} {:>12}\n", "step", "ms", "nodes out", "us per node");
  auto row = [&](std::string_view what, double seconds, int64_t in, int64_t out) {
    fmt::print("  {:<18} {:>10.2f} {:>10} {:>12.3f}\n", what, 1e3 * seconds, out,
               1e6 * seconds / double(std::max<int64_t>(in, 1)));
  };
  row("build (raw)", buildSeconds, nodes(raw), nodes(raw));
  for (int s = 0; s < 2; ++s) {
    row(fmt::format("raw -> {}", names[s]), median(stages[s].seconds), nodes(s ? rawTrain : raw),
        stages[s].nodesOut);
    row(fmt::format("print {}", names[s]), median(stages[s].printSeconds), stages[s].nodesOut,
        stages[s].nodesOut);
  }
  // Per pass: the run whose total was the median.
  for (int s = 0; s < 2; ++s) {
    std::vector<double> &t = stages[s].seconds;
    size_t mid = static_cast<size_t>(std::find(t.begin(), t.end(), median(t)) - t.begin());
    fmt::print("{}: raw -> {}\n{}", a.model, names[s],
               passes::formatTiming(stages[s].reports[mid]));
  }
}

} // namespace

void runBench(BenchArgs &a) {
  refuseSetsForIr(a.model, a.ir, a.sets);
  if (a.compile)
    return runCompileBench(a);
  std::vector<models::Setting> settings = parseSettings(a.sets);
  if (a.train)
    addLoss(settings, "kiln bench --train");
  ir::Graph forward = modelGraph(a.model, a.ir, settings);
  if (a.train)
    requireLoss(forward, a.model);
  const passes::Precision precision = productsOf(a.precision);
  // Under mpirun a training step is one rank's of a data-parallel run: its all_reduce time (in the
  // table of op kinds and its own line) is what the ranks spend communicating.
  const std::unique_ptr<runtime::Communicator> world =
      a.train ? openWorld() : runtime::aloneCommunicator();
  if (a.backend.threads == 0 && world->size() > 1)
    a.backend.threads = runtime::threadsPerRank(*world);
  orThrow(runtime::quietUnlessRankZero(*world));
  if (a.train)
    noteIfAlone(a.dp, world->size());
  const passes::DataParallel dp =
      dataParallel(world->size(), a.dp, world->localSize() == world->size());
  ir::Graph g =
      builtFrom(a.model, a.ir,
                a.train ? passes::trainingStep(std::move(forward), {}, nullptr, precision, dp)
                        : passes::optimizedForward(std::move(forward), nullptr, precision));
  std::string what =
      fmt::format("{} of @{}", a.train ? "a training step" : "a forward pass", g.name());
  auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<runtime::Executable> exe = compileChecked(g, a.backend, false, a.maxMemory, what);
  double compileSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Under mpirun the ranks must run one step as many times: a rank that differs would wait in a
  // reduction the others' programs lack, or pass them another count of floats.
  if (world->size() > 1) {
    const runtime::RankPart parts[] = {
        {"their program (the model, its settings, the precision or the buckets)",
         runtime::digest(ir::print(g))},
        {"their --warmup or --steps", runtime::digest(fmt::format("{} {}", a.warmup, a.steps))}};
    orThrow(runtime::checkRanksAgree(*world, parts));
  }
  exe->setCommunicator(world.get());
  auto *pooled = dynamic_cast<runtime::Executor *>(exe.get());
  const bool background = overlapOn(a.overlap, *world, pooled ? pooled->threads() : 1);
  world->setBackground(background);
  orThrow(runtime::initWeights(*exe, 1));
  orThrow(runtime::randomizeInputs(*exe, 2));
  for (int64_t k = 0; k < a.warmup; ++k)
    orThrow(exe->run());
  std::vector<double> times;
  for (int64_t k = 0; k < a.steps; ++k) {
    auto s = std::chrono::steady_clock::now();
    orThrow(exe->run());
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count());
  }
  std::sort(times.begin(), times.end());
  const double stepMedian = median(times);
  auto *executor = dynamic_cast<runtime::Executor *>(exe.get());
  const int threads = executor ? executor->threads() : 1;
  // The FMA peak of as many threads, measured now (a shared VM's can be half its data sheet's).
  runtime::ThreadPool probe(threads);
  const double flops = double(graphFlops(g)), peak = kernels::measurePeakFlops(probe);
  const int64_t tokens = tokensPerStep(g);
  // Where the bf16 products run: the reference backend's loops, or the kernels' engine.
  const bool bf16 = precision == passes::Precision::Bf16, reference = a.backend.name == "reference";
  const std::string_view engine = bf16 && !reference ? kernels::gemmBf16Engine() : "";
  fmt::print("{} on the {} backend ({}{} thread{}, SIMD target {}, {} products{}), compiled in "
             "{:.2f} s\n",
             what, a.backend.name,
             world->size() > 1 ? fmt::format("{} ranks x ", world->size()) : std::string(), threads,
             threads == 1 ? "" : "s", kernels::activeTarget(), a.precision,
             engine.empty() ? std::string() : fmt::format(" on {}", engine), compileSeconds);
  fmt::print("  step      median {:.2f} ms, min {:.2f} ms, max {:.2f} ms over {} runs\n",
             1e3 * stepMedian, 1e3 * times.front(), 1e3 * times.back(), times.size());
  // Under mpirun the job's tokens (as train --log counts them); the compute is a rank's.
  const int64_t ranks = world->size();
  if (tokens > 0)
    fmt::print("  tokens/s  {:.0f} ({} tokens per step{})\n", double(tokens * ranks) / stepMedian,
               tokens * ranks,
               ranks > 1 ? fmt::format(": {} ranks x {}", ranks, tokens) : std::string());
  fmt::print(
      "  compute   {:.2f} GFLOP per step{} (matmuls and attention) = {:.1f} GFLOP/s, {:.0f}% "
      "of this machine's FMA peak ({:.0f} GFLOP/s on {} thread{}, measured now)\n",
      flops / 1e9, ranks > 1 ? " and rank" : "", flops / stepMedian / 1e9,
      100 * flops / stepMedian / peak, peak / 1e9, threads, threads == 1 ? "" : "s");
  if (!engine.empty() && engine != "f32 FMAs") // vdpbf16ps or AMX: not the FMAs' peak
    fmt::print("            (the matmuls' bf16 products are bound by their own unit, not the f32 "
               "FMA peak)\n");
  fmt::print("  memory    {} held by the backend; peak RSS {}\n",
             ir::bytesString(exe->memoryBytes()),
             ir::bytesString(static_cast<int64_t>(peakRssBytes())));
  if (!executor)
    return;
  executor->setProfiling(true);
  for (int64_t k = 0; k < a.steps; ++k)
    orThrow(exe->run());
  const std::map<std::string, runtime::Executor::KindTime> kinds = executor->profile();
  std::vector<std::pair<std::string, runtime::Executor::KindTime>> rows(kinds.begin(), kinds.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto &x, const auto &y) { return x.second.seconds > y.second.seconds; });
  double total = 0;
  for (const auto &r : rows)
    total += r.second.seconds;
  if (world->size() > 1) {
    // What the step waits for: all_reduce's blocking calls, the starts' copies and the waits
    // (a reduction that finished beside the backward costs its wait nothing); sharded, the
    // reduce-scatter (its packing included) and the all-gather.
    double seconds = 0;
    for (const char *kind :
         {"all_reduce", "all_reduce_start", "all_reduce_wait", "reduce_scatter", "all_gather"})
      if (auto it = kinds.find(kind); it != kinds.end())
        seconds += it->second.seconds;
    int64_t floats = 0, messages = 0; // (a reduce-scatter's: what each rank sends in)
    for (const ir::Node &n : g.nodes())
      if (n.op == ir::OpKind::AllReduce || n.op == ir::OpKind::AllReduceStart ||
          n.op == ir::OpKind::AllGather)
        floats += g.type(n.results[0]).numElements(), ++messages;
      else if (n.op == ir::OpKind::ReduceScatter)
        floats += g.type(n.results[0]).numElements() * world->size(), ++messages;
    fmt::print("  communication  {:.3f} ms per step waiting on collectives ({:.1f}% of the "
               "profiled step; {} reduced or gathered per step in {} collectives ({}) over {} "
               "ranks, {}; waiting for the slowest rank included)\n",
               1e3 * seconds / double(a.steps), 100 * seconds / total, ir::bytesString(4 * floats),
               messages,
               dp.shardOptimizer
                   ? std::string("--shard-optimizer: a reduce-scatter and an all-gather")
                   : fmt::format("--bucket-mb {:g}; the buckets' copies are concat's and slice's",
                                 static_cast<double>(dp.bucketBytes) / (1 << 20)),
               world->size(),
               dp.shardOptimizer ? "blocking, after the backward"
               : background      ? "in the background beside the backward"
                                 : "one after the other at the first wait");
  }
  fmt::print("  time per op kind (per step, {} profiled runs):\n", a.steps);
  for (const auto &[kind, t] : rows)
    fmt::print("    {:>9.3f} ms  {:>5.1f}%  {:>5} calls  {}\n", 1e3 * t.seconds / double(a.steps),
               100 * t.seconds / total, t.calls / a.steps, kind);
  std::vector<runtime::Executor::StepTime> slow = executor->stepProfile();
  std::sort(slow.begin(), slow.end(),
            [](const auto &x, const auto &y) { return x.seconds > y.seconds; });
  slow.resize(std::min<size_t>(slow.size(), static_cast<size_t>(a.top)));
  if (!slow.empty())
    fmt::print("  the {} slowest steps (per step; GFLOP/s of their products):\n", slow.size());
  for (const runtime::Executor::StepTime &s : slow) {
    const double seconds = s.seconds / double(a.steps);
    const ir::Node &n = g.node(static_cast<ir::NodeId>(s.node));
    const double f = double(nodeFlops(g, n));
    fmt::print("    {:>9.3f} ms  {:>8}  {} {}\n", 1e3 * seconds,
               f > 0 ? fmt::format("{:.1f}", f / seconds / 1e9) : "", s.kind, describeNode(g, n));
  }
}

} // namespace kiln::tools

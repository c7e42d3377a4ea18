// The Highway backend (see backend.h): one step per node from the lowering table; the nodes whose
// results are all load-time constants run once, at create.
#include "codegen/common/executor_backend.h"

#include <algorithm>
#include <map>

#include "codegen/common/lowering.h"
#include "codegen/common/program.h"
#include "codegen/common/tile_program.h"

namespace kiln::codegen {
using namespace kiln::ir;

namespace {

// Each call whose rows function is a region that got machine code calls that code (ctx null).
void linkCompiledRegions(const std::vector<std::shared_ptr<TileProgram>> &programs,
                         runtime::ExecutorProgram &p) {
  std::map<std::string, kiln_rows_fn, std::less<>> native;
  for (const auto &prog : programs)
    if (prog->native)
      native[prog->name] = prog->native;
  for (runtime::Step &s : p.steps)
    for (runtime::KernelCall &call : s.calls)
      for (const runtime::KernelCall::Link &link : call.links)
        if (auto it = native.find(link.symbol); it != native.end()) {
          call.args[link.word] = reinterpret_cast<uintptr_t>(it->second);
          call.args[link.word + 1] = 0;
        }
}

} // namespace

Status checkKernelCalls(const runtime::ExecutorProgram &p) {
  for (size_t k = 0; k < p.steps.size(); ++k)
    if (p.steps[k].calls.empty() && p.steps[k].run)
      return makeError("step {} ({}) is no call of the kernel ABI (it runs by reference: no "
                       "kernel takes its operands yet, e.g. bf16 tensors, or integer arithmetic "
                       "beyond f32's exact integers)",
                       k, p.steps[k].kind);
  return {};
}

Expected<runtime::ExecutorProgram> lower(const Graph &g, const ExecutorOptions &options) {
  if (!g.memoryPlan())
    return makeError("highway backend: graph @{} has no memory plan", g.name());
  if (std::vector<Error> errors = verify(g); !errors.empty())
    return makeError("highway backend: graph @{} does not verify: {}", g.name(),
                     errors.front().message);
  Lowering l{std::make_shared<const Graph>(g)};
  l.plan = l.g->memoryPlan(); // the copy's own plan, which the steps' closures outlive
  std::vector<std::shared_ptr<TileProgram>> programs;
  if (options.compileRegions)
    l.programs = &programs;
  runtime::ExecutorProgram p;
  p.program = codegen::programOf(*l.g);
  for (NodeId n = 0; n < static_cast<NodeId>(g.nodes().size()); ++n) {
    bool atLoad = true;
    for (ValueId r : g.node(n).results)
      atLoad = atLoad && l.plan->slots[r].region == MemRegion::Constants;
    runtime::Step s = lowering(g.node(n).op)(l, n);
    s.node = n;
    (atLoad ? p.atLoad : p.steps).push_back(std::move(s));
  }
  for (const UpdateCopy &c : updateCopies(g, *l.plan)) {
    const MemorySlot &from = l.plan->slots[c.from];
    const MemorySlot &to = l.plan->slots[g.args()[c.arg].value];
    p.copies.push_back({from.region, to.region, from.offset, to.offset, to.bytes});
  }
  if (options.compileRegions) {
    if (Status st = options.compileRegions(programs); !st.ok())
      return st.error();
    linkCompiledRegions(programs, p);
  }
  return p;
}

Expected<std::unique_ptr<runtime::Executor>> compileExecutor(const Graph &g,
                                                             ExecutorOptions options) {
  Expected<runtime::ExecutorProgram> p = lower(g, options);
  if (!p)
    return p.error();
  const int threads = options.threads > 0 ? options.threads : runtime::ThreadPool::defaultThreads();
  Expected<std::unique_ptr<runtime::Executor>> exe =
      runtime::Executor::create(std::move(*p), options.backend, threads);
  if (!exe)
    return exe.error();
  return std::move(*exe);
}

int64_t executorBytes(const Graph &g) {
  const MemoryPlan &plan = *g.memoryPlan();
  int64_t total = 0, largest = 0;
  for (MemRegion r : kAllMemRegions)
    total = addSat(total, plan.bytes(r));
  for (const Node &n : g.nodes())
    for (ValueId v : n.results)
      largest = std::max(largest, g.type(v).bytes());
  return addSat(total, largest);
}

} // namespace kiln::codegen

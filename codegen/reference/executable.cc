// The reference backend inside the memory plan (see executable.h).
#include "codegen/reference/executable.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "codegen/common/program.h"
#include "ir/evaluate.h"
#include "support/element.h"

namespace kiln::reference {
using namespace kiln::ir;

namespace {

// Poison: all-ones bytes read as NaN in f32, f64 and bf16; integers and bools get 0xA5 bytes, a
// large index that no gather accepts and no count matches.
constexpr uint8_t kFloatPoison = 0xff, kIntPoison = 0xa5;

} // namespace

ReferenceExecutable::ReferenceExecutable(Graph g, Options o)
    : g_(std::move(g)), options_(o), scale_(o.f64 ? 8 : 1), program_(codegen::programOf(g_)) {
  const MemoryPlan &plan = *g_.memoryPlan();
  for (MemRegion r : kAllMemRegions)
    regions_.emplace_back(mulSat(plan.bytes(r), scale_));
  // Nodes whose results are load-time constants run once, at create.
  atLoad_.assign(g_.nodes().size(), false);
  for (NodeId n = 0; n < static_cast<NodeId>(g_.nodes().size()); ++n) {
    bool all = true;
    for (ValueId r : g_.node(n).results)
      all = all && plan.slots[r].region == MemRegion::Constants;
    atLoad_[n] = all;
  }
  // Arena buffers (a value and those that share its bytes) die after their last reader.
  std::vector<int32_t> last = lastUses(g_);
  std::vector<ValueId> root(g_.numValues(), kNone);
  std::vector<int32_t> end(g_.numValues(), kNone);
  for (const Node &node : g_.nodes())
    for (ValueId r : node.results) {
      const MemorySlot &s = plan.slots[r];
      if (s.region != MemRegion::Arena)
        continue;
      root[r] = s.share == MemorySlot::Share::None ? r : root[s.of];
      end[root[r]] = std::max(end[root[r]], last[r]);
    }
  int32_t count = static_cast<int32_t>(g_.nodes().size());
  dying_.resize(g_.nodes().size());
  for (ValueId v = 0; v < g_.numValues(); ++v)
    if (root[v] == v) {
      arenaRoots_.push_back(v);
      if (end[v] >= 0 && end[v] < count)
        dying_[end[v]].push_back(v);
    }
  copies_ = updateCopies(g_, plan);
}

Expected<std::unique_ptr<ReferenceExecutable>> ReferenceExecutable::create(const Graph &g,
                                                                           Options options) {
  if (!g.memoryPlan())
    return makeError("reference backend: graph @{} has no memory plan", g.name());
  if (std::vector<Error> errors = options.verify ? verify(g) : std::vector<Error>{};
      !errors.empty())
    return makeError("reference backend: graph @{} does not verify: {}", g.name(),
                     errors.front().message);
  std::unique_ptr<ReferenceExecutable> exe(new ReferenceExecutable(g, options));
  for (NodeId n = 0; n < static_cast<NodeId>(g.nodes().size()); ++n)
    if (exe->atLoad_[n]) {
      Status s = options.f64 ? exe->runNode<double>(n) : exe->runNode<float>(n);
      if (!s)
        return s.error();
    }
  return exe;
}

int64_t ReferenceExecutable::estimateBytes(const Graph &g, Options options) {
  const MemoryPlan &plan = *g.memoryPlan();
  int64_t scale = options.f64 ? 8 : 1, held = 0, node = 0;
  for (MemRegion r : kAllMemRegions)
    held = addSat(held, mulSat(plan.bytes(r), scale));
  // One node at a time holds its operands and results as working copies, in F or int64.
  int64_t f = options.f64 ? 8 : 4;
  for (const Node &n : g.nodes()) {
    int64_t bytes = 0;
    for (const std::vector<ValueId> *vs : {&n.operands, &n.results})
      for (ValueId v : *vs)
        bytes = addSat(bytes, mulSat(g.type(v).numElements(), isFloat(g.type(v).dtype) ? f : 8));
    node = std::max(node, bytes);
  }
  return addSat(held, node);
}

int64_t ReferenceExecutable::memoryBytes() const {
  int64_t total = 0;
  for (const runtime::AlignedBytes &r : regions_)
    total = addSat(total, r.size);
  return total;
}

uint8_t *ReferenceExecutable::at(ValueId v, int64_t k) const {
  const MemorySlot &s = g_.memoryPlan()->slots[v];
  int64_t byte = s.offset + k * dtypeBytes(g_.type(v).dtype);
  return regions_[static_cast<int>(s.region)].data() + byte * scale_;
}

// In f64 mode every element is 8 bytes at the scaled place: a double, or an int64; in f32 mode
// it is stored in its own dtype.
DType ReferenceExecutable::storedAs(ValueId v) const {
  DType t = g_.type(v).dtype;
  return scale_ == 1 ? t : isFloat(t) ? DType::F64 : DType::I64;
}
double ReferenceExecutable::get(ValueId v, int64_t k) const {
  return element::get(storedAs(v), at(v, k));
}
void ReferenceExecutable::set(ValueId v, int64_t k, double x) {
  element::set(storedAs(v), at(v, k), x);
}
int64_t ReferenceExecutable::getInt(ValueId v, int64_t k) const {
  return element::getInt(storedAs(v), at(v, k));
}
void ReferenceExecutable::setInt(ValueId v, int64_t k, int64_t x) {
  element::setInt(storedAs(v), at(v, k), x);
}

void ReferenceExecutable::poisonValue(ValueId v) {
  const MemorySlot &s = g_.memoryPlan()->slots[v];
  std::memset(regions_[static_cast<int>(s.region)].data() + s.offset * scale_,
              isFloat(g_.type(v).dtype) ? kFloatPoison : kIntPoison,
              static_cast<size_t>(s.bytes * scale_));
}

template <class F> Status ReferenceExecutable::runNode(NodeId id) {
  const Node &n = g_.node(id);
  // Every operand is read before any result is written: a result in place over an operand is
  // safe only because the op reads element for element, which the plan's verifier checks.
  std::vector<RefTensor<F>> in;
  in.reserve(n.operands.size());
  for (ValueId v : n.operands) {
    RefTensor<F> &t = in.emplace_back(g_.type(v));
    for (int64_t k = 0; k < t.size(); ++k) {
      if (t.isFloatStorage())
        t.f[k] = static_cast<F>(get(v, k));
      else
        t.i[k] = getInt(v, k);
    }
  }
  std::vector<const RefTensor<F> *> ptrs;
  for (const RefTensor<F> &t : in)
    ptrs.push_back(&t);
  Expected<std::vector<RefTensor<F>>> results = evaluateNode<F>(g_, id, ptrs);
  if (!results)
    return results.error();
  std::vector<RefTensor<F>> &out = *results;
  for (size_t j = 0; j < out.size(); ++j) {
    ValueId r = n.results[j];
    for (int64_t k = 0; k < out[j].size(); ++k) {
      if (out[j].isFloatStorage())
        set(r, k, static_cast<double>(out[j].f[k]));
      else
        setInt(r, k, out[j].i[k]);
    }
  }
  return {};
}

template <class F> Status ReferenceExecutable::runAll() {
  const MemoryPlan &plan = *g_.memoryPlan();
  if (options_.poison) {
    // Nothing a run reads may come from an earlier run: the arena, and every node result that
    // is an output, start poisoned.
    for (ValueId v : arenaRoots_)
      poisonValue(v);
    for (const Node &node : g_.nodes())
      for (ValueId r : node.results)
        if (plan.slots[r].region == MemRegion::IO)
          poisonValue(r);
  }
  for (NodeId n = 0; n < static_cast<NodeId>(g_.nodes().size()); ++n) {
    if (atLoad_[n])
      continue;
    if (Status s = runNode<F>(n); !s)
      return s;
    if (options_.poison)
      for (ValueId v : dying_[n])
        poisonValue(v);
  }
  // Updates that could not be written in place are copied over their arguments last.
  for (const UpdateCopy &c : copies_) {
    ValueId to = g_.args()[c.arg].value;
    for (int64_t k = 0; k < g_.type(to).numElements(); ++k) {
      if (isFloat(g_.type(to).dtype))
        set(to, k, get(c.from, k));
      else
        setInt(to, k, getInt(c.from, k));
    }
  }
  return {};
}

Status ReferenceExecutable::run() {
  return options_.f64 ? runAll<double>() : runAll<float>();
}

void ReferenceExecutable::store(const runtime::Symbol &s, const runtime::HostTensor &t) {
  ValueId v = g_.args()[program_.indexOf(s)].value;
  for (int64_t k = 0; k < t.numElements(); ++k) {
    if (isFloat(t.dtype()))
      set(v, k, t.get(k));
    else
      setInt(v, k, t.getInt(k));
  }
}

runtime::HostTensor ReferenceExecutable::load(const runtime::Symbol &s) const {
  int32_t i = program_.indexOf(s);
  int32_t args = static_cast<int32_t>(g_.args().size());
  ValueId v = i < args ? g_.args()[i].value : g_.outputs()[i - args].value;
  runtime::HostTensor t(s.dtype, s.shape);
  for (int64_t k = 0; k < t.numElements(); ++k) {
    if (isFloat(t.dtype()))
      t.set(k, get(v, k));
    else
      t.setInt(k, getInt(v, k));
  }
  return t;
}

} // namespace kiln::reference

// The memory plan's syntax in IR text (see ir/printer.h): the header's region sizes
// mem(constants=C, weights=W, io=I, arena=A, scratch=S), one mem(REGION, offset=O, bytes=B[,
// inplace=%v | , view=%v]) per argument and node result, and a node's scratch(N). Whether a plan
// is sound is ir::verifyMemoryPlan's question; here it is only read.
#include "ir/parser_impl.h"

namespace kiln::ir::parse_detail {

// mem(constants=C, weights=W, io=I, arena=A, scratch=S), in that order.
bool Parser::parseRegionSizes() {
  bump(); // 'mem'
  if (!expect(Tok::LParen, "'(' after 'mem'"))
    return false;
  std::array<int64_t, kNumMemRegions> sizes{};
  for (MemRegion r : kAllMemRegions) {
    if (r != MemRegion::Constants && !expect(Tok::Comma, "',' between region sizes"))
      return false;
    if (!parseByteCount(memRegionName(r), sizes[static_cast<int>(r)]))
      return false;
  }
  regionBytes_ = sizes;
  return expect(Tok::RParen, "')' to close 'mem'");
}

// mem(REGION, offset=O, bytes=B[, inplace=%v | , view=%v]). The numbers are checked against the
// graph by ir::verifyMemoryPlan, which says at this value what is wrong with them.
bool Parser::parseMem(MemSpec &m) {
  m.pos = tok_.pos;
  bump(); // 'mem'
  if (!expect(Tok::LParen, "'(' after 'mem'"))
    return false;
  bool known = false;
  for (MemRegion r : kAllMemRegions)
    if (isWord(memRegionName(r))) {
      m.slot.region = r;
      known = true;
    }
  if (!known)
    return syntaxError("a region (constants, weights, io, arena or scratch) in mem(...)");
  bump();
  if (!expect(Tok::Comma, "',' and offset=O after the region") ||
      !parseByteCount("offset", m.slot.offset) ||
      !expect(Tok::Comma, "',' and bytes=B after the offset") ||
      !parseByteCount("bytes", m.slot.bytes))
    return false;
  if (tok_.kind == Tok::Comma) {
    bump();
    if (!isWord("inplace") && !isWord("view"))
      return syntaxError("'inplace=%v' or 'view=%v' in mem(...)");
    m.slot.share = isWord("inplace") ? MemorySlot::Share::InPlace : MemorySlot::Share::View;
    bump();
    if (!expect(Tok::Equal, "'=' and the operand whose bytes the result takes"))
      return false;
    if (tok_.kind != Tok::Value)
      return syntaxError("the operand (%name) whose bytes the result takes");
    m.slot.of = resolve(tok_);
    bump();
  }
  return expect(Tok::RParen, "')' to close 'mem'");
}

// KEY=N, an integer number of bytes.
bool Parser::parseByteCount(std::string_view key, int64_t &out) {
  if (!isWord(key))
    return syntaxError(fmt::format("'{}='", key));
  bump();
  if (!expect(Tok::Equal, fmt::format("'=' after '{}'", key)))
    return false;
  if (tok_.kind != Tok::Int)
    return syntaxError(fmt::format("a number of bytes after '{}='", key));
  out = tok_.i;
  bump();
  return true;
}

// Puts the mem(...) annotations together into the graph's plan: with the header's region sizes,
// every argument and node result needs one. Whether the plan is sound is the verifier's question
// (addVerifierFindings), answered at each node's line:col.
void Parser::finishMemoryPlan() {
  if (!regionBytes_ && mems_.empty() && scratch_.empty())
    return;
  if (!regionBytes_) {
    report(!mems_.empty() ? mems_[0].spec.pos : scratch_[0].spec.pos,
           "mem(...) and scratch(...) need the region sizes in the header: "
           "mem(constants=C, weights=W, io=I, arena=A, scratch=S) after the graph name");
    return;
  }
  MemoryPlan plan;
  plan.regionBytes = *regionBytes_;
  plan.slots.assign(g_.numValues(), MemorySlot{});
  plan.scratch.assign(g_.nodes().size(), 0);
  std::vector<bool> planned(g_.numValues(), false);
  for (const PendingMem &p : mems_) {
    planned[p.value] = true;
    plan.slots[p.value] = p.spec.slot;
  }
  for (const PendingScratch &p : scratch_)
    plan.scratch[p.node] = p.spec.slot.bytes;
  bool complete = true;
  const std::string need = "the graph has a memory plan (mem(...) in its header), so every "
                           "argument and node result needs mem(...)";
  for (size_t a = 0; a < g_.args().size(); ++a)
    if (!planned[g_.args()[a].value]) {
      report(a < argPos_.size() ? argPos_[a] : headerPos_, need);
      complete = false;
    }
  for (NodeId n = 0; n < static_cast<NodeId>(g_.nodes().size()); ++n)
    for (ValueId r : g_.node(n).results)
      if (!planned[r]) {
        report(g_.node(n).pos, need);
        complete = false;
        break;
      }
  if (complete)
    g_.setMemoryPlan(std::move(plan));
}

} // namespace kiln::ir::parse_detail

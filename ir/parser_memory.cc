// The memory plan's syntax in IR text: mem(arena_bytes=N) in the graph header and one
// mem(offset=O, bytes=B[, inplace=%v | , view=%v]) per node result (see ir/printer.h). Whether a
// plan is sound is ir::verifyMemoryPlan's question; here it is only read.
#include "ir/parser_impl.h"

namespace kiln::ir::parse_detail {

// mem(offset=O, bytes=B[, inplace=%v | , view=%v]). The numbers are checked against the graph by
// ir::verifyMemoryPlan, which says at this node what is wrong with them.
bool Parser::parseMem(MemSpec &m) {
  m.pos = tok_.pos;
  bump(); // 'mem'
  if (!expect(Tok::LParen, "'(' after 'mem'") || !parseByteCount("offset", m.slot.offset) ||
      !expect(Tok::Comma, "',' and bytes=B after the offset") ||
      !parseByteCount("bytes", m.slot.bytes))
    return false;
  if (tok_.kind == Tok::Comma) {
    bump();
    if (!isWord("inplace") && !isWord("view"))
      return syntaxError("'inplace=%v' or 'view=%v' in mem(...)");
    m.slot.share = isWord("inplace") ? MemorySlot::Share::InPlace : MemorySlot::Share::View;
    bump();
    if (!expect(Tok::Equal, "'=' and the operand whose buffer the result takes"))
      return false;
    if (tok_.kind != Tok::Value)
      return syntaxError("the operand (%name) whose buffer the result takes");
    m.slot.of = resolve(tok_);
    bump();
  }
  return expect(Tok::RParen, "')' to close 'mem'");
}

// KEY=N, an integer number of bytes.
bool Parser::parseByteCount(std::string_view key, int64_t &out) {
  if (!isWord(key))
    return syntaxError(fmt::format("'{}=' in mem(...)", key));
  bump();
  if (!expect(Tok::Equal, fmt::format("'=' after '{}'", key)))
    return false;
  if (tok_.kind != Tok::Int)
    return syntaxError(fmt::format("a number of bytes after '{}='", key));
  out = tok_.i;
  bump();
  return true;
}

// Puts the mem(...) annotations together into the graph's plan. Whether the plan is sound is the
// verifier's question (addVerifierFindings), answered at each node's line:col.
void Parser::finishMemoryPlan() {
  if (!arenaBytes_ && mems_.empty())
    return;
  if (!arenaBytes_) {
    report(mems_[0].specs[0].pos,
           "mem(...) on a node needs mem(arena_bytes=N) after the graph name in the header");
    return;
  }
  MemoryPlan plan;
  plan.arenaBytes = *arenaBytes_;
  plan.slots.assign(g_.numValues(), MemorySlot{});
  std::vector<bool> planned(g_.nodes().size(), false);
  for (const PendingMem &p : mems_) {
    planned[p.node] = true;
    for (size_t i = 0; i < p.specs.size(); ++i)
      plan.slots[g_.node(p.node).results[i]] = p.specs[i].slot;
  }
  bool complete = true;
  for (NodeId n = 0; n < static_cast<NodeId>(planned.size()); ++n)
    if (!planned[n]) {
      report(g_.node(n).pos, "the graph has a memory plan (mem(arena_bytes=...) in its header), so "
                             "every node needs mem(...)");
      complete = false;
    }
  if (complete)
    g_.setMemoryPlan(std::move(plan));
}

} // namespace kiln::ir::parse_detail

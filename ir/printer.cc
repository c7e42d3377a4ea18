// The IR printer: renumbers values canonically and writes one statement per line. Everything
// it writes uses the lexical conventions of ir/lexer.h, so ir/parser.cc reads it back.
#include "ir/printer.h"

#include <fmt/format.h>

#include "ir/lexer.h"

namespace kiln::ir {
namespace {

class Printer {
public:
  // `indent` prefixes every line but the first: a region's body prints inside its node's line.
  Printer(const Graph &g, std::string indent)
      : g_(g), indent_(std::move(indent)), number_(g.numValues(), -1) {
    // Arguments first, then results in node order: the numbering depends only on the program,
    // not on the order in which a builder happened to create values.
    int32_t next = 0;
    for (const Arg &a : g.args())
      if (valid(a.value))
        number_[a.value] = next++;
    for (const Node &n : g.nodes())
      for (ValueId r : n.results)
        if (valid(r))
          number_[r] = next++;
  }

  std::string run() {
    out_ += fmt::format("graph @{}", isBareName(g_.name()) ? g_.name() : quoteString(g_.name()));
    if (const MemoryPlan *plan = g_.memoryPlan()) {
      out_ += " mem(";
      for (MemRegion r : kAllMemRegions)
        out_ += fmt::format("{}{}={}", r == MemRegion::Constants ? "" : ", ", memRegionName(r),
                            plan->bytes(r));
      out_ += ")";
    }
    out_ += " {\n";
    for (const Arg &a : g_.args())
      printArg(a);
    for (const Node &n : g_.nodes())
      printNode(n);
    for (const Output &o : g_.outputs())
      printOutput(o);
    out_ += indent_ + "}";
    return std::move(out_);
  }

private:
  bool valid(ValueId v) const { return v >= 0 && v < g_.numValues(); }

  std::string ref(ValueId v) const {
    if (valid(v) && number_[v] >= 0)
      return fmt::format("%{}", number_[v]);
    // Not a value of this graph: still readable, and the parser rejects it as undefined.
    return v >= 0 ? fmt::format("%invalid.{}", v) : fmt::format("%invalid.n{}", -int64_t{v});
  }

  std::string typeOf(ValueId v) const { return valid(v) ? typeString(g_.type(v)) : "?"; }

  // output "name" = %v [loss | gradient("arg") | update("arg")]
  void printOutput(const Output &o) {
    out_ += fmt::format("{}  output {} = {}", indent_, quoteString(o.name), ref(o.value));
    if (o.role == OutputRole::Loss)
      out_ += " loss";
    if (o.role == OutputRole::Gradient || o.role == OutputRole::Update) {
      bool ok = o.arg >= 0 && o.arg < static_cast<int32_t>(g_.args().size());
      out_ += fmt::format(" {}({})", outputRoleName(o.role),
                          ok ? quoteString(g_.args()[o.arg].name) : fmt::format("#{}", o.arg));
    }
    out_ += "\n";
  }

  void printArg(const Arg &a) {
    out_ += fmt::format("{}  {} = ", indent_, ref(a.value));
    if (a.kind == Arg::Kind::Input) {
      out_ += fmt::format("input {}", quoteString(a.name));
      if (a.range != 0)
        out_ += fmt::format(" range({})", a.range);
    } else {
      out_ += fmt::format("{} {} init {}", a.kind == Arg::Kind::Param ? "param" : "state",
                          quoteString(a.name), paramInitString(a.init));
      if (a.domain != Domain::Real)
        out_ += fmt::format(" domain({})", domainName(a.domain));
    }
    out_ += fmt::format(" : {}", typeOf(a.value));
    printSlotOf(a.value);
    out_ += "\n";
  }

  void printNode(const Node &n) {
    out_ += indent_ + "  ";
    for (size_t i = 0; i < n.results.size(); ++i)
      out_ += (i ? ", " : "") + ref(n.results[i]);
    out_ += fmt::format(" = {}(", mnemonic(n.op));
    for (size_t i = 0; i < n.operands.size(); ++i)
      out_ += (i ? ", " : "") + ref(n.operands[i]);
    out_ += ")";
    printAttrs(n.attrs);
    out_ += " : ";
    for (size_t i = 0; i < n.results.size(); ++i)
      out_ += (i ? ", " : "") + typeOf(n.results[i]);
    if (n.gradOf != kNone) {
      bool ok = n.gradOf >= 0 && n.gradOf < static_cast<NodeId>(g_.nodes().size()) &&
                !g_.node(n.gradOf).results.empty();
      out_ += fmt::format(" grad_of({})", ok ? ref(g_.node(n.gradOf).results[0]) : ref(kNone));
    }
    if (!n.loc.empty())
      out_ += fmt::format(" loc({}:{})", quoteString(n.loc.file), n.loc.line);
    for (ValueId r : n.results)
      printSlotOf(r);
    const MemoryPlan *plan = g_.memoryPlan();
    size_t id = static_cast<size_t>(&n - g_.nodes().data());
    if (plan && id < plan->scratch.size() && plan->scratch[id] != 0)
      out_ += fmt::format(" scratch({})", plan->scratch[id]);
    out_ += "\n";
  }

  // mem(arena, offset=1024, bytes=512[, inplace=%3 | , view=%3]), when there is a plan.
  void printSlotOf(ValueId v) {
    const MemoryPlan *plan = g_.memoryPlan();
    if (!plan || !valid(v) || static_cast<size_t>(v) >= plan->slots.size())
      return;
    const MemorySlot &s = plan->slots[v];
    out_ += fmt::format(" mem({}, offset={}, bytes={}", memRegionName(s.region), s.offset, s.bytes);
    if (s.share != MemorySlot::Share::None)
      out_ += fmt::format(", {}={}", s.share == MemorySlot::Share::InPlace ? "inplace" : "view",
                          ref(s.of));
    out_ += ")";
  }

  void printAttrs(const Attrs &attrs) {
    std::span<const AttrSpec> spec = attrs.spec();
    bool any = false;
    for (size_t i = 0; i < spec.size() && i < attrs.values().size(); ++i) {
      if (!spec[i].required && attrs.isDefault(static_cast<int>(i)))
        continue;
      const AttrValue &v = attrs.values()[i];
      const Region *body = std::get_if<Region>(&v);
      out_ += fmt::format("{}{} = {}", any ? ", " : " {", spec[i].name,
                          body && body->graph ? Printer(*body->graph, indent_ + "  ").run()
                                              : attrValueString(v));
      any = true;
    }
    if (any)
      out_ += "}";
  }

  const Graph &g_;
  std::string indent_;
  std::vector<int32_t> number_; // canonical number of each ValueId, -1 if none
  std::string out_;
};

} // namespace

std::string print(const Graph &g) {
  return Printer(g, "").run() + "\n";
}

} // namespace kiln::ir

// The IR printer: renumbers values canonically and writes one statement per line. Everything
// it writes uses the lexical conventions of ir/lexer.h, so ir/parser.cc reads it back.
#include "ir/printer.h"

#include <iterator>
#include <utility>

#include <fmt/format.h>

#include "ir/lexer.h"

namespace kiln::ir {
namespace {

class Printer {
public:
  // `indent` prefixes every line but the first: a region's body prints inside its node's line.
  Printer(const Graph &g, std::string indent, const PrintOptions &options)
      : g_(g), indent_(std::move(indent)), options_(options), number_(g.numValues(), -1) {
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
    put("graph @{}", isBareName(g_.name()) ? g_.name() : quoteString(g_.name()));
    if (const MemoryPlan *plan = options_.memory ? g_.memoryPlan() : nullptr) {
      out_ += " mem(";
      for (MemRegion r : kAllMemRegions)
        put("{}{}={}", r == MemRegion::Constants ? "" : ", ", memRegionName(r), plan->bytes(r));
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

  // Everything is formatted straight into out_ (fmt::format_to), not through temporary strings:
  // printing is a large share of `kiln dump`.
  template <typename... T> void put(fmt::format_string<T...> f, T &&...args) {
    fmt::format_to(std::back_inserter(out_), f, std::forward<T>(args)...);
  }

  void putInt(int64_t x) { out_ += fmt::format_int(x).str(); }

  void putRef(ValueId v) {
    if (valid(v) && number_[v] >= 0) {
      out_ += '%';
      putInt(number_[v]);
    }
    // Not a value of this graph: still readable, and the parser rejects it as undefined.
    else if (v >= 0)
      put("%invalid.{}", v);
    else
      put("%invalid.n{}", -int64_t{v});
  }

  // typeString(g_.type(v)), or "?".
  void putType(ValueId v) {
    if (!valid(v)) {
      out_ += "?";
      return;
    }
    const Type &t = g_.type(v);
    out_ += dtypeName(t.dtype);
    out_ += '[';
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (d)
        out_ += ',';
      putInt(t.shape[d]);
    }
    out_ += ']';
  }

  // output "name" = %v [loss | gradient("arg") | update("arg")]
  void printOutput(const Output &o) {
    put("{}  output {} = ", indent_, quoteString(o.name));
    putRef(o.value);
    if (o.role == OutputRole::Loss)
      out_ += " loss";
    if (o.role == OutputRole::Gradient || o.role == OutputRole::Update) {
      bool ok = o.arg >= 0 && o.arg < static_cast<int32_t>(g_.args().size());
      put(" {}({})", outputRoleName(o.role),
          ok ? quoteString(g_.args()[o.arg].name) : fmt::format("#{}", o.arg));
    }
    out_ += "\n";
  }

  void printArg(const Arg &a) {
    put("{}  ", indent_);
    putRef(a.value);
    out_ += " = ";
    if (a.kind == Arg::Kind::Input) {
      put("input {}", quoteString(a.name));
      if (a.range != 0)
        put(" range({})", a.range);
    } else {
      put("{} {} init {}", a.kind == Arg::Kind::Param ? "param" : "state", quoteString(a.name),
          paramInitString(a.init));
      if (a.domain != Domain::Real)
        put(" domain({})", domainName(a.domain));
    }
    out_ += " : ";
    putType(a.value);
    printSlotOf(a.value);
    out_ += "\n";
  }

  void printNode(const Node &n) {
    out_ += indent_;
    out_ += "  ";
    for (size_t i = 0; i < n.results.size(); ++i) {
      out_ += i ? ", " : "";
      putRef(n.results[i]);
    }
    put(" = {}(", mnemonic(n.op));
    for (size_t i = 0; i < n.operands.size(); ++i) {
      out_ += i ? ", " : "";
      putRef(n.operands[i]);
    }
    out_ += ")";
    printAttrs(n.attrs);
    out_ += " : ";
    for (size_t i = 0; i < n.results.size(); ++i) {
      out_ += i ? ", " : "";
      putType(n.results[i]);
    }
    if (n.gradOf != kNone) {
      bool ok = n.gradOf >= 0 && n.gradOf < static_cast<NodeId>(g_.nodes().size()) &&
                !g_.node(n.gradOf).results.empty();
      out_ += " grad_of(";
      putRef(ok ? g_.node(n.gradOf).results[0] : kNone);
      out_ += ")";
    }
    if (!n.loc.empty() && options_.locations) {
      // Consecutive nodes mostly come from one file and module: quote each once for the run.
      if (n.loc.file != locFile_) {
        locFile_ = n.loc.file;
        locQuoted_ = quoteString(n.loc.file);
      }
      if (n.loc.scope != locScope_) {
        locScope_ = n.loc.scope;
        scopeQuoted_ = quoteString(n.loc.scope);
      }
      out_ += " loc(";
      if (!n.loc.scope.empty()) // MLIR's named location: loc("name"("file":line))
        out_ += scopeQuoted_ + "(";
      out_ += locQuoted_;
      out_ += ':';
      putInt(n.loc.line);
      out_ += n.loc.scope.empty() ? ")" : "))";
    }
    for (ValueId r : n.results)
      printSlotOf(r);
    const MemoryPlan *plan = options_.memory ? g_.memoryPlan() : nullptr;
    size_t id = static_cast<size_t>(&n - g_.nodes().data());
    if (plan && id < plan->scratch.size() && plan->scratch[id] != 0)
      put(" scratch({})", plan->scratch[id]);
    out_ += "\n";
  }

  // mem(arena, offset=1024, bytes=512[, inplace=%3 | , view=%3]), when there is a plan.
  void printSlotOf(ValueId v) {
    const MemoryPlan *plan = options_.memory ? g_.memoryPlan() : nullptr;
    if (!plan || !valid(v) || static_cast<size_t>(v) >= plan->slots.size())
      return;
    const MemorySlot &s = plan->slots[v];
    out_ += " mem(";
    out_ += memRegionName(s.region);
    out_ += ", offset=";
    putInt(s.offset);
    out_ += ", bytes=";
    putInt(s.bytes);
    if (s.share != MemorySlot::Share::None) {
      put(", {}=", s.share == MemorySlot::Share::InPlace ? "inplace" : "view");
      putRef(s.of);
    }
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
      put("{}{} = ", any ? ", " : " {", spec[i].name);
      out_ += body && body->graph ? Printer(*body->graph, indent_ + "  ", options_).run()
                                  : attrValueString(v);
      any = true;
    }
    if (any)
      out_ += "}";
  }

  const Graph &g_;
  std::string indent_;
  PrintOptions options_;
  std::vector<int32_t> number_; // canonical number of each ValueId, -1 if none
  std::string out_;
  std::string locFile_, locQuoted_;    // the last node's file, and quoted
  std::string locScope_, scopeQuoted_; // the last node's module, and quoted
};

} // namespace

std::string print(const Graph &g, const PrintOptions &options) {
  return Printer(g, "", options).run() + "\n";
}

} // namespace kiln::ir

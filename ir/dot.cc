// Graphviz writer: one DOT statement per line, ids a<arg>, n<node>, o<output>, all in graph order
// so that the same graph always gives the same file (diffable, testable).
#include "ir/dot.h"

#include <fmt/format.h>

namespace kiln::ir {
namespace {

// A DOT double-quoted string; "\n" in `s` becomes a DOT line break.
std::string dotQuote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (c == '\n')
      out += "\\n";
    else if (c != '\r')
      out += c;
  }
  return out + "\"";
}

class DotWriter {
public:
  explicit DotWriter(const Graph &g) : g_(g), source_(g.numValues()) {
    for (size_t i = 0; i < g.args().size(); ++i)
      if (valid(g.args()[i].value))
        source_[g.args()[i].value] = {fmt::format("a{}", i), 0};
    for (size_t i = 0; i < g.nodes().size(); ++i) {
      const Node &n = g.nodes()[i];
      for (size_t k = 0; k < n.results.size(); ++k)
        if (valid(n.results[k]))
          source_[n.results[k]] = {fmt::format("n{}", i), static_cast<int>(k)};
    }
  }

  std::string run() {
    out_ += fmt::format("digraph {} {{\n", dotQuote(g_.name()));
    out_ += "  node [fontname=\"monospace\"];\n";
    for (size_t i = 0; i < g_.args().size(); ++i) {
      const Arg &a = g_.args()[i];
      bool input = a.kind == Arg::Kind::Input;
      std::string_view kind = input ? "input" : a.kind == Arg::Kind::Param ? "param" : "state";
      std::string label = fmt::format("{} {}\n{}", kind, a.name, typeOf(a.value));
      out_ += fmt::format("  a{} [shape=ellipse, {}label={}];\n", i,
                          input ? "" : "style=filled, fillcolor=\"#e8e8e8\", ", dotQuote(label));
    }
    for (size_t i = 0; i < g_.nodes().size(); ++i) {
      const Node &n = g_.nodes()[i];
      std::string label(mnemonic(n.op));
      // A region shows what it holds: "fusion{matmul add gelu}".
      for (const AttrValue &v : n.attrs.values())
        if (const Region *body = std::get_if<Region>(&v); body && body->graph) {
          std::string ops;
          for (const Node &b : body->graph->nodes())
            if (b.op != OpKind::Constant)
              ops += (ops.empty() ? "" : " ") + std::string(mnemonic(b.op));
          label += "{" + ops + "}";
        }
      for (ValueId r : n.results)
        label += "\n" + typeOf(r);
      out_ += fmt::format("  n{} [shape=box, {}label={}];\n", i,
                          n.gradOf != kNone ? "style=filled, fillcolor=\"#fde8e8\", " : "",
                          dotQuote(label));
    }
    for (size_t i = 0; i < g_.outputs().size(); ++i)
      out_ += fmt::format("  o{} [shape=doubleoctagon, label={}];\n", i,
                          dotQuote("output " + g_.outputs()[i].name));
    for (size_t i = 0; i < g_.nodes().size(); ++i)
      for (ValueId v : g_.nodes()[i].operands)
        edge(v, fmt::format("n{}", i));
    for (size_t i = 0; i < g_.outputs().size(); ++i)
      edge(g_.outputs()[i].value, fmt::format("o{}", i));
    out_ += "}\n";
    return std::move(out_);
  }

private:
  struct Source {
    std::string id; // empty: not produced by anything in the graph
    int index = 0;
  };

  bool valid(ValueId v) const { return v >= 0 && v < g_.numValues(); }
  std::string typeOf(ValueId v) const { return valid(v) ? typeString(g_.type(v)) : "?"; }

  void edge(ValueId v, const std::string &to) {
    if (!valid(v) || source_[v].id.empty())
      return; // a broken graph still draws; the verifier reports the bad operand
    const Source &s = source_[v];
    if (s.index > 0)
      out_ += fmt::format("  {} -> {} [label=\"#{}\"];\n", s.id, to, s.index);
    else
      out_ += fmt::format("  {} -> {};\n", s.id, to);
  }

  const Graph &g_;
  std::vector<Source> source_; // producer of each ValueId
  std::string out_;
};

} // namespace

std::string toDot(const Graph &g) {
  return DotWriter(g).run();
}

} // namespace kiln::ir

// The IR text parser's internals, shared by its two files: parser.cc (statements, types,
// attributes) and parser_memory.cc (the memory plan's mem(...) annotations). Not a public API:
// include ir/parser.h.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "ir/lexer.h"
#include "ir/parser.h"

namespace kiln::ir::parse_detail {

// The value of a name whose statement had an error: using it makes the user's statement bad
// too, without a second message about the same mistake.
constexpr ValueId kPoison = -2;

inline std::string posString(TextPos p) {
  return fmt::format("{}:{}", p.line, p.col);
}

struct Diag {
  TextPos pos;
  std::string text; // "LINE:COL: message"
};

// One value's `mem(REGION, offset=O, bytes=B[, inplace=%v | , view=%v])` (see ir/printer.h), or a
// node's `scratch(N)` (in slot.bytes).
struct MemSpec {
  TextPos pos; // of 'mem'
  MemorySlot slot;
};

// An attribute value as written, checked against the attribute's kind only once the op is known.
struct Literal {
  Token first;           // a single-token value, or the '[' of a list
  std::string_view text; // all of its source text
  bool isList = false;
  std::vector<Token> elems;
  std::shared_ptr<const Graph> graph; // a region's body: `graph @name {...}`
};

// Initialisers, named as paramInitString writes them; those it writes with "(...)" take a scale.
constexpr ParamInit::Kind kInitKinds[] = {ParamInit::Kind::Zeros, ParamInit::Kind::Ones,
                                          ParamInit::Kind::Normal, ParamInit::Kind::Uniform,
                                          ParamInit::Kind::XavierUniform};
inline std::string initName(ParamInit::Kind k) {
  std::string s = paramInitString(ParamInit{k, 0});
  return s.substr(0, s.find('('));
}
inline bool initTakesScale(ParamInit::Kind k) {
  return paramInitString(ParamInit{k, 0}).find('(') != std::string::npos;
}

class Parser {
public:
  explicit Parser(std::string_view src) : own_(src), lex_(own_) { tok_ = lex_.next(); }
  ParseResult run();

  // A region's body, nested in another graph's text: reads `graph @name {...}` from the shared
  // lexer, starting at `current`. The body has its own names (it sees only its inputs).
  // Returns the graph if it parsed without problems; its diagnostics go to `diags`, and
  // `syntaxOk` says whether the outer parse can go on; `current` is left after the '}'.
  static std::optional<Graph> parseBody(Lexer &lex, Token &current, std::vector<Diag> &diags,
                                        bool &syntaxOk, int depth);
  static constexpr int kMaxBodyDepth = 8; // bodies within bodies: deep enough, and no stack blow-up

private:
  struct Def {
    ValueId value;
    TextPos pos;
  };

  // ---- Tokens and diagnostics ----
  void bump() { tok_ = lex_.next(); }
  bool isWord(std::string_view w) const { return tok_.kind == Tok::Ident && tok_.text == w; }
  // Records a syntax error at the current token and returns false, which unwinds the parse.
  bool syntaxError(std::string_view expected) {
    if (tok_.kind == Tok::Error)
      report(tok_.pos, tok_.error);
    else
      report(tok_.pos, fmt::format("expected {}, found {}", expected, describe(tok_)));
    return false;
  }
  bool expect(Tok kind, std::string_view expected) {
    if (tok_.kind != kind)
      return syntaxError(expected);
    bump();
    return true;
  }
  void report(TextPos pos, std::string message) {
    diags_.push_back({pos, fmt::format("{}: {}", posString(pos), message)});
  }
  // A problem in the current statement: it builds nothing, nor does any statement using its
  // results, so the verifier sees only whole statements and never repeats the problem.
  void error(TextPos pos, std::string message) {
    report(pos, std::move(message));
    stmtBad_ = true;
  }

  // ---- Names ----
  ValueId resolve(const Token &t);
  std::vector<bool> declare(const std::vector<Token> &names);
  void bind(const std::vector<Token> &names, const std::vector<bool> &fresh,
            std::span<const ValueId> values);
  void checkUnique(std::map<std::string, TextPos> &seen, const Token &name, std::string_view what);

  Parser(Lexer &shared, Token current, int depth)
      : own_(""), lex_(shared), tok_(std::move(current)), depth_(depth) {}
  bool parseGraphText(); // header, statements and the closing '}'
  void finish(bool syntaxOk);

  // ---- Grammar ----
  bool parseHeader();
  bool parseStatement();
  bool parseOutput();
  bool parseDefinition();
  bool parseArg(const std::vector<Token> &names);
  bool parseInit(ParamInit &init);
  bool parseDomain(Domain &domain);
  bool parseNumber(double &out);
  bool parseNode(const std::vector<Token> &names);
  bool parseAttrs(const OpInfo *op, std::string_view opName, Attrs &attrs,
                  std::map<std::string, TextPos> &seen);
  bool parseLiteral(Literal &lit);
  void setAttr(const OpInfo &op, const Token &name, const Literal &lit, Attrs &attrs);
  bool parseSuffix(std::optional<Token> &gradOf, SourceLoc &loc, std::vector<MemSpec> &mems,
                   std::optional<MemSpec> &scratch);
  bool parseRegionSizes();
  bool parseMem(MemSpec &m);
  bool parseByteCount(std::string_view key, int64_t &out);
  bool parseType(Type &t);

  // ---- After the last statement ----
  void finishNames();
  void resolveGradOf();
  void finishMemoryPlan();
  void addVerifierFindings();

  Lexer own_;  // the top-level parser's lexer
  Lexer &lex_; // own_, or the enclosing graph's lexer for a region body
  Token tok_;
  int depth_ = 0; // how many region bodies enclose this graph
  Graph g_;
  std::vector<Diag> diags_;
  bool stmtBad_ = false; // the statement being parsed had a (non-syntax) error
  TextPos headerPos_{1, 1};
  int outputStatements_ = 0;
  std::map<std::string, Def> names_;
  std::map<std::string, TextPos> argNames_, outputNames_;
  // The arguments added to the graph, by name (the first of a name, as Graph::argIndex has it):
  // an output's gradient(...) or update(...) is looked up, not found by a scan of all of them.
  std::map<std::string, int32_t> argIndex_;
  std::set<std::pair<int, int32_t>> roles_; // (role, argument) of the outputs with a role
  struct UndefinedUse {
    size_t diag;
    std::string name;
  };
  std::vector<UndefinedUse> undefined_;
  struct PendingGradOf {
    NodeId node;
    Token ref;
  };
  std::vector<PendingGradOf> gradOf_; // resolved at the end: a forward node may come later
  // The memory plan: the header's region sizes, each built value's mem(...) and node's scratch.
  std::optional<std::array<int64_t, kNumMemRegions>> regionBytes_;
  struct PendingMem {
    ValueId value;
    MemSpec spec;
  };
  std::vector<PendingMem> mems_;
  struct PendingScratch {
    NodeId node;
    MemSpec spec;
  };
  std::vector<PendingScratch> scratch_;
  std::vector<TextPos> argPos_; // per argument: where it was defined
};

} // namespace kiln::ir::parse_detail

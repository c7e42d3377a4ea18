// Recursive-descent parser of the IR text form (grammar by example in ir/printer.h). A syntax
// error ends the parse; any other problem marks its statement bad (it builds nothing) and parsing
// goes on. The statements that were fine are then verified, so one run reports every problem.
#include "ir/parser.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/parser_impl.h"

namespace kiln::ir {
namespace parse_detail {

// ---- Names ----

ValueId Parser::resolve(const Token &t) {
  auto it = names_.find(t.str);
  if (it == names_.end()) {
    // Worded once the whole text is read: "used before it is defined" or "not defined".
    undefined_.push_back({diags_.size(), t.str});
    error(t.pos, "");
    return kPoison;
  }
  if (it->second.value == kPoison)
    stmtBad_ = true;
  return it->second.value;
}

// Claims the statement's result names (before its node exists, so that a repeated name is
// caught); returns which were new.
std::vector<bool> Parser::declare(const std::vector<Token> &names) {
  std::vector<bool> fresh;
  for (const Token &n : names) {
    auto [it, inserted] = names_.try_emplace(n.str, Def{kPoison, n.pos});
    if (!inserted)
      error(n.pos,
            fmt::format("%{} is defined twice (first at {})", n.str, posString(it->second.pos)));
    fresh.push_back(inserted);
  }
  return fresh;
}

void Parser::bind(const std::vector<Token> &names, const std::vector<bool> &fresh,
                  std::span<const ValueId> values) {
  for (size_t i = 0; i < names.size() && i < values.size(); ++i)
    if (fresh[i])
      names_[names[i].str].value = values[i];
}

// Graph-level name checks. They do not block verification: the graph is whole without them.
// (ir::verify checks the same but cannot say where: Arg and Output carry no TextPos.)
void Parser::checkUnique(std::map<std::string, TextPos> &seen, const Token &name,
                         std::string_view what) {
  if (name.str.empty()) {
    report(name.pos, fmt::format("{} name must not be empty", what));
    return;
  }
  auto [it, inserted] = seen.try_emplace(name.str, name.pos);
  if (!inserted)
    report(name.pos, fmt::format("{} name {} is used twice (first at {})", what,
                                 quoteString(name.str), posString(it->second)));
}

// ---- Grammar ----

bool Parser::parseHeader() {
  if (!isWord("graph"))
    return syntaxError("'graph' at the start of the input");
  headerPos_ = tok_.pos;
  bump();
  if (tok_.kind != Tok::Global)
    return syntaxError("the graph name (like @main) after 'graph'");
  g_.setName(tok_.str);
  bump();
  if (isWord("mem") && !parseRegionSizes()) // the graph carries a memory plan
    return false;
  return expect(Tok::LBrace, "'{' after the graph name");
}

bool Parser::parseStatement() {
  stmtBad_ = false;
  if (isWord("output"))
    return parseOutput();
  if (tok_.kind == Tok::Value)
    return parseDefinition();
  return syntaxError("a statement ('%name = ...' or 'output') or '}'");
}

// output "name" = %v [loss | gradient("arg") | update("arg")]
bool Parser::parseOutput() {
  bump();
  ++outputStatements_;
  if (tok_.kind != Tok::String)
    return syntaxError("the output's name as a string after 'output'");
  Token name = tok_;
  bump();
  if (!expect(Tok::Equal, "'=' after the output name"))
    return false;
  if (tok_.kind != Tok::Value)
    return syntaxError("the output value (%name) after '='");
  ValueId v = resolve(tok_);
  bump();
  Output out{name.str, v};
  TextPos rolePos = tok_.pos;
  if (isWord("loss")) {
    out.role = OutputRole::Loss;
    bump();
  } else if (isWord("gradient") || isWord("update")) {
    out.role = isWord("gradient") ? OutputRole::Gradient : OutputRole::Update;
    std::string word(tok_.text);
    bump();
    if (!expect(Tok::LParen, fmt::format("'(' after '{}'", word)))
      return false;
    if (tok_.kind != Tok::String)
      return syntaxError(fmt::format("the argument's name as a string in {}(...)", word));
    auto it = argIndex_.find(tok_.str);
    out.arg = it == argIndex_.end() ? kNone : it->second;
    if (out.arg == kNone)
      error(tok_.pos, fmt::format("{} names \"{}\", which is not an argument defined before it",
                                  word, tok_.str));
    bump();
    if (!expect(Tok::RParen, fmt::format("')' to close '{}'", word)))
      return false;
  }
  checkUnique(outputNames_, name, "output");
  if (stmtBad_)
    return true;
  // At most one loss, and one update per argument. (Gradients may repeat: of several losses.)
  bool repeated = (out.role == OutputRole::Loss || out.role == OutputRole::Update) &&
                  !roles_.insert({static_cast<int>(out.role), out.arg}).second;
  if (Status s = checkOutputRole(g_, out); !s)
    error(rolePos, s.error().message);
  else if (repeated && out.role == OutputRole::Loss)
    error(rolePos, "a second loss output: a graph has at most one");
  else if (repeated)
    error(rolePos, fmt::format("a second {} of \"{}\": an argument has at most one",
                               outputRoleName(out.role), g_.args()[out.arg].name));
  else
    g_.addOutput(out.name, out.value, out.role, out.arg);
  return true;
}

// %a, %b = ...
bool Parser::parseDefinition() {
  std::vector<Token> names{tok_};
  bump();
  while (tok_.kind == Tok::Comma) {
    bump();
    if (tok_.kind != Tok::Value)
      return syntaxError("a result name (%name) after ','");
    names.push_back(tok_);
    bump();
  }
  if (!expect(Tok::Equal, "'=' after the result names"))
    return false;
  if (isWord("input") || isWord("param") || isWord("state"))
    return parseArg(names);
  if (tok_.kind != Tok::Ident)
    return syntaxError("an op name, 'input', 'param' or 'state' after '='");
  return parseNode(names);
}

// %x = input "name" [range(N)] : type
// %w = param "name" init KIND[(scale)] [domain(D)] : type
// %s = state "name" init KIND[(scale)] [domain(D)] : type
bool Parser::parseArg(const std::vector<Token> &names) {
  Token kw = tok_;
  bool isInput = kw.text == "input", isState = kw.text == "state";
  std::string_view what = isInput ? "input" : isState ? "state" : "parameter";
  bump();
  if (names.size() != 1)
    error(names[1].pos, fmt::format("{} defines one value, found {} names", kw.text, names.size()));
  if (tok_.kind != Tok::String)
    return syntaxError(fmt::format("the {}'s name as a string after '{}'", what, kw.text));
  Token name = tok_;
  bump();
  int64_t range = 0;
  ParamInit init;
  Domain domain = Domain::Real;
  if (isInput && isWord("range")) {
    bump();
    if (!expect(Tok::LParen, "'(' after 'range'"))
      return false;
    if (tok_.kind != Tok::Int)
      return syntaxError("the range (a positive integer)");
    if (tok_.i <= 0)
      error(tok_.pos, fmt::format("range must be positive, found {}", tok_.text));
    range = tok_.i;
    bump();
    if (!expect(Tok::RParen, "')' after the range"))
      return false;
  } else if (!isInput) {
    if (!isWord("init"))
      return syntaxError(fmt::format("'init' after the {}'s name", what));
    bump();
    if (!parseInit(init))
      return false;
    if (isWord("domain") && !parseDomain(domain))
      return false;
  }
  if (!expect(Tok::Colon, fmt::format("':' and the {}'s type", what)))
    return false;
  Type type;
  if (!parseType(type))
    return false;
  std::optional<MemSpec> mem;
  if (isWord("mem") && !parseMem(mem.emplace()))
    return false;
  checkUnique(argNames_, name, what);
  std::vector<bool> fresh = declare(names);
  if (stmtBad_)
    return true;
  argIndex_.try_emplace(name.str, static_cast<int32_t>(g_.args().size()));
  ValueId v = isInput   ? g_.addInput(name.str, type, range)
              : isState ? g_.addState(name.str, type, init, domain)
                        : g_.addParam(name.str, type, init, domain);
  bind(names, fresh, std::span(&v, 1));
  argPos_.push_back(kw.pos);
  if (mem)
    mems_.push_back({v, *mem});
  return true;
}

// zeros | ones | normal(std) | uniform(bound) | xavier_uniform(gain)
bool Parser::parseInit(ParamInit &init) {
  std::vector<std::string> known;
  for (ParamInit::Kind k : kInitKinds)
    known.push_back(initName(k));
  if (tok_.kind != Tok::Ident)
    return syntaxError(fmt::format("an initializer ({})", fmt::join(known, ", ")));
  Token kindTok = tok_;
  bump();
  bool found = false;
  for (ParamInit::Kind k : kInitKinds)
    if (kindTok.text == initName(k)) {
      init.kind = k;
      found = true;
    }
  bool hasScale = tok_.kind == Tok::LParen;
  TextPos scalePos = tok_.pos;
  if (hasScale) {
    bump();
    scalePos = tok_.pos;
    if (!parseNumber(init.scale) || !expect(Tok::RParen, "')' after the scale"))
      return false;
  }
  if (!found)
    error(kindTok.pos, fmt::format("unknown init '{}' (expected one of: {})", kindTok.text,
                                   fmt::join(known, ", ")));
  else if (initTakesScale(init.kind) && !hasScale)
    error(kindTok.pos,
          fmt::format("init '{}' needs a scale, as in {}(0.02)", kindTok.text, kindTok.text));
  else if (!initTakesScale(init.kind) && hasScale)
    error(kindTok.pos, fmt::format("init '{}' takes no scale", kindTok.text));
  else if (Status s = checkParamInit(init); !s)
    error(scalePos, s.error().message);
  return true;
}

// domain(real | nonnegative | count)
bool Parser::parseDomain(Domain &domain) {
  bump(); // 'domain'
  if (!expect(Tok::LParen, "'(' after 'domain'"))
    return false;
  if (tok_.kind != Tok::Ident)
    return syntaxError("a domain (real, nonnegative or count)");
  bool found = false;
  for (Domain d : {Domain::Real, Domain::NonNegative, Domain::Count})
    if (tok_.text == domainName(d)) {
      domain = d;
      found = true;
    }
  if (!found)
    error(tok_.pos, fmt::format("unknown domain '{}' (expected one of: real, nonnegative, count)",
                                tok_.text));
  bump();
  return expect(Tok::RParen, "')' to close 'domain'");
}

bool Parser::parseNumber(double &out) {
  if (tok_.kind == Tok::Int)
    out = static_cast<double>(tok_.i);
  else if (tok_.kind == Tok::Float)
    out = tok_.f;
  else if (isWord("inf") || isWord("nan"))
    out = isWord("inf") ? std::numeric_limits<double>::infinity()
                        : std::numeric_limits<double>::quiet_NaN();
  else
    return syntaxError("a number");
  bump();
  return true;
}

// %r = op(%a, %b) {attr = value, ...} : type [grad_of(%f)] [loc("file":line)] [mem(...)...]
bool Parser::parseNode(const std::vector<Token> &names) {
  Token opTok = tok_;
  bump();
  std::optional<OpKind> kind = opByMnemonic(opTok.text);
  const OpInfo *op = kind ? &opInfo(*kind) : nullptr;
  if (!op)
    error(opTok.pos, fmt::format("unknown op '{}'", opTok.text));
  if (!expect(Tok::LParen, "'(' after the op name"))
    return false;
  std::vector<ValueId> operands;
  if (tok_.kind != Tok::RParen) {
    for (;;) {
      if (tok_.kind != Tok::Value)
        return syntaxError(operands.empty() ? "an operand (%name) or ')'" : "an operand (%name)");
      operands.push_back(resolve(tok_));
      bump();
      if (tok_.kind == Tok::RParen)
        break;
      if (!expect(Tok::Comma, "')' after operands"))
        return false;
    }
  }
  bump(); // ')'
  Attrs attrs = op ? Attrs(op->attrs) : Attrs();
  std::map<std::string, TextPos> seen;
  if (tok_.kind == Tok::LBrace && !parseAttrs(op, opTok.text, attrs, seen))
    return false;
  if (!expect(Tok::Colon, "':' and the result types"))
    return false;
  TextPos typesPos = tok_.pos;
  std::vector<Type> types(1);
  if (!parseType(types.back()))
    return false;
  while (tok_.kind == Tok::Comma) {
    bump();
    types.emplace_back();
    if (!parseType(types.back()))
      return false;
  }
  std::optional<Token> gradOf;
  SourceLoc loc;
  std::vector<MemSpec> mems;
  std::optional<MemSpec> scratch;
  if (!parseSuffix(gradOf, loc, mems, scratch))
    return false;

  if (op) {
    if (!operandCountFits(*op, operands.size()))
      error(opTok.pos, fmt::format("{} expects {}, found {}", op->mnemonic, operandCountText(*op),
                                   operands.size()));
    for (const AttrSpec &s : op->attrs)
      if (s.required && !seen.count(std::string(s.name)))
        error(opTok.pos, fmt::format("{} needs attribute '{}' ({})", op->mnemonic, s.name,
                                     attrKindName(s.kind)));
    if (!resultCountFits(*op, names.size()))
      error(names[0].pos, fmt::format("{} has {}, found {} names", op->mnemonic,
                                      resultCountText(*op), names.size()));
  }
  if (types.size() != names.size())
    error(typesPos, fmt::format("expected {} result type{} (one per name), found {}", names.size(),
                                names.size() == 1 ? "" : "s", types.size()));
  if (!mems.empty() && mems.size() != names.size())
    error(mems[0].pos, fmt::format("expected one mem(...) per result ({}), found {}", names.size(),
                                   mems.size()));
  std::vector<bool> fresh = declare(names);
  if (stmtBad_)
    return true;
  NodeId id = g_.addNodeUnchecked(*kind, std::move(operands), std::move(attrs), types,
                                  std::move(loc), names[0].pos);
  bind(names, fresh, g_.node(id).results);
  if (gradOf)
    gradOf_.push_back({id, *gradOf});
  for (size_t i = 0; i < mems.size() && i < g_.node(id).results.size(); ++i)
    mems_.push_back({g_.node(id).results[i], mems[i]});
  if (scratch)
    scratch_.push_back({id, *scratch});
  return true;
}

bool Parser::parseAttrs(const OpInfo *op, std::string_view opName, Attrs &attrs,
                        std::map<std::string, TextPos> &seen) {
  bump(); // '{'
  while (tok_.kind != Tok::RBrace) {
    if (tok_.kind != Tok::Ident)
      return syntaxError("an attribute name");
    Token name = tok_;
    bump();
    if (!expect(Tok::Equal, fmt::format("'=' after attribute '{}'", name.text)))
      return false;
    Literal lit;
    if (!parseLiteral(lit))
      return false;
    auto [it, inserted] = seen.try_emplace(std::string(name.text), name.pos);
    if (!inserted) {
      error(name.pos, fmt::format("attribute '{}' is given twice (first at {})", name.text,
                                  posString(it->second)));
    } else if (op && attrs.indexOf(name.text) < 0) {
      std::vector<std::string_view> known;
      for (const AttrSpec &s : op->attrs)
        known.push_back(s.name);
      if (known.empty())
        error(name.pos, fmt::format("unknown attribute '{}' for {} (it has no attributes)",
                                    name.text, opName));
      else
        error(name.pos, fmt::format("unknown attribute '{}' for {} (expected one of: {})",
                                    name.text, opName, fmt::join(known, ", ")));
    } else if (op) {
      setAttr(*op, name, lit, attrs);
    }
    if (tok_.kind == Tok::RBrace)
      break;
    if (!expect(Tok::Comma, "',' or '}' after the attribute value"))
      return false;
  }
  bump(); // '}'
  return true;
}

// 3 | -1.5 | 1e-05 | inf | -inf | nan | true | f32 | [1, -2]
bool Parser::parseLiteral(Literal &lit) {
  lit.first = tok_;
  size_t start = lex_.offsetOf(tok_);
  if (isWord("graph")) { // a region's body
    bool syntaxOk = true;
    size_t before = diags_.size();
    std::optional<Graph> body = parseBody(lex_, tok_, diags_, syntaxOk, depth_ + 1);
    if (diags_.size() != before)
      stmtBad_ = true; // the body's own problems are reported; the node is not built
    if (body)
      lit.graph = std::make_shared<const Graph>(std::move(*body));
    lit.text = "graph";
    return syntaxOk;
  }
  if (tok_.kind == Tok::Int || tok_.kind == Tok::Float || tok_.kind == Tok::Ident) {
    lit.text = tok_.text;
    bump();
    return true;
  }
  if (tok_.kind != Tok::LBracket)
    return syntaxError("an attribute value (number, true/false, dtype, [list] or graph)");
  lit.isList = true;
  bump();
  while (tok_.kind != Tok::RBracket) {
    if (tok_.kind != Tok::Int && tok_.kind != Tok::Float)
      return syntaxError("a number in the list");
    lit.elems.push_back(tok_);
    bump();
    if (tok_.kind == Tok::RBracket)
      break;
    if (!expect(Tok::Comma, "',' or ']' in the list"))
      return false;
  }
  lit.text = lex_.source().substr(start, lex_.offsetOf(tok_) + 1 - start);
  bump(); // ']'
  return true;
}

void Parser::setAttr(const OpInfo &op, const Token &name, const Literal &lit, Attrs &attrs) {
  const AttrSpec &spec = op.attrs[attrs.indexOf(name.text)];
  const Token &t = lit.first;
  auto mismatch = [&](TextPos pos, std::string_view found) {
    error(pos, fmt::format("attribute '{}' of {} expects {}, found {}", spec.name, op.mnemonic,
                           attrKindName(spec.kind), found));
  };
  std::string found = lit.isList ? std::string(lit.text) : describe(t);
  bool isGraph = t.kind == Tok::Ident && t.text == "graph";
  if (isGraph)
    found = "a graph";
  if (t.kind == Tok::Int || t.kind == Tok::Float)
    found = t.text; // a number is shown as written, without quotes
  AttrValue value;
  switch (spec.kind) {
  case AttrKind::Graph:
    if (!isGraph)
      return mismatch(t.pos, found);
    if (!lit.graph)
      return; // the body had problems, already reported
    value = Region{lit.graph};
    break;
  case AttrKind::Int:
    if (lit.isList || t.kind != Tok::Int)
      return mismatch(t.pos, found);
    value = t.i;
    break;
  case AttrKind::Float:
    if (!lit.isList && t.kind == Tok::Int)
      value = t.i; // (Attrs::set makes it a double, refusing one it cannot hold exactly)
    else if (!lit.isList && t.kind == Tok::Float)
      value = t.f;
    else if (!lit.isList && (t.text == "inf" || t.text == "nan"))
      value = t.text == "inf" ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
    else
      return mismatch(t.pos, found);
    break;
  case AttrKind::Bool:
    if (lit.isList || t.kind != Tok::Ident || (t.text != "true" && t.text != "false"))
      return mismatch(t.pos, found);
    value = t.text == "true";
    break;
  case AttrKind::Ints: {
    if (!lit.isList)
      return mismatch(t.pos, found);
    std::vector<int64_t> ints;
    for (const Token &e : lit.elems) {
      if (e.kind != Tok::Int)
        return mismatch(e.pos, e.text);
      ints.push_back(e.i);
    }
    value = std::move(ints);
    break;
  }
  case AttrKind::DType: {
    std::optional<DType> d = lit.isList || t.kind != Tok::Ident ? std::nullopt : parseDType(t.text);
    if (!d)
      return mismatch(t.pos, found);
    value = *d;
    break;
  }
  }
  if (Status s = attrs.set(name.text, std::move(value)); !s)
    error(name.pos, s.error().message);
}

// Zero or more of: grad_of(%v) loc("file":line) or loc("module"("file":line)), in either order,
// each at most once; then the memory plan's mem(...), one per result, and scratch(N).
bool Parser::parseSuffix(std::optional<Token> &gradOf, SourceLoc &loc, std::vector<MemSpec> &mems,
                         std::optional<MemSpec> &scratch) {
  bool haveLoc = false;
  for (;;) {
    if (isWord("mem")) {
      if (!parseMem(mems.emplace_back()))
        return false;
      continue;
    }
    if (isWord("scratch")) {
      if (scratch)
        error(tok_.pos, "'scratch' is given twice");
      MemSpec &s = scratch.emplace();
      s.pos = tok_.pos;
      bump();
      if (!expect(Tok::LParen, "'(' after 'scratch'"))
        return false;
      if (tok_.kind != Tok::Int)
        return syntaxError("a number of bytes in scratch(...)");
      s.slot.bytes = tok_.i;
      bump();
      if (!expect(Tok::RParen, "')' to close 'scratch'"))
        return false;
      continue;
    }
    bool isGrad = isWord("grad_of");
    if (!isGrad && !isWord("loc"))
      return true;
    if (isGrad ? gradOf.has_value() : haveLoc)
      error(tok_.pos, fmt::format("'{}' is given twice", tok_.text));
    std::string word(tok_.text);
    bump();
    if (!expect(Tok::LParen, fmt::format("'(' after '{}'", word)))
      return false;
    if (isGrad) {
      if (tok_.kind != Tok::Value)
        return syntaxError("the forward value (%name) in grad_of");
      gradOf = tok_;
    } else {
      if (tok_.kind != Tok::String)
        return syntaxError("the source file as a string in loc");
      loc.file = tok_.str;
      bump();
      // A named location, loc("blocks.0.attn"("file":line)): the string was the module's.
      const bool named = tok_.kind == Tok::LParen;
      if (named) {
        loc.scope = std::move(loc.file);
        bump();
        if (tok_.kind != Tok::String)
          return syntaxError("the source file as a string in loc(\"module\"(...))");
        loc.file = tok_.str;
        bump();
      }
      if (!expect(Tok::Colon, "':' and a line number after the file in loc"))
        return false;
      if (tok_.kind != Tok::Int)
        return syntaxError("a line number in loc");
      if (tok_.i < 0 || tok_.i > std::numeric_limits<uint32_t>::max())
        error(tok_.pos, fmt::format("line number {} is out of range", tok_.text));
      loc.line = static_cast<uint32_t>(tok_.i);
      haveLoc = true;
      if (named) {
        bump();
        if (tok_.kind != Tok::RParen)
          return syntaxError("')' to close the named location's file and line");
      }
    }
    bump();
    if (!expect(Tok::RParen, fmt::format("')' to close '{}'", word)))
      return false;
  }
}

// f32[2,16,64] | i64[]
bool Parser::parseType(Type &t) {
  if (tok_.kind != Tok::Ident)
    return syntaxError("a type (like f32[2,3])");
  TextPos at = tok_.pos;
  if (std::optional<DType> d = parseDType(tok_.text)) {
    t.dtype = *d;
  } else {
    std::vector<std::string_view> all;
    for (DType d2 : kAllDTypes)
      all.push_back(dtypeName(d2));
    error(tok_.pos,
          fmt::format("unknown dtype '{}' (expected one of: {})", tok_.text, fmt::join(all, ", ")));
  }
  bump();
  if (!expect(Tok::LBracket, "'[' and the shape after the dtype"))
    return false;
  while (tok_.kind != Tok::RBracket) {
    if (tok_.kind != Tok::Int)
      return syntaxError("a dimension (a non-negative integer)");
    if (tok_.i < 0)
      error(tok_.pos, fmt::format("dimension must be non-negative, found {}", tok_.text));
    t.shape.push_back(tok_.i);
    bump();
    if (tok_.kind == Tok::RBracket)
      break;
    if (!expect(Tok::Comma, "',' or ']' in the shape"))
      return false;
  }
  bump(); // ']'
  bool dimsOk = std::all_of(t.shape.begin(), t.shape.end(), [](int64_t d) { return d >= 0; });
  if (Status s = checkType(t); dimsOk && !s) // negative dimensions are reported above
    error(at, s.error().message);
  return true;
}

// ---- After the last statement ----

void Parser::finishNames() {
  for (const UndefinedUse &u : undefined_) {
    Diag &d = diags_[u.diag];
    d.text += names_.count(u.name) ? fmt::format("value %{} is used before it is defined", u.name)
                                   : fmt::format("value %{} is not defined", u.name);
  }
}

void Parser::resolveGradOf() {
  for (const PendingGradOf &p : gradOf_) {
    auto it = names_.find(p.ref.str);
    if (it == names_.end()) {
      error(p.ref.pos, fmt::format("grad_of names %{}, which is not defined", p.ref.str));
    } else if (it->second.value != kPoison) {
      const Value &v = g_.value(it->second.value);
      if (v.def == kNone)
        error(p.ref.pos, fmt::format("grad_of must name a node's result, but %{} is a graph "
                                     "argument",
                                     p.ref.str));
      else
        g_.node(p.node).gradOf = v.def;
    }
  }
}

// Adds ir::verify's findings. Those about nodes start with the node's line:col. The others are
// about arguments and outputs, which the parser has already checked where it knew the place
// (see checkUnique), so they are left out rather than said twice without a place.
void Parser::addVerifierFindings() {
  for (Error &e : verify(g_)) {
    unsigned line = 0, col = 0;
    int used = 0;
    if (std::sscanf(e.message.c_str(), "%u:%u: %n", &line, &col, &used) == 2 && used > 0) {
      diags_.push_back({TextPos{line, col}, std::move(e.message)});
      continue;
    }
    bool covered = e.message.starts_with("graph arguments:") ||
                   e.message.starts_with("output \"") || e.message.starts_with("graph @");
    // About one argument (its memory plan slot): at the argument's line.
    TextPos at = headerPos_;
    for (size_t a = 0; a < g_.args().size() && a < argPos_.size(); ++a)
      if (e.message.starts_with(fmt::format("argument {}:", quoteString(g_.args()[a].name))))
        at = argPos_[a];
    if (!covered)
      diags_.push_back({at, fmt::format("{}: {}", posString(at), e.message)});
  }
}

bool Parser::parseGraphText() {
  bool ok = parseHeader();
  while (ok && tok_.kind != Tok::RBrace) {
    if (tok_.kind == Tok::Eof)
      ok = syntaxError("'}' to close the graph");
    else
      ok = parseStatement();
  }
  if (ok)
    bump(); // '}'
  return ok;
}

void Parser::finish(bool syntaxOk) {
  finishNames();
  if (syntaxOk) {
    resolveGradOf();
    finishMemoryPlan();
    if (outputStatements_ == 0)
      report(headerPos_, fmt::format("graph @{} has no outputs", g_.name()));
    addVerifierFindings();
  }
}

ParseResult Parser::run() {
  bool ok = parseGraphText();
  if (ok && tok_.kind != Tok::Eof)
    ok = syntaxError("end of input after the closing '}'");
  finish(ok);
  std::stable_sort(diags_.begin(), diags_.end(), [](const Diag &a, const Diag &b) {
    return std::pair(a.pos.line, a.pos.col) < std::pair(b.pos.line, b.pos.col);
  });
  ParseResult r;
  for (Diag &d : diags_)
    r.errors.push_back(Error{std::move(d.text)});
  if (r.errors.empty())
    r.graph = std::move(g_);
  return r;
}

std::optional<Graph> Parser::parseBody(Lexer &lex, Token &current, std::vector<Diag> &diags,
                                       bool &syntaxOk, int depth) {
  if (depth > kMaxBodyDepth) {
    diags.push_back({current.pos, fmt::format("{}: region bodies nest more than {} deep",
                                              posString(current.pos), kMaxBodyDepth)});
    syntaxOk = false;
    return std::nullopt;
  }
  Parser body(lex, std::move(current), depth);
  syntaxOk = body.parseGraphText();
  body.finish(syntaxOk);
  current = std::move(body.tok_);
  bool clean = body.diags_.empty();
  for (Diag &d : body.diags_)
    diags.push_back(std::move(d));
  if (!clean || !syntaxOk)
    return std::nullopt;
  return std::move(body.g_);
}

} // namespace parse_detail

ParseResult parseGraph(std::string_view text) {
  return parse_detail::Parser(text).run();
}

} // namespace kiln::ir

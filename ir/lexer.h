// Tokens of the IR text form (see ir/printer.h for the grammar by example). The lexer also owns
// the lexical conventions the printer must follow so that what it writes reads back: which
// characters make a bare name, and how strings are quoted.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace kiln::ir {

// Characters of a value name after '%' and of a bare graph name after '@'.
inline bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.';
}
bool isBareName(std::string_view s); // non-empty, all isNameChar

// "..." with \" \\ \n \t \r and \xHH for other control bytes: every string reads back exactly.
std::string quoteString(std::string_view s);

enum class Tok : uint8_t {
  Eof,
  Error,  // a lexical error; `error` says what
  Ident,  // graph, input, f32, reduce_sum, true, inf, ...
  Value,  // %name  (`str` = name without '%')
  Global, // @name or @"..."  (`str` = the name)
  String, // "..."  (`str` = the decoded contents)
  Int,    // -?[0-9]+  (`i`)
  Float,  // 1.5, 1e-05, -2.5e+20, -inf  (`f`)
  LParen,
  RParen,
  LBrace,
  RBrace,
  LBracket,
  RBracket,
  Comma,
  Equal,
  Colon,
};

struct Token {
  Tok kind = Tok::Eof;
  std::string_view text; // the source text of the token
  TextPos pos;
  std::string str;   // Value, Global, String: the decoded name or contents
  int64_t i = 0;     // Int
  double f = 0;      // Float
  std::string error; // Error
};

// How a token is named in "expected X, found Y": 'foo' for words and punctuation, the source
// text for numbers, values and strings, "end of input" at the end.
std::string describe(const Token &t);

class Lexer {
public:
  // A UTF-8 byte order mark (EF BB BF, which some editors write first) is skipped: the text
  // starts after it, at 1:1.
  explicit Lexer(std::string_view src) : src_(src), at_(src.starts_with("\xEF\xBB\xBF") ? 3 : 0) {}
  Token next();
  std::string_view source() const { return src_; }
  size_t offsetOf(const Token &t) const { return static_cast<size_t>(t.text.data() - src_.data()); }

private:
  char peek(size_t ahead = 0) const { return at_ + ahead < src_.size() ? src_[at_ + ahead] : '\0'; }
  void advance(size_t n = 1);
  void skipSpaceAndComments();
  Token make(Tok kind, size_t start, TextPos pos);
  Token fail(TextPos pos, size_t start, std::string message);
  Token lexNumber(size_t start, TextPos pos);
  Token lexString(size_t start, TextPos pos, Tok kind);
  Token lexName(size_t start, TextPos pos, Tok kind);

  std::string_view src_;
  size_t at_;
  uint32_t line_ = 1, col_ = 1;
};

} // namespace kiln::ir

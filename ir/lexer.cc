// The IR text lexer: positions are 1-based line:col counted in bytes, `//` comments run to the
// end of the line, and every malformed token becomes an Error token that names what was wrong.
#include "ir/lexer.h"

#include <charconv>
#include <limits>

#include <fmt/format.h>

#include "support/utf8.h"

namespace kiln::ir {

namespace {
bool isDigit(char c) {
  return c >= '0' && c <= '9';
}
bool isIdentStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool isIdentChar(char c) {
  return isIdentStart(c) || isDigit(c);
}
int hexDigit(char c) {
  if (isDigit(c))
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}
} // namespace

bool isBareName(std::string_view s) {
  if (s.empty())
    return false;
  for (char c : s)
    if (!isNameChar(c))
      return false;
  return true;
}

std::string quoteString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\r':
      out += "\\r";
      break;
    default:
      // Other control bytes would make the text unreadable or split a line; bytes >= 0x80 are
      // left alone so UTF-8 names stay readable.
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
        out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
      else
        out += c;
    }
  }
  return out + "\"";
}

std::string describe(const Token &t) {
  switch (t.kind) {
  case Tok::Eof:
    return "end of input";
  case Tok::Int:
  case Tok::Float:
  case Tok::Value:
  case Tok::Global:
  case Tok::String:
    return std::string(t.text);
  default:
    return fmt::format("'{}'", t.text);
  }
}

void Lexer::advance(size_t n) {
  for (size_t k = 0; k < n && at_ < src_.size(); ++k, ++at_) {
    // A line ends at \n, \r\n, or a \r alone (old Mac files: their errors named line 1).
    if (src_[at_] == '\n' || (src_[at_] == '\r' && peek(1) != '\n')) {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
  }
}

void Lexer::skipSpaceAndComments() {
  for (;;) {
    char c = peek();
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      advance();
    } else if (c == '/' && peek(1) == '/') {
      while (at_ < src_.size() && peek() != '\n' && peek() != '\r')
        advance();
    } else {
      return;
    }
  }
}

Token Lexer::make(Tok kind, size_t start, TextPos pos) {
  Token t;
  t.kind = kind;
  t.text = src_.substr(start, at_ - start);
  t.pos = pos;
  return t;
}

Token Lexer::fail(TextPos pos, size_t start, std::string message) {
  Token t = make(Tok::Error, start, pos);
  t.error = std::move(message);
  return t;
}

Token Lexer::next() {
  skipSpaceAndComments();
  size_t start = at_;
  TextPos pos{line_, col_};
  if (at_ >= src_.size())
    return make(Tok::Eof, start, pos);
  char c = peek();
  auto punct = [&](Tok kind) {
    advance();
    return make(kind, start, pos);
  };
  switch (c) {
  case '(':
    return punct(Tok::LParen);
  case ')':
    return punct(Tok::RParen);
  case '{':
    return punct(Tok::LBrace);
  case '}':
    return punct(Tok::RBrace);
  case '[':
    return punct(Tok::LBracket);
  case ']':
    return punct(Tok::RBracket);
  case ',':
    return punct(Tok::Comma);
  case '=':
    return punct(Tok::Equal);
  case ':':
    return punct(Tok::Colon);
  case '"':
    return lexString(start, pos, Tok::String);
  case '%':
    return lexName(start, pos, Tok::Value);
  case '@':
    if (peek(1) == '"') {
      advance();
      Token t = lexString(start, pos, Tok::Global);
      t.text = src_.substr(start, at_ - start);
      return t;
    }
    return lexName(start, pos, Tok::Global);
  default:
    break;
  }
  if (isDigit(c) || (c == '-' && (isDigit(peek(1)) ||
                                  (src_.substr(at_ + 1, 3) == "inf" && !isIdentChar(peek(4))))))
    return lexNumber(start, pos);
  if (isIdentStart(c)) {
    while (isIdentChar(peek()))
      advance();
    return make(Tok::Ident, start, pos);
  }
  advance();
  if (c == '/')
    return fail(pos, start, "unexpected character '/' (comments start with '//')");
  if (static_cast<unsigned char>(c) >= 0x21 && static_cast<unsigned char>(c) < 0x7f)
    return fail(pos, start, fmt::format("unexpected character '{}'", c));
  return fail(pos, start, fmt::format("unexpected byte 0x{:02x}", static_cast<unsigned char>(c)));
}

Token Lexer::lexName(size_t start, TextPos pos, Tok kind) {
  advance(); // '%' or '@'
  while (isNameChar(peek()))
    advance();
  if (at_ - start == 1)
    return fail(
        pos, start,
        fmt::format("expected a name after '{}' (letters, digits, '_' or '.')", src_[start]));
  Token t = make(kind, start, pos);
  t.str = std::string(t.text.substr(1));
  return t;
}

Token Lexer::lexNumber(size_t start, TextPos pos) {
  if (peek() == '-' && src_.substr(at_ + 1, 3) == "inf" && !isIdentChar(peek(4))) {
    advance(4);
    Token t = make(Tok::Float, start, pos);
    t.f = -std::numeric_limits<double>::infinity();
    return t;
  }
  if (peek() == '-')
    advance();
  while (isDigit(peek()))
    advance();
  bool isFloat = false;
  if (peek() == '.' && isDigit(peek(1))) {
    isFloat = true;
    advance();
    while (isDigit(peek()))
      advance();
  }
  if ((peek() == 'e' || peek() == 'E') &&
      (isDigit(peek(1)) || ((peek(1) == '+' || peek(1) == '-') && isDigit(peek(2))))) {
    isFloat = true;
    advance(2);
    while (isDigit(peek()))
      advance();
  }
  Token t = make(isFloat ? Tok::Float : Tok::Int, start, pos);
  const char *first = t.text.data(), *last = first + t.text.size();
  std::from_chars_result r =
      isFloat ? std::from_chars(first, last, t.f) : std::from_chars(first, last, t.i);
  if (r.ec != std::errc() || r.ptr != last)
    return fail(pos, start, fmt::format("number {} is out of range", t.text));
  return t;
}

Token Lexer::lexString(size_t start, TextPos pos, Tok kind) {
  advance(); // opening quote
  std::string value;
  for (;;) {
    char c = peek();
    if (at_ >= src_.size() || c == '\n' || c == '\r') // (a line's end: advance's)
      return fail(pos, start, "unterminated string (missing closing '\"' on this line)");
    if (c == '"') {
      advance();
      break;
    }
    if (c != '\\') {
      value += c;
      advance();
      continue;
    }
    TextPos escPos{line_, col_};
    char e = peek(1);
    int hi = hexDigit(peek(2)), lo = hexDigit(peek(3));
    if (e == '"' || e == '\\') {
      value += e;
    } else if (e == 'n' || e == 't' || e == 'r') {
      value += e == 'n' ? '\n' : e == 't' ? '\t' : '\r';
    } else if (e == 'x' && hi >= 0 && lo >= 0) {
      value += static_cast<char>(hi * 16 + lo);
      advance(2);
    } else {
      size_t escStart = at_;
      advance(e == '\n' || e == '\0' ? 1 : 2);
      return fail(escPos, escStart,
                  fmt::format("unknown escape '{}' in string (expected \\\", \\\\, \\n, \\t, "
                              "\\r or \\xHH)",
                              src_.substr(escStart, at_ - escStart)));
    }
    advance(2);
  }
  // Strings are names (of arguments, outputs, graphs, files) that go on into safetensors headers
  // and C headers: a NUL would cut them short, and those formats need UTF-8.
  if (size_t nul = value.find('\0'); nul != std::string::npos)
    return fail(pos, start, "a string must not contain a NUL byte (\\x00)");
  if (std::optional<size_t> bad = firstInvalidUtf8(value))
    return fail(pos, start, fmt::format("string is not valid UTF-8 (byte {} of its value)", *bad));
  Token t = make(kind, start, pos);
  t.str = std::move(value);
  return t;
}

} // namespace kiln::ir

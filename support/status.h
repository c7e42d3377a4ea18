// Error values for everything that can fail on user input (DSL shapes, IR text, files, flags).
// Internal invariant failures are asserts instead; a user mistake is always one of these, with a
// message that names the place and what was expected.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace kiln {

// One diagnostic: "where: what". `where` is a place the user can find (file:line, IR line:col,
// path + byte offset, a flag); it may be empty when the caller adds it.
struct Error {
  std::string message;
};

template <class... Args> Error makeError(fmt::format_string<Args...> f, Args &&...args) {
  return Error{fmt::format(f, std::forward<Args>(args)...)};
}

// A value or an Error (std::expected is C++23; this is the small subset we need).
template <class T> class [[nodiscard]] Expected {
public:
  Expected(T value) : v_(std::move(value)) {}
  Expected(Error error) : v_(std::move(error)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T &value() & { assert(ok()); return std::get<0>(v_); }
  const T &value() const & { assert(ok()); return std::get<0>(v_); }
  T &&value() && { assert(ok()); return std::get<0>(std::move(v_)); }
  T &operator*() & { return value(); }
  const T &operator*() const & { return value(); }
  T *operator->() { return &value(); }
  const T *operator->() const { return &value(); }

  const Error &error() const { assert(!ok()); return std::get<1>(v_); }

private:
  std::variant<T, Error> v_;
};

// Success or an Error.
class [[nodiscard]] Status {
public:
  Status() = default;
  Status(Error error) : error_(std::move(error)) {}
  static Status success() { return {}; }

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error &error() const { assert(!ok()); return *error_; }

private:
  std::optional<Error> error_;
};

} // namespace kiln

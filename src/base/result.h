// Result<T>: the value-or-error type for everything a user can cause (a bad request, a bad
// file, a missing model). What only a bug can cause is an assertion instead (EMBER_ASSERT).
// Invariant: an Error's message names the thing and what is wrong with it, e.g.
// "model.gguf: tensor 'blk.0.attn_q.weight' ends at byte 9000, past the end of the file (8192)".
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace ember {

struct Error {
  std::string message;
};

// Builds an Error with fmt-style formatting: `return fail("{}: bad magic", path);`
template <typename... Args>
Error fail(fmt::format_string<Args...> f, Args&&... args) {
  return Error{fmt::format(f, std::forward<Args>(args)...)};
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  T& operator*() & { return std::get<0>(v_); }
  const T& operator*() const& { return std::get<0>(v_); }

  const Error& error() const { return std::get<1>(v_); }
  const std::string& message() const { return std::get<1>(v_).message; }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : err_(std::move(error)), failed_(true) {}  // NOLINT
  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return err_; }
  const std::string& message() const { return err_.message; }

 private:
  Error err_;
  bool failed_ = false;
};

using Status = Result<void>;

[[noreturn]] inline void assert_fail(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "ember: internal error: assertion '%s' failed at %s:%d\n", expr, file, line);
  std::abort();
}

}  // namespace ember

// Bugs only: never for conditions that input or the environment can cause.
#define EMBER_ASSERT(cond) \
  ((cond) ? static_cast<void>(0) : ::ember::assert_fail(#cond, __FILE__, __LINE__))

// Propagate an error: `EMBER_TRY(auto x, parse(y));` or `EMBER_TRY_STATUS(check(z));`
#define EMBER_CONCAT_INNER(a, b) a##b
#define EMBER_CONCAT(a, b) EMBER_CONCAT_INNER(a, b)
#define EMBER_TRY(decl, expr) EMBER_TRY_IMPL(EMBER_CONCAT(_ember_r_, __LINE__), decl, expr)
#define EMBER_TRY_IMPL(tmp, decl, expr) \
  auto tmp = (expr);                    \
  if (!tmp.ok()) return tmp.error();    \
  decl = std::move(tmp).value()
#define EMBER_TRY_STATUS(expr)                   \
  do {                                           \
    auto _ember_s = (expr);                      \
    if (!_ember_s.ok()) return _ember_s.error(); \
  } while (0)

// The settings table: one table per settings struct declares each field's flag,
// environment variable, default (the struct's initializer) and help text, with its validation.
// The same table parses (`set`), validates, renders the effective configuration (`dump`, for the
// log line and for the worker protocol, which carries engine settings as key/value pairs) and,
// through cli/settings_cli.h, declares the CLI11 options that print `--help` and read the
// environment. Adding a setting is one line: `t.add("--name", &S::field, "EMBER_NAME", "help")`.
// See docs/architecture.md, "Settings".
//
// Invariants: a key (the long flag without its dashes) names one field; `set` either stores a
// valid value or returns an error naming the flag and the bad value; dump() → set() round-trips.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "base/result.h"

namespace ember::settings {

// Text <-> value for the field types a table may hold (settings.cc).
Status parse_value(std::string_view text, int32_t& out);
Status parse_value(std::string_view text, int64_t& out);
Status parse_value(std::string_view text, double& out);
Status parse_value(std::string_view text, bool& out);
Status parse_value(std::string_view text, std::string& out);
Status parse_value(std::string_view text, std::vector<std::string>& out);  // comma-separated
std::string format_value(int32_t v);
std::string format_value(int64_t v);
std::string format_value(double v);
std::string format_value(bool v);
std::string format_value(const std::string& v);
std::string format_value(const std::vector<std::string>& v);
double as_number(int32_t v);
double as_number(int64_t v);
double as_number(double v);

// "-t,--threads" -> "threads"
std::string key_of(std::string_view flags);

template <typename S>
class Table {
 public:
  using Member = std::variant<int32_t S::*, int64_t S::*, double S::*, bool S::*, std::string S::*,
                              std::vector<std::string> S::*>;
  struct Field {
    std::string flags;  // CLI11 names, e.g. "-t,--threads"
    std::string key;    // "threads"
    std::string env;    // "" for none
    std::string help;
    Member member;
    std::optional<double> min, max;    // numbers only
    std::vector<std::string> choices;  // strings only: the values allowed (empty: any)
    bool secret = false;               // dump() shows "(set)" instead of the value
    bool hidden = false;               // left out of --help (test-only and env-only settings)
    Field& range(double lo, double hi) {
      min = lo;
      max = hi;
      return *this;
    }
    Field& one_of(std::vector<std::string> values) {
      choices = std::move(values);
      return *this;
    }
    Field& at_least(double lo) {
      min = lo;
      return *this;
    }
    Field& redact() {
      secret = true;
      return *this;
    }
    Field& hide() {
      hidden = true;
      return *this;
    }
  };

  template <typename T>
  Field& add(std::string flags, T S::*member, std::string env, std::string help) {
    std::string key = key_of(flags);
    EMBER_ASSERT(find(key) == nullptr);
    fields_.push_back(
        Field{std::move(flags), std::move(key), std::move(env), std::move(help), Member(member)});
    return fields_.back();
  }

  const std::vector<Field>& fields() const { return fields_; }
  const Field* find(std::string_view key) const {
    for (const auto& f : fields_) {
      if (f.key == key) return &f;
    }
    return nullptr;
  }

  // Parses `text` into the field `key` and validates it.
  Status set(S& s, std::string_view key, std::string_view text) const {
    const Field* f = find(key);
    if (!f) return fail("unknown setting '{}'", key);
    return std::visit(
        [&](auto m) -> Status {
          auto v = s.*m;
          if (auto st = parse_value(text, v); !st) return fail("--{}: {}", f->key, st.message());
          if (auto st = check(*f, v); !st) return st;
          s.*m = std::move(v);
          return {};
        },
        f->member);
  }

  // Checks every field's range (values set directly in code, e.g. by CLI11).
  Status validate(const S& s) const {
    for (const auto& f : fields_) {
      auto st = std::visit([&](auto m) { return check(f, s.*m); }, f.member);
      if (!st) return st;
    }
    return {};
  }

  std::string get(const S& s, const Field& f) const {
    return std::visit([&](auto m) { return format_value(s.*m); }, f.member);
  }

  // Every field as (key, value): the worker protocol's Configure frame.
  std::vector<std::pair<std::string, std::string>> dump(const S& s) const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& f : fields_) out.emplace_back(f.key, get(s, f));
    return out;
  }

  Status apply(S& s, const std::vector<std::pair<std::string, std::string>>& kv) const {
    for (const auto& [k, v] : kv) EMBER_TRY_STATUS(set(s, k, v));
    return {};
  }

  // One line for the log: "threads=4 ctx-size=0 api-key=(set) ...".
  std::string describe(const S& s) const {
    std::string out;
    for (const auto& f : fields_) {
      if (f.hidden) continue;
      std::string v = get(s, f);
      if (f.secret) v = v.empty() ? "(none)" : "(set)";
      out += (out.empty() ? "" : " ") + f.key + "=" + v;
    }
    return out;
  }

 private:
  template <typename T>
  static Status check(const Field& f, const T& v) {
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      double x = as_number(v);
      if ((f.min && x < *f.min) || (f.max && x > *f.max)) {
        std::string lo = f.min ? format_value(*f.min) : "-inf";
        std::string hi = f.max ? format_value(*f.max) : "inf";
        return fail("--{}: {} is out of range [{}, {}]", f.key, format_value(v), lo, hi);
      }
    }
    if constexpr (std::is_same_v<T, std::string>) {
      if (!f.choices.empty() &&
          std::find(f.choices.begin(), f.choices.end(), v) == f.choices.end()) {
        std::string allowed;
        for (const auto& c : f.choices) allowed += (allowed.empty() ? "" : ", ") + c;
        return fail("--{}: '{}' is not one of {}", f.key, v, allowed);
      }
    }
    return {};
  }

  std::vector<Field> fields_;
};

}  // namespace ember::settings

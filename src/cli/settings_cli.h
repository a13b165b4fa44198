// Binds a settings table (base/settings.h) into a CLI11 app: one option per field with its
// flag, environment variable, help and default (the struct's current value), so `--help` and
// the environment come from the table. Validation stays the table's (validate_or_exit).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <limits>
#include <string_view>

#include "base/settings.h"

namespace ember::cli {

template <typename S>
void bind_settings(CLI::App& app, const settings::Table<S>& table, S& s) {
  for (const auto& f : table.fields()) {
    std::visit(
        [&](auto m) {
          using T = std::remove_reference_t<decltype(s.*m)>;
          CLI::Option* opt;
          if constexpr (std::is_same_v<T, bool>) {
            opt = app.add_flag(f.flags, s.*m, f.help);
          } else {
            opt = app.add_option(f.flags, s.*m, f.help);
            if (!f.secret) opt->capture_default_str();
          }
          if (!f.env.empty()) opt->envname(f.env);
          if (f.hidden) opt->group("");
        },
        f.member);
  }
}

// Declares one field of a table as an option of another command, bound to `value` there: its
// environment variable, its range or choices, and its default (the settings struct's) come from
// the table, so `ember run` and `ember bench` read e.g. EMBER_SIMD_LEVEL as `ember serve` does.
// `flags` and `help`, when given, replace the field's (a command's own spelling and wording).
template <typename S, typename T>
CLI::Option* add_setting(CLI::App& app, const settings::Table<S>& table, std::string_view key,
                         T& value, std::string flags = "", std::string help = "") {
  const auto* f = table.find(key);
  EMBER_ASSERT(f != nullptr);
  auto* member = std::get_if<T S::*>(&f->member);
  EMBER_ASSERT(member != nullptr);  // the variable has the field's type
  value = S{}.**member;
  CLI::Option* opt =
      app.add_option(flags.empty() ? f->flags : flags, value, help.empty() ? f->help : help);
  opt->capture_default_str();
  if (!f->env.empty()) opt->envname(f->env);
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    if (f->min || f->max) {
      // In the field's own type, so that --help shows e.g. "INT in [1 - 1073741824]".
      opt->check(CLI::Range(static_cast<T>(f->min.value_or(std::numeric_limits<T>::lowest())),
                            static_cast<T>(f->max.value_or(std::numeric_limits<T>::max()))));
    }
  }
  if (!f->choices.empty()) opt->check(CLI::IsMember(f->choices));
  return opt;
}

// Checks the table's ranges after parsing; prints the error and returns false when one fails.
template <typename S>
bool validate_or_report(const settings::Table<S>& table, const S& s, const char* command) {
  auto st = table.validate(s);
  if (!st) std::fprintf(stderr, "%s: %s\n", command, st.message().c_str());
  return st.ok();
}

}  // namespace ember::cli

// Binds a settings table (base/settings.h) into a CLI11 app: one option per field with its
// flag, environment variable, help and default (the struct's current value), so `--help` and
// the environment come from the table. Validation stays the table's (validate_or_exit).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>

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

// Checks the table's ranges after parsing; prints the error and returns false when one fails.
template <typename S>
bool validate_or_report(const settings::Table<S>& table, const S& s, const char* command) {
  auto st = table.validate(s);
  if (!st) std::fprintf(stderr, "%s: %s\n", command, st.message().c_str());
  return st.ok();
}

}  // namespace ember::cli

// Helpers for the jinja interpreter tests: render a template source against a JSON context.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "text/jinja/template.h"

namespace ember::text::jinja::testing {

inline std::tm fixed_now() {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  return tm;
}

// Renders `src` with `ctx` (a JSON object); returns the output or "ERROR: <message>".
inline std::string render(const std::string& src, const std::string& ctx = "{}") {
  auto t = Template::parse(src, "t");
  if (!t.ok()) return "ERROR: " + t.message();
  auto r = t->render(Value::from_json(nlohmann::ordered_json::parse(ctx)), fixed_now());
  if (!r.ok()) return "ERROR: " + r.message();
  return r.value();
}

// The parse-time error message, or "" when the template parses.
inline std::string parse_error(const std::string& src) {
  auto t = Template::parse(src, "t");
  return t.ok() ? "" : t.message();
}

}  // namespace ember::text::jinja::testing

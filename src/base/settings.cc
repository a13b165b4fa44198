#include "base/settings.h"

#include <charconv>
#include <cmath>

namespace ember::settings {
namespace {

template <typename T>
Status parse_int(std::string_view text, T& out) {
  T v{};
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range) return fail("'{}' is out of range", text);
  if (ec != std::errc() || p != text.data() + text.size()) {
    return fail("'{}' is not an integer", text);
  }
  out = v;
  return {};
}

}  // namespace

Status parse_value(std::string_view text, int32_t& out) {
  return parse_int(text, out);
}
Status parse_value(std::string_view text, int64_t& out) {
  return parse_int(text, out);
}
Status parse_value(std::string_view text, double& out) {
  double v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || !std::isfinite(v)) {
    return fail("'{}' is not a number", text);
  }
  out = v;
  return {};
}
Status parse_value(std::string_view text, bool& out) {
  if (text == "true" || text == "1" || text == "on" || text == "yes") {
    out = true;
  } else if (text == "false" || text == "0" || text == "off" || text == "no") {
    out = false;
  } else {
    return fail("'{}' is not true or false", text);
  }
  return {};
}
Status parse_value(std::string_view text, std::string& out) {
  out = std::string(text);
  return {};
}
Status parse_value(std::string_view text, std::vector<std::string>& out) {
  out.clear();
  while (!text.empty()) {
    size_t comma = text.find(',');
    out.emplace_back(text.substr(0, comma));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return {};
}

std::string format_value(int32_t v) {
  return std::to_string(v);
}
std::string format_value(int64_t v) {
  return std::to_string(v);
}
std::string format_value(double v) {
  return fmt::format("{}", v);  // shortest form that reads back exactly
}
std::string format_value(bool v) {
  return v ? "true" : "false";
}
std::string format_value(const std::string& v) {
  return v;
}
std::string format_value(const std::vector<std::string>& v) {
  return fmt::format("{}", fmt::join(v, ","));
}
double as_number(int32_t v) {
  return v;
}
double as_number(int64_t v) {
  return static_cast<double>(v);
}
double as_number(double v) {
  return v;
}

std::string key_of(std::string_view flags) {
  // The last name in "-t,--threads" is the long one.
  size_t comma = flags.rfind(',');
  std::string_view name = comma == std::string_view::npos ? flags : flags.substr(comma + 1);
  while (!name.empty() && name.front() == '-') name.remove_prefix(1);
  return std::string(name);
}

}  // namespace ember::settings

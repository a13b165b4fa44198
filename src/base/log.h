// Logging: a thin layer over spdlog so the rest of ember never includes it directly.
// Logs go to stderr (stdout is reserved for program output and, in the worker, the protocol).
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace ember::log {

// level: "trace", "debug", "info", "warn", "error", "off". Unknown names keep "info".
void init(std::string_view level);

template <typename... Args>
void info(spdlog::format_string_t<Args...> f, Args&&... args) {
  spdlog::info(f, std::forward<Args>(args)...);
}
template <typename... Args>
void warn(spdlog::format_string_t<Args...> f, Args&&... args) {
  spdlog::warn(f, std::forward<Args>(args)...);
}
template <typename... Args>
void error(spdlog::format_string_t<Args...> f, Args&&... args) {
  spdlog::error(f, std::forward<Args>(args)...);
}
template <typename... Args>
void debug(spdlog::format_string_t<Args...> f, Args&&... args) {
  spdlog::debug(f, std::forward<Args>(args)...);
}

}  // namespace ember::log

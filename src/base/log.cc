#include "base/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace ember::log {

void init(std::string_view level) {
  auto logger = spdlog::stderr_color_mt("ember");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  auto lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off") lvl = spdlog::level::info;
  spdlog::set_level(lvl);
}

}  // namespace ember::log

#include "cli/stop_report.h"

#include <sstream>

#include "base/file.h"
#include "base/settings.h"

namespace ember::cli {

std::string stop_report_path(const std::string& pid_file) {
  return pid_file + ".stop";
}

Status write_stop_report(const std::string& path, const StopReport& r) {
  std::string text = fmt::format("exit {}\nin_flight {}\ncancelled {}\nengine_stop {}\n",
                                 r.exit_code, r.in_flight, r.cancelled, r.engine_stop);
  return write_file_atomic(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

Result<StopReport> read_stop_report(const std::string& path) {
  EMBER_TRY(std::string text, read_file(path));
  StopReport r;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto sp = line.find(' ');
    std::string key = line.substr(0, sp);
    std::string value = sp == std::string::npos ? "" : line.substr(sp + 1);
    Status st;
    if (key == "exit") st = settings::parse_value(value, r.exit_code);
    if (key == "in_flight") st = settings::parse_value(value, r.in_flight);
    if (key == "cancelled") st = settings::parse_value(value, r.cancelled);
    if (key == "engine_stop") r.engine_stop = value;
    if (!st) return fail("{}: {}: {}", path, key, st.message());
  }
  return r;
}

}  // namespace ember::cli

#include "cli/stop_report.h"

#include <sstream>

#include "base/file.h"
#include "base/settings.h"

namespace ember::cli {

namespace {

Status write_text(const std::string& path, const std::string& text) {
  return write_file_atomic(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

// Calls on_line(key, value) for each "key value" line; stops at its first error.
template <typename F>
Status for_each_line(const std::string& path, F&& on_line) {
  EMBER_TRY(std::string text, read_file(path));
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto sp = line.find(' ');
    std::string key = line.substr(0, sp);
    std::string value = sp == std::string::npos ? "" : line.substr(sp + 1);
    if (Status st = on_line(key, value); !st) return fail("{}: {}: {}", path, key, st.message());
  }
  return {};
}

}  // namespace

std::string stop_report_path(const std::string& pid_file) {
  return pid_file + ".stop";
}

Status write_stop_report(const std::string& path, const StopReport& r) {
  return write_text(path, fmt::format("exit {}\nin_flight {}\ncancelled {}\nengine_stop {}\n",
                                      r.exit_code, r.in_flight, r.cancelled, r.engine_stop));
}

Result<StopReport> read_stop_report(const std::string& path) {
  StopReport r;
  EMBER_TRY_STATUS(for_each_line(path, [&](const std::string& key, const std::string& value) {
    Status st;
    if (key == "exit") st = settings::parse_value(value, r.exit_code);
    if (key == "in_flight") st = settings::parse_value(value, r.in_flight);
    if (key == "cancelled") st = settings::parse_value(value, r.cancelled);
    if (key == "engine_stop") r.engine_stop = value;
    return st;
  }));
  return r;
}

std::string warm_report_path(const std::string& pid_file) {
  return pid_file + ".warm";
}

Status write_warm_report(const std::string& path, const engine::WarmReport& r) {
  return write_text(path, fmt::format("ok {}\nblocks {}\nbytes {}\nseconds {}\nmessage {}\n",
                                      r.ok ? 1 : 0, r.blocks, r.bytes, r.seconds, r.message));
}

Result<engine::WarmReport> read_warm_report(const std::string& path) {
  engine::WarmReport r;
  int ok = 0;
  EMBER_TRY_STATUS(for_each_line(path, [&](const std::string& key, const std::string& value) {
    Status st;
    if (key == "ok") st = settings::parse_value(value, ok);
    if (key == "blocks") st = settings::parse_value(value, r.blocks);
    if (key == "bytes") st = settings::parse_value(value, r.bytes);
    if (key == "seconds") st = settings::parse_value(value, r.seconds);
    if (key == "message") r.message = value;
    return st;
  }));
  r.ok = ok == 1;
  return r;
}

}  // namespace ember::cli

// The stop report: a few "key value" lines `ember serve --pid-file P` writes to P.stop as it
// exits, so `ember stop` (which cannot wait for a process that is not its child) can say what
// the drain did and with which status the server exited. The warm report (P.warm) is written
// the same way when SIGUSR1 asks the server to save its warm state now (`ember restart`).
#pragma once

#include <optional>
#include <string>

#include "base/result.h"
#include "engine/warm_cache.h"

namespace ember::cli {

struct StopReport {
  int exit_code = 0;
  int in_flight = 0;        // requests in flight when the drain began
  int cancelled = 0;        // of those, cancelled at the drain deadline
  std::string engine_stop;  // how the engine stopped, e.g. "eof (exit 0)"
};

std::string stop_report_path(const std::string& pid_file);
Status write_stop_report(const std::string& path, const StopReport& r);
Result<StopReport> read_stop_report(const std::string& path);

std::string warm_report_path(const std::string& pid_file);
Status write_warm_report(const std::string& path, const engine::WarmReport& r);
Result<engine::WarmReport> read_warm_report(const std::string& path);

}  // namespace ember::cli

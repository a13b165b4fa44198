#include "server/sse.h"

namespace ember::server {

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse_event(const nlohmann::json& j) {
  // A JSON dump never contains a raw newline, so one `data:` line carries the whole event.
  return "data: " + dump_json(j) + "\n\n";
}

}  // namespace ember::server

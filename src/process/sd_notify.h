// systemd's notify protocol (sd_notify(3)), written against the datagram protocol itself:
// each notification is one datagram of "KEY=VALUE" lines sent to the AF_UNIX socket named by
// $NOTIFY_SOCKET (read through the settings table, never getenv here). A leading '@' names an
// abstract socket. With no socket configured every call is a no-op, so the code paths are the
// same under systemd and outside it.
#pragma once

#include <string>
#include <string_view>

#include "base/result.h"

namespace ember::process {

class SdNotifier {
 public:
  explicit SdNotifier(std::string socket_path = {}) : path_(std::move(socket_path)) {}
  bool enabled() const { return !path_.empty(); }
  // e.g. "READY=1\nSTATUS=serving", "STOPPING=1", "WATCHDOG=1".
  Status notify(std::string_view state) const;

 private:
  std::string path_;
};

}  // namespace ember::process

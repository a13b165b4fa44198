#include "process/sd_notify.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>

namespace ember::process {

Status SdNotifier::notify(std::string_view state) const {
  if (!enabled()) return {};
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path_.size() >= sizeof addr.sun_path) {
    return fail("NOTIFY_SOCKET {}: path too long", path_);
  }
  if (path_[0] != '/' && path_[0] != '@') {
    return fail("NOTIFY_SOCKET {}: neither an absolute path nor an abstract '@' name", path_);
  }
  memcpy(addr.sun_path, path_.data(), path_.size());
  if (path_[0] == '@') addr.sun_path[0] = '\0';  // abstract namespace: no terminating NUL
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path_.size() +
                                         (path_[0] == '@' ? 0 : 1));
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail("NOTIFY_SOCKET: socket: {}", strerror(errno));
  ssize_t n = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                       reinterpret_cast<const sockaddr*>(&addr), len);
  int err = errno;
  ::close(fd);
  if (n < 0) return fail("NOTIFY_SOCKET {}: {}", path_, strerror(err));
  return {};
}

}  // namespace ember::process

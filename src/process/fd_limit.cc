#include "process/fd_limit.h"

#include <errno.h>

#include <charconv>
#include <cstring>

#include "base/file.h"

namespace ember::process {

FdLimit raise_fd_limit() {
  FdLimit r;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) {
    r.error = std::strerror(errno);
    return r;
  }
  r.before = r.after = lim.rlim_cur;
  r.hard = lim.rlim_max;
  if (lim.rlim_cur == RLIM_INFINITY) return r;
  rlim_t target = lim.rlim_max;
  if (target == RLIM_INFINITY) {
    auto text = read_file("/proc/sys/fs/nr_open");
    unsigned long long nr_open = 0;
    if (!text ||
        std::from_chars(text->data(), text->data() + text->size(), nr_open).ec != std::errc()) {
      r.error = "the hard limit is unlimited and /proc/sys/fs/nr_open is unreadable";
      return r;
    }
    target = static_cast<rlim_t>(nr_open);
  }
  if (lim.rlim_cur >= target) return r;
  lim.rlim_cur = target;
  if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) {
    r.error = std::strerror(errno);
    return r;
  }
  r.after = target;
  return r;
}

}  // namespace ember::process

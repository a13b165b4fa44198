// The open-files limit (RLIMIT_NOFILE). `ember serve` raises its soft limit to the hard limit at
// start: a connection is a descriptor, and the soft default (often 1024) is a setting for
// programs that still use select(2), which ember does not. The engine worker inherits it.
#pragma once

#include <sys/resource.h>

#include <string>

namespace ember::process {

struct FdLimit {
  rlim_t before = 0;  // the soft limit found
  rlim_t after = 0;   // the soft limit now
  rlim_t hard = 0;
  std::string error;  // why it could not be raised; empty: it was, or it already was the hard
};

// Raises the soft RLIMIT_NOFILE to the hard limit (or to fs.nr_open when the hard limit is
// unlimited, which the kernel refuses as a soft value).
FdLimit raise_fd_limit();

}  // namespace ember::process

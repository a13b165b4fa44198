#include "process/child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>

extern char** environ;

namespace ember::process {

bool ExitStatus::exited() const {
  return WIFEXITED(raw);
}
int ExitStatus::code() const {
  return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
}
bool ExitStatus::signaled() const {
  return WIFSIGNALED(raw);
}
int ExitStatus::signal() const {
  return WIFSIGNALED(raw) ? WTERMSIG(raw) : 0;
}
std::string ExitStatus::describe() const {
  if (exited()) return fmt::format("exit {}", code());
  if (signaled()) {
    const char* name = sigabbrev_np(signal());
    return fmt::format("killed by signal {} (SIG{})", signal(), name ? name : "?");
  }
  return fmt::format("status {:#x}", raw);
}

namespace {

struct SpawnAttrs {
  posix_spawnattr_t attr;
  posix_spawn_file_actions_t fa;
  SpawnAttrs() {
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_init(&fa);
  }
  ~SpawnAttrs() {
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
  }
};

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

Result<std::unique_ptr<Child>> Child::spawn(const SpawnOptions& opts) {
  EMBER_ASSERT(!opts.argv.empty());
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return fail("pipe: {}", strerror(errno));
  if (pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    return fail("pipe: {}", strerror(errno));
  }
  SpawnAttrs s;
  posix_spawn_file_actions_adddup2(&s.fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&s.fa, out[1], 1);
  posix_spawn_file_actions_addclosefrom_np(&s.fa, 3);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (opts.new_process_group) {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&s.attr, 0);
  }
  posix_spawnattr_setflags(&s.attr, flags);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&s.attr, &none);
  posix_spawnattr_setsigdefault(&s.attr, &all);  // an ignored SIGPIPE must not be inherited

  std::vector<char*> argv;
  for (const auto& a : opts.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &s.fa, &s.attr, argv.data(), environ);
  ::close(in[0]);
  ::close(out[1]);
  if (rc != 0) {
    ::close(in[1]);
    ::close(out[0]);
    return fail("cannot start {}: {}", opts.argv[0], strerror(rc));
  }
  std::unique_ptr<Child> c(new Child());
  c->pid_ = pid;
  c->own_group_ = opts.new_process_group;
  c->in_fd_ = in[1];
  c->out_fd_ = out[0];
  // The pid cannot be reused before we reap it, so this pidfd names our child.
  c->pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  return c;
}

Child::~Child() {
  if (!try_reap()) {
    signal_group(SIGKILL);
    std::lock_guard lock(reap_mu_);
    int st = 0;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    status_ = ExitStatus{st};
  }
  close_stdin();
  close_fd(out_fd_);
  close_fd(pidfd_);
}

Status Child::write_stdin(std::span<const uint8_t> bytes) {
  std::lock_guard lock(in_mu_);
  if (in_fd_ < 0) return fail("the child's stdin is closed");
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::write(in_fd_, bytes.data() + off, bytes.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("write to child {}: {}", pid_, strerror(errno));
    }
    off += static_cast<size_t>(n);
  }
  return {};
}

void Child::close_stdin() {
  std::lock_guard lock(in_mu_);
  close_fd(in_fd_);
}

bool Child::signal_group(int sig) {
  std::lock_guard lock(reap_mu_);
  if (status_) return false;
  return (own_group_ ? ::killpg(pid_, sig) : ::kill(pid_, sig)) == 0;
}

std::optional<ExitStatus> Child::try_reap() {
  std::lock_guard lock(reap_mu_);
  if (status_) return status_;
  int st = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &st, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) status_ = ExitStatus{st};
  return status_;
}

std::optional<ExitStatus> Child::wait_for(std::chrono::milliseconds timeout) {
  if (auto st = try_reap()) return st;
  int ms = static_cast<int>(std::min<int64_t>(timeout.count(), INT_MAX));
  if (pidfd_ >= 0) {
    pollfd p{pidfd_, POLLIN, 0};
    ::poll(&p, 1, std::max(0, ms));
  } else {  // no pidfd (old kernel): sleep in short slices
    ::usleep(static_cast<useconds_t>(std::min(ms, 10) * 1000));
  }
  return try_reap();
}

Status exit_with_parent(pid_t expected) {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return fail("prctl: {}", strerror(errno));
  if (::getppid() != expected) {
    return fail("the parent process {} is gone (parent is now {})", expected, ::getppid());
  }
  return {};
}

}  // namespace ember::process

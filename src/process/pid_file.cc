#include "process/pid_file.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <optional>

#include "base/file.h"
#include "base/log.h"

namespace ember::process {
namespace {

bool named_ember(std::string path) {
  const std::string deleted = " (deleted)";  // a rebuilt binary
  if (path.size() > deleted.size() && path.ends_with(deleted)) {
    path.resize(path.size() - deleted.size());
  }
  return std::filesystem::path(path).filename() == "ember";
}

std::optional<pid_t> parse_pid(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  pid_t pid = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), pid);
  if (ec != std::errc() || p != s.data() + s.size() || pid <= 0) return std::nullopt;
  return pid;
}

}  // namespace

bool process_is_ember(pid_t pid) {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink(fmt::format("/proc/{}/exe", pid), ec);
  if (!ec && named_ember(exe.string())) return true;
  auto cmdline = read_file(fmt::format("/proc/{}/cmdline", pid));
  if (!cmdline || cmdline->empty()) return false;
  return named_ember(std::string(cmdline->c_str()));  // argv[0], up to its NUL
}

PidFileInfo inspect_pid_file(const std::string& path) {
  PidFileInfo info;
  if (!std::filesystem::exists(path)) {
    info.detail =
        fmt::format("{}: no such pid file (is ember serve running with --pid-file?)", path);
    return info;
  }
  auto text = read_file(path);
  auto pid = text ? parse_pid(*text) : std::nullopt;
  if (!pid) {
    info.state = PidState::Invalid;
    info.detail = fmt::format("{}: does not hold a process id", path);
    return info;
  }
  info.pid = *pid;
  if (::kill(*pid, 0) != 0 && errno == ESRCH) {
    info.state = PidState::Dead;
    info.detail = fmt::format("{}: stale pid file: process {} is not running", path, *pid);
  } else if (!process_is_ember(*pid)) {
    info.state = PidState::NotEmber;
    info.detail = fmt::format("{}: stale pid file: process {} is not ember", path, *pid);
  } else {
    info.state = PidState::Running;
    info.detail = fmt::format("ember is already running as process {}", *pid);
  }
  return info;
}

bool wait_gone(pid_t pid, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;
  pollfd p{fd, POLLIN, 0};
  const auto deadline = Clock::now() + timeout;
  int r = 0;
  for (;;) {
    const auto until = deadline - Clock::now();  // rounded up: never wait short of the timeout
    if (until <= until.zero()) break;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(until);
    r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r != 0 && !(r < 0 && errno == EINTR)) break;
  }
  ::close(fd);
  return r > 0;
}

Result<PidFile> PidFile::create(const std::string& path, pid_t predecessor) {
  auto info = inspect_pid_file(path);
  if (info.state == PidState::Running && predecessor != 0 && info.pid == predecessor) {
    log::info("{}: taking it over from pid {}, which drains", path, predecessor);
  } else if (info.state == PidState::Running && info.pid != ::getpid()) {
    return fail("{}: {}; stop it first (ember stop --pid-file {})", path, info.detail, path);
  }
  if (info.state == PidState::Dead || info.state == PidState::NotEmber ||
      info.state == PidState::Invalid) {
    log::warn("{}; replacing it", info.detail);
  }
  std::string text = fmt::format("{}\n", ::getpid());
  EMBER_TRY_STATUS(
      write_file_atomic(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()}));
  PidFile f;
  f.path_ = path;
  return f;
}

PidFile& PidFile::operator=(PidFile&& o) noexcept {
  if (this != &o) {
    PidFile dying(std::move(*this));
    path_ = std::move(o.path_);
    o.path_.clear();
  }
  return *this;
}

PidFile::~PidFile() {
  if (path_.empty()) return;
  auto text = read_file(path_);
  if (text && parse_pid(*text) == ::getpid()) {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
}

}  // namespace ember::process

#include "process/pid_file.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <filesystem>

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

template <typename T>
std::optional<T> parse_number(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

struct Contents {
  pid_t pid = 0;
  std::optional<uint64_t> start_time;
  std::string boot_id;
  uint16_t port = 0;
};

// The first line is the pid; then "key value" lines. nullopt: not a pid file.
std::optional<Contents> parse_contents(std::string_view text) {
  Contents c;
  size_t eol = text.find('\n');
  auto pid = parse_number<pid_t>(text.substr(0, eol));
  if (!pid || *pid <= 0) return std::nullopt;
  c.pid = *pid;
  while (eol != std::string_view::npos && eol + 1 < text.size()) {
    const size_t start = eol + 1;
    eol = text.find('\n', start);
    std::string_view line = text.substr(start, eol == std::string_view::npos ? eol : eol - start);
    const size_t sp = line.find(' ');
    std::string_view key = line.substr(0, sp);
    std::string_view value = sp == std::string_view::npos ? "" : line.substr(sp + 1);
    if (key == "start_time") {
      c.start_time = parse_number<uint64_t>(value);
      if (!c.start_time) return std::nullopt;
    } else if (key == "boot_id") {
      c.boot_id = std::string(value);
    } else if (key == "port") {
      auto port = parse_number<uint16_t>(value);
      if (!port) return std::nullopt;
      c.port = *port;
    }
  }
  return c;
}

std::string current_boot_id() {
  auto text = read_file("/proc/sys/kernel/random/boot_id");
  if (!text) return {};
  std::string id = *text;
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

std::optional<pid_t> first_line_pid(const std::string& path) {
  auto text = read_file(path);
  if (!text) return std::nullopt;
  auto c = parse_contents(*text);
  if (!c) return std::nullopt;
  return c->pid;
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

std::optional<uint64_t> process_start_time(pid_t pid) {
  auto stat = read_file(fmt::format("/proc/{}/stat", pid));
  if (!stat) return std::nullopt;
  // "PID (COMM) STATE ...": COMM may hold spaces and parentheses, so count from the last ')'.
  // Field 3 (state) is the first after it; field 22 (starttime) the twentieth.
  size_t pos = stat->rfind(')');
  if (pos == std::string::npos) return std::nullopt;
  std::string_view rest = std::string_view(*stat).substr(pos + 1);
  for (int field = 3; field <= 22; ++field) {
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    const size_t end = std::min(rest.find(' '), rest.size());
    if (field == 22) return parse_number<uint64_t>(rest.substr(0, end));
    rest.remove_prefix(end);
  }
  return std::nullopt;
}

PidFileInfo inspect_pid_file(const std::string& path) {
  PidFileInfo info;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    info.detail =
        fmt::format("{}: no such pid file (is ember serve running with --pid-file?)", path);
    return info;
  }
  info.state = PidState::Invalid;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxPidFileBytes) {
    info.detail = fmt::format("{}: {} bytes, more than a pid file's limit of {}: not a pid file",
                              path, size, kMaxPidFileBytes);
    return info;
  }
  auto text = read_file(path);
  auto c = text ? parse_contents(*text) : std::nullopt;
  if (!c) {
    info.detail = fmt::format("{}: does not hold a process id", path);
    return info;
  }
  info.pid = c->pid;
  info.port = c->port;
  info.identity_known = c->start_time.has_value();
  const pid_t pid = c->pid;
  if (::kill(pid, 0) != 0 && errno == ESRCH) {
    info.state = PidState::Dead;
    info.detail = fmt::format("{}: stale pid file: process {} is not running", path, pid);
    return info;
  }
  if (!c->start_time) {  // written by an older ember: the name is all there is to check
    if (!process_is_ember(pid)) {
      info.state = PidState::NotEmber;
      info.detail = fmt::format("{}: stale pid file: process {} is not ember", path, pid);
    } else {
      info.state = PidState::Running;
      info.detail = fmt::format("ember is already running as process {}", pid);
    }
    return info;
  }
  const std::string boot_id = current_boot_id();
  if (!c->boot_id.empty() && !boot_id.empty() && c->boot_id != boot_id) {
    info.state = PidState::NotWriter;
    info.detail = fmt::format(
        "{}: stale pid file: pid {} is not the server that wrote it (written before the last "
        "boot)",
        path, pid);
    return info;
  }
  const auto start = process_start_time(pid);
  if (!start) {
    info.state = PidState::Dead;  // gone since the kill(0) above
    info.detail = fmt::format("{}: stale pid file: process {} is not running", path, pid);
  } else if (*start != *c->start_time) {
    info.state = PidState::NotWriter;
    info.detail = fmt::format(
        "{}: stale pid file: pid {} is not the server that wrote it (start time {} differs from "
        "the recorded {})",
        path, pid, *start, *c->start_time);
  } else {
    info.state = PidState::Running;
    info.detail = fmt::format("ember is already running as process {}", pid);
  }
  return info;
}

namespace {

bool wait_fd(int fd, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
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
  return r > 0;
}

int pidfd_open(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

}  // namespace

Result<PinnedProcess> PinnedProcess::pin(const std::string& path) {
  auto first = inspect_pid_file(path);
  if (first.state != PidState::Running) return fail("{}", first.detail);
  PinnedProcess p;
  p.fd_ = pidfd_open(first.pid);
  if (p.fd_ < 0) {
    if (errno == ESRCH) return fail("{}: process {} exited", path, first.pid);
    return fail("pidfd_open({}): {}", first.pid, std::strerror(errno));
  }
  // Checked again now that the pidfd holds whatever process had the pid: if that one is not
  // the writer, the file no longer matches it.
  p.info_ = inspect_pid_file(path);
  if (p.info_.state != PidState::Running || p.info_.pid != first.pid) {
    return fail("{}", p.info_.detail);
  }
  return p;
}

PinnedProcess::~PinnedProcess() {
  if (fd_ >= 0) ::close(fd_);
}

Status PinnedProcess::signal(int signo) const {
  if (::syscall(SYS_pidfd_send_signal, fd_, signo, nullptr, 0) != 0) {
    return fail("cannot signal process {}: {}", info_.pid, std::strerror(errno));
  }
  return {};
}

bool PinnedProcess::wait_gone(std::chrono::milliseconds timeout) const {
  return wait_fd(fd_, timeout);
}

Result<PidFile> PidFile::create(const std::string& path, pid_t predecessor) {
  auto info = inspect_pid_file(path);
  if (info.state == PidState::Running && predecessor != 0 && info.pid == predecessor) {
    log::info("{}: taking it over from pid {}, which drains", path, predecessor);
  } else if (info.state == PidState::Running && info.pid != ::getpid()) {
    return fail("{}: {}; stop it first (ember stop --pid-file {})", path, info.detail, path);
  }
  if (info.state == PidState::Dead || info.state == PidState::NotEmber ||
      info.state == PidState::NotWriter || info.state == PidState::Invalid) {
    log::warn("{}; replacing it", info.detail);
  }
  auto start = process_start_time(::getpid());
  if (!start) return fail("{}: cannot read this process's start time from /proc/self/stat", path);
  PidFile f;
  f.start_time_ = *start;
  f.boot_id_ = current_boot_id();
  f.path_ = path;
  if (auto st = f.write(); !st) {
    f.path_.clear();  // never written: nothing of ours to remove
    return fail("{}", st.message());
  }
  return f;
}

Status PidFile::write() const {
  std::string text = fmt::format("{}\nstart_time {}\n", ::getpid(), start_time_);
  if (!boot_id_.empty()) text += fmt::format("boot_id {}\n", boot_id_);
  if (port_ != 0) text += fmt::format("port {}\n", port_);
  return write_file_atomic(path_, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

Status PidFile::set_port(uint16_t port) {
  if (path_.empty()) return {};
  port_ = port;
  return write();
}

PidFile::PidFile(PidFile&& o) noexcept
    : path_(std::move(o.path_)),
      start_time_(o.start_time_),
      boot_id_(std::move(o.boot_id_)),
      port_(o.port_) {
  o.path_.clear();
}

PidFile& PidFile::operator=(PidFile&& o) noexcept {
  if (this != &o) {
    PidFile dying(std::move(*this));
    path_ = std::move(o.path_);
    start_time_ = o.start_time_;
    boot_id_ = std::move(o.boot_id_);
    port_ = o.port_;
    o.path_.clear();
  }
  return *this;
}

PidFile::~PidFile() {
  if (path_.empty()) return;
  if (first_line_pid(path_) == ::getpid()) {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
}

}  // namespace ember::process

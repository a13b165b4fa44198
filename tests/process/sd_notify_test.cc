#include "process/sd_notify.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <filesystem>

namespace ember::process {
namespace {

// A datagram socket bound to `name` (a path, or '@' + an abstract name).
struct Listener {
  int fd = -1;
  explicit Listener(const std::string& name) {
    fd = ::socket(AF_UNIX, SOCK_DGRAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path, name.data(), name.size());
    if (name[0] == '@') a.sun_path[0] = '\0';
    socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() +
                                           (name[0] == '@' ? 0 : 1));
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), len), 0) << strerror(errno);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~Listener() { ::close(fd); }
  std::string recv() {
    char buf[512];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }
};

TEST(SdNotify, sends_one_datagram_to_a_path_socket) {
  auto path =
      (std::filesystem::temp_directory_path() / fmt::format("ember-notify-{}", getpid())).string();
  std::filesystem::remove(path);
  Listener l(path);
  SdNotifier n(path);
  ASSERT_TRUE(n.notify("READY=1\nSTATUS=serving").ok());
  EXPECT_EQ(l.recv(), "READY=1\nSTATUS=serving");
  std::filesystem::remove(path);
}

TEST(SdNotify, an_at_sign_names_an_abstract_socket) {
  std::string name = fmt::format("@ember-notify-test-{}", getpid());
  Listener l(name);
  ASSERT_TRUE(SdNotifier(name).notify("STOPPING=1").ok());
  EXPECT_EQ(l.recv(), "STOPPING=1");
}

TEST(SdNotify, without_a_socket_it_does_nothing) {
  SdNotifier n;
  EXPECT_FALSE(n.enabled());
  EXPECT_TRUE(n.notify("READY=1").ok());
}

TEST(SdNotify, a_relative_socket_name_is_an_error) {
  auto s = SdNotifier("relative/sock").notify("READY=1");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("relative/sock"), std::string::npos);
}

}  // namespace
}  // namespace ember::process

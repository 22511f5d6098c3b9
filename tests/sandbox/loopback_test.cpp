// run_request::loopback (sandbox/process.hpp), in the real sandbox with real subprocesses: with it
// on, a command binds, listens on and connects to 127.0.0.1 inside its own network namespace (what
// ncu needs to reach the target it injected itself into); with it off, it cannot; and either way a
// port the host listens on at 127.0.0.1 stays out of reach.
#include "sandbox/process.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <filesystem>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>

namespace leap::sandbox {
namespace {

// Python: a listener on 127.0.0.1 (an ephemeral port), a client connecting to it, a byte across;
// then a connection to the host's port `host_port`. Prints "inside ok" or "inside failed: <why>",
// then "host reached" or "host unreachable: <why>".
constexpr const char* k_script = R"(import socket, sys
try:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(('127.0.0.1', 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname(), timeout=5)
    peer, _ = server.accept()
    client.sendall(b'x')
    assert peer.recv(1) == b'x'
    print('inside ok')
except Exception as e:
    print('inside failed: %r' % (e,))
try:
    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=2)
    print('host reached')
except Exception as e:
    print('host unreachable: %r' % (e,))
)";

// A listener of this (host) process on 127.0.0.1, kept open for the test's length.
class host_listener {
 public:
  host_listener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(fd_, 4) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
  }
  ~host_listener() {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }
  host_listener(const host_listener&) = delete;
  host_listener& operator=(const host_listener&) = delete;
  [[nodiscard]] int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// NOLINTNEXTLINE(readability-identifier-naming): gtest names the test suite after the fixture.
class LoopbackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists("/usr/bin/python3")) {
      GTEST_SKIP() << "no /usr/bin/python3";
    }
    ASSERT_GT(host_.port(), 0) << "no listener on the host's 127.0.0.1";
  }
  run_result run(bool loopback) {
    auto dir = scratch_dir::create(default_scratch_root(), "loopback-test-");
    EXPECT_TRUE(dir.ok()) << dir.err().message;
    if (!dir.ok()) {
      return {};
    }
    run_request request;
    request.argv = {"/usr/bin/python3", "-c", k_script, std::to_string(host_.port())};
    request.working_dir = dir->path();
    request.env = {{"PATH", "/usr/bin:/bin"}, {"LANG", "C.UTF-8"}};
    request.loopback = loopback;
    auto r = run_isolated(request);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.err().message);
    return r.ok() ? r.value() : run_result{};
  }
  // Only where the run had a network namespace of its own is there a loopback to keep down.
  static bool has_netns(const run_result& r) {
    return r.isolation.find(",net namespaces") != std::string::npos;
  }
  host_listener host_;
};

TEST_F(LoopbackTest, OnTheCommandTalksToItselfOver127001ButNotToTheHost) {
  const auto r = run(true);
  if (!has_netns(r)) {
    GTEST_SKIP() << "no network namespace: " << r.isolation;
  }
  EXPECT_TRUE(r.exited && r.exit_code == 0) << r.stderr_text;
  EXPECT_NE(r.stdout_text.find("inside ok"), std::string::npos) << r.stdout_text << r.stderr_text;
  EXPECT_NE(r.stdout_text.find("host unreachable"), std::string::npos) << r.stdout_text;
  EXPECT_NE(r.isolation.find("loopback up"), std::string::npos) << r.isolation;
}

TEST_F(LoopbackTest, OffTheCommandCannotUse127001) {
  const auto r = run(false);
  if (!has_netns(r)) {
    GTEST_SKIP() << "no network namespace: " << r.isolation;
  }
  EXPECT_TRUE(r.exited && r.exit_code == 0) << r.stderr_text;
  EXPECT_NE(r.stdout_text.find("inside failed"), std::string::npos) << r.stdout_text;
  EXPECT_NE(r.stdout_text.find("host unreachable"), std::string::npos) << r.stdout_text;
  EXPECT_EQ(r.isolation.find("loopback up"), std::string::npos) << r.isolation;
}

// Without a network namespace there is nothing to bring up: the option changes nothing.
TEST_F(LoopbackTest, IgnoredWithoutANetworkNamespace) {
  auto dir = scratch_dir::create(default_scratch_root(), "loopback-test-");
  ASSERT_TRUE(dir.ok()) << dir.err().message;
  run_request request;
  request.argv = {"/bin/sh", "-c", "echo ran"};
  request.working_dir = dir->path();
  request.env = {{"PATH", "/usr/bin:/bin"}};
  request.isolate_network = false;
  request.loopback = true;
  auto r = run_isolated(request);
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->stdout_text, "ran\n");
  EXPECT_EQ(r->isolation.find("loopback up"), std::string::npos) << r->isolation;
}

}  // namespace
}  // namespace leap::sandbox

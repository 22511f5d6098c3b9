// A raw client socket for the tests of the HTTP gate (policy/http/http.hpp) and the policy
// server behind it: it sends exactly the bytes a test writes, as slowly as it likes, and notes what
// the server answered and when it closed the connection. Every wait has a deadline.
#pragma once

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <netinet/in.h>
#include <optional>
#include <poll.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>

namespace leap::policy::testing {

// A raw client socket: what the server answered, and when it closed the connection.
struct raw_client {
  using steady = std::chrono::steady_clock;

  int fd = -1;
  steady::time_point connected;
  std::string answer;
  std::optional<steady::time_point> closed;

  raw_client() = default;
  raw_client(const raw_client&) = delete;
  raw_client& operator=(const raw_client&) = delete;
  ~raw_client() {
    if (fd >= 0) {
      ::close(fd);
    }
  }

  bool connect_to(int port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    // A send into a server that reads no more returns within this, partly sent.
    timeval send_limit{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_limit, sizeof send_limit);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected = steady::now();
    return fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }

  bool send_text(const std::string& text) const {
    return ::send(fd, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size());
  }

  // Reads what has arrived, waiting up to `wait`; notes the close (EOF or reset).
  void poll_answer(std::chrono::milliseconds wait) {
    if (closed) {
      return;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) {
      return;
    }
    char buffer[4096];
    const auto n = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n > 0) {
      answer.append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
      closed = steady::now();
    }
  }

  void read_to_close(std::chrono::milliseconds limit) {
    const auto deadline = steady::now() + limit;
    while (!closed && steady::now() < deadline) {
      poll_answer(std::chrono::milliseconds(100));
    }
  }
};

}  // namespace leap::policy::testing

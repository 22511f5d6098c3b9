#include "policy/server_transport.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace leap::policy {
namespace {

using steady = std::chrono::steady_clock;

struct connection_state {
  bool drop = false;
};

thread_local connection_state* current_connection = nullptr;

bool wait_for(int fd, short events, std::chrono::milliseconds timeout) {
  pollfd p{fd, events, 0};
  int rc = 0;
  do {
    rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (rc < 0 && errno == EINTR);
  return rc > 0;
}

void endpoint_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (rc != 0) {
    return;
  }
  char buffer[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &in->sin_addr, buffer, sizeof(buffer));
    port = ntohs(in->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, buffer, sizeof(buffer));
    port = ntohs(in6->sin6_port);
  }
  ip = buffer;
}

class socket_stream final : public httplib::Stream {
 public:
  socket_stream(int fd, std::chrono::milliseconds read_timeout,
                std::chrono::milliseconds write_timeout, const connection_state& state)
      : fd_(fd), read_timeout_(read_timeout), write_timeout_(write_timeout), state_(state) {}

  [[nodiscard]] bool has_buffered() const { return offset_ < size_; }

  // A request with neither Content-Length nor Transfer-Encoding has no body (RFC 9112, 6.3), but
  // httplib 0.11 reads a POST's body until the peer closes or the read times out. So the stream
  // watches the header block go by (httplib reads it a byte at a time) and answers end-of-stream
  // for the body of such a request. Called before each request on the connection.
  void start_request() {
    header_.clear();
    in_body_ = false;
    no_body_ = false;
  }

  bool is_readable() const override {
    return no_body_ || has_buffered() || wait_for(fd_, POLLIN, read_timeout_);
  }
  bool is_writable() const override {
    return !state_.drop && wait_for(fd_, POLLOUT, write_timeout_);
  }

  ssize_t read(char* ptr, size_t size) override {
    if (no_body_) {
      return 0;
    }
    const ssize_t n = read_bytes(ptr, size);
    if (n > 0 && !in_body_) {
      watch_header(std::string_view(ptr, static_cast<std::size_t>(n)));
    }
    return n;
  }

 private:
  void watch_header(std::string_view bytes) {
    header_.append(bytes);
    const auto end = header_.find("\r\n\r\n");
    if (end == std::string::npos) {
      // httplib refuses headers this long itself; stop watching rather than grow.
      if (header_.size() > 65536) {
        in_body_ = true;
      }
      return;
    }
    in_body_ = true;
    std::string lower(header_, 0, end + 2);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    no_body_ = lower.find("\r\ncontent-length:") == std::string::npos &&
               lower.find("\r\ntransfer-encoding:") == std::string::npos;
    header_.clear();
  }

  ssize_t read_bytes(char* ptr, size_t size) {
    if (!has_buffered()) {
      if (!wait_for(fd_, POLLIN, read_timeout_)) {
        return -1;
      }
      if (size >= buffer_.size()) {
        return recv_some(ptr, size);
      }
      const ssize_t n = recv_some(buffer_.data(), buffer_.size());
      if (n <= 0) {
        return n;
      }
      offset_ = 0;
      size_ = static_cast<std::size_t>(n);
    }
    const std::size_t n = std::min(size, size_ - offset_);
    std::memcpy(ptr, buffer_.data() + offset_, n);
    offset_ += n;
    return static_cast<ssize_t>(n);
  }

 public:
  ssize_t write(const char* ptr, size_t size) override {
    if (state_.drop || !wait_for(fd_, POLLOUT, write_timeout_)) {
      return -1;
    }
    ssize_t n = 0;
    do {
      n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    endpoint_of(fd_, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    endpoint_of(fd_, false, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  ssize_t recv_some(char* ptr, std::size_t size) {
    ssize_t n = 0;
    do {
      n = ::recv(fd_, ptr, size, 0);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  int fd_;
  std::chrono::milliseconds read_timeout_;
  std::chrono::milliseconds write_timeout_;
  const connection_state& state_;
  std::array<char, 16384> buffer_{};
  std::size_t offset_ = 0;
  std::size_t size_ = 0;
  std::string header_;  // the current request's header block so far
  bool in_body_ = false;
  bool no_body_ = false;
};

}  // namespace

class http_server final : public httplib::Server {
 public:
  explicit http_server(const server_config& config)
      : keep_alive_timeout_(config.keep_alive_timeout),
        keep_alive_max_(std::max<std::size_t>(1, config.keep_alive_max_requests)),
        read_timeout_(config.read_timeout),
        write_timeout_(config.write_timeout) {}

  // httplib listens with a backlog of 5, too short for thousands of clients connecting at once;
  // listen() on a listening socket only changes the backlog.
  bool widen_backlog(int backlog) {
    const socket_t fd = svr_sock_;
    return fd != INVALID_SOCKET && ::listen(fd, backlog) == 0;
  }

  // httplib's stop() does nothing until its accept loop has marked itself running, so a stop
  // right after start could be lost. Closing the listening socket ourselves works at any moment:
  // the accept loop checks it before every accept and fails the accept it is blocked in.
  void halt() {
    const socket_t fd = svr_sock_.exchange(INVALID_SOCKET);
    if (fd != INVALID_SOCKET) {
      ::shutdown(fd, SHUT_RDWR);
      ::close(fd);
    }
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    connection_state state;
    current_connection = &state;
    bool ok = false;
    {
      socket_stream stream(sock, read_timeout_, write_timeout_, state);
      std::size_t left = keep_alive_max_;
      while (left > 0 && wait_for_request(stream)) {
        bool closed = false;
        stream.start_request();
        ok = process_request(stream, left == 1, closed, nullptr);
        if (!ok || closed || state.drop) {
          break;
        }
        --left;
      }
    }
    current_connection = nullptr;
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ok;
  }

  // Waits for the next request on a kept-alive connection, looking every 100 ms whether the
  // server is stopping so that shutdown never waits out an idle client.
  bool wait_for_request(const socket_stream& stream) {
    if (stream.has_buffered()) {
      return true;
    }
    const auto deadline = steady::now() + keep_alive_timeout_;
    while (svr_sock_ != INVALID_SOCKET) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
      if (left.count() <= 0) {
        return false;
      }
      if (wait_for(stream.socket(), POLLIN, std::min(left, std::chrono::milliseconds(100)))) {
        return true;
      }
    }
    return false;
  }

  std::chrono::milliseconds keep_alive_timeout_;
  std::size_t keep_alive_max_;
  std::chrono::milliseconds read_timeout_;
  std::chrono::milliseconds write_timeout_;
};

namespace {

// The one wrapper every route goes through: a returned error and anything thrown become OpenAI's
// error JSON, with the error's status (500 for what was thrown).
httplib::Server::Handler wrap(std::string path, route_handler handler, server_metrics& metrics,
                              const std::function<void(const answered_request&)>& on_request) {
  return [&metrics, &on_request, path = std::move(path), handler = std::move(handler)](
             const httplib::Request& req, httplib::Response& res) {
    metrics.count_request(path);
    std::optional<http_error> failure;
    try {
      failure = handler(req, res);
    } catch (const std::exception& e) {
      failure = http_error{500, std::string("internal error: ") + e.what()};
    } catch (...) {
      failure = http_error{500, "internal error"};
    }
    if (failure) {
      res.status = failure->status;
      res.set_content(dump_json(render_error(*failure)), "application/json");
    }
    if (on_request) {
      std::string query;
      for (const auto& [key, value] : req.params) {
        query += (query.empty() ? "" : "&") + key + "=" + value;
      }
      on_request(answered_request{req.method, req.path, std::move(query), req.body,
                                  req.get_header_value("X-Request-Id"),
                                  res.status == -1 ? 200 : res.status});
    }
  };
}

}  // namespace

void drop_current_connection() {
  if (current_connection != nullptr) {
    current_connection->drop = true;
  }
}

http_transport::http_transport(const server_config& config)
    : config_(config), http_(std::make_unique<http_server>(config)) {}

http_transport::~http_transport() { stop(); }

result<int> http_transport::start(std::vector<route> routes, server_metrics& metrics,
                                  std::function<std::int64_t()> weight_version) {
  http_server& http = *http_;
  const std::size_t threads = config_.threads;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(std::size_t{64} << 20U);
  // httplib's default sets SO_REUSEPORT, which lets a second server bind a port in use and share
  // its connections; SO_REUSEADDR alone still allows a quick restart on the same port.
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  for (auto& r : routes) {
    auto handler = wrap(r.path, std::move(r.handler), metrics, config_.on_request);
    if (r.method == http_method::get) {
      http.Get(r.path, std::move(handler));
    } else {
      http.Post(r.path, std::move(handler));
    }
  }
  http.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty() || res.content_provider_) {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        const int status = res.status == -1 ? 404 : res.status;
        res.status = status;
        std::string message = "request failed with status " + std::to_string(status);
        if (status == 404) {
          message = "no route " + req.method + " " + req.path;
        } else if (status == 413) {
          // httplib refuses form-encoded bodies over 8 KB (and any body over the payload limit).
          message =
              "the request body is too large for its content type (form-encoded bodies: "
              "8192 bytes at most); send JSON with Content-Type: application/json";
        }
        res.set_content(dump_json(render_error({status, message})), "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }));
  // Runs just before a response is written, so that a client reading /metrics right after its
  // response already sees it counted (a logger would run after the write).
  http.set_post_routing_handler([&metrics, weight_version = std::move(weight_version)](
                                    const httplib::Request&, httplib::Response& res) {
    if (!res.has_header("x-weight-version")) {
      res.set_header("x-weight-version", std::to_string(weight_version()));
    }
    if (current_connection == nullptr || !current_connection->drop) {
      metrics.count_response(res.status);
    }
  });

  int port = config_.port;
  if (port == 0) {
    port = http.bind_to_any_port(config_.host);
    if (port < 0) {
      return error{"policy server: cannot bind a free port on " + config_.host};
    }
  } else if (!http.bind_to_port(config_.host, port)) {
    return error{"policy server: cannot bind " + config_.host + ":" + std::to_string(port) +
                 " (in use, or not an address of this host)"};
  }
  http.widen_backlog(config_.listen_backlog);
  listener_ = std::thread([&http] { http.listen_after_bind(); });
  return port;
}

void http_transport::stop() {
  http_->halt();
  if (listener_.joinable()) {
    listener_.join();
  }
}

}  // namespace leap::policy

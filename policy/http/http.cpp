#include "policy/http/http.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <limits>
#include <mutex>
#include <netinet/in.h>
#include <optional>
#include <poll.h>
#include <string_view>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace leap::policy {
namespace {

using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long a closing connection is drained before it is closed regardless.
constexpr milliseconds linger_time{2000};

enum class phase : std::uint8_t {
  idle,     // kept alive, waiting for the first byte of its next request
  header,   // reading the request line and headers
  body,     // reading a declared body the gate holds before a worker gets the request
  closing,  // answered and shut for writing; drained until the peer closes or the linger ends
};

struct connection {
  int fd = -1;
  phase at = phase::header;
  steady::time_point deadline;
  std::string in;              // bytes received and not yet consumed by a request
  std::size_t scanned = 0;     // bytes of `in` searched for the end of the headers
  std::size_t header_len = 0;  // the headers' length, once complete
  std::size_t needed = 0;      // bytes the gate holds before the request goes to a worker
  bool no_body = false;        // neither Content-Length nor Transfer-Encoding
  bool chunked = false;        // a chunked body: whole once its last chunk is in
  std::size_t reserved = 0;    // body bytes held, counted in the gate's prebuffer_total_bytes
  std::size_t served = 0;      // requests answered on this connection
  bool counted = false;        // counts against max_connections (a refused or closing one does not)
  bool fresh = true;           // accepted, not yet admitted by the gate
  bool granted = false;        // passed the head check: its body may be read (body_needs_grant)
  steady::time_point since;    // when the gate began to wait for this request
  steady::time_point progress;  // when the gate last received bytes of it
};

using connection_ptr = std::unique_ptr<connection>;

int to_ms(milliseconds d) {
  return static_cast<int>(std::clamp<milliseconds::rep>(d.count(), 0, 1 << 30));
}

bool wait_for(int fd, short events, milliseconds timeout) {
  pollfd p{fd, events, 0};
  int rc = 0;
  do {
    rc = ::poll(&p, 1, to_ms(timeout));
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

const char* reason(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

// One answer of the gate's own, written without waiting: the socket's buffer of a fresh
// connection holds it; what does not fit is not sent.
void answer_now(int fd, const gate_limits& limits, int status, const std::string& message) {
  const std::string body = limits.error_body ? limits.error_body(status, message) : message;
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) + "\r\n";
  if (status == 503) {
    out += "Retry-After: 1\r\n";
  }
  out += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
  [[maybe_unused]] const auto n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// The answer of a head check that refused a request, written as answer_now does.
void answer_now(int fd, const httplib::Response& res) {
  std::string out = "HTTP/1.1 " + std::to_string(res.status) + " " + reason(res.status) + "\r\n";
  for (const auto& [name, value] : res.headers) {
    const auto lower = [](std::string text) {
      std::transform(text.begin(), text.end(), text.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      return text;
    };
    const auto n = lower(name);
    if (n != "content-length" && n != "connection") {
      out += name + ": " + value + "\r\n";
    }
  }
  out += "Content-Length: " + std::to_string(res.body.size()) + "\r\nConnection: close\r\n\r\n" +
         res.body;
  [[maybe_unused]] const auto n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// The request line and headers of `head` as httplib's request (method, target, path, headers),
// for a head check in the gate; the query is not decoded. False when the request line is
// malformed (httplib then refuses the request itself).
bool parse_head(std::string_view head, httplib::Request& req) {
  const std::size_t line_end = head.find('\n');
  std::string_view line = head.substr(0, line_end);
  if (!line.empty() && line.back() == '\r') {
    line.remove_suffix(1);
  }
  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) {
    return false;
  }
  req.method = std::string(line.substr(0, sp1));
  req.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  req.version = std::string(line.substr(sp2 + 1));
  req.path = req.target.substr(0, req.target.find('?'));
  std::size_t pos = line_end;
  while (pos != std::string_view::npos && pos + 1 < head.size()) {
    const std::size_t start = pos + 1;
    pos = head.find('\n', start);
    std::string_view field =
        head.substr(start, pos == std::string_view::npos ? head.npos : pos - start);
    const auto colon = field.find(':');
    if (colon == std::string_view::npos) {
      continue;
    }
    std::string_view value = field.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
      value.remove_prefix(1);
    }
    while (!value.empty() &&
           (value.back() == '\r' || value.back() == ' ' || value.back() == '\t')) {
      value.remove_suffix(1);
    }
    req.headers.emplace(std::string(field.substr(0, colon)), std::string(value));
  }
  return true;
}

// The end of a header block that starts `text` (the offset just past its blank line), searching
// from `from`; 0 while it is incomplete. httplib accepts bare LF line ends too, so both count.
std::size_t header_end(std::string_view text, std::size_t from) {
  for (std::size_t i = from; i < text.size(); ++i) {
    if (text[i] != '\n') {
      continue;
    }
    if (i + 1 < text.size() && text[i + 1] == '\n') {
      return i + 2;
    }
    if (i + 2 < text.size() && text[i + 1] == '\r' && text[i + 2] == '\n') {
      return i + 3;
    }
  }
  return 0;
}

struct header_facts {
  std::optional<std::size_t> content_length;
  bool chunked_or_other = false;  // Transfer-Encoding present, or a malformed Content-Length
  bool chunked = false;           // Transfer-Encoding: chunked
  bool expect = false;            // Expect: 100-continue: the client waits before its body
};

header_facts read_facts(std::string_view head) {
  header_facts facts;
  std::size_t pos = head.find('\n');
  while (pos != std::string_view::npos && pos + 1 < head.size()) {
    const std::size_t start = pos + 1;
    pos = head.find('\n', start);
    std::string_view line =
        head.substr(start, pos == std::string_view::npos ? head.npos : pos - start);
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) {
      continue;
    }
    std::string name(line.substr(0, colon));
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
      value.remove_prefix(1);
    }
    while (!value.empty() && (value.back() == '\r' || value.back() == ' ')) {
      value.remove_suffix(1);
    }
    if (name == "content-length") {
      std::size_t n = 0;
      bool digits = !value.empty() && value.size() <= 18;
      for (const char c : value) {
        digits = digits && c >= '0' && c <= '9';
        n = n * 10 + static_cast<std::size_t>(c - '0');
      }
      // A malformed length is left to httplib, which refuses it; the gate holds nothing for it.
      facts.content_length = digits ? std::optional<std::size_t>(n) : std::nullopt;
      facts.chunked_or_other = facts.chunked_or_other || !digits;
    } else if (name == "transfer-encoding") {
      facts.chunked_or_other = true;
      std::string coding(value);
      std::transform(coding.begin(), coding.end(), coding.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      facts.chunked = coding == "chunked";
    } else if (name == "expect") {
      facts.expect = true;
    }
  }
  return facts;
}

// Whether `body` holds a whole chunked body (its last chunk and trailers). A malformed one counts
// as whole: httplib refuses it, and the gate holds it no longer.
bool chunked_body_complete(std::string_view body) {
  std::size_t at = 0;
  while (true) {
    const std::size_t line_end = body.find('\n', at);
    if (line_end == std::string_view::npos) {
      return false;
    }
    std::size_t size = 0;
    std::size_t digits = 0;
    for (std::size_t i = at; i < line_end; ++i) {
      const char c = body[i];
      const int v = std::isxdigit(static_cast<unsigned char>(c)) == 0 ? -1
                    : c <= '9'                                        ? c - '0'
                                                                      : (c | 0x20) - 'a' + 10;
      if (v < 0) {
        break;  // a chunk extension or the line's CR
      }
      if (++digits > 15) {
        return true;
      }
      size = size * 16 + static_cast<std::size_t>(v);
    }
    if (digits == 0) {
      return true;
    }
    at = line_end + 1;
    if (size == 0) {
      // Trailers, each a line, end with an empty line.
      while (true) {
        const std::size_t end = body.find('\n', at);
        if (end == std::string_view::npos) {
          return false;
        }
        const bool empty = end == at || (end == at + 1 && body[at] == '\r');
        at = end + 1;
        if (empty) {
          return true;
        }
      }
    }
    if (body.size() - at < size) {
      return false;
    }
    at += size;
    const std::size_t after = body.find('\n', at);
    if (after == std::string_view::npos) {
      return false;
    }
    at = after + 1;
  }
}

// The stream httplib reads a request from: first the bytes the gate holds, then the socket. The
// body is bounded by the body deadline and, when the server asks for grants, by the grant.
class gated_stream final : public httplib::Stream {
 public:
  gated_stream(connection& c, const gate_limits& limits)
      : c_(c),
        limits_(limits),
        started_(steady::now()),
        body_deadline_(started_ + limits.body_timeout),
        budget_(!limits.body_needs_grant ? std::numeric_limits<std::size_t>::max()
                : c.granted              ? limits.max_body_bytes
                                         : 0) {}

  bool is_readable() const override {
    return pos_ < c_.header_len || (pos_ >= c_.header_len && c_.no_body) || pos_ < c_.in.size() ||
           wait_body();
  }
  bool is_writable() const override {
    return !dropped_ && wait_for(c_.fd, POLLOUT, limits_.write_timeout);
  }

  ssize_t read(char* ptr, size_t size) override {
    if (pos_ < c_.header_len) {
      return take(ptr, std::min(size, c_.header_len - pos_));
    }
    // A request with neither Content-Length nor Transfer-Encoding has no body (RFC 9112, 6.3),
    // but httplib 0.11 reads a POST's body until the peer closes or the read times out.
    if (c_.no_body) {
      return 0;
    }
    if (budget_ == 0) {
      exhausted_ = true;
      return -1;
    }
    size = std::min(size, budget_);
    ssize_t n = 0;
    if (pos_ < c_.in.size()) {
      n = take(ptr, size);
    } else {
      if (!wait_body()) {
        cut_off_ = true;
        return -1;
      }
      do {
        n = ::recv(c_.fd, ptr, size, 0);
      } while (n < 0 && errno == EINTR);
      if (n > 0) {
        received_ += static_cast<std::size_t>(n);
      }
    }
    if (n > 0) {
      budget_ -= static_cast<std::size_t>(n);
    }
    return n;
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (dropped_ || !wait_for(c_.fd, POLLOUT, limits_.write_timeout)) {
      return -1;
    }
    ssize_t n = 0;
    do {
      n = ::send(c_.fd, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    endpoint_of(c_.fd, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    endpoint_of(c_.fd, false, ip, port);
  }
  socket_t socket() const override { return c_.fd; }

  void grant(std::size_t bytes) {
    if (limits_.body_needs_grant && !granted_) {
      granted_ = true;
      budget_ = bytes;
    }
  }
  void drop() { dropped_ = true; }
  [[nodiscard]] bool dropped() const { return dropped_; }
  [[nodiscard]] bool exhausted() const { return exhausted_; }
  // Whether a body read failed on the body deadline or the minimum rate: the rest of the body may
  // still come, so the connection cannot serve another request.
  [[nodiscard]] bool cut_off() const { return cut_off_; }
  // The bytes of the gate's buffer this request used up.
  [[nodiscard]] std::size_t consumed() const { return std::min(pos_, c_.in.size()); }

 private:
  ssize_t take(char* ptr, std::size_t size) {
    const std::size_t n = std::min(size, c_.in.size() - pos_);
    std::memcpy(ptr, c_.in.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

  // The body's next bytes within the body deadline and, past the grace period, soon enough that
  // what this worker has received keeps up with body_min_rate on average: a body that comes
  // slower gives its worker back instead of holding it until the deadline.
  bool wait_body() const {
    auto until = body_deadline_;
    if (limits_.body_min_rate > 0) {
      const auto earned =
          std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(
              static_cast<double>(received_) / static_cast<double>(limits_.body_min_rate)));
      until =
          std::min(until, started_ + std::max<steady::duration>(limits_.body_rate_grace, earned));
    }
    const auto left = std::chrono::ceil<milliseconds>(until - steady::now());
    if (left.count() <= 0) {
      return false;
    }
    return wait_for(c_.fd, POLLIN, std::min(left, limits_.read_timeout));
  }

  connection& c_;
  const gate_limits& limits_;
  steady::time_point started_;
  steady::time_point body_deadline_;
  std::size_t received_ = 0;  // body bytes this worker read from the socket
  std::size_t budget_;
  std::size_t pos_ = 0;  // into c_.in
  bool granted_ = false;
  bool exhausted_ = false;
  bool dropped_ = false;
  bool cut_off_ = false;
};

// The stream of the request this worker thread serves, for the handlers' calls.
thread_local gated_stream* current_stream = nullptr;

// httplib hands each accepted socket to its task queue; this one runs the task (our
// process_and_close_socket, which only admits the socket to the gate) on the accept thread.
class inline_queue final : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

}  // namespace

struct gated_server::impl {
  impl(gated_server& server, gate_limits limits) : server_(server), limits_(std::move(limits)) {
    // Past the descriptor limit accept() fails and httplib retries it every millisecond: refusing
    // with a 503 below it keeps the answer quick and leaves descriptors for the server's own use.
    std::size_t by_files = 1024;
    rlimit files{};
    if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY &&
        files.rlim_cur > 128) {
      by_files = files.rlim_cur - 64;
    }
    by_files_ = by_files;
    limits_.threads = std::max<std::size_t>(1, limits_.threads);
    limits_.max_connections = std::min(
        limits_.max_connections == 0 ? limits_.threads : limits_.max_connections, by_files);
    limits_.max_requests_per_connection =
        std::max<std::size_t>(1, limits_.max_requests_per_connection);
  }

  // --- the accept thread ---

  // A new connection goes to the gate, which decides whether it takes a place (admit_new).
  void admit(int fd) {
    if (stopping_) {
      ::close(fd);
      return;
    }
    auto c = std::make_unique<connection>();
    c->fd = fd;
    c->since = c->progress = steady::now();
    c->deadline = c->since + limits_.header_timeout;
    ++lingering_;  // not counted against the cap until the gate admits it
    to_gate(std::move(c));
  }

  void to_gate(connection_ptr c) {
    {
      std::lock_guard lock(mutex_);
      if (!gate_done_) {
        inbox_.push_back(std::move(c));
        c = nullptr;
      }
    }
    if (c) {
      close_now(*c);
      return;
    }
    wake();
  }

  void wake() const {
    const char byte = 1;
    [[maybe_unused]] const auto n = ::write(wake_[1], &byte, 1);
  }

  // The gate's share of prebuffered bodies is given back when the request goes to a worker or
  // its connection closes. Only the gate's thread reserves; a worker's connections hold none.
  void release(connection& c) {
    prebuffered_ -= c.reserved;
    c.reserved = 0;
  }

  void close_now(connection& c) {
    release(c);
    if (c.fd >= 0) {
      ::close(c.fd);
      c.fd = -1;
      if (c.counted) {
        --open_;
      } else {
        --lingering_;
      }
    }
  }

  // The connection no longer counts against max_connections (it is answered and closing).
  void uncount(connection& c) {
    if (c.counted) {
      c.counted = false;
      --open_;
      ++lingering_;
    }
  }

  // A new connection takes a place: below the cap a free one, at the cap the place of the
  // connection that has waited longest in the gate (idle ones first), else it is refused.
  void admit_new(connection_ptr& c, std::vector<connection_ptr>& held) {
    c->fresh = false;
    c->at = phase::header;
    if (open_.load() >= limits_.max_connections) {
      const auto now = steady::now();
      connection_ptr* victim = nullptr;
      for (auto& h : held) {
        if (!h || h->fresh || !h->counted || h->at == phase::closing) {
          continue;
        }
        const bool idle = h->at == phase::idle;
        if (!idle && now - h->since < limits_.evictable_after) {
          continue;
        }
        const bool victim_idle = victim != nullptr && (*victim)->at == phase::idle;
        if (victim == nullptr || (idle && !victim_idle) ||
            (idle == victim_idle && h->since < (*victim)->since)) {
          victim = &h;
        }
      }
      if (victim != nullptr && (*victim)->at == phase::idle) {
        close_now(**victim);
        *victim = nullptr;
      } else if (victim != nullptr) {
        refuse(*victim, 503,
               "the server has " + std::to_string(limits_.max_connections) +
                   " connections open, its limit, and this request waited longest; retry "
                   "shortly");
      } else {
        // Refused at once: the answer fits the fresh socket's buffer; the connection is drained
        // and closed by the gate, or closed now when too many closing ones linger already.
        answer_now(c->fd, limits_, 503,
                   "the server has " + std::to_string(limits_.max_connections) +
                       " connections open, its limit; retry shortly");
        ::shutdown(c->fd, SHUT_WR);
        if (lingering_.load() > by_files_) {
          close_now(*c);
          c = nullptr;
          return;
        }
        c->at = phase::closing;
        c->deadline = now + linger_time;
        return;
      }
    }
    --lingering_;
    ++open_;
    c->counted = true;
  }

  // --- the gate thread ---

  void run_gate() {
    std::vector<connection_ptr> held;
    std::vector<pollfd> fds;
    while (true) {
      {
        std::lock_guard lock(mutex_);
        for (auto& c : inbox_) {
          held.push_back(std::move(c));
        }
        inbox_.clear();
      }
      for (auto& c : held) {
        if (c && c->fresh) {
          admit_new(c, held);
        }
      }
      std::erase(held, nullptr);
      {
        std::lock_guard lock(mutex_);
        if (stopping_) {
          gate_done_ = true;
        }
      }
      if (gate_done_) {
        for (auto& c : held) {
          if (c) {
            close_now(*c);
          }
        }
        return;
      }
      // A connection handed back with the next request already buffered goes on at once.
      for (auto& c : held) {
        if (c->at != phase::closing && !c->in.empty()) {
          advance(c);
        }
      }
      std::erase(held, nullptr);
      // While bodies wait for room, look again soon: a holder may stall meanwhile.
      const bool waiting = make_room(held);
      std::erase(held, nullptr);
      auto now = steady::now();
      milliseconds timeout{waiting ? 100 : 1000};
      for (const auto& c : held) {
        timeout = std::min(timeout, std::chrono::ceil<milliseconds>(c->deadline - now));
      }
      fds.clear();
      fds.push_back(pollfd{wake_[0], POLLIN, 0});
      for (const auto& c : held) {
        fds.push_back(pollfd{c->fd, static_cast<short>(paused(*c) ? 0 : POLLIN), 0});
      }
      int rc = ::poll(fds.data(), fds.size(), to_ms(std::max(timeout, milliseconds(0))));
      if (rc < 0 && errno != EINTR) {
        std::this_thread::sleep_for(milliseconds(10));
      }
      if ((fds[0].revents & POLLIN) != 0) {
        std::array<char, 256> sink{};
        while (::read(wake_[0], sink.data(), sink.size()) > 0) {
        }
      }
      now = steady::now();
      for (std::size_t i = 0; i < held.size(); ++i) {
        if (fds[i + 1].revents != 0) {
          on_readable(held[i]);
        }
        if (held[i] && held[i]->deadline <= now) {
          on_expired(held[i]);
        }
      }
      std::erase(held, nullptr);
    }
  }

  // Reads what the socket has; a connection dispatched or closed leaves `c` null.
  void on_readable(connection_ptr& c) {
    std::array<char, 16384> chunk{};
    while (true) {
      // Never more than one chunk past what the request may hold before a worker reads it.
      const std::size_t cap = c->at == phase::body ? c->needed : limits_.max_header_bytes;
      if ((c->at != phase::closing && c->in.size() > cap) || paused(*c)) {
        break;
      }
      const ssize_t n = ::recv(c->fd, chunk.data(), chunk.size(), MSG_DONTWAIT);
      if (n == 0 && c->at != phase::closing) {
        // The peer is done sending (it may have shut only its side, waiting for the answer):
        // what it sent is served if whole, else the connection closes without an answer.
        advance(c);
        if (c) {
          close_now(*c);
          c = nullptr;
        }
        return;
      }
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        close_now(*c);
        c = nullptr;
        return;
      }
      if (n < 0) {
        if (errno == EINTR) {
          continue;
        }
        break;
      }
      if (c->at != phase::closing) {
        c->in.append(chunk.data(), static_cast<std::size_t>(n));
        c->progress = steady::now();
      }
    }
    if (c->at != phase::closing) {
      advance(c);
    }
  }

  void advance(connection_ptr& c) {
    if (c->at == phase::idle) {
      c->at = phase::header;
      c->deadline = steady::now() + limits_.header_timeout;
    }
    if (c->at == phase::header) {
      const std::size_t end = header_end(c->in, c->scanned > 2 ? c->scanned - 2 : 0);
      if (end == 0 || end > limits_.max_header_bytes) {
        c->scanned = c->in.size();
        if (c->in.size() > limits_.max_header_bytes) {
          refuse(c, 413,
                 "the request line and headers exceed " + std::to_string(limits_.max_header_bytes) +
                     " bytes");
        }
        return;
      }
      c->header_len = end;
      if (!check_head(*c)) {
        return;
      }
      const auto facts = read_facts(std::string_view(c->in).substr(0, end));
      c->no_body = !facts.content_length && !facts.chunked_or_other;
      c->chunked = false;
      c->needed = end;
      // A body the client sends unasked is held up to prebuffer_body_bytes: whole when it fits,
      // else its first prebuffer_body_bytes, so that only a client that has sent that much gets
      // a worker, which reads the rest at body_min_rate at least.
      if (limits_.prebuffer_body_bytes > 0 && !facts.expect &&
          (facts.chunked || (facts.content_length && !facts.chunked_or_other))) {
        c->chunked = facts.chunked;
        c->needed =
            end + (facts.chunked ? limits_.prebuffer_body_bytes
                                 : std::min(*facts.content_length, limits_.prebuffer_body_bytes));
      }
      c->at = phase::body;
      c->deadline = steady::now() + limits_.body_timeout;
    }
    if (c->at != phase::body) {
      return;
    }
    hold(*c);
    const bool whole =
        c->in.size() >= c->needed ||
        (c->chunked && chunked_body_complete(std::string_view(c->in).substr(c->header_len)));
    if (whole) {
      dispatch(std::move(c));
      c = nullptr;
    }
  }

  // The server's head check, in the gate: a refused request is answered as the check says and
  // its connection closes, before any of its body is read and without a worker. False then.
  bool check_head(connection& c) {
    if (!limits_.head_check) {
      return true;
    }
    httplib::Request req;
    if (!parse_head(std::string_view(c.in).substr(0, c.header_len), req)) {
      return true;  // malformed: httplib refuses it with 400
    }
    httplib::Response res;
    res.status = 403;
    bool pass = false;
    try {
      pass = limits_.head_check(http_request(req), res);
    } catch (const std::exception& e) {
      res = httplib::Response();
      res.status = 500;
      res.body = limits_.error_body
                     ? limits_.error_body(500, std::string("internal error: ") + e.what())
                     : e.what();
      res.set_header("Content-Type", "application/json");
    }
    if (pass) {
      c.granted = true;
      return true;
    }
    answer_now(c.fd, res);
    linger(c);
    return false;
  }

  // Counts the body bytes `c` holds in prebuffer_total_bytes.
  void hold(connection& c) {
    const std::size_t held = std::min(c.in.size(), c.needed) - c.header_len;
    prebuffered_ += held - c.reserved;
    c.reserved = held;
  }

  // At prebuffer_total_bytes, while a paused body has bytes waiting in its socket, answers 408
  // to the body holding the most bytes that has sent nothing for body_stall_time (nothing waits
  // in its socket either), freeing its bytes. Returns whether a paused body still waits.
  bool make_room(std::vector<connection_ptr>& held) {
    const auto pending = [](const connection& c) {
      int n = 0;
      return ::ioctl(c.fd, FIONREAD, &n) == 0 && n > 0;
    };
    bool waits = false;
    while (prebuffered_.load() >= limits_.prebuffer_total_bytes) {
      waits = false;
      for (const auto& c : held) {
        if (c && paused(*c) && pending(*c)) {
          waits = true;
          break;
        }
      }
      if (!waits) {
        return false;
      }
      const auto now = steady::now();
      connection_ptr* victim = nullptr;
      for (auto& c : held) {
        if (c && c->at == phase::body && c->reserved > 0 &&
            now - c->progress >= limits_.body_stall_time && !pending(*c) &&
            (victim == nullptr || c->reserved > (*victim)->reserved)) {
          victim = &c;
        }
      }
      if (victim == nullptr) {
        return true;
      }
      refuse(*victim, 408,
             "the request body stalled for " + std::to_string(limits_.body_stall_time.count()) +
                 " ms while the server held its limit of " +
                 std::to_string(limits_.prebuffer_total_bytes) +
                 " bytes of bodies and others waited");
    }
    return waits;
  }

  // Whether the gate reads no more of `c` for now: its body waits while the bodies held reach
  // prebuffer_total_bytes (its deadline still runs).
  [[nodiscard]] bool paused(const connection& c) const {
    return c.at == phase::body && c.in.size() < c.needed &&
           prebuffered_.load() >= limits_.prebuffer_total_bytes;
  }

  void on_expired(connection_ptr& c) {
    switch (c->at) {
      case phase::idle:
      case phase::closing:
        close_now(*c);
        c = nullptr;
        return;
      case phase::header:
        if (c->in.empty()) {
          close_now(*c);
          c = nullptr;
          return;
        }
        refuse(c, 408,
               "the request line and headers did not arrive within " +
                   std::to_string(limits_.header_timeout.count()) + " ms");
        return;
      case phase::body:
        refuse(c, 408,
               "the request body did not arrive within " +
                   std::to_string(limits_.body_timeout.count()) + " ms of its headers");
        return;
    }
  }

  void refuse(connection_ptr& c, int status, const std::string& message) {
    answer_now(c->fd, limits_, status, message);
    linger(*c);
  }

  // Shuts the connection for writing and lets the gate drain it until the peer closes.
  void linger(connection& c) {
    release(c);
    uncount(c);
    ::shutdown(c.fd, SHUT_WR);
    c.at = phase::closing;
    c.in.clear();
    c.in.shrink_to_fit();
    c.deadline = steady::now() + linger_time;
  }

  // --- the workers ---

  void dispatch(connection_ptr c) {
    release(*c);
    {
      std::lock_guard lock(mutex_);
      ready_.push_back(std::move(c));
    }
    ready_cv_.notify_one();
  }

  void run_worker() {
    while (true) {
      connection_ptr c;
      {
        std::unique_lock lock(mutex_);
        ready_cv_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
        if (ready_.empty()) {
          return;
        }
        c = std::move(ready_.front());
        ready_.pop_front();
      }
      if (stopping_) {
        close_now(*c);
        continue;
      }
      serve_one(std::move(c));
    }
  }

  void serve_one(connection_ptr c) {
    const bool last = c->served + 1 >= limits_.max_requests_per_connection;
    bool closed = false;
    bool ok = false;
    bool dropped = false;
    {
      gated_stream stream(*c, limits_);
      current_stream = &stream;
      ok = server_.process_request(stream, last, closed, nullptr);
      current_stream = nullptr;
      dropped = stream.dropped();
      closed = closed || stream.cut_off();
      c->in.erase(0, stream.consumed());
    }
    ++c->served;
    c->header_len = 0;
    c->scanned = 0;
    c->needed = 0;
    c->no_body = false;
    if (dropped) {
      ::shutdown(c->fd, SHUT_RDWR);
      close_now(*c);
      return;
    }
    c->since = c->progress = steady::now();
    if (!ok || closed || last || stopping_) {
      linger(*c);
    } else if (c->in.empty()) {
      c->at = phase::idle;
      c->deadline = steady::now() + limits_.idle_timeout;
    } else {
      c->at = phase::header;
      c->deadline = steady::now() + limits_.header_timeout;
    }
    to_gate(std::move(c));
  }

  // --- serve() ---

  bool serve() {
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
      return false;
    }
    if (const socket_t fd = server_.svr_sock_; fd != INVALID_SOCKET) {
      ::listen(fd, limits_.listen_backlog);
    }
    std::thread gate([this] { run_gate(); });
    std::vector<std::thread> workers;
    workers.reserve(limits_.threads);
    for (std::size_t i = 0; i < limits_.threads; ++i) {
      workers.emplace_back([this] { run_worker(); });
    }
    const bool ok = server_.listen_after_bind();
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake();
    ready_cv_.notify_all();
    gate.join();
    for (auto& w : workers) {
      w.join();
    }
    ::close(wake_[0]);
    ::close(wake_[1]);
    return ok;
  }

  gated_server& server_;
  gate_limits limits_;
  int wake_[2] = {-1, -1};
  std::mutex mutex_;
  std::condition_variable ready_cv_;
  std::vector<connection_ptr> inbox_;  // new, or handed back by a worker
  std::deque<connection_ptr> ready_;   // whole requests waiting for a worker
  std::atomic<bool> stopping_{false};
  bool gate_done_ = false;  // under mutex_ (read unlocked by the gate thread, which sets it)
  std::atomic<std::size_t> open_{0};
  std::atomic<std::size_t> prebuffered_{0};  // body bytes the gate holds for requests, reserved
  std::atomic<std::size_t> lingering_{0};    // open descriptors not counted against the cap
  std::size_t by_files_ = 1024;              // descriptors the gate may hold in all
};

std::string http_request::header(const std::string& name) const {
  return req_.get_header_value(name);
}

bool http_request::has_param(const std::string& key) const { return req_.has_param(key); }

std::string http_request::param(const std::string& key, std::size_t i) const {
  return req_.get_param_value(key, i);
}

std::size_t http_request::param_count(const std::string& key) const {
  return req_.get_param_value_count(key);
}

std::string http_request::query() const {
  std::string out;
  for (const auto& [key, value] : req_.params) {
    out += (out.empty() ? "" : "&") + key + "=" + value;
  }
  return out;
}

std::string http_request::match(std::size_t i) const {
  return i < req_.matches.size() ? req_.matches[i].str() : std::string();
}

gated_server::gated_server(gate_limits limits)
    : impl_(std::make_unique<impl>(*this, std::move(limits))) {
  set_payload_max_length(impl_->limits_.max_body_bytes);
  // httplib calls this for every status >= 400: what a route answered keeps its body; what
  // httplib refused itself (unknown routes, bodies over the limit, malformed requests) gets one.
  set_error_handler(
      HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty() || res.content_provider_) {
          return HandlerResponse::Unhandled;
        }
        res.status = res.status == -1 ? 404 : res.status;
        std::string message = "request failed with status " + std::to_string(res.status);
        if (res.status == 413 || over_budget()) {
          res.status = 413;
          message = impl_->limits_.too_large_message;
        } else if (res.status == 404) {
          message = "no route " + req.method + " " + req.path;
        } else if (res.status == 400) {
          message = "malformed HTTP request";
        }
        fail(res, res.status, message);
        return HandlerResponse::Handled;
      }));
  new_task_queue = [] { return new inline_queue; };
  // httplib's default sets SO_REUSEPORT, which lets a second server bind a port in use and share
  // its connections; SO_REUSEADDR alone still allows a quick restart on the same port.
  set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
}

gated_server::~gated_server() { stop(); }

void gated_server::route(http_method method, const std::string& pattern, http_handler handler) {
  auto run = [this, handler = std::move(handler)](const httplib::Request& raw,
                                                  httplib::Response& res) {
    const http_request req(raw);
    try {
      handler(req, res);
    } catch (const std::exception& e) {
      fail(res, 500, std::string("internal error: ") + e.what());
    } catch (...) {
      fail(res, 500, "internal error");
    }
    if (after_route_) {
      after_route_(req, res);
    }
  };
  if (method == http_method::get) {
    Get(pattern, std::move(run));
  } else {
    Post(pattern, std::move(run));
  }
}

void gated_server::fail(httplib::Response& res, int status, const std::string& message) const {
  const auto& error_body = impl_->limits_.error_body;
  res.status = status;
  res.set_content(error_body ? error_body(status, message) : message, "application/json");
}

void gated_server::check_heads(gate_head_check check) {
  impl_->limits_.head_check = std::move(check);
}

void gated_server::limit_connections(std::size_t max_connections) {
  auto& limits = impl_->limits_;
  limits.max_connections =
      std::min(max_connections == 0 ? limits.threads : max_connections, impl_->by_files_);
}

void gated_server::after_route(http_observer observer) { after_route_ = std::move(observer); }

void gated_server::before_reply(std::function<void(httplib::Response&)> hook) {
  set_post_routing_handler(
      [hook = std::move(hook)](const httplib::Request&, httplib::Response& res) { hook(res); });
}

result<int> gated_server::start(const std::string& host, int port) {
  int bound = port;
  if (port == 0) {
    bound = bind_to_any_port(host);
    if (bound < 0) {
      return error{"cannot bind a free port on " + host};
    }
  } else if (!bind_to_port(host, port)) {
    return error{"cannot bind " + host + ":" + std::to_string(port) +
                 " (in use, or not an address of this host)"};
  }
  serving_ = std::thread([this] { serve(); });
  return bound;
}

void gated_server::stop() {
  halt();
  if (serving_.joinable() && serving_.get_id() != std::this_thread::get_id()) {
    serving_.join();
  }
}

bool gated_server::serve() { return impl_->serve(); }

// httplib's stop() does nothing until its accept loop has marked itself running, so a stop right
// after start could be lost. Closing the listening socket ourselves works at any moment: the
// accept loop checks it before every accept, and shutdown fails the accept it is blocked in.
void gated_server::halt() {
  const socket_t fd = svr_sock_.exchange(INVALID_SOCKET);
  if (fd != INVALID_SOCKET) {
    ::shutdown(fd, SHUT_RDWR);
    ::close(fd);
  }
}

bool gated_server::process_and_close_socket(socket_t sock) {
  impl_->admit(sock);
  return true;
}

void gated_server::drop_connection() {
  if (current_stream != nullptr) {
    current_stream->drop();
  }
}

void gated_server::grant_body(std::size_t bytes) {
  if (current_stream != nullptr) {
    current_stream->grant(bytes);
  }
}

bool gated_server::over_budget() {
  return current_stream != nullptr && current_stream->exhausted();
}

bool gated_server::dropped() { return current_stream != nullptr && current_stream->dropped(); }

}  // namespace leap::policy

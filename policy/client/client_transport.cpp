#include "policy/client/detail/client_transport.hpp"

#include "policy/client/detail/client_protocol.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <unordered_map>
#include <vector>

namespace leap::policy::detail {

namespace {

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct exchange {
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  std::string body;  // CURLOPT_POSTFIELDS points here: it must outlive the exchange
  std::string response;
  std::string weight_version;
  std::string retry_after;  // the Retry-After header's raw value
  char error_buffer[CURL_ERROR_SIZE] = {};
  std::function<void(http_outcome)> on_done;
  std::function<bool(std::string_view)> sink;
};

size_t on_write(char* data, size_t size, size_t count, void* user) {
  auto* x = static_cast<exchange*>(user);
  const size_t n = size * count;
  if (x->sink) {
    long code = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
    if (code >= 200 && code < 300) {
      // A 2xx body goes to the sink as it arrives; an error status keeps its (JSON) body below.
      // A sink that refuses ends the exchange (CURLE_WRITE_ERROR).
      return x->sink(std::string_view(data, n)) ? n : 0;
    }
  }
  x->response.append(data, n);
  return n;
}

size_t on_header(char* data, size_t size, size_t count, void* user) {
  const size_t n = size * count;
  constexpr std::string_view length = "content-length:";
  if (n > length.size() && strncasecmp(data, length.data(), length.size()) == 0) {
    // One allocation for the body instead of a doubling series.
    const unsigned long long bytes = std::strtoull(data + length.size(), nullptr, 10);
    static_cast<exchange*>(user)->response.reserve(
        std::min<unsigned long long>(bytes, 64ULL << 20));
    return n;
  }
  constexpr std::string_view name = "x-weight-version:";
  if (n > name.size() && strncasecmp(data, name.data(), name.size()) == 0) {
    std::string_view value(data + name.size(), n - name.size());
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
      value.remove_prefix(1);
    }
    while (!value.empty() &&
           (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) {
      value.remove_suffix(1);
    }
    static_cast<exchange*>(user)->weight_version = std::string(value);
    return n;
  }
  constexpr std::string_view retry_after = "retry-after:";
  if (n > retry_after.size() && strncasecmp(data, retry_after.data(), retry_after.size()) == 0) {
    // Read when the exchange ends (parse_retry_after), against the clock of that moment.
    static_cast<exchange*>(user)->retry_after.assign(data + retry_after.size(),
                                                     n - retry_after.size());
  }
  return n;
}

http_outcome failed_outcome(CURLcode code, std::string_view detail) {
  http_outcome out;
  out.transport_ok = false;
  out.code = static_cast<int>(code);
  out.transport_error = curl_easy_strerror(code);
  if (!detail.empty()) {
    out.transport_error += ": ";
    out.transport_error += detail;
  }
  return out;
}

}  // namespace

bool transport_retryable(const http_outcome& out) {
  const auto code = static_cast<CURLcode>(out.code);
  return code != CURLE_URL_MALFORMAT && code != CURLE_UNSUPPORTED_PROTOCOL &&
         code != CURLE_BAD_FUNCTION_ARGUMENT && code != CURLE_OUT_OF_MEMORY;
}

bool stopped_by_sink(const http_outcome& out) {
  return static_cast<CURLcode>(out.code) == CURLE_WRITE_ERROR;
}

class transport::state {
 public:
  ~state() {
    for (CURL* e : free_easies_) {
      curl_easy_cleanup(e);
    }
    for (auto& [raw, x] : exchanges_) {
      curl_multi_remove_handle(multi_, x->easy);
      curl_easy_cleanup(x->easy);
      curl_slist_free_all(x->headers);
    }
    if (multi_ != nullptr) {
      curl_multi_cleanup(multi_);
    }
    if (wake_fd_ >= 0) {
      ::close(wake_fd_);
    }
    if (epoll_fd_ >= 0) {
      ::close(epoll_fd_);
    }
  }

  status open(long max_idle_connections) {
    init_curl_once();
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) {
      return error{std::string("policy client: epoll_create1: ") + std::strerror(errno)};
    }
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) {
      return error{std::string("policy client: eventfd: ") + std::strerror(errno)};
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake_fd_;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0) {
      return error{std::string("policy client: epoll_ctl: ") + std::strerror(errno)};
    }
    multi_ = curl_multi_init();
    if (multi_ == nullptr) {
      return error{"policy client: curl_multi_init failed"};
    }
    curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &state::on_socket);
    curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &state::on_timer);
    curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, max_idle_connections);
    return ok_status();
  }

  bool post(std::function<void()> command) {
    bool was_empty = false;
    {
      std::lock_guard lock(inbox_mutex_);
      if (inbox_closed_) {
        return false;
      }
      was_empty = inbox_.empty();
      inbox_.push_back(std::move(command));
    }
    // One wake-up per batch: the loop drains the whole queue when it wakes.
    if (was_empty) {
      wake();
    }
    return true;
  }

  void wake() const {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
  }

  void request_stop() {
    stopping_.store(true);
    wake();
  }

  void run_inbox() {
    {
      std::lock_guard lock(inbox_mutex_);
      inbox_.swap(running_);
    }
    for (auto& command : running_) {
      command();
    }
    running_.clear();
  }

  void close_inbox() {
    {
      std::lock_guard lock(inbox_mutex_);
      inbox_closed_ = true;
    }
    run_inbox();
  }

  void run(const std::function<void()>& each_round) {
    epoll_event events[256];
    while (true) {
      run_inbox();
      if (stopping_.load()) {
        break;
      }
      each_round();
      const int n = ::epoll_wait(epoll_fd_, events, 256, wait_timeout_ms());
      int running = 0;
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == wake_fd_) {
          std::uint64_t count = 0;
          [[maybe_unused]] auto r = ::read(wake_fd_, &count, sizeof count);
          continue;
        }
        int flags = 0;
        if ((events[i].events & EPOLLIN) != 0) {
          flags |= CURL_CSELECT_IN;
        }
        if ((events[i].events & EPOLLOUT) != 0) {
          flags |= CURL_CSELECT_OUT;
        }
        if ((events[i].events & (EPOLLERR | EPOLLHUP)) != 0) {
          flags |= CURL_CSELECT_ERR;
        }
        curl_multi_socket_action(multi_, fd, flags, &running);
      }
      if (curl_deadline_ && steady::now() >= *curl_deadline_) {
        curl_deadline_.reset();
        curl_multi_socket_action(multi_, CURL_SOCKET_TIMEOUT, 0, &running);
      }
      collect_done();
      run_timers();
    }
  }

  void submit(http_request request, std::function<void(http_outcome)> done) {
    auto x = std::make_unique<exchange>();
    if (free_easies_.empty()) {
      x->easy = curl_easy_init();
    } else {
      x->easy = free_easies_.back();
      free_easies_.pop_back();
      curl_easy_reset(x->easy);
    }
    CURL* e = x->easy;
    x->body = std::move(request.body);
    x->on_done = std::move(done);
    x->sink = std::move(request.sink);
    curl_easy_setopt(e, CURLOPT_URL, request.url.c_str());
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x.get());
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->error_buffer);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x.get());
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x.get());
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(request.timeout.count()));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(request.connect_timeout.count()));
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    if (request.method == "GET") {
      curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else {
      curl_easy_setopt(e, CURLOPT_POST, 1L);
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body.c_str());
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(x->body.size()));
      if (request.method != "POST") {
        // libcurl copies the string.
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, request.method.c_str());
      }
      x->headers = curl_slist_append(x->headers, "Content-Type: application/json");
    }
    // No "Expect: 100-continue" round trip before large bodies.
    x->headers = curl_slist_append(x->headers, "Expect:");
    if (!request.request_id.empty()) {
      x->headers = curl_slist_append(x->headers, ("X-Request-Id: " + request.request_id).c_str());
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers);
    exchange* raw = x.get();
    exchanges_.emplace(raw, std::move(x));
    if (CURLMcode rc = curl_multi_add_handle(multi_, e); rc != CURLM_OK) {
      auto it = exchanges_.find(raw);
      auto owned = std::move(it->second);
      exchanges_.erase(it);
      curl_slist_free_all(owned->headers);
      free_easies_.push_back(e);
      owned->on_done(failed_outcome(CURLE_FAILED_INIT, curl_multi_strerror(rc)));
    }
  }

  void schedule(steady::time_point when, std::function<void()> fn) {
    timers_.emplace(when, std::move(fn));
  }

  void abort_all() {
    while (!exchanges_.empty()) {
      finish(exchanges_.begin()->first->easy, CURLE_ABORTED_BY_CALLBACK);
    }
    timers_.clear();
  }

  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> connections_opened_{0};

 private:
  static int on_socket(CURL* /*easy*/, curl_socket_t s, int what, void* user, void* socket_data) {
    auto* self = static_cast<state*>(user);
    if (what == CURL_POLL_REMOVE) {
      ::epoll_ctl(self->epoll_fd_, EPOLL_CTL_DEL, s, nullptr);
      curl_multi_assign(self->multi_, s, nullptr);
      return 0;
    }
    epoll_event ev{};
    ev.events =
        ((what & CURL_POLL_IN) != 0 ? EPOLLIN : 0U) | ((what & CURL_POLL_OUT) != 0 ? EPOLLOUT : 0U);
    ev.data.fd = s;
    if (socket_data == nullptr) {
      if (::epoll_ctl(self->epoll_fd_, EPOLL_CTL_ADD, s, &ev) != 0 && errno == EEXIST) {
        ::epoll_ctl(self->epoll_fd_, EPOLL_CTL_MOD, s, &ev);
      }
      curl_multi_assign(self->multi_, s, self);
    } else {
      ::epoll_ctl(self->epoll_fd_, EPOLL_CTL_MOD, s, &ev);
    }
    return 0;
  }

  static int on_timer(CURLM* /*multi*/, long timeout_ms, void* user) {
    auto* self = static_cast<state*>(user);
    if (timeout_ms < 0) {
      self->curl_deadline_.reset();
    } else {
      self->curl_deadline_ = steady::now() + std::chrono::milliseconds(timeout_ms);
    }
    return 0;
  }

  int wait_timeout_ms() const {
    auto next = steady::time_point::max();
    if (curl_deadline_) {
      next = *curl_deadline_;
    }
    if (!timers_.empty()) {
      next = std::min(next, timers_.begin()->first);
    }
    if (next == steady::time_point::max()) {
      return 1000;
    }
    const auto now = steady::now();
    if (next <= now) {
      return 0;
    }
    // Round up so the loop never spins on a deadline a fraction of a millisecond away.
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
    return static_cast<int>(std::min<long long>(ms, 1000));
  }

  void collect_done() {
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
      if (msg->msg != CURLMSG_DONE) {
        continue;
      }
      finish(msg->easy_handle, msg->data.result);
    }
  }

  void finish(CURL* easy, CURLcode code) {
    exchange* raw = nullptr;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, &raw);
    http_outcome out;
    if (code != CURLE_OK) {
      out = failed_outcome(code, raw->error_buffer);
    }
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &out.status);
    long connects = 0;
    curl_easy_getinfo(easy, CURLINFO_NUM_CONNECTS, &connects);
    if (connects > 0) {
      connections_opened_.fetch_add(static_cast<std::uint64_t>(connects),
                                    std::memory_order_relaxed);
    }
    curl_multi_remove_handle(multi_, easy);
    auto it = exchanges_.find(raw);
    std::unique_ptr<exchange> x = std::move(it->second);
    exchanges_.erase(it);
    out.body = std::move(x->response);
    out.weight_version = std::move(x->weight_version);
    if (!x->retry_after.empty()) {
      out.retry_after = parse_retry_after(x->retry_after, std::chrono::system_clock::now());
    }
    curl_slist_free_all(x->headers);
    free_easies_.push_back(easy);
    auto done = std::move(x->on_done);
    x.reset();  // the sink (and what it captured) goes before the callback runs
    done(std::move(out));
  }

  void run_timers() {
    const auto now = steady::now();
    while (!timers_.empty() && timers_.begin()->first <= now) {
      auto fn = std::move(timers_.begin()->second);
      timers_.erase(timers_.begin());
      fn();
    }
  }

  std::mutex inbox_mutex_;
  std::vector<std::function<void()>> inbox_;
  bool inbox_closed_ = false;

  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  CURLM* multi_ = nullptr;
  std::optional<steady::time_point> curl_deadline_;
  std::vector<std::function<void()>> running_;
  std::multimap<steady::time_point, std::function<void()>> timers_;
  std::unordered_map<exchange*, std::unique_ptr<exchange>> exchanges_;
  std::vector<CURL*> free_easies_;
};

transport::transport() : state_(std::make_unique<state>()) {}
transport::~transport() = default;

status transport::open(long max_idle_connections) { return state_->open(max_idle_connections); }
void transport::run(const std::function<void()>& each_round) { state_->run(each_round); }
bool transport::post(std::function<void()> command) { return state_->post(std::move(command)); }
void transport::request_stop() { state_->request_stop(); }
bool transport::stop_requested() const { return state_->stopping_.load(); }
void transport::submit(http_request request, std::function<void(http_outcome)> done) {
  state_->submit(std::move(request), std::move(done));
}
void transport::schedule(steady::time_point when, std::function<void()> fn) {
  state_->schedule(when, std::move(fn));
}
void transport::close_inbox() { state_->close_inbox(); }
void transport::abort_all() { state_->abort_all(); }
std::uint64_t transport::connections_opened() const {
  return state_->connections_opened_.load(std::memory_order_relaxed);
}

}  // namespace leap::policy::detail

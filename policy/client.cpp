#include "policy/client.hpp"

#include "policy/bounded_json.hpp"
#include "policy/client_protocol.hpp"
#include "policy/endpoint.hpp"

#include <curl/curl.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <pthread.h>
#include <random>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>

namespace leap::policy {

namespace {

using steady = std::chrono::steady_clock;

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct transfer_outcome {
  CURLcode code = CURLE_OK;
  long status = 0;
  std::string body;
  std::string weight_version;   // the x-weight-version header, if any
  std::string transport_error;  // when code != CURLE_OK
  // A streamed generation's events, read as they arrived (the 2xx body is not kept in `body`).
  std::unique_ptr<stream_accumulator> stream;
};

struct transfer {
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  std::string body;  // CURLOPT_POSTFIELDS points here: it must outlive the transfer
  std::string response;
  std::string weight_version;
  char error_buffer[CURL_ERROR_SIZE] = {};
  std::function<void(transfer_outcome)> on_done;
  std::unique_ptr<stream_accumulator> stream;  // set for a streamed generation
};

size_t on_write(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<transfer*>(user);
  const size_t n = size * count;
  if (t->stream) {
    long code = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
    if (code >= 200 && code < 300) {
      // A 2xx stream is read event by event; an error status keeps its (JSON) body below.
      // Once the stream went bad (an event that is not JSON, an error event), reading on would
      // only add tokens after a gap: end the transfer; what arrived before is kept.
      return t->stream->feed(std::string_view(data, n)) ? n : 0;
    }
  }
  t->response.append(data, n);
  return n;
}

size_t on_header(char* data, size_t size, size_t count, void* user) {
  const size_t n = size * count;
  constexpr std::string_view length = "content-length:";
  if (n > length.size() && strncasecmp(data, length.data(), length.size()) == 0) {
    // One allocation for the body instead of a doubling series.
    const unsigned long long bytes = std::strtoull(data + length.size(), nullptr, 10);
    static_cast<transfer*>(user)->response.reserve(
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
    static_cast<transfer*>(user)->weight_version = std::string(value);
  }
  return n;
}

// Transport errors that no retry can fix: the request itself is wrong.
bool transport_retryable(CURLcode code) {
  return code != CURLE_URL_MALFORMAT && code != CURLE_UNSUPPORTED_PROTOCOL &&
         code != CURLE_BAD_FUNCTION_ARGUMENT && code != CURLE_OUT_OF_MEMORY;
}

std::string transport_message(const transfer_outcome& out) {
  std::string m = curl_easy_strerror(out.code);
  if (!out.transport_error.empty()) {
    m += ": " + out.transport_error;
  }
  return m;
}

// SGLang control routes answer 200 with {"success": false, "message": ...} when they fail.
std::optional<std::string> reported_failure(const std::string& body) {
  if (body.empty() || body.front() != '{') {
    return std::nullopt;
  }
  auto root = parse_bounded_json(body);
  if (root.is_discarded() || !root.is_object()) {
    return std::nullopt;
  }
  auto it = root.find("success");
  if (it == root.end() || !it->is_boolean() || it->get<bool>()) {
    return std::nullopt;
  }
  auto m = root.find("message");
  return m != root.end() && m->is_string() ? m->get<std::string>() : std::string("success: false");
}

struct turn_state {
  std::uint64_t key = 0;
  turn_request request;
  turn_callback callback;
  int max_tokens = 0;  // after clamping to the context window
  int attempts = 0;    // HTTP attempts, resumptions included
  int failures = 0;    // transient failures so far
  int resumes = 0;
  int endpoint = -1;  // where the last attempt went: retries and resumptions prefer it
  bool queued = false;
  steady::time_point deadline;
  std::vector<token_id> partial_ids;
  std::vector<float> partial_logprobs;
  std::string partial_text;
  std::string last_error;
};

struct sync_runtime {
  bool active = false;
  std::uint64_t generation = 0;  // tells a stale timer from a current one
  sync_state state;
  weight_sync_plan plan;
  weight_sync_request request;
  std::function<void(status)> callback;
  // The current control call's parts still out (its HTTP answer, the request's companion) and the
  // first failure among them.
  int call_parts = 0;
  std::string call_failure;
};

struct atomic_stats {
  std::atomic<std::uint64_t> submitted{0}, busy{0}, completed{0}, ok{0}, truncated{0}, rejected{0},
      protocol_errors{0}, unavailable{0}, cancelled{0}, attempts{0}, retries{0}, resumes{0},
      health_checks{0}, connections_opened{0}, in_flight{0}, tokenize_attempts{0};
};

void bump(std::atomic<std::uint64_t>& counter) { counter.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

std::string_view to_string(turn_status status) {
  switch (status) {
    case turn_status::ok:
      return "ok";
    case turn_status::truncated:
      return "truncated";
    case turn_status::rejected:
      return "rejected";
    case turn_status::protocol_error:
      return "protocol_error";
    case turn_status::unavailable:
      return "unavailable";
    case turn_status::cancelled:
      return "cancelled";
  }
  return "?";
}

class policy_client::impl {
 public:
  explicit impl(client_config config)
      : config_(std::move(config)), route_path_(generate_route(config_)), rng_(config_.seed) {
    vocab_size_ = config_.vocab_size;
    context_tokens_ = config_.max_context_tokens;
    for (const auto& e : config_.endpoints) {
      endpoint_state s;
      s.base_url = e.base_url;
      while (!s.base_url.empty() && s.base_url.back() == '/') {
        s.base_url.pop_back();
      }
      s.max_in_flight = e.max_in_flight;
      capacity_ += e.max_in_flight;
      endpoints_.push_back(std::move(s));
    }
    capacity_ += config_.max_pending;
    pinned_queues_.resize(endpoints_.size());
    syncs_.resize(endpoints_.size());
    health_busy_.assign(endpoints_.size(), false);
    static std::atomic<std::uint64_t> clients{0};
    id_prefix_ = "leap-" + std::to_string(::getpid()) + "-" + std::to_string(clients++) + "-";
  }

  ~impl() {
    if (thread_.joinable()) {
      stopping_.store(true);
      wake();
      thread_.join();
    }
    for (CURL* e : free_easies_) {
      curl_easy_cleanup(e);
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

  status start() {
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
    curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &impl::on_socket);
    curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &impl::on_timer);
    curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
    // Keep one idle connection per possible in-flight request (plus health checks) for reuse.
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS,
                      static_cast<long>(capacity_ - config_.max_pending + 2 * endpoints_.size()));
    publish_views();
    thread_ = std::thread([this] { run(); });
    return ok_status();
  }

  submit_status submit(turn_request request, turn_callback callback) {
    if (stopping_.load()) {
      return submit_status::stopped;
    }
    if (outstanding_.fetch_add(1) >= capacity_) {
      outstanding_.fetch_sub(1);
      bump(stats_.busy);
      return submit_status::busy;
    }
    bump(stats_.submitted);
    bool posted =
        post([this, request = std::move(request), callback = std::move(callback)]() mutable {
          accept_turn(std::move(request), std::move(callback));
        });
    if (!posted) {
      outstanding_.fetch_sub(1);
      return submit_status::stopped;
    }
    return submit_status::accepted;
  }

  void tokenize(int endpoint, const std::vector<chat_message>& messages, bool add_generation_prompt,
                std::function<void(result<std::vector<token_id>>)> callback) {
    auto body =
        build_tokenize_body(config_.flavour, config_.model, messages, add_generation_prompt);
    bool posted = post([this, endpoint, body = std::move(body), callback]() mutable {
      if (!body) {
        callback(body.err().wrap("tokenize"));  // on the loop thread, as every callback
        return;
      }
      start_tokenize(endpoint, std::move(*body), std::move(callback));
    });
    if (!posted) {
      callback(error{"policy client stopped"});
    }
  }

  void preflight(preflight_request request,
                 std::function<void(result<std::vector<endpoint_check>>)> callback) {
    auto p = std::make_shared<preflight_state>();
    p->request = std::move(request);
    p->callback = callback;
    if (!post([this, p]() mutable { start_preflight(p); })) {
      callback(error{"policy client stopped"});
    }
  }

  void sync_weights(int endpoint, weight_sync_plan plan, weight_sync_request request,
                    std::function<void(status)> callback) {
    bool posted = post(
        [this, endpoint, plan = std::move(plan), request = std::move(request), callback]() mutable {
          start_sync(endpoint, std::move(plan), std::move(request), std::move(callback));
        });
    if (!posted) {
      callback(error{"policy client stopped"});
    }
  }

  client_stats stats() const {
    client_stats s;
    auto get = [](const std::atomic<std::uint64_t>& a) {
      return a.load(std::memory_order_relaxed);
    };
    s.submitted = get(stats_.submitted);
    s.busy = get(stats_.busy);
    s.completed = get(stats_.completed);
    s.ok = get(stats_.ok);
    s.truncated = get(stats_.truncated);
    s.rejected = get(stats_.rejected);
    s.protocol_errors = get(stats_.protocol_errors);
    s.unavailable = get(stats_.unavailable);
    s.cancelled = get(stats_.cancelled);
    s.attempts = get(stats_.attempts);
    s.retries = get(stats_.retries);
    s.resumes = get(stats_.resumes);
    s.health_checks = get(stats_.health_checks);
    s.tokenize_attempts = get(stats_.tokenize_attempts);
    s.connections_opened = get(stats_.connections_opened);
    s.in_flight = get(stats_.in_flight);
    const auto outstanding = static_cast<std::uint64_t>(std::max(0, outstanding_.load()));
    s.pending = outstanding > s.in_flight ? outstanding - s.in_flight : 0;
    return s;
  }

  std::vector<endpoint_view> endpoint_views() const {
    std::lock_guard lock(views_mutex_);
    return views_;
  }

  std::chrono::nanoseconds loop_cpu_time() const {
    clockid_t cid;
    if (!thread_.joinable() ||
        pthread_getcpuclockid(const_cast<std::thread&>(thread_).native_handle(), &cid) != 0) {
      return std::chrono::nanoseconds{0};
    }
    timespec ts{};
    clock_gettime(cid, &ts);
    return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
  }

 private:
  // ---- cross-thread queue -------------------------------------------------------------------

  bool post(std::function<void()> command) {
    bool was_empty;
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

  void wake() {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
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

  // ---- the loop -----------------------------------------------------------------------------

  static int on_socket(CURL* /*easy*/, curl_socket_t s, int what, void* user, void* socket_data) {
    auto* self = static_cast<impl*>(user);
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
    auto* self = static_cast<impl*>(user);
    if (timeout_ms < 0) {
      self->curl_deadline_.reset();
    } else {
      self->curl_deadline_ = steady::now() + std::chrono::milliseconds(timeout_ms);
    }
    return 0;
  }

  void run() {
    epoll_event events[256];
    const auto start = steady::now();
    for (std::size_t i = 0; i < endpoints_.size(); ++i) {
      schedule(start, [this, i] { health_tick(static_cast<int>(i)); });
    }
    schedule(start + sweep_interval, [this] { sweep(); });
    while (true) {
      run_inbox();
      if (stopping_.load()) {
        break;
      }
      pump();
      publish_views();
      const int n = ::epoll_wait(epoll_fd_, events, 256, wait_timeout_ms());
      int running = 0;
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == wake_fd_) {
          std::uint64_t count;
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
    shutdown();
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
      CURL* easy = msg->easy_handle;
      const CURLcode code = msg->data.result;
      finish_transfer(easy, code);
    }
  }

  void finish_transfer(CURL* easy, CURLcode code) {
    transfer* raw = nullptr;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, &raw);
    transfer_outcome out;
    out.code = code;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &out.status);
    long connects = 0;
    curl_easy_getinfo(easy, CURLINFO_NUM_CONNECTS, &connects);
    if (connects > 0) {
      stats_.connections_opened.fetch_add(static_cast<std::uint64_t>(connects),
                                          std::memory_order_relaxed);
    }
    curl_multi_remove_handle(multi_, easy);
    auto it = transfers_.find(raw);
    std::unique_ptr<transfer> t = std::move(it->second);
    transfers_.erase(it);
    out.body = std::move(t->response);
    out.weight_version = std::move(t->weight_version);
    out.stream = std::move(t->stream);
    if (code != CURLE_OK) {
      out.transport_error = t->error_buffer;
    }
    curl_slist_free_all(t->headers);
    free_easies_.push_back(easy);
    auto done = std::move(t->on_done);
    t.reset();
    done(std::move(out));
  }

  void schedule(steady::time_point when, std::function<void()> fn) {
    timers_.emplace(when, std::move(fn));
  }

  void run_timers() {
    const auto now = steady::now();
    while (!timers_.empty() && timers_.begin()->first <= now) {
      auto fn = std::move(timers_.begin()->second);
      timers_.erase(timers_.begin());
      fn();
    }
  }

  // Starts one HTTP exchange. `method` GET sends no body.
  void start_transfer(int endpoint, std::string_view method, const std::string& path,
                      std::string body, const std::string& request_id,
                      std::chrono::milliseconds timeout, std::function<void(transfer_outcome)> done,
                      std::unique_ptr<stream_accumulator> stream = nullptr) {
    auto t = std::make_unique<transfer>();
    if (free_easies_.empty()) {
      t->easy = curl_easy_init();
    } else {
      t->easy = free_easies_.back();
      free_easies_.pop_back();
      curl_easy_reset(t->easy);
    }
    CURL* e = t->easy;
    t->body = std::move(body);
    t->on_done = std::move(done);
    t->stream = std::move(stream);
    const std::string url = endpoints_[endpoint].base_url + path;
    curl_easy_setopt(e, CURLOPT_URL, url.c_str());
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->error_buffer);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(config_.connect_timeout.count()));
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    if (method == "GET") {
      curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else {
      curl_easy_setopt(e, CURLOPT_POST, 1L);
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, t->body.c_str());
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(t->body.size()));
      if (method != "POST") {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, std::string(method).c_str());
      }
      t->headers = curl_slist_append(t->headers, "Content-Type: application/json");
    }
    // No "Expect: 100-continue" round trip before large bodies.
    t->headers = curl_slist_append(t->headers, "Expect:");
    if (!request_id.empty()) {
      t->headers = curl_slist_append(t->headers, ("X-Request-Id: " + request_id).c_str());
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
    transfer* raw = t.get();
    transfers_.emplace(raw, std::move(t));
    if (CURLMcode rc = curl_multi_add_handle(multi_, e); rc != CURLM_OK) {
      transfer_outcome out;
      out.code = CURLE_FAILED_INIT;
      out.transport_error = curl_multi_strerror(rc);
      auto it = transfers_.find(raw);
      auto owned = std::move(it->second);
      transfers_.erase(it);
      curl_slist_free_all(owned->headers);
      free_easies_.push_back(e);
      owned->on_done(std::move(out));
    }
  }

  // ---- turns --------------------------------------------------------------------------------

  void accept_turn(turn_request request, turn_callback callback) {
    auto t = std::make_unique<turn_state>();
    t->key = next_key_++;
    t->request = std::move(request);
    t->callback = std::move(callback);
    if (t->request.request_id.empty()) {
      t->request.request_id = id_prefix_ + std::to_string(t->key);
    }
    t->deadline = steady::now() + config_.turn_deadline;
    t->max_tokens = t->request.sampling.max_tokens;
    turn_state& turn = *t;
    turns_.emplace(t->key, std::move(t));
    if (stopping_.load()) {
      complete(turn, turn_status::cancelled, "policy client stopped", {});
      return;
    }
    if (context_tokens_ > 0) {
      const long room =
          static_cast<long>(context_tokens_) - static_cast<long>(turn.request.prompt.size());
      if (room <= 0) {
        complete(turn, turn_status::truncated,
                 "prompt of " + std::to_string(turn.request.prompt.size()) +
                     " tokens fills the context window of " + std::to_string(context_tokens_),
                 {});
        return;
      }
      turn.max_tokens = static_cast<int>(std::min<long>(turn.max_tokens, room));
    }
    route_turn(turn);
  }

  int pin_of(const turn_state& t) const {
    return t.endpoint >= 0 ? t.endpoint : t.request.pinned_endpoint;
  }

  void route_turn(turn_state& t) {
    const route r = choose_route(endpoints_, pin_of(t));
    switch (r.kind) {
      case route_kind::send:
        send_turn(t, r.endpoint);
        break;
      case route_kind::wait_pinned:
        t.queued = true;
        pinned_queues_[r.endpoint].push_back(t.key);
        break;
      case route_kind::wait_any:
        t.queued = true;
        any_queue_.push_back(t.key);
        break;
    }
  }

  // Sends queued turns while endpoints have room: pinned turns first, then the shared queue.
  void pump() {
    for (std::size_t e = 0; e < endpoints_.size(); ++e) {
      auto& queue = pinned_queues_[e];
      while (!queue.empty() && endpoints_[e].can_take()) {
        const auto key = queue.front();
        queue.pop_front();
        if (auto* t = queued_turn(key)) {
          send_turn(*t, static_cast<int>(e));
        }
      }
    }
    while (!any_queue_.empty()) {
      const route r = choose_route(endpoints_, -1);
      if (r.kind != route_kind::send) {
        break;
      }
      const auto key = any_queue_.front();
      any_queue_.pop_front();
      if (auto* t = queued_turn(key)) {
        send_turn(*t, r.endpoint);
      }
    }
  }

  turn_state* queued_turn(std::uint64_t key) {
    auto it = turns_.find(key);
    if (it == turns_.end() || !it->second->queued) {
      return nullptr;
    }
    return it->second.get();
  }

  void send_turn(turn_state& t, int e) {
    t.queued = false;
    t.endpoint = e;
    ++t.attempts;
    bump(stats_.attempts);
    bump(stats_.in_flight);
    ++endpoints_[e].in_flight;
    views_dirty_ = true;
    const std::string wire_id = t.request.request_id + "." + std::to_string(t.attempts);
    auto body = build_generate_body(
        config_.flavour, config_.model, t.request.prompt, t.partial_ids, t.request.sampling,
        t.max_tokens - static_cast<int>(t.partial_ids.size()), wire_id, config_.stream);
    std::unique_ptr<stream_accumulator> stream;
    if (config_.stream) {
      std::vector<token_id> sent = t.request.prompt;
      sent.insert(sent.end(), t.partial_ids.begin(), t.partial_ids.end());
      stream = std::make_unique<stream_accumulator>(config_.flavour, t.request.sampling.n,
                                                    std::move(sent));
    }
    const auto key = t.key;
    start_transfer(
        e, "POST", route_path_, std::move(body), wire_id, config_.request_timeout,
        [this, key, e](transfer_outcome out) { on_turn_done(key, e, std::move(out)); },
        std::move(stream));
  }

  void on_turn_done(std::uint64_t key, int e, const transfer_outcome& out) {
    --endpoints_[e].in_flight;
    stats_.in_flight.fetch_sub(1, std::memory_order_relaxed);
    views_dirty_ = true;
    auto it = turns_.find(key);
    if (it != turns_.end()) {
      handle_turn_outcome(*it->second, e, out);
    }
    maybe_drained(e);
  }

  void handle_turn_outcome(turn_state& t, int e, const transfer_outcome& out) {
    if (stopping_.load()) {
      complete(t, turn_status::cancelled, "policy client stopped", {});
      return;
    }
    // A stream cut mid-way ends with a transport error after a 2xx status: what arrived counts.
    const bool streamed_2xx = out.stream && out.status >= 200 && out.status < 300;
    if (out.code != CURLE_OK && !streamed_2xx) {
      std::string why = endpoints_[e].base_url + ": " + transport_message(out);
      if (transport_retryable(out.code)) {
        retry_turn(t, why, /*endpoint_fault=*/true, e);
      } else {
        complete(t, turn_status::rejected, std::move(why), {});
      }
      return;
    }
    if (out.status < 200 || out.status >= 300) {
      auto verdict = classify_http_status(out.status, out.body, config_.retry);
      std::string why = endpoints_[e].base_url + ": " + verdict.message;
      switch (verdict.kind) {
        case attempt_kind::retry:
          retry_turn(t, why, verdict.endpoint_fault, e);
          return;
        case attempt_kind::truncated:
          complete(t, turn_status::truncated, std::move(why), {});
          return;
        case attempt_kind::rejected:
          if (verdict.endpoint_fault) {
            note_failure(e);
          }
          complete(t, turn_status::rejected, std::move(why), {});
          return;
      }
    }
    if (out.stream) {
      handle_stream(t, e, out);
      return;
    }
    parsed_choices parsed;
    if (t.partial_ids.empty()) {
      parsed =
          parse_generate_response(config_.flavour, out.body, out.weight_version, t.request.prompt);
    } else {
      std::vector<token_id> sent = t.request.prompt;
      sent.insert(sent.end(), t.partial_ids.begin(), t.partial_ids.end());
      parsed = parse_generate_response(config_.flavour, out.body, out.weight_version, sent);
    }
    if (parsed.problem == parse_problem::none) {
      parsed = check_choices(std::move(parsed.choices), t.request.sampling.n, vocab_size_);
    }
    if (parsed.problem == parse_problem::malformed) {
      retry_turn(t, endpoints_[e].base_url + ": " + parsed.message, /*endpoint_fault=*/true, e);
      return;
    }
    if (parsed.problem == parse_problem::invalid) {
      retry_turn(t, endpoints_[e].base_url + ": invalid reply: " + parsed.message,
                 /*endpoint_fault=*/true, e);
      return;
    }
    if (parsed.problem == parse_problem::schema) {
      complete(t, turn_status::protocol_error, endpoints_[e].base_url + ": " + parsed.message, {});
      return;
    }
    record_success(endpoints_[e]);
    accept_choices(t, e, std::move(parsed.choices));
  }

  // A streamed reply: whole, it is read as a body is; cut short (dropped or truncated, an event
  // that is not JSON, an error event), the tokens already received are kept and the generation is
  // resumed from them, as an aborted one is. Several completions cannot be continued as one: a
  // cut stream with n > 1, or one that gave no tokens, is retried whole.
  void handle_stream(turn_state& t, int e, const transfer_outcome& out) {
    streamed_choices s = out.stream->finish(out.weight_version);
    const std::string& where = endpoints_[e].base_url;
    if (s.problem == parse_problem::schema) {
      complete(t, turn_status::protocol_error, where + ": " + s.message, {});
      return;
    }
    if (s.problem == parse_problem::none) {
      // The accumulator holds exactly n choices; the ids may still be beyond the vocabulary.
      auto checked = check_choices(s.choices, t.request.sampling.n, vocab_size_);
      if (checked.problem != parse_problem::none) {
        s.problem = checked.problem;
        s.message = checked.message;
      }
    }
    if (s.problem == parse_problem::invalid) {
      // Nothing of a faulty reply is kept: the request is retried whole.
      retry_turn(t, where + ": invalid reply: " + s.message, /*endpoint_fault=*/true, e);
      return;
    }
    if (s.complete) {
      record_success(endpoints_[e]);
      accept_choices(t, e, std::move(s.choices));
      return;
    }
    if (out.code == CURLE_OK && out.stream->events() == 0) {
      // A whole 2xx body without a single event: the server did not stream (e.g. it ignored
      // "stream": true and sent JSON). Retrying would only get the same.
      complete(t, turn_status::protocol_error,
               where + ": asked for a stream (\"stream\": true) but the 2xx body held no SSE event",
               {});
      return;
    }
    std::string why = where + ": stream cut short: " + s.message;
    if (out.code != CURLE_OK && out.code != CURLE_WRITE_ERROR) {
      why += " (" + transport_message(out) + ")";
    }
    if (s.choices.size() == 1 && !s.choices[0].ids.empty()) {
      note_failure(e);
      t.last_error = why;
      s.choices[0].finish = finish_reason::abort;
      accept_choices(t, e, std::move(s.choices));
      return;
    }
    retry_turn(t, why, /*endpoint_fault=*/true, e);
  }

  // Choices of a reply read whole: complete the turn, or resume an aborted single generation
  // from its tokens (stitched after those of earlier pieces).
  void accept_choices(turn_state& t, int e, std::vector<generated_turn> choices) {
    const bool single = choices.size() == 1;
    const bool aborted = std::any_of(choices.begin(), choices.end(), [](const auto& c) {
      return c.finish == finish_reason::abort;
    });
    if (aborted && !(single && !choices[0].ids.empty())) {
      // Nothing to resume from (no tokens, or several completions that cannot be continued as one).
      retry_turn(t, endpoints_[e].base_url + ": generation aborted by the server", false, e);
      return;
    }
    if (!t.partial_ids.empty()) {
      // Stitch the earlier pieces of a resumed generation in front of this one.
      auto& c = choices[0];
      c.ids.insert(c.ids.begin(), t.partial_ids.begin(), t.partial_ids.end());
      c.logprobs.insert(c.logprobs.begin(), t.partial_logprobs.begin(), t.partial_logprobs.end());
      c.text.insert(0, t.partial_text);
    }
    if (aborted) {
      resume_turn(t, std::move(choices[0]), e);
      return;
    }
    complete(t, turn_status::ok, {}, std::move(choices));
  }

  void resume_turn(turn_state& t, generated_turn so_far, int e) {
    ++t.resumes;
    bump(stats_.resumes);
    t.partial_ids = std::move(so_far.ids);
    t.partial_logprobs = std::move(so_far.logprobs);
    t.partial_text = std::move(so_far.text);
    if (static_cast<int>(t.partial_ids.size()) >= t.max_tokens) {
      // The abort came as the last wanted token arrived: the turn is complete, cut by length.
      so_far.ids = std::move(t.partial_ids);
      so_far.logprobs = std::move(t.partial_logprobs);
      so_far.text = std::move(t.partial_text);
      so_far.finish = finish_reason::length;
      std::vector<generated_turn> choices;
      choices.push_back(std::move(so_far));
      complete(t, turn_status::ok, {}, std::move(choices));
      return;
    }
    if (t.resumes > config_.retry.max_resumes) {
      complete(t, turn_status::unavailable,
               endpoints_[e].base_url + ": generation aborted " + std::to_string(t.resumes) +
                   " times (retry.max_resumes = " + std::to_string(config_.retry.max_resumes) + ")",
               {});
      return;
    }
    if (steady::now() >= t.deadline) {
      complete(t, turn_status::unavailable,
               "turn deadline passed while resuming an aborted generation", {});
      return;
    }
    route_turn(t);
  }

  void note_failure(int e) {
    views_dirty_ = true;
    if (record_failure(endpoints_[e], config_.health.down_after_failures)) {
      on_not_routable(e);
    }
  }

  void retry_turn(turn_state& t, const std::string& why, bool endpoint_fault, int e) {
    if (endpoint_fault) {
      note_failure(e);
    }
    t.last_error = why;
    ++t.failures;
    if (t.failures >= config_.retry.max_attempts) {
      complete(t, turn_status::unavailable,
               "gave up after " + std::to_string(t.failures) +
                   " failed attempts (retry.max_attempts); last: " + why,
               {});
      return;
    }
    const auto delay = backoff_delay(config_.retry, t.failures, unit_(rng_));
    const auto when = steady::now() + delay;
    if (when >= t.deadline) {
      complete(t, turn_status::unavailable,
               "turn deadline would pass before the next attempt; last: " + why, {});
      return;
    }
    bump(stats_.retries);
    const auto key = t.key;
    // Backing off counts as pending: the turn is held, not on the wire.
    schedule(when, [this, key] {
      auto it = turns_.find(key);
      if (it != turns_.end()) {
        route_turn(*it->second);
      }
    });
  }

  void complete(turn_state& t, turn_status status, std::string message,
                std::vector<generated_turn> choices) {
    turn_result r;
    r.request_id = t.request.request_id;
    r.status = status;
    r.message = status == turn_status::ok ? t.last_error : std::move(message);
    r.choices = std::move(choices);
    r.endpoint = t.endpoint;
    r.attempts = t.attempts;
    r.resumes = t.resumes;
    if (t.endpoint >= 0) {
      r.endpoint_weight_version = endpoints_[t.endpoint].weight_version;
    }
    auto it = turns_.find(t.key);
    auto owned = std::move(it->second);  // keeps `t` alive until the callback returned
    turns_.erase(it);
    outstanding_.fetch_sub(1);
    bump(stats_.completed);
    switch (status) {
      case turn_status::ok:
        bump(stats_.ok);
        break;
      case turn_status::truncated:
        bump(stats_.truncated);
        break;
      case turn_status::rejected:
        bump(stats_.rejected);
        break;
      case turn_status::protocol_error:
        bump(stats_.protocol_errors);
        break;
      case turn_status::unavailable:
        bump(stats_.unavailable);
        break;
      case turn_status::cancelled:
        bump(stats_.cancelled);
        break;
    }
    publish_views();  // so that a callback reading endpoints() sees the state it was called in
    owned->callback(std::move(r));
  }

  // Ends queued turns whose deadline passed (turns in flight are bounded by request_timeout).
  void sweep() {
    const auto now = steady::now();
    auto expire = [&](std::deque<std::uint64_t>& queue) {
      std::deque<std::uint64_t> kept;
      for (auto key : queue) {
        auto* t = queued_turn(key);
        if (t == nullptr) {
          continue;
        }
        if (now >= t->deadline) {
          std::string why = "turn deadline passed while waiting for an endpoint";
          if (!t->last_error.empty()) {
            why += "; last error: " + t->last_error;
          }
          complete(*t, turn_status::unavailable, std::move(why), {});
        } else {
          kept.push_back(key);
        }
      }
      queue.swap(kept);
    };
    expire(any_queue_);
    for (auto& q : pinned_queues_) {
      expire(q);
    }
    schedule(now + sweep_interval, [this] { sweep(); });
  }

  // The endpoint went down or stopped admitting: its pinned turns may go anywhere now.
  void on_not_routable(int e) {
    auto& queue = pinned_queues_[e];
    any_queue_.insert(any_queue_.end(), queue.begin(), queue.end());
    queue.clear();
    views_dirty_ = true;
  }

  // ---- health -------------------------------------------------------------------------------

  void health_tick(int e) {
    schedule(steady::now() + config_.health.interval, [this, e] { health_tick(e); });
    if (health_busy_[e]) {
      return;
    }
    health_busy_[e] = true;
    bump(stats_.health_checks);
    start_transfer(e, "GET", config_.health.path, {}, {}, config_.health.timeout,
                   [this, e](const transfer_outcome& out) {
                     health_busy_[e] = false;
                     if (stopping_.load()) {
                       return;
                     }
                     const bool passed =
                         out.code == CURLE_OK && out.status >= 200 && out.status < 300;
                     const bool was_up = endpoints_[e].up;
                     record_health_check(endpoints_[e], passed, config_.health.down_after_failures);
                     views_dirty_ = true;
                     if (was_up && !endpoints_[e].up) {
                       on_not_routable(e);
                     }
                   });
  }

  // ---- tokenize -----------------------------------------------------------------------------

  // A /tokenize call is retried as a generation attempt is (connection errors, the retry
  // statuses, a body that is not JSON or holds impossible ids), with the same backoff, attempts
  // and turn deadline: a rendering that failed for the server's sake must not end a rollout. A
  // call pinned to an endpoint (endpoint >= 0) stays there; otherwise each attempt goes to the
  // least loaded routable endpoint.
  struct tokenize_call {
    int pinned = -1;
    std::string body;
    std::function<void(result<std::vector<token_id>>)> callback;
    int failures = 0;
    steady::time_point deadline;
  };

  void start_tokenize(int endpoint, std::string body,
                      std::function<void(result<std::vector<token_id>>)> callback) {
    if (stopping_.load()) {
      callback(error{"policy client stopped"});
      return;
    }
    if (endpoint >= 0 && static_cast<std::size_t>(endpoint) >= endpoints_.size()) {
      callback(error{"tokenize: no endpoint " + std::to_string(endpoint)});
      return;
    }
    const std::uint64_t key = next_tokenize_++;
    auto& call = tokenizes_[key];
    call.pinned = endpoint;
    call.body = std::move(body);
    call.callback = std::move(callback);
    call.deadline = steady::now() + config_.turn_deadline;
    send_tokenize(key);
  }

  void send_tokenize(std::uint64_t key) {
    auto it = tokenizes_.find(key);
    if (it == tokenizes_.end()) {
      return;
    }
    int e = it->second.pinned;
    if (e < 0) {
      const route r = choose_route(endpoints_, -1);
      e = r.kind == route_kind::send ? r.endpoint : 0;
    }
    bump(stats_.tokenize_attempts);
    start_transfer(e, "POST", config_.tokenize_path, it->second.body, {}, config_.request_timeout,
                   [this, key, e](const transfer_outcome& out) { on_tokenize_done(key, e, out); });
  }

  void on_tokenize_done(std::uint64_t key, int e, const transfer_outcome& out) {
    auto it = tokenizes_.find(key);
    if (it == tokenizes_.end()) {
      return;
    }
    const std::string where = endpoints_[e].base_url + config_.tokenize_path;
    if (stopping_.load()) {
      end_tokenize(it, error{where + ": policy client stopped"});
      return;
    }
    if (out.code != CURLE_OK) {
      const std::string why = where + ": " + transport_message(out);
      if (transport_retryable(out.code)) {
        retry_tokenize(it, e, why, /*endpoint_fault=*/true);
      } else {
        end_tokenize(it, error{why});
      }
      return;
    }
    if (out.status < 200 || out.status >= 300) {
      auto verdict = classify_http_status(out.status, out.body, config_.retry);
      const std::string why = where + ": " + verdict.message;
      if (verdict.kind == attempt_kind::retry) {
        retry_tokenize(it, e, why, verdict.endpoint_fault);
      } else {
        if (verdict.endpoint_fault) {
          note_failure(e);
        }
        end_tokenize(it, error{why});
      }
      return;
    }
    auto ids = parse_tokenize_response(out.body);
    if (!ids) {
      // Not JSON, cut short, or ids no tokenizer makes: a faulty reply, as for a generation.
      retry_tokenize(it, e, where + ": " + ids.err().message, /*endpoint_fault=*/true);
      return;
    }
    if (vocab_size_ > 0) {
      for (const token_id id : *ids) {
        if (id >= vocab_size_) {
          retry_tokenize(it, e,
                         where + ": token id " + std::to_string(id) +
                             " is outside the vocabulary (vocab_size " +
                             std::to_string(vocab_size_) + ")",
                         /*endpoint_fault=*/true);
          return;
        }
      }
    }
    record_success(endpoints_[e]);
    end_tokenize(it, std::move(ids));
  }

  void retry_tokenize(std::map<std::uint64_t, tokenize_call>::iterator it, int e,
                      const std::string& why, bool endpoint_fault) {
    if (endpoint_fault) {
      note_failure(e);
    }
    auto& call = it->second;
    ++call.failures;
    if (call.failures >= config_.retry.max_attempts) {
      end_tokenize(it, error{"gave up after " + std::to_string(call.failures) +
                             " failed attempts (retry.max_attempts); last: " + why});
      return;
    }
    const auto when = steady::now() + backoff_delay(config_.retry, call.failures, unit_(rng_));
    if (when >= call.deadline) {
      end_tokenize(it, error{"turn deadline would pass before the next attempt; last: " + why});
      return;
    }
    bump(stats_.retries);
    const std::uint64_t key = it->first;
    schedule(when, [this, key] { send_tokenize(key); });
  }

  void end_tokenize(std::map<std::uint64_t, tokenize_call>::iterator it,
                    result<std::vector<token_id>> ids) {
    auto callback = std::move(it->second.callback);
    tokenizes_.erase(it);
    callback(std::move(ids));
  }

  // ---- start-up check ------------------------------------------------------------------------

  struct preflight_state {
    preflight_request request;
    std::function<void(result<std::vector<endpoint_check>>)> callback;
    std::vector<endpoint_check> checks;
    std::string errors;
    int outstanding = 0;
  };

  void start_preflight(const std::shared_ptr<preflight_state>& p) {
    p->outstanding = static_cast<int>(endpoints_.size());
    p->checks.resize(endpoints_.size());
    for (std::size_t e = 0; e < endpoints_.size(); ++e) {
      p->checks[e].base_url = endpoints_[e].base_url;
      preflight_models(p, static_cast<int>(e));
    }
  }

  void preflight_done(const std::shared_ptr<preflight_state>& p, int e, std::string problem) {
    if (!problem.empty()) {
      p->errors += (p->errors.empty() ? "" : "; ") + endpoints_[e].base_url + problem;
    }
    if (--p->outstanding > 0) {
      return;
    }
    if (!p->errors.empty()) {
      p->callback(error{p->errors});
      return;
    }
    if (vocab_size_ == 0) {
      for (const auto& c : p->checks) {
        if (c.vocab_size > 0 && (vocab_size_ == 0 || c.vocab_size < vocab_size_)) {
          vocab_size_ = c.vocab_size;
        }
      }
    }
    // vLLM answers a request whose prompt + max_tokens exceeds its max_model_len with a 400, which
    // ends the turn as `truncated` with no tokens: with a max_tokens set for a larger model, every
    // turn of the run would be empty. The reported window lowers max_tokens to what fits instead.
    if (context_tokens_ == 0) {
      for (const auto& c : p->checks) {
        if (c.max_model_len > 0 && (context_tokens_ == 0 || c.max_model_len < context_tokens_)) {
          context_tokens_ = c.max_model_len;
        }
      }
    }
    p->callback(std::move(p->checks));
  }

  void preflight_models(const std::shared_ptr<preflight_state>& p, int e) {
    start_transfer(
        e, "GET", "/v1/models", {}, {}, config_.request_timeout,
        [this, p, e](const transfer_outcome& out) {
          if (out.code != CURLE_OK) {
            preflight_done(p, e, "/v1/models: " + transport_message(out));
            return;
          }
          if (out.status == 404 && config_.model.empty()) {
            preflight_tokenize(p, e);  // nothing to check the model against, nor needed
            return;
          }
          if (out.status < 200 || out.status >= 300) {
            preflight_done(p, e,
                           "/v1/models: HTTP " + std::to_string(out.status) + ": " +
                               error_message(out.body) +
                               (config_.model.empty()
                                    ? ""
                                    : " (needed to check the model '" + config_.model + "')"));
            return;
          }
          auto listed = parse_models_response(out.body);
          if (!listed) {
            preflight_done(p, e, "/v1/models: " + listed.err().message);
            return;
          }
          auto& check = p->checks[static_cast<std::size_t>(e)];
          check.models = std::move(listed->models);
          check.max_model_len = listed->max_model_len;
          check.vocab_size = listed->vocab_size;
          if (!config_.model.empty() && std::find(check.models.begin(), check.models.end(),
                                                  config_.model) == check.models.end()) {
            std::string served;
            for (const auto& m : check.models) served += (served.empty() ? "'" : ", '") + m + "'";
            preflight_done(p, e,
                           ": the server does not serve the model '" + config_.model +
                               "' (GET /v1/models lists " +
                               (served.empty() ? std::string("none") : served) + ")");
            return;
          }
          preflight_tokenize(p, e);
        });
  }

  void preflight_tokenize(const std::shared_ptr<preflight_state>& p, int e) {
    if (p->request.tokenize_probe.empty()) {
      preflight_generate(p, e, p->request.prompt);
      return;
    }
    auto body = build_tokenize_body(config_.flavour, config_.model, p->request.tokenize_probe,
                                    /*add_generation_prompt=*/true);
    if (!body) {
      preflight_done(p, e, config_.tokenize_path + ": " + body.err().message);
      return;
    }
    start_tokenize(e, std::move(*body), [this, p, e](result<std::vector<token_id>> ids) {
      if (!ids) {
        preflight_done(
            p, e, config_.tokenize_path + " (prompts are rendered there): " + ids.err().message);
        return;
      }
      if (ids->empty()) {
        preflight_done(p, e, config_.tokenize_path + ": rendered a conversation as no ids");
        return;
      }
      preflight_generate(p, e, std::move(*ids));
    });
  }

  void preflight_generate(const std::shared_ptr<preflight_state>& p, int e,
                          std::vector<token_id> prompt) {
    if (prompt.empty() || stopping_.load()) {
      preflight_done(p, e, stopping_.load() ? ": policy client stopped" : "");
      return;
    }
    turn_request t;
    t.request_id = "leap-preflight-" + std::to_string(e);
    t.prompt = std::move(prompt);
    t.sampling.max_tokens = 1;
    t.pinned_endpoint = e;
    outstanding_.fetch_add(1);
    bump(stats_.submitted);
    accept_turn(std::move(t), [this, p, e](turn_result r) {
      // truncated: the server understood us; the tiny context is the only problem.
      if (r.status == turn_status::ok || r.status == turn_status::truncated) {
        preflight_done(p, e, "");
        return;
      }
      preflight_done(p, e,
                     route_path_ + ": a test generation of one token ended " +
                         std::string(to_string(r.status)) + ": " + r.message);
    });
  }

  // ---- weight sync --------------------------------------------------------------------------

  void start_sync(int e, weight_sync_plan plan, weight_sync_request request,
                  std::function<void(status)> callback) {
    if (e < 0 || static_cast<std::size_t>(e) >= endpoints_.size()) {
      callback(error{"weight sync: no endpoint " + std::to_string(e)});
      return;
    }
    auto& s = syncs_[e];
    if (s.active) {
      callback(error{"weight sync of " + endpoints_[e].base_url + ": a sync is already running (" +
                     std::string(to_string(s.state.phase)) + ")"});
      return;
    }
    if (stopping_.load()) {
      callback(error{"policy client stopped"});
      return;
    }
    s.active = true;
    ++s.generation;
    s.plan = std::move(plan);
    s.request = std::move(request);
    s.callback = std::move(callback);
    sync_fire(e, sync_event::start, {});
  }

  void sync_fire(int e, sync_event event, const std::string& message) {
    auto& s = syncs_[e];
    if (!s.active) {
      return;
    }
    const auto step = next_sync_step(s.state, event, s.plan);
    if (step.action == sync_action::reject) {
      return;
    }
    s.state = step.next;
    views_dirty_ = true;
    const std::string who = "weight sync of " + endpoints_[e].base_url;
    const auto generation = s.generation;
    switch (step.action) {
      case sync_action::wait_drain:
        stop_admitting(e);
        schedule(steady::now() + s.plan.drain_timeout, [this, e, generation] {
          if (syncs_[e].generation == generation) {
            sync_fire(e, sync_event::drain_timeout, {});
          }
        });
        maybe_drained(e);
        break;
      case sync_action::send_call:
        stop_admitting(e);
        send_control(e, s.state.call_index);
        break;
      case sync_action::check_health:
        send_sync_health(e);
        break;
      case sync_action::retry_health:
        schedule(steady::now() + s.plan.health_retry_delay, [this, e, generation] {
          if (syncs_[e].generation == generation && syncs_[e].active) {
            send_sync_health(e);
          }
        });
        break;
      case sync_action::finish: {
        auto& ep = endpoints_[e];
        ep.weight_version = s.request.version;
        ep.up = true;
        ep.consecutive_failures = 0;
        ep.admitting = true;
        end_sync(e, ok_status());
        break;
      }
      case sync_action::abandon:
        endpoints_[e].admitting = true;
        end_sync(e, error{who + ": in-flight turns did not drain within " +
                          std::to_string(s.plan.drain_timeout.count()) +
                          " ms; nothing was changed and the server admits turns again"});
        break;
      case sync_action::fail:
        endpoints_[e].admitting = false;
        on_not_routable(e);
        end_sync(e, error{who + ": " + message +
                          "; the server's weights are unknown, so it takes no turns until a sync "
                          "succeeds"});
        break;
      case sync_action::none:
      case sync_action::reject:
        break;
    }
  }

  void end_sync(int e, status outcome) {
    auto& s = syncs_[e];
    s.active = false;
    ++s.generation;
    auto callback = std::move(s.callback);
    s.callback = nullptr;
    views_dirty_ = true;
    publish_views();
    if (callback) {
      callback(std::move(outcome));
    }
  }

  void stop_admitting(int e) {
    if (!endpoints_[e].admitting) {
      return;
    }
    endpoints_[e].admitting = false;
    on_not_routable(e);
  }

  void maybe_drained(int e) {
    auto& s = syncs_[e];
    if (s.active && s.state.phase == sync_phase::draining && endpoints_[e].in_flight == 0) {
      sync_fire(e, sync_event::drained, {});
    }
  }

  void send_control(int e, std::size_t index) {
    auto& s = syncs_[e];
    const control_call& call = s.plan.calls[index];
    const std::string path = substitute_sync_fields(call.path, s.request, false);
    std::string body = substitute_sync_fields(call.body, s.request, true);
    const std::string what = call.name + " (" + call.method + " " + path + ")";
    const auto generation = s.generation;
    s.call_parts = s.request.companion ? 2 : 1;
    s.call_failure.clear();
    // Both parts land here, on the loop; the call's event fires once the last is in.
    auto part_done = [this, e, generation](std::string failure) {
      auto& run = syncs_[e];
      if (run.generation != generation || run.call_parts <= 0) {
        return;
      }
      if (!failure.empty() && run.call_failure.empty()) {
        run.call_failure = std::move(failure);
      }
      if (--run.call_parts > 0) {
        return;
      }
      if (run.call_failure.empty()) {
        sync_fire(e, sync_event::call_ok, {});
      } else {
        sync_fire(e, sync_event::call_failed, run.call_failure);
      }
    };
    if (s.request.companion) {
      s.request.companion(call, s.request, [this, part_done, what](status outcome) {
        // From the companion's thread: onto the loop (a stopped client drops it).
        post([part_done, what, outcome = std::move(outcome)] {
          part_done(outcome ? std::string{}
                            : what + ": the trainer's side failed: " + outcome.err().message);
        });
      });
    }
    start_transfer(e, call.method, path, std::move(body), {}, call.deadline,
                   [part_done, what](const transfer_outcome& out) {
                     if (out.code != CURLE_OK) {
                       part_done(what + " failed: " + transport_message(out));
                     } else if (out.status < 200 || out.status >= 300) {
                       part_done(what + " failed: HTTP " + std::to_string(out.status) + ": " +
                                 error_message(out.body));
                     } else if (auto failure = reported_failure(out.body)) {
                       part_done(what + " failed: " + *failure);
                     } else {
                       part_done({});
                     }
                   });
  }

  void send_sync_health(int e) {
    const auto generation = syncs_[e].generation;
    start_transfer(
        e, "GET", config_.health.path, {}, {}, syncs_[e].plan.health_timeout,
        [this, e, generation](const transfer_outcome& out) {
          if (syncs_[e].generation != generation) {
            return;
          }
          const bool passed = out.code == CURLE_OK && out.status >= 200 && out.status < 300;
          const auto& s = syncs_[e];
          if (passed && s.plan.check_version && !out.weight_version.empty() &&
              out.weight_version != s.request.version) {
            sync_fire(e, sync_event::version_mismatch,
                      "version mismatch: the server reports weight version " + out.weight_version +
                          " after the sync, which asked for " + s.request.version +
                          " (it restarted, or loaded other weights)");
            return;
          }
          std::string why;
          if (!passed) {
            why = "health check failed " + std::to_string(syncs_[e].plan.health_attempts) +
                  " times; last: " +
                  (out.code != CURLE_OK ? transport_message(out)
                                        : "HTTP " + std::to_string(out.status));
          }
          sync_fire(e, passed ? sync_event::health_ok : sync_event::health_failed, why);
        });
  }

  // ---- views and shutdown -------------------------------------------------------------------

  void publish_views() {
    if (!views_dirty_) {
      return;
    }
    views_dirty_ = false;
    std::lock_guard lock(views_mutex_);
    views_.resize(endpoints_.size());
    for (std::size_t i = 0; i < endpoints_.size(); ++i) {
      const auto& e = endpoints_[i];
      auto& v = views_[i];
      v.base_url = e.base_url;
      v.up = e.up;
      v.admitting = e.admitting;
      v.in_flight = e.in_flight;
      v.consecutive_failures = e.consecutive_failures;
      v.weight_version = e.weight_version;
      v.sync = syncs_[i].state.phase;
    }
  }

  void shutdown() {
    {
      std::lock_guard lock(inbox_mutex_);
      inbox_closed_ = true;
    }
    run_inbox();  // commands posted before the close: they see stopping_ and cancel themselves
    while (!transfers_.empty()) {
      CURL* easy = transfers_.begin()->first->easy;
      finish_transfer(easy, CURLE_ABORTED_BY_CALLBACK);
    }
    timers_.clear();
    while (!tokenizes_.empty()) {
      end_tokenize(tokenizes_.begin(), error{"policy client stopped"});
    }
    while (!turns_.empty()) {
      complete(*turns_.begin()->second, turn_status::cancelled, "policy client stopped", {});
    }
    for (std::size_t e = 0; e < syncs_.size(); ++e) {
      if (syncs_[e].active) {
        end_sync(static_cast<int>(e), error{"policy client stopped during a weight sync"});
      }
    }
    views_dirty_ = true;
    publish_views();
  }

  static constexpr std::chrono::milliseconds sweep_interval{200};

  const client_config config_;
  const std::string route_path_;
  std::string id_prefix_;
  int capacity_ = 0;

  // Shared with other threads.
  std::atomic<bool> stopping_{false};
  std::atomic<int> outstanding_{0};
  atomic_stats stats_;
  std::mutex inbox_mutex_;
  std::vector<std::function<void()>> inbox_;
  bool inbox_closed_ = false;
  mutable std::mutex views_mutex_;
  std::vector<endpoint_view> views_;

  // The loop thread's own.
  std::thread thread_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  CURLM* multi_ = nullptr;
  std::optional<steady::time_point> curl_deadline_;
  std::vector<std::function<void()>> running_;
  std::multimap<steady::time_point, std::function<void()>> timers_;
  // The id bound: config.vocab_size, or what an endpoint reported in the start-up check.
  int vocab_size_ = 0;
  // The context window: config.max_context_tokens, or the smallest max_model_len an endpoint
  // reported in the start-up check.
  int context_tokens_ = 0;
  std::map<std::uint64_t, tokenize_call> tokenizes_;  // /tokenize calls not yet answered
  std::uint64_t next_tokenize_ = 0;
  std::unordered_map<transfer*, std::unique_ptr<transfer>> transfers_;
  std::vector<CURL*> free_easies_;
  std::vector<endpoint_state> endpoints_;
  std::vector<bool> health_busy_;
  std::vector<sync_runtime> syncs_;
  std::unordered_map<std::uint64_t, std::unique_ptr<turn_state>> turns_;
  std::deque<std::uint64_t> any_queue_;
  std::vector<std::deque<std::uint64_t>> pinned_queues_;
  std::uint64_t next_key_ = 1;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> unit_{0.0, 1.0};
  bool views_dirty_ = true;
};

result<std::unique_ptr<policy_client>> policy_client::create(client_config config) {
  if (auto valid = validate_client_config(config); !valid) {
    return valid.err().wrap("policy client config");
  }
  auto impl = std::make_unique<policy_client::impl>(std::move(config));
  if (auto started = impl->start(); !started) {
    return started.err();
  }
  return std::unique_ptr<policy_client>(new policy_client(std::move(impl)));
}

policy_client::policy_client(std::unique_ptr<impl> impl) : impl_(std::move(impl)) {}
policy_client::~policy_client() = default;

submit_status policy_client::submit(turn_request request, turn_callback callback) {
  return impl_->submit(std::move(request), std::move(callback));
}

void policy_client::preflight(preflight_request request,
                              std::function<void(result<std::vector<endpoint_check>>)> callback) {
  impl_->preflight(std::move(request), std::move(callback));
}

void policy_client::tokenize(int endpoint, const std::vector<chat_message>& messages,
                             bool add_generation_prompt,
                             std::function<void(result<std::vector<token_id>>)> callback) {
  impl_->tokenize(endpoint, messages, add_generation_prompt, std::move(callback));
}

void policy_client::sync_weights(int endpoint, weight_sync_plan plan, weight_sync_request request,
                                 std::function<void(status)> callback) {
  impl_->sync_weights(endpoint, std::move(plan), std::move(request), std::move(callback));
}

client_stats policy_client::stats() const { return impl_->stats(); }
std::vector<endpoint_view> policy_client::endpoints() const { return impl_->endpoint_views(); }
std::chrono::nanoseconds policy_client::loop_cpu_time() const { return impl_->loop_cpu_time(); }

}  // namespace leap::policy

// policy_client: the turn scheduler (admission, queues, routing across endpoints, retries, health
// checks, the start-up check, /tokenize) on top of the transport (detail/client_transport.hpp),
// with one weight-sync driver per endpoint (detail/client_sync.hpp). The decisions it applies are
// pure functions (detail/client_scheduler.hpp, endpoint.hpp), the state they act on is
// detail::scheduler_state; this file keeps the turns and the order in which things happen on the
// loop.
#include "policy/client.hpp"

#include "policy/client_protocol.hpp"
#include "policy/detail/client_scheduler.hpp"
#include "policy/detail/client_sync.hpp"
#include "policy/detail/client_transport.hpp"
#include "policy/endpoint.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <pthread.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>

namespace leap::policy {

namespace {

using detail::http_outcome;
using detail::http_request;
using detail::steady;

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
  detail::partial_generation partial;
  std::string last_error;
};

struct atomic_stats {
  std::atomic<std::uint64_t> submitted{0}, busy{0}, completed{0}, ok{0}, truncated{0}, rejected{0},
      protocol_errors{0}, unavailable{0}, cancelled{0}, attempts{0}, retries{0}, resumes{0},
      health_checks{0}, in_flight{0}, tokenize_attempts{0};
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
      : config_(std::move(config)),
        route_path_(generate_route(config_)),
        sched_(endpoint_states(config_), config_.seed) {
    vocab_size_ = config_.vocab_size > 0 ? config_.vocab_size : config_.fallback_vocab_size;
    context_tokens_ = config_.max_context_tokens;
    for (const auto& e : sched_.endpoints()) {
      capacity_ += e.max_in_flight;
      syncs_.emplace_back(e.base_url);
    }
    capacity_ += config_.max_pending;
    sync_callbacks_.resize(sched_.size());
    health_busy_.assign(sched_.size(), false);
    static std::atomic<std::uint64_t> clients{0};
    id_prefix_ = "leap-" + std::to_string(::getpid()) + "-" + std::to_string(clients++) + "-";
  }

  static std::vector<endpoint_state> endpoint_states(const client_config& config) {
    std::vector<endpoint_state> states;
    for (const auto& e : config.endpoints) {
      endpoint_state s;
      s.base_url = e.base_url;
      s.max_in_flight = e.max_in_flight;
      states.push_back(std::move(s));
    }
    return states;
  }

  ~impl() {
    if (thread_.joinable()) {
      net_.request_stop();
      thread_.join();
    }
  }

  status start() {
    // Keep one idle connection per possible in-flight request (plus health checks) for reuse.
    if (auto opened =
            net_.open(static_cast<long>(capacity_ - config_.max_pending + 2 * sched_.size()));
        !opened) {
      return opened;
    }
    publish_views();
    thread_ = std::thread([this] { run(); });
    return ok_status();
  }

  submit_status submit(turn_request request, turn_callback callback) {
    if (net_.stop_requested()) {
      return submit_status::stopped;
    }
    if (outstanding_.fetch_add(1) >= capacity_) {
      outstanding_.fetch_sub(1);
      bump(stats_.busy);
      return submit_status::busy;
    }
    bump(stats_.submitted);
    bool posted =
        net_.post([this, request = std::move(request), callback = std::move(callback)]() mutable {
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
    bool posted = net_.post([this, endpoint, body = std::move(body), callback]() mutable {
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
    p->callback = std::move(callback);
    if (!net_.post([this, p]() mutable { start_preflight(p); })) {
      p->callback(error{"policy client stopped"});
    }
  }

  void sync_weights(int endpoint, weight_sync_plan plan, weight_sync_request request,
                    std::function<void(status)> callback) {
    bool posted = net_.post(
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
    s.connections_opened = net_.connections_opened();
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
  [[nodiscard]] bool stopping() const { return net_.stop_requested(); }

  // ---- the loop -----------------------------------------------------------------------------

  void run() {
    const auto start = steady::now();
    for (std::size_t i = 0; i < sched_.size(); ++i) {
      net_.schedule(start, [this, i] { health_tick(static_cast<int>(i)); });
    }
    net_.schedule(start + sweep_interval, [this] { sweep(); });
    net_.run([this] {
      pump();
      publish_views();
    });
    shutdown();
  }

  // One HTTP exchange with endpoint `e`. `method` GET sends no body.
  void send(int e, std::string method, const std::string& path, std::string body,
            std::string request_id, std::chrono::milliseconds timeout,
            std::function<void(http_outcome)> done,
            std::function<bool(std::string_view)> sink = nullptr) {
    http_request r;
    r.url = sched_.endpoint(e).base_url + path;
    r.method = std::move(method);
    r.body = std::move(body);
    r.request_id = std::move(request_id);
    r.timeout = timeout;
    r.connect_timeout = config_.connect_timeout;
    r.sink = std::move(sink);
    net_.submit(std::move(r), std::move(done));
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
    turn_state& turn = *t;
    turns_.emplace(t->key, std::move(t));
    if (stopping()) {
      complete(turn, turn_status::cancelled, "policy client stopped", {});
      return;
    }
    const auto admitted = detail::admit_turn(turn.request.prompt.size(),
                                             turn.request.sampling.max_tokens, context_tokens_);
    if (!admitted.fits) {
      complete(turn, turn_status::truncated, admitted.message, {});
      return;
    }
    turn.max_tokens = admitted.max_tokens;
    route_turn(turn);
  }

  static int pin_of(const turn_state& t) {
    return t.endpoint >= 0 ? t.endpoint : t.request.pinned_endpoint;
  }

  void route_turn(turn_state& t) {
    if (const auto e = sched_.route(t.key, pin_of(t))) {
      send_turn(t, *e);
    } else {
      t.queued = true;
    }
  }

  // Sends queued turns while endpoints have room: pinned turns first, then the shared queue.
  void pump() {
    while (const auto ready = sched_.next_ready()) {
      if (auto* t = queued_turn(ready->key)) {
        send_turn(*t, ready->endpoint);
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

  // The ids an attempt sends: the prompt, then the pieces of a resumed generation.
  static std::vector<token_id> sent_ids(const turn_state& t) {
    std::vector<token_id> sent = t.request.prompt;
    sent.insert(sent.end(), t.partial.ids.begin(), t.partial.ids.end());
    return sent;
  }

  void send_turn(turn_state& t, int e) {
    t.queued = false;
    t.endpoint = e;
    ++t.attempts;
    bump(stats_.attempts);
    bump(stats_.in_flight);
    sched_.sent(e);
    views_dirty_ = true;
    std::string wire_id = t.request.request_id + "." + std::to_string(t.attempts);
    auto body = build_generate_body(
        config_.flavour, config_.model, t.request.prompt, t.partial.ids, t.request.sampling,
        t.max_tokens - static_cast<int>(t.partial.ids.size()), wire_id, config_.stream);
    // A streamed reply is read event by event as it arrives; the accumulator outlives the
    // exchange in the completion callback.
    std::shared_ptr<stream_accumulator> stream;
    std::function<bool(std::string_view)> sink;
    if (config_.stream) {
      stream =
          std::make_shared<stream_accumulator>(config_.flavour, t.request.sampling.n, sent_ids(t));
      // Once the stream went bad (an event that is not JSON, an error event), reading on would
      // only add tokens after a gap: the sink ends the exchange; what arrived before is kept.
      sink = [acc = stream.get()](std::string_view bytes) { return acc->feed(bytes); };
    }
    const auto key = t.key;
    send(
        e, "POST", route_path_, std::move(body), std::move(wire_id), config_.request_timeout,
        [this, key, e, stream = std::move(stream)](const http_outcome& out) {
          on_turn_done(key, e, out, stream.get());
        },
        std::move(sink));
  }

  void on_turn_done(std::uint64_t key, int e, const http_outcome& out,
                    const stream_accumulator* stream) {
    sched_.answered(e);
    stats_.in_flight.fetch_sub(1, std::memory_order_relaxed);
    views_dirty_ = true;
    auto it = turns_.find(key);
    if (it != turns_.end()) {
      handle_turn_outcome(*it->second, e, out, stream);
    }
    apply_sync(e, syncs_[e].in_flight_changed(sched_.endpoint(e).in_flight));
  }

  void handle_turn_outcome(turn_state& t, int e, const http_outcome& out,
                           const stream_accumulator* stream) {
    if (stopping()) {
      complete(t, turn_status::cancelled, "policy client stopped", {});
      return;
    }
    std::vector<token_id> joined;
    std::span<const token_id> sent = t.request.prompt;
    if (!t.partial.ids.empty()) {
      joined = sent_ids(t);
      sent = joined;
    }
    detail::reply_context ctx;
    ctx.flavour = config_.flavour;
    ctx.retry = &config_.retry;
    ctx.n = t.request.sampling.n;
    ctx.vocab_size = vocab_size_;
    ctx.where = sched_.endpoint(e).base_url;
    ctx.sent = sent;
    // A stream cut mid-way ends with a transport error after a 2xx status: what arrived counts.
    const bool streamed_2xx = stream != nullptr && out.status >= 200 && out.status < 300;
    auto verdict =
        streamed_2xx ? detail::judge_stream(out, *stream, ctx) : detail::judge_reply(out, ctx);
    switch (verdict.action) {
      case detail::reply_action::complete:
        if (verdict.endpoint_fault) {
          note_failure(e);
        }
        complete(t, verdict.status, std::move(verdict.message), {});
        return;
      case detail::reply_action::retry:
        retry_turn(t, verdict.message, verdict.endpoint_fault, e, verdict.retry_after);
        return;
      case detail::reply_action::accept:
        if (verdict.endpoint_fault) {
          // A stream cut after some tokens: they are kept and resumed from.
          note_failure(e);
          t.last_error = std::move(verdict.message);
        } else {
          record_success(sched_.endpoint(e));
        }
        accept_choices(t, e, std::move(verdict.choices));
        return;
    }
  }

  // Choices of a reply read whole: complete the turn, or resume an aborted single generation
  // from its tokens (stitched after those of earlier pieces).
  void accept_choices(turn_state& t, int e, std::vector<generated_turn> choices) {
    auto d = detail::continue_piece(std::move(choices), t.partial, t.max_tokens, t.resumes,
                                    config_.retry.max_resumes, steady::now() >= t.deadline,
                                    sched_.endpoint(e).base_url);
    if (d.resumed) {
      ++t.resumes;
      bump(stats_.resumes);
    }
    switch (d.action) {
      case detail::piece_action::done:
        complete(t, turn_status::ok, {}, std::move(d.choices));
        return;
      case detail::piece_action::retry:
        retry_turn(t, d.message, /*endpoint_fault=*/false, e);
        return;
      case detail::piece_action::give_up:
        complete(t, turn_status::unavailable, std::move(d.message), {});
        return;
      case detail::piece_action::resume:
        t.partial.ids = std::move(d.so_far.ids);
        t.partial.logprobs = std::move(d.so_far.logprobs);
        t.partial.text = std::move(d.so_far.text);
        route_turn(t);
        return;
    }
  }

  void note_failure(int e) {
    views_dirty_ = true;
    if (record_failure(sched_.endpoint(e), config_.health.down_after_failures)) {
      on_not_routable(e);
    }
  }

  // `retry_after`: the server's Retry-After; the retry waits for it as well as for the backoff,
  // on a timer (the loop serves other turns meanwhile).
  void retry_turn(turn_state& t, const std::string& why, bool endpoint_fault, int e,
                  std::optional<std::chrono::milliseconds> retry_after = std::nullopt) {
    if (endpoint_fault) {
      note_failure(e);
    }
    t.last_error = why;
    ++t.failures;
    const auto d =
        sched_.backoff(config_.retry, t.failures, why, steady::now(), t.deadline, retry_after);
    if (d.give_up) {
      complete(t, turn_status::unavailable, d.message, {});
      return;
    }
    bump(stats_.retries);
    const auto key = t.key;
    // Backing off counts as pending: the turn is held, not on the wire.
    net_.schedule(d.when, [this, key] {
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
      r.endpoint_weight_version = sched_.endpoint(t.endpoint).weight_version;
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
    sched_.retain_queued([this, now](std::uint64_t key) {
      auto* t = queued_turn(key);
      if (t == nullptr) {
        return false;
      }
      if (now < t->deadline) {
        return true;
      }
      std::string why = "turn deadline passed while waiting for an endpoint";
      if (!t->last_error.empty()) {
        why += "; last error: " + t->last_error;
      }
      complete(*t, turn_status::unavailable, std::move(why), {});
      return false;
    });
    net_.schedule(now + sweep_interval, [this] { sweep(); });
  }

  // The endpoint went down or stopped admitting: its pinned turns may go anywhere now.
  void on_not_routable(int e) {
    sched_.unpin(e);
    views_dirty_ = true;
  }

  // ---- health -------------------------------------------------------------------------------

  void health_tick(int e) {
    net_.schedule(steady::now() + config_.health.interval, [this, e] { health_tick(e); });
    if (health_busy_[e]) {
      return;
    }
    health_busy_[e] = true;
    bump(stats_.health_checks);
    send(e, "GET", config_.health.path, {}, {}, config_.health.timeout,
         [this, e](const http_outcome& out) {
           health_busy_[e] = false;
           if (stopping()) {
             return;
           }
           const bool passed = out.transport_ok && out.status >= 200 && out.status < 300;
           auto& endpoint = sched_.endpoint(e);
           const bool was_up = endpoint.up;
           record_health_check(endpoint, passed, config_.health.down_after_failures);
           views_dirty_ = true;
           if (was_up && !endpoint.up) {
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
    if (stopping()) {
      callback(error{"policy client stopped"});
      return;
    }
    if (endpoint >= 0 && static_cast<std::size_t>(endpoint) >= sched_.size()) {
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
      const route r = choose_route(sched_.endpoints(), -1);
      e = r.kind == route_kind::send ? r.endpoint : 0;
    }
    bump(stats_.tokenize_attempts);
    send(e, "POST", config_.tokenize_path, it->second.body, {}, config_.request_timeout,
         [this, key, e](const http_outcome& out) { on_tokenize_done(key, e, out); });
  }

  void on_tokenize_done(std::uint64_t key, int e, const http_outcome& out) {
    auto it = tokenizes_.find(key);
    if (it == tokenizes_.end()) {
      return;
    }
    const std::string where = sched_.endpoint(e).base_url + config_.tokenize_path;
    if (stopping()) {
      end_tokenize(it, error{where + ": policy client stopped"});
      return;
    }
    if (!out.transport_ok) {
      const std::string why = where + ": " + out.transport_error;
      if (detail::transport_retryable(out)) {
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
        retry_tokenize(it, e, why, verdict.endpoint_fault, out.retry_after);
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
    record_success(sched_.endpoint(e));
    end_tokenize(it, std::move(ids));
  }

  void retry_tokenize(std::map<std::uint64_t, tokenize_call>::iterator it, int e,
                      const std::string& why, bool endpoint_fault,
                      std::optional<std::chrono::milliseconds> retry_after = std::nullopt) {
    if (endpoint_fault) {
      note_failure(e);
    }
    auto& call = it->second;
    ++call.failures;
    const auto d = sched_.backoff(config_.retry, call.failures, why, steady::now(), call.deadline,
                                  retry_after);
    if (d.give_up) {
      end_tokenize(it, error{d.message});
      return;
    }
    bump(stats_.retries);
    const std::uint64_t key = it->first;
    net_.schedule(d.when, [this, key] { send_tokenize(key); });
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
    p->outstanding = static_cast<int>(sched_.size());
    p->checks.resize(sched_.size());
    for (std::size_t e = 0; e < sched_.size(); ++e) {
      p->checks[e].base_url = sched_.endpoints()[e].base_url;
      preflight_models(p, static_cast<int>(e));
    }
  }

  void preflight_done(const std::shared_ptr<preflight_state>& p, int e,
                      const std::string& problem) {
    if (!problem.empty()) {
      p->errors += (p->errors.empty() ? "" : "; ") + sched_.endpoint(e).base_url + problem;
    }
    if (--p->outstanding > 0) {
      return;
    }
    if (!p->errors.empty()) {
      p->callback(error{p->errors});
      return;
    }
    // A served model's own vocabulary (the smallest reported) replaces the fallback: a model's
    // embedding may have more rows than its tokenizer has ids, and it can sample any of them.
    if (config_.vocab_size == 0) {
      int reported = 0;
      for (const auto& c : p->checks) {
        if (c.vocab_size > 0 && (reported == 0 || c.vocab_size < reported)) {
          reported = c.vocab_size;
        }
      }
      if (reported > 0) {
        vocab_size_ = reported;
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
    send(e, "GET", "/v1/models", {}, {}, config_.request_timeout,
         [this, p, e](const http_outcome& out) {
           if (!out.transport_ok) {
             preflight_done(p, e, "/v1/models: " + out.transport_error);
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
             for (const auto& m : check.models) {
               served += (served.empty() ? "'" : ", '") + m + "'";
             }
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
    if (prompt.empty() || stopping()) {
      preflight_done(p, e, stopping() ? ": policy client stopped" : "");
      return;
    }
    turn_request t;
    t.request_id = "leap-preflight-" + std::to_string(e);
    t.prompt = std::move(prompt);
    t.sampling.max_tokens = 1;
    t.pinned_endpoint = e;
    outstanding_.fetch_add(1);
    bump(stats_.submitted);
    accept_turn(std::move(t), [this, p, e](const turn_result& r) {
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
  // The driver (detail/client_sync.hpp) decides; this applies its effects on the loop.

  void start_sync(int e, weight_sync_plan plan, weight_sync_request request,
                  std::function<void(status)> callback) {
    if (e < 0 || static_cast<std::size_t>(e) >= sched_.size()) {
      callback(error{"weight sync: no endpoint " + std::to_string(e)});
      return;
    }
    if (!syncs_[e].active() && stopping()) {
      callback(error{"policy client stopped"});
      return;
    }
    auto fx = syncs_[e].start(std::move(plan), std::move(request), sched_.endpoint(e).in_flight);
    if (!fx) {
      callback(fx.err());  // a sync is already running there
      return;
    }
    sync_callbacks_[e] = std::move(callback);
    apply_sync(e, std::move(*fx));
  }

  void apply_sync(int e, detail::sync_effects fx) {
    auto& driver = syncs_[e];
    const auto generation = driver.generation();
    if (fx.stop_admitting || fx.ending != detail::sync_ending::running || fx.call ||
        fx.health_check) {
      views_dirty_ = true;
    }
    if (fx.stop_admitting && sched_.endpoint(e).admitting) {
      sched_.endpoint(e).admitting = false;
      on_not_routable(e);
    }
    if (fx.drain_timer) {
      net_.schedule(steady::now() + *fx.drain_timer, [this, e, generation] {
        apply_sync(e, syncs_[e].drain_timed_out(generation));
      });
    }
    if (fx.call) {
      send_control(e, std::move(*fx.call));
    }
    if (fx.health_check) {
      if (fx.health_check->count() == 0) {
        send_sync_health(e);
      } else {
        net_.schedule(steady::now() + *fx.health_check, [this, e, generation] {
          if (syncs_[e].current(generation)) {
            send_sync_health(e);
          }
        });
      }
    }
    switch (fx.ending) {
      case detail::sync_ending::running:
        return;
      case detail::sync_ending::finished: {
        auto& ep = sched_.endpoint(e);
        ep.weight_version = std::move(fx.version);
        ep.up = true;
        ep.consecutive_failures = 0;
        ep.admitting = true;
        end_sync(e, ok_status());
        return;
      }
      case detail::sync_ending::abandoned:
        sched_.endpoint(e).admitting = true;
        end_sync(e, error{std::move(fx.message)});
        return;
      case detail::sync_ending::failed:
        sched_.endpoint(e).admitting = false;
        on_not_routable(e);
        end_sync(e, error{std::move(fx.message)});
        return;
    }
  }

  void end_sync(int e, status outcome) {
    auto callback = std::move(sync_callbacks_[e]);
    sync_callbacks_[e] = nullptr;
    views_dirty_ = true;
    publish_views();
    if (callback) {
      callback(std::move(outcome));
    }
  }

  void send_control(int e, detail::sync_call_request call) {
    auto& driver = syncs_[e];
    const auto generation = driver.generation();
    if (call.with_companion) {
      driver.request().companion(driver.plan().calls[call.index], driver.request(),
                                 [this, e, generation](status outcome) {
                                   // From the companion's thread: onto the loop (a stopped client
                                   // drops it).
                                   net_.post([this, e, generation, outcome = std::move(outcome)] {
                                     apply_sync(e, syncs_[e].companion_done(generation, outcome));
                                   });
                                 });
    }
    send(e, std::move(call.method), call.path, std::move(call.body), {}, call.deadline,
         [this, e, generation](const http_outcome& out) {
           apply_sync(e, syncs_[e].call_answered(generation, out));
         });
  }

  void send_sync_health(int e) {
    const auto generation = syncs_[e].generation();
    send(e, "GET", config_.health.path, {}, {}, syncs_[e].plan().health_timeout,
         [this, e, generation](const http_outcome& out) {
           apply_sync(e, syncs_[e].health_answered(generation, out));
         });
  }

  // ---- views and shutdown -------------------------------------------------------------------

  void publish_views() {
    if (!views_dirty_) {
      return;
    }
    views_dirty_ = false;
    std::lock_guard lock(views_mutex_);
    views_.resize(sched_.size());
    for (std::size_t i = 0; i < sched_.size(); ++i) {
      const auto& e = sched_.endpoints()[i];
      auto& v = views_[i];
      v.base_url = e.base_url;
      v.up = e.up;
      v.admitting = e.admitting;
      v.in_flight = e.in_flight;
      v.consecutive_failures = e.consecutive_failures;
      v.weight_version = e.weight_version;
      v.sync = syncs_[i].phase();
    }
  }

  void shutdown() {
    // Commands posted before the close see stopping() and cancel themselves; exchanges still on
    // the wire end aborted, and their callbacks (which see stopping() too) end what they served.
    net_.close_inbox();
    net_.abort_all();
    while (!tokenizes_.empty()) {
      end_tokenize(tokenizes_.begin(), error{"policy client stopped"});
    }
    while (!turns_.empty()) {
      complete(*turns_.begin()->second, turn_status::cancelled, "policy client stopped", {});
    }
    for (std::size_t e = 0; e < syncs_.size(); ++e) {
      if (syncs_[e].abort()) {
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

  // Shared with other threads (the transport's post() and stop flag are too).
  detail::transport net_;
  std::atomic<int> outstanding_{0};
  atomic_stats stats_;
  mutable std::mutex views_mutex_;
  std::vector<endpoint_view> views_;

  // The loop thread's own.
  std::thread thread_;
  // The id bound: config.vocab_size, else what an endpoint reported in the start-up check, else
  // config.fallback_vocab_size.
  int vocab_size_ = 0;
  // The context window: config.max_context_tokens, or the smallest max_model_len an endpoint
  // reported in the start-up check.
  int context_tokens_ = 0;
  std::map<std::uint64_t, tokenize_call> tokenizes_;  // /tokenize calls not yet answered
  std::uint64_t next_tokenize_ = 0;
  detail::scheduler_state sched_;  // the endpoints, the queues, the backoff's generator
  std::vector<bool> health_busy_;
  std::vector<detail::sync_driver> syncs_;  // one per endpoint
  std::vector<std::function<void(status)>> sync_callbacks_;
  std::unordered_map<std::uint64_t, std::unique_ptr<turn_state>> turns_;
  std::uint64_t next_key_ = 1;
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

// policy_client: the turn scheduler (admission, queues, routing across endpoints, retries, health
// checks, the start-up check, /tokenize) on top of the transport (detail/client_transport.hpp),
// with one weight-sync driver per endpoint (detail/client_sync.hpp). The decisions it applies are
// pure functions (detail/client_scheduler.hpp, endpoint.hpp), the state they act on is
// detail::scheduler_state. detail/client_impl.hpp lists the steps of the loop; this file holds
// the client's life cycle, the loop, the weight-sync effects, the views and shutdown.
#include "policy/client/detail/client_impl.hpp"

#include <algorithm>
#include <pthread.h>
#include <unistd.h>

namespace leap::policy {

using detail::bump;
using detail::http_request;
using detail::steady;

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

// ---- life cycle and the public calls ------------------------------------------------------------

policy_client::impl::impl(client_config config)
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

std::vector<endpoint_state> policy_client::impl::endpoint_states(const client_config& config) {
  std::vector<endpoint_state> states;
  for (const auto& e : config.endpoints) {
    endpoint_state s;
    s.base_url = e.base_url;
    s.max_in_flight = e.max_in_flight;
    states.push_back(std::move(s));
  }
  return states;
}

policy_client::impl::~impl() {
  if (thread_.joinable()) {
    net_.request_stop();
    thread_.join();
  }
}

status policy_client::impl::start() {
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

submit_status policy_client::impl::submit(turn_request request, turn_callback callback) {
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

void policy_client::impl::tokenize(int endpoint, const std::vector<chat_message>& messages,
                                   bool add_generation_prompt,
                                   std::function<void(result<std::vector<token_id>>)> callback) {
  auto body = build_tokenize_body(config_.flavour, config_.model, messages, add_generation_prompt);
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

void policy_client::impl::preflight(
    preflight_request request, std::function<void(result<std::vector<endpoint_check>>)> callback) {
  auto p = std::make_shared<preflight_state>();
  p->request = std::move(request);
  p->callback = std::move(callback);
  if (!net_.post([this, p]() mutable { start_preflight(p); })) {
    p->callback(error{"policy client stopped"});
  }
}

void policy_client::impl::sync_weights(int endpoint, weight_sync_plan plan,
                                       weight_sync_request request,
                                       std::function<void(status)> callback) {
  bool posted = net_.post(
      [this, endpoint, plan = std::move(plan), request = std::move(request), callback]() mutable {
        start_sync(endpoint, std::move(plan), std::move(request), std::move(callback));
      });
  if (!posted) {
    callback(error{"policy client stopped"});
  }
}

client_stats policy_client::impl::stats() const {
  client_stats s;
  auto get = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
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

std::vector<endpoint_view> policy_client::impl::endpoint_views() const {
  std::lock_guard lock(views_mutex_);
  return views_;
}

std::chrono::nanoseconds policy_client::impl::loop_cpu_time() const {
  clockid_t cid;
  if (!thread_.joinable() ||
      pthread_getcpuclockid(const_cast<std::thread&>(thread_).native_handle(), &cid) != 0) {
    return std::chrono::nanoseconds{0};
  }
  timespec ts{};
  clock_gettime(cid, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

// ---- the loop -----------------------------------------------------------------------------------

void policy_client::impl::run() {
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

void policy_client::impl::send(int e, std::string method, const std::string& path, std::string body,
                               std::string request_id, std::chrono::milliseconds timeout,
                               std::function<void(http_outcome)> done,
                               std::function<bool(std::string_view)> sink) {
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

// ---- weight sync --------------------------------------------------------------------------------

void policy_client::impl::start_sync(int e, weight_sync_plan plan, weight_sync_request request,
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

void policy_client::impl::apply_sync(int e, detail::sync_effects fx) {
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
    net_.schedule(steady::now() + *fx.drain_timer,
                  [this, e, generation] { apply_sync(e, syncs_[e].drain_timed_out(generation)); });
  }
  if (!fx.delta_refused.empty() && driver.request().on_delta_refused) {
    driver.request().on_delta_refused(fx.delta_refused);
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

void policy_client::impl::end_sync(int e, status outcome) {
  auto callback = std::move(sync_callbacks_[e]);
  sync_callbacks_[e] = nullptr;
  views_dirty_ = true;
  publish_views();
  if (callback) {
    callback(std::move(outcome));
  }
}

void policy_client::impl::send_control(int e, detail::sync_call_request call) {
  auto& driver = syncs_[e];
  const auto generation = driver.generation();
  if (call.with_companion) {
    // The companion is told whether this call carries the delta: the request it sees holds the
    // delta's source only then.
    weight_sync_request as_sent = driver.request();
    if (!call.carries_delta) {
      as_sent.delta_update_info = nullptr;
    }
    driver.request().companion(driver.plan().calls[call.index], as_sent,
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

void policy_client::impl::send_sync_health(int e) {
  const auto generation = syncs_[e].generation();
  send(e, "GET", config_.health.path, {}, {}, syncs_[e].plan().health_timeout,
       [this, e, generation](const http_outcome& out) {
         apply_sync(e, syncs_[e].health_answered(generation, out));
       });
}

// ---- views and shutdown -------------------------------------------------------------------------

void policy_client::impl::publish_views() {
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

void policy_client::impl::shutdown() {
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

// ---- the public class ---------------------------------------------------------------------------

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

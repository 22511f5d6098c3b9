// policy_client's implementation: the state the loop thread owns and the steps it takes, one
// file per concern (the class below is their table of contents):
//   client.cpp           life cycle, the public entry points (which post onto the loop), the loop,
//                        the weight-sync effects, the views and shutdown;
//   client_turns.cpp     turns (admission, routing, attempts, retries, resumptions, completion)
//                        and health checks;
//   client_tokenize.cpp  /tokenize calls and the start-up check.
// The decisions it applies are pure functions (detail/client_scheduler.hpp, endpoint.hpp,
// client_protocol.hpp) and the weight-sync driver (detail/client_sync.hpp); the HTTP exchanges go
// through the transport (detail/client_transport.hpp).
//
// Internal to policy/ (policy_client is its only user).
#pragma once

#include "policy/client/client.hpp"
#include "policy/client/detail/client_protocol.hpp"
#include "policy/client/detail/client_scheduler.hpp"
#include "policy/client/detail/client_sync.hpp"
#include "policy/client/detail/client_transport.hpp"
#include "policy/client/detail/endpoint.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace leap::policy {
namespace detail {

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
  partial_generation partial;
  std::string last_error;
};

struct atomic_stats {
  std::atomic<std::uint64_t> submitted{0}, busy{0}, completed{0}, ok{0}, truncated{0}, rejected{0},
      protocol_errors{0}, unavailable{0}, cancelled{0}, attempts{0}, retries{0}, resumes{0},
      health_checks{0}, in_flight{0}, tokenize_attempts{0};
};

inline void bump(std::atomic<std::uint64_t>& counter) {
  counter.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace detail

class policy_client::impl {
  using http_outcome = detail::http_outcome;
  using steady = detail::steady;
  using turn_state = detail::turn_state;

 public:
  explicit impl(client_config config);
  static std::vector<endpoint_state> endpoint_states(const client_config& config);
  ~impl();
  // Opens the transport and starts the loop thread.
  status start();

  // policy_client's calls, from any thread: each posts its work onto the loop.
  submit_status submit(turn_request request, turn_callback callback);
  void tokenize(int endpoint, const std::vector<chat_message>& messages, bool add_generation_prompt,
                std::function<void(result<std::vector<token_id>>)> callback);
  void preflight(preflight_request request,
                 std::function<void(result<std::vector<endpoint_check>>)> callback);
  void sync_weights(int endpoint, weight_sync_plan plan, weight_sync_request request,
                    std::function<void(status)> callback);
  client_stats stats() const;
  std::vector<endpoint_view> endpoint_views() const;
  std::chrono::nanoseconds loop_cpu_time() const;

 private:
  [[nodiscard]] bool stopping() const { return net_.stop_requested(); }

  // ---- the loop (client.cpp) --------------------------------------------------------------------

  void run();

  // One HTTP exchange with endpoint `e`. `method` GET sends no body.
  void send(int e, std::string method, const std::string& path, std::string body,
            std::string request_id, std::chrono::milliseconds timeout,
            std::function<void(http_outcome)> done,
            std::function<bool(std::string_view)> sink = nullptr);

  // ---- turns (client_turns.cpp) -----------------------------------------------------------------

  void accept_turn(turn_request request, turn_callback callback);
  static int pin_of(const turn_state& t);
  void route_turn(turn_state& t);

  // Sends queued turns while endpoints have room: pinned turns first, then the shared queue.
  void pump();

  turn_state* queued_turn(std::uint64_t key);

  // The ids an attempt sends: the prompt, then the pieces of a resumed generation.
  static std::vector<token_id> sent_ids(const turn_state& t);

  void send_turn(turn_state& t, int e);
  void on_turn_done(std::uint64_t key, int e, const http_outcome& out,
                    const stream_accumulator* stream);
  void handle_turn_outcome(turn_state& t, int e, const http_outcome& out,
                           const stream_accumulator* stream);

  // Choices of a reply read whole: complete the turn, or resume an aborted single generation
  // from its tokens (stitched after those of earlier pieces).
  void accept_choices(turn_state& t, int e, std::vector<generated_turn> choices);

  void note_failure(int e);

  // `retry_after`: the server's Retry-After; the retry waits for it as well as for the backoff,
  // on a timer (the loop serves other turns meanwhile).
  void retry_turn(turn_state& t, const std::string& why, bool endpoint_fault, int e,
                  std::optional<std::chrono::milliseconds> retry_after = std::nullopt);

  void complete(turn_state& t, turn_status status, std::string message,
                std::vector<generated_turn> choices);

  // Ends queued turns whose deadline passed (turns in flight are bounded by request_timeout).
  void sweep();

  // The endpoint went down or stopped admitting: its pinned turns may go anywhere now.
  void on_not_routable(int e);

  // ---- health (client_turns.cpp) ----------------------------------------------------------------

  void health_tick(int e);

  // ---- tokenize (client_tokenize.cpp) -----------------------------------------------------------

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
                      std::function<void(result<std::vector<token_id>>)> callback);
  void send_tokenize(std::uint64_t key);
  void on_tokenize_done(std::uint64_t key, int e, const http_outcome& out);
  void retry_tokenize(std::map<std::uint64_t, tokenize_call>::iterator it, int e,
                      const std::string& why, bool endpoint_fault,
                      std::optional<std::chrono::milliseconds> retry_after = std::nullopt);
  void end_tokenize(std::map<std::uint64_t, tokenize_call>::iterator it,
                    result<std::vector<token_id>> ids);

  // ---- start-up check (client_tokenize.cpp) -----------------------------------------------------

  struct preflight_state {
    preflight_request request;
    std::function<void(result<std::vector<endpoint_check>>)> callback;
    std::vector<endpoint_check> checks;
    std::string errors;
    int outstanding = 0;
  };

  void start_preflight(const std::shared_ptr<preflight_state>& p);
  void preflight_done(const std::shared_ptr<preflight_state>& p, int e, const std::string& problem);
  void preflight_models(const std::shared_ptr<preflight_state>& p, int e);
  void preflight_tokenize(const std::shared_ptr<preflight_state>& p, int e);
  void preflight_generate(const std::shared_ptr<preflight_state>& p, int e,
                          std::vector<token_id> prompt);

  // ---- weight sync (client.cpp) -----------------------------------------------------------------
  // The driver (detail/client_sync.hpp) decides; this applies its effects on the loop.

  void start_sync(int e, weight_sync_plan plan, weight_sync_request request,
                  std::function<void(status)> callback);
  void apply_sync(int e, detail::sync_effects fx);
  void end_sync(int e, status outcome);
  void send_control(int e, detail::sync_call_request call);
  void send_sync_health(int e);

  // ---- views and shutdown (client.cpp) ----------------------------------------------------------

  void publish_views();
  void shutdown();

  // ---- state ------------------------------------------------------------------------------------

  static constexpr std::chrono::milliseconds sweep_interval{200};

  const client_config config_;
  const std::string route_path_;
  std::string id_prefix_;
  int capacity_ = 0;

  // Shared with other threads (the transport's post() and stop flag are too).
  detail::transport net_;
  std::atomic<int> outstanding_{0};
  detail::atomic_stats stats_;
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

}  // namespace leap::policy

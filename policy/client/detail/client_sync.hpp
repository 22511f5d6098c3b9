// The weight-sync driver of one endpoint: the sequence of client.hpp's weight_sync (drain, control
// calls in order, health checks, admit) as an object fed with events that answers what its host
// must do. It sends nothing, keeps no clock and calls nothing: policy_client applies the effects
// (HTTP exchanges, timers, admission), and the tests feed events and read the effects directly.
//
// Every asynchronous answer carries the generation it was asked under (generation() when the
// effect was applied): an answer or timer of a finished or later sync is ignored.
//
// Internal to policy/.
#pragma once

#include "common/result.hpp"
#include "policy/client/client.hpp"
#include "policy/client/detail/client_transport.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace leap::policy::detail {

// A control call with {version}, {path} and {lora_name} filled in.
struct sync_call_request {
  std::size_t index = 0;  // in plan.calls: the call handed to the request's companion
  std::string method;
  std::string path;
  std::string body;
  std::chrono::milliseconds deadline{0};
  bool with_companion = false;  // the request has a companion: run it alongside this call
  bool carries_delta = false;   // the body is the call's delta_body (the request's delta)
};

enum class sync_ending : std::uint8_t {
  running,    // the sync goes on (or none was running)
  finished,   // record `version`, mark the endpoint up with no failures, admit; report ok
  abandoned,  // the drain timed out: admit again (nothing changed); report `message`
  failed,     // keep the endpoint out of rotation; report `message`
};

// What the host does after an event, in this order.
struct sync_effects {
  bool stop_admitting = false;  // take the endpoint out of rotation (its pinned turns go anywhere)
  // Arm a timer that calls drain_timed_out(generation) after this long.
  std::optional<std::chrono::milliseconds> drain_timer;
  std::optional<sync_call_request> call;  // send this control call now
  // Send a health check (GET health path, plan.health_timeout) after this long (zero: now), then
  // call health_answered(generation, ...); skip it if current(generation) is false by then.
  std::optional<std::chrono::milliseconds> health_check;
  sync_ending ending = sync_ending::running;
  std::string message;  // abandoned, failed: the error to report
  std::string version;  // finished: the weight version to record
  // The request's delta was refused, and its full folder is being sent instead: why.
  std::string delta_refused;
};

class sync_driver {
 public:
  // `endpoint`: the server's base URL, for messages.
  explicit sync_driver(std::string endpoint);

  // Starts a sync; `in_flight`: this client's turns on the server now. Error: a sync is running.
  [[nodiscard]] result<sync_effects> start(weight_sync_plan plan, weight_sync_request request,
                                           int in_flight);
  // The number of this client's turns in flight on the server changed.
  [[nodiscard]] sync_effects in_flight_changed(int in_flight);
  [[nodiscard]] sync_effects drain_timed_out(std::uint64_t generation);
  // The control call's HTTP answer, and its companion's report: the call is ok once both are in
  // (only the HTTP answer without a companion) and neither failed.
  [[nodiscard]] sync_effects call_answered(std::uint64_t generation, const http_outcome& out);
  [[nodiscard]] sync_effects companion_done(std::uint64_t generation, const status& outcome);
  [[nodiscard]] sync_effects health_answered(std::uint64_t generation, const http_outcome& out);
  // Ends a running sync without touching the endpoint (the client stops). Returns whether one ran.
  bool abort();

  [[nodiscard]] bool active() const { return active_; }
  [[nodiscard]] bool current(std::uint64_t generation) const {
    return active_ && generation == generation_;
  }
  [[nodiscard]] std::uint64_t generation() const { return generation_; }
  [[nodiscard]] sync_phase phase() const { return state_.phase; }
  [[nodiscard]] const sync_state& state() const { return state_; }
  [[nodiscard]] const weight_sync_plan& plan() const { return plan_; }
  [[nodiscard]] const weight_sync_request& request() const { return request_; }

 private:
  // Applies next_sync_step and adds what the action asks for to `fx`.
  void fire(sync_event event, const std::string& message, sync_effects& fx);
  void end(sync_effects& fx, sync_ending ending, std::string message);
  void part_done(std::string failure, sync_effects& fx);
  // Adds the current call (state_.call_index), its fields filled in, to `fx`.
  void send_call(sync_effects& fx);
  // Whether the current call names {path} (the load the delta changes).
  [[nodiscard]] bool names_path() const;

  std::string who_;  // "weight sync of <endpoint>"
  bool active_ = false;
  std::uint64_t generation_ = 0;
  sync_state state_;
  weight_sync_plan plan_;
  weight_sync_request request_;
  // {path} is request_.delta_path (set at start when there is one; cleared on its refusal).
  bool sending_delta_ = false;
  bool carries_delta_ = false;  // the call in flight carries the delta (its delta_body)
  int in_flight_ = 0;
  // The current control call's parts still out (its HTTP answer, the companion) and the first
  // failure among them.
  int call_parts_ = 0;
  std::string call_what_;
  std::string call_failure_;
};

}  // namespace leap::policy::detail

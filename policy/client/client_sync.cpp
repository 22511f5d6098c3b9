#include "policy/client/detail/client_sync.hpp"

#include "policy/client/detail/client_protocol.hpp"
#include "policy/wire/wire.hpp"

#include <nlohmann/json.hpp>

namespace leap::policy::detail {

namespace {

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

bool passed(const http_outcome& out) {
  return out.transport_ok && out.status >= 200 && out.status < 300;
}

}  // namespace

sync_driver::sync_driver(std::string endpoint) : who_("weight sync of " + std::move(endpoint)) {}

result<sync_effects> sync_driver::start(weight_sync_plan plan, weight_sync_request request,
                                        int in_flight) {
  if (active_) {
    return error{who_ + ": a sync is already running (" + std::string(to_string(state_.phase)) +
                 ")"};
  }
  active_ = true;
  ++generation_;
  plan_ = std::move(plan);
  request_ = std::move(request);
  sending_delta_ = !request_.delta_path.empty() || static_cast<bool>(request_.delta_update_info);
  in_flight_ = in_flight;
  sync_effects fx;
  fire(sync_event::start, {}, fx);
  return fx;
}

sync_effects sync_driver::in_flight_changed(int in_flight) {
  in_flight_ = in_flight;
  sync_effects fx;
  if (active_ && state_.phase == sync_phase::draining && in_flight_ == 0) {
    fire(sync_event::drained, {}, fx);
  }
  return fx;
}

sync_effects sync_driver::drain_timed_out(std::uint64_t generation) {
  sync_effects fx;
  if (current(generation)) {
    fire(sync_event::drain_timeout, {}, fx);
  }
  return fx;
}

sync_effects sync_driver::call_answered(std::uint64_t generation, const http_outcome& out) {
  sync_effects fx;
  if (!current(generation) || call_parts_ <= 0) {
    return fx;
  }
  std::string failure;
  if (!out.transport_ok) {
    failure = call_what_ + " failed: " + out.transport_error;
  } else if (out.status < 200 || out.status >= 300) {
    failure =
        call_what_ + " failed: HTTP " + std::to_string(out.status) + ": " + error_message(out.body);
  } else if (auto reported = reported_failure(out.body)) {
    failure = call_what_ + " failed: " + *reported;
  }
  part_done(std::move(failure), fx);
  return fx;
}

sync_effects sync_driver::companion_done(std::uint64_t generation, const status& outcome) {
  sync_effects fx;
  if (!current(generation) || call_parts_ <= 0) {
    return fx;
  }
  part_done(outcome ? std::string{}
                    : call_what_ + ": the trainer's side failed: " + outcome.err().message,
            fx);
  return fx;
}

void sync_driver::part_done(std::string failure, sync_effects& fx) {
  if (!failure.empty() && call_failure_.empty()) {
    call_failure_ = std::move(failure);
  }
  if (--call_parts_ > 0) {
    return;
  }
  if (!call_failure_.empty() && sending_delta_ && names_path()) {
    // The server is not on the delta's base (or its checksums failed): it keeps the weights it
    // had (the delta applies all or nothing), so the same call with the full folder brings it to
    // the version.
    sending_delta_ = false;
    fx.delta_refused = call_failure_;
    send_call(fx);
    return;
  }
  if (call_failure_.empty()) {
    fire(sync_event::call_ok, {}, fx);
  } else {
    fire(sync_event::call_failed, call_failure_, fx);
  }
}

sync_effects sync_driver::health_answered(std::uint64_t generation, const http_outcome& out) {
  sync_effects fx;
  if (!current(generation) || state_.phase != sync_phase::health_checking) {
    return fx;
  }
  const bool ok = passed(out);
  if (ok && plan_.check_version && !out.weight_version.empty() &&
      out.weight_version != request_.version) {
    fire(sync_event::version_mismatch,
         "version mismatch: the server reports weight version " + out.weight_version +
             " after the sync, which asked for " + request_.version +
             " (it restarted, or loaded other weights)",
         fx);
    return fx;
  }
  std::string why;
  if (!ok) {
    why = "health check failed " + std::to_string(plan_.health_attempts) + " times; last: " +
          (!out.transport_ok ? out.transport_error : "HTTP " + std::to_string(out.status));
  }
  fire(ok ? sync_event::health_ok : sync_event::health_failed, why, fx);
  return fx;
}

bool sync_driver::abort() {
  if (!active_) {
    return false;
  }
  active_ = false;
  ++generation_;
  call_parts_ = 0;
  return true;
}

void sync_driver::fire(sync_event event, const std::string& message, sync_effects& fx) {
  if (!active_) {
    return;
  }
  const auto step = next_sync_step(state_, event, plan_);
  if (step.action == sync_action::reject) {
    return;
  }
  state_ = step.next;
  switch (step.action) {
    case sync_action::wait_drain:
      fx.stop_admitting = true;
      fx.drain_timer = plan_.drain_timeout;
      if (in_flight_ == 0) {
        fire(sync_event::drained, {}, fx);
      }
      break;
    case sync_action::send_call:
      send_call(fx);
      break;
    case sync_action::check_health:
      fx.health_check = std::chrono::milliseconds{0};
      break;
    case sync_action::retry_health:
      fx.health_check = plan_.health_retry_delay;
      break;
    case sync_action::finish:
      fx.version = request_.version;
      end(fx, sync_ending::finished, {});
      break;
    case sync_action::abandon:
      end(fx, sync_ending::abandoned,
          who_ + ": in-flight turns did not drain within " +
              std::to_string(plan_.drain_timeout.count()) +
              " ms; nothing was changed and the server admits turns again");
      break;
    case sync_action::fail:
      end(fx, sync_ending::failed,
          who_ + ": " + message +
              "; the server's weights are unknown, so it takes no turns until a sync succeeds");
      break;
    case sync_action::none:
    case sync_action::reject:
      break;
  }
}

bool sync_driver::names_path() const {
  const control_call& call = plan_.calls[state_.call_index];
  return call.path.find("{path}") != std::string::npos ||
         call.body.find("{path}") != std::string::npos || carries_delta_;
}

void sync_driver::send_call(sync_effects& fx) {
  fx.stop_admitting = true;
  const control_call& call = plan_.calls[state_.call_index];
  weight_sync_request fields = request_;
  if (sending_delta_) {
    fields.weights_path = request_.delta_path;
  }
  sync_call_request r;
  r.index = state_.call_index;
  r.method = call.method;
  r.path = substitute_sync_fields(call.path, fields, false);
  r.body = substitute_sync_fields(call.body, fields, true);
  carries_delta_ = false;
  if (sending_delta_ && !call.delta_body.empty() && request_.delta_update_info) {
    // The broadcast path's delta: its update_info is the learner's for this version, or none.
    const std::string info = request_.delta_update_info();
    if (info.empty()) {
      sending_delta_ = false;
    } else {
      static constexpr std::string_view marker = "{delta_update_info}";
      std::string body = call.delta_body;
      if (const auto at = body.find(marker); at != std::string::npos) {
        body.replace(at, marker.size(), info);
      }
      r.body = std::move(body);
      carries_delta_ = true;
    }
  }
  r.carries_delta = carries_delta_;
  r.deadline = call.deadline;
  r.with_companion = static_cast<bool>(request_.companion);
  call_what_ = call.name + " (" + call.method + " " + r.path + ")";
  call_parts_ = r.with_companion ? 2 : 1;
  call_failure_.clear();
  fx.call = std::move(r);
}

void sync_driver::end(sync_effects& fx, sync_ending ending, std::string message) {
  active_ = false;
  ++generation_;
  call_parts_ = 0;
  fx.ending = ending;
  fx.message = std::move(message);
}

}  // namespace leap::policy::detail

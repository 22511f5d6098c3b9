#include "policy/client/client.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>

namespace leap::policy {

namespace {

constexpr std::chrono::milliseconds load_deadline{600'000};
constexpr std::chrono::milliseconds control_deadline{60'000};

control_call call(std::string name, std::string path, std::string body,
                  std::chrono::milliseconds deadline = control_deadline) {
  control_call c;
  c.name = std::move(name);
  c.path = std::move(path);
  c.body = std::move(body);
  c.deadline = deadline;
  return c;
}

sync_transition start_transition(const weight_sync_plan& plan) {
  if (plan.drain) {
    return {{sync_phase::draining, 0, 0}, sync_action::wait_drain};
  }
  if (plan.calls.empty()) {
    return {{sync_phase::health_checking, 0, 0}, sync_action::check_health};
  }
  return {{sync_phase::calling, 0, 0}, sync_action::send_call};
}

sync_transition after_calls(const weight_sync_plan& plan, std::size_t next_call) {
  if (next_call < plan.calls.size()) {
    return {{sync_phase::calling, next_call, 0}, sync_action::send_call};
  }
  return {{sync_phase::health_checking, 0, 0}, sync_action::check_health};
}

}  // namespace

weight_sync_plan sglang_disk_plan(bool pause) {
  weight_sync_plan plan;
  plan.drain = !pause;
  if (pause) {
    plan.calls.push_back(call("pause", "/pause_generation", R"({"mode":"abort"})"));
  }
  plan.calls.push_back(call("load", "/update_weights_from_disk",
                            R"({"model_path":"{path}","weight_version":"{version}"})",
                            load_deadline));
  plan.calls.push_back(call("flush", "/flush_cache", ""));
  plan.check_version = true;
  if (pause) {
    plan.calls.push_back(call("resume", "/continue_generation", "{}"));
  }
  return plan;
}

weight_sync_plan vllm_lora_plan() {
  weight_sync_plan plan;
  plan.calls.push_back(call(
      "load", "/v1/load_lora_adapter",
      R"({"lora_name":"{lora_name}","lora_path":"{path}","load_inplace":true})", load_deadline));
  plan.calls.push_back(call("flush", "/reset_prefix_cache", ""));
  return plan;
}

weight_sync_plan vllm_sleep_reload_plan() {
  weight_sync_plan plan;
  plan.calls.push_back(call("sleep", "/sleep?level=2", ""));
  plan.calls.push_back(call("wake_weights", "/wake_up?tags=weights", ""));
  plan.calls.push_back(
      call("load", "/collective_rpc", R"({"method":"reload_weights"})", load_deadline));
  plan.calls.push_back(call("wake_kv_cache", "/wake_up?tags=kv_cache", ""));
  plan.calls.push_back(call("flush", "/reset_prefix_cache", ""));
  return plan;
}

weight_sync_plan vllm_disk_plan(bool pause) {
  weight_sync_plan plan;
  plan.drain = !pause;
  if (pause) {
    plan.calls.push_back(call("pause", "/pause?mode=abort", ""));
  }
  plan.calls.push_back(call("load", "/collective_rpc",
                            R"({"method":"reload_weights","kwargs":{"weights_path":"{path}"}})",
                            load_deadline));
  plan.calls.push_back(call("flush", "/reset_prefix_cache", ""));
  if (pause) {
    plan.calls.push_back(call("resume", "/resume", ""));
  }
  return plan;
}

namespace {

// vLLM's weight-transfer session, which every backend shares: init (left out when `init_body` is
// empty), start, update_weights, finish with the version, reset the prefix cache; the version is
// checked.
weight_sync_plan transfer_session(const std::string& init_body,
                                  std::chrono::milliseconds init_deadline,
                                  std::chrono::milliseconds start_deadline,
                                  const std::string& update_info) {
  weight_sync_plan plan;
  if (!init_body.empty()) {
    plan.calls.push_back(call("init", "/init_weight_transfer_engine", init_body, init_deadline));
  }
  plan.calls.push_back(call("start", "/start_weight_update", "{}", start_deadline));
  plan.calls.push_back(
      call("load", "/update_weights", R"({"update_info":)" + update_info + "}", load_deadline));
  plan.calls.push_back(
      call("finish", "/finish_weight_update", R"({"weight_version":"{version}"})", load_deadline));
  plan.calls.push_back(call("flush", "/reset_prefix_cache", ""));
  plan.check_version = true;
  return plan;
}

}  // namespace

weight_sync_plan vllm_transfer_disk_plan() {
  return transfer_session(R"({"init_info":{}})", control_deadline, control_deadline,
                          R"({"path":"{path}"})");
}

weight_sync_plan vllm_transfer_nccl_plan(const std::string& init_info,
                                         const std::string& update_info, bool delta) {
  // Forming a group waits for both ends; a broadcast of the weights follows in the same sync.
  auto plan = transfer_session(init_info.empty() ? "" : R"({"init_info":)" + init_info + "}",
                               load_deadline, control_deadline, update_info);
  if (delta) {
    for (auto& c : plan.calls) {
      if (c.name == "load") {
        c.delta_body = R"({"update_info":{delta_update_info}})";
      }
    }
  }
  return plan;
}

weight_sync_plan vllm_transfer_ipc_plan(const std::string& update_info) {
  // The learner's snapshot runs alongside "start" (the companion), so the buffer is whole before
  // /update_weights reads it.
  return transfer_session(R"({"init_info":{}})", control_deadline, load_deadline, update_info);
}

std::string weight_delta_folder(const std::string& dir, std::uint64_t version) {
  char name[32];
  std::snprintf(name, sizeof name, "v-%08llu", static_cast<unsigned long long>(version));
  return (std::filesystem::path(dir) / name).string();
}

std::string substitute_sync_fields(std::string_view text, const weight_sync_request& request,
                                   bool json_escape) {
  auto value = [&](const std::string& v) {
    if (!json_escape) {
      return v;
    }
    std::string quoted = nlohmann::json(v).dump();
    return quoted.substr(1, quoted.size() - 2);
  };
  const std::pair<std::string_view, std::string> fields[] = {
      {"{version}", value(request.version)},
      {"{path}", value(request.weights_path)},
      {"{lora_name}", value(request.lora_name)},
  };
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    bool replaced = false;
    if (text[i] == '{') {
      for (const auto& [key, v] : fields) {
        if (text.substr(i, key.size()) == key) {
          out += v;
          i += key.size();
          replaced = true;
          break;
        }
      }
    }
    if (!replaced) {
      out += text[i++];
    }
  }
  return out;
}

sync_transition next_sync_step(const sync_state& state, sync_event event,
                               const weight_sync_plan& plan) {
  const sync_transition ignore{state, sync_action::reject};
  switch (state.phase) {
    case sync_phase::idle:
    case sync_phase::failed:
      return event == sync_event::start ? start_transition(plan) : ignore;
    case sync_phase::draining:
      if (event == sync_event::drained) {
        return after_calls(plan, 0);
      }
      if (event == sync_event::drain_timeout) {
        return {{sync_phase::idle, 0, 0}, sync_action::abandon};
      }
      return ignore;
    case sync_phase::calling:
      if (event == sync_event::call_ok) {
        return after_calls(plan, state.call_index + 1);
      }
      if (event == sync_event::call_failed) {
        return {{sync_phase::failed, 0, 0}, sync_action::fail};
      }
      return ignore;
    case sync_phase::health_checking:
      if (event == sync_event::health_ok) {
        return {{sync_phase::idle, 0, 0}, sync_action::finish};
      }
      if (event == sync_event::version_mismatch) {
        // Retrying cannot help: the server holds other weights than the ones asked for.
        return {{sync_phase::failed, 0, 0}, sync_action::fail};
      }
      if (event == sync_event::health_failed) {
        const int done = state.health_checks + 1;
        if (done < plan.health_attempts) {
          return {{sync_phase::health_checking, 0, done}, sync_action::retry_health};
        }
        return {{sync_phase::failed, 0, 0}, sync_action::fail};
      }
      return ignore;
  }
  return ignore;
}

std::string_view to_string(sync_phase phase) {
  switch (phase) {
    case sync_phase::idle:
      return "idle";
    case sync_phase::draining:
      return "draining";
    case sync_phase::calling:
      return "calling";
    case sync_phase::health_checking:
      return "health_checking";
    case sync_phase::failed:
      return "failed";
  }
  return "?";
}

std::string_view to_string(sync_event event) {
  switch (event) {
    case sync_event::start:
      return "start";
    case sync_event::drained:
      return "drained";
    case sync_event::drain_timeout:
      return "drain_timeout";
    case sync_event::call_ok:
      return "call_ok";
    case sync_event::call_failed:
      return "call_failed";
    case sync_event::health_ok:
      return "health_ok";
    case sync_event::health_failed:
      return "health_failed";
    case sync_event::version_mismatch:
      return "version_mismatch";
  }
  return "?";
}

std::string_view to_string(sync_action action) {
  switch (action) {
    case sync_action::none:
      return "none";
    case sync_action::wait_drain:
      return "wait_drain";
    case sync_action::send_call:
      return "send_call";
    case sync_action::check_health:
      return "check_health";
    case sync_action::retry_health:
      return "retry_health";
    case sync_action::finish:
      return "finish";
    case sync_action::abandon:
      return "abandon";
    case sync_action::fail:
      return "fail";
    case sync_action::reject:
      return "reject";
  }
  return "?";
}

}  // namespace leap::policy

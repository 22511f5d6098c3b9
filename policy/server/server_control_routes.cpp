#include "policy/server/detail/server_routes.hpp"
#include "policy/wire/wire.hpp"

#include <nlohmann/json.hpp>

#include <ctime>

namespace leap::policy {
namespace {

using nlohmann::json;

std::optional<std::string> query(const http_request& req, const char* key) {
  if (!req.has_param(key)) {
    return std::nullopt;
  }
  return req.param(key);
}

void set_json(httplib::Response& res, const json& body) {
  res.set_content(dump_json(body), "application/json");
}

// /update_weights' body: vLLM's weight-transfer request; a body of the route's older shape (a
// bare "path") is told where a folder load went.
result<weight_transfer_request> parse_update_weights_body(const json& body) {
  auto request = parse_weight_transfer_request(body, "update_info");
  if (!request && body.is_object() && body.contains("path")) {
    return error{request.err().message +
                 " (this is vLLM's weight-transfer route: a folder loads with {\"update_info\": "
                 "{\"path\": ...}} between /start_weight_update and /finish_weight_update, or "
                 "with SGLang's /update_weights_from_disk)"};
  }
  return request;
}

// The control routes' handlers: weight sync, pause and sleep, LoRA, and what a router reads.
class control_service {
 public:
  explicit control_service(const server_context& context)
      : config_(context.config),
        backend_(context.backend),
        state_(context.state),
        metrics_(context.metrics) {}

  // SGLang's /update_weights_from_disk.
  std::optional<http_error> update_weights_from_disk(const http_request& req,
                                                     httplib::Response& res) {
    auto request = parse_body(req, parse_sglang_update_weights_request);
    if (!request) {
      return bad_request(request.err());
    }
    auto loaded = state_.load_folder(backend_, request->path, request->version, 400);
    if (auto* failed = std::get_if<http_error>(&loaded)) {
      // SGLang reports a failed load as success: false; the status says it too (409: a delta
      // for another base, learner/weight_delta.hpp).
      res.status = failed->status;
      set_json(res, json{{"success", false},
                         {"message", failed->message},
                         {"weight_version", state_.weight_version()},
                         {"error", render_error(*failed)["error"]}});
      return std::nullopt;
    }
    const std::int64_t version = std::get<std::int64_t>(loaded);
    res.set_header("x-weight-version", std::to_string(version));
    set_json(res, json{{"success", true},
                       {"message", "weights loaded as version " + std::to_string(version)},
                       {"weight_version", version},
                       {"num_paused_requests", 0}});
    return std::nullopt;
  }

  // ---- vLLM's weight-transfer engine (the session's rules: detail/server_state.hpp) ----

  std::optional<http_error> init_weight_transfer(const http_request& req, httplib::Response& res) {
    auto request = parse_body(req, parse_weight_transfer_request, "init_info");
    if (!request) {
      return bad_request(request.err());
    }
    if (auto bad =
            state_.init_transfer(backend_, config_.weight_transfer_backend, *request->info)) {
      return bad;
    }
    set_json(res, json{{"message", "Weight transfer initialized"}});
    return std::nullopt;
  }

  std::optional<http_error> start_weight_update(const http_request& req, httplib::Response& res) {
    auto body = parse_json_body(req.body());  // optional: include_draft, is_checkpoint_format
    if (!body) {
      return bad_request(body.err());
    }
    if (auto bad = state_.start_transfer(backend_, config_.weight_transfer_backend)) {
      return bad;
    }
    set_json(res, json{{"message", "Weight update started"}});
    return std::nullopt;
  }

  std::optional<http_error> transfer_update_weights(const http_request& req,
                                                    httplib::Response& res) {
    auto request = parse_body(req, parse_update_weights_body);
    if (!request) {
      return bad_request(request.err());
    }
    if (auto bad =
            state_.update_transfer(backend_, config_.weight_transfer_backend, *request->info)) {
      return bad;
    }
    set_json(res, json{{"message", "Weights updated"}});
    return std::nullopt;
  }

  std::optional<http_error> finish_weight_update(const http_request& req, httplib::Response& res) {
    auto request = parse_body(req, parse_finish_weight_update_request);
    if (!request) {
      return bad_request(request.err());
    }
    auto finished =
        state_.finish_transfer(backend_, config_.weight_transfer_backend, request->version);
    if (auto* bad = std::get_if<http_error>(&finished)) {
      return std::move(*bad);
    }
    const std::int64_t version = std::get<std::int64_t>(finished);
    res.set_header("x-weight-version", std::to_string(version));
    set_json(res, json{{"message", "Weight update finished"}, {"weight_version", version}});
    return std::nullopt;
  }

  // ---- pause ----

  std::optional<http_error> pause(const http_request& req, httplib::Response& res) {
    auto request = parse_body(req, parse_pause_request);
    if (!request) {
      return bad_request(request.err());
    }
    const auto counts = state_.pause(request->mode);
    set_json(res, json{{"success", true},
                       {"message", "generation paused"},
                       {"aborted", counts.aborted},
                       {"running", counts.running}});
    return std::nullopt;
  }

  std::optional<http_error> resume(const http_request& /*req*/, httplib::Response& res) {
    state_.resume();
    set_json(res, json{{"success", true}, {"message", "generation resumed"}});
    return std::nullopt;
  }

  // vLLM's pause (served by vLLM with VLLM_SERVER_DEV_MODE=1): the same hold as SGLang's, its
  // modes named as vLLM names them, answered as vLLM answers.
  std::optional<http_error> vllm_pause(const http_request& req, httplib::Response& res) {
    auto request = parse_vllm_pause_request(query(req, "mode"), query(req, "clear_cache"));
    if (!request) {
      return bad_request(request.err());
    }
    state_.pause(request->mode);
    set_json(res, json{{"status", "paused"}});
    return std::nullopt;
  }

  std::optional<http_error> vllm_resume(const http_request& /*req*/, httplib::Response& res) {
    state_.resume();
    set_json(res, json{{"status", "resumed"}});
    return std::nullopt;
  }

  // No prefix cache here; the routes exist so that a weight-sync sequence runs unchanged.
  std::optional<http_error> flush_cache(const http_request& /*req*/, httplib::Response& res) {
    set_json(res, json{{"success", true}, {"message", "cache flushed"}});
    return std::nullopt;
  }

  // ---- vLLM's sleep mode ----
  // As vLLM (since its sleep pauses the scheduler): running generations are dealt with by the
  // sleep's mode (abort by default), and generation requests that arrive while asleep wait in
  // the server until a wake-up leaves nothing asleep; then they run (on the reloaded weights).

  std::optional<http_error> sleep(const http_request& req, httplib::Response& res) {
    auto request = parse_sleep_request(query(req, "level"), query(req, "mode"));
    if (!request) {
      return bad_request(request.err());
    }
    state_.sleep(request->mode);
    res.status = 200;  // vLLM answers an empty 200
    return std::nullopt;
  }

  std::optional<http_error> wake_up(const http_request& req, httplib::Response& res) {
    std::vector<std::string> tags;
    for (std::size_t i = 0; i < req.param_count("tags"); ++i) {
      tags.push_back(req.param("tags", i));
    }
    auto request = parse_wake_up_request(tags);
    if (!request) {
      return bad_request(request.err());
    }
    state_.wake(request->weights, request->kv_cache);
    res.status = 200;
    return std::nullopt;
  }

  std::optional<http_error> is_sleeping(const http_request& /*req*/, httplib::Response& res) {
    set_json(res, json{{"is_sleeping", state_.sleeping()}});
    return std::nullopt;
  }

  std::optional<http_error> collective_rpc(const http_request& req, httplib::Response& res) {
    auto request = parse_body(req, parse_collective_rpc_request);
    if (!request) {
      return bad_request(request.err());
    }
    if (request->method != "reload_weights") {
      return http_error{400, "collective_rpc method '" + request->method +
                                 "' is not served here (served: reload_weights)"};
    }
    if (state_.weights_asleep()) {
      return http_error{400,
                        "the weights are asleep: POST /wake_up?tags=weights before reload_weights"};
    }
    const std::string path = request->weights_path.value_or(config_.model_path);
    auto loaded = state_.load_folder(backend_, path, std::nullopt, 500);
    if (auto* failed = std::get_if<http_error>(&loaded)) {
      failed->message = "reload_weights failed: " + failed->message;
      return std::move(*failed);
    }
    const std::int64_t version = std::get<std::int64_t>(loaded);
    res.set_header("x-weight-version", std::to_string(version));
    // One result per worker (one here); reload_weights returns nothing.
    set_json(res, json{{"results", json::array({nullptr})}});
    return std::nullopt;
  }

  // ---- vLLM's runtime LoRA routes ----

  std::optional<http_error> load_lora(const http_request& req, httplib::Response& res) {
    auto request = parse_body(req, parse_load_lora_request);
    if (!request) {
      return bad_request(request.err());
    }
    if (!backend_.supports_adapters()) {
      return http_error{501, "the " + backend_.name() +
                                 " backend cannot load LoRA adapters (POST /v1/load_lora_adapter "
                                 "for '" +
                                 request->name + "')"};
    }
    if (request->name == config_.model_name) {
      return http_error{
          400, "a LoRA adapter cannot take the base model's name '" + config_.model_name + "'"};
    }
    auto loaded = state_.load_adapter(
        request->name, request->path, request->load_inplace, [&](std::int64_t version) {
          return backend_.load_adapter(request->name, request->path, version);
        });
    if (auto* bad = std::get_if<http_error>(&loaded)) {
      return std::move(*bad);
    }
    res.set_header("x-weight-version", std::to_string(std::get<std::int64_t>(loaded)));
    res.set_content("Success: LoRA adapter '" + request->name + "' added successfully.",
                    "text/plain");
    return std::nullopt;
  }

  std::optional<http_error> unload_lora(const http_request& req, httplib::Response& res) {
    auto request = parse_body(req, parse_unload_lora_request);
    if (!request) {
      return bad_request(request.err());
    }
    if (!backend_.supports_adapters()) {
      return http_error{501, "the " + backend_.name() + " backend cannot load LoRA adapters"};
    }
    if (!state_.unload_adapter(request->name)) {
      return http_error{404, "The lora adapter '" + request->name + "' cannot be found."};
    }
    res.set_content("Success: LoRA adapter '" + request->name + "' removed successfully.",
                    "text/plain");
    return std::nullopt;
  }

  // ---- what a router and an operator read ----

  std::optional<http_error> is_paused(const http_request& /*req*/, httplib::Response& res) {
    set_json(res, json{{"is_paused", state_.gate()->paused()}});
    return std::nullopt;
  }

  std::optional<http_error> health(const http_request& /*req*/, httplib::Response& res) {
    if (state_.gate()->stopping()) {
      return http_error{503, "the server is shutting down"};
    }
    if (auto healthy = backend_.health(); !healthy) {
      return http_error{503, healthy.err().wrap("the " + backend_.name() + " backend").message};
    }
    res.status = 200;  // vLLM answers an empty 200
    return std::nullopt;
  }

  std::optional<http_error> models(const http_request& /*req*/, httplib::Response& res) {
    const json model{{"id", config_.model_name},
                     {"object", "model"},
                     {"created", static_cast<std::int64_t>(std::time(nullptr))},
                     {"owned_by", "leap"},
                     {"root", config_.model_name},
                     {"parent", nullptr},
                     {"max_model_len", config_.max_model_len},
                     // Our extension: a client bounds the ids it accepts by it.
                     {"vocab_size", config_.vocab_size},
                     {"permission", json::array()}};
    json data = json::array({model});
    // Loaded LoRA adapters, as vLLM lists them: the adapter's name, its path as root, the base
    // model as parent.
    for (const auto& [name, path] : state_.adapters()) {
      data.push_back({{"id", name},
                      {"object", "model"},
                      {"created", model["created"]},
                      {"owned_by", "leap"},
                      {"root", path},
                      {"parent", config_.model_name},
                      {"max_model_len", config_.max_model_len},
                      {"vocab_size", config_.vocab_size},
                      {"permission", json::array()}});
    }
    set_json(res, json{{"object", "list"}, {"data", std::move(data)}});
    return std::nullopt;
  }

  std::optional<http_error> model_info(const http_request& /*req*/, httplib::Response& res) {
    set_json(res, json{{"model_path", config_.model_name},
                       {"tokenizer_path", "byte"},
                       {"is_generation", true},
                       {"backend", backend_.name()},
                       {"weight_version", std::to_string(state_.weight_version())}});
    return std::nullopt;
  }

  std::optional<http_error> metrics(const http_request& /*req*/, httplib::Response& res) {
    res.set_content(metrics_.render(state_.weight_version(), state_.gate()->paused()),
                    "text/plain; version=0.0.4");
    return std::nullopt;
  }

 private:
  const server_config& config_;
  policy_backend& backend_;
  server_state& state_;
  server_metrics& metrics_;
};

}  // namespace

std::vector<route> control_routes(const server_context& context) {
  const auto bind = route_binder(std::make_shared<control_service>(context));
  using s = control_service;
  constexpr auto get = http_method::get;
  constexpr auto post = http_method::post;
  return {
      {post, "/update_weights_from_disk", bind(&s::update_weights_from_disk)},
      {post, "/init_weight_transfer_engine", bind(&s::init_weight_transfer)},
      {post, "/start_weight_update", bind(&s::start_weight_update)},
      {post, "/update_weights", bind(&s::transfer_update_weights)},
      {post, "/finish_weight_update", bind(&s::finish_weight_update)},
      {post, "/pause_generation", bind(&s::pause)},
      {post, "/continue_generation", bind(&s::resume)},
      {post, "/resume_generation", bind(&s::resume)},
      {post, "/flush_cache", bind(&s::flush_cache)},
      {post, "/reset_prefix_cache", bind(&s::flush_cache)},
      {post, "/sleep", bind(&s::sleep)},
      {post, "/wake_up", bind(&s::wake_up)},
      {get, "/is_sleeping", bind(&s::is_sleeping)},
      {post, "/collective_rpc", bind(&s::collective_rpc)},
      {post, "/v1/load_lora_adapter", bind(&s::load_lora)},
      {post, "/v1/unload_lora_adapter", bind(&s::unload_lora)},
      {get, "/is_paused", bind(&s::is_paused)},
      {post, "/pause", bind(&s::vllm_pause)},
      {post, "/resume", bind(&s::vllm_resume)},
      {get, "/health", bind(&s::health)},
      {get, "/v1/models", bind(&s::models)},
      {get, "/get_model_info", bind(&s::model_info)},
      {get, "/metrics", bind(&s::metrics)},
  };
}

}  // namespace leap::policy

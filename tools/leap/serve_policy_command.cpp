// `leap serve-policy`: the project's OpenAI-compatible policy server, so that everything runs on a
// machine without vLLM. Backends: `scripted` (a task suite's known good and wrong answers) and
// `torch` (--model DIR: a byte-level model served by LibTorch, weights reloaded by the
// weight-update routes from a learner checkpoint).
#include "common/enums/transfer_backend.hpp"
#include "common/signals.hpp"
#include "policy/server/server.hpp"
#include "tools/launch/tasks.hpp"
#include "tools/leap/command.hpp"
#include "tools/leap/torch/torch.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <signal.h>
#include <sstream>
#include <string>
#include <vector>

namespace leap::cli {
namespace {

struct serve_policy_options {
  std::string backend = "scripted";
  std::string suite;
  std::string model;
  std::string device = "cpu";
  std::string dtype = "float32";
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model_name;  // Default: leap-scripted, or the --model folder's name
  int max_model_len = 0;   // Default: 32768, or the model's max_position_embeddings
  std::size_t threads = 256;
  std::size_t max_connections = 0;  // Default: 0, the worker count
  std::size_t stream_chunk_tokens = 16;
  std::uint64_t seed = 0;
  double ttft_ms = 0.0;
  double tokens_per_s = 0.0;
  double jitter = 0.0;
  std::string first_turn_pass = "0.7,0.45,0.2";
  double fix_probability = 0.5;
  std::vector<std::string> task_pass;
  std::string faults;
  std::int64_t weight_version = 0;
  std::string weight_transfer_config;  // vLLM's flag: {"backend": B}, B a transfer_backend name
};

int fail(const std::string& message) {
  std::cerr << "leap serve-policy: error: " << message << "\n";
  return 1;
}

result<double> parse_probability(const std::string& text, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 || !(value >= 0.0) ||
      value > 1.0) {
    return error{what + " must be a probability in [0, 1] (got '" + text + "')"};
  }
  return value;
}

result<policy::scripted_config> scripted_config_from(const serve_policy_options& o) {
  policy::scripted_config config;
  config.seed = o.seed;
  config.fix_probability = o.fix_probability;
  config.latency = {o.ttft_ms, o.tokens_per_s, o.jitter};

  std::vector<std::string> parts;
  std::stringstream in(o.first_turn_pass);
  for (std::string part; std::getline(in, part, ',');) {
    parts.push_back(part);
  }
  if (parts.size() != 3) {
    return error{
        "--first-turn-pass takes three probabilities for difficulty 1, 2 and 3, "
        "e.g. 0.7,0.45,0.2 (got '" +
        o.first_turn_pass + "')"};
  }
  for (std::size_t d = 0; d < 3; ++d) {
    auto p = parse_probability(parts[d], "--first-turn-pass difficulty " + std::to_string(d + 1));
    if (!p) {
      return p.err();
    }
    config.first_turn_pass[d] = *p;
  }

  auto tasks = launch::load_scripted_suite(o.suite);
  if (!tasks) {
    return tasks.err().wrap("--suite");
  }
  config.tasks = std::move(*tasks);

  std::map<std::string, double> overrides;
  for (const auto& item : o.task_pass) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) {
      return error{"--task-pass takes TASK_ID=P (got '" + item + "')"};
    }
    auto p = parse_probability(item.substr(eq + 1), "--task-pass " + item.substr(0, eq));
    if (!p) {
      return p.err();
    }
    overrides[item.substr(0, eq)] = *p;
  }
  for (auto& task : config.tasks) {
    if (const auto it = overrides.find(task.id); it != overrides.end()) {
      task.first_turn_pass = it->second;
      overrides.erase(it);
    }
  }
  if (!overrides.empty()) {
    return error{"--task-pass names task '" + overrides.begin()->first + "', which is not in " +
                 o.suite};
  }
  return config;
}

// The backend and the line that describes it; max_model_len and model_name resolved.
struct chosen_backend {
  std::shared_ptr<policy::policy_backend> backend;
  std::shared_ptr<const policy::model_vocabulary> vocab;  // null: the byte-level tokenizer
  int vocab_size = 0;                                     // the model's embedding rows
  std::string description;
  std::string model_name;
  int max_model_len = 32768;
};

result<chosen_backend> choose_backend(const serve_policy_options& o) {
  chosen_backend out;
  const bool torch = o.backend == "torch" || !o.model.empty();
  if (!torch && o.backend != "scripted") {
    return error{"--backend '" + o.backend + "' is not available; choose scripted or torch"};
  }
  if (torch) {
    if (o.model.empty()) {
      return error{"--model is required with --backend torch"};
    }
    if (!o.suite.empty()) {
      return error{"--suite is for the scripted backend; --model serves a model"};
    }
    // In leap-torch (leap hands the command line over here).
    auto model = torch::serve_model(o.model, o.device, o.dtype);
    if (!model) {
      return model.err().wrap("--model");
    }
    out.backend = std::move(model->backend);
    out.vocab = model->vocab;
    out.vocab_size = static_cast<int>(model->vocab_size);
    out.description = "torch backend, model " + o.model + " on " + o.device + " (" + o.dtype +
                      ", " + std::to_string(model->num_hidden_layers) + " layers, hidden " +
                      std::to_string(model->hidden_size) + ", " + model->vocab->describe() + ")";
    auto name = std::filesystem::path(o.model).lexically_normal().filename().string();
    if (name.empty()) {  // "models/tiny/" normalises to "models/tiny/", whose filename is ""
      name = std::filesystem::path(o.model).lexically_normal().parent_path().filename().string();
    }
    out.model_name = o.model_name.empty() ? name : o.model_name;
    out.max_model_len =
        o.max_model_len > 0
            ? o.max_model_len
            : static_cast<int>(std::min<std::int64_t>(model->max_position_embeddings, 32768));
    return out;
  }
  if (o.suite.empty()) {
    return error{"--suite is required with --backend scripted"};
  }
  auto scripted = scripted_config_from(o);
  if (!scripted) {
    return scripted.err();
  }
  const std::size_t task_count = scripted->tasks.size();
  auto backend = policy::scripted_backend::create(std::move(*scripted));
  if (!backend) {
    return backend.err();
  }
  out.backend = std::move(*backend);
  out.description = "scripted backend, " + std::to_string(task_count) + " tasks from " + o.suite;
  out.model_name = o.model_name.empty() ? "leap-scripted" : o.model_name;
  out.max_model_len = o.max_model_len > 0 ? o.max_model_len : 32768;
  return out;
}

int run(const serve_policy_options& o) {
  auto faults = policy::parse_fault_spec(o.faults);
  if (!faults) {
    return fail("--faults: " + faults.err().message);
  }
  auto chosen = choose_backend(o);
  if (!chosen) {
    return fail(chosen.err().message);
  }

  policy::server_config config;
  config.host = o.host;
  config.port = o.port;
  config.model_name = chosen->model_name;
  config.max_model_len = chosen->max_model_len;
  config.threads = o.threads;
  config.max_connections = o.max_connections;
  config.stream_chunk_tokens = o.stream_chunk_tokens;
  config.weight_version = o.weight_version;
  // vLLM's reload_weights (POST /collective_rpc) reloads the served folder, where a learner
  // writes the new weights in place.
  config.model_path = o.model;
  config.seed = o.seed;
  config.faults = *faults;
  config.vocab = chosen->vocab;
  config.vocab_size = chosen->vocab_size;
  if (!o.weight_transfer_config.empty()) {
    // As vLLM's --weight-transfer-config: a JSON object whose "backend" picks the engine.
    const auto parsed = nlohmann::json::parse(o.weight_transfer_config, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object() || !parsed.contains("backend") ||
        !parsed["backend"].is_string()) {
      return fail(
          "--weight-transfer-config must be a JSON object with a \"backend\" string, "
          "e.g. '{\"backend\": \"nccl\"}' (got '" +
          o.weight_transfer_config + "')");
    }
    const auto name = parsed["backend"].get<std::string>();
    const auto backend = parse_transfer_backend(name);
    if (!backend) {
      return fail("--weight-transfer-config: backend '" + name +
                  "' is not served here (valid: " + enum_names::valid_names<transfer_backend>() +
                  "; nccl and ipc need --model, ipc --device cuda)");
    }
    config.weight_transfer_backend = *backend;
    if (config.weight_transfer_backend == transfer_backend::ipc && !o.device.starts_with("cuda")) {
      // The learner's weights are copied out of GPU memory: the served model must be on a GPU.
      return fail(
          "--weight-transfer-config: backend 'ipc' needs --device cuda (or cuda:N), got "
          "--device " +
          o.device);
    }
  }

  // Before any server thread exists, so that they inherit the mask; only this thread takes them.
  if (auto routed = signals::route({SIGINT, SIGTERM}); !routed) {
    return fail(routed.err().message);
  }

  auto server = policy::policy_server::start(std::move(config), std::move(chosen->backend));
  if (!server) {
    return fail(server.err().message);
  }
  std::cout << "leap serve-policy: " << chosen->description << (faults->any() ? ", faults on" : "")
            << "\n"
            << "leap serve-policy: listening on " << (*server)->base_url() << std::endl;

  const int signal_number = signals::wait_forever();
  std::cout << "leap serve-policy: stopping on " << (signal_number == SIGINT ? "SIGINT" : "SIGTERM")
            << std::endl;
  (*server)->stop();
  std::cout << "leap serve-policy: stopped" << std::endl;
  return 0;
}

void add_serve_policy(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<serve_policy_options>();
  CLI::App* cmd = app.add_subcommand(
      "serve-policy",
      "Serve a policy over OpenAI-compatible HTTP (vLLM's /v1/completions and "
      "/v1/chat/completions, SGLang's /generate, /tokenize, /metrics, weight-update and pause "
      "routes). Prints the bound address; stops cleanly on SIGINT or SIGTERM.");
  cmd->add_option("--backend", options->backend,
                  "Which policy answers: scripted, or torch (implied by --model)")
      ->capture_default_str();
  cmd->add_option("--model", options->model,
                  "Model folder (config.json + safetensors) served by LibTorch; byte-level "
                  "vocabulary (261 ids, as `leap init-model` writes). The weight-update routes "
                  "reload from the folder they name (a learner checkpoint)");
  cmd->add_option("--device", options->device, "Device of --model: cpu, cuda or cuda:N")
      ->capture_default_str();
  cmd->add_option("--dtype", options->dtype,
                  "Dtype of --model: float32, bfloat16, float16, float64 or auto")
      ->capture_default_str();
  cmd->add_option("--suite", options->suite,
                  "Task suite folder for the scripted backend (<kind>/<name>/task.json, "
                  "solution.<ext>, wrong/<label>.<ext>)");
  cmd->add_option("--host", options->host, "Address to bind")->capture_default_str();
  cmd->add_option("--port", options->port, "Port to bind; 0 picks a free one and prints it")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--seed", options->seed, "Seed of every scripted choice and injected fault")
      ->capture_default_str();
  cmd->add_option("--model-name", options->model_name,
                  "Model name served; requests naming another get 404. Default: leap-scripted, "
                  "or the --model folder's name");
  cmd->add_option("--max-model-len", options->max_model_len,
                  "Context length in tokens. Default: 32768, or --model's "
                  "max_position_embeddings")
      ->check(CLI::PositiveNumber);
  cmd->add_option(
         "--threads", options->threads,
         "Worker threads: requests served at once (connections waiting for a request hold none)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-connections", options->max_connections,
                  "Connections open at once (waiting for a request or served); at the cap the one "
                  "waiting longest gives its place to a new one, else the new one gets 503. "
                  "0: --threads")
      ->capture_default_str();
  cmd->add_option("--stream-chunk-tokens", options->stream_chunk_tokens,
                  "Tokens per streamed chunk at most")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--latency-ttft-ms", options->ttft_ms, "Time to first token, milliseconds")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--tokens-per-s", options->tokens_per_s,
                  "Generation speed after the first token; 0 = unlimited")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--latency-jitter", options->jitter,
                  "Per-request latency scale in [1 - j, 1 + j], j in [0, 1)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.999));
  cmd->add_option("--first-turn-pass", options->first_turn_pass,
                  "First-turn pass probabilities for difficulty 1,2,3")
      ->capture_default_str();
  cmd->add_option("--fix-probability", options->fix_probability,
                  "Probability that a debug turn fixes a wrong answer")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--task-pass", options->task_pass,
                  "TASK_ID=P: first-turn pass probability of one task (repeatable)");
  cmd->add_option(
      "--faults", options->faults,
      "Fault injection on the generation routes: rates per request for drop, 5xx "
      "(502/503/504 drawn), stall, malformed, truncate, abort, 429, 500, 502, 503, "
      "504, no_token_ids, context_too_long, bad_request, hold (a generation "
      "waits after hold_tokens tokens until an abort-mode pause, a new weight "
      "version or hold_ms); script=K1:K2:... (the first arrivals' faults, in order, by those "
      "names or none); stall_ms, abort_tokens, hold_tokens, hold_ms, retry_after_s, "
      "seed. E.g. drop=0.05,5xx=0.05,429=0.02,"
      "abort=0.05,script=503:none:drop,seed=7 (see policy/README.md)");
  cmd->add_option("--weight-transfer-config", options->weight_transfer_config,
                  "vLLM's weight-transfer engine: '{\"backend\": B}', B one of " +
                      enum_names::valid_names<transfer_backend>() +
                      " (nccl and ipc need --model, ipc --device cuda; default disk)");
  cmd->add_option("--weight-version", options->weight_version,
                  "Weight version reported until an update route sets another")
      ->capture_default_str();
  cmd->callback([options, exit_code] { *exit_code = run(*options); });
}

LEAP_COMMAND("serve-policy", add_serve_policy);

}  // namespace
}  // namespace leap::cli

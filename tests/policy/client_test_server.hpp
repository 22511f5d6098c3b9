// A real HTTP server on 127.0.0.1 (cpp-httplib, port picked by the kernel) that answers like vLLM's
// /v1/completions or SGLang's /generate, in the shapes of tests/policy/fixtures, and injects faults
// on request. Header-only: it is included by the client's loopback tests only.
//
// Generation is deterministic and position-based, so that a resumed generation can be checked
// against an uninterrupted one: the token at absolute position p (prompt ids count) is 1000 + p
// with log-prob -0.001 * p, and a reply stops after the position p with p % 16 == 15 (finish
// "stop"), or earlier when max_tokens runs out (finish "length").
#pragma once

#include "policy/client.hpp"
#include "policy/client_config.hpp"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace leap::policy::testing {

enum class fault {
  none,
  drop,      // headers with Content-Length, then the connection closes with no body
  truncate,  // half the body, then the connection closes
  status_502,
  status_503,
  status_504,
  status_429,
  status_500,
  stall,             // no answer until released (the client's timeout fires first)
  malformed,         // 200 with a body that is not JSON
  abort_partial,     // 200 with the first tokens (at most 2, never all) and finish reason "abort"
  context_too_long,  // 400 saying the context is too long
  bad_request,       // 400 for another reason
  no_token_ids,      // 200 without token ids (a vLLM that ignores return_token_ids)
};

inline int position_token(std::size_t position) { return 1000 + static_cast<int>(position); }
inline float position_logprob(std::size_t position) {
  return -0.001F * static_cast<float>(position);
}

// What an uninterrupted generation from a prompt of `prompt_len` ids returns with `max_tokens`.
inline std::vector<int> expected_reply(std::size_t prompt_len, int max_tokens) {
  std::vector<int> ids;
  for (std::size_t p = prompt_len; static_cast<int>(ids.size()) < max_tokens; ++p) {
    ids.push_back(position_token(p));
    if (p % 16 == 15) break;
  }
  return ids;
}

class fake_policy_server {
 public:
  struct record {
    std::string wire_id;  // X-Request-Id: "<turn id>.<attempt>"
    std::string turn_id;  // the part before the last '.'
    std::size_t prompt_len = 0;
    int max_tokens = 0;
    fault applied = fault::none;
  };

  explicit fake_policy_server(wire_flavour flavour) : flavour_(flavour) {
    server_.new_task_queue = [] { return new httplib::ThreadPool(48); };
    server_.set_keep_alive_max_count(100000);
    const auto generate = [this](const httplib::Request& req, httplib::Response& res) {
      on_generate(req, res);
    };
    server_.Post(flavour == wire_flavour::vllm ? "/v1/completions" : "/generate", generate);
    server_.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      on_tokenize(req, res);
    });
    server_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard lock(mutex_);
      ++health_checks_;
      res.status = healthy_ ? 200 : 503;
      res.set_content(healthy_ ? "{}" : R"({"error":{"message":"unhealthy"}})", "application/json");
    });
    server_.Post(".*", [this](const httplib::Request& req, httplib::Response& res) {
      on_control(req, res);
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the accept loop runs would be lost and leave join() hanging.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!server_.is_running() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  ~fake_policy_server() { stop(); }

  void stop() {
    {
      std::lock_guard lock(mutex_);
      released_ = true;
      holding_ = false;
    }
    changed_.notify_all();
    if (thread_.joinable()) {
      server_.stop();
      thread_.join();
    }
  }

  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Faults applied to the next generation requests, one each, in arrival order.
  void push_faults(std::initializer_list<fault> faults) {
    std::lock_guard lock(mutex_);
    faults_.insert(faults_.end(), faults.begin(), faults.end());
  }
  void set_healthy(bool healthy) {
    std::lock_guard lock(mutex_);
    healthy_ = healthy;
  }
  void set_weight_version(std::string version) {
    std::lock_guard lock(mutex_);
    weight_version_ = std::move(version);
  }
  // While holding, generation requests wait (up to 10 s) before they answer.
  void hold(bool on) {
    {
      std::lock_guard lock(mutex_);
      holding_ = on;
    }
    changed_.notify_all();
  }
  // A control route that fails: answered with `status`, or 200 {"success": false} when status is
  // 200.
  void fail_control(std::string path, int status) {
    std::lock_guard lock(mutex_);
    failing_controls_[std::move(path)] = status;
  }

  // Waits (bounded) until `n` generation requests are being held.
  bool wait_held(int n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return held_ >= n; });
  }

  [[nodiscard]] std::vector<record> records() const {
    std::lock_guard lock(mutex_);
    return records_;
  }
  // Every event in arrival order: "generate <wire id> done", "POST /flush_cache {...}", ...
  [[nodiscard]] std::vector<std::string> log() const {
    std::lock_guard lock(mutex_);
    return log_;
  }
  [[nodiscard]] int health_checks() const {
    std::lock_guard lock(mutex_);
    return health_checks_;
  }
  [[nodiscard]] int max_concurrent() const {
    std::lock_guard lock(mutex_);
    return max_concurrent_;
  }

 private:
  void on_generate(const httplib::Request& req, httplib::Response& res) {
    auto body = nlohmann::json::parse(req.body, nullptr, false);
    record rec;
    rec.wire_id = req.get_header_value("X-Request-Id");
    rec.turn_id = rec.wire_id.substr(0, rec.wire_id.rfind('.'));
    std::vector<int> prompt;
    if (!body.is_discarded()) {
      if (flavour_ == wire_flavour::vllm) {
        prompt = body.value("prompt", std::vector<int>{});
        rec.max_tokens = body.value("max_tokens", 16);
      } else {
        prompt = body.value("input_ids", std::vector<int>{});
        rec.max_tokens = body["sampling_params"].value("max_new_tokens", 16);
      }
    }
    rec.prompt_len = prompt.size();
    fault f = fault::none;
    std::string version;
    {
      std::unique_lock lock(mutex_);
      if (!faults_.empty()) {
        f = faults_.front();
        faults_.pop_front();
      }
      rec.applied = f;
      records_.push_back(rec);
      ++concurrent_;
      max_concurrent_ = std::max(max_concurrent_, concurrent_);
      if (holding_ || f == fault::stall) {
        ++held_;
        changed_.notify_all();
        changed_.wait_for(lock, std::chrono::seconds(10),
                          [&] { return released_ || (f != fault::stall && !holding_); });
        --held_;
      }
      --concurrent_;
      version = weight_version_;
      log_.push_back("generate " + rec.wire_id + " done");
    }
    if (body.is_discarded()) {
      res.status = 400;
      res.set_content(R"({"error":{"message":"body is not JSON","type":"invalid_request_error"}})",
                      "application/json");
      return;
    }
    const int n =
        flavour_ == wire_flavour::vllm ? body.value("n", 1) : body["sampling_params"].value("n", 1);
    std::string reply = make_reply(prompt.size(), rec.max_tokens, n, f, version, rec.wire_id);
    switch (f) {
      case fault::drop:
      case fault::truncate: {
        const std::size_t keep = f == fault::drop ? 0 : reply.size() / 2;
        auto shared = std::make_shared<std::string>(std::move(reply));
        res.set_content_provider(shared->size(), "application/json",
                                 [shared, keep](size_t, size_t, httplib::DataSink& sink) {
                                   if (keep > 0) sink.write(shared->data(), keep);
                                   return false;
                                 });
        return;
      }
      case fault::status_502:
        return error_reply(res, 502, "bad gateway");
      case fault::status_503:
        return error_reply(res, 503, "service unavailable");
      case fault::status_504:
        return error_reply(res, 504, "gateway timeout");
      case fault::status_429:
        return error_reply(res, 429, "queue full");
      case fault::status_500:
        return error_reply(res, 500, "engine died");
      case fault::context_too_long:
        return error_reply(res, 400,
                           "This model's maximum context length is 4096 tokens. However, you "
                           "requested 5000 tokens. Please reduce the length of the messages.");
      case fault::bad_request:
        return error_reply(res, 400, "temperature must be non-negative");
      case fault::malformed:
        res.set_content("{\"choices\": [{\"text\": ", "application/json");
        return;
      default:
        res.set_content(reply, "application/json");
        return;
    }
  }

  static void error_reply(httplib::Response& res, int status, const std::string& message) {
    res.status = status;
    nlohmann::json body = {{"object", "error"},
                           {"message", message},
                           {"type", "BadRequestError"},
                           {"param", nullptr},
                           {"code", status}};
    res.set_content(body.dump(), "application/json");
  }

  std::string make_reply(std::size_t prompt_len, int max_tokens, int n, fault f,
                         const std::string& version, const std::string& id) const {
    std::vector<int> ids = expected_reply(prompt_len, max_tokens);
    std::string finish =
        static_cast<int>(ids.size()) == max_tokens && (prompt_len + ids.size() - 1) % 16 != 15
            ? "length"
            : "stop";
    if (f == fault::abort_partial && ids.size() > 1) {
      // Cut before the natural end: an abort never comes after the last token.
      ids.resize(std::min<std::size_t>(ids.size() - 1, 2));
      finish = "abort";
    }
    std::vector<float> lps;
    std::string text;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      lps.push_back(position_logprob(prompt_len + i));
      text += "t" + std::to_string(ids[i]) + " ";
    }
    using json = nlohmann::json;
    if (flavour_ == wire_flavour::vllm) {
      json choices = json::array();
      for (int c = 0; c < n; ++c) {
        json tokens = json::array();
        for (int id : ids) tokens.push_back("t" + std::to_string(id));
        json choice = {{"index", c},
                       {"text", text},
                       {"logprobs",
                        {{"text_offset", json::array()},
                         {"token_logprobs", lps},
                         {"tokens", tokens},
                         {"top_logprobs", json::array()}}},
                       {"finish_reason", finish},
                       {"stop_reason", nullptr},
                       {"prompt_logprobs", nullptr}};
        if (f != fault::no_token_ids) choice["token_ids"] = ids;
        choices.push_back(choice);
      }
      json root = {{"id", "cmpl-" + id},
                   {"object", "text_completion"},
                   {"created", 1700000000},
                   {"model", "fake"},
                   {"choices", choices},
                   {"usage",
                    {{"prompt_tokens", prompt_len},
                     {"completion_tokens", ids.size() * n},
                     {"total_tokens", prompt_len + ids.size() * n}}}};
      if (!version.empty()) root["weight_version"] = version;
      return root.dump();
    }
    json items = json::array();
    for (int c = 0; c < n; ++c) {
      json triples = json::array();
      for (std::size_t i = 0; i < ids.size(); ++i) triples.push_back({lps[i], ids[i], nullptr});
      json reason = finish == "length"  ? json{{"type", "length"}, {"length", ids.size()}}
                    : finish == "abort" ? json{{"type", "abort"},
                                               {"message", "Aborted"},
                                               {"status_code", nullptr},
                                               {"err_type", nullptr}}
                                        : json{{"type", "stop"}, {"matched", 151645}};
      json meta = {{"id", id},
                   {"finish_reason", reason},
                   {"prompt_tokens", prompt_len},
                   {"completion_tokens", ids.size()},
                   {"cached_tokens", 0},
                   {"e2e_latency", 0.001},
                   {"output_token_logprobs", triples}};
      if (!version.empty()) meta["weight_version"] = version;
      items.push_back({{"text", text}, {"output_ids", ids}, {"meta_info", meta}});
    }
    return n == 1 ? items[0].dump() : items.dump();
  }

  // ChatML over bytes: <|im_start|> = 256, <|im_end|> = 257, every other byte is its own id.
  void on_tokenize(const httplib::Request& req, httplib::Response& res) {
    auto body = nlohmann::json::parse(req.body, nullptr, false);
    std::vector<int> ids;
    auto text = [&](const std::string& s) {
      for (unsigned char c : s) ids.push_back(c);
    };
    for (const auto& m : body["messages"]) {
      ids.push_back(256);
      text(m["role"].get<std::string>() + "\n" + m["content"].get<std::string>());
      ids.push_back(257);
      text("\n");
    }
    if (body.value("add_generation_prompt", false)) {
      ids.push_back(256);
      text("assistant\n");
    }
    nlohmann::json reply = {{"count", ids.size()}, {"max_model_len", 4096}, {"tokens", ids}};
    res.set_content(reply.dump(), "application/json");
  }

  void on_control(const httplib::Request& req, httplib::Response& res) {
    std::string path = req.path;
    if (!req.params.empty()) {
      path += "?";
      bool first = true;
      for (const auto& [k, v] : req.params) {
        path += (first ? "" : "&") + k + "=" + v;
        first = false;
      }
    }
    std::unique_lock lock(mutex_);
    log_.push_back(req.method + " " + path + (req.body.empty() ? "" : " " + req.body));
    if (req.path == "/slow") {  // a control call that never answers in time
      changed_.wait_for(lock, std::chrono::seconds(10), [&] { return released_; });
    }
    if (auto it = failing_controls_.find(req.path); it != failing_controls_.end()) {
      if (it->second == 200) {
        res.set_content(R"({"success":false,"message":"checkpoint not found"})",
                        "application/json");
      } else {
        error_reply(res, it->second, "control route failed");
      }
      return;
    }
    if (req.path == "/update_weights_from_disk") {
      auto body = nlohmann::json::parse(req.body, nullptr, false);
      if (!body.is_discarded()) weight_version_ = body.value("weight_version", weight_version_);
    }
    res.set_content(R"({"success":true,"message":"ok"})", "application/json");
  }

  const wire_flavour flavour_;
  httplib::Server server_;
  int port_ = -1;
  std::thread thread_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<fault> faults_;
  std::vector<record> records_;
  std::vector<std::string> log_;
  std::map<std::string, int> failing_controls_;
  std::string weight_version_;
  bool healthy_ = true;
  bool holding_ = false;
  bool released_ = false;
  int held_ = 0;
  int concurrent_ = 0;
  int max_concurrent_ = 0;
  int health_checks_ = 0;
};

// Collects a client's turn callbacks (any thread) for a test to wait on.
struct turn_collector {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<turn_result> results;

  turn_callback callback() {
    return [this](turn_result r) {
      std::lock_guard lock(mutex);
      results.push_back(std::move(r));
      changed.notify_all();
    };
  }
  bool wait_for(std::size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, timeout, [&] { return results.size() >= n; });
  }
  std::vector<turn_result> take() {
    std::lock_guard lock(mutex);
    return results;
  }
};

}  // namespace leap::policy::testing

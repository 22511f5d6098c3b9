// The policy client's loopback tests run against the project's own server: policy_server on
// 127.0.0.1 (port picked by the kernel) with the position backend below, faults scripted per
// arrival through fault_config::script, and what the server saw taken from its observer hooks
// (server_config::on_generation, on_request). Header-only: included by the client's tests only.
//
// Generation is deterministic and position-based, so that a resumed generation can be checked
// against an uninterrupted one: the token at absolute position p (prompt ids count) is 1000 + p
// with log-prob -0.001 * p, and a generation stops after the position p with p % 16 == 15 (finish
// "stop"), or earlier when max_tokens runs out (finish "length").
#pragma once

#include "policy/client/client.hpp"
#include "policy/server/server.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace leap::policy::testing {

inline int position_token(std::size_t position) { return 1000 + static_cast<int>(position); }
inline float position_logprob(std::size_t position) {
  return -0.001F * static_cast<float>(position);
}

// What an uninterrupted generation from a prompt of `prompt_len` ids returns with `max_tokens`.
inline std::vector<int> expected_reply(std::size_t prompt_len, int max_tokens) {
  std::vector<int> ids;
  for (std::size_t p = prompt_len; static_cast<int>(ids.size()) < max_tokens; ++p) {
    ids.push_back(position_token(p));
    if (p % 16 == 15) {
      break;
    }
  }
  return ids;
}

// The position-based model, with a hold latch (generations wait until it is released), a health
// a test can take away and a weight load that fails on demand: all of them states a real backend
// has (busy, a lost device, a bad checkpoint).
class position_backend final : public policy_backend {
 public:
  [[nodiscard]] std::string name() const override { return "position"; }

  [[nodiscard]] status health() const override {
    std::lock_guard lock(mutex_);
    if (!healthy_) {
      return error{"the device is gone"};
    }
    return done{};
  }

  status generate(const backend_request& request, generation_control& control,
                  const token_sink& sink) override {
    {
      std::unique_lock lock(mutex_);
      ++concurrent_;
      max_concurrent_ = std::max(max_concurrent_, concurrent_);
      if (holding_ && hold_after_ == 0) {
        ++held_;
        changed_.notify_all();
        // generation_control wakes nobody but its own sleepers: look at it between short waits,
        // so that an abort or the server stopping ends a held generation.
        while (holding_ && !control.should_stop()) {
          changed_.wait_for(lock, std::chrono::milliseconds(10));
        }
        --held_;
      }
    }
    const int max_tokens = request.sampling.max_tokens.value_or(16);
    for (std::size_t p = request.prompt.size(), n = 0; static_cast<int>(n) < max_tokens; ++p, ++n) {
      if (n > 0 && static_cast<int>(n) == hold_after_tokens()) {
        // Mid-generation: tokens already sent, the rest waits (a pause in abort mode ends it).
        std::unique_lock lock(mutex_);
        ++held_;
        changed_.notify_all();
        while (holding_ && !control.should_stop()) {
          changed_.wait_for(lock, std::chrono::milliseconds(10));
        }
        --held_;
        if (control.should_stop()) {
          break;
        }
      }
      token_step step;
      step.id = position_token(p);
      step.logprob = static_cast<double>(position_logprob(p));
      if (!sink(std::span<const token_step>(&step, 1)) || p % 16 == 15) {
        break;
      }
    }
    std::lock_guard lock(mutex_);
    --concurrent_;
    return done{};
  }

  status load_weights(const std::string& path, std::int64_t version) override {
    std::lock_guard lock(mutex_);
    if (path == failing_path_) {
      return error{failing_message_};
    }
    loaded_.push_back(path + "@" + std::to_string(version));
    return done{};
  }

  // While holding, generations wait after their first `tokens` tokens (0: before the first).
  void hold_after(int tokens) {
    std::lock_guard lock(mutex_);
    hold_after_ = tokens;
  }
  [[nodiscard]] int hold_after_tokens() const {
    std::lock_guard lock(mutex_);
    return hold_after_;
  }
  // While holding, generations wait before their first token (or after hold_after's tokens).
  void hold(bool on) {
    {
      std::lock_guard lock(mutex_);
      holding_ = on;
    }
    changed_.notify_all();
  }
  // Waits (bounded) until `n` generations are being held.
  bool wait_held(int n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return held_ >= n; });
  }
  void set_healthy(bool healthy) {
    std::lock_guard lock(mutex_);
    healthy_ = healthy;
  }
  // load_weights(path, ...) fails with `message`.
  void fail_load(std::string path, std::string message) {
    std::lock_guard lock(mutex_);
    failing_path_ = std::move(path);
    failing_message_ = std::move(message);
  }
  [[nodiscard]] int max_concurrent() const {
    std::lock_guard lock(mutex_);
    return max_concurrent_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool holding_ = false;
  bool healthy_ = true;
  int held_ = 0;
  int hold_after_ = 0;
  int concurrent_ = 0;
  int max_concurrent_ = 0;
  std::string failing_path_;
  std::string failing_message_;
  std::vector<std::string> loaded_;
};

// A policy_server with a position_backend, recording what it saw.
class position_server {
 public:
  struct record {
    std::string wire_id;  // X-Request-Id: "<turn id>.<attempt>"
    std::string turn_id;  // the part before the last '.'
    std::size_t prompt_len = 0;
    int max_tokens = 0;
    fault_kind applied = fault_kind::none;
    std::chrono::steady_clock::time_point arrived;  // when the server's observer saw it
  };

  // `script`: the faults of the first generation arrivals, in order (fault_config::script).
  explicit position_server(std::vector<fault_kind> script = {}, fault_config faults = {},
                           std::int64_t weight_version = 0)
      : backend_(std::make_shared<position_backend>()) {
    faults.script = std::move(script);
    server_config config;
    config.host = "127.0.0.1";
    config.port = 0;
    config.threads = 64;
    config.max_model_len = 4096;
    // The position ids (1000 + p) and the tests' prompt ids are padding rows past the byte
    // vocabulary, as a model's embedding has them.
    config.vocab_size = 200000;
    config.weight_version = weight_version;
    config.model_path = "position-weights";
    config.faults = std::move(faults);
    config.on_generation = [this](const generation_arrival& arrival) {
      record rec;
      rec.arrived = std::chrono::steady_clock::now();
      rec.wire_id = arrival.request_id;
      rec.turn_id = rec.wire_id.substr(0, rec.wire_id.rfind('.'));
      rec.prompt_len = arrival.prompt_tokens;
      rec.max_tokens = arrival.max_tokens;
      rec.applied = arrival.fault.kind;
      std::lock_guard lock(mutex_);
      records_.push_back(std::move(rec));
    };
    config.on_request = [this](const answered_request& request) {
      if (request.method == "GET") {
        return;  // health checks and metrics: not part of any order a test checks
      }
      std::string line;
      if (request.path == "/v1/completions" || request.path == "/generate") {
        line = "generate " + request.request_id + " done";
      } else {
        line = request.method + " " + request.path +
               (request.query.empty() ? "" : "?" + request.query) +
               (request.body.empty() ? "" : " " + request.body);
      }
      std::lock_guard lock(mutex_);
      log_.push_back(std::move(line));
    };
    auto started = policy_server::start(std::move(config), backend_);
    if (!started) {
      ADD_FAILURE() << started.err().message;
      return;
    }
    server_ = std::move(*started);
  }

  [[nodiscard]] int port() const { return server_ ? server_->port() : -1; }
  [[nodiscard]] std::string url() const { return server_ ? server_->base_url() : ""; }
  [[nodiscard]] position_backend& backend() { return *backend_; }
  void stop() {
    if (server_) {
      server_->stop();
    }
  }

  // Shorthands for the backend's latch.
  void hold(bool on) { backend_->hold(on); }
  void hold_after(int tokens) { backend_->hold_after(tokens); }
  bool wait_held(int n) { return backend_->wait_held(n); }

  // Every generation arrival, in arrival order.
  [[nodiscard]] std::vector<record> records() const {
    std::lock_guard lock(mutex_);
    return records_;
  }
  // Every request but GETs, in the order they were answered: "generate <wire id> done" (a
  // non-streamed generation answers when it is done), "POST /flush_cache", "POST /sleep?level=2",
  // "POST /collective_rpc {...}".
  [[nodiscard]] std::vector<std::string> log() const {
    std::lock_guard lock(mutex_);
    return log_;
  }

 private:
  // The server goes first on destruction: its hooks use the members above it.
  std::shared_ptr<position_backend> backend_;
  mutable std::mutex mutex_;
  std::vector<record> records_;
  std::vector<std::string> log_;
  std::unique_ptr<policy_server> server_;
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

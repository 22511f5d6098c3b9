// Everything the policy client can be told, with its default. Plain structs: the orchestrator's
// config loader fills them from the experiment config; validate_client_config says what is wrong
// before the client starts.
#pragma once

#include "common/enums/wire_flavour.hpp"
#include "common/result.hpp"
#include "policy/chat/conversation.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace leap::policy {

// wire_flavour (the server API the client speaks) and its names come from the shared vocabulary.

// Sampling parameters of one generation request.
struct sampling_config {
  int n = 1;                             // Default: 1 (completions per request)
  double temperature = 1.0;              // Default: 1.0
  double top_p = 1.0;                    // Default: 1.0
  int top_k = -1;                        // Default: -1 (disabled; not sent)
  int max_tokens = 1024;                 // Default: 1024 (new tokens per turn)
  std::optional<std::uint64_t> seed;     // Default: none (not sent)
  std::vector<std::string> stop;         // Default: none (stop strings)
  std::vector<token_id> stop_token_ids;  // Default: none (stop ids besides the model's EOS)
};

struct endpoint_config {
  std::string base_url;     // "http://host:port", no trailing path; required
  int max_in_flight = 256;  // Default: 256 (requests this client keeps open on the server at once)
};

struct retry_config {
  // Attempts per turn, the first included, for transient faults (connection errors, timeouts, the
  // statuses below, malformed or truncated bodies). Default: 6
  int max_attempts = 6;
  // Continuations of an aborted generation from the tokens already received. They do not count as
  // attempts. Default: 8
  int max_resumes = 8;
  // Backoff before retry k (1-based): d = min(max_backoff, base_backoff * 2^(k-1)), then drawn
  // uniformly from [(1 - jitter) * d, d] with the client's seeded generator. Default: 100 ms
  std::chrono::milliseconds base_backoff{100};
  // Also caps a server's Retry-After: a retried answer that carries one waits
  // max(backoff, min(Retry-After, max_backoff)). Default: 10 s
  std::chrono::milliseconds max_backoff{10'000};
  double jitter = 0.5;  // Default: 0.5
  // HTTP statuses retried. 429 (server queue full) is retried but never counts against the
  // endpoint's health. Default: 429, 502, 503, 504
  std::vector<int> retry_statuses{429, 502, 503, 504};
};

struct health_config {
  std::string path = "/health";               // Default: /health (GET; any 2xx passes)
  std::chrono::milliseconds interval{2'000};  // Default: 2 s between checks of each endpoint
  std::chrono::milliseconds timeout{2'000};   // Default: 2 s per check
  // Consecutive failures (requests or checks) after which an endpoint is marked down: no new
  // requests go there until a check passes. Default: 3
  int down_after_failures = 3;
};

struct client_config {
  wire_flavour flavour = wire_flavour::vllm;  // Default: vllm
  std::vector<endpoint_config> endpoints;     // at least one
  // The "model" field of vLLM requests. Default: "" (not sent: vLLM serves its only model)
  std::string model;
  // Generation route. Default: "" (the flavour's: /v1/completions or /generate)
  std::string generate_path;
  std::string tokenize_path = "/tokenize";  // Default: /tokenize
  // Ask for a streamed response (SSE: vLLM's `stream: true` completion chunks, SGLang's /generate
  // events) and read it as it arrives. A stream that is cut (connection dropped or truncated, an
  // event that is not JSON, an error event) keeps the tokens already received: the generation is
  // resumed from them exactly as an aborted one (prompt + received ids, max_tokens reduced), so
  // nothing is lost or generated twice. Default: false (one JSON body per request)
  bool stream = false;
  // Requests accepted but not yet sent (all endpoints at their in-flight limit, or down); beyond
  // that submit() answers busy. Default: 4096
  int max_pending = 4096;
  std::chrono::milliseconds connect_timeout{5'000};    // Default: 5 s per connection attempt
  std::chrono::milliseconds request_timeout{600'000};  // Default: 10 min per HTTP attempt
  // Whole life of a turn: waiting, attempts, backoff and resumptions; past it the turn ends
  // `unavailable`. Default: 30 min
  std::chrono::milliseconds turn_deadline{1'800'000};
  // The model's context window in tokens. When > 0, a prompt that fills it ends the turn
  // `truncated` without a request, and max_tokens is lowered to what still fits. Default: 0
  // (unknown)
  int max_context_tokens = 0;
  // The model's vocabulary size. When > 0, a reply with a token id at or above it is refused as a
  // faulty reply (retried); ids are always checked to be integers in [0, 2^31). Default: 0
  // (unknown)
  int vocab_size = 0;
  // The id bound where neither vocab_size nor any server's /v1/models (vLLM's and SGLang's report
  // none) gives one: the vocabulary known here, from the tokenizer prompts are rendered with
  // (policy.tokenizer). A server's report replaces it at the start-up check. Default: 0 (none)
  int fallback_vocab_size = 0;
  retry_config retry;
  health_config health;
  std::uint64_t seed = 0;  // Default: 0 (seeds the backoff jitter)
};

// The route a flavour generates on, unless config.generate_path overrides it.
[[nodiscard]] std::string generate_route(const client_config& config);

// Every field checked; the error names the field ("endpoints[1].base_url: ...").
[[nodiscard]] status validate_client_config(const client_config& config);

}  // namespace leap::policy

// The turn scheduler's decisions, pure: whether a turn fits the context window, what an attempt's
// answer means for its turn (complete, retry, or take the choices), whether and when to retry, and
// what a piece of a generation leaves to do (stitch, resume, done); and the state they act on
// (scheduler_state: the endpoints with their in-flight counts, the queues of waiting turns, the
// backoff's seeded generator). policy_client keeps the turns themselves and applies the decisions
// on its loop; the tests call them directly with answers as the transport delivers them.
//
// Internal to policy/.
#pragma once

#include "policy/client/client.hpp"
#include "policy/client/detail/client_protocol.hpp"
#include "policy/client/detail/client_transport.hpp"
#include "policy/client/detail/endpoint.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace leap::policy::detail {

// A turn's room for new tokens. `fits` false: the prompt fills the window (`message` says so), the
// turn ends `truncated`. `context_tokens` 0: no window known.
struct admission {
  bool fits = true;
  int max_tokens = 0;
  std::string message;
};
[[nodiscard]] admission admit_turn(std::size_t prompt_tokens, int max_tokens, int context_tokens);

// After the `failures`-th transient failure of a call (turn or /tokenize): give up (attempts or the
// deadline ran out; `message` says which, ending with `why`), or try again at `when`.
struct retry_decision {
  bool give_up = false;
  std::string message;
  steady::time_point when;
};
// `unit_random` draws the jitter in [0, 1); it is called only when attempts are left, so that the
// seeded sequence is the same whether or not a call gives up. `retry_after`: the failed answer's
// Retry-After (http_outcome::retry_after); the wait is retry_wait's (at least the backoff, at
// least the server's wait up to retry.max_backoff).
[[nodiscard]] retry_decision decide_retry(
    const retry_config& retry, int failures, std::string_view why, steady::time_point now,
    steady::time_point deadline, const std::function<double()>& unit_random,
    std::optional<std::chrono::milliseconds> retry_after = std::nullopt);

// What one attempt's answer means for its turn.
enum class reply_action : std::uint8_t {
  complete,  // end the turn with `status` and `message`
  retry,     // a transient fault: retry_turn with `message`
  accept,    // take `choices` (they may end in an abort to resume: see continue_piece)
};

struct reply_verdict {
  reply_action action = reply_action::complete;
  turn_status status = turn_status::ok;  // complete
  std::string message;                   // complete, retry: why; accept: the fault it survived
  // retry: the answer's Retry-After, for decide_retry.
  std::optional<std::chrono::milliseconds> retry_after;
  // The answer counts against the endpoint's health (a retry the endpoint caused, a rejection
  // that was the server's fault, a stream cut after some tokens).
  bool endpoint_fault = false;
  std::vector<generated_turn> choices;  // accept
};

struct reply_context {
  wire_flavour flavour = wire_flavour::vllm;
  const retry_config* retry = nullptr;
  int n = 1;               // completions asked for
  int vocab_size = 0;      // the id bound (0: unknown)
  std::string_view where;  // the endpoint's base URL, for messages
  // The ids sent (prompt and the pieces already received): checked against an echoed prompt.
  std::span<const token_id> sent;
};

// An answer read whole (`out.body`).
[[nodiscard]] reply_verdict judge_reply(const http_outcome& out, const reply_context& ctx);
// A streamed answer: `stream` holds what the request's sink fed it. Whole, it is read as a body
// is; cut short (dropped, truncated, an event that is not JSON, an error event) with the tokens of
// one completion, they are accepted as an abort, to be resumed from; otherwise it is retried whole
// (several completions cannot be continued as one).
[[nodiscard]] reply_verdict judge_stream(const http_outcome& out, const stream_accumulator& stream,
                                         const reply_context& ctx);

// The pieces of a generation received so far (empty before any resume).
struct partial_generation {
  std::vector<token_id> ids;
  std::vector<float> logprobs;
  std::string text;
  std::vector<weight_segment> weight_segments;  // of the ids so far (generated_turn's)
};

// What accepted choices leave to do.
enum class piece_action : std::uint8_t {
  done,     // the turn is ok with `choices` (an abort at the last wanted token: cut by length)
  retry,    // nothing to resume from (no tokens, or n > 1): retry the request whole, no fault
  resume,   // store `so_far` as the partial generation and ask for the rest
  give_up,  // resumptions or the deadline ran out: the turn ends `unavailable` with `message`
};

struct piece_decision {
  piece_action action = piece_action::done;
  // The piece ended in an abort with tokens: the turn counts a resumption (whatever the action).
  bool resumed = false;
  std::vector<generated_turn> choices;  // done
  generated_turn so_far;                // resume: the stitched whole so far
  std::string message;                  // retry, give_up
};

// `resumes`: resumptions already made (this one not included); `max_tokens`: the turn's room.
[[nodiscard]] piece_decision continue_piece(std::vector<generated_turn> choices,
                                            const partial_generation& partial, int max_tokens,
                                            int resumes, int max_resumes, bool deadline_passed,
                                            std::string_view where);

// The scheduler's state on the client's loop (one thread; nothing locks): the endpoints, the turns
// waiting for a slot (by key: a key whose turn has ended meanwhile is the caller's to skip), and
// the generator that draws the backoff's jitter. Turns wait in one queue per endpoint (pinned
// there) and one shared queue; both are first in, first out.
class scheduler_state {
 public:
  // Trailing slashes are taken off the base URLs. `seed`: the client's (client_config.seed).
  scheduler_state(std::vector<endpoint_state> endpoints, std::uint64_t seed);

  [[nodiscard]] std::size_t size() const { return endpoints_.size(); }
  [[nodiscard]] const std::vector<endpoint_state>& endpoints() const { return endpoints_; }
  [[nodiscard]] endpoint_state& endpoint(int e) { return endpoints_[static_cast<std::size_t>(e)]; }

  // Where turn `key` goes (choose_route, `pinned` as there): the endpoint to send it to now, or
  // nullopt when it was queued (on its pinned endpoint, or in the shared queue).
  [[nodiscard]] std::optional<int> route(std::uint64_t key, int pinned);

  // A queued turn that can be sent now, taken off its queue: pinned queues first (by endpoint),
  // then the shared queue (to the endpoint choose_route picks). nullopt: none can go.
  struct ready_turn {
    std::uint64_t key = 0;
    int endpoint = -1;
  };
  [[nodiscard]] std::optional<ready_turn> next_ready();

  // An attempt went to endpoint `e`, or came back from it: its in-flight count.
  void sent(int e) { ++endpoint(e).in_flight; }
  void answered(int e) { --endpoint(e).in_flight; }

  // Endpoint `e` went down or stopped admitting: the turns pinned there join the shared queue
  // (behind those already in it, in their order).
  void unpin(int e);

  // Keeps the queued keys for which `keep` is true, in order (the shared queue first, then each
  // endpoint's); `keep` may end the turns it drops.
  void retain_queued(const std::function<bool(std::uint64_t)>& keep);

  // decide_retry with the jitter drawn from this state's generator.
  [[nodiscard]] retry_decision backoff(
      const retry_config& retry, int failures, std::string_view why, steady::time_point now,
      steady::time_point deadline,
      std::optional<std::chrono::milliseconds> retry_after = std::nullopt);

 private:
  std::vector<endpoint_state> endpoints_;
  std::vector<std::deque<std::uint64_t>> pinned_queues_;
  std::deque<std::uint64_t> any_queue_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> unit_{0.0, 1.0};
};

}  // namespace leap::policy::detail

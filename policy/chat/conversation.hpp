// Token-in, token-out conversations: the client keeps every conversation as a growing list of token
// ids with a per-token mask (prompt and feedback 0, model 1) and one record per generated turn. Ids
// the model sampled are appended as the server returned them and never re-tokenised, so that what
// the learner trains on is exactly what the policy produced.
//
// Prompt and feedback text become ids through a chat_renderer: the server's /tokenize (see
// policy_client::tokenize and template_delta) or a local template (chatml_renderer). Feedback is
// always appended as a delta after the ids already there, so earlier ids never change.
//
// Nothing here is thread-safe; a conversation belongs to one owner (one rollout).
#pragma once

#include "common/enums/finish_reason.hpp"
#include "common/result.hpp"
#include "policy/chat/byte_tokenizer.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace leap::policy {

// token_id and chat_message come from policy/chat/byte_tokenizer.hpp (shared with the project's
// servers).

// The ids of a generation sampled under one weight version: from `first` (an index into the
// generation's ids) up to the next segment's first, or to the end.
struct weight_segment {
  std::size_t first = 0;
  std::optional<std::string> version;  // as generated_turn::weight_version of that piece

  friend bool operator==(const weight_segment&, const weight_segment&) = default;
};

// One generated turn as the server returned it (after any resumption was stitched together).
struct generated_turn {
  std::vector<token_id> ids;    // sampled ids, exactly as returned
  std::vector<float> logprobs;  // one per id: log-prob of the sampled id under the policy
  finish_reason finish = finish_reason::stop;  // stop, length, abort or other
  std::string text;  // the server's detokenised text (for verification, not training)
  // The server's weight version when it reports one (a `weight_version` field in the body or an
  // `x-weight-version` header); empty when it does not.
  std::optional<std::string> weight_version;
  // Which version sampled which ids, in id order, one segment per change of version: a generation
  // aborted by a weight update in flight and resumed under the new weights keeps the old version
  // for the ids received before the abort (the version the server reported with them). Filled by
  // the client for a single choice (one segment from 0 when nothing was stitched); empty for the
  // choices of an n > 1 request, where weight_version covers all ids.
  std::vector<weight_segment> weight_segments;
};

// A turn as recorded in the conversation: the generation plus where it sits in the token list.
struct turn_record {
  generated_turn generation;
  std::size_t offset = 0;  // index of the turn's first id in conversation::tokens()
  int endpoint = -1;       // index of the endpoint that served it (-1: unknown)
  int attempts = 1;        // HTTP attempts it took, resumptions included
};

class conversation {
 public:
  conversation() = default;

  // Appends rendered prompt ids (mask 0). Usually called once, with the first user prompt rendered
  // through the chat template and ending with the generation prompt.
  void append_prompt(std::span<const token_id> ids);

  // Appends rendered feedback ids (mask 0): the template delta that closes the model's turn, adds
  // the feedback message and opens the next assistant turn.
  void append_feedback(std::span<const token_id> ids);

  // Appends the model's sampled ids (mask 1) and records the turn. Returns an error, leaving the
  // conversation unchanged, when the turn carries a different number of ids and log-probs.
  [[nodiscard]] status append_model_turn(generated_turn turn, int endpoint = -1, int attempts = 1);

  [[nodiscard]] const std::vector<token_id>& tokens() const { return tokens_; }
  [[nodiscard]] const std::vector<std::uint8_t>& mask() const { return mask_; }
  [[nodiscard]] const std::vector<turn_record>& turns() const { return turns_; }
  [[nodiscard]] std::size_t size() const { return tokens_.size(); }

  // Log-probs aligned with tokens(): 0 for prompt and feedback ids, the sampled log-prob for model
  // ids.
  [[nodiscard]] std::vector<float> aligned_logprobs() const;

  // The endpoint the last turn was served by, or -1: the client pins the conversation there so the
  // server's prefix cache holds its ids.
  [[nodiscard]] int pinned_endpoint() const { return turns_.empty() ? -1 : turns_.back().endpoint; }

 private:
  std::vector<token_id> tokens_;
  std::vector<std::uint8_t> mask_;
  std::vector<turn_record> turns_;
};

// The local template hook: turns messages into ids without a server round trip. Implementations
// must be deterministic; they are called from the caller's thread.
class chat_renderer {
 public:
  virtual ~chat_renderer() = default;

  // The ids of a conversation's opening messages followed by the generation prompt (the opening of
  // the assistant turn). Errors: the tokenizer's, e.g. an unknown role.
  [[nodiscard]] virtual result<std::vector<token_id>> render_prompt(
      const std::vector<chat_message>& messages) const = 0;

  // The ids to append after the model's last turn so that the conversation continues with
  // `feedback` (usually one user message) and opens the next assistant turn. `history` is the
  // conversation so far (its last ids are the model's): a renderer closes the assistant turn only
  // when the model did not already emit the end-of-turn id.
  [[nodiscard]] virtual result<std::vector<token_id>> render_feedback(
      const std::vector<chat_message>& feedback, std::span<const token_id> history) const = 0;
};

// A ChatML template over any text tokenizer:
//   <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
// `encode` turns plain text into ids (it must not add special ids); `im_start` and `im_end` are the
// two special ids. Thread-safe when `encode` is.
class chatml_renderer final : public chat_renderer {
 public:
  using encoder = std::function<std::vector<token_id>(std::string_view)>;

  chatml_renderer(encoder encode, token_id im_start, token_id im_end);

  [[nodiscard]] result<std::vector<token_id>> render_prompt(
      const std::vector<chat_message>& messages) const override;
  [[nodiscard]] result<std::vector<token_id>> render_feedback(
      const std::vector<chat_message>& feedback, std::span<const token_id> history) const override;

 private:
  void render_message(const chat_message& message, std::vector<token_id>& out) const;

  encoder encode_;
  token_id im_start_;
  token_id im_end_;
};

// The project's own byte-level tokenizer and ChatML-like template (policy/chat/byte_tokenizer.hpp):
// what `leap serve-policy` renders with, so a client talking to it renders prompts and feedback
// locally, exactly as the server would. Thread-safe.
class byte_chat_renderer final : public chat_renderer {
 public:
  [[nodiscard]] result<std::vector<token_id>> render_prompt(
      const std::vector<chat_message>& messages) const override;
  [[nodiscard]] result<std::vector<token_id>> render_feedback(
      const std::vector<chat_message>& feedback, std::span<const token_id> history) const override;
};

// Rendering feedback through a server's /tokenize (policy_client::tokenize) takes three renderings
// of one short conversation `prev` (e.g. a single user message), each a pure function of the
// template:
//   base_a = render(prev + [assistant: "a"])                 without generation prompt
//   base_b = render(prev + [assistant: "b"])                 without generation prompt
//   full_a = render(prev + [assistant: "a"] + feedback)      with generation prompt
// closing = template_closing(base_a, base_b) (how the template ends an assistant turn) and
// delta = template_delta(base_a, full_a) (the feedback messages and the next generation prompt).
// The ids to append are close_turn(history, closing) followed by delta.

// full[base.size():]. Errors when `base` is not a prefix of `full` (the template rewrites earlier
// turns, so a delta would change ids already sent) or when the delta is empty.
[[nodiscard]] result<std::vector<token_id>> template_delta(std::span<const token_id> base,
                                                           std::span<const token_id> full);

// The longest common suffix of two renderings that differ only in the last assistant message's
// content: the ids with which the template closes an assistant turn. Errors when it is empty.
[[nodiscard]] result<std::vector<token_id>> template_closing(std::span<const token_id> base_a,
                                                             std::span<const token_id> base_b);

// The part of `closing` still missing at the end of `history`: when the model stopped on its
// end-of-turn id, that id is already there and only the rest (e.g. a newline) is added; after a
// length stop the whole closing is added.
[[nodiscard]] std::vector<token_id> close_turn(std::span<const token_id> history,
                                               std::span<const token_id> closing);

}  // namespace leap::policy

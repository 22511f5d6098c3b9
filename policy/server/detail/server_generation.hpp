// Turning a backend's token stream into what a request asked for: when to stop (end-of-sequence
// token, stop token ids, stop strings, max tokens, min tokens), what text to show (special tokens
// skipped, stop strings trimmed), and, while streaming, which part may be sent already (never half
// a UTF-8 character, never text that a stop string might still swallow). Pure logic, no I/O.
#pragma once

#include "policy/chat/chat.hpp"
#include "policy/server/server.hpp"
#include "policy/wire/wire.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace leap::policy {

struct stop_rules {
  int max_tokens = 16;
  int min_tokens = 0;  // end-of-sequence and stop ids do not stop before this many tokens
  std::vector<std::string> stop;
  std::vector<token_id> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  bool include_stop_str_in_output = false;
  // The served vocabulary: token texts, specials, end-of-generation ids. Default: null, the
  // byte-level tokenizer. Not owned: the server outlives its sequences.
  const model_vocabulary* vocab = nullptr;
};

[[nodiscard]] stop_rules make_stop_rules(const sampling_params& sampling, int max_tokens);

// Builds one sequence token by token, as vLLM's output processor does: the token that ends a
// sequence (end-of-sequence, stop id, the token completing a stop string) is kept in token_ids;
// its text is not shown unless include_stop_str_in_output. Not thread-safe (one per sequence).
class sequence_builder {
 public:
  sequence_builder(stop_rules rules, int index, std::vector<token_id> prompt_ids);

  // Appends one generated token. Returns true once the sequence is finished (then ignore further
  // tokens: push returns true without appending).
  bool push(const token_step& step);
  // The backend ended without an end-of-sequence token: finish "stop" if not finished yet.
  void finish_natural();
  // The generation was aborted: finish "abort" with the tokens so far, if not finished yet.
  void finish_abort(std::string message);

  [[nodiscard]] bool finished() const { return output_.finish.has_value(); }
  [[nodiscard]] const sequence_output& output() const { return output_; }

  // Streaming: the tokens and text produced since the last call. Text is held back while it ends
  // inside a UTF-8 character or could be the start of a stop string; the finish is set on the
  // delta that drains everything once the sequence is finished. The deltas' texts concatenate to
  // output().text and their tokens to output().token_ids. At most `max_tokens` tokens are taken
  // per call (a stream's chunk size), and no text beyond what those tokens produced.
  [[nodiscard]] sequence_output take_delta(std::size_t max_tokens = SIZE_MAX);
  // True when take_delta would return something new (tokens, text or the finish).
  [[nodiscard]] bool has_delta() const;

 private:
  void finish(finish_reason reason);
  [[nodiscard]] std::size_t safe_text_end() const;

  stop_rules rules_;
  sequence_output output_;
  std::vector<std::size_t> text_after_;  // output_.text's length after each token was pushed
  std::size_t sent_tokens_ = 0;
  std::size_t sent_text_ = 0;
  bool finish_sent_ = false;
};

}  // namespace leap::policy

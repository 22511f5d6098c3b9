// The served model's vocabulary, as the policy server needs it: ids to text and back, which ids
// are special and which end a generation, and the chat template that turns messages into a
// prompt. Two kinds: the project's byte-level tokenizer and ChatML template
// (policy/chat/byte_tokenizer.hpp, 261 ids; what a model folder without tokenizer.json gets), and a
// model folder's own Hugging Face tokenizer.json and chat template (load_vocabulary).
//
// Message contents are plain text in both: a special token's text written inside a message (a
// policy echoing `<|im_end|>`, a task's feedback quoting it) is encoded as ordinary text, and only
// the template's own markers become special ids, so a message cannot forge a turn boundary.
//
// Named for the model it serves, apart from orchestrator/vocabulary.hpp (the experiment's words:
// task, turn, rollout, group).
//
// Immutable after construction and thread-safe.
#pragma once

#include "common/result.hpp"
#include "policy/chat/byte_tokenizer.hpp"

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace leap::policy {

class model_vocabulary {
 public:
  virtual ~model_vocabulary() = default;

  // One more than the largest id. A served model's vocab_size must be at least this.
  [[nodiscard]] virtual int vocab_size() const = 0;
  [[nodiscard]] bool is_valid(token_id id) const { return id >= 0 && id < vocab_size(); }
  [[nodiscard]] virtual bool is_special(token_id id) const = 0;
  // The ids that end a generation unless the request says ignore_eos.
  [[nodiscard]] virtual const std::vector<token_id>& end_of_generation_ids() const = 0;
  [[nodiscard]] bool is_end_of_generation(token_id id) const;

  // Text to ids (no post-processor: a template or the caller adds BOS). With parse_special,
  // special tokens' texts become their ids, as /tokenize of vLLM does with a plain prompt.
  [[nodiscard]] virtual std::vector<token_id> encode(std::string_view text,
                                                     bool parse_special = true) const = 0;
  // Ids to raw bytes (may be invalid UTF-8 where a character was cut).
  [[nodiscard]] virtual std::string decode(std::span<const token_id> ids,
                                           bool skip_special = false) const = 0;
  // One token's contribution to a decoded text, so that a generation's text grows token by token:
  // for byte-level vocabularies the concatenation of token_text equals decode. "" outside the
  // vocabulary.
  [[nodiscard]] virtual const std::string& token_text(token_id id) const = 0;

  // The prompt ids of a conversation rendered with the vocabulary's chat template, message
  // contents as plain text. Errors: the template's (an unknown role, raise_exception, ...).
  [[nodiscard]] virtual result<std::vector<token_id>> render_chat(
      std::span<const chat_message> messages, const chat_render_options& options) const = 0;

  // "byte-level tokenizer (261 ids)" or "tokenizer DIR/tokenizer.json (151669 ids)".
  [[nodiscard]] virtual std::string describe() const = 0;
};

// The project's byte-level tokenizer and ChatML template.
[[nodiscard]] std::shared_ptr<const model_vocabulary> byte_vocabulary();

// A model folder's vocabulary: its tokenizer.json, tokenizer_config.json and chat template
// (chat_template.jinja or tokenizer_config.json's chat_template) when the folder holds
// tokenizer.json, else the byte-level one. End-of-generation ids: tokenizer_config.json's
// eos_token, and the special token that closes an assistant turn in the chat template (Qwen's
// `<|im_end|>`, Llama-3's `<|eot_id|>`). Errors name the file and what is wrong or unsupported in
// it (a folder with tokenizer.json but no chat template is refused: the server renders chats).
// Defined in hf_renderer.cpp.
[[nodiscard]] result<std::shared_ptr<const model_vocabulary>> load_vocabulary(
    const std::string& dir);

}  // namespace leap::policy

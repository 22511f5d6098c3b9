// A model folder's own tokenizer (tokenizer.json, tokenizer/) and chat template
// (tokenizer_config.json's chat_template, policy/chat/chat_template.hpp) as a local chat_renderer:
// what `policy.tokenizer` selects, so that prompts and feedback are rendered without a server's
// /tokenize, for every server flavour.
//
// Message contents are plain text: a special token's text inside a message (`<|im_end|>`,
// `<|im_start|>system`, `<|endoftext|>`) is encoded as ordinary text, never as the special id, so a
// policy or a task's feedback cannot forge a turn boundary (transformers' apply_chat_template and
// vLLM render the text and then encode it with every added token recognised, contents included).
// Elsewhere the ids equal rendering then encoding.
//
// Feedback is rendered as a delta after the ids already sent, never by rendering the conversation
// again: the template renders [probe user, assistant MARKER, feedback...] with the generation
// prompt, and the delta is everything after MARKER and the template's closing of an assistant
// turn (the common end of two renderings that differ only in the assistant's text). Templates that
// rewrite earlier assistant turns when a later message arrives (Qwen3 drops their <think> block)
// are fine: the conversation keeps the ids the model sampled, and only the new messages and the
// next generation prompt are rendered. The delta is encoded on its own; `load` refuses a template
// whose delta does not start at a token boundary (encoding it apart would give other ids than the
// whole rendering).
#pragma once

#include "common/result.hpp"
#include "policy/chat/conversation.hpp"

#include <memory>
#include <string>

namespace leap::policy {

struct hf_renderer_options {
  // Extra template variables, e.g. {"enable_thinking": false} for Qwen3. Default: none
  std::string extra_json = "{}";
};

class hf_chat_renderer final : public chat_renderer {
 public:
  // Reads DIR/tokenizer.json, DIR/tokenizer_config.json and the chat template
  // (DIR/chat_template.jinja or tokenizer_config.json's chat_template). Errors name the file and
  // what is wrong; a template whose feedback delta cannot be rendered apart is refused saying why.
  [[nodiscard]] static result<std::shared_ptr<const hf_chat_renderer>> load(
      const std::string& dir, const hf_renderer_options& options = {});

  [[nodiscard]] result<std::vector<token_id>> render_prompt(
      const std::vector<chat_message>& messages) const override;
  [[nodiscard]] result<std::vector<token_id>> render_feedback(
      const std::vector<chat_message>& feedback, std::span<const token_id> history) const override;

  // The tokenizer's vocabulary size (added tokens included).
  [[nodiscard]] int vocab_size() const;

  struct impl;  // defined in hf_renderer.cpp
  [[nodiscard]] const impl& state() const { return *impl_; }
  explicit hf_chat_renderer(std::unique_ptr<impl> state);
  ~hf_chat_renderer() override;

 private:
  std::unique_ptr<impl> impl_;
};

class model_vocabulary;  // policy/chat/model_vocabulary.hpp

// The renderer's tokenizer and chat template as the policy server's vocabulary (what
// load_vocabulary(dir) gives for a folder with tokenizer.json); `dir` names it in messages.
[[nodiscard]] std::shared_ptr<const model_vocabulary> make_vocabulary(
    std::shared_ptr<const hf_chat_renderer> renderer, const std::string& dir);

}  // namespace leap::policy

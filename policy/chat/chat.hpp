// What policy/chat offers, its one public header: the chat side of a served model, with no HTTP.
//  - byte_tokenizer: `token_id`, `chat_message`, the project's byte-level tokenizer and its ChatML
//    template (byte_tokenizer.cpp);
//  - model_vocabulary: a served model's vocabulary, ids to text and back, and its chat rendering
//    (model_vocabulary.cpp);
//  - conversation: token-in, token-out conversations and the `chat_renderer` interface, with the
//    ChatML one (conversation.cpp);
//  - hf_renderer: a model folder's own tokenizer and Jinja chat template as a `chat_renderer`
//    (hf_renderer.cpp).
// The Jinja engine (detail/chat_template.hpp and the detail/chat_template_*.hpp beneath it) is the
// room's inside: only hf_renderer and the room's tests use it.
#pragma once

#include "common/enums/finish_reason.hpp"
#include "common/result.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

// ==== byte_tokenizer (byte_tokenizer.cpp) ================================
// The project's byte-level tokenizer and its ChatML-like chat template. (Hugging Face
// tokenizer.json tokenizers are the top-level tokenizer/ module's, tokenizer/tokenizer.hpp.)
//
// Ids 0..255 are the bytes themselves; a handful of special tokens follow. Because every byte is
// its own token, encoding is a pure concatenation: encode(a + b) == encode(a) + encode(b) whenever
// neither piece splits a special token's text. That is what makes the chat template's feedback
// delta exact: appending a message appends ids and never changes an earlier one.

namespace leap::policy {

using token_id = std::int32_t;

// The special tokens, right after the 256 byte tokens.
namespace special {
inline constexpr token_id bos = 256;
inline constexpr token_id eos = 257;
inline constexpr token_id im_start = 258;
inline constexpr token_id im_end = 259;
inline constexpr token_id pad = 260;
}  // namespace special

// Stateless and thread-safe: every member is a pure function of its arguments.
class byte_tokenizer {
 public:
  // 256 bytes + 5 special tokens.
  [[nodiscard]] static constexpr int vocab_size() { return 261; }
  [[nodiscard]] static constexpr bool is_valid(token_id id) { return id >= 0 && id < vocab_size(); }
  [[nodiscard]] static constexpr bool is_special(token_id id) {
    return id >= 256 && id < vocab_size();
  }
  // The ids that end a generation unless the request says ignore_eos: <|eos|> and <|im_end|> (a
  // chat model ends its turn with <|im_end|>, as ChatML models do).
  [[nodiscard]] static constexpr bool is_end_of_generation(token_id id) {
    return id == special::eos || id == special::im_end;
  }

  // Text to ids. With parse_special, the exact texts "<|bos|>", "<|eos|>", "<|im_start|>",
  // "<|im_end|>" and "<|pad|>" become their special ids (as Hugging Face tokenizers treat added
  // tokens); every other byte becomes its own id. Never fails.
  [[nodiscard]] static std::vector<token_id> encode(std::string_view text,
                                                    bool parse_special = true);

  // Ids to bytes. Special tokens render as their text unless skip_special; ids outside the
  // vocabulary render as nothing (callers validate ids first, see is_valid). The result is raw
  // bytes and may be invalid UTF-8 when a multi-byte character was cut.
  [[nodiscard]] static std::string decode(std::span<const token_id> ids, bool skip_special = false);

  // One token's text: the byte, or the special token's text; "" for an id outside the vocabulary.
  [[nodiscard]] static std::string token_text(token_id id);

  // The id of a special token's text ("<|im_end|>" -> 259), or nothing.
  [[nodiscard]] static std::optional<token_id> special_id(std::string_view text);
};

struct chat_message {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;

  friend bool operator==(const chat_message&, const chat_message&) = default;
};

struct chat_render_options {
  // Appends "<|im_start|>assistant\n" so that the model answers next. Default: true.
  bool add_generation_prompt = true;
  // Leaves the last message open (no "<|im_end|>\n"), so that the model continues it; excludes
  // add_generation_prompt. Default: false.
  bool continue_final_message = false;
};

// Renders a conversation with the ChatML-like template:
//   for each message:  <|im_start|>{role}\n{content}<|im_end|>\n
//   then, optionally:  <|im_start|>assistant\n
// Roles and contents are encoded as plain bytes (special-token texts inside a message stay bytes),
// so a user cannot forge a turn boundary. Never fails.
[[nodiscard]] std::vector<token_id> render_chat(std::span<const chat_message> messages,
                                                const chat_render_options& options = {});

// The ids to append to a conversation that ends with a generated answer, so that the result is
// exactly render_chat(conversation + appended): a pure delta, earlier ids never change.
// A model normally ends its answer with <|im_end|>; then the delta starts with "\n". When the
// answer was cut (finish "length" or "abort"), `so_far` does not end with <|im_end|> and the delta
// closes the answer first. Never fails.
[[nodiscard]] std::vector<token_id> render_chat_delta(std::span<const token_id> so_far,
                                                      std::span<const chat_message> appended,
                                                      bool add_generation_prompt = true);

// A token sequence read back as a ChatML conversation: the inverse of render_chat, used by the
// scripted backend to see which task is asked and at which turn.
struct parsed_chat {
  // False when the ids hold no <|im_start|> at all: the whole text is then one "user" message.
  bool is_chatml = false;
  std::vector<chat_message> messages;  // closed messages, in order
  // When the sequence ends inside an assistant message (a generation prompt, or a partial answer
  // that a client resumes after an abort), the text of that open message so far ("" right after
  // the generation prompt).
  std::optional<std::string> open_assistant;
  // The number of ids before the open assistant message's content starts (the whole sequence when
  // there is no open assistant message). The scripted backend keys its choices on this prefix so
  // that a resumed generation continues the same answer.
  std::size_t open_assistant_offset = 0;
};

// Never fails: malformed input degrades to fewer messages, never to an error.
[[nodiscard]] parsed_chat parse_chat(std::span<const token_id> ids);

}  // namespace leap::policy

// ==== model_vocabulary (model_vocabulary.cpp) ============================
// The served model's vocabulary, as the policy server needs it: ids to text and back, which ids
// are special and which end a generation, and the chat template that turns messages into a
// prompt. Two kinds: the project's byte-level tokenizer and ChatML template
// (byte_tokenizer above, 261 ids; what a model folder without tokenizer.json gets), and a
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

// ==== conversation (conversation.cpp) ====================================
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

namespace leap::policy {

// token_id and chat_message come from the byte tokenizer's section above (shared with the
// project's servers).

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

// The project's own byte-level tokenizer and ChatML-like template (byte_tokenizer above):
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

// ==== hf_renderer (hf_renderer.cpp) ======================================
// A model folder's own tokenizer (tokenizer.json, tokenizer/) and chat template
// (tokenizer_config.json's chat_template, policy/chat/detail/chat_template.hpp) as a local
// chat_renderer: what `policy.tokenizer` selects, so that prompts and feedback are rendered without
// a server's /tokenize, for every server flavour.
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

// The renderer's tokenizer and chat template as the policy server's vocabulary (what
// load_vocabulary(dir) gives for a folder with tokenizer.json); `dir` names it in messages.
[[nodiscard]] std::shared_ptr<const model_vocabulary> make_vocabulary(
    std::shared_ptr<const hf_chat_renderer> renderer, const std::string& dir);

}  // namespace leap::policy

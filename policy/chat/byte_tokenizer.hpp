// The project's byte-level tokenizer and its ChatML-like chat template. (Hugging Face
// tokenizer.json tokenizers are the top-level tokenizer/ module's, tokenizer/tokenizer.hpp.)
//
// Ids 0..255 are the bytes themselves; a handful of special tokens follow. Because every byte is
// its own token, encoding is a pure concatenation: encode(a + b) == encode(a) + encode(b) whenever
// neither piece splits a special token's text. That is what makes the chat template's feedback
// delta exact: appending a message appends ids and never changes an earlier one.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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

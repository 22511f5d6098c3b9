// Prompt rendering: chat messages to the token ids a policy server consumes, as a delta after the
// conversation so far (earlier ids never change: token-in, token-out). No CAF.
#pragma once

#include "actors/messages.hpp"
#include "common/result.hpp"
#include "policy/chat/chat.hpp"

#include <memory>
#include <span>
#include <vector>

namespace leap::actors {

class prompt_renderer {
 public:
  virtual ~prompt_renderer() = default;

  // The ids to append to `history` so that the conversation continues with `messages` and opens the
  // next assistant turn. An empty history renders the opening prompt. Errors: the tokenizer's.
  // Implementations are thread-safe and do not block.
  [[nodiscard]] virtual result<std::vector<token_id>> render(
      std::span<const token_id> history, const std::vector<chat_text>& messages) const = 0;
};

// The project's byte-level tokenizer with its ChatML-like template
// (policy/chat/chat.hpp): what the scripted policy server and the embedded policy
// understand.
[[nodiscard]] std::shared_ptr<const prompt_renderer> make_byte_chatml_renderer();

// Any local chat renderer (policy/chat/chat.hpp), e.g. a model folder's own tokenizer and
// chat template (policy/chat/chat.hpp's hf_renderer, what policy.tokenizer selects).
[[nodiscard]] std::shared_ptr<const prompt_renderer> make_chat_renderer(
    std::shared_ptr<const policy::chat_renderer> renderer);

}  // namespace leap::actors

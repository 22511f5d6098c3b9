#include "policy/chat/chat.hpp"

#include <algorithm>

namespace leap::policy {

void conversation::append_prompt(std::span<const token_id> ids) {
  tokens_.insert(tokens_.end(), ids.begin(), ids.end());
  mask_.insert(mask_.end(), ids.size(), 0);
}

void conversation::append_feedback(std::span<const token_id> ids) { append_prompt(ids); }

status conversation::append_model_turn(generated_turn turn, int endpoint, int attempts) {
  if (turn.ids.size() != turn.logprobs.size()) {
    return error{"model turn has " + std::to_string(turn.ids.size()) + " ids but " +
                 std::to_string(turn.logprobs.size()) + " log-probs"};
  }
  turn_record record;
  record.offset = tokens_.size();
  record.endpoint = endpoint;
  record.attempts = attempts;
  tokens_.insert(tokens_.end(), turn.ids.begin(), turn.ids.end());
  mask_.insert(mask_.end(), turn.ids.size(), 1);
  record.generation = std::move(turn);
  turns_.push_back(std::move(record));
  return ok_status();
}

std::vector<float> conversation::aligned_logprobs() const {
  std::vector<float> out(tokens_.size(), 0.0F);
  for (const auto& turn : turns_) {
    std::copy(turn.generation.logprobs.begin(), turn.generation.logprobs.end(),
              out.begin() + static_cast<std::ptrdiff_t>(turn.offset));
  }
  return out;
}

chatml_renderer::chatml_renderer(encoder encode, token_id im_start, token_id im_end)
    : encode_(std::move(encode)), im_start_(im_start), im_end_(im_end) {}

void chatml_renderer::render_message(const chat_message& message,
                                     std::vector<token_id>& out) const {
  out.push_back(im_start_);
  auto head = encode_(message.role + "\n");
  out.insert(out.end(), head.begin(), head.end());
  auto body = encode_(message.content);
  out.insert(out.end(), body.begin(), body.end());
  out.push_back(im_end_);
  auto newline = encode_("\n");
  out.insert(out.end(), newline.begin(), newline.end());
}

namespace {

status check_roles(const std::vector<chat_message>& messages) {
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const auto& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return error{"message " + std::to_string(i) + ": unknown role '" + role +
                   "' (expected system, user, assistant or tool)"};
    }
  }
  return ok_status();
}

}  // namespace

result<std::vector<token_id>> chatml_renderer::render_prompt(
    const std::vector<chat_message>& messages) const {
  if (messages.empty()) {
    return error{"render_prompt: no messages"};
  }
  if (auto checked = check_roles(messages); !checked) {
    return checked.err();
  }
  std::vector<token_id> out;
  for (const auto& message : messages) {
    render_message(message, out);
  }
  out.push_back(im_start_);
  auto head = encode_("assistant\n");
  out.insert(out.end(), head.begin(), head.end());
  return out;
}

result<std::vector<token_id>> chatml_renderer::render_feedback(
    const std::vector<chat_message>& feedback, std::span<const token_id> history) const {
  if (feedback.empty()) {
    return error{"render_feedback: no feedback messages"};
  }
  if (auto checked = check_roles(feedback); !checked) {
    return checked.err();
  }
  std::vector<token_id> closing{im_end_};
  auto newline = encode_("\n");
  closing.insert(closing.end(), newline.begin(), newline.end());
  std::vector<token_id> out = close_turn(history, closing);
  for (const auto& message : feedback) {
    render_message(message, out);
  }
  out.push_back(im_start_);
  auto head = encode_("assistant\n");
  out.insert(out.end(), head.begin(), head.end());
  return out;
}

result<std::vector<token_id>> byte_chat_renderer::render_prompt(
    const std::vector<chat_message>& messages) const {
  if (messages.empty()) {
    return error{"render_prompt: no messages"};
  }
  if (auto checked = check_roles(messages); !checked) {
    return checked.err();
  }
  return render_chat(messages);
}

result<std::vector<token_id>> byte_chat_renderer::render_feedback(
    const std::vector<chat_message>& feedback, std::span<const token_id> history) const {
  if (feedback.empty()) {
    return error{"render_feedback: no feedback messages"};
  }
  if (auto checked = check_roles(feedback); !checked) {
    return checked.err();
  }
  return render_chat_delta(history, feedback);
}

result<std::vector<token_id>> template_delta(std::span<const token_id> base,
                                             std::span<const token_id> full) {
  if (full.size() < base.size() || !std::equal(base.begin(), base.end(), full.begin())) {
    auto mismatch = std::mismatch(
        base.begin(), base.end(), full.begin(),
        full.begin() + static_cast<std::ptrdiff_t>(std::min(base.size(), full.size())));
    return error{
        "chat template is not append-only: the rendering with feedback differs from the "
        "one without at token " +
        std::to_string(mismatch.first - base.begin()) +
        ", so a delta would change ids already sent; use a template that never rewrites "
        "earlier turns, or a local renderer"};
  }
  if (full.size() == base.size()) {
    return error{"chat template rendered the feedback as no tokens"};
  }
  return std::vector<token_id>(full.begin() + static_cast<std::ptrdiff_t>(base.size()), full.end());
}

result<std::vector<token_id>> template_closing(std::span<const token_id> base_a,
                                               std::span<const token_id> base_b) {
  std::size_t n = 0;
  while (n < base_a.size() && n < base_b.size() &&
         base_a[base_a.size() - 1 - n] == base_b[base_b.size() - 1 - n]) {
    ++n;
  }
  if (n == 0) {
    return error{
        "chat template closes assistant turns with no tokens, or the two probe renderings "
        "end alike only by accident; cannot tell how to close a turn"};
  }
  return std::vector<token_id>(base_a.end() - static_cast<std::ptrdiff_t>(n), base_a.end());
}

std::vector<token_id> close_turn(std::span<const token_id> history,
                                 std::span<const token_id> closing) {
  // The longest prefix of `closing` that `history` already ends with.
  for (std::size_t k = std::min(closing.size(), history.size()); k > 0; --k) {
    if (std::equal(closing.begin(), closing.begin() + static_cast<std::ptrdiff_t>(k),
                   history.end() - static_cast<std::ptrdiff_t>(k))) {
      return {closing.begin() + static_cast<std::ptrdiff_t>(k), closing.end()};
    }
  }
  return {closing.begin(), closing.end()};
}

}  // namespace leap::policy

#include "actors/renderer.hpp"

#include "policy/chat/chat.hpp"

namespace leap::actors {
namespace {

class byte_chatml_renderer final : public prompt_renderer {
 public:
  result<std::vector<token_id>> render(std::span<const token_id> history,
                                       const std::vector<chat_text>& messages) const override {
    std::vector<policy::chat_message> chat;
    chat.reserve(messages.size());
    for (const auto& m : messages) {
      chat.push_back({m.role, m.content});
    }
    if (history.empty()) {
      return policy::render_chat(chat);
    }
    return policy::render_chat_delta(history, chat, /*add_generation_prompt=*/true);
  }
};

class local_chat_renderer final : public prompt_renderer {
 public:
  explicit local_chat_renderer(std::shared_ptr<const policy::chat_renderer> renderer)
      : renderer_(std::move(renderer)) {}

  result<std::vector<token_id>> render(std::span<const token_id> history,
                                       const std::vector<chat_text>& messages) const override {
    std::vector<policy::chat_message> chat;
    chat.reserve(messages.size());
    for (const auto& m : messages) {
      chat.push_back({m.role, m.content});
    }
    if (history.empty()) {
      return renderer_->render_prompt(chat);
    }
    return renderer_->render_feedback(chat, history);
  }

 private:
  std::shared_ptr<const policy::chat_renderer> renderer_;
};

}  // namespace

std::shared_ptr<const prompt_renderer> make_chat_renderer(
    std::shared_ptr<const policy::chat_renderer> renderer) {
  return std::make_shared<local_chat_renderer>(std::move(renderer));
}

std::shared_ptr<const prompt_renderer> make_byte_chatml_renderer() {
  return std::make_shared<byte_chatml_renderer>();
}

}  // namespace leap::actors

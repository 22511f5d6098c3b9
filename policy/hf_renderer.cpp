#include "policy/hf_renderer.hpp"

#include "policy/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"

#include <nlohmann/json.hpp>

namespace leap::policy {
namespace {

using ordered_json = nlohmann::ordered_json;

// Stand-ins for the assistant's answer when rendering the probe conversations: distinctive enough
// never to occur in a template's own text.
constexpr const char* marker_a = "LEAP-DELTA-PROBE-A";
constexpr const char* marker_b = "LEAP-DELTA-PROBE-B";

ordered_json to_json(const std::vector<chat_message>& messages) {
  ordered_json out = ordered_json::array();
  for (const auto& m : messages) out.push_back({{"role", m.role}, {"content", m.content}});
  return out;
}

std::size_t common_suffix(const std::string& a, const std::string& b) {
  std::size_t n = 0;
  while (n < a.size() && n < b.size() && a[a.size() - 1 - n] == b[b.size() - 1 - n]) ++n;
  return n;
}

}  // namespace

struct hf_chat_renderer::impl {
  tokenizer::hf_tokenizer tok;
  chat_template tmpl;
  chat_template_source source;
  ordered_json extra;
  // How the template closes an assistant turn: it depends on the template alone, so it is found
  // once, at load (closing_of).
  std::string closing;

  result<std::string> render(const ordered_json& messages, bool generation_prompt) const {
    return tmpl.render(chat_context(messages, generation_prompt, source.bos_token,
                                    source.eos_token, nullptr, extra));
  }

  static ordered_json with_answer(const char* answer) {
    ordered_json m = ordered_json::array({{{"role", "user"}, {"content", "Write the program."}}});
    m.push_back({{"role", "assistant"}, {"content", answer}});
    return m;
  }

  // The common end of two renderings that differ only in the assistant's text.
  result<std::string> closing_of() const {
    auto base_a = render(with_answer(marker_a), false);
    if (!base_a) return base_a.err().wrap("rendering an assistant turn");
    auto base_b = render(with_answer(marker_b), false);
    if (!base_b) return base_b.err().wrap("rendering an assistant turn");
    const std::size_t n = common_suffix(*base_a, *base_b);
    if (n == 0) return error{"the chat template does not close an assistant turn with any text"};
    return base_a->substr(base_a->size() - n);
  }

  // The template's closing of an assistant turn and the text that follows it for `feedback`.
  result<std::pair<std::string, std::string>> split_feedback(
      const std::vector<chat_message>& feedback) const {
    auto messages = with_answer(marker_a);
    for (const auto& m : to_json(feedback)) messages.push_back(m);
    auto full = render(messages, true);
    if (!full) return full.err().wrap("rendering feedback");
    const auto at = full->find(marker_a);
    if (at == std::string::npos) {
      return error{"the chat template drops an earlier assistant turn once a later message follows"};
    }
    // What follows the answer there: the closing (or, for templates whose closing probe also
    // caught text they add after every turn, the part of it that still applies), then the delta.
    const std::string after = full->substr(at + std::string(marker_a).size());
    std::size_t k = 0;
    while (k < closing.size() && k < after.size() && closing[k] == after[k]) ++k;
    if (k == 0) {
      return error{"the chat template renders an earlier assistant turn without its closing '" +
                   closing + "' once a later message follows"};
    }
    std::string delta = after.substr(k);
    if (delta.empty()) return error{"the chat template renders feedback as no text"};
    return std::pair{closing.substr(0, k), std::move(delta)};
  }
};

hf_chat_renderer::hf_chat_renderer(std::unique_ptr<impl> impl) : impl_(std::move(impl)) {}
hf_chat_renderer::~hf_chat_renderer() = default;

result<std::shared_ptr<const hf_chat_renderer>> hf_chat_renderer::load(
    const std::string& dir, const hf_renderer_options& options) {
  auto tok = tokenizer::hf_tokenizer::load(dir);
  if (!tok) return tok.err();
  auto source = read_chat_template(dir);
  if (!source) return source.err();
  auto tmpl = chat_template::parse(source->source);
  if (!tmpl) return tmpl.err().wrap(source->file + ": chat_template");
  ordered_json extra = ordered_json::parse(options.extra_json, nullptr, false);
  if (extra.is_discarded() || !extra.is_object()) {
    return error{"extra template variables must be a JSON object, got '" + options.extra_json + "'"};
  }
  auto state = std::make_unique<impl>(impl{std::move(*tok), std::move(*tmpl), std::move(*source),
                                           std::move(extra), {}});
  auto closed = state->closing_of();
  if (!closed) return closed.err().wrap(dir + ": chat template refused for multi-turn use");
  state->closing = std::move(*closed);
  // The delta must start at a token boundary: encoding closing and delta apart must give the ids
  // of encoding them together, or the ids appended would differ from what the template means.
  auto split = state->split_feedback({{"user", "The program failed: expected 3, got 4."}});
  if (!split) return split.err().wrap(dir + ": chat template refused for multi-turn use");
  const auto& [closing, delta] = *split;
  auto apart = state->tok.encode(closing);
  const auto delta_ids = state->tok.encode(delta);
  apart.insert(apart.end(), delta_ids.begin(), delta_ids.end());
  if (apart != state->tok.encode(closing + delta)) {
    return error{dir + ": chat template refused for multi-turn use: the feedback it renders ('" +
                 delta.substr(0, 40) + "...') does not start at a token boundary"};
  }
  return std::make_shared<const hf_chat_renderer>(std::move(state));
}

result<std::vector<token_id>> hf_chat_renderer::render_prompt(
    const std::vector<chat_message>& messages) const {
  auto text = impl_->render(to_json(messages), true);
  if (!text) return text.err();
  return impl_->tok.encode(*text);
}

result<std::vector<token_id>> hf_chat_renderer::render_feedback(
    const std::vector<chat_message>& feedback, std::span<const token_id> history) const {
  auto split = impl_->split_feedback(feedback);
  if (!split) return split.err();
  auto out = close_turn(history, impl_->tok.encode(split->first));
  const auto delta = impl_->tok.encode(split->second);
  out.insert(out.end(), delta.begin(), delta.end());
  return out;
}

int hf_chat_renderer::vocab_size() const { return impl_->tok.vocab_size(); }

}  // namespace leap::policy

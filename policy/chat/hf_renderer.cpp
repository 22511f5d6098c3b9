#include "policy/chat/chat.hpp"
#include "policy/chat/detail/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

namespace leap::policy {
namespace {

using ordered_json = nlohmann::ordered_json;

// Stand-ins for the assistant's answer when rendering the probe conversations: distinctive enough
// never to occur in a template's own text.
constexpr const char* marker_a = "LEAP-DELTA-PROBE-A";
constexpr const char* marker_b = "LEAP-DELTA-PROBE-B";

// Special-token texts inside message contents are swapped for placeholders before rendering and
// encoded as plain text after (tokenizer::hf_tokenizer::encode_segments), so only the template's
// own markers become special ids. A placeholder is U+10FFFD, the index of the text it stands for,
// U+10FFFD; U+10FFFD itself in a content is protected the same way, so a placeholder can never be
// forged and no content is refused. Jinja filters that templates apply to contents (trim, strip of
// whitespace) leave placeholders intact.
constexpr std::string_view placeholder_mark = "\xF4\x8F\xBF\xBD";  // U+10FFFD

struct protected_text {
  std::string text;                    // the rendering, with placeholders
  std::vector<std::string> originals;  // what placeholder k stands for
};

std::vector<std::string> special_texts(const tokenizer::hf_tokenizer& tok) {
  std::vector<std::string> out;
  for (token_id id = 0; id < tok.vocab_size(); ++id) {
    if (tok.is_special(id)) {
      out.push_back(tok.id_to_token(id));
    }
  }
  out.emplace_back(placeholder_mark);
  // Longest first, so that the first text matching at a position is the longest one.
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return out;
}

std::string protect(const std::string& content, const std::vector<std::string>& specials,
                    std::vector<std::string>& originals) {
  std::string out;
  out.reserve(content.size());
  for (std::size_t i = 0; i < content.size();) {
    const std::string* hit = nullptr;
    for (const auto& t : specials) {
      if (!t.empty() && content.compare(i, t.size(), t) == 0) {
        hit = &t;
        break;
      }
    }
    if (hit == nullptr) {
      out += content[i++];
      continue;
    }
    out += placeholder_mark;
    out += std::to_string(originals.size());
    out += placeholder_mark;
    originals.push_back(*hit);
    i += hit->size();
  }
  return out;
}

// The rendering as segments: template text and benign content as they are, protected texts plain.
std::vector<tokenizer::hf_tokenizer::text_segment> segments_of(
    const std::string& text, const std::vector<std::string>& originals) {
  std::vector<tokenizer::hf_tokenizer::text_segment> out;
  std::size_t from = 0;
  for (;;) {
    const std::size_t open = text.find(placeholder_mark, from);
    if (open == std::string::npos) {
      break;
    }
    const std::size_t digits = open + placeholder_mark.size();
    const std::size_t close = text.find(placeholder_mark, digits);
    if (close == std::string::npos) {
      break;
    }
    std::size_t k = 0;
    bool number = close > digits;
    for (std::size_t i = digits; i < close && number; ++i) {
      number = text[i] >= '0' && text[i] <= '9';
      if (number) {
        k = k * 10 + static_cast<std::size_t>(text[i] - '0');
      }
    }
    if (!number || k >= originals.size()) {
      break;  // cannot happen: templates add no U+10FFFD
    }
    out.push_back({std::string_view(text).substr(from, open - from), false});
    out.push_back({originals[k], true});
    from = close + placeholder_mark.size();
  }
  out.push_back({std::string_view(text).substr(from), false});
  return out;
}

std::size_t common_suffix(const std::string& a, const std::string& b) {
  std::size_t n = 0;
  while (n < a.size() && n < b.size() && a[a.size() - 1 - n] == b[b.size() - 1 - n]) {
    ++n;
  }
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
  std::vector<std::string> specials;  // special_texts(tok)

  result<std::string> render(const ordered_json& messages, bool generation_prompt) const {
    return tmpl.render(chat_context(messages, generation_prompt, source.bos_token, source.eos_token,
                                    nullptr, extra));
  }

  // The messages as template input, special-token texts in contents replaced by placeholders.
  ordered_json to_json(std::span<const chat_message> messages,
                       std::vector<std::string>& originals) const {
    ordered_json out = ordered_json::array();
    for (const auto& m : messages) {
      out.push_back({{"role", m.role}, {"content", protect(m.content, specials, originals)}});
    }
    return out;
  }

  std::vector<token_id> encode(const std::string& text,
                               const std::vector<std::string>& originals) const {
    if (originals.empty()) {
      return tok.encode(text);
    }
    const auto segments = segments_of(text, originals);
    return tok.encode_segments(segments);
  }

  static ordered_json with_answer(const char* answer) {
    ordered_json m = ordered_json::array({{{"role", "user"}, {"content", "Write the program."}}});
    m.push_back({{"role", "assistant"}, {"content", answer}});
    return m;
  }

  // The common end of two renderings that differ only in the assistant's text.
  result<std::string> closing_of() const {
    auto base_a = render(with_answer(marker_a), false);
    if (!base_a) {
      return base_a.err().wrap("rendering an assistant turn");
    }
    auto base_b = render(with_answer(marker_b), false);
    if (!base_b) {
      return base_b.err().wrap("rendering an assistant turn");
    }
    const std::size_t n = common_suffix(*base_a, *base_b);
    if (n == 0) {
      return error{"the chat template does not close an assistant turn with any text"};
    }
    return base_a->substr(base_a->size() - n);
  }

  // The template's closing of an assistant turn and the text that follows it for `feedback`.
  result<std::pair<std::string, std::string>> split_feedback(
      const std::vector<chat_message>& feedback, std::vector<std::string>& originals) const {
    auto messages = with_answer(marker_a);
    for (const auto& m : to_json(feedback, originals)) {
      messages.push_back(m);
    }
    auto full = render(messages, true);
    if (!full) {
      return full.err().wrap("rendering feedback");
    }
    const auto at = full->find(marker_a);
    if (at == std::string::npos) {
      return error{
          "the chat template drops an earlier assistant turn once a later message follows"};
    }
    // What follows the answer there: the closing (or, for templates whose closing probe also
    // caught text they add after every turn, the part of it that still applies), then the delta.
    const std::string after = full->substr(at + std::string(marker_a).size());
    std::size_t k = 0;
    while (k < closing.size() && k < after.size() && closing[k] == after[k]) {
      ++k;
    }
    if (k == 0) {
      return error{"the chat template renders an earlier assistant turn without its closing '" +
                   closing + "' once a later message follows"};
    }
    std::string delta = after.substr(k);
    if (delta.empty()) {
      return error{"the chat template renders feedback as no text"};
    }
    return std::pair{closing.substr(0, k), std::move(delta)};
  }
};

hf_chat_renderer::hf_chat_renderer(std::unique_ptr<impl> impl) : impl_(std::move(impl)) {}
hf_chat_renderer::~hf_chat_renderer() = default;

result<std::shared_ptr<const hf_chat_renderer>> hf_chat_renderer::load(
    const std::string& dir, const hf_renderer_options& options) {
  auto tok = tokenizer::hf_tokenizer::load(dir);
  if (!tok) {
    return tok.err();
  }
  auto source = read_chat_template(dir);
  if (!source) {
    return source.err();
  }
  auto tmpl = chat_template::parse(source->source);
  if (!tmpl) {
    return tmpl.err().wrap(source->file + ": chat_template");
  }
  ordered_json extra = ordered_json::parse(options.extra_json, nullptr, false);
  if (extra.is_discarded() || !extra.is_object()) {
    return error{"extra template variables must be a JSON object, got '" + options.extra_json +
                 "'"};
  }
  auto state = std::make_unique<impl>(
      impl{std::move(*tok), std::move(*tmpl), std::move(*source), std::move(extra), {}, {}});
  state->specials = special_texts(state->tok);
  auto closed = state->closing_of();
  if (!closed) {
    return closed.err().wrap(dir + ": chat template refused for multi-turn use");
  }
  state->closing = std::move(*closed);
  // The delta must start at a token boundary: encoding closing and delta apart must give the ids
  // of encoding them together, or the ids appended would differ from what the template means.
  std::vector<std::string> none;
  auto split = state->split_feedback({{"user", "The program failed: expected 3, got 4."}}, none);
  if (!split) {
    return split.err().wrap(dir + ": chat template refused for multi-turn use");
  }
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
  std::vector<std::string> originals;
  auto text = impl_->render(impl_->to_json(messages, originals), true);
  if (!text) {
    return text.err();
  }
  return impl_->encode(*text, originals);
}

result<std::vector<token_id>> hf_chat_renderer::render_feedback(
    const std::vector<chat_message>& feedback, std::span<const token_id> history) const {
  std::vector<std::string> originals;
  auto split = impl_->split_feedback(feedback, originals);
  if (!split) {
    return split.err();
  }
  auto out = close_turn(history, impl_->tok.encode(split->first));
  const auto delta = impl_->encode(split->second, originals);
  out.insert(out.end(), delta.begin(), delta.end());
  return out;
}

int hf_chat_renderer::vocab_size() const { return impl_->tok.vocab_size(); }

}  // namespace leap::policy

namespace leap::policy {
namespace {

// A model folder's tokenizer and chat template as the policy server's vocabulary.
class hf_vocabulary final : public model_vocabulary {
 public:
  hf_vocabulary(std::shared_ptr<const hf_chat_renderer> renderer, std::string file)
      : renderer_(std::move(renderer)), file_(std::move(file)) {
    const auto& s = renderer_->state();
    const auto& tok = s.tok;
    // A token's text is what it adds after an ordinary token: decoders that strip the first
    // token's leading space (Metaspace) then keep it, so texts concatenate as the decode does.
    const auto anchor = tok.token_to_id("a");
    const std::string anchor_text = anchor ? tok.decode(std::vector<token_id>{*anchor}) : "";
    texts_.resize(static_cast<std::size_t>(tok.vocab_size()));
    for (token_id id = 0; id < tok.vocab_size(); ++id) {
      std::string text;
      if (anchor) {
        text = tok.decode(std::vector<token_id>{*anchor, id});
        if (text.starts_with(anchor_text)) {
          text.erase(0, anchor_text.size());
        } else {
          text = tok.decode(std::vector<token_id>{id});
        }
      } else {
        text = tok.decode(std::vector<token_id>{id});
      }
      texts_[static_cast<std::size_t>(id)] = std::move(text);
    }
    if (tok.named().eos) {
      ends_.push_back(*tok.named().eos);
    }
    const auto closing = tok.encode(s.closing);
    if (!closing.empty() && tok.is_special(closing.front()) &&
        std::find(ends_.begin(), ends_.end(), closing.front()) == ends_.end()) {
      ends_.push_back(closing.front());
    }
  }

  int vocab_size() const override { return renderer_->state().tok.vocab_size(); }
  bool is_special(token_id id) const override { return renderer_->state().tok.is_special(id); }
  const std::vector<token_id>& end_of_generation_ids() const override { return ends_; }
  std::vector<token_id> encode(std::string_view text, bool parse_special) const override {
    return renderer_->state().tok.encode(text, false, parse_special);
  }
  std::string decode(std::span<const token_id> ids, bool skip_special) const override {
    return renderer_->state().tok.decode(ids, skip_special);
  }
  const std::string& token_text(token_id id) const override {
    return is_valid(id) ? texts_[static_cast<std::size_t>(id)] : empty_;
  }

  result<std::vector<token_id>> render_chat(std::span<const chat_message> messages,
                                            const chat_render_options& options) const override {
    const auto& s = renderer_->state();
    std::vector<std::string> originals;
    auto json_messages = s.to_json(messages, originals);
    auto text =
        s.render(json_messages, options.add_generation_prompt && !options.continue_final_message);
    if (!text) {
      return text.err();
    }
    if (options.continue_final_message && !messages.empty()) {
      // As transformers: the rendering is cut right after the final message's content.
      const auto final_content = json_messages.back()["content"].get<std::string>();
      const auto at = text->rfind(final_content);
      if (final_content.empty() || at == std::string::npos) {
        return error{
            "continue_final_message: the chat template does not render the final "
            "message's content as it is"};
      }
      text->resize(at + final_content.size());
    }
    return s.encode(*text, originals);
  }

  std::string describe() const override {
    return "tokenizer " + file_ + " (" + std::to_string(vocab_size()) + " ids)";
  }

 private:
  std::shared_ptr<const hf_chat_renderer> renderer_;
  std::string file_;
  std::vector<std::string> texts_;
  std::vector<token_id> ends_;
  std::string empty_;
};

}  // namespace

std::shared_ptr<const model_vocabulary> make_vocabulary(
    std::shared_ptr<const hf_chat_renderer> renderer, const std::string& dir) {
  return std::make_shared<const hf_vocabulary>(
      std::move(renderer), (std::filesystem::path(dir) / "tokenizer.json").string());
}

result<std::shared_ptr<const model_vocabulary>> load_vocabulary(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json", ec)) {
    return byte_vocabulary();
  }
  auto renderer = hf_chat_renderer::load(dir);
  if (!renderer) {
    return renderer.err();
  }
  return make_vocabulary(std::move(*renderer), dir);
}

}  // namespace leap::policy

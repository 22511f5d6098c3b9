#include "policy/chat/chat.hpp"

#include <algorithm>

namespace leap::policy {

bool model_vocabulary::is_end_of_generation(token_id id) const {
  const auto& ends = end_of_generation_ids();
  return std::find(ends.begin(), ends.end(), id) != ends.end();
}

namespace {

class byte_vocab final : public model_vocabulary {
 public:
  byte_vocab() {
    for (token_id id = 0; id < byte_tokenizer::vocab_size(); ++id) {
      texts_.push_back(byte_tokenizer::token_text(id));
    }
  }
  int vocab_size() const override { return byte_tokenizer::vocab_size(); }
  bool is_special(token_id id) const override { return byte_tokenizer::is_special(id); }
  const std::vector<token_id>& end_of_generation_ids() const override { return ends_; }
  std::vector<token_id> encode(std::string_view text, bool parse_special) const override {
    return byte_tokenizer::encode(text, parse_special);
  }
  std::string decode(std::span<const token_id> ids, bool skip_special) const override {
    return byte_tokenizer::decode(ids, skip_special);
  }
  const std::string& token_text(token_id id) const override {
    return is_valid(id) ? texts_[static_cast<std::size_t>(id)] : empty_;
  }
  result<std::vector<token_id>> render_chat(std::span<const chat_message> messages,
                                            const chat_render_options& options) const override {
    return policy::render_chat(messages, options);
  }
  std::string describe() const override { return "byte-level tokenizer (261 ids)"; }

 private:
  std::vector<std::string> texts_;
  std::vector<token_id> ends_{special::eos, special::im_end};
  std::string empty_;
};

}  // namespace

std::shared_ptr<const model_vocabulary> byte_vocabulary() {
  static const auto instance = std::make_shared<const byte_vocab>();
  return instance;
}

}  // namespace leap::policy

#include "policy/chat/chat.hpp"

#include <array>

namespace leap::policy {
namespace {

struct special_entry {
  std::string_view text;
  token_id id;
};

constexpr std::array<special_entry, 5> special_tokens{{
    {"<|bos|>", special::bos},
    {"<|eos|>", special::eos},
    {"<|im_start|>", special::im_start},
    {"<|im_end|>", special::im_end},
    {"<|pad|>", special::pad},
}};

void append_bytes(std::vector<token_id>& out, std::string_view text) {
  for (const char c : text) {
    out.push_back(static_cast<token_id>(static_cast<unsigned char>(c)));
  }
}

void append_message(std::vector<token_id>& out, const chat_message& message, bool close) {
  out.push_back(special::im_start);
  append_bytes(out, message.role);
  out.push_back('\n');
  append_bytes(out, message.content);
  if (close) {
    out.push_back(special::im_end);
    out.push_back('\n');
  }
}

void append_generation_prompt(std::vector<token_id>& out) {
  out.push_back(special::im_start);
  append_bytes(out, "assistant");
  out.push_back('\n');
}

}  // namespace

std::vector<token_id> byte_tokenizer::encode(std::string_view text, bool parse_special) {
  std::vector<token_id> ids;
  ids.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    if (parse_special && text[i] == '<') {
      bool matched = false;
      for (const auto& entry : special_tokens) {
        if (text.substr(i, entry.text.size()) == entry.text) {
          ids.push_back(entry.id);
          i += entry.text.size();
          matched = true;
          break;
        }
      }
      if (matched) {
        continue;
      }
    }
    ids.push_back(static_cast<token_id>(static_cast<unsigned char>(text[i])));
    ++i;
  }
  return ids;
}

std::string byte_tokenizer::decode(std::span<const token_id> ids, bool skip_special) {
  std::string text;
  text.reserve(ids.size());
  for (const token_id id : ids) {
    if (id >= 0 && id < 256) {
      text.push_back(static_cast<char>(static_cast<unsigned char>(id)));
    } else if (is_special(id) && !skip_special) {
      text += token_text(id);
    }
  }
  return text;
}

std::string byte_tokenizer::token_text(token_id id) {
  if (id >= 0 && id < 256) {
    return std::string(1, static_cast<char>(static_cast<unsigned char>(id)));
  }
  for (const auto& entry : special_tokens) {
    if (entry.id == id) {
      return std::string(entry.text);
    }
  }
  return {};
}

std::optional<token_id> byte_tokenizer::special_id(std::string_view text) {
  for (const auto& entry : special_tokens) {
    if (entry.text == text) {
      return entry.id;
    }
  }
  return std::nullopt;
}

std::vector<token_id> render_chat(std::span<const chat_message> messages,
                                  const chat_render_options& options) {
  std::vector<token_id> ids;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const bool last = i + 1 == messages.size();
    append_message(ids, messages[i], !(last && options.continue_final_message));
  }
  if (options.add_generation_prompt && !options.continue_final_message) {
    append_generation_prompt(ids);
  }
  return ids;
}

std::vector<token_id> render_chat_delta(std::span<const token_id> so_far,
                                        std::span<const chat_message> appended,
                                        bool add_generation_prompt) {
  std::vector<token_id> delta;
  if (so_far.empty() || so_far.back() != special::im_end) {
    delta.push_back(special::im_end);
  }
  delta.push_back('\n');
  for (const auto& message : appended) {
    append_message(delta, message, true);
  }
  if (add_generation_prompt) {
    append_generation_prompt(delta);
  }
  return delta;
}

parsed_chat parse_chat(std::span<const token_id> ids) {
  parsed_chat parsed;
  parsed.open_assistant_offset = ids.size();
  std::size_t i = 0;
  while (i < ids.size() && ids[i] != special::im_start) {
    ++i;
  }
  if (i == ids.size()) {
    // Not ChatML: a raw completion prompt is one user message.
    parsed.messages.push_back({"user", byte_tokenizer::decode(ids)});
    return parsed;
  }
  parsed.is_chatml = true;
  while (i < ids.size()) {
    // ids[i] is <|im_start|>: the role runs to the first '\n', the content to <|im_end|>.
    std::size_t j = i + 1;
    while (j < ids.size() && ids[j] != '\n' && ids[j] != special::im_start) {
      ++j;
    }
    if (j == ids.size() || ids[j] == special::im_start) {
      // A role without its newline: an unfinished header, nothing to read.
      i = j;
      continue;
    }
    chat_message message;
    message.role = byte_tokenizer::decode(ids.subspan(i + 1, j - i - 1));
    const std::size_t content_start = j + 1;
    std::size_t k = content_start;
    while (k < ids.size() && ids[k] != special::im_end && ids[k] != special::im_start) {
      ++k;
    }
    message.content = byte_tokenizer::decode(ids.subspan(content_start, k - content_start));
    if (k == ids.size()) {
      if (message.role == "assistant") {
        parsed.open_assistant = std::move(message.content);
        parsed.open_assistant_offset = content_start;
      } else {
        parsed.messages.push_back(std::move(message));
      }
      break;
    }
    parsed.messages.push_back(std::move(message));
    i = k;
    // Skip <|im_end|> and whatever separates it from the next <|im_start|> ("\n").
    while (i < ids.size() && ids[i] != special::im_start) {
      ++i;
    }
  }
  return parsed;
}

}  // namespace leap::policy

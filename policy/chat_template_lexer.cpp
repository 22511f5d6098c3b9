// The lexer of chat_template.hpp's Jinja subset (@huggingface/jinja's lexer.ts), with the UTF-8
// helpers of detail/chat_template_syntax.hpp.
#include "common/utf8.hpp"
#include "policy/detail/chat_template_syntax.hpp"

#include <cctype>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace leap::policy::detail::jinja {

std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80           ? 1
                    : (c >> 5) == 0x6  ? 2
                    : (c >> 4) == 0xE  ? 3
                    : (c >> 3) == 0x1E ? 4
                                       : 1;
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::size_t code_point_count(const std::string& s) {
  std::size_t n = 0;
  for (char c : s) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) {
      ++n;
    }
  }
  return n;
}

// Decodes one code point at s[i], advancing i. Invalid bytes decode as themselves.
std::uint32_t decode_utf8(const std::string& s, std::size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  auto cont = [&](std::size_t k) {
    return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) & 0x3F : 0;
  };
  if (c < 0x80) {
    i += 1;
    return c;
  }
  if ((c >> 5) == 0x6 && i + 1 < s.size()) {
    const std::uint32_t cp = ((c & 0x1Fu) << 6) | cont(1);
    i += 2;
    return cp;
  }
  if ((c >> 4) == 0xE && i + 2 < s.size()) {
    const std::uint32_t cp = ((c & 0x0Fu) << 12) | (cont(1) << 6) | cont(2);
    i += 3;
    return cp;
  }
  if ((c >> 3) == 0x1E && i + 3 < s.size()) {
    const std::uint32_t cp = ((c & 0x07u) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
    i += 4;
    return cp;
  }
  i += 1;
  return c;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string trim_left(const std::string& s, const std::string* chars) {
  std::size_t b = 0;
  while (b < s.size() &&
         (chars != nullptr ? chars->find(s[b]) != std::string::npos : is_space(s[b]))) {
    ++b;
  }
  return s.substr(b);
}

std::string trim_right(const std::string& s, const std::string* chars) {
  std::size_t e = s.size();
  while (e > 0 &&
         (chars != nullptr ? chars->find(s[e - 1]) != std::string::npos : is_space(s[e - 1]))) {
    --e;
  }
  return s.substr(0, e);
}

bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

namespace {

struct mapped_text {
  std::string text;
  std::vector<std::size_t> origin;  // origin[i]: offset in the original source of text[i]
  void push(char c, std::size_t from) {
    text += c;
    origin.push_back(from);
  }
};

// transformers' environment: trim_blocks and lstrip_blocks, one trailing newline dropped (the JS
// port's preprocess()).
mapped_text preprocess(const std::string& source) {
  mapped_text in;
  for (std::size_t i = 0; i < source.size(); ++i) {
    in.push(source[i], i);
  }
  if (!in.text.empty() && in.text.back() == '\n') {
    in.text.pop_back();
    in.origin.pop_back();
  }
  // lstrip_blocks: /^[ \t]*({[#%-])/gm -> "$1"
  mapped_text lstripped;
  bool line_start = true;
  for (std::size_t i = 0; i < in.text.size();) {
    if (line_start) {
      std::size_t j = i;
      while (j < in.text.size() && (in.text[j] == ' ' || in.text[j] == '\t')) {
        ++j;
      }
      if (j + 1 < in.text.size() && in.text[j] == '{' &&
          (in.text[j + 1] == '#' || in.text[j + 1] == '%' || in.text[j + 1] == '-')) {
        i = j;
      }
      line_start = false;
      continue;
    }
    const char c = in.text[i];
    lstripped.push(c, in.origin[i]);
    line_start = c == '\n' || c == '\r';
    ++i;
  }
  // trim_blocks: /([#%-]})\n/g -> "$1"
  mapped_text trimmed;
  for (std::size_t i = 0; i < lstripped.text.size(); ++i) {
    const char c = lstripped.text[i];
    if ((c == '#' || c == '%' || c == '-') && i + 2 < lstripped.text.size() &&
        lstripped.text[i + 1] == '}' && lstripped.text[i + 2] == '\n') {
      trimmed.push(c, lstripped.origin[i]);
      trimmed.push('}', lstripped.origin[i + 1]);
      i += 2;
      continue;
    }
    trimmed.push(c, lstripped.origin[i]);
  }
  return trimmed;
}

// ------------------------------------------------------------------------------------------------
// Lexer

bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

std::vector<token> tokenize(const std::string& source, const source_map& positions) {
  const mapped_text pre = preprocess(source);
  const std::string& src = pre.text;
  std::vector<token> tokens;
  std::size_t cur = 0;
  int curly_depth = 0;
  auto origin = [&](std::size_t at) {
    return at < pre.origin.size() ? pre.origin[at] : source.size();
  };
  auto error_at = [&](const std::string& message, std::size_t at) {
    fail(message, positions.at(origin(at)));
  };
  auto push = [&](tok type, std::string value, std::size_t at) {
    tokens.push_back({type, std::move(value), origin(at)});
  };
  auto consume_while = [&](auto predicate) {
    std::string out;
    while (cur < src.size() && predicate(src[cur])) {
      if (src[cur] == '\\') {
        ++cur;
        if (cur >= src.size()) {
          error_at("unexpected end of input", cur);
        }
        const char e = src[cur++];
        if (e == 'x' || e == 'u') {
          const std::size_t len = e == 'x' ? 2 : 4;
          const std::string hex = src.substr(cur, len);
          if (hex.size() != len ||
              hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
            error_at("invalid hexadecimal escape sequence", cur);
          }
          append_utf8(out, static_cast<char32_t>(std::stoul(hex, nullptr, 16)));
          cur += len;
          continue;
        }
        switch (e) {
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          case 'r':
            out += '\r';
            break;
          case 'b':
            out += '\b';
            break;
          case 'f':
            out += '\f';
            break;
          case 'v':
            out += '\v';
            break;
          case '\'':
            out += '\'';
            break;
          case '"':
            out += '"';
            break;
          case '\\':
            out += '\\';
            break;
          default:
            error_at(std::string("unexpected escaped character '") + e + "'", cur - 1);
        }
        continue;
      }
      out += src[cur++];
      if (cur >= src.size()) {
        error_at("unexpected end of input", cur);
      }
    }
    return out;
  };
  auto strip_trailing_whitespace = [&] {
    if (!tokens.empty() && tokens.back().type == tok::text) {
      tokens.back().value = trim_right(tokens.back().value, nullptr);
      if (tokens.back().value.empty()) {
        tokens.pop_back();
      }
    }
  };
  auto skip_leading_whitespace = [&] {
    while (cur < src.size() && is_space(src[cur])) {
      ++cur;
    }
  };
  auto starts = [&](const char* s) { return src.compare(cur, std::strlen(s), s) == 0; };

  static const std::pair<const char*, tok> table[] = {
      {"{%", tok::open_statement},
      {"%}", tok::close_statement},
      {"{{", tok::open_expression},
      {"}}", tok::close_expression},
      {"(", tok::open_paren},
      {")", tok::close_paren},
      {"{", tok::open_curly},
      {"}", tok::close_curly},
      {"[", tok::open_square},
      {"]", tok::close_square},
      {",", tok::comma},
      {".", tok::dot},
      {":", tok::colon},
      {"|", tok::pipe},
      {"<=", tok::comparison},
      {">=", tok::comparison},
      {"==", tok::comparison},
      {"!=", tok::comparison},
      {"<", tok::comparison},
      {">", tok::comparison},
      {"+", tok::additive},
      {"-", tok::additive},
      {"~", tok::additive},
      {"**", tok::power},
      {"*", tok::multiplicative},
      {"//", tok::multiplicative},
      {"/", tok::multiplicative},
      {"%", tok::multiplicative},
      {"=", tok::equals},
  };

  while (cur < src.size()) {
    const bool after_tag = tokens.empty() || tokens.back().type == tok::close_statement ||
                           tokens.back().type == tok::close_expression ||
                           tokens.back().type == tok::comment;
    if (after_tag) {
      const std::size_t start = cur;
      while (cur < src.size() &&
             !(src[cur] == '{' && cur + 1 < src.size() &&
               (src[cur + 1] == '%' || src[cur + 1] == '{' || src[cur + 1] == '#'))) {
        ++cur;
      }
      if (cur > start) {
        push(tok::text, src.substr(start, cur - start), start);
        continue;
      }
    }
    if (starts("{#")) {
      const std::size_t start = cur;
      cur += 2;
      const bool strip_before = cur < src.size() && src[cur] == '-';
      if (strip_before) {
        ++cur;
      }
      std::string comment;
      while (!(src[cur] == '#' && cur + 1 < src.size() && src[cur + 1] == '}')) {
        if (cur + 2 >= src.size()) {
          error_at("missing end of comment tag", start);
        }
        comment += src[cur++];
      }
      const bool strip_after = !comment.empty() && comment.back() == '-';
      if (strip_after) {
        comment.pop_back();
      }
      if (strip_before) {
        strip_trailing_whitespace();
      }
      push(tok::comment, comment, start);
      cur += 2;
      if (strip_after) {
        skip_leading_whitespace();
      }
      continue;
    }
    if (starts("{%-")) {
      strip_trailing_whitespace();
      push(tok::open_statement, "{%", cur);
      cur += 3;
      continue;
    }
    if (starts("{{-")) {
      strip_trailing_whitespace();
      push(tok::open_expression, "{{", cur);
      curly_depth = 0;
      cur += 3;
      continue;
    }
    while (cur < src.size() && is_space(src[cur])) {
      ++cur;
    }
    if (cur >= src.size()) {
      break;
    }
    if (starts("-%}")) {
      push(tok::close_statement, "%}", cur);
      cur += 3;
      skip_leading_whitespace();
      continue;
    }
    if (starts("-}}")) {
      push(tok::close_expression, "}}", cur);
      cur += 3;
      skip_leading_whitespace();
      continue;
    }
    const char c = src[cur];
    if (c == '-' || c == '+') {
      const auto last = tokens.empty() ? tok::text : tokens.back().type;
      if (tokens.empty() || last == tok::text) {
        error_at(std::string("unexpected character '") + c + "'", cur);
      }
      if (last != tok::identifier && last != tok::number && last != tok::string &&
          last != tok::close_paren && last != tok::close_square) {
        const std::size_t start = cur;
        ++cur;
        std::string num = consume_while(is_digit);
        if (!num.empty() && cur + 1 < src.size() && src[cur] == '.' && is_digit(src[cur + 1])) {
          ++cur;
          num += "." + consume_while(is_digit);
        }
        push(num.empty() ? tok::unary : tok::number, std::string(1, c) + num, start);
        continue;
      }
    }
    bool matched = false;
    for (const auto& [seq, type] : table) {
      if (std::strcmp(seq, "}}") == 0 && curly_depth > 0) {
        continue;
      }
      if (starts(seq)) {
        push(type, seq, cur);
        if (type == tok::open_expression) {
          curly_depth = 0;
        } else if (type == tok::open_curly) {
          ++curly_depth;
        } else if (type == tok::close_curly) {
          --curly_depth;
        }
        cur += std::strlen(seq);
        matched = true;
        break;
      }
    }
    if (matched) {
      continue;
    }
    if (c == '\'' || c == '"') {
      const std::size_t start = cur;
      ++cur;
      std::string s = consume_while([c](char x) { return x != c; });
      push(tok::string, std::move(s), start);
      ++cur;
      continue;
    }
    if (is_digit(c)) {
      const std::size_t start = cur;
      std::string num = consume_while(is_digit);
      if ((tokens.empty() || tokens.back().type != tok::dot) && cur + 1 < src.size() &&
          src[cur] == '.' && is_digit(src[cur + 1])) {
        ++cur;
        num += "." + consume_while(is_digit);
      }
      push(tok::number, std::move(num), start);
      continue;
    }
    if (is_word(c)) {
      const std::size_t start = cur;
      push(tok::identifier, consume_while(is_word), start);
      continue;
    }
    error_at(std::string("unexpected character '") + c + "'", cur);
  }
  return tokens;
}

}  // namespace leap::policy::detail::jinja

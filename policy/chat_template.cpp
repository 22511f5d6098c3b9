// The Jinja subset of chat_template.hpp. Lexer, parser and interpreter follow @huggingface/jinja
// 0.5.11 (github.com/huggingface/huggingface.js, packages/jinja/src/{lexer,parser,runtime}.ts, as
// published on npm: dist/index.js), which mirrors transformers' Jinja environment; the departures
// (Python's semantics where the JS port differs) are listed in the header.
//
// Internally errors are thrown (a template_error carrying its source position) because the
// evaluator is deeply recursive; the public functions catch them and return error values.
#include "policy/chat_template.hpp"

#include "common/utf8.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

namespace leap::policy {
namespace detail {
namespace {

using json = nlohmann::ordered_json;

struct source_pos {
  int line = 0;  // 0: unknown
  int column = 0;
};

struct template_error {
  std::string message;
  source_pos pos;
};

[[noreturn]] void fail(const std::string& message, source_pos pos = {}) {
  throw template_error{message, pos};
}

// ------------------------------------------------------------------------------------------------
// UTF-8 helpers (strings are UTF-8; lengths, indices and slices count code points, as Python does).

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

// ------------------------------------------------------------------------------------------------
// Source positions. The lexer works on the preprocessed text; each of its bytes remembers where it
// came from in the original source, so errors name the line and column the user wrote.

class source_map {
 public:
  explicit source_map(const std::string& source) : source_(source) {
    line_starts_.push_back(0);
    for (std::size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\n') {
        line_starts_.push_back(i + 1);
      }
    }
  }
  [[nodiscard]] source_pos at(std::size_t offset) const {
    offset = std::min(offset, source_.size());
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const auto line = static_cast<std::size_t>(it - line_starts_.begin());
    const auto start = line_starts_[line - 1];
    return {static_cast<int>(line),
            static_cast<int>(code_point_count(source_.substr(start, offset - start))) + 1};
  }

 private:
  const std::string& source_;
  std::vector<std::size_t> line_starts_;
};

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

enum class tok {
  text,
  number,
  string,
  identifier,
  equals,
  open_paren,
  close_paren,
  open_statement,
  close_statement,
  open_expression,
  close_expression,
  open_square,
  close_square,
  open_curly,
  close_curly,
  comma,
  dot,
  colon,
  pipe,
  additive,
  multiplicative,
  power,
  comparison,
  unary,
  comment,
};

struct token {
  tok type;
  std::string value;
  std::size_t offset;  // in the original source
};

bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

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

// ------------------------------------------------------------------------------------------------
// Syntax tree

enum class nk {
  // statements
  text,
  if_block,
  for_loop,
  set_stmt,
  break_stmt,
  continue_stmt,
  comment,
  // expressions
  string_lit,
  int_lit,
  float_lit,
  array_lit,
  tuple_lit,
  object_lit,
  identifier,
  member,
  slice,
  call,
  kwarg,
  unary,
  binary,
  filter,
  test,
  select,
  ternary,
};

struct node;
using node_ptr = std::shared_ptr<node>;

struct node {
  nk kind;
  source_pos pos;
  std::string s;  // identifier, literal text, operator, filter or test name
  std::int64_t i = 0;
  double f = 0;
  bool flag = false;  // member: computed; test: negated; filter: called with arguments
  node_ptr a, b, c;
  std::vector<node_ptr> list, list2;
  std::vector<std::pair<node_ptr, node_ptr>> pairs;
};

const std::set<std::string>& supported_filters() {
  static const std::set<std::string> names = {
      "safe",       "tojson", "length",  "list",     "first", "last",   "reverse", "sort",
      "join",       "string", "unique",  "trim",     "upper", "lower",  "title",   "capitalize",
      "indent",     "int",    "float",   "abs",      "bool",  "items",  "default", "selectattr",
      "rejectattr", "map",    "replace", "dictsort", "count", "select", "reject"};
  return names;
}

const std::set<std::string>& supported_tests() {
  static const std::set<std::string> names = {
      "defined", "undefined", "none",    "string",   "number",   "integer",  "boolean",
      "true",    "false",     "mapping", "iterable", "sequence", "callable", "odd",
      "even",    "lower",     "upper",   "equalto",  "eq"};
  return names;
}

class parser {
 public:
  parser(std::vector<token> tokens, const source_map& positions)
      : tokens_(std::move(tokens)), positions_(positions) {}

  std::vector<node_ptr> parse_program() {
    std::vector<node_ptr> body;
    while (cur_ < tokens_.size()) {
      body.push_back(parse_any());
    }
    return body;
  }

 private:
  std::vector<token> tokens_;
  const source_map& positions_;
  std::size_t cur_ = 0;

  source_pos pos_of(std::size_t index) const {
    if (index < tokens_.size()) {
      return positions_.at(tokens_[index].offset);
    }
    return tokens_.empty() ? source_pos{1, 1} : positions_.at(tokens_.back().offset);
  }
  [[noreturn]] void error(const std::string& message) const { fail(message, pos_of(cur_)); }
  [[noreturn]] void error_at(const std::string& message, std::size_t index) const {
    fail(message, pos_of(index));
  }

  node_ptr make(nk kind, std::size_t index) const {
    auto n = std::make_shared<node>();
    n->kind = kind;
    n->pos = pos_of(index);
    return n;
  }

  bool at_end() const { return cur_ >= tokens_.size(); }
  const token& peek() const {
    if (at_end()) {
      error("unexpected end of template");
    }
    return tokens_[cur_];
  }
  bool is(tok type) const { return cur_ < tokens_.size() && tokens_[cur_].type == type; }
  bool is_ident(const char* name, std::size_t ahead = 0) const {
    return cur_ + ahead < tokens_.size() && tokens_[cur_ + ahead].type == tok::identifier &&
           tokens_[cur_ + ahead].value == name;
  }
  bool is_statement(std::initializer_list<const char*> names) const {
    if (!(is(tok::open_statement) && cur_ + 1 < tokens_.size() &&
          tokens_[cur_ + 1].type == tok::identifier)) {
      return false;
    }
    return std::any_of(names.begin(), names.end(),
                       [&](const char* n) { return tokens_[cur_ + 1].value == n; });
  }
  const token& expect(tok type, const char* what) {
    if (at_end()) {
      error(std::string("unexpected end of template: expected ") + what);
    }
    if (tokens_[cur_].type != type) {
      error(std::string("expected ") + what);
    }
    return tokens_[cur_++];
  }
  void expect_ident(const char* name) {
    if (!is_ident(name)) {
      error(std::string("expected '") + name + "'");
    }
    ++cur_;
  }
  // The body of a block up to one of `names` (which must come).
  std::vector<node_ptr> parse_until(std::initializer_list<const char*> names, std::size_t opened) {
    std::vector<node_ptr> body;
    while (!is_statement(names)) {
      if (at_end()) {
        std::string list;
        for (const char* n : names) {
          list += (list.empty() ? "" : " or ") + std::string("{% ") + n + " %}";
        }
        error_at("block is never closed: expected " + list, opened);
      }
      body.push_back(parse_any());
    }
    return body;
  }

  node_ptr parse_any() {
    depth_guard guard(*this);
    const auto& t = peek();
    switch (t.type) {
      case tok::comment: {
        auto n = make(nk::comment, cur_++);
        return n;
      }
      case tok::text: {
        auto n = make(nk::text, cur_);
        n->s = tokens_[cur_++].value;
        return n;
      }
      case tok::open_statement:
        return parse_statement();
      case tok::open_expression: {
        ++cur_;
        auto e = parse_expression();
        expect(tok::close_expression, "'}}'");
        return e;
      }
      default:
        error("unexpected '" + t.value + "'");
    }
  }

  node_ptr parse_statement() {
    const std::size_t opened = cur_;
    expect(tok::open_statement, "'{%'");
    if (!is(tok::identifier)) {
      error("expected a statement name after '{%'");
    }
    const std::string name = tokens_[cur_].value;
    if (name == "set") {
      ++cur_;
      auto n = make(nk::set_stmt, opened);
      n->a = parse_expression_sequence(false);
      if (is(tok::equals)) {
        ++cur_;
        n->b = parse_expression_sequence(false);
      } else {
        expect(tok::close_statement, "'%}'");
        n->list = parse_until({"endset"}, opened);
        expect(tok::open_statement, "'{%'");
        expect_ident("endset");
      }
      expect(tok::close_statement, "'%}'");
      return n;
    }
    if (name == "if") {
      ++cur_;
      auto n = parse_if(opened);
      expect(tok::open_statement, "'{%'");
      expect_ident("endif");
      expect(tok::close_statement, "'%}'");
      return n;
    }
    if (name == "for") {
      ++cur_;
      auto n = make(nk::for_loop, opened);
      n->a = parse_expression_sequence(true);
      if (n->a->kind != nk::identifier && n->a->kind != nk::tuple_lit) {
        error("expected a name or a tuple of names for the loop variable");
      }
      if (!is_ident("in")) {
        error("expected 'in' after the loop variable");
      }
      ++cur_;
      auto iterable = parse_expression();
      if (iterable->kind == nk::select) {
        n->b = iterable->a;
        n->c = iterable->b;
      } else {
        n->b = iterable;
      }
      expect(tok::close_statement, "'%}'");
      n->list = parse_until({"endfor", "else"}, opened);
      if (is_statement({"else"})) {
        cur_ += 2;
        expect(tok::close_statement, "'%}'");
        n->list2 = parse_until({"endfor"}, opened);
      }
      expect(tok::open_statement, "'{%'");
      expect_ident("endfor");
      expect(tok::close_statement, "'%}'");
      return n;
    }
    if (name == "break" || name == "continue") {
      ++cur_;
      auto n = make(name == "break" ? nk::break_stmt : nk::continue_stmt, opened);
      expect(tok::close_statement, "'%}'");
      return n;
    }
    if (name == "macro" || name == "call" || name == "filter" || name == "generation" ||
        name == "include" || name == "import" || name == "extends" || name == "block" ||
        name == "with" || name == "raw") {
      error_at("unsupported construct: {% " + name + " %}", opened + 1);
    }
    error_at("unknown statement '" + name + "'", opened + 1);
  }

  node_ptr parse_if(std::size_t opened) {
    auto n = make(nk::if_block, opened);
    n->a = parse_expression();
    expect(tok::close_statement, "'%}'");
    n->list = parse_until({"elif", "else", "endif"}, opened);
    if (is_statement({"elif"})) {
      const std::size_t at = cur_;
      cur_ += 2;
      n->list2.push_back(parse_if(at));
    } else if (is_statement({"else"})) {
      cur_ += 2;
      expect(tok::close_statement, "'%}'");
      n->list2 = parse_until({"endif"}, opened);
    }
    return n;
  }

  node_ptr parse_expression_sequence(bool primary) {
    const std::size_t start = cur_;
    auto first = primary ? parse_primary() : parse_expression();
    if (!is(tok::comma)) {
      return first;
    }
    auto tuple = make(nk::tuple_lit, start);
    tuple->list.push_back(first);
    while (is(tok::comma)) {
      ++cur_;
      tuple->list.push_back(primary ? parse_primary() : parse_expression());
    }
    return tuple;
  }

  // Nesting is bounded so that a hostile template cannot exhaust the stack (of the parser or of
  // the evaluator, whose recursion follows the tree).
  struct depth_guard {
    parser& p;
    explicit depth_guard(parser& owner) : p(owner) {
      if (++p.depth_ > 200) {
        p.error("nested too deeply (more than 200 levels)");
      }
    }
    ~depth_guard() { --p.depth_; }
    depth_guard(const depth_guard&) = delete;
    depth_guard& operator=(const depth_guard&) = delete;
  };
  int depth_ = 0;

  node_ptr parse_expression() {
    depth_guard guard(*this);
    return parse_if_expression();
  }

  node_ptr parse_if_expression() {
    const std::size_t start = cur_;
    auto a = parse_or();
    if (is_ident("if")) {
      ++cur_;
      auto test = parse_or();
      if (is_ident("else")) {
        ++cur_;
        auto n = make(nk::ternary, start);
        n->a = test;
        n->b = a;
        n->c = parse_if_expression();
        return n;
      }
      auto n = make(nk::select, start);
      n->a = a;
      n->b = test;
      return n;
    }
    return a;
  }

  node_ptr binary(const std::string& op, node_ptr left, node_ptr right, std::size_t at) {
    auto n = make(nk::binary, at);
    n->s = op;
    n->a = std::move(left);
    n->b = std::move(right);
    return n;
  }

  node_ptr parse_or() {
    auto left = parse_and();
    while (is_ident("or")) {
      const std::size_t at = cur_++;
      left = binary("or", left, parse_and(), at);
    }
    return left;
  }
  node_ptr parse_and() {
    auto left = parse_not();
    while (is_ident("and")) {
      const std::size_t at = cur_++;
      left = binary("and", left, parse_not(), at);
    }
    return left;
  }
  node_ptr parse_not() {
    depth_guard guard(*this);
    if (is_ident("not")) {
      auto n = make(nk::unary, cur_++);
      n->s = "not";
      n->a = parse_not();
      return n;
    }
    return parse_comparison();
  }
  node_ptr parse_comparison() {
    auto left = parse_additive();
    while (true) {
      const std::size_t at = cur_;
      std::string op;
      if (is_ident("not") && is_ident("in", 1)) {
        op = "not in";
        cur_ += 2;
      } else if (is_ident("in")) {
        op = "in";
        ++cur_;
      } else if (is(tok::comparison)) {
        op = tokens_[cur_++].value;
      } else {
        break;
      }
      left = binary(op, left, parse_additive(), at);
    }
    return left;
  }
  node_ptr parse_additive() {
    auto left = parse_multiplicative();
    while (is(tok::additive)) {
      const std::size_t at = cur_;
      const std::string op = tokens_[cur_++].value;
      left = binary(op, left, parse_multiplicative(), at);
    }
    return left;
  }
  node_ptr parse_multiplicative() {
    auto left = parse_power();
    while (is(tok::multiplicative)) {
      const std::size_t at = cur_;
      const std::string op = tokens_[cur_++].value;
      left = binary(op, left, parse_power(), at);
    }
    return left;
  }
  node_ptr parse_power() {
    auto left = parse_test();
    while (is(tok::power)) {
      const std::size_t at = cur_++;
      left = binary("**", left, parse_test(), at);
    }
    return left;
  }
  node_ptr parse_test() {
    auto operand = parse_filter();
    while (is_ident("is")) {
      const std::size_t at = cur_++;
      const bool negate = is_ident("not");
      if (negate) {
        ++cur_;
      }
      if (!is(tok::identifier)) {
        error("expected a test name after 'is'");
      }
      const std::string name = tokens_[cur_].value;
      if (!supported_tests().contains(name)) {
        error("unsupported test '" + name + "'");
      }
      ++cur_;
      if (is(tok::open_paren)) {
        error("tests with arguments are not supported ('" + name + "(...)')");
      }
      auto n = make(nk::test, at);
      n->s = name;
      n->flag = negate;
      n->a = operand;
      operand = n;
    }
    return operand;
  }
  node_ptr parse_filter() {
    auto operand = parse_unary_sign();
    while (is(tok::pipe)) {
      ++cur_;
      if (!is(tok::identifier)) {
        error("expected a filter name after '|'");
      }
      const std::size_t at = cur_;
      const std::string name = tokens_[cur_].value;
      if (!supported_filters().contains(name)) {
        error("unsupported filter '" + name + "'");
      }
      ++cur_;
      auto n = make(nk::filter, at);
      n->s = name;
      n->a = operand;
      if (is(tok::open_paren)) {
        n->flag = true;
        n->list = parse_args();
        if (is(tok::dot) || is(tok::open_square) || is(tok::open_paren)) {
          error("unsupported: access or call on a filter's result without parentheses");
        }
      }
      operand = n;
    }
    return operand;
  }
  node_ptr parse_unary_sign() {
    depth_guard guard(*this);
    if (!at_end() && (is(tok::unary) || is(tok::additive)) &&
        (tokens_[cur_].value == "-" || tokens_[cur_].value == "+")) {
      auto n = make(nk::unary, cur_);
      n->s = tokens_[cur_++].value;
      n->a = parse_unary_sign();
      return n;
    }
    return parse_call_member();
  }
  node_ptr parse_call_member() {
    auto member = parse_member(parse_primary());
    while (is(tok::open_paren)) {
      auto call = make(nk::call, cur_);
      call->pos = member->pos;  // errors inside a call point at what is called
      call->a = member;
      call->list = parse_args();
      member = parse_member(call);
    }
    return member;
  }
  std::vector<node_ptr> parse_args() {
    expect(tok::open_paren, "'('");
    std::vector<node_ptr> args;
    bool saw_keyword = false;
    while (!is(tok::close_paren)) {
      if (at_end()) {
        error("unexpected end of template in an argument list");
      }
      if (is(tok::power) || (is(tok::multiplicative) && tokens_[cur_].value == "*")) {
        error("unsupported: argument unpacking (* or **)");
      }
      const std::size_t at = cur_;
      auto arg = parse_expression();
      if (is(tok::equals)) {
        ++cur_;
        if (arg->kind != nk::identifier) {
          error_at("expected a name for a keyword argument", at);
        }
        auto kw = make(nk::kwarg, at);
        kw->s = arg->s;
        kw->a = parse_expression();
        arg = kw;
        saw_keyword = true;
      } else if (saw_keyword) {
        error_at("positional arguments must come before keyword arguments", at);
      }
      args.push_back(arg);
      if (is(tok::comma)) {
        ++cur_;
      } else if (!is(tok::close_paren)) {
        error("expected ',' or ')' in an argument list");
      }
    }
    ++cur_;
    return args;
  }
  node_ptr parse_member(node_ptr object) {
    while (is(tok::dot) || is(tok::open_square)) {
      const std::size_t at = cur_;
      const bool computed = tokens_[cur_++].type == tok::open_square;
      auto n = make(nk::member, at);
      n->a = object;
      n->flag = computed;
      if (computed) {
        std::vector<node_ptr> slices;
        bool is_slice = false;
        while (!is(tok::close_square)) {
          if (at_end()) {
            error_at("'[' is never closed", at);
          }
          if (is(tok::colon)) {
            slices.push_back(nullptr);
            ++cur_;
            is_slice = true;
          } else {
            slices.push_back(parse_expression());
            if (is(tok::colon)) {
              ++cur_;
              is_slice = true;
            }
          }
        }
        if (slices.empty()) {
          error_at("expected an index or a slice inside '[]'", at);
        }
        if (is_slice) {
          if (slices.size() > 3) {
            error_at("a slice takes at most three parts", at);
          }
          auto s = make(nk::slice, at);
          s->a = slices.size() > 0 ? slices[0] : nullptr;
          s->b = slices.size() > 1 ? slices[1] : nullptr;
          s->c = slices.size() > 2 ? slices[2] : nullptr;
          n->b = s;
        } else {
          n->b = slices[0];
        }
        expect(tok::close_square, "']'");
      } else {
        auto property = parse_primary();
        if (property->kind != nk::identifier && property->kind != nk::int_lit) {
          error_at("expected a name or an integer after '.'", at);
        }
        n->b = property;
      }
      object = n;
    }
    return object;
  }
  node_ptr parse_primary() {
    const std::size_t at = cur_;
    const token& t = peek();
    ++cur_;
    switch (t.type) {
      case tok::number: {
        errno = 0;
        char* end = nullptr;
        if (t.value.find('.') != std::string::npos) {
          auto n = make(nk::float_lit, at);
          n->f = std::strtod(t.value.c_str(), &end);
          return n;
        }
        auto n = make(nk::int_lit, at);
        n->i = std::strtoll(t.value.c_str(), &end, 10);
        if (errno == ERANGE) {
          error_at("integer literal out of range", at);
        }
        return n;
      }
      case tok::string: {
        auto n = make(nk::string_lit, at);
        n->s = t.value;
        while (is(tok::string)) {
          n->s += tokens_[cur_++].value;
        }
        return n;
      }
      case tok::identifier: {
        auto n = make(nk::identifier, at);
        n->s = t.value;
        return n;
      }
      case tok::open_paren: {
        auto e = parse_expression_sequence(false);
        expect(tok::close_paren, "')'");
        return e;
      }
      case tok::open_square: {
        auto n = make(nk::array_lit, at);
        while (!is(tok::close_square)) {
          if (at_end()) {
            error_at("'[' is never closed", at);
          }
          n->list.push_back(parse_expression());
          if (is(tok::comma)) {
            ++cur_;
          }
        }
        ++cur_;
        return n;
      }
      case tok::open_curly: {
        auto n = make(nk::object_lit, at);
        while (!is(tok::close_curly)) {
          if (at_end()) {
            error_at("'{' is never closed", at);
          }
          auto key = parse_expression();
          expect(tok::colon, "':' between a key and its value");
          n->pairs.emplace_back(key, parse_expression());
          if (is(tok::comma)) {
            ++cur_;
          }
        }
        ++cur_;
        return n;
      }
      default:
        error_at("unexpected '" + t.value + "'", at);
    }
  }
};

// ------------------------------------------------------------------------------------------------
// Values

struct value;
using array_t = std::vector<value>;
using object_t = std::vector<std::pair<std::string, value>>;
using kwargs_t = std::vector<std::pair<std::string, value>>;
using function_t = std::function<value(const std::vector<value>&, const kwargs_t&)>;

struct value {
  enum kind_t { undefined, none, boolean, integer, floating, string, array, object, ns, function };
  kind_t k = undefined;
  bool b = false;
  std::int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<array_t> arr;
  std::shared_ptr<object_t> obj;  // object and namespace
  std::shared_ptr<function_t> fn;

  static value make_none() { return with(none); }
  static value boolean_v(bool x) {
    auto v = with(boolean);
    v.b = x;
    return v;
  }
  static value integer_v(std::int64_t x) {
    auto v = with(integer);
    v.i = x;
    return v;
  }
  static value floating_v(double x) {
    auto v = with(floating);
    v.f = x;
    return v;
  }
  static value string_v(std::string x) {
    auto v = with(string);
    v.s = std::move(x);
    return v;
  }
  static value array_v(array_t x) {
    auto v = with(array);
    v.arr = std::make_shared<array_t>(std::move(x));
    return v;
  }
  static value object_v(object_t x, kind_t kind = object) {
    auto v = with(kind);
    v.obj = std::make_shared<object_t>(std::move(x));
    return v;
  }
  static value function_v(function_t x) {
    auto v = with(function);
    v.fn = std::make_shared<function_t>(std::move(x));
    return v;
  }

  [[nodiscard]] bool is_number() const { return k == integer || k == floating; }
  [[nodiscard]] double number() const {
    return k == integer    ? static_cast<double>(i)
           : k == floating ? f
           : k == boolean  ? (b ? 1 : 0)
                           : 0;
  }
  [[nodiscard]] const value* find(const std::string& key) const {
    for (const auto& [name, v] : *obj) {
      if (name == key) {
        return &v;
      }
    }
    return nullptr;
  }
  void set(const std::string& key, value v) {
    for (auto& [name, old] : *obj) {
      if (name == key) {
        old = std::move(v);
        return;
      }
    }
    obj->emplace_back(key, std::move(v));
  }

 private:
  static value with(kind_t kind) {
    value v;
    v.k = kind;
    return v;
  }
};

const char* type_name(const value& v) {
  switch (v.k) {
    case value::undefined:
      return "undefined";
    case value::none:
      return "none";
    case value::boolean:
      return "boolean";
    case value::integer:
      return "integer";
    case value::floating:
      return "float";
    case value::string:
      return "string";
    case value::array:
      return "list";
    case value::object:
      return "dict";
    case value::ns:
      return "namespace";
    case value::function:
      return "function";
  }
  return "value";
}

bool truthy(const value& v) {
  switch (v.k) {
    case value::undefined:
    case value::none:
      return false;
    case value::boolean:
      return v.b;
    case value::integer:
      return v.i != 0;
    case value::floating:
      return v.f != 0 && !std::isnan(v.f);
    case value::string:
      return !v.s.empty();
    case value::array:
      return !v.arr->empty();
    case value::object:
      return !v.obj->empty();
    case value::ns:
    case value::function:
      return true;
  }
  return false;
}

// JavaScript's number formatting (Number.prototype.toString), which JSON.stringify uses.
std::string js_number(double x) {
  if (std::isnan(x)) {
    return "NaN";
  }
  if (std::isinf(x)) {
    return x > 0 ? "Infinity" : "-Infinity";
  }
  if (x == 0) {
    return "0";
  }
  char buf[64];
  const double a = std::abs(x);
  if (a >= 1e21 || a < 1e-6) {
    auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
    std::string s(buf, r.ptr);
    const auto e = s.find('e');
    std::string mantissa = s.substr(0, e);
    std::string exponent = s.substr(e + 1);
    const char sign = exponent[0] == '-' ? '-' : '+';
    exponent = exponent.substr(exponent[0] == '-' || exponent[0] == '+' ? 1 : 0);
    exponent.erase(0, std::min(exponent.find_first_not_of('0'), exponent.size() - 1));
    return mantissa + "e" + sign + exponent;
  }
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed);
  return std::string(buf, r.ptr);
}

std::string float_string(double x) {
  if (x == 0 && std::signbit(x)) {
    return "-0.0";
  }
  if (std::isfinite(x) && x == std::floor(x) && std::abs(x) < 1e21) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f", x);
    return buf;
  }
  return js_number(x);
}

std::string json_string(const std::string& s, bool ensure_ascii) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    char buf[16];
    switch (c) {
      case '"':
        out += "\\\"";
        ++i;
        continue;
      case '\\':
        out += "\\\\";
        ++i;
        continue;
      case '\b':
        out += "\\b";
        ++i;
        continue;
      case '\f':
        out += "\\f";
        ++i;
        continue;
      case '\n':
        out += "\\n";
        ++i;
        continue;
      case '\r':
        out += "\\r";
        ++i;
        continue;
      case '\t':
        out += "\\t";
        ++i;
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      ++i;
      continue;
    }
    if (ensure_ascii && c >= 0x7f) {
      const std::uint32_t cp = decode_utf8(s, i);
      if (cp > 0xFFFF) {
        const std::uint32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      }
      out += buf;
      continue;
    }
    out += static_cast<char>(c);
    ++i;
  }
  return out + "\"";
}

struct json_options {
  std::int64_t indent = 0;  // 0: none
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool custom_separators = false;
  std::string item_separator;
  std::string key_separator;
};

std::string to_json(const value& v, const json_options& o, int depth, bool undefined_to_null) {
  std::string item_sep = o.custom_separators ? o.item_separator : o.indent > 0 ? "," : ", ";
  std::string key_sep = o.custom_separators ? o.key_separator : ": ";
  switch (v.k) {
    case value::none:
      return "null";
    case value::undefined:
      return undefined_to_null ? "null" : "undefined";
    case value::boolean:
      return v.b ? "true" : "false";
    case value::integer:
      return std::to_string(v.i);
    case value::floating:
      return js_number(v.f);
    case value::string:
      return json_string(v.s, o.ensure_ascii);
    case value::array:
    case value::object:
    case value::ns: {
      const std::string indent_unit(static_cast<std::size_t>(std::max<std::int64_t>(o.indent, 0)),
                                    ' ');
      std::string base = "\n";
      for (int d = 0; d < depth; ++d) {
        base += indent_unit;
      }
      const std::string child = base + indent_unit;
      std::vector<std::string> core;
      if (v.k == value::array) {
        for (const auto& x : *v.arr) {
          core.push_back(to_json(x, o, depth + 1, undefined_to_null));
        }
        std::string out = "[";
        if (o.indent > 0 && !core.empty()) {
          out += child;
          for (std::size_t n = 0; n < core.size(); ++n) {
            out += (n > 0 ? item_sep + child : "") + core[n];
          }
          return out + base + "]";
        }
        for (std::size_t n = 0; n < core.size(); ++n) {
          out += (n > 0 ? item_sep : "") + core[n];
        }
        return out + "]";
      }
      auto entries = *v.obj;
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& x, const auto& y) { return x.first < y.first; });
      }
      for (const auto& [key, x] : entries) {
        std::string e = json_string(key, o.ensure_ascii) + key_sep +
                        to_json(x, o, depth + 1, undefined_to_null);
        core.push_back(o.indent > 0 ? child + e : e);
      }
      std::string out = "{";
      for (std::size_t n = 0; n < core.size(); ++n) {
        out += (n > 0 ? item_sep : "") + core[n];
      }
      if (o.indent > 0 && !core.empty()) {
        out += base;
      }
      return out + "}";
    }
    case value::function:
      fail("cannot convert a function to JSON");
  }
  return "null";
}

std::string to_output(const value& v) {
  switch (v.k) {
    case value::undefined:
    case value::none:
      return "";
    case value::boolean:
      return v.b ? "true" : "false";
    case value::integer:
      return std::to_string(v.i);
    case value::floating:
      return float_string(v.f);
    case value::string:
      return v.s;
    case value::array:
    case value::object:
    case value::ns:
      return to_json(v, {}, 0, false);
    case value::function:
      fail("cannot print a function");
  }
  return "";
}

value from_json(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return value::make_none();
    case json::value_t::boolean:
      return value::boolean_v(j.get<bool>());
    case json::value_t::number_integer:
      return value::integer_v(j.get<std::int64_t>());
    case json::value_t::number_unsigned:
      return value::integer_v(static_cast<std::int64_t>(j.get<std::uint64_t>()));
    case json::value_t::number_float: {
      // JSON does not tell 1.0 from 1; neither do the JS port nor transformers' JSON input.
      const double d = j.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9007199254740992.0) {
        return value::integer_v(static_cast<std::int64_t>(d));
      }
      return value::floating_v(d);
    }
    case json::value_t::string:
      return value::string_v(j.get<std::string>());
    case json::value_t::array: {
      array_t out;
      for (const auto& x : j) {
        out.push_back(from_json(x));
      }
      return value::array_v(std::move(out));
    }
    case json::value_t::object: {
      object_t out;
      for (const auto& [key, x] : j.items()) {
        out.emplace_back(key, from_json(x));
      }
      return value::object_v(std::move(out));
    }
    default:
      return value{};
  }
}

// JavaScript's loose equality (a == b) on the values, as the JS port's == and != use it.
bool loosely_equal(const value& a, const value& b) {
  const bool a_nullish = a.k == value::undefined || a.k == value::none;
  const bool b_nullish = b.k == value::undefined || b.k == value::none;
  if (a_nullish || b_nullish) {
    return a_nullish && b_nullish;
  }
  if (a.k == value::string && b.k == value::string) {
    return a.s == b.s;
  }
  auto numeric = [](const value& v, double& out) {
    if (v.is_number() || v.k == value::boolean) {
      out = v.number();
      return true;
    }
    if (v.k == value::string) {
      const std::string t = trim_right(trim_left(v.s, nullptr), nullptr);
      if (t.empty()) {
        out = 0;
        return true;
      }
      char* end = nullptr;
      out = std::strtod(t.c_str(), &end);
      return end == t.c_str() + t.size();
    }
    return false;
  };
  const bool a_composite =
      a.k == value::array || a.k == value::object || a.k == value::ns || a.k == value::function;
  const bool b_composite =
      b.k == value::array || b.k == value::object || b.k == value::ns || b.k == value::function;
  if (a_composite || b_composite) {
    if (a.k != b.k) {
      return false;
    }
    return a.arr == b.arr && a.obj == b.obj && a.fn == b.fn;  // identity, as in JS
  }
  double x = 0;
  double y = 0;
  return numeric(a, x) && numeric(b, y) && x == y;
}

// JS strict equality (===) of the values: the `in` operator and the equalto test.
bool strictly_equal(const value& a, const value& b) {
  if (a.k == value::undefined || a.k == value::none || b.k == value::undefined ||
      b.k == value::none) {
    return a.k == b.k;
  }
  if (a.is_number() && b.is_number()) {
    return a.number() == b.number();
  }
  if (a.k != b.k) {
    return false;
  }
  switch (a.k) {
    case value::boolean:
      return a.b == b.b;
    case value::string:
      return a.s == b.s;
    default:
      return a.arr == b.arr && a.obj == b.obj && a.fn == b.fn;
  }
}

int compare_values(const value& a, const value& b, bool case_sensitive) {
  if (a.k == value::none && b.k == value::none) {
    return 0;
  }
  if (a.k == value::undefined && b.k == value::undefined) {
    return 0;
  }
  const bool a_num = a.is_number() || a.k == value::boolean;
  const bool b_num = b.is_number() || b.k == value::boolean;
  if (a_num && b_num) {
    return a.number() < b.number() ? -1 : a.number() > b.number() ? 1 : 0;
  }
  if (a.k == value::string && b.k == value::string) {
    std::string x = a.s;
    std::string y = b.s;
    if (!case_sensitive) {
      std::transform(x.begin(), x.end(), x.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      std::transform(y.begin(), y.end(), y.begin(),
                     [](unsigned char c) { return std::tolower(c); });
    }
    return x < y ? -1 : x > y ? 1 : 0;
  }
  fail(std::string("cannot compare ") + type_name(a) + " with " + type_name(b));
}

std::vector<value> slice_of(const std::vector<value>& items, const value& start_v,
                            const value& stop_v, const value& step_v) {
  const auto n = static_cast<std::int64_t>(items.size());
  const std::int64_t step = step_v.k == value::integer ? step_v.i : 1;
  if (step == 0) {
    fail("slice step cannot be zero");
  }
  std::int64_t start = 0;
  std::int64_t stop = 0;
  if (step > 0) {
    start = start_v.k == value::integer ? start_v.i : 0;
    stop = stop_v.k == value::integer ? stop_v.i : n;
    start = start < 0 ? std::max<std::int64_t>(n + start, 0) : std::min(start, n);
    stop = stop < 0 ? std::max<std::int64_t>(n + stop, 0) : std::min(stop, n);
  } else {
    start = start_v.k == value::integer ? start_v.i : n - 1;
    stop = stop_v.k == value::integer ? stop_v.i : -1;
    start = start < 0 ? std::max<std::int64_t>(n + start, -1) : std::min(start, n - 1);
    stop = stop < -1 ? std::max<std::int64_t>(n + stop, -1) : std::min(stop, n - 1);
  }
  std::vector<value> out;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    out.push_back(items[static_cast<std::size_t>(i)]);
  }
  return out;
}

// Python's str.split(sep=None, maxsplit=-1).
std::vector<std::string> python_split(const std::string& s, const value& sep,
                                      std::int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep.k == value::none || sep.k == value::undefined) {
    std::size_t i = 0;
    while (true) {
      while (i < s.size() && is_space(s[i])) {
        ++i;
      }
      if (i >= s.size()) {
        break;
      }
      if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) >= maxsplit) {
        out.push_back(trim_right(s.substr(i), nullptr));
        break;
      }
      std::size_t j = i;
      while (j < s.size() && !is_space(s[j])) {
        ++j;
      }
      out.push_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  if (sep.k != value::string) {
    fail("split(): the separator must be a string or none");
  }
  if (sep.s.empty()) {
    fail("split(): empty separator");
  }
  std::size_t from = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) >= maxsplit) {
      out.push_back(s.substr(from));
      break;
    }
    const auto at = s.find(sep.s, from);
    if (at == std::string::npos) {
      out.push_back(s.substr(from));
      break;
    }
    out.push_back(s.substr(from, at - from));
    from = at + sep.s.size();
  }
  return out;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        std::int64_t count) {
  if (count == 0) {
    return s;
  }
  std::string out;
  if (from.empty()) {
    // Python: the replacement goes before every code point and at the end.
    std::int64_t done = 0;
    for (const auto& cp : code_points(s)) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      out += cp;
    }
    if (count < 0 || done < count) {
      out += to;
    }
    return out;
  }
  std::size_t pos = 0;
  std::int64_t done = 0;
  while (count < 0 || done < count) {
    const auto at = s.find(from, pos);
    if (at == std::string::npos) {
      break;
    }
    out += s.substr(pos, at - pos) + to;
    pos = at + from.size();
    ++done;
  }
  return out + s.substr(pos);
}

std::string title_case(const std::string& s) {
  // The JS port: /\b\w/g upper-cased (ASCII word characters).
  std::string out = s;
  bool prev_word = false;
  for (auto& c : out) {
    const bool w = is_word(c);
    if (w && !prev_word) {
      c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
    prev_word = w;
  }
  return out;
}

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

const value* kwarg(const kwargs_t& kwargs, const char* name) {
  for (const auto& [key, v] : kwargs) {
    if (key == name) {
      return &v;
    }
  }
  return nullptr;
}

// args[i], else kwargs[name], else fallback.
value arg_or(const std::vector<value>& args, std::size_t i, const kwargs_t& kwargs,
             const char* name, value fallback) {
  if (i < args.size()) {
    return args[i];
  }
  if (const auto* k = kwarg(kwargs, name)) {
    return *k;
  }
  return fallback;
}

value string_method(const std::string& self, const std::string& name) {
  auto fn = [](auto f) { return value::function_v(std::move(f)); };
  auto chars_arg = [](const std::vector<value>& args) -> std::optional<std::string> {
    if (args.empty() || args[0].k == value::none) {
      return std::nullopt;
    }
    if (args[0].k != value::string) {
      fail("strip arguments must be strings or none");
    }
    return args[0].s;
  };
  if (name == "upper") {
    return fn([self](const auto&, const auto&) { return value::string_v(upper(self)); });
  }
  if (name == "lower") {
    return fn([self](const auto&, const auto&) { return value::string_v(lower(self)); });
  }
  if (name == "title") {
    return fn([self](const auto&, const auto&) { return value::string_v(title_case(self)); });
  }
  if (name == "capitalize") {
    return fn([self](const auto&, const auto&) {
      std::string s = self;
      if (!s.empty()) {
        s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
      }
      return value::string_v(s);
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return fn([self, name, chars_arg](const std::vector<value>& args, const auto&) {
      const auto chars = chars_arg(args);
      const std::string* c = chars ? &*chars : nullptr;
      std::string s = self;
      if (name != "rstrip") {
        s = trim_left(s, c);
      }
      if (name != "lstrip") {
        s = trim_right(s, c);
      }
      return value::string_v(s);
    });
  }
  if (name == "startswith" || name == "endswith") {
    return fn([self, name](const std::vector<value>& args, const auto&) {
      if (args.empty()) {
        fail(name + "() requires an argument");
      }
      auto test = [&](const std::string& p) {
        return name == "startswith" ? self.starts_with(p) : self.ends_with(p);
      };
      if (args[0].k == value::string) {
        return value::boolean_v(test(args[0].s));
      }
      if (args[0].k == value::array) {
        for (const auto& item : *args[0].arr) {
          if (item.k != value::string) {
            fail(name + "() tuple elements must be strings");
          }
          if (test(item.s)) {
            return value::boolean_v(true);
          }
        }
        return value::boolean_v(false);
      }
      fail(name + "() argument must be a string or a tuple of strings");
    });
  }
  if (name == "split") {
    return fn([self](const std::vector<value>& args, const kwargs_t& kwargs) {
      const value sep = arg_or(args, 0, kwargs, "sep", value::make_none());
      const value maxsplit = arg_or(args, 1, kwargs, "maxsplit", value::integer_v(-1));
      if (maxsplit.k != value::integer) {
        fail("split(): maxsplit must be an integer");
      }
      array_t out;
      for (auto& part : python_split(self, sep, maxsplit.i)) {
        out.push_back(value::string_v(std::move(part)));
      }
      return value::array_v(std::move(out));
    });
  }
  if (name == "replace") {
    return fn([self](const std::vector<value>& args, const kwargs_t& kwargs) {
      if (args.size() < 2 || args[0].k != value::string || args[1].k != value::string) {
        fail("replace() takes two strings");
      }
      const value count = arg_or(args, 2, kwargs, "count", value::make_none());
      if (count.k != value::integer && count.k != value::none) {
        fail("replace(): count must be an integer or none");
      }
      return value::string_v(
          replace_all(self, args[0].s, args[1].s, count.k == value::integer ? count.i : -1));
    });
  }
  return value{};
}

value object_items(const value& v) {
  array_t out;
  for (const auto& [key, x] : *v.obj) {
    out.push_back(value::array_v({value::string_v(key), x}));
  }
  return value::array_v(std::move(out));
}

value dictsort(const value& self, const std::vector<value>& args, const kwargs_t& kwargs) {
  const value case_sensitive = arg_or(args, 0, kwargs, "case_sensitive", value::boolean_v(false));
  const value by = arg_or(args, 1, kwargs, "by", value::string_v("key"));
  const value reverse = arg_or(args, 2, kwargs, "reverse", value::boolean_v(false));
  if (case_sensitive.k != value::boolean || reverse.k != value::boolean || by.k != value::string ||
      (by.s != "key" && by.s != "value")) {
    fail("dictsort(): case_sensitive and reverse must be booleans, by 'key' or 'value'");
  }
  auto items = *object_items(self).arr;
  const std::size_t index = by.s == "key" ? 0 : 1;
  std::stable_sort(items.begin(), items.end(), [&](const value& x, const value& y) {
    const int c = compare_values((*x.arr)[index], (*y.arr)[index], case_sensitive.b);
    return reverse.b ? c > 0 : c < 0;
  });
  return value::array_v(std::move(items));
}

value object_method(const value& self, const std::string& name) {
  if (name == "get") {
    return value::function_v([self](const std::vector<value>& args, const kwargs_t&) {
      if (args.empty() || args[0].k != value::string) {
        fail("get(): the key must be a string");
      }
      if (const auto* v = self.find(args[0].s)) {
        return *v;
      }
      return args.size() > 1 ? args[1] : value::make_none();
    });
  }
  if (name == "items") {
    return value::function_v([self](const auto&, const auto&) { return object_items(self); });
  }
  if (name == "keys") {
    return value::function_v([self](const auto&, const auto&) {
      array_t out;
      for (const auto& [key, x] : *self.obj) {
        out.push_back(value::string_v(key));
      }
      return value::array_v(std::move(out));
    });
  }
  if (name == "values") {
    return value::function_v([self](const auto&, const auto&) {
      array_t out;
      for (const auto& [key, x] : *self.obj) {
        out.push_back(x);
      }
      return value::array_v(std::move(out));
    });
  }
  if (name == "dictsort") {
    return value::function_v([self](const std::vector<value>& args, const kwargs_t& kwargs) {
      return dictsort(self, args, kwargs);
    });
  }
  return value{};
}

// A dotted attribute path ("a.b.0") of an item, as selectattr / map / sort read them.
value attribute_path(const value& item, const std::string& path) {
  value cur = item;
  std::size_t from = 0;
  while (from <= path.size()) {
    const auto dot = path.find('.', from);
    const std::string part =
        path.substr(from, dot == std::string::npos ? std::string::npos : dot - from);
    if (cur.k == value::object || cur.k == value::ns) {
      const auto* v = cur.find(part);
      if (v == nullptr) {
        return value{};
      }
      cur = *v;
    } else if (cur.k == value::array) {
      char* end = nullptr;
      const long long index = std::strtoll(part.c_str(), &end, 10);
      if (end == part.c_str() || index < 0 || index >= static_cast<long long>(cur.arr->size())) {
        return value{};
      }
      cur = (*cur.arr)[static_cast<std::size_t>(index)];
    } else {
      return value{};
    }
    if (dot == std::string::npos) {
      break;
    }
    from = dot + 1;
  }
  return cur;
}

bool run_test(const std::string& name, const value& v, const value* other) {
  if (name == "defined") {
    return v.k != value::undefined;
  }
  if (name == "undefined") {
    return v.k == value::undefined;
  }
  if (name == "none") {
    return v.k == value::none;
  }
  if (name == "string") {
    return v.k == value::string;
  }
  if (name == "number") {
    return v.is_number();
  }
  if (name == "integer") {
    return v.k == value::integer;
  }
  if (name == "boolean") {
    return v.k == value::boolean;
  }
  if (name == "true") {
    return v.k == value::boolean && v.b;
  }
  if (name == "false") {
    return v.k == value::boolean && !v.b;
  }
  if (name == "mapping") {
    return v.k == value::object;
  }
  if (name == "iterable") {
    return v.k == value::array || v.k == value::string;
  }
  if (name == "sequence") {
    return v.k == value::array || v.k == value::object || v.k == value::string;
  }
  if (name == "callable") {
    return v.k == value::function;
  }
  if (name == "odd" || name == "even") {
    if (v.k != value::integer) {
      fail("cannot test " + name + " on a " + type_name(v));
    }
    return (v.i % 2 != 0) == (name == "odd");
  }
  if (name == "lower") {
    return v.k == value::string && v.s == lower(v.s);
  }
  if (name == "upper") {
    return v.k == value::string && v.s == upper(v.s);
  }
  if (name == "equalto" || name == "eq") {
    return other != nullptr && strictly_equal(v, *other);
  }
  fail("unsupported test '" + name + "'");
}

// ------------------------------------------------------------------------------------------------
// Interpreter

struct environment {
  environment* parent = nullptr;
  std::vector<std::pair<std::string, value>> vars;

  void set(const std::string& name, value v) {
    for (auto& [key, old] : vars) {
      if (key == name) {
        old = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
  [[nodiscard]] value lookup(const std::string& name) const {
    for (const environment* e = this; e != nullptr; e = e->parent) {
      for (const auto& [key, v] : e->vars) {
        if (key == name) {
          return v;
        }
      }
    }
    return value{};
  }
};

struct break_signal {};
struct continue_signal {};

class interpreter {
 public:
  std::string run(const std::vector<node_ptr>& body, environment& env) { return block(body, env); }

 private:
  std::string block(const std::vector<node_ptr>& body, environment& env) {
    std::string out;
    for (const auto& n : body) {
      out += to_output(eval(*n, env));
    }
    return out;
  }

  value eval(const node& n, environment& env) {
    try {
      return eval_inner(n, env);
    } catch (template_error& e) {
      if (e.pos.line == 0) {
        e.pos = n.pos;
      }
      throw;
    }
  }

  value eval_inner(const node& n, environment& env) {
    switch (n.kind) {
      case nk::text:
        return value::string_v(n.s);
      case nk::comment:
        return value::make_none();
      case nk::if_block:
        return value::string_v(block(truthy(eval(*n.a, env)) ? n.list : n.list2, env));
      case nk::for_loop:
        return eval_for(n, env);
      case nk::set_stmt:
        return eval_set(n, env);
      case nk::break_stmt:
        throw break_signal{};
      case nk::continue_stmt:
        throw continue_signal{};
      case nk::string_lit:
        return value::string_v(n.s);
      case nk::int_lit:
        return value::integer_v(n.i);
      case nk::float_lit:
        return value::floating_v(n.f);
      case nk::array_lit:
      case nk::tuple_lit: {
        array_t out;
        for (const auto& x : n.list) {
          out.push_back(eval(*x, env));
        }
        return value::array_v(std::move(out));
      }
      case nk::object_lit: {
        value out = value::object_v({});
        for (const auto& [k, v] : n.pairs) {
          const value key = eval(*k, env);
          if (key.k != value::string) {
            fail(std::string("dict keys must be strings, not ") + type_name(key), k->pos);
          }
          out.set(key.s, eval(*v, env));
        }
        return out;
      }
      case nk::identifier:
        return env.lookup(n.s);
      case nk::member:
        return eval_member(n, env);
      case nk::call: {
        std::vector<value> args;
        kwargs_t kwargs;
        eval_args(n.list, env, args, kwargs);
        const value f = eval(*n.a, env);
        if (f.k != value::function) {
          fail(std::string("cannot call a ") + type_name(f), n.pos);
        }
        return (*f.fn)(args, kwargs);
      }
      case nk::unary: {
        const value v = eval(*n.a, env);
        if (n.s == "not") {
          return value::boolean_v(!truthy(v));
        }
        if (!(v.is_number() || v.k == value::boolean)) {
          fail("unary " + n.s + " on a " + type_name(v));
        }
        const double sign = n.s == "-" ? -1 : 1;
        if (v.k == value::floating) {
          return value::floating_v(sign * v.f);
        }
        return value::integer_v(static_cast<std::int64_t>(sign) *
                                (v.k == value::boolean ? (v.b ? 1 : 0) : v.i));
      }
      case nk::binary:
        return eval_binary(n, env);
      case nk::filter:
        return apply_filter(n, eval(*n.a, env), env);
      case nk::test: {
        const value v = eval(*n.a, env);
        const bool r = run_test(n.s, v, nullptr);
        return value::boolean_v(n.flag ? !r : r);
      }
      case nk::select:
        return truthy(eval(*n.b, env)) ? eval(*n.a, env) : value{};
      case nk::ternary:
        return truthy(eval(*n.a, env)) ? eval(*n.b, env) : eval(*n.c, env);
      case nk::slice:
      case nk::kwarg:
        fail("misplaced expression");
    }
    fail("unknown node");
  }

  void eval_args(const std::vector<node_ptr>& nodes, environment& env, std::vector<value>& args,
                 kwargs_t& kwargs) {
    for (const auto& a : nodes) {
      if (a->kind != nk::kwarg) {
        args.push_back(eval(*a, env));
      }
    }
    for (const auto& a : nodes) {
      if (a->kind == nk::kwarg) {
        if (kwarg(kwargs, a->s.c_str()) != nullptr) {
          fail("keyword argument '" + a->s + "' given twice", a->pos);
        }
        kwargs.emplace_back(a->s, eval(*a->a, env));
      }
    }
  }

  value eval_member(const node& n, environment& env) {
    const value object = eval(*n.a, env);
    value property;
    if (n.flag) {
      if (n.b->kind == nk::slice) {
        const auto& s = *n.b;
        const value start = s.a ? eval(*s.a, env) : value{};
        const value stop = s.b ? eval(*s.b, env) : value{};
        const value step = s.c ? eval(*s.c, env) : value{};
        for (const value* v : {&start, &stop, &step}) {
          if (v->k != value::integer && v->k != value::undefined) {
            fail("slice indices must be integers");
          }
        }
        if (object.k == value::array) {
          return value::array_v(slice_of(*object.arr, start, stop, step));
        }
        if (object.k == value::string) {
          std::vector<value> chars;
          for (auto& cp : code_points(object.s)) {
            chars.push_back(value::string_v(std::move(cp)));
          }
          std::string out;
          for (const auto& c : slice_of(chars, start, stop, step)) {
            out += c.s;
          }
          return value::string_v(out);
        }
        fail(std::string("cannot slice a ") + type_name(object));
      }
      property = eval(*n.b, env);
    } else if (n.b->kind == nk::int_lit) {
      property = value::integer_v(n.b->i);
    } else {
      property = value::string_v(n.b->s);
    }
    if (object.k == value::object || object.k == value::ns) {
      if (property.k != value::string) {
        fail(std::string("dict keys are strings, not ") + type_name(property));
      }
      if (const auto* v = object.find(property.s)) {
        return *v;
      }
      return object.k == value::object ? object_method(object, property.s) : value{};
    }
    if (object.k == value::array || object.k == value::string) {
      if (property.k == value::integer) {
        if (object.k == value::array) {
          const auto size = static_cast<std::int64_t>(object.arr->size());
          const std::int64_t at = property.i < 0 ? size + property.i : property.i;
          return at >= 0 && at < size ? (*object.arr)[static_cast<std::size_t>(at)] : value{};
        }
        const auto chars = code_points(object.s);
        const auto size = static_cast<std::int64_t>(chars.size());
        const std::int64_t at = property.i < 0 ? size + property.i : property.i;
        return at >= 0 && at < size ? value::string_v(chars[static_cast<std::size_t>(at)])
                                    : value{};
      }
      if (property.k == value::string) {
        if (property.s == "length") {
          return value::integer_v(static_cast<std::int64_t>(
              object.k == value::array ? object.arr->size() : code_point_count(object.s)));
        }
        return object.k == value::string ? string_method(object.s, property.s) : value{};
      }
      fail(std::string("cannot index with a ") + type_name(property));
    }
    if (property.k != value::string) {
      fail(std::string("cannot index a ") + type_name(object) + " with a " + type_name(property));
    }
    return value{};  // attributes of none, undefined, numbers: undefined, as in the JS port
  }

  value eval_set(const node& n, environment& env) {
    const value rhs = n.b ? eval(*n.b, env) : value::string_v(block(n.list, env));
    const node& target = *n.a;
    if (target.kind == nk::identifier) {
      env.set(target.s, rhs);
    } else if (target.kind == nk::tuple_lit) {
      if (rhs.k != value::array) {
        fail(std::string("cannot unpack a ") + type_name(rhs));
      }
      if (rhs.arr->size() != target.list.size()) {
        fail("wrong number of values to unpack");
      }
      for (std::size_t i = 0; i < target.list.size(); ++i) {
        if (target.list[i]->kind != nk::identifier) {
          fail("can only unpack into names", target.list[i]->pos);
        }
        env.set(target.list[i]->s, (*rhs.arr)[i]);
      }
    } else if (target.kind == nk::member) {
      value object = eval(*target.a, env);
      if (object.k != value::ns) {
        fail("can only set attributes of a namespace()", target.pos);
      }
      if (target.flag || target.b->kind != nk::identifier) {
        fail("a namespace attribute must be set by name", target.pos);
      }
      object.set(target.b->s, rhs);  // the namespace's attributes are shared by reference
    } else {
      fail("cannot assign to this expression", target.pos);
    }
    return value::make_none();
  }

  void bind_loop_var(const node& target, const value& item, environment& scope) {
    if (target.kind == nk::identifier) {
      scope.set(target.s, item);
      return;
    }
    if (item.k != value::array) {
      fail(std::string("cannot unpack a ") + type_name(item), target.pos);
    }
    if (item.arr->size() != target.list.size()) {
      fail("wrong number of values to unpack in the loop", target.pos);
    }
    for (std::size_t j = 0; j < target.list.size(); ++j) {
      if (target.list[j]->kind != nk::identifier) {
        fail("can only unpack into names", target.list[j]->pos);
      }
      scope.set(target.list[j]->s, (*item.arr)[j]);
    }
  }

  value eval_for(const node& n, environment& env) {
    environment scope{&env, {}};
    value iterable = eval(*n.b, scope);
    if (iterable.k == value::object) {
      array_t keys;
      for (const auto& [key, v] : *iterable.obj) {
        keys.push_back(value::string_v(key));
      }
      iterable = value::array_v(std::move(keys));
    }
    if (iterable.k != value::array) {
      fail(std::string("cannot loop over a ") + type_name(iterable), n.b->pos);
    }
    std::vector<value> items;
    for (const auto& item : *iterable.arr) {
      if (n.c) {
        environment test_scope{&scope, {}};
        bind_loop_var(*n.a, item, test_scope);
        if (!truthy(eval(*n.c, test_scope))) {
          continue;
        }
      }
      items.push_back(item);
    }
    std::string out;
    bool iterated = false;
    const auto count = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < count; ++i) {
      object_t loop = {
          {"index", value::integer_v(i + 1)},
          {"index0", value::integer_v(i)},
          {"revindex", value::integer_v(count - i)},
          {"revindex0", value::integer_v(count - i - 1)},
          {"first", value::boolean_v(i == 0)},
          {"last", value::boolean_v(i == count - 1)},
          {"length", value::integer_v(count)},
          {"previtem", i > 0 ? items[static_cast<std::size_t>(i - 1)] : value{}},
          {"nextitem", i < count - 1 ? items[static_cast<std::size_t>(i + 1)] : value{}},
      };
      scope.set("loop", value::object_v(std::move(loop)));
      bind_loop_var(*n.a, items[static_cast<std::size_t>(i)], scope);
      try {
        out += block(n.list, scope);
      } catch (const continue_signal&) {
        continue;
      } catch (const break_signal&) {
        break;
      }
      iterated = true;
    }
    if (!iterated) {
      out += block(n.list2, scope);
    }
    return value::string_v(out);
  }

  value eval_binary(const node& n, environment& env) {
    const value left = eval(*n.a, env);
    const std::string& op = n.s;
    if (op == "and") {
      return truthy(left) ? eval(*n.b, env) : left;
    }
    if (op == "or") {
      return truthy(left) ? left : eval(*n.b, env);
    }
    const value right = eval(*n.b, env);
    if (op == "==") {
      return value::boolean_v(loosely_equal(left, right));
    }
    if (op == "!=") {
      return value::boolean_v(!loosely_equal(left, right));
    }
    if (left.k == value::undefined || right.k == value::undefined) {
      if (right.k == value::undefined && (op == "in" || op == "not in")) {
        return value::boolean_v(op == "not in");
      }
      fail("cannot apply '" + op + "' to an undefined value");
    }
    if (left.k == value::none || right.k == value::none) {
      fail("cannot apply '" + op + "' to none");
    }
    if (op == "~") {
      return value::string_v(to_output(left) + to_output(right));
    }
    const bool left_num = left.is_number();
    const bool right_num = right.is_number();
    if (op == "**" && (left_num || left.k == value::boolean) &&
        (right_num || right.k == value::boolean)) {
      const double r = std::pow(left.number(), right.number());
      if (!std::isfinite(r)) {
        fail("'**' gives no finite number");
      }
      if (left.k == value::floating || right.k == value::floating || right.number() < 0) {
        return value::floating_v(r);
      }
      return value::integer_v(static_cast<std::int64_t>(r));
    }
    if (left_num && right_num) {
      const bool is_float = left.k == value::floating || right.k == value::floating;
      const double a = left.number();
      const double b = right.number();
      auto number = [&](double r) {
        return is_float ? value::floating_v(r) : value::integer_v(static_cast<std::int64_t>(r));
      };
      if (op == "+") {
        return is_float ? value::floating_v(a + b) : value::integer_v(left.i + right.i);
      }
      if (op == "-") {
        return is_float ? value::floating_v(a - b) : value::integer_v(left.i - right.i);
      }
      if (op == "*") {
        return is_float ? value::floating_v(a * b) : value::integer_v(left.i * right.i);
      }
      if (op == "/") {
        return value::floating_v(a / b);
      }
      if (op == "//") {
        return number(std::floor(a / b));
      }
      if (op == "%") {
        return number(std::fmod(a, b));
      }
      if (op == "<") {
        return value::boolean_v(a < b);
      }
      if (op == ">") {
        return value::boolean_v(a > b);
      }
      if (op == "<=") {
        return value::boolean_v(a <= b);
      }
      if (op == ">=") {
        return value::boolean_v(a >= b);
      }
    } else if (left.k == value::array && right.k == value::array) {
      if (op == "+") {
        array_t out = *left.arr;
        out.insert(out.end(), right.arr->begin(), right.arr->end());
        return value::array_v(std::move(out));
      }
    } else if (right.k == value::array) {
      const bool member = std::any_of(right.arr->begin(), right.arr->end(),
                                      [&](const value& x) { return strictly_equal(x, left); });
      if (op == "in") {
        return value::boolean_v(member);
      }
      if (op == "not in") {
        return value::boolean_v(!member);
      }
    }
    if ((left.k == value::string || right.k == value::string) && op == "+") {
      return value::string_v(to_output(left) + to_output(right));
    }
    if (left.k == value::string && right.k == value::string) {
      if (op == "in") {
        return value::boolean_v(right.s.find(left.s) != std::string::npos);
      }
      if (op == "not in") {
        return value::boolean_v(right.s.find(left.s) == std::string::npos);
      }
    }
    if (left.k == value::string && right.k == value::object) {
      const bool has = right.find(left.s) != nullptr;
      if (op == "in") {
        return value::boolean_v(has);
      }
      if (op == "not in") {
        return value::boolean_v(!has);
      }
    }
    fail("unsupported operation: " + std::string(type_name(left)) + " " + op + " " +
         type_name(right));
  }

  json_options tojson_options(const kwargs_t& kwargs) {
    json_options o;
    if (const auto* v = kwarg(kwargs, "indent"); v != nullptr && v->k != value::none) {
      if (v->k != value::integer) {
        fail("tojson(): indent must be an integer");
      }
      o.indent = v->i;
    }
    if (const auto* v = kwarg(kwargs, "ensure_ascii")) {
      if (v->k != value::boolean) {
        fail("tojson(): ensure_ascii must be a boolean");
      }
      o.ensure_ascii = v->b;
    }
    if (const auto* v = kwarg(kwargs, "sort_keys")) {
      if (v->k != value::boolean) {
        fail("tojson(): sort_keys must be a boolean");
      }
      o.sort_keys = v->b;
    }
    if (const auto* v = kwarg(kwargs, "separators"); v != nullptr && v->k != value::none) {
      if (v->k != value::array || v->arr->size() != 2 || (*v->arr)[0].k != value::string ||
          (*v->arr)[1].k != value::string) {
        fail("tojson(): separators must be two strings");
      }
      o.custom_separators = true;
      o.item_separator = (*v->arr)[0].s;
      o.key_separator = (*v->arr)[1].s;
    }
    return o;
  }

  value apply_filter(const node& n, const value& operand, environment& env) {
    const std::string& name = n.s;
    std::vector<value> args;
    kwargs_t kwargs;
    if (n.flag) {
      eval_args(n.list, env, args, kwargs);
    }
    auto cannot = [&]() -> value {
      fail("filter '" + name + "' cannot be applied to a " + type_name(operand));
    };
    if (name == "safe") {
      return operand;
    }
    if (name == "tojson") {
      return value::string_v(to_json(operand, tojson_options(kwargs), 0, true));
    }
    if (name == "default") {
      value fallback = args.size() > 0 ? args[0] : value::string_v("");
      const value boolean = arg_or(args, 1, kwargs, "boolean", value::boolean_v(false));
      if (boolean.k != value::boolean) {
        fail("default(): the second argument must be a boolean");
      }
      if (operand.k == value::undefined || (boolean.b && !truthy(operand))) {
        return fallback;
      }
      return operand;
    }
    if (name == "join" && (operand.k == value::array || operand.k == value::string)) {
      const value sep = arg_or(args, 0, kwargs, "d", value::string_v(""));
      if (sep.k != value::string) {
        fail("join(): the separator must be a string");
      }
      std::string out;
      if (operand.k == value::string) {
        const auto chars = code_points(operand.s);
        for (std::size_t i = 0; i < chars.size(); ++i) {
          out += (i > 0 ? sep.s : "") + chars[i];
        }
        return value::string_v(out);
      }
      for (std::size_t i = 0; i < operand.arr->size(); ++i) {
        out += (i > 0 ? sep.s : "") + to_output((*operand.arr)[i]);
      }
      return value::string_v(out);
    }
    if (name == "int" || name == "float") {
      const value fallback = arg_or(args, 0, kwargs, "default",
                                    name == "int" ? value::integer_v(0) : value::floating_v(0));
      if (operand.k == value::string) {
        char* end = nullptr;
        const std::string t = trim_left(operand.s, nullptr);
        if (name == "int") {
          const long long v = std::strtoll(t.c_str(), &end, 10);
          return end == t.c_str() ? fallback : value::integer_v(v);
        }
        const double v = std::strtod(t.c_str(), &end);
        return end == t.c_str() ? fallback : value::floating_v(v);
      }
      if (operand.is_number()) {
        if (name == "int") {
          return value::integer_v(static_cast<std::int64_t>(std::floor(operand.number())));
        }
        return value::floating_v(operand.number());
      }
      if (operand.k == value::boolean) {
        return name == "int" ? value::integer_v(operand.b ? 1 : 0)
                             : value::floating_v(operand.b ? 1 : 0);
      }
      return cannot();
    }
    if (name == "string") {
      if (operand.k == value::undefined) {
        return cannot();
      }
      if (operand.k == value::string) {
        return operand;
      }
      return value::string_v(operand.k == value::none ? "None" : to_output(operand));
    }
    if (name == "length" || name == "count") {
      if (operand.k == value::array) {
        return value::integer_v(static_cast<std::int64_t>(operand.arr->size()));
      }
      if (operand.k == value::string) {
        return value::integer_v(static_cast<std::int64_t>(code_point_count(operand.s)));
      }
      if (operand.k == value::object) {
        return value::integer_v(static_cast<std::int64_t>(operand.obj->size()));
      }
      return cannot();
    }
    if (name == "items") {
      if (operand.k == value::object) {
        return object_items(operand);
      }
      return cannot();
    }
    if (name == "dictsort") {
      if (operand.k == value::object) {
        return dictsort(operand, args, kwargs);
      }
      return cannot();
    }
    if (operand.k == value::array) {
      const auto& items = *operand.arr;
      if (name == "list") {
        return operand;
      }
      if (name == "first") {
        return items.empty() ? value{} : items.front();
      }
      if (name == "last") {
        return items.empty() ? value{} : items.back();
      }
      if (name == "reverse") {
        return value::array_v(array_t(items.rbegin(), items.rend()));
      }
      if (name == "unique") {
        array_t out;
        for (const auto& x : items) {
          if (std::none_of(out.begin(), out.end(),
                           [&](const value& y) { return strictly_equal(x, y); })) {
            out.push_back(x);
          }
        }
        return value::array_v(std::move(out));
      }
      if (name == "sort") {
        const value reverse = arg_or(args, 0, kwargs, "reverse", value::boolean_v(false));
        const value case_sensitive =
            arg_or(args, 1, kwargs, "case_sensitive", value::boolean_v(false));
        const value attribute = arg_or(args, 2, kwargs, "attribute", value::make_none());
        array_t out = items;
        auto key = [&](const value& x) {
          if (attribute.k == value::none) {
            return x;
          }
          return attribute_path(
              x, attribute.k == value::integer ? std::to_string(attribute.i) : attribute.s);
        };
        std::stable_sort(out.begin(), out.end(), [&](const value& x, const value& y) {
          const int c = compare_values(key(x), key(y),
                                       case_sensitive.k == value::boolean && case_sensitive.b);
          return reverse.k == value::boolean && reverse.b ? c > 0 : c < 0;
        });
        return value::array_v(std::move(out));
      }
      if (name == "selectattr" || name == "rejectattr") {
        const bool select = name == "selectattr";
        if (args.empty() || args[0].k != value::string) {
          fail(name + "(): the attribute must be a string");
        }
        const std::string test =
            args.size() > 1 ? (args[1].k == value::string ? args[1].s : "") : "";
        if (args.size() > 1 && (args[1].k != value::string || !supported_tests().contains(test))) {
          fail(name + "(): unsupported test '" + to_output(args[1]) + "'");
        }
        array_t out;
        for (const auto& item : items) {
          if (item.k != value::object && item.k != value::ns) {
            fail(name + "() applies to a list of dicts");
          }
          const auto* found = item.find(args[0].s);
          const value attr = found != nullptr ? *found : value{};
          const bool r = test.empty() ? truthy(attr)
                                      : run_test(test, attr, args.size() > 2 ? &args[2] : nullptr);
          if (r == select) {
            out.push_back(item);
          }
        }
        return value::array_v(std::move(out));
      }
      if (name == "select" || name == "reject") {
        // Python's Jinja (the JS port has neither): keep the items that pass (fail) the test.
        if (!args.empty() &&
            (args[0].k != value::string || !supported_tests().contains(args[0].s))) {
          fail(name + "(): unsupported test '" + to_output(args[0]) + "'");
        }
        array_t out;
        for (const auto& item : items) {
          const bool r = args.empty()
                             ? truthy(item)
                             : run_test(args[0].s, item, args.size() > 1 ? &args[1] : nullptr);
          if (r == (name == "select")) {
            out.push_back(item);
          }
        }
        return value::array_v(std::move(out));
      }
      if (name == "map") {
        const auto* attribute = kwarg(kwargs, "attribute");
        if (attribute == nullptr || attribute->k != value::string) {
          fail("map() is supported with attribute='...' only");
        }
        const auto* fallback = kwarg(kwargs, "default");
        array_t out;
        for (const auto& item : items) {
          if (item.k != value::object && item.k != value::ns) {
            fail("map(): the items must be dicts");
          }
          value v = attribute_path(item, attribute->s);
          out.push_back(v.k == value::undefined && fallback != nullptr ? *fallback : v);
        }
        return value::array_v(std::move(out));
      }
      return cannot();
    }
    if (operand.k == value::string) {
      const std::string& s = operand.s;
      if (name == "trim") {
        return value::string_v(trim_right(trim_left(s, nullptr), nullptr));
      }
      if (name == "upper") {
        return value::string_v(upper(s));
      }
      if (name == "lower") {
        return value::string_v(lower(s));
      }
      if (name == "title") {
        return value::string_v(title_case(s));
      }
      if (name == "capitalize") {
        return (*string_method(s, "capitalize").fn)({}, {});
      }
      if (name == "replace") {
        return (*string_method(s, "replace").fn)(args, kwargs);
      }
      if (name == "indent") {
        const value width = arg_or(args, 0, kwargs, "width", value::integer_v(4));
        const value first = arg_or(args, 1, kwargs, "first", value::boolean_v(false));
        const value blank = arg_or(args, 2, kwargs, "blank", value::boolean_v(false));
        if (width.k != value::integer) {
          fail("indent(): width must be an integer");
        }
        const std::string pad(static_cast<std::size_t>(std::max<std::int64_t>(width.i, 0)), ' ');
        std::string out;
        std::size_t from = 0;
        for (std::size_t line = 0;; ++line) {
          const auto nl = s.find('\n', from);
          const std::string part =
              s.substr(from, nl == std::string::npos ? std::string::npos : nl - from);
          const bool skip = (!truthy(first) && line == 0) || (!truthy(blank) && part.empty());
          out += (skip ? "" : pad) + part;
          if (nl == std::string::npos) {
            break;
          }
          out += "\n";
          from = nl + 1;
        }
        return value::string_v(out);
      }
      return cannot();
    }
    if (operand.is_number()) {
      if (name == "abs") {
        return operand.k == value::integer ? value::integer_v(std::abs(operand.i))
                                           : value::floating_v(std::abs(operand.f));
      }
      return cannot();
    }
    if (operand.k == value::boolean && name == "bool") {
      return operand;
    }
    return cannot();
  }
};

value namespace_function(const std::vector<value>& args, const kwargs_t& kwargs) {
  if (args.size() > 1) {
    fail("namespace() takes at most one positional argument");
  }
  value ns = value::object_v({}, value::ns);
  if (args.size() == 1) {
    if (args[0].k == value::object) {
      for (const auto& [key, v] : *args[0].obj) {
        ns.set(key, v);
      }
    } else {
      fail("namespace(): the positional argument must be a dict");
    }
  }
  for (const auto& [key, v] : kwargs) {
    ns.set(key, v);
  }
  return ns;
}

value range_function(const std::vector<value>& args, const kwargs_t&) {
  for (const auto& a : args) {
    if (a.k != value::integer) {
      fail("range() takes integers");
    }
  }
  if (args.empty() || args.size() > 3) {
    fail("range() takes one to three integers");
  }
  std::int64_t start = 0;
  std::int64_t stop = args[0].i;
  std::int64_t step = 1;
  if (args.size() >= 2) {
    start = args[0].i;
    stop = args[1].i;
  }
  if (args.size() == 3) {
    step = args[2].i;
  }
  if (step == 0) {
    fail("range() step must not be zero");
  }
  array_t out;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    out.push_back(value::integer_v(i));
    if (out.size() > 1000000) {
      fail("range() too long");
    }
  }
  return value::array_v(std::move(out));
}

}  // namespace

struct template_program {
  std::vector<node_ptr> body;
};

}  // namespace detail

namespace {

std::string describe(const detail::template_error& e) {
  if (e.pos.line > 0) {
    return "line " + std::to_string(e.pos.line) + ", column " + std::to_string(e.pos.column) +
           ": " + e.message;
  }
  return e.message;
}

}  // namespace

chat_template::chat_template(std::shared_ptr<const detail::template_program> program)
    : program_(std::move(program)) {}

result<chat_template> chat_template::parse(const std::string& source) {
  try {
    const detail::source_map positions(source);
    auto tokens = detail::tokenize(source, positions);
    detail::parser p(std::move(tokens), positions);
    auto program = std::make_shared<detail::template_program>();
    program->body = p.parse_program();
    return chat_template(std::move(program));
  } catch (const detail::template_error& e) {
    return error{describe(e)};
  } catch (const std::exception& e) {
    return error{std::string("cannot parse the template: ") + e.what()};
  }
}

result<std::string> chat_template::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) {
    return error{"the template's context must be a JSON object"};
  }
  using detail::value;
  detail::environment env;
  env.set("false", value::boolean_v(false));
  env.set("true", value::boolean_v(true));
  env.set("none", value::make_none());
  env.set("False", value::boolean_v(false));
  env.set("True", value::boolean_v(true));
  env.set("None", value::make_none());
  env.set("namespace", value::function_v(detail::namespace_function));
  env.set("range", value::function_v(detail::range_function));
  env.set("raise_exception",
          value::function_v([](const std::vector<value>& args, const detail::kwargs_t&) -> value {
            detail::fail("template raised: " +
                         (args.empty() ? std::string() : detail::to_output(args[0])));
          }));
  for (const auto& [key, v] : context.items()) {
    env.set(key, detail::from_json(v));
  }
  try {
    detail::interpreter interp;
    return interp.run(program_->body, env);
  } catch (const detail::template_error& e) {
    return error{describe(e)};
  } catch (const detail::break_signal&) {
    return error{"{% break %} outside a loop"};
  } catch (const detail::continue_signal&) {
    return error{"{% continue %} outside a loop"};
  } catch (const std::exception& e) {
    return error{std::string("cannot render the template: ") + e.what()};
  }
}

nlohmann::ordered_json chat_context(const nlohmann::ordered_json& messages,
                                    bool add_generation_prompt, const std::string& bos_token,
                                    const std::string& eos_token,
                                    const nlohmann::ordered_json& tools,
                                    const nlohmann::ordered_json& extra) {
  nlohmann::ordered_json c = nlohmann::ordered_json::object();
  c["messages"] = messages;
  c["tools"] = tools;
  c["add_generation_prompt"] = add_generation_prompt;
  c["bos_token"] = bos_token;
  c["eos_token"] = eos_token;
  if (extra.is_object()) {
    for (const auto& [key, v] : extra.items()) {
      c[key] = v;
    }
  }
  return c;
}

namespace {

result<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return error{"cannot open '" + path + "'"};
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string token_text(const nlohmann::ordered_json& t) {
  if (t.is_string()) {
    return t.get<std::string>();
  }
  if (t.is_object() && t.contains("content") && t["content"].is_string()) {
    return t["content"].get<std::string>();
  }
  return {};
}

}  // namespace

result<chat_template_source> read_chat_template(const std::string& dir, const std::string& name,
                                                bool with_tools) {
  chat_template_source out;
  const std::string config_path = dir + "/tokenizer_config.json";
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (std::ifstream probe(config_path); probe) {
    auto text = read_text(config_path);
    if (!text) {
      return text.err();
    }
    try {
      config = nlohmann::ordered_json::parse(*text);
    } catch (const nlohmann::json::exception& e) {
      return error{"'" + config_path + "': not valid JSON: " + e.what()};
    }
    if (!config.is_object()) {
      return error{"'" + config_path + "': expected a JSON object"};
    }
    out.bos_token = token_text(config.value("bos_token", nlohmann::ordered_json()));
    out.eos_token = token_text(config.value("eos_token", nlohmann::ordered_json()));
  }
  const std::string jinja_path = dir + "/chat_template.jinja";
  if (std::ifstream probe(jinja_path); probe) {
    auto text = read_text(jinja_path);
    if (!text) {
      return text.err();
    }
    out.source = *text;
    out.file = jinja_path;
    return out;
  }
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) {
    return error{"'" + dir +
                 "' has no chat template (neither chat_template.jinja nor a "
                 "'chat_template' key in tokenizer_config.json)"};
  }
  out.file = config_path;
  if (it->is_string()) {
    out.source = it->get<std::string>();
    return out;
  }
  if (!it->is_array()) {
    return error{"'" + config_path +
                 "': 'chat_template' must be a string or a list of "
                 "{\"name\", \"template\"}"};
  }
  std::string wanted = name;
  auto has = [&](const std::string& n) {
    return std::any_of(it->begin(), it->end(),
                       [&](const auto& e) { return e.is_object() && e.value("name", "") == n; });
  };
  if (wanted.empty()) {
    wanted = with_tools && has("tool_use") ? "tool_use" : "default";
  }
  std::string names;
  for (const auto& e : *it) {
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string() ||
        !e.contains("template") || !e["template"].is_string()) {
      return error{"'" + config_path +
                   "': each 'chat_template' entry needs a string 'name' and "
                   "'template'"};
    }
    const auto n = e["name"].get<std::string>();
    names += (names.empty() ? "" : ", ") + n;
    if (n == wanted) {
      out.source = e["template"].get<std::string>();
    }
  }
  if (out.source.empty()) {
    return error{"'" + config_path + "': no chat template named '" + wanted +
                 "' (it has: " + names + ")"};
  }
  return out;
}

namespace {

std::string excerpt(const std::string& s, std::size_t at) {
  const std::size_t from = at > 20 ? at - 20 : 0;
  std::string out = s.substr(from, 60);
  std::string escaped;
  for (char c : out) {
    escaped += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return "'" + escaped + "'";
}

// Error unless `before` is a prefix of `after`.
status require_prefix(const std::string& before, const std::string& after,
                      const std::string& what) {
  if (after.compare(0, before.size(), before) == 0) {
    return ok_status();
  }
  std::size_t at = 0;
  while (at < before.size() && at < after.size() && before[at] == after[at]) {
    ++at;
  }
  return error{what + ": the renderings differ at character " + std::to_string(at) + ": " +
               excerpt(before, at) + " became " + excerpt(after, at)};
}

result<std::string> render_with(const chat_template& t, nlohmann::ordered_json context,
                                const nlohmann::ordered_json& messages, bool generation_prompt) {
  context["messages"] = messages;
  context["add_generation_prompt"] = generation_prompt;
  return t.render(context);
}

}  // namespace

status check_delta_rule(const chat_template& tmpl, const nlohmann::ordered_json& messages,
                        const nlohmann::ordered_json& feedback,
                        const nlohmann::ordered_json& context) {
  if (!messages.is_array() || messages.empty() || !messages.back().is_object() ||
      messages.back().value("role", "") != "assistant") {
    return error{"check_delta_rule needs messages that end with an assistant turn"};
  }
  auto prompt_messages = messages;
  prompt_messages.erase(prompt_messages.size() - 1);
  auto prompt = render_with(tmpl, context, prompt_messages, true);
  auto turn = render_with(tmpl, context, messages, false);
  if (!prompt) {
    return prompt.err().wrap("rendering the generation prompt");
  }
  if (!turn) {
    return turn.err().wrap("rendering the conversation");
  }
  if (auto s = require_prefix(*prompt, *turn,
                              "the assistant turn is not the generation prompt followed by the "
                              "answer (the template renders an answered turn differently from "
                              "the prompt it was generated from)");
      !s) {
    return s;
  }
  auto extended = messages;
  extended.push_back(feedback);
  for (const bool generation_prompt : {false, true}) {
    auto next = render_with(tmpl, context, extended, generation_prompt);
    if (!next) {
      return next.err().wrap("rendering the conversation with the feedback");
    }
    if (auto s = require_prefix(*turn, *next,
                                "appending a user message rewrites earlier text (the template "
                                "renders earlier turns differently once a later one exists)");
        !s) {
      return s;
    }
  }
  return ok_status();
}

status check_multi_turn(const chat_template& tmpl, const nlohmann::ordered_json& context) {
  using j = nlohmann::ordered_json;
  auto msg = [](const char* role, const char* content) {
    return j{{"role", role}, {"content", content}};
  };
  const j feedback = msg("user", "The tests failed: expected 3, got 4.");
  struct probe {
    const char* name;
    j messages;
  };
  const std::vector<probe> probes = {
      {"one turn",
       j::array({msg("user", "Write a function."), msg("assistant", "def f(): return 1")})},
      {"one turn with a system message",
       j::array({msg("system", "You are a careful coder."), msg("user", "Write a function."),
                 msg("assistant", "def f(): return 1")})},
      {"two turns",
       j::array({msg("user", "Write a function."), msg("assistant", "def f(): return 1"),
                 msg("user", "Make it return 2."), msg("assistant", "def f(): return 2")})},
      {"an answer with a <think> block",
       j::array({msg("user", "Write a function."),
                 msg("assistant", "<think>\nThe user wants f.\n</think>\n\ndef f(): return 1")})},
  };
  for (const auto& p : probes) {
    if (auto s = check_delta_rule(tmpl, p.messages, feedback, context); !s) {
      return s.err().wrap("the chat template cannot be used for multi-turn rollouts (probe: " +
                          std::string(p.name) + ")");
    }
  }
  return ok_status();
}

}  // namespace leap::policy

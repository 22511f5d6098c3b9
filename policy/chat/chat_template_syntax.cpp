// The syntax of detail/chat_template.hpp's Jinja subset (detail/chat_template_syntax.hpp): the
// UTF-8 helpers, the lexer (@huggingface/jinja's lexer.ts: source to tokens) and the parser (its
// parser.ts: tokens to the tree that chat_template_interpreter.cpp evaluates). One file for both
// stages: they share the header, and each would cost a compile of its own.
#include "policy/chat/detail/chat_template_syntax.hpp"

#include "common/utf8.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
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

// ------------------------------------------------------------------------------------------------
// Parser

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

namespace {

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

}  // namespace

std::vector<node_ptr> parse(std::vector<token> tokens, const source_map& positions) {
  return parser(std::move(tokens), positions).parse_program();
}

}  // namespace leap::policy::detail::jinja

// The chat template engine's syntax (chat_template.hpp): errors with source positions, the UTF-8
// helpers every stage shares, the lexer's tokens and the parser's tree. chat_template_syntax.cpp
// turns a source into tokens (tokenize) and tokens into the tree (parse) that
// chat_template_interpreter.cpp evaluates.
//
// Errors are thrown (a template_error carrying its source position) because the evaluator is
// deeply recursive; chat_template.cpp's public functions catch them and return error values.
//
// Internal to policy/ (chat_template.cpp and its parts are its only users).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace leap::policy::detail::jinja {

struct source_pos {
  int line = 0;  // 0: unknown
  int column = 0;
};

struct template_error {
  std::string message;
  source_pos pos;
};

[[noreturn]] inline void fail(const std::string& message, source_pos pos = {}) {
  throw template_error{message, pos};
}

// UTF-8 helpers (strings are UTF-8; lengths, indices and slices count code points, as Python does).
std::vector<std::string> code_points(const std::string& s);
std::size_t code_point_count(const std::string& s);
// Decodes the code point at s[i] and moves i past it (an invalid byte decodes as itself).
std::uint32_t decode_utf8(const std::string& s, std::size_t& i);
bool is_space(char c);
bool is_word(char c);
// chars: the characters to strip (nullptr: whitespace).
std::string trim_left(const std::string& s, const std::string* chars);
std::string trim_right(const std::string& s, const std::string* chars);

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

std::vector<token> tokenize(const std::string& source, const source_map& positions);

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

const std::set<std::string>& supported_filters();
const std::set<std::string>& supported_tests();

// The template's statements, in order.
std::vector<node_ptr> parse(std::vector<token> tokens, const source_map& positions);

}  // namespace leap::policy::detail::jinja

namespace leap::policy::detail {

struct template_program {
  std::vector<jinja::node_ptr> body;
};

}  // namespace leap::policy::detail

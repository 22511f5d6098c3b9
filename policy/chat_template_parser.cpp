// The parser of chat_template.hpp's Jinja subset (@huggingface/jinja's parser.ts): tokens to the
// tree of detail/chat_template_syntax.hpp.
#include "policy/detail/chat_template_syntax.hpp"

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace leap::policy::detail::jinja {

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

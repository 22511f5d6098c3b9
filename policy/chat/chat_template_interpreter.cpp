// The interpreter of detail/chat_template.hpp's Jinja subset (@huggingface/jinja's runtime.ts),
// with the filters and the loop object of transformers' environment.
#include "policy/chat/detail/chat_template_interpreter.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace leap::policy::detail::jinja {

namespace {

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

}  // namespace

std::string run(const std::vector<node_ptr>& body, environment& env) {
  return interpreter().run(body, env);
}

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

value range_function(const std::vector<value>& args, const kwargs_t& /*kwargs*/) {
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

}  // namespace leap::policy::detail::jinja

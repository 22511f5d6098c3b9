// The chat template engine's values (chat_template.hpp): Jinja's types with Python's semantics
// where the JS port differs, their JSON forms, comparisons, and the methods, filters' helpers and
// tests the interpreter (chat_template_interpreter.cpp) calls on them.
//
// Internal to policy/ (chat_template.cpp and its parts are its only users).
#pragma once

#include "policy/chat/detail/chat_template_syntax.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace leap::policy::detail::jinja {

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

const char* type_name(const value& v);
bool truthy(const value& v);

struct json_options {
  std::int64_t indent = 0;  // 0: none
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool custom_separators = false;
  std::string item_separator;
  std::string key_separator;
};

std::string to_json(const value& v, const json_options& o, int depth, bool undefined_to_null);
// The text {{ v }} writes.
std::string to_output(const value& v);

bool loosely_equal(const value& a, const value& b);
bool strictly_equal(const value& a, const value& b);
int compare_values(const value& a, const value& b, bool case_sensitive);
std::vector<value> slice_of(const std::vector<value>& items, const value& start_v,
                            const value& stop_v, const value& step_v);

std::string title_case(const std::string& s);
std::string upper(std::string s);
std::string lower(std::string s);

const value* kwarg(const kwargs_t& kwargs, const char* name);
value arg_or(const std::vector<value>& args, std::size_t i, const kwargs_t& kwargs,
             const char* name, value fallback);

// A bound method of a string or an object (a function value), or undefined.
value string_method(const std::string& self, const std::string& name);
value object_method(const value& self, const std::string& name);
value object_items(const value& v);
value dictsort(const value& self, const std::vector<value>& args, const kwargs_t& kwargs);
// `item.a.b` for map(attribute=...) and selectattr.
value attribute_path(const value& item, const std::string& path);
// `v is name` (other: the test's argument, if any).
bool run_test(const std::string& name, const value& v, const value* other);

}  // namespace leap::policy::detail::jinja

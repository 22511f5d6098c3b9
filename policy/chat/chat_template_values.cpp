// The values of detail/chat_template.hpp's Jinja subset (@huggingface/jinja's runtime.ts values,
// with Python's semantics where the JS port differs).
#include "policy/chat/detail/chat_template_values.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace leap::policy::detail::jinja {

namespace {

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

}  // namespace

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

}  // namespace leap::policy::detail::jinja

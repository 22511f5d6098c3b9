// The chat template engine's interpreter (chat_template.hpp): evaluates the parser's tree in an
// environment of values.
//
// Internal to policy/ (chat_template.cpp and its parts are its only users).
#pragma once

#include "policy/chat/detail/chat_template_syntax.hpp"
#include "policy/chat/detail/chat_template_values.hpp"

#include <string>
#include <utility>
#include <vector>

namespace leap::policy::detail::jinja {

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

// The text the statements write; throws template_error, and break_signal or continue_signal for a
// break or continue outside a loop.
std::string run(const std::vector<node_ptr>& body, environment& env);

// The globals namespace() and range().
value namespace_function(const std::vector<value>& args, const kwargs_t& kwargs);
value range_function(const std::vector<value>& args, const kwargs_t& kwargs);

}  // namespace leap::policy::detail::jinja

// The functions of detail/chat_template.hpp: parsing and rendering (the engine's stages are
// chat_template_{syntax,values,interpreter}.cpp), reading a model's template and checking a
// rendering's delta rule.
//
// The engine follows @huggingface/jinja 0.5.11 (github.com/huggingface/huggingface.js,
// packages/jinja/src/{lexer,parser,runtime}.ts, as published on npm: dist/index.js), which mirrors
// transformers' Jinja environment; the departures (Python's semantics where the JS port differs)
// are listed in the header. Internally errors are thrown (a template_error carrying its source
// position) because the evaluator is deeply recursive; the functions here catch them and return
// error values.
#include "policy/chat/detail/chat_template.hpp"

#include "policy/chat/detail/chat_template_interpreter.hpp"
#include "policy/chat/detail/chat_template_syntax.hpp"
#include "policy/chat/detail/chat_template_values.hpp"

#include <cmath>
#include <cstdint>
#include <exception>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace leap::policy {
namespace {

namespace jinja = detail::jinja;
using json = nlohmann::ordered_json;

// The context's JSON as template values.
jinja::value from_json(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return jinja::value::make_none();
    case json::value_t::boolean:
      return jinja::value::boolean_v(j.get<bool>());
    case json::value_t::number_integer:
      return jinja::value::integer_v(j.get<std::int64_t>());
    case json::value_t::number_unsigned:
      return jinja::value::integer_v(static_cast<std::int64_t>(j.get<std::uint64_t>()));
    case json::value_t::number_float: {
      // JSON does not tell 1.0 from 1; neither do the JS port nor transformers' JSON input.
      const double d = j.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9007199254740992.0) {
        return jinja::value::integer_v(static_cast<std::int64_t>(d));
      }
      return jinja::value::floating_v(d);
    }
    case json::value_t::string:
      return jinja::value::string_v(j.get<std::string>());
    case json::value_t::array: {
      jinja::array_t out;
      for (const auto& x : j) {
        out.push_back(from_json(x));
      }
      return jinja::value::array_v(std::move(out));
    }
    case json::value_t::object: {
      jinja::object_t out;
      for (const auto& [key, x] : j.items()) {
        out.emplace_back(key, from_json(x));
      }
      return jinja::value::object_v(std::move(out));
    }
    default:
      return jinja::value{};
  }
}

std::string describe(const jinja::template_error& e) {
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
    const jinja::source_map positions(source);
    auto program = std::make_shared<detail::template_program>();
    program->body = jinja::parse(jinja::tokenize(source, positions), positions);
    return chat_template(std::move(program));
  } catch (const jinja::template_error& e) {
    return error{describe(e)};
  } catch (const std::exception& e) {
    return error{std::string("cannot parse the template: ") + e.what()};
  }
}

result<std::string> chat_template::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) {
    return error{"the template's context must be a JSON object"};
  }
  using jinja::value;
  jinja::environment env;
  env.set("false", value::boolean_v(false));
  env.set("true", value::boolean_v(true));
  env.set("none", value::make_none());
  env.set("False", value::boolean_v(false));
  env.set("True", value::boolean_v(true));
  env.set("None", value::make_none());
  env.set("namespace", value::function_v(jinja::namespace_function));
  env.set("range", value::function_v(jinja::range_function));
  env.set("raise_exception",
          value::function_v([](const std::vector<value>& args, const jinja::kwargs_t&) -> value {
            jinja::fail("template raised: " +
                        (args.empty() ? std::string() : jinja::to_output(args[0])));
          }));
  for (const auto& [key, v] : context.items()) {
    env.set(key, from_json(v));
  }
  try {
    return jinja::run(program_->body, env);
  } catch (const jinja::template_error& e) {
    return error{describe(e)};
  } catch (const jinja::break_signal&) {
    return error{"{% break %} outside a loop"};
  } catch (const jinja::continue_signal&) {
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

// Hugging Face chat templates (the `chat_template` Jinja of tokenizer_config.json) rendered in C++:
// the subset of Jinja that the templates of Qwen2.5, Qwen3, Llama-3.1, DeepSeek-V3, Gemma-3 and
// Mistral use, with the semantics of `transformers`' apply_chat_template (trim_blocks and
// lstrip_blocks on, one trailing newline dropped) as the JS port Hugging Face maintains,
// @huggingface/jinja, implements them. The tests render generated conversations with both and
// compare the text.
//
// Supported: text, {{ }}, {% %}, {# #} with '-' whitespace control; if / elif / else, for (tuple
// targets, `for x in xs if cond`, else, loop.index/index0/revindex/revindex0/first/last/length/
// previtem/nextitem), break, continue, set (names, tuples, namespace attributes, set blocks);
// literals (strings, integers, floats, lists, tuples, dicts), attribute / subscript / slice
// access, calls, `a if b else c`, and / or / not, in / not in, comparisons, + - * / // % ** ~;
// the filters safe, tojson (indent, ensure_ascii, sort_keys, separators), length, list, first,
// last, reverse, sort, join, string, unique, trim, upper, lower, title, capitalize, indent, int,
// float, abs, bool, items, default, selectattr, rejectattr, map(attribute=...), replace,
// dictsort; the tests defined, undefined, none, string, number, integer, boolean, true, false,
// mapping, iterable, sequence, callable, odd, even, lower, upper, equalto, eq; string methods
// upper, lower, strip, lstrip, rstrip, title, capitalize, startswith, endswith, split, replace;
// dict methods get, items, keys, values, dictsort; the globals namespace(), raise_exception(),
// range(), true / false / none (and True / False / None).
//
// Anything else (macros, call blocks, filter blocks, other filters and tests) is refused when the
// template is parsed, with the template's line and column. Where the JS port departs from Python's
// Jinja, which `transformers` runs, we follow Python: strip / lstrip / rstrip take their optional
// `chars` argument (the JS port ignores it and strips all whitespace), and selectattr /
// rejectattr apply their test to items that lack the attribute (the JS port drops them, so
// `selectattr("tool_calls", "undefined")` selects nothing there).
//
// The room's inside: hf_renderer (policy/chat/chat.hpp) renders with it, and the room's tests
// test it; nothing outside policy/chat includes it.
//
// Pure and thread-safe: a parsed template is immutable and may be rendered from many threads.
#pragma once

#include "common/result.hpp"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace leap::policy {

namespace detail {
struct template_program;
}  // namespace detail

class chat_template {
 public:
  // Parses `source`. Errors: a syntax error or an unsupported construct, as
  // "line L, column C: what" (1-based, columns in characters of the original source).
  [[nodiscard]] static result<chat_template> parse(const std::string& source);

  // Renders with the variables of `context` (a JSON object: messages, tools, add_generation_prompt,
  // bos_token, eos_token, and any extra ones such as enable_thinking). Object keys keep their
  // order. Errors: raise_exception() called by the template ("template raised: MESSAGE"), or an
  // operation the values do not allow (e.g. `'x' in none`), each with its line and column.
  [[nodiscard]] result<std::string> render(const nlohmann::ordered_json& context) const;

 private:
  explicit chat_template(std::shared_ptr<const detail::template_program> program);
  std::shared_ptr<const detail::template_program> program_;
};

// A model folder's chat template and special-token texts, found as transformers finds them.
struct chat_template_source {
  std::string source;     // the Jinja text
  std::string file;       // where it was read from
  std::string bos_token;  // tokenizer_config.json's bos_token text; empty when it has none
  std::string eos_token;  // likewise eos_token
};

// Reads `<dir>/chat_template.jinja` if it exists (transformers' separate file, which wins), else
// tokenizer_config.json's "chat_template": a string, or a list of {"name", "template"} from which
// `name` is taken ("" picks "tool_use" when `with_tools` and it exists, else "default"). bos_token
// and eos_token come from tokenizer_config.json (a string or an {"content": ...} object).
// Errors name the file and key: no template at all, malformed JSON, a named template missing.
[[nodiscard]] result<chat_template_source> read_chat_template(const std::string& dir,
                                                              const std::string& name = "",
                                                              bool with_tools = false);

// The variables `transformers`' apply_chat_template passes: messages, tools (null when there are
// none), add_generation_prompt, bos_token, eos_token, then each key of `extra` (e.g.
// {"enable_thinking": false}), which may override those.
[[nodiscard]] nlohmann::ordered_json chat_context(const nlohmann::ordered_json& messages,
                                                  bool add_generation_prompt,
                                                  const std::string& bos_token,
                                                  const std::string& eos_token,
                                                  const nlohmann::ordered_json& tools = nullptr,
                                                  const nlohmann::ordered_json& extra = nullptr);

// The delta rule of multi-turn use: feedback is appended after the ids already sent, so rendering
// must only ever append. For `messages` ending with an assistant turn and a following user
// message `feedback`, checks that
//   1. render(messages[:-1], generation prompt) is a prefix of render(messages) (the assistant
//      turn is the generation prompt followed by what the model wrote), and
//   2. render(messages) is a prefix of render(messages + [feedback]), with and without the
//      generation prompt (appending the feedback rewrites nothing).
// `context` holds the other variables (bos_token, eos_token, tools, extras; its messages and
// add_generation_prompt are replaced). Errors: the check that fails and where the renderings part
// ("... differs at character N: 'old' vs 'new'"), or a rendering error.
[[nodiscard]] status check_delta_rule(const chat_template& tmpl,
                                      const nlohmann::ordered_json& messages,
                                      const nlohmann::ordered_json& feedback,
                                      const nlohmann::ordered_json& context);

// Whether `tmpl` may be used for multi-turn rollouts: check_delta_rule on a fixed set of probe
// conversations (with and without a system message; one and two earlier turns; plain answers and
// answers that carry a <think> block), with `context`'s tokens and extras. Errors: the template is
// refused for multi-turn use, saying which probe broke the rule and how.
[[nodiscard]] status check_multi_turn(const chat_template& tmpl,
                                      const nlohmann::ordered_json& context);

}  // namespace leap::policy

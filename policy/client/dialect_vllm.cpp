// vLLM's dialect: POST /v1/completions with the prompt as token ids (OpenAI's completions API with
// vLLM's extensions return_token_ids and request_id). Shapes: detail/client_protocol.hpp.
#include "policy/client/detail/dialect.hpp"
#include "policy/client/detail/dialect_parts.hpp"

#include <nlohmann/json.hpp>

namespace leap::policy {

namespace {

using json = nlohmann::json;

constexpr std::string_view no_token_ids =
    ": no 'token_ids'; the server ignored return_token_ids (use a vLLM that supports it, or the "
    "sglang flavour)";

class vllm_completions final : public wire_dialect {
 public:
  wire_flavour flavour() const override { return wire_flavour::vllm; }

  std::string_view generate_route() const override { return "/v1/completions"; }

  void write_generate_body(std::string& out, std::string_view model,
                           std::span<const token_id> prompt, std::span<const token_id> continuation,
                           const sampling_config& sampling, int max_tokens,
                           std::string_view wire_id, bool stream) const override {
    out += '{';
    if (!model.empty()) {
      out += "\"model\":";
      put_string(out, model);
      out += ',';
    }
    out += "\"prompt\":";
    put_ids(out, prompt, continuation);
    out += ',';
    put_sampling(out, sampling, {"max_tokens", "seed"}, max_tokens);
    out += ",\"logprobs\":0,\"return_token_ids\":true,\"stream\":";
    out += stream ? "true" : "false";
    out += ",\"request_id\":";
    put_string(out, wire_id);
    out += '}';
  }

  std::optional<parsed_choices> parse_body_fast(std::string_view body,
                                                const std::optional<std::string>& header_version,
                                                std::span<const token_id> prompt) const override;

  parsed_choices parse_body(const json& root, const std::optional<std::string>& header_version,
                            std::span<const token_id> prompt) const override;

  bool on_stream_event(stream_state& state, const json& root) const override;

  result<std::string> tokenize_body(std::string_view model,
                                    const std::vector<chat_message>& messages,
                                    bool add_generation_prompt) const override {
    json body = tokenize_messages(model, messages);
    body["add_generation_prompt"] = add_generation_prompt;
    body["add_special_tokens"] = false;
    return body.dump();
  }
};

parsed_choices vllm_completions::parse_body(const json& root,
                                            const std::optional<std::string>& header_version,
                                            std::span<const token_id> prompt) const {
  if (!root.is_object()) {
    return schema_error("vLLM response: expected a JSON object");
  }
  auto choices_it = root.find("choices");
  if (choices_it == root.end() || !choices_it->is_array() || choices_it->empty()) {
    return schema_error("vLLM response: 'choices' missing or empty");
  }
  std::optional<std::string> version = header_version;
  if (auto it = root.find("weight_version"); it != root.end()) {
    if (auto v = version_string(*it)) {
      version = v;
    }
  }
  parsed_choices out;
  out.choices.resize(choices_it->size());
  std::vector<bool> seen(choices_it->size(), false);
  for (std::size_t i = 0; i < choices_it->size(); ++i) {
    const json& c = (*choices_it)[i];
    const std::string where = "vLLM response: choices[" + std::to_string(i) + "]";
    std::size_t slot = i;
    if (auto it = c.find("index"); it != c.end() && it->is_number_integer()) {
      auto index = it->get<long long>();
      if (index < 0 || static_cast<std::size_t>(index) >= out.choices.size() || seen[index]) {
        return schema_error(where + ": index " + std::to_string(index) +
                            " out of range or repeated");
      }
      slot = static_cast<std::size_t>(index);
    }
    seen[slot] = true;
    generated_turn& turn = out.choices[slot];
    auto ids_it = c.find("token_ids");
    if (ids_it == c.end() || ids_it->is_null()) {
      return schema_error(where + std::string(no_token_ids));
    }
    std::string why;
    switch (read_ids(*ids_it, turn.ids, why)) {
      case parse_problem::none:
        break;
      case parse_problem::invalid:
        return {parse_problem::invalid, where + ": " + why, {}};
      case parse_problem::malformed:
      case parse_problem::schema:
        return schema_error(where + ": 'token_ids' is not a list of ids");
    }
    auto lp_it = c.find("logprobs");
    if (lp_it != c.end() && lp_it->is_object()) {
      auto tl = lp_it->find("token_logprobs");
      if (tl == lp_it->end() || !tl->is_array()) {
        return schema_error(where + ": 'logprobs.token_logprobs' missing");
      }
      turn.logprobs.reserve(tl->size());
      for (const auto& v : *tl) {
        if (!v.is_number()) {
          return schema_error(where + ": a token log-prob is not a number");
        }
        turn.logprobs.push_back(v.get<float>());
      }
    } else if (!turn.ids.empty()) {
      return schema_error(where + ": no 'logprobs'; the server ignored logprobs: 0");
    }
    if (turn.logprobs.size() != turn.ids.size()) {
      return schema_error(where + ": " + std::to_string(turn.ids.size()) + " token ids but " +
                          std::to_string(turn.logprobs.size()) + " log-probs");
    }
    if (auto it = c.find("prompt_token_ids"); !prompt.empty() && it != c.end() && it->is_array()) {
      if (!same_ids(*it, prompt)) {
        return schema_error(where +
                            ": 'prompt_token_ids' differ from the ids sent; the server "
                            "re-tokenised the prompt");
      }
    }
    if (auto it = c.find("finish_reason"); it != c.end() && it->is_string()) {
      turn.finish = finish_from_string(it->get_ref<const std::string&>());
    } else {
      turn.finish = finish_reason::other;
    }
    if (auto it = c.find("text"); it != c.end() && it->is_string()) {
      turn.text = it->get<std::string>();
    }
    turn.weight_version = version;
  }
  return out;
}

std::optional<parsed_choices> vllm_completions::parse_body_fast(
    std::string_view body, const std::optional<std::string>& header_version,
    std::span<const token_id> prompt) const {
  json_cursor c(body);
  std::optional<std::string> version;
  std::vector<generated_turn> turns;
  std::vector<std::optional<long long>> indexes;
  bool seen_choices = false;
  bool seen_version = false;
  auto choice = [&]() {
    generated_turn turn;
    turn.finish = finish_reason::other;
    std::optional<long long> index;
    bool seen_ids = false, logprobs_object = false, seen_token_logprobs = false;
    std::uint32_t seen = 0;  // each key once: duplicates go to the DOM parser
    auto once = [&](std::uint32_t bit) {
      if ((seen & bit) != 0) {
        return false;
      }
      seen |= bit;
      return true;
    };
    bool ok = c.object([&](std::string_view key) {
      if (key == "index") {
        if (!once(1)) {
          return false;
        }
        if (c.at('-') || (c.p < c.e && *c.p >= '0' && *c.p <= '9')) {
          long long v;
          if (!c.integer(v)) {
            return false;
          }
          index = v;
          return true;
        }
        return c.skip();
      }
      if (key == "text") {
        if (!once(2)) {
          return false;
        }
        return c.at('"') ? c.text(turn.text) : c.skip();
      }
      if (key == "token_ids") {
        if (!once(4)) {
          return false;
        }
        seen_ids = true;
        return c.ids(turn.ids);
      }
      if (key == "logprobs") {
        if (!once(8)) {
          return false;
        }
        if (c.at('n')) {
          return c.literal("null");
        }
        logprobs_object = true;
        return c.object([&](std::string_view k) {
          if (k != "token_logprobs") {
            return c.skip();
          }
          if (seen_token_logprobs) {
            return false;
          }
          seen_token_logprobs = true;
          return c.array([&] {
            double v;
            if (!c.number(v)) {
              return false;
            }
            turn.logprobs.push_back(static_cast<float>(v));
            return true;
          });
        });
      }
      if (key == "finish_reason") {
        if (!once(16)) {
          return false;
        }
        return read_finish(c, turn.finish);
      }
      if (key == "prompt_token_ids") {
        if (!once(32)) {
          return false;
        }
        if (prompt.empty() || !c.at('[')) {
          return c.skip();
        }
        std::size_t k = 0;
        bool same = true;
        bool parsed = c.array([&] {
          long long v;
          if (!c.integer(v)) {
            return false;
          }
          same = same && k < prompt.size() && v == prompt[k];
          ++k;
          return true;
        });
        return parsed && same && k == prompt.size();
      }
      return c.skip();
    });
    if (!ok || !seen_ids) {
      return false;
    }
    if (logprobs_object ? !seen_token_logprobs : !turn.ids.empty()) {
      return false;
    }
    if (turn.logprobs.size() != turn.ids.size()) {
      return false;
    }
    indexes.push_back(index);
    turns.push_back(std::move(turn));
    return true;
  };
  bool ok = c.object([&](std::string_view key) {
    if (key == "choices") {
      if (seen_choices) {
        return false;
      }
      seen_choices = true;
      return c.array(choice);
    }
    if (key == "weight_version") {
      if (seen_version) {
        return false;
      }
      seen_version = true;
      return c.string_or_integer(version);
    }
    return c.skip();
  });
  if (!ok || !c.at_end() || turns.empty()) {
    return std::nullopt;
  }
  parsed_choices out;
  out.choices.resize(turns.size());
  std::vector<bool> placed(turns.size(), false);
  for (std::size_t i = 0; i < turns.size(); ++i) {
    std::size_t slot = i;
    if (indexes[i]) {
      const long long index = *indexes[i];
      if (index < 0 || static_cast<std::size_t>(index) >= turns.size() || placed[index]) {
        return std::nullopt;
      }
      slot = static_cast<std::size_t>(index);
    } else if (placed[slot]) {
      return std::nullopt;
    }
    placed[slot] = true;
    out.choices[slot] = std::move(turns[i]);
    out.choices[slot].weight_version = version ? version : header_version;
  }
  return out;
}

// Each chunk carries only the new tokens of the choices it names.
bool vllm_completions::on_stream_event(stream_state& state, const json& root) const {
  const std::string where = "vLLM stream event " + std::to_string(state.events);
  auto choices_it = root.find("choices");
  if (choices_it == root.end() || !choices_it->is_array()) {
    return state.fail(parse_problem::schema, where + ": no 'choices' list");
  }
  if (auto it = root.find("weight_version"); it != root.end()) {
    if (auto v = version_string(*it)) {
      state.version = v;
    }
  }
  for (const json& c : *choices_it) {
    if (!c.is_object()) {
      return state.fail(parse_problem::schema, where + ": a choice is not an object");
    }
    const auto found = state.slot_of(c, where + ": choice index");
    if (!found) {
      return false;
    }
    const std::size_t slot = *found;
    generated_turn& turn = state.turns[slot];
    std::vector<token_id> ids;
    auto ids_it = c.find("token_ids");
    if (ids_it != c.end() && !ids_it->is_null()) {
      std::string why;
      const auto problem = read_ids(*ids_it, ids, why);
      if (problem == parse_problem::invalid) {
        return state.fail(parse_problem::invalid, where + ": " + why);
      }
      if (problem != parse_problem::none) {
        return state.fail(parse_problem::schema, where + ": 'token_ids' is not a list of ids");
      }
    }
    std::vector<float> logprobs;
    auto lp_it = c.find("logprobs");
    if (lp_it != c.end() && lp_it->is_object()) {
      auto tl = lp_it->find("token_logprobs");
      if (tl == lp_it->end() || !tl->is_array()) {
        return state.fail(parse_problem::schema, where + ": 'logprobs.token_logprobs' missing");
      }
      for (const auto& v : *tl) {
        if (!v.is_number()) {
          return state.fail(parse_problem::schema, where + ": a token log-prob is not a number");
        }
        logprobs.push_back(v.get<float>());
      }
    }
    std::string text;
    if (auto it = c.find("text"); it != c.end() && it->is_string()) {
      text = it->get<std::string>();
    }
    if ((ids_it == c.end() || ids_it->is_null()) && (!text.empty() || !logprobs.empty())) {
      return state.fail(parse_problem::schema, where + std::string(no_token_ids));
    }
    if (!ids.empty() && (lp_it == c.end() || !lp_it->is_object())) {
      return state.fail(parse_problem::schema,
                        where + ": no 'logprobs'; the server ignored logprobs: 0");
    }
    if (ids.size() != logprobs.size()) {
      return state.fail(parse_problem::schema, where + ": " + std::to_string(ids.size()) +
                                                   " token ids but " +
                                                   std::to_string(logprobs.size()) + " log-probs");
    }
    if (auto it = c.find("prompt_token_ids");
        !state.prompt.empty() && it != c.end() && it->is_array()) {
      if (!same_ids(*it, state.prompt)) {
        return state.fail(parse_problem::schema,
                          where +
                              ": 'prompt_token_ids' differ from the ids sent; the server "
                              "re-tokenised the prompt");
      }
    }
    if (state.finished[slot] && !ids.empty()) {
      return state.fail(parse_problem::schema, where + ": tokens for choice " +
                                                   std::to_string(slot) + " after its finish");
    }
    turn.ids.insert(turn.ids.end(), ids.begin(), ids.end());
    turn.logprobs.insert(turn.logprobs.end(), logprobs.begin(), logprobs.end());
    turn.text += text;
    if (auto it = c.find("finish_reason"); it != c.end() && it->is_string()) {
      turn.finish = finish_from_string(it->get_ref<const std::string&>());
      state.finished[slot] = true;
    }
  }
  return true;
}

}  // namespace

const wire_dialect& vllm_dialect() {
  static const vllm_completions dialect;
  return dialect;
}

}  // namespace leap::policy

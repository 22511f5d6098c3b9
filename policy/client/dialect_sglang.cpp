// SGLang's dialect: POST /generate with input_ids, return_logprob and sampling_params (SGLang's
// native API). Shapes: detail/client_protocol.hpp.
#include "policy/client/detail/dialect.hpp"
#include "policy/client/detail/dialect_parts.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace leap::policy {

namespace {

using json = nlohmann::json;

// One /generate object (a whole body, an element of an n > 1 body, or a stream event) into `turn`.
// SGLang's logprob triples are authoritative for the sampled ids; output_ids is read only when they
// are missing, which is an error anyway.
parsed_choices parse_item(const json& item, std::optional<std::string> header_version,
                          const std::string& where, generated_turn& turn) {
  if (!item.is_object()) {
    return schema_error(where + ": expected a JSON object");
  }
  auto meta_it = item.find("meta_info");
  if (meta_it == item.end() || !meta_it->is_object()) {
    return schema_error(where + ": no 'meta_info'");
  }
  const json& meta = *meta_it;
  auto lp_it = meta.find("output_token_logprobs");
  if (lp_it != meta.end() && lp_it->is_array()) {
    turn.ids.reserve(lp_it->size());
    turn.logprobs.reserve(lp_it->size());
    for (const auto& triple : *lp_it) {
      if (!triple.is_array() || triple.size() < 2 || !triple[0].is_number() ||
          !triple[1].is_number_integer()) {
        return schema_error(where +
                            ": 'meta_info.output_token_logprobs' entries must be "
                            "[logprob, token_id, text]");
      }
      token_id id = 0;
      if (read_id(triple[1], id) != parse_problem::none) {
        return {parse_problem::invalid, where + ": " + bad_id_message(triple[1]), {}};
      }
      turn.logprobs.push_back(triple[0].get<float>());
      turn.ids.push_back(id);
    }
  } else {
    auto ids_it = item.find("output_ids");
    std::string why;
    if (ids_it != item.end()) {
      const auto problem = read_ids(*ids_it, turn.ids, why);
      if (problem == parse_problem::invalid) {
        return {parse_problem::invalid, where + ": " + why, {}};
      }
      if (problem != parse_problem::none) {
        return schema_error(where + ": 'output_ids' is not a list of ids");
      }
    }
    if (!turn.ids.empty()) {
      return schema_error(where +
                          ": no 'meta_info.output_token_logprobs'; the server ignored "
                          "return_logprob");
    }
  }
  if (auto it = meta.find("finish_reason"); it != meta.end()) {
    if (it->is_object()) {
      auto type = it->find("type");
      turn.finish = type != it->end() && type->is_string()
                        ? finish_from_string(type->get_ref<const std::string&>())
                        : finish_reason::other;
    } else if (it->is_string()) {
      turn.finish = finish_from_string(it->get_ref<const std::string&>());
    } else {
      turn.finish = finish_reason::other;
    }
  } else {
    turn.finish = finish_reason::other;
  }
  if (auto it = item.find("text"); it != item.end() && it->is_string()) {
    turn.text = it->get<std::string>();
  }
  turn.weight_version = std::move(header_version);
  if (auto it = meta.find("weight_version"); it != meta.end()) {
    if (auto v = version_string(*it)) {
      turn.weight_version = v;
    }
  }
  if (auto it = item.find("weight_version"); it != item.end()) {
    if (auto v = version_string(*it)) {
      turn.weight_version = v;
    }
  }
  return {};
}

// The fast path's parse_item: false for anything it does not take.
bool fast_item(json_cursor& c, const std::optional<std::string>& header_version,
               generated_turn& turn) {
  std::optional<std::string> meta_version, item_version;
  bool seen_meta = false, seen_triples = false, seen_text = false, seen_item_version = false;
  turn.finish = finish_reason::other;
  bool ok = c.object([&](std::string_view key) {
    if (key == "text") {
      if (seen_text) {
        return false;
      }
      seen_text = true;
      return c.at('"') ? c.text(turn.text) : c.skip();
    }
    if (key == "weight_version") {
      if (seen_item_version) {
        return false;
      }
      seen_item_version = true;
      return c.string_or_integer(item_version);
    }
    if (key != "meta_info") {
      return c.skip();
    }
    if (seen_meta) {
      return false;
    }
    seen_meta = true;
    bool seen_finish = false, seen_version = false;
    return c.object([&](std::string_view k) {
      if (k == "output_token_logprobs") {
        if (seen_triples) {
          return false;
        }
        seen_triples = true;
        return c.array([&] {
          double lp;
          long long id;
          if (!c.eat('[') || !c.number(lp) || !c.eat(',') || !c.integer(id) || id < 0 ||
              id > INT32_MAX) {
            return false;
          }
          while (c.eat(',')) {
            if (!c.skip()) {
              return false;
            }
          }
          if (!c.eat(']')) {
            return false;
          }
          turn.logprobs.push_back(static_cast<float>(lp));
          turn.ids.push_back(static_cast<token_id>(id));
          return true;
        });
      }
      if (k == "finish_reason") {
        if (seen_finish) {
          return false;
        }
        seen_finish = true;
        if (!c.at('{')) {
          return read_finish(c, turn.finish);
        }
        bool seen_type = false;
        return c.object([&](std::string_view f) {
          if (f != "type") {
            return c.skip();
          }
          if (seen_type) {
            return false;
          }
          seen_type = true;
          return read_finish(c, turn.finish);
        });
      }
      if (k == "weight_version") {
        if (seen_version) {
          return false;
        }
        seen_version = true;
        return c.string_or_integer(meta_version);
      }
      return c.skip();
    });
  });
  if (!ok || !seen_meta || !seen_triples) {
    return false;
  }
  turn.weight_version = item_version ? item_version : meta_version ? meta_version : header_version;
  return true;
}

class sglang_generate final : public wire_dialect {
 public:
  wire_flavour flavour() const override { return wire_flavour::sglang; }

  std::string_view generate_route() const override { return "/generate"; }

  void write_generate_body(std::string& out, std::string_view /*model: SGLang serves one*/,
                           std::span<const token_id> prompt, std::span<const token_id> continuation,
                           const sampling_config& sampling, int max_tokens,
                           std::string_view wire_id, bool stream) const override {
    out += "{\"input_ids\":";
    put_ids(out, prompt, continuation);
    out += ",\"sampling_params\":{";
    put_sampling(out, sampling, {"max_new_tokens", "sampling_seed"}, max_tokens);
    out += "},\"return_logprob\":true,\"stream\":";
    out += stream ? "true" : "false";
    out += ",\"rid\":";
    put_string(out, wire_id);
    out += '}';
  }

  // SGLang echoes no prompt ids: `prompt` is not checked.
  std::optional<parsed_choices> parse_body_fast(
      std::string_view body, const std::optional<std::string>& header_version,
      std::span<const token_id> /*prompt*/) const override {
    json_cursor c(body);
    parsed_choices out;
    bool ok;
    if (c.at('[')) {
      ok = c.array([&] {
        out.choices.emplace_back();
        return fast_item(c, header_version, out.choices.back());
      });
    } else {
      out.choices.emplace_back();
      ok = fast_item(c, header_version, out.choices.back());
    }
    if (!ok || !c.at_end() || out.choices.empty()) {
      return std::nullopt;
    }
    return out;
  }

  // One object, or an array of them when n > 1.
  parsed_choices parse_body(const json& root, const std::optional<std::string>& header_version,
                            std::span<const token_id> /*prompt*/) const override {
    parsed_choices out;
    if (root.is_array()) {
      if (root.empty()) {
        return schema_error("SGLang response: empty list");
      }
      out.choices.resize(root.size());
      for (std::size_t i = 0; i < root.size(); ++i) {
        auto r = parse_item(root[i], header_version, "SGLang response[" + std::to_string(i) + "]",
                            out.choices[i]);
        if (r.problem != parse_problem::none) {
          return r;
        }
      }
      return out;
    }
    out.choices.resize(1);
    auto r = parse_item(root, header_version, "SGLang response", out.choices[0]);
    if (r.problem != parse_problem::none) {
      return r;
    }
    return out;
  }

  bool on_stream_event(stream_state& state, const json& root) const override;

  // SGLang's /tokenize takes exactly one of "prompt" and "messages", the latter read as a
  // chat-completion request, which always renders the generation prompt.
  result<std::string> tokenize_body(std::string_view model,
                                    const std::vector<chat_message>& messages,
                                    bool add_generation_prompt) const override {
    if (!add_generation_prompt) {
      return error{
          "SGLang's /tokenize always renders the generation prompt (its chat form has no "
          "add_generation_prompt); render a conversation without it through a local template"};
    }
    return tokenize_messages(model, messages).dump();
  }
};

// Each event is one /generate object ("index" added when n > 1), cumulative by default or
// incremental with --incremental-streaming-output (client_protocol.hpp says how they are told
// apart).
bool sglang_generate::on_stream_event(stream_state& state, const json& root) const {
  const std::string where = "SGLang stream event " + std::to_string(state.events);
  const auto found = state.slot_of(root, where + ": index");
  if (!found) {
    return false;
  }
  const std::size_t slot = *found;
  // The event read as a whole /generate object: the same checks and fields as a full body.
  generated_turn piece;
  auto parsed = parse_item(root, std::nullopt, where, piece);
  if (parsed.problem != parse_problem::none) {
    return state.fail(parsed.problem, parsed.message);
  }
  if (piece.weight_version) {
    state.version = piece.weight_version;
  }
  generated_turn& turn = state.turns[slot];
  if (state.finished[slot]) {
    if (piece.ids.size() > turn.ids.size() ||
        (piece.ids.size() < turn.ids.size() && !piece.ids.empty())) {
      return state.fail(parse_problem::schema, where + ": tokens for choice " +
                                                   std::to_string(slot) + " after its finish");
    }
    return true;
  }
  const std::size_t have = turn.ids.size();
  const std::size_t got = piece.ids.size();
  bool cumulative;
  std::optional<long long> total;
  if (auto meta = root.find("meta_info"); meta != root.end() && meta->is_object()) {
    if (auto ct = meta->find("completion_tokens"); ct != meta->end() && ct->is_number_integer()) {
      total = ct->get<long long>();
    }
  }
  const bool extends =
      got >= have && std::equal(turn.ids.begin(), turn.ids.end(), piece.ids.begin());
  if (total && static_cast<std::size_t>(*total) == got && (have == 0 || extends)) {
    cumulative = true;
  } else if (total && static_cast<std::size_t>(*total) == have + got) {
    cumulative = false;
  } else if (total) {
    return state.fail(
        parse_problem::schema,
        where + ": " + std::to_string(got) + " output tokens, " + std::to_string(have) +
            " received before, but meta_info.completion_tokens is " + std::to_string(*total));
  } else {
    cumulative = extends;
  }
  if (cumulative) {
    turn.ids = std::move(piece.ids);
    turn.logprobs = std::move(piece.logprobs);
    turn.text = std::move(piece.text);
  } else {
    turn.ids.insert(turn.ids.end(), piece.ids.begin(), piece.ids.end());
    turn.logprobs.insert(turn.logprobs.end(), piece.logprobs.begin(), piece.logprobs.end());
    turn.text += piece.text;
  }
  // finish_reason is null until the last event; parse_item reads null as `other`.
  if (auto meta = root.find("meta_info"); meta != root.end()) {
    if (auto fr = meta->find("finish_reason"); fr != meta->end() && !fr->is_null()) {
      turn.finish = piece.finish;
      state.finished[slot] = true;
    }
  }
  return true;
}

}  // namespace

const wire_dialect& sglang_dialect() {
  static const sglang_generate dialect;
  return dialect;
}

}  // namespace leap::policy

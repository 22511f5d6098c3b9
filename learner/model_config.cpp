#include "learner/model_config.hpp"

#include "common/durable_file.hpp"
#include "learner/detail/files.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <numbers>
#include <random>
#include <sstream>
#include <unistd.h>

namespace leap::learner {
namespace {

using json = nlohmann::json;

template <class T>
result<T> get(const json& doc, const std::string& key, const T& fallback, bool required) {
  auto it = doc.find(key);
  if (it == doc.end() || it->is_null()) {
    if (required) {
      return error{"'" + key + "' is required"};
    }
    return fallback;
  }
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return error{"'" + key + "' has the wrong type (got " + std::string(it->type_name()) + ": " +
                 it->dump() + ")"};
  }
}

// Reads an integer field that must be positive when present; an absent optional key leaves `out`.
status read_positive(const json& doc, const std::string& key, std::int64_t& out, bool required) {
  auto it = doc.find(key);
  if (!required && (it == doc.end() || it->is_null())) {
    return ok_status();
  }
  auto v = get<std::int64_t>(doc, key, out, required);
  if (!v) {
    return v.err();
  }
  if (*v <= 0) {
    return error{"'" + key + "' must be positive (got " + std::to_string(*v) + ")"};
  }
  out = *v;
  return ok_status();
}

}  // namespace

result<model_config> parse_model_config(const std::string& json_text) {
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::exception& e) {
    return error{std::string("not valid JSON: ") + e.what()};
  }
  if (!doc.is_object()) {
    return error{"expected a JSON object"};
  }
  model_config c;
  c.source_json = json_text;

  auto type = get<std::string>(doc, "model_type", "", true);
  if (!type) {
    return type.err();
  }
  c.model_type = *type;
  if (c.model_type != "llama" && c.model_type != "qwen2" && c.model_type != "qwen3" &&
      c.model_type != "mistral") {
    return error{"'model_type' is '" + c.model_type +
                 "'; supported: llama, qwen2, qwen3, mistral (the Llama / Qwen family)"};
  }
  for (const auto& [key, field] :
       {std::pair<const char*, std::int64_t*>{"vocab_size", &c.vocab_size},
        {"hidden_size", &c.hidden_size},
        {"intermediate_size", &c.intermediate_size},
        {"num_hidden_layers", &c.num_hidden_layers},
        {"num_attention_heads", &c.num_attention_heads}}) {
    if (auto s = read_positive(doc, key, *field, true); !s) {
      return s.err();
    }
  }
  c.num_key_value_heads = c.num_attention_heads;
  if (auto s = read_positive(doc, "num_key_value_heads", c.num_key_value_heads, false); !s) {
    return s.err();
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return error{"'num_attention_heads' (" + std::to_string(c.num_attention_heads) +
                 ") must be a multiple of 'num_key_value_heads' (" +
                 std::to_string(c.num_key_value_heads) + ")"};
  }
  c.head_dim = 0;
  if (auto s = read_positive(doc, "head_dim", c.head_dim, false); !s) {
    return s.err();
  }
  if (c.head_dim == 0) {
    if (c.hidden_size % c.num_attention_heads != 0) {
      return error{"'hidden_size' (" + std::to_string(c.hidden_size) +
                   ") must be a multiple of 'num_attention_heads' when 'head_dim' is absent"};
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) {
    return error{"'head_dim' must be even for rotary embeddings (got " +
                 std::to_string(c.head_dim) + ")"};
  }
  if (auto s = read_positive(doc, "max_position_embeddings", c.max_position_embeddings, false);
      !s) {
    return s.err();
  }

  auto eps = get<double>(doc, "rms_norm_eps", c.rms_norm_eps, false);
  auto theta = get<double>(doc, "rope_theta", c.rope_theta, false);
  auto tie = get<bool>(doc, "tie_word_embeddings", false, false);
  auto act = get<std::string>(doc, "hidden_act", "silu", false);
  auto attention_bias = get<bool>(doc, "attention_bias", false, false);
  auto mlp_bias = get<bool>(doc, "mlp_bias", false, false);
  // transformers >= 4.56 writes "dtype" where older versions wrote "torch_dtype".
  auto dtype = get<std::string>(doc, doc.contains("torch_dtype") ? "torch_dtype" : "dtype",
                                "float32", false);
  auto bos = get<std::int64_t>(doc, "bos_token_id", -1, false);
  if (!eps) {
    return eps.err();
  }
  if (!theta) {
    return theta.err();
  }
  if (!tie) {
    return tie.err();
  }
  if (!act) {
    return act.err();
  }
  if (!attention_bias) {
    return attention_bias.err();
  }
  if (!mlp_bias) {
    return mlp_bias.err();
  }
  if (!dtype) {
    return dtype.err();
  }
  if (!bos) {
    return bos.err();
  }
  if (*eps <= 0) {
    return error{"'rms_norm_eps' must be positive"};
  }
  if (*theta <= 0) {
    return error{"'rope_theta' must be positive"};
  }
  if (*act != "silu") {
    return error{"'hidden_act' is '" + *act + "'; only 'silu' (SwiGLU) is supported"};
  }
  c.rms_norm_eps = *eps;
  c.rope_theta = *theta;
  c.tie_word_embeddings = *tie;
  c.torch_dtype = *dtype;
  c.bos_token_id = *bos;
  if (c.model_type == "qwen2") {
    c.qkv_bias = true;  // Qwen2's attention always has q/k/v biases and no o bias
  } else {
    // Llama, Mistral and Qwen3: `attention_bias` puts a bias on all four projections.
    c.qkv_bias = *attention_bias;
    c.o_bias = *attention_bias;
  }
  c.qk_norm = c.model_type == "qwen3";
  c.mlp_bias = *mlp_bias;

  // Sliding-window attention changes results only past the window; rather than be silently wrong
  // there, refuse configs that switch it on.
  auto use_sw = get<bool>(doc, "use_sliding_window", c.model_type == "mistral", false);
  if (!use_sw) {
    return use_sw.err();
  }
  if (*use_sw && doc.contains("sliding_window") && !doc["sliding_window"].is_null()) {
    return error{
        "'sliding_window' attention is not supported (set it to null or use_sliding_window "
        "to false)"};
  }

  if (auto it = doc.find("layer_types"); it != doc.end() && it->is_array()) {
    for (const auto& t : *it) {
      if (!t.is_string() || t.get<std::string>() != "full_attention") {
        return error{"'layer_types' holds " + t.dump() +
                     "; only full_attention layers are supported"};
      }
    }
  }
  if (auto it = doc.find("eos_token_id"); it != doc.end() && !it->is_null()) {
    if (it->is_number_integer()) {
      c.eos_token_ids = {it->get<std::int64_t>()};
    } else if (it->is_array()) {
      for (const auto& v : *it) {
        if (!v.is_number_integer()) {
          return error{"'eos_token_id' must be a number or a list of numbers"};
        }
        c.eos_token_ids.push_back(v.get<std::int64_t>());
      }
    } else {
      return error{"'eos_token_id' must be a number or a list of numbers"};
    }
  }

  // transformers 5 moves rope_theta and the scaling into "rope_parameters" (same keys).
  const char* rope_key = doc.contains("rope_parameters") && !doc["rope_parameters"].is_null()
                             ? "rope_parameters"
                             : "rope_scaling";
  if (auto it = doc.find(rope_key); it != doc.end() && !it->is_null()) {
    if (!it->is_object()) {
      return error{"'" + std::string(rope_key) + "' must be an object or null"};
    }
    const json& rs = *it;
    if (rs.contains("rope_theta")) {
      auto t = get<double>(rs, "rope_theta", c.rope_theta, true);
      if (!t || *t <= 0) {
        return error{"'" + std::string(rope_key) + "': 'rope_theta' must be a positive number"};
      }
      c.rope_theta = *t;
    }
    std::string rtype = rs.value("rope_type", rs.value("type", std::string("default")));
    c.rope_type = rtype;
    auto factor = get<double>(rs, "factor", 1.0, rtype != "default");
    if (!factor) {
      return factor.err().wrap("'" + std::string(rope_key) + "'");
    }
    c.rope_factor = *factor;
    if (rtype == "llama3") {
      auto low = get<double>(rs, "low_freq_factor", 1.0, true);
      auto high = get<double>(rs, "high_freq_factor", 4.0, true);
      auto orig = get<std::int64_t>(rs, "original_max_position_embeddings", 8192, true);
      if (!low || !high || !orig) {
        return (!low    ? low.err()
                : !high ? high.err()
                        : orig.err())
            .wrap("'" + std::string(rope_key) + "'");
      }
      if (*high <= *low) {
        return error{"'" + std::string(rope_key) +
                     "': 'high_freq_factor' must exceed 'low_freq_factor'"};
      }
      c.rope_low_freq_factor = *low;
      c.rope_high_freq_factor = *high;
      c.rope_original_max_position = *orig;
    } else if (rtype != "default" && rtype != "linear") {
      return error{"'" + std::string(rope_key) + "' type '" + rtype +
                   "' is not supported (default, linear, llama3)"};
    }
    if (c.rope_factor <= 0) {
      return error{"'" + std::string(rope_key) + "': 'factor' must be positive"};
    }
  }
  return c;
}

result<model_config> read_model_config(const std::string& dir) {
  const auto path = detail::join(dir, "config.json");
  std::ifstream in(path);
  if (!in) {
    return error{"cannot open '" + path + "'"};
  }
  std::stringstream text;
  text << in.rdbuf();
  auto c = parse_model_config(text.str());
  if (!c) {
    return c.err().wrap("'" + path + "'");
  }
  return c;
}

std::string to_json(const model_config& c) {
  json doc = json::object();
  if (!c.source_json.empty()) {
    try {
      doc = json::parse(c.source_json);
    } catch (const json::exception&) {
      doc = json::object();  // an unparsable source only loses its unknown keys
    }
  }
  doc["model_type"] = c.model_type;
  if (!doc.contains("architectures")) {
    doc["architectures"] = {c.model_type == "qwen2"     ? "Qwen2ForCausalLM"
                            : c.model_type == "qwen3"   ? "Qwen3ForCausalLM"
                            : c.model_type == "mistral" ? "MistralForCausalLM"
                                                        : "LlamaForCausalLM"};
  }
  doc["vocab_size"] = c.vocab_size;
  doc["hidden_size"] = c.hidden_size;
  doc["intermediate_size"] = c.intermediate_size;
  doc["num_hidden_layers"] = c.num_hidden_layers;
  doc["num_attention_heads"] = c.num_attention_heads;
  doc["num_key_value_heads"] = c.num_key_value_heads;
  if (doc.contains("head_dim") || c.qk_norm ||
      c.head_dim * c.num_attention_heads != c.hidden_size) {
    doc["head_dim"] = c.head_dim;
  }
  doc["rms_norm_eps"] = c.rms_norm_eps;
  doc["rope_theta"] = c.rope_theta;
  doc["max_position_embeddings"] = c.max_position_embeddings;
  doc["tie_word_embeddings"] = c.tie_word_embeddings;
  doc["hidden_act"] = "silu";
  doc[doc.contains("dtype") && !doc.contains("torch_dtype") ? "dtype" : "torch_dtype"] =
      c.torch_dtype;
  if (c.model_type != "qwen2") {
    doc["attention_bias"] = c.qkv_bias;
  }
  if (c.mlp_bias || doc.contains("mlp_bias")) {
    doc["mlp_bias"] = c.mlp_bias;
  }
  json rs = {{"rope_type", c.rope_type}};
  if (c.rope_type != "default") {
    rs["factor"] = c.rope_factor;
  }
  if (c.rope_type == "llama3") {
    rs["low_freq_factor"] = c.rope_low_freq_factor;
    rs["high_freq_factor"] = c.rope_high_freq_factor;
    rs["original_max_position_embeddings"] = c.rope_original_max_position;
  }
  if (doc.contains("rope_parameters") && !doc["rope_parameters"].is_null()) {
    // transformers 5's layout: theta and scaling together, as the source had them.
    rs["rope_theta"] = c.rope_theta;
    doc["rope_parameters"] = rs;
  } else if (c.rope_type != "default") {
    doc["rope_scaling"] = rs;
  } else if (doc.contains("rope_scaling")) {
    doc["rope_scaling"] = nullptr;
  }
  if (c.eos_token_ids.size() == 1) {
    doc["eos_token_id"] = c.eos_token_ids.front();
  } else if (!c.eos_token_ids.empty()) {
    doc["eos_token_id"] = c.eos_token_ids;
  }
  if (c.bos_token_id >= 0) {
    doc["bos_token_id"] = c.bos_token_id;
  }
  return doc.dump(2) + "\n";
}

std::vector<std::pair<std::string, std::vector<std::int64_t>>> parameter_shapes(
    const model_config& c) {
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> shapes;
  const std::int64_t q_out = c.num_attention_heads * c.head_dim;
  const std::int64_t kv_out = c.num_key_value_heads * c.head_dim;
  shapes.push_back({"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}});
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    shapes.push_back({p + "input_layernorm.weight", {c.hidden_size}});
    const std::pair<const char*, std::int64_t> projections[] = {
        {"q_proj", q_out}, {"k_proj", kv_out}, {"v_proj", kv_out}};
    for (const auto& [name, out] : projections) {
      shapes.push_back({p + "self_attn." + name + ".weight", {out, c.hidden_size}});
      if (c.qkv_bias) {
        shapes.push_back({p + "self_attn." + name + ".bias", {out}});
      }
    }
    if (c.qk_norm) {
      shapes.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
      shapes.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
    }
    shapes.push_back({p + "self_attn.o_proj.weight", {c.hidden_size, q_out}});
    if (c.o_bias) {
      shapes.push_back({p + "self_attn.o_proj.bias", {c.hidden_size}});
    }
    shapes.push_back({p + "post_attention_layernorm.weight", {c.hidden_size}});
    shapes.push_back({p + "mlp.gate_proj.weight", {c.intermediate_size, c.hidden_size}});
    if (c.mlp_bias) {
      shapes.push_back({p + "mlp.gate_proj.bias", {c.intermediate_size}});
    }
    shapes.push_back({p + "mlp.up_proj.weight", {c.intermediate_size, c.hidden_size}});
    if (c.mlp_bias) {
      shapes.push_back({p + "mlp.up_proj.bias", {c.intermediate_size}});
    }
    shapes.push_back({p + "mlp.down_proj.weight", {c.hidden_size, c.intermediate_size}});
    if (c.mlp_bias) {
      shapes.push_back({p + "mlp.down_proj.bias", {c.hidden_size}});
    }
  }
  shapes.push_back({"model.norm.weight", {c.hidden_size}});
  if (!c.tie_word_embeddings) {
    shapes.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}});
  }
  return shapes;
}

tensor_map random_weights(const model_config& config, std::uint64_t seed, dtype type) {
  // Box-Muller on a fixed engine rather than std::normal_distribution, whose output differs
  // between standard libraries: the same seed gives the same model everywhere.
  std::mt19937_64 engine(seed);
  auto uniform = [&engine] { return (static_cast<double>(engine() >> 11) + 0.5) * 0x1.0p-53; };
  tensor_map weights;
  for (const auto& [name, shape] : parameter_shapes(config)) {
    std::int64_t n = 1;
    for (auto s : shape) {
      n *= s;
    }
    std::vector<double> values(static_cast<std::size_t>(n));
    if (name.ends_with("norm.weight")) {
      std::fill(values.begin(), values.end(), 1.0);
    } else if (name.ends_with(".bias")) {
      std::fill(values.begin(), values.end(), 0.0);
    } else {
      constexpr double std_dev = 0.02;
      for (std::size_t i = 0; i < values.size(); i += 2) {
        const double r = std::sqrt(-2.0 * std::log(uniform()));
        const double theta = 2.0 * std::numbers::pi * uniform();
        values[i] = std_dev * r * std::cos(theta);
        if (i + 1 < values.size()) {
          values[i + 1] = std_dev * r * std::sin(theta);
        }
      }
    }
    weights.emplace(name, make_float_tensor(type, shape, values));
  }
  return weights;
}

result<model_config> model_preset(const std::string& name) {
  // From each model's config.json on the Hugging Face hub (Qwen/Qwen2-0.5B, Qwen/Qwen2-1.5B,
  // Qwen/Qwen2-7B, Qwen/Qwen3-0.6B, Qwen/Qwen3-1.7B, Qwen/Qwen3-8B).
  struct shape {
    const char* name;
    const char* type;
    std::int64_t hidden, intermediate, layers, heads, kv_heads, head_dim, max_positions;
    bool tied;
    std::int64_t vocab = 151936;
  };
  static const shape presets[] = {
      {"qwen2-0.5b", "qwen2", 896, 4864, 24, 14, 2, 64, 32768, true},
      {"qwen2-1.5b", "qwen2", 1536, 8960, 28, 12, 2, 128, 32768, true},
      {"qwen2-7b", "qwen2", 3584, 18944, 28, 28, 4, 128, 131072, false, 152064},
      {"qwen3-0.6b", "qwen3", 1024, 3072, 28, 16, 8, 128, 40960, true},
      {"qwen3-1.7b", "qwen3", 2048, 6144, 28, 16, 8, 128, 40960, true},
      {"qwen3-8b", "qwen3", 4096, 12288, 36, 32, 8, 128, 40960, false},
  };
  std::string known;
  for (const auto& p : presets) {
    if (name != p.name) {
      known += (known.empty() ? "" : ", ") + std::string(p.name);
      continue;
    }
    model_config c;
    c.model_type = p.type;
    c.vocab_size = p.vocab;
    c.hidden_size = p.hidden;
    c.intermediate_size = p.intermediate;
    c.num_hidden_layers = p.layers;
    c.num_attention_heads = p.heads;
    c.num_key_value_heads = p.kv_heads;
    c.head_dim = p.head_dim;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 1e6;
    c.max_position_embeddings = p.max_positions;
    c.tie_word_embeddings = p.tied;
    c.qkv_bias = c.model_type == "qwen2";
    c.qk_norm = c.model_type == "qwen3";
    c.torch_dtype = "bfloat16";
    c.bos_token_id = 151643;
    // Qwen2 base models end with <|endoftext|>; Qwen3 (instruct-tuned) with <|im_end|>.
    c.eos_token_ids = {c.model_type == "qwen2" ? 151643 : 151645};
    return c;
  }
  return error{"unknown model preset '" + name + "' (known: " + known + ")"};
}

status write_model_config(const std::string& dir, const model_config& config, durability sync) {
  return write_file_durably(detail::join(dir, "config.json"), to_json(config), 0644, sync);
}

}  // namespace leap::learner

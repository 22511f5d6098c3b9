#include "sandbox/task.hpp"
#include "tools/launch/launch.hpp"

#include <set>

namespace leap::launch {
namespace {

namespace fs = std::filesystem;

// "SOURCE:LINE: key: message" for a message of the form "key: ...", with the line where the key
// is set in `text`; "SOURCE: message" otherwise.
std::string locate(const std::string& source, const std::string& text, const std::string& message) {
  const auto colon = message.find(": ");
  if (colon != std::string::npos) {
    const std::string key = message.substr(0, colon);
    if (config_value(experiment_config{}, key)) {
      if (auto line = config_key_line(text, key)) {
        return source + ":" + std::to_string(*line) + ": " + message;
      }
    }
  }
  return source + ": " + message;
}

// Whether the text sets any section of the schema (its sections are config_keys()'s first parts).
bool sets_any_section(const std::string& text) {
  std::set<std::string> sections;
  for (const auto& doc : config_keys()) {
    const std::string section = doc.key.substr(0, doc.key.find('.'));
    if (sections.insert(section).second && config_key_line(text, section)) {
      return true;
    }
  }
  return false;
}

// `path` as `leap run` started in `base_dir` would open it.
std::string from(const fs::path& base_dir, const std::string& path) {
  if (path.empty() || base_dir.empty() || fs::path(path).is_absolute()) {
    return path;
  }
  return (base_dir / path).lexically_normal().string();
}

}  // namespace

std::string tokenizer_folder(const experiment_config& config,
                             const std::function<std::string(const std::string&)>& resolve) {
  if (!config.policy.tokenizer.empty()) {
    return resolve(config.policy.tokenizer);
  }
  if (config.policy.flavour == server_flavour::embedded && !config.policy.model.empty()) {
    std::string model = resolve(config.policy.model);
    std::error_code ec;
    if (fs::exists(fs::path(model) / "tokenizer.json", ec)) {
      return model;
    }
  }
  return {};
}

result<run_preflight> preflight_run_text(const std::string& text, const std::string& source,
                                         const fs::path& base_dir) {
  auto parsed = parse_config(text, source);
  if (!parsed) {
    return parsed.err();
  }
  if (parsed->data.train.empty() && !sets_any_section(text)) {
    return error{source + ": the config is empty: leap run needs at least data.train (the tasks " +
                 "to train on); `leap config keys` lists every key"};
  }
  run_preflight out;
  out.text = text;
  out.config = std::move(*parsed);

  // Files the config names, as the run will open them.
  data_section data = out.config.data;
  data.train = from(base_dir, data.train);
  data.validation = from(base_dir, data.validation);
  auto tasks = load_run_tasks(data, static_cast<std::uint64_t>(out.config.experiment.seed));
  if (!tasks) {
    return error{locate(source, text, tasks.err().message)};
  }
  out.tasks = std::move(*tasks);
  for (const auto* list : {&out.tasks.train, &out.tasks.validation}) {
    for (const auto& t : *list) {
      out.kinds.add(t->kind);
    }
  }

  if (!out.config.verifier.nodes.empty()) {
    verifier_section verifier = out.config.verifier;
    verifier.node_secret_file = from(base_dir, verifier.node_secret_file);
    verifier.tls_certificate = from(base_dir, verifier.tls_certificate);
    verifier.tls_key = from(base_dir, verifier.tls_key);
    verifier.tls_ca = from(base_dir, verifier.tls_ca);
    auto nodes = actors::dispatcher_settings_of(verifier);
    if (!nodes) {
      return error{locate(source, text, nodes.err().message)};
    }
    out.nodes = std::move(*nodes);
  }

  const std::string folder =
      tokenizer_folder(out.config, [&](const std::string& p) { return from(base_dir, p); });
  if (!folder.empty()) {
    const char* key = out.config.policy.tokenizer.empty() ? "policy.model" : "policy.tokenizer";
    auto renderer = policy::hf_chat_renderer::load(folder);
    if (!renderer) {
      return error{locate(source, text, std::string(key) + ": " + renderer.err().message)};
    }
    out.renderer = std::move(*renderer);
    out.renderer_dir = folder;
  }
  return out;
}

result<run_preflight> preflight_run(const std::string& path) {
  auto text = read_config_file(path);
  if (!text) {
    return text.err();
  }
  return preflight_run_text(*text, path, {});
}

}  // namespace leap::launch

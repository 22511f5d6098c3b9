// The public face of the config: parsing, validation, rendering and the reference, each a walk
// over the schema (detail/config_schema.hpp), which alone knows the keys.
#include "orchestrator/config.hpp"

#include "orchestrator/detail/config_schema.hpp"
#include "orchestrator/detail/config_text.hpp"
#include "orchestrator/detail/config_yaml.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

namespace leap {

using namespace config_detail;  // NOLINT(google-build-using-namespace): this file's own internals

namespace {

struct parse_state {
  experiment_config config;
  std::vector<problem> problems;
  std::map<std::string, int> lines;  // dotted key or section -> 1-based line where the text sets it
  std::set<std::string> failed;      // keys with a problem: checks that read them are skipped
};

void walk(const schema& s, const YAML::Node& map, const std::string& prefix, parse_state& state) {
  std::map<std::string, int> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    // Copies (nodes are handles): `it->` yields a proxy that dies with the full expression, so a
    // reference to its members would dangle.
    const YAML::Node key_node = it->first;
    const YAML::Node value = it->second;
    const int line = line_of(key_node);
    if (!key_node.IsScalar()) {
      state.problems.push_back(
          {line, prefix, "expected a plain key name, got " + describe(key_node)});
      continue;
    }
    const std::string name = excerpt(key_node.Scalar());
    std::string key = prefix;
    if (!key.empty()) {
      key += '.';
    }
    key += name;
    if (const auto first = seen.find(name); first != seen.end()) {
      state.problems.push_back(
          {line, key, "duplicate key (first set at line " + std::to_string(first->second) + ")"});
      state.failed.insert(key);
      continue;
    }
    seen.emplace(name, line);
    state.lines.emplace(key, line);
    if (const field_spec* f = s.field(key)) {
      sink out{key, line, state.problems};
      if (!f->read(value, state.config, out)) {
        state.failed.insert(key);
      }
    } else if (s.sections.contains(key)) {
      if (value.IsNull()) {
        continue;  // "gate:" with nothing under it: every key keeps its default
      }
      if (!value.IsMap()) {
        state.problems.push_back(
            {line, key, "expected a section (a mapping of keys), got " + describe(value)});
        continue;
      }
      walk(s, value, key, state);
    } else {
      state.problems.push_back({line, key, "unknown key" + suggestion(s, prefix, name)});
    }
  }
}

// Range and consistency checks. `lines` places each problem; `failed` holds keys that already have
// a problem, and grows with the keys that fail here.
void run_checks(const schema& s, const experiment_config& c,
                const std::map<std::string, int>& lines, std::set<std::string>& failed,
                std::vector<problem>& problems) {
  const auto line_of_key = [&](const std::string& key) {
    const auto it = lines.find(key);
    return it == lines.end() ? 0 : it->second;
  };
  for (const auto& f : s.fields) {
    if (!f.check || failed.contains(f.key)) {
      continue;
    }
    if (auto why = f.check(c)) {
      problems.push_back({line_of_key(f.key), f.key, *why});
      failed.insert(f.key);
    }
  }
  for (const auto& check : s.checks) {
    if (std::any_of(check.keys.begin(), check.keys.end(),
                    [&](const std::string& k) { return failed.contains(k); })) {
      continue;
    }
    if (auto why = check.check(c)) {
      int line = 0;
      for (const auto& k : check.keys) {
        if ((line = line_of_key(k)) > 0) {
          break;
        }
      }
      problems.push_back({line, check.keys.front(), *why});
      failed.insert(check.keys.front());
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public API

bool operator==(const experiment_config& a, const experiment_config& b) {
  const auto gate_equal = [](const gate_config& x, const gate_config& y) {
    return x.policy == y.policy && x.unit == y.unit && x.tau_min == y.tau_min &&
           x.tau_max == y.tau_max && x.adaptive_low_quantile == y.adaptive_low_quantile &&
           x.adaptive_high_quantile == y.adaptive_high_quantile &&
           x.adaptive_window == y.adaptive_window &&
           x.adaptive_min_groups == y.adaptive_min_groups && x.probe_fraction == y.probe_fraction &&
           x.optimise.speedup == y.optimise.speedup &&
           x.optimise.max_turns == y.optimise.max_turns && x.optimise.train == y.optimise.train &&
           x.retry.buffer == y.retry.buffer && x.retry.delay == y.retry.delay &&
           x.retry.attempts == y.retry.attempts &&
           x.retry.extra_rollouts == y.retry.extra_rollouts &&
           x.retry.extra_turns == y.retry.extra_turns;
  };
  const auto reward_equal = [](const reward_config& x, const reward_config& y) {
    return x.kind == y.kind && x.static_rewards == y.static_rewards &&
           x.failure_reward == y.failure_reward && x.speed_tie == y.speed_tie && x.echo == y.echo &&
           x.speed_bonus.weight == y.speed_bonus.weight &&
           x.speed_bonus.clip == y.speed_bonus.clip &&
           x.structural.weights == y.structural.weights && x.structural.bound == y.structural.bound;
  };
  const auto advantage_equal = [](const advantage_config& x, const advantage_config& y) {
    return x.kind == y.kind && x.epsilon == y.epsilon && x.gamma == y.gamma;
  };
  return a.experiment == b.experiment && a.data == b.data && a.rollout == b.rollout &&
         gate_equal(a.gate, b.gate) && reward_equal(a.reward, b.reward) &&
         advantage_equal(a.advantage, b.advantage) && a.learner == b.learner &&
         a.policy == b.policy && a.verifier == b.verifier && a.schedule == b.schedule &&
         a.simulation == b.simulation;
}

result<std::string> read_config_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return error{path + ": cannot read config: it is a directory"};
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int code = errno;
    return error{path + ": cannot read config: " +
                 (code != 0 ? std::strerror(code) : "cannot open the file")};
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return error{path + ": cannot read config: read error"};
  }
  return text.str();
}

result<experiment_config> load_config(const std::string& path) {
  auto text = read_config_file(path);
  if (!text) {
    return text.err();
  }
  return parse_config(*text, path);
}

result<experiment_config> parse_config(const std::string& yaml_text,
                                       const std::string& source_name) {
  const schema& s = the_schema();
  YAML::Node root;
  try {
    const auto starts = document_starts(yaml_text);
    if (starts.size() > 1) {
      // A document starting where the previous one did: the parser made no progress (a stray ',').
      const bool stuck =
          starts[1].pos == starts[0].pos || (starts.size() > 2 && starts[2].pos == starts[1].pos);
      const YAML::Mark& at = starts[1];
      return join_problems(source_name, {{at.line + 1, "",
                                          stuck ? "YAML syntax error: text outside any mapping or "
                                                  "list (a ',' outside brackets?) (column " +
                                                      std::to_string(at.column + 1) + ")"
                                                : "expected one YAML document, found a second one "
                                                  "here (remove the '---' separator)"}});
    }
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    const int line = e.mark.is_null() ? 0 : e.mark.line + 1;
    const std::string column =
        e.mark.is_null() ? "" : " (column " + std::to_string(e.mark.column + 1) + ")";
    return join_problems(source_name, {{line, "", "YAML syntax error: " + e.msg + column}});
  }
  std::vector<YAML::Node> documents;
  if (root.IsDefined()) {
    documents.push_back(root);
  }
  parse_state state;
  if (!documents.empty() && !documents.front().IsNull()) {
    const YAML::Node& root = documents.front();
    if (!root.IsMap()) {
      return join_problems(
          source_name, {{line_of(root), "",
                         "expected a mapping of sections (experiment:, rollout:, ...) at the top "
                         "level, got " +
                             describe(root)}});
    }
    walk(s, root, "", state);
  }
  run_checks(s, state.config, state.lines, state.failed, state.problems);
  if (!state.problems.empty()) {
    return join_problems(source_name, std::move(state.problems));
  }
  return std::move(state.config);
}

std::optional<int> config_key_line(const std::string& yaml_text, std::string_view key) {
  YAML::Node node;
  try {
    node = YAML::Load(yaml_text);
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
  int line = 0;
  for (const auto& part : split_key(std::string(key))) {
    if (!node.IsMap()) {
      return std::nullopt;
    }
    bool found = false;
    // The key's own line (a section's value starts on the line below it).
    for (auto it = node.begin(); it != node.end() && !found; ++it) {
      if (it->first.IsScalar() && it->first.Scalar() == part) {
        line = line_of(it->first);
        YAML::Node value = it->second;
        node.reset(value);  // operator= would overwrite the referenced node's value
        found = true;
      }
    }
    if (!found) {
      return std::nullopt;
    }
  }
  return line > 0 ? std::optional<int>(line) : std::nullopt;
}

bool resume_may_change(std::string_view key) {
  const field_spec* f = the_schema().field(key);
  return f != nullptr && f->resumable;
}

std::vector<std::string> resume_conflicts(const experiment_config& stored,
                                          const experiment_config& now) {
  std::vector<std::string> out;
  for (const auto& f : the_schema().fields) {
    if (f.resumable) {
      continue;
    }
    const std::string a = f.write(stored);
    const std::string b = f.write(now);
    if (a != b) {
      std::string conflict = f.key;
      conflict.append(" (stored ").append(a).append(", now ").append(b).append(")");
      out.push_back(std::move(conflict));
    }
  }
  return out;
}

status validate_config(const experiment_config& config) {
  std::vector<problem> problems;
  std::set<std::string> failed;
  run_checks(the_schema(), config, {}, failed, problems);
  if (!problems.empty()) {
    return join_problems("", std::move(problems));
  }
  return ok_status();
}

std::string render_config(const experiment_config& config) {
  std::string out;
  std::vector<std::string> open;  // the sections the previous key was written in
  for (const auto& f : the_schema().fields) {
    auto parts = split_key(f.key);
    const std::string leaf = parts.back();
    parts.pop_back();
    std::size_t common = 0;
    while (common < open.size() && common < parts.size() && open[common] == parts[common]) {
      ++common;
    }
    open.resize(common);
    for (std::size_t depth = common; depth < parts.size(); ++depth) {
      if (depth == 0 && !out.empty()) {
        out += "\n";
      }
      out += std::string(2 * depth, ' ') + parts[depth] + ":\n";
      open.push_back(parts[depth]);
    }
    out += std::string(2 * parts.size(), ' ') + leaf + ": " + f.write(config) + "\n";
  }
  return out;
}

std::vector<config_key_doc> config_keys() {
  const experiment_config defaults;
  std::vector<config_key_doc> docs;
  for (const auto& f : the_schema().fields) {
    docs.push_back({f.key, f.type, f.write(defaults), f.meaning, f.resumable});
  }
  return docs;
}

std::string config_reference_markdown() {
  const auto cell = [](const std::string& text) {
    std::string out;
    for (const char ch : text) {
      out += ch == '|' ? std::string("\\|") : std::string(1, ch);
    }
    return out;
  };
  std::string out =
      "| key | type | default | resume may change | meaning |\n| --- | --- | --- | --- | --- |\n";
  for (const auto& doc : config_keys()) {
    out += "| `" + doc.key + "` | " + cell(doc.type) + " | `" + cell(doc.default_value) + "` | " +
           (doc.resumable ? "yes" : "no") + " | " + cell(doc.meaning) + " |\n";
  }
  return out;
}

std::optional<std::string> config_value(const experiment_config& config, std::string_view key) {
  if (const field_spec* f = the_schema().field(key)) {
    return f->write(config);
  }
  return std::nullopt;
}

}  // namespace leap

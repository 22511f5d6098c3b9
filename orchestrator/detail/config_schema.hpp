// Internal to orchestrator/config: the schema, the one place where each key of the config file is
// declared: its type (by the reader its entry uses), its check, its meaning, whether a resumed run
// may change it, and the struct member it fills, whose initializer in config.hpp is the default.
// Parsing, validation, render_config, resume_conflicts and the reference (`leap config keys`, the
// README) all walk this table. The rules that read several keys live beside it (cross_check).
// Not a public header.
#pragma once

#include "orchestrator/config.hpp"
#include "orchestrator/detail/config_yaml.hpp"

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace leap::config_detail {

struct field_spec {
  std::string key;      // dotted: "rollout.sampling.top_k"
  std::string type;     // for the reference: "integer", "one of: dcp, full", ...
  std::string meaning;  // for the reference: one line, its range and why the default
  // Converts the YAML value into the config; reports through the sink and returns false on failure.
  std::function<bool(const YAML::Node&, experiment_config&, sink&)> read;
  // The value as YAML text.
  std::function<std::string(const experiment_config&)> write;
  // The field's own range check; empty when any value of the type is fine.
  std::function<std::optional<std::string>(const experiment_config&)> check;
  // Whether a resumed run may change the key: where and how fast the experiment runs (endpoints,
  // timeouts, workers, caches, nodes, logging, steps), not what it computes.
  bool resumable = false;
};

// A rule that reads several keys of one config (no files); reported at `keys.front()` (or the first
// of `keys` present in the text), skipped when any of them already has a problem.
struct cross_check {
  std::vector<std::string> keys;
  std::function<std::optional<std::string>(const experiment_config&)> check;
};

// The schema with its lookups, built once.
struct schema {
  std::vector<field_spec> fields;  // in the reference's (and render_config's) order
  std::vector<cross_check> checks;
  std::map<std::string, std::size_t, std::less<>> by_key;
  std::set<std::string, std::less<>> sections;               // "rollout", "rollout.validation", ...
  std::map<std::string, std::vector<std::string>> children;  // prefix ("" = top) -> names, in order

  schema();
  [[nodiscard]] const field_spec* field(std::string_view key) const;
};

// Thread-safe (built on first use).
[[nodiscard]] const schema& the_schema();

// "; did you mean 'x'?" (a sibling near `name`, or a key of another section whose last part is),
// else "; expected one of: ..." listing the section's keys.
[[nodiscard]] std::string suggestion(const schema& s, const std::string& prefix,
                                     const std::string& name);

}  // namespace leap::config_detail

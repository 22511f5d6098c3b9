#include "orchestrator/detail/config_schema.hpp"

#include "orchestrator/detail/config_text.hpp"
#include "orchestrator/detail/schema_sections.hpp"

#include <algorithm>
#include <limits>

namespace leap::config_detail {
namespace {

// The keys in the reference's (and render_config's) order. Each section's file is the only place
// that states its keys' meanings, ranges and whether a resume may change them (operational); a
// key's type follows from its builder, its default from the member's initializer in config.hpp.
std::vector<field_spec> build_fields() {
  std::vector<field_spec> f;
  add_run_fields(f);
  add_gate_fields(f);
  add_reward_fields(f);
  add_learner_fields(f);
  add_policy_fields(f);
  add_verifier_fields(f);
  add_schedule_fields(f);
  add_simulation_fields(f);
  return f;
}

// The rules across keys, in the order they run (see schema_sections.hpp).
std::vector<cross_check> build_cross_checks() {
  std::vector<cross_check> checks;
  add_gate_checks(checks);
  add_reward_checks(checks);
  add_policy_endpoint_checks(checks);
  add_learner_checks(checks);
  add_policy_checks(checks);
  add_learner_batch_checks(checks);
  add_schedule_checks(checks);
  add_data_checks(checks);
  add_simulation_checks(checks);
  return checks;
}

}  // namespace

schema::schema() : fields(build_fields()), checks(build_cross_checks()) {
  for (std::size_t i = 0; i < fields.size(); ++i) {
    by_key.emplace(fields[i].key, i);
    const auto parts = split_key(fields[i].key);
    std::string prefix;
    for (const auto& part : parts) {
      auto& names = children[prefix];
      if (std::find(names.begin(), names.end(), part) == names.end()) {
        names.push_back(part);
      }
      if (!prefix.empty()) {
        prefix += '.';
      }
      prefix += part;
      if (prefix != fields[i].key) {
        sections.insert(prefix);
      }
    }
  }
}

const field_spec* schema::field(std::string_view key) const {
  const auto it = by_key.find(key);
  return it == by_key.end() ? nullptr : &fields[it->second];
}

const schema& the_schema() {
  static const schema s;
  return s;
}

std::string suggestion(const schema& s, const std::string& prefix, const std::string& name) {
  const auto it = s.children.find(prefix);
  const std::vector<std::string> siblings =
      it == s.children.end() ? std::vector<std::string>{} : it->second;
  if (auto guess = closest(name, siblings)) {
    return "; did you mean '" + *guess + "'?";
  }
  // The right name in the wrong section ("rollout.temperature"): point at every key whose last part
  // is nearest that name, if any is near.
  std::vector<std::string> elsewhere;
  std::size_t nearest = std::numeric_limits<std::size_t>::max();
  const auto consider = [&](const std::string& key) {
    const std::string leaf = split_key(key).back();
    if (!closest(name, {leaf})) {
      return;
    }
    const std::size_t d = edit_distance(name, leaf);
    if (d < nearest) {
      elsewhere.clear();
      nearest = d;
    }
    if (d == nearest) {
      elsewhere.push_back(key);
    }
  };
  for (const auto& f : s.fields) {
    consider(f.key);
  }
  for (const auto& section : s.sections) {
    consider(section);
  }
  if (!elsewhere.empty() && elsewhere.size() <= 3) {
    return "; did you mean " +
           join(elsewhere, " or ", [](const std::string& k) { return "'" + k + "'"; }) + "?";
  }
  return "; expected one of: " + join(siblings, ", ", [](const std::string& k) { return k; });
}

}  // namespace leap::config_detail

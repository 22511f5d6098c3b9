#include "orchestrator/config.hpp"

#include "common/lines.hpp"
#include "orchestrator/retry.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace leap {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

std::size_t line_count(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) +
         (text.empty() ? 0 : 1);
}

// The dotted keys of render_config's output, read line by line: "name:" opens a section at its
// indentation, "name: value" is a key. Reading the text rather than YAML checks its layout too.
std::map<std::string, std::string> rendered_keys(const std::string& text) {
  std::map<std::string, std::string> keys;
  std::vector<std::string> sections;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) {
      continue;
    }
    const std::size_t indent = line.find_first_not_of(' ');
    EXPECT_EQ(indent % 2, 0U) << line;
    sections.resize(std::min(sections.size(), indent / 2));
    const std::size_t colon = line.find(':');
    EXPECT_NE(colon, std::string::npos) << line;
    const std::string name = line.substr(indent, colon - indent);
    std::string prefix;
    for (const auto& s : sections) {
      prefix += s + ".";
    }
    if (colon + 1 == line.size()) {
      sections.push_back(name);
    } else {
      keys[prefix + name] = line.substr(colon + 2);
    }
  }
  return keys;
}

std::string source_dir() { return LEAP_SOURCE_DIR; }

// ------------------------------------------------------------------------------------------------
// Errors: YAML text -> a substring of the message (file, line, key, what), and how many problems.

struct error_case {
  std::string name;
  std::string yaml;
  std::string expected;
  std::size_t problems = 1;
};

std::ostream& operator<<(std::ostream& os, const error_case& c) { return os << c.name; }

const std::vector<error_case>& error_cases() {
  static const std::vector<error_case> cases = {
      // Types.
      {"number_expected", "gate:\n  tau_min: abc\n",
       "case.yaml:2: gate.tau_min: expected a number, got 'abc'"},
      {"integer_expected", "rollout:\n  group_size: 8.5\n",
       "case.yaml:2: rollout.group_size: expected an integer, got '8.5'"},
      {"quoted_number", "rollout:\n  group_size: \"8\"\n",
       "case.yaml:2: rollout.group_size: expected an integer, got the quoted string '8' (remove "
       "the quotes)"},
      {"list_for_scalar", "rollout:\n  group_size: [8]\n",
       "case.yaml:2: rollout.group_size: expected an integer, got a list"},
      {"map_for_scalar", "learner:\n  lr: {value: 1}\n",
       "case.yaml:2: learner.lr: expected a number, got a mapping"},
      {"scalar_for_list", "policy:\n  endpoints: http://a:1\n",
       "case.yaml:2: policy.endpoints: expected a list of strings, got 'http://a:1' (write "
       "[http://a:1] for a "
       "list of one)"},
      {"null_value", "rollout:\n  group_size:\n",
       "case.yaml:2: rollout.group_size: expected an integer, got nothing"},
      {"list_for_string", "experiment:\n  name: [a]\n",
       "case.yaml:2: experiment.name: expected a string, got a list"},
      {"infinite_number", "learner:\n  lr: inf\n",
       "case.yaml:2: learner.lr: expected a finite number, got 'inf'"},
      {"yaml_nan", "learner:\n  lr: .nan\n",
       "case.yaml:2: learner.lr: expected a number, got '.nan'"},
      {"negative_seed", "experiment:\n  seed: -1\n",
       "case.yaml:2: experiment.seed: expected a non-negative integer, got '-1'"},
      {"integer_overflow", "rollout:\n  group_size: 99999999999\n",
       "case.yaml:2: rollout.group_size: expected an integer between -2147483648 and 2147483647"},
      {"list_element_type", "rollout:\n  sampling:\n    stop_token_ids: [1, x]\n",
       "case.yaml:3: rollout.sampling.stop_token_ids[1]: expected an integer, got 'x'"},
      {"list_element_line", "rollout:\n  sampling:\n    stop_token_ids:\n      - 1\n      - x\n",
       "case.yaml:5: rollout.sampling.stop_token_ids[1]: expected an integer, got 'x'"},
      {"section_not_map", "gate: 3\n",
       "case.yaml:1: gate: expected a section (a mapping of keys), got '3'"},
      {"enum_suggestion", "reward:\n  kind: statik\n",
       "case.yaml:2: reward.kind: expected one of rank, static, binary, rank_speed, prime_echo, "
       "got "
       "'statik'; "
       "did you mean 'static'?"},
      {"enum_no_suggestion", "learner:\n  loss_aggregation: sample\n",
       "case.yaml:2: learner.loss_aggregation: expected one of token_mean, seq_mean_token_mean, "
       "seq_mean_token_sum, got 'sample'"},
      {"pair_length", "learner:\n  betas: [0.9]\n",
       "case.yaml:2: learner.betas: expected a list of 2 numbers, got 1"},

      // Unknown and duplicate keys.
      {"unknown_key_suggestion", "gate:\n  tau_mn: 0.5\n",
       "case.yaml:2: gate.tau_mn: unknown key; did you mean 'tau_min'?"},
      {"unknown_section_suggestion", "gat:\n  tau_min: 0.5\n",
       "case.yaml:1: gat: unknown key; did you mean 'gate'?"},
      {"key_in_wrong_section", "tau_min: 0.5\n",
       "case.yaml:1: tau_min: unknown key; did you mean 'gate.tau_min'?"},
      {"key_in_two_sections", "rollout:\n  temperature: 0.5\n",
       "case.yaml:2: rollout.temperature: unknown key; did you mean 'rollout.sampling.temperature' "
       "or "
       "'rollout.validation.sampling.temperature'?"},
      {"misspelt_key_in_wrong_section", "rollout:\n  temprature: 0.5\n",
       "case.yaml:2: rollout.temprature: unknown key; did you mean 'rollout.sampling.temperature' "
       "or "
       "'rollout.validation.sampling.temperature'?"},
      {"unknown_key_listing", "schedule:\n  xyzzy: 1\n",
       "case.yaml:2: schedule.xyzzy: unknown key; expected one of: mode, max_staleness"},
      {"duplicate_key", "gate:\n  tau_min: 0.5\n  tau_min: 0.6\n",
       "case.yaml:3: gate.tau_min: duplicate key (first set at line 2)"},
      {"duplicate_section", "gate:\n  tau_min: 0.5\nrollout: {}\ngate:\n  tau_max: 1\n",
       "case.yaml:4: gate: duplicate key (first set at line 1)"},
      // A stray quote folds the following lines into one key.
      {"folded_key_on_one_line",
       "rollout:\n  sampling:\n    temperature: 1.0\n  \" top_k: -1\n    top_p: 0.95\n",
       "case.yaml:4: rollout. top_k: -1 top_p: 0.95 : unknown key"},
      {"long_value_is_shortened",
       "experiment:\n  steps: "
       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
       "case.yaml:2: experiment.steps: expected an integer, got "
       "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...'"},
      {"complex_key", "? [a, b]\n: 1\n", "case.yaml:1: expected a plain key name, got a list"},

      // Whole-file problems.
      {"yaml_syntax", "gate:\n  tau_min: [0.5\n",
       "case.yaml:3: YAML syntax error: end of sequence flow not found"},
      {"yaml_tab", "gate:\n\ttau_min: 1\n",
       "case.yaml:2: YAML syntax error: illegal map value (column 9)"},
      {"two_documents", "gate: {}\n---\nrollout: {}\n",
       "case.yaml:2: expected one YAML document, found a second one here (remove the '---' "
       "separator)"},
      {"empty_second_document", "gate: {}\n---\n", "case.yaml:2: expected one YAML document"},
      // yaml-cpp's LoadAll loops for ever on these; parse_config must answer.
      {"stray_comma", ",\n",
       "case.yaml:1: YAML syntax error: text outside any mapping or list (a ',' outside "
       "brackets?) (column 1)"},
      {"stray_comma_after_comment", "# a comment\n,#x\ngate: {}\n",
       "case.yaml:2: YAML syntax error: text outside any mapping or list"},
      {"stray_comma_after_list", "- a\n,\n",
       "case.yaml:2: YAML syntax error: text outside any mapping or list"},
      {"top_level_list", "- a\n- b\n", "case.yaml:1: expected a mapping of sections"},

      // Ranges.
      {"group_size_1", "rollout:\n  group_size: 1\n",
       "case.yaml:2: rollout.group_size: must be >= 2 (a group needs peers to compare with), got "
       "1"},
      {"max_turns_0", "rollout:\n  max_turns: 0\n",
       "case.yaml:2: rollout.max_turns: must be >= 1, got 0"},
      {"top_p_0", "rollout:\n  sampling:\n    top_p: 0\n",
       "case.yaml:3: rollout.sampling.top_p: must be in (0, 1], got 0"},
      {"top_p_above_1", "rollout:\n  validation:\n    sampling:\n      top_p: 1.5\n",
       "case.yaml:4: rollout.validation.sampling.top_p: must be in (0, 1], got 1.5"},
      {"temperature_negative", "rollout:\n  sampling:\n    temperature: -0.1\n",
       "case.yaml:3: rollout.sampling.temperature: must be >= 0, got -0.1"},
      {"top_k_0", "rollout:\n  sampling:\n    top_k: 0\n",
       "case.yaml:3: rollout.sampling.top_k: must be -1 (disabled) or >= 1, got 0"},
      {"negative_token_id", "rollout:\n  sampling:\n    stop_token_ids:\n      - 1\n      - -2\n",
       "case.yaml:3: rollout.sampling.stop_token_ids: [1] must be >= 0, got -2"},
      {"empty_stop_string", "rollout:\n  sampling:\n    stop: [\"\"]\n",
       "case.yaml:3: rollout.sampling.stop: [0] must not be empty"},
      {"gamma_0", "advantage:\n  gamma: 0\n",
       "case.yaml:2: advantage.gamma: must be in (0, 1], got 0"},
      {"gamma_above_1", "advantage:\n  gamma: 1.5\n",
       "case.yaml:2: advantage.gamma: must be in (0, 1], got 1.5"},
      {"epsilon_0", "advantage:\n  epsilon: 0\n",
       "case.yaml:2: advantage.epsilon: must be > 0 (a group of equal rewards has std 0), got 0"},
      {"negative_lr", "learner:\n  lr: -1e-6\n",
       "case.yaml:2: learner.lr: must be > 0 (a zero rate trains nothing; use learner.kind: "
       "record), got -1e-06"},
      {"beta_1", "learner:\n  betas: [0.9, 1.0]\n",
       "case.yaml:2: learner.betas: [1] must be in [0, 1), got 1"},
      {"clip_low_1", "learner:\n  clip_low: 1\n",
       "case.yaml:2: learner.clip_low: must be in [0, 1)"},
      {"offpolicy_low_above_1", "learner:\n  offpolicy:\n    low: 1.5\n",
       "case.yaml:3: learner.offpolicy.low: must be in [0, 1], got 1.5"},
      {"offpolicy_high_below_1", "learner:\n  offpolicy:\n    mode: mask_token\n    high: 0.9\n",
       "case.yaml:4: learner.offpolicy.high: must be >= 1, got 0.9"},
      {"offpolicy_staleness_below_minus_1", "learner:\n  offpolicy:\n    max_staleness: -2\n",
       "case.yaml:3: learner.offpolicy.max_staleness: must be >= -1, got -2"},
      {"offpolicy_mode_misspelt", "learner:\n  offpolicy:\n    mode: drop_sequences\n",
       "case.yaml:3: learner.offpolicy.mode: expected one of off, drop_sequence, truncate_token, "
       "mask_token, got 'drop_sequences'; did you mean 'drop_sequence'?"},
      {"quantile_negative", "gate:\n  adaptive_low_quantile: -0.1\n",
       "case.yaml:2: gate.adaptive_low_quantile: must be in [0, 1], got -0.1"},
      {"window_0", "gate:\n  adaptive_window: 0\n",
       "case.yaml:2: gate.adaptive_window: must be >= 1, got 0"},
      {"validation_fraction_1", "data:\n  validation_fraction: 1.0\n",
       "case.yaml:2: data.validation_fraction: must be in [0, 1) (1 would leave nothing to train "
       "on), got 1"},
      {"probability_above_1", "simulation:\n  debug_fix_probability: 1.2\n",
       "case.yaml:2: simulation.debug_fix_probability: must be in [0, 1], got 1.2"},
      {"alpha_0", "simulation:\n  difficulty_alpha: 0\n",
       "case.yaml:2: simulation.difficulty_alpha: must be > 0, got 0"},
      {"timeout_0", "verifier:\n  run_timeout_s: 0\n",
       "case.yaml:2: verifier.run_timeout_s: must be > 0, got 0"},
      {"negative_retries", "policy:\n  retries: -1\n",
       "case.yaml:2: policy.retries: must be >= 0, got -1"},
      {"run_name", "experiment:\n  name: my run\n",
       "case.yaml:2: experiment.name: may hold only letters, digits, '.', '_' and '-'"},
      {"empty_run_dir", "experiment:\n  run_dir: \"\"\n",
       "case.yaml:2: experiment.run_dir: must not be empty"},
      {"cuda_arch", "verifier:\n  cuda_arch: hopper\n",
       "case.yaml:2: verifier.cuda_arch: expected an nvcc architecture such as sm_90a, sm_80 or "
       "compute_90, got "
       "'hopper'"},
      {"profile_mode", "verifier:\n  profile: always\n",
       "case.yaml:2: verifier.profile: expected one of off, passing, all_compiled, got 'always'"},
      {"profile_mode_case", "verifier:\n  profile: Passing\n",
       "case.yaml:2: verifier.profile: expected one of off, passing, all_compiled, got 'Passing'"},
      {"profile_tool", "verifier:\n  profile_tool: cupti\n",
       "case.yaml:2: verifier.profile_tool: expected one of auto, ncu, events, got 'cupti'"},
      {"profile_tool_case", "verifier:\n  profile_tool: Events\n",
       "case.yaml:2: verifier.profile_tool: expected one of auto, ncu, events, got 'Events'"},
      {"profile_max_kernels_0", "verifier:\n  profile_max_kernels: 0\n",
       "case.yaml:2: verifier.profile_max_kernels: must be >= 1, got 0"},
      {"standby_depth_0", "verifier:\n  kernelbench_standby_depth: 0\n",
       "case.yaml:2: verifier.kernelbench_standby_depth: must be >= 1, got 0"},
      {"kernelbench_scratch_small", "verifier:\n  kernelbench_scratch_bytes: 1048576\n",
       "case.yaml:2: verifier.kernelbench_scratch_bytes: must be >= 268435456, got 1048576"},
      {"profile_timeout_0", "verifier:\n  profile_timeout_s: 0\n",
       "case.yaml:2: verifier.profile_timeout_s: must be > 0, got 0"},
      {"relative_ncu", "verifier:\n  ncu: bin/ncu\n",
       "case.yaml:2: verifier.ncu: must be an absolute path or empty (the ncu beside nvcc), got "
       "'bin/ncu'"},
      {"relative_python", "verifier:\n  python: venv/bin/python3\n",
       "case.yaml:2: verifier.python: must be a name (python3) or an absolute path, not the "
       "relative path 'venv/bin/python3'"},
      {"node_without_port", "verifier:\n  nodes: [gpu1]\n",
       "case.yaml:2: verifier.nodes: [0] 'gpu1' is not a valid host:port: it has no port"},
      {"url_scheme", "policy:\n  endpoints: [\"127.0.0.1:8000\"]\n",
       "case.yaml:2: policy.endpoints: [0] '127.0.0.1:8000' is not a valid endpoint URL: it must "
       "start with "
       "http:// or https://"},
      {"url_no_host", "policy:\n  endpoints: [\"http://:8000\"]\n",
       "is not a valid endpoint URL: it has no host"},
      {"url_bad_port", "policy:\n  endpoints: [\"http://h:99999\"]\n",
       "case.yaml:2: policy.endpoints: [0] 'http://h:99999' is not a valid endpoint URL: it has "
       "port '99999', "
       "expected a number in [1, 65535]"},
      {"url_path", "policy:\n  endpoints: [\"http://h:8000/v1\"]\n",
       "case.yaml:2: policy.endpoints: [0] 'http://h:8000/v1' is not a valid endpoint URL: it has "
       "a path ('/v1'); "
       "give the server's base URL, http://host:port, and the client adds the route"},
      {"url_query", "policy:\n  endpoints: [\"http://h:1/?x=1\"]\n",
       "it has a query, fragment or user part"},
      {"url_twice", "policy:\n  endpoints: [\"http://a:1\", \"http://a:1\"]\n",
       "case.yaml:2: policy.endpoints: lists 'http://a:1' twice"},

      // Keys that must agree.
      {"tau_min_above_tau_max", "gate:\n  tau_min: 0.8\n  tau_max: 0.6\n",
       "case.yaml:2: gate.tau_min: must be <= gate.tau_max (0.6), got 0.8: no group could open"},
      {"fraction_outside_0_1", "gate:\n  tau_min: 1.5\n",
       "case.yaml:2: gate.tau_min: must be a fraction in [0, 1] when gate.unit is fraction, got "
       "1.5"},
      {"count_above_group_size", "gate:\n  unit: count\n  tau_min: 2\n  tau_max: 9\n",
       "case.yaml:4: gate.tau_max: must be <= rollout.group_size (8) when gate.unit is count, got "
       "9"},
      {"count_above_group_size_set_elsewhere",
       "rollout:\n  group_size: 4\ngate:\n  unit: count\n  tau_min: 2\n  tau_max: 6\n",
       "case.yaml:6: gate.tau_max: must be <= rollout.group_size (4) when gate.unit is count, got "
       "6"},
      {"fractional_count", "gate:\n  unit: count\n  tau_min: 2.5\n  tau_max: 8\n",
       "case.yaml:3: gate.tau_min: must be a whole number of failures when gate.unit is count, got "
       "2.5"},
      // tau_min keeps its default 0.5, so the problem is placed at the key that made it one.
      {"default_becomes_wrong", "gate:\n  unit: count\n",
       "case.yaml:2: gate.tau_min: must be a whole number of failures when gate.unit is count, got "
       "0.5"},
      {"min_groups_above_window", "gate:\n  adaptive_min_groups: 300\n",
       "case.yaml:2: gate.adaptive_min_groups: must be <= gate.adaptive_window (256), got 300"},
      {"high_quantile_below_low",
       "gate:\n  adaptive_low_quantile: 0.9\n  adaptive_high_quantile: 0.8\n",
       "case.yaml:3: gate.adaptive_high_quantile: must be >= gate.adaptive_low_quantile (0.9), got "
       "0.8"},
      {"debug_gate_without_turns", "gate:\n  policy: full\nrollout:\n  max_turns: 1\n",
       "case.yaml:2: gate.policy: 'full' opens groups for debug turns, but rollout.max_turns is 1 "
       "and leaves none"},
      {"default_gate_without_turns", "rollout:\n  max_turns: 1\n",
       "case.yaml:2: gate.policy: 'dcp' opens groups for debug turns"},
      {"static_rewards_length", "reward:\n  kind: static\n  static_rewards: [1.0, 0.5]\n",
       "case.yaml:3: reward.static_rewards: must hold one reward per turn, rollout.max_turns = 3 "
       "values, got 2"},
      {"static_rewards_default_length", "reward:\n  kind: static\nrollout:\n  max_turns: 2\n",
       "case.yaml:2: reward.static_rewards: must hold one reward per turn, rollout.max_turns = 2 "
       "values, got 3"},
      {"rank_speed_without_timing", "reward:\n  kind: rank_speed\n",
       "case.yaml:2: reward.kind: pays for speed, but verifier.timing_reps is 0 and no speedup is "
       "ever measured; set verifier.timing_reps (e.g. 20)"},
      {"speed_bonus_without_timing", "reward:\n  kind: binary\n  speed_bonus:\n    weight: 0.1\n",
       "case.yaml:2: reward.kind: pays for speed, but verifier.timing_reps is 0"},
      {"speed_bonus_on_a_tournament",
       "reward:\n  speed_bonus:\n    weight: 0.1\nverifier:\n  timing_reps: 5\n",
       "case.yaml:3: reward.speed_bonus.weight: applies to the scalar rewards (reward.kind static "
       "or binary), not to 'rank', whose rewards are ranks; use reward.kind rank_speed"},
      {"speed_bonus_reaches_a_failure",
       "reward:\n  kind: static\n  static_rewards: [1.0, 0.5, 0.2]\n  speed_bonus:\n    "
       "weight: 0.5\n    clip: 0.5\nverifier:\n  timing_reps: 5\n",
       "case.yaml:5: reward.speed_bonus.weight: weight * clip = 0.25 would let a slow pass earn no "
       "more than a failure (least pass reward 0.2, reward.failure_reward 0)"},
      {"echo_above_one", "reward:\n  kind: prime_echo\n  echo: 1.5\n",
       "case.yaml:3: reward.echo: must be in [0, 1], got 1.5"},
      {"echo_negative", "reward:\n  echo: -0.25\n",
       "case.yaml:2: reward.echo: must be in [0, 1], got -0.25"},
      {"structural_without_profiles", "reward:\n  structural:\n    occupancy: 0.05\n",
       "case.yaml:2: reward.structural: pays from the profiles of passing turns, but "
       "verifier.profile is off and none is made; set verifier.profile: passing"},
      {"structural_weight_negative", "reward:\n  structural:\n    coalescing: -0.1\n",
       "case.yaml:3: reward.structural.coalescing: must be in [0, 10], got -0.1"},
      {"structural_bound_zero", "reward:\n  structural:\n    bound: 0\n",
       "case.yaml:3: reward.structural.bound: must be > 0 (a bound of 0 pays nothing; set the "
       "weights to 0), got 0"},
      {"prime_echo_takes_no_speed_bonus",
       "reward:\n  kind: prime_echo\n  speed_bonus:\n    weight: 0.1\nverifier:\n  timing_reps: "
       "5\n",
       "case.yaml:4: reward.speed_bonus.weight: applies to the scalar rewards (reward.kind static "
       "or binary), not to 'prime_echo', whose rewards are ranks"},
      {"optimise_without_timing", "gate:\n  optimise:\n    speedup: 1.2\n",
       "case.yaml:3: gate.optimise.speedup: opens groups whose passes were all timed, but "
       "verifier.timing_reps is 0 and no speedup is ever measured; set verifier.timing_reps"},
      {"optimise_without_turns",
       "gate:\n  policy: none\n  optimise:\n    speedup: 1.2\nrollout:\n  max_turns: 1\n"
       "verifier:\n  timing_reps: 5\n",
       "case.yaml:4: gate.optimise.speedup: opens groups for optimisation turns, but "
       "rollout.max_turns is 1 and leaves none"},
      {"optimise_negative", "gate:\n  optimise:\n    speedup: -1\n",
       "case.yaml:3: gate.optimise.speedup: must be in [0, 1000], got -1"},
      {"optimise_max_turns_zero", "gate:\n  optimise:\n    max_turns: 0\n",
       "case.yaml:3: gate.optimise.max_turns: must be >= 1, got 0"},
      {"optimise_train_without_optimise",
       "gate:\n  optimise:\n    train: true\nreward:\n  kind: rank_speed\nverifier:\n  "
       "timing_reps: 5\n",
       "case.yaml:3: gate.optimise.train: trains on optimisation turns, but "
       "gate.optimise.speedup is 0 and opens none"},
      {"optimise_train_on_rank",
       "gate:\n  optimise:\n    speedup: 1.2\n    train: true\nverifier:\n  timing_reps: 5\n",
       "case.yaml:4: gate.optimise.train: trains on optimisation turns, but reward.kind rank "
       "pays nothing for speed; use reward.kind rank_speed or a reward.speed_bonus.weight > 0"},
      {"optimise_train_on_binary_without_bonus",
       "gate:\n  optimise:\n    speedup: 1.2\n    train: true\nreward:\n  kind: binary\n"
       "verifier:\n  timing_reps: 5\n",
       "case.yaml:4: gate.optimise.train: trains on optimisation turns, but reward.kind binary "
       "pays nothing for speed"},
      {"optimise_train_not_a_bool", "gate:\n  optimise:\n    train: often\n",
       "case.yaml:3: gate.optimise.train:"},
      {"retry_delay_zero", "gate:\n  retry:\n    delay: 0\n",
       "case.yaml:3: gate.retry.delay: must be >= 1, got 0"},
      {"retry_negative_extra_rollouts", "gate:\n  retry:\n    extra_rollouts: -1\n",
       "case.yaml:3: gate.retry.extra_rollouts: must be >= 0, got -1"},
      {"speed_tie_negative", "reward:\n  speed_tie: -0.1\n",
       "case.yaml:2: reward.speed_tie: must be in [0, 10], got -0.1"},
      {"speed_bonus_clip_zero", "reward:\n  speed_bonus:\n    clip: 0\n",
       "case.yaml:3: reward.speed_bonus.clip: must be > 0 (a clip of 0 pays no bonus; use weight "
       "0), got 0"},
      {"timing_reps_negative", "verifier:\n  timing_reps: -1\n",
       "case.yaml:2: verifier.timing_reps: must be in [0, 1000], got -1"},
      // Debug turns render the feedback without the generation prompt, which SGLang's /tokenize
      // cannot: a local template (policy.tokenizer) is needed; the default max_turns is 3.
      {"sglang_debug_turns_need_a_tokenizer", "policy:\n  flavour: sglang\n",
       "case.yaml:2: policy.tokenizer: needed with policy.flavour sglang and rollout.max_turns > 1 "
       "(got 3)"},
      {"sglang_debug_turns_need_a_tokenizer_max_turns_set",
       "rollout:\n  max_turns: 2\npolicy:\n  flavour: sglang\n  endpoints: [http://a:1]\n",
       "case.yaml:4: policy.tokenizer: needed with policy.flavour sglang and rollout.max_turns > 1 "
       "(got 2)"},
      {"no_endpoint_vllm", "policy:\n  endpoints: []\n",
       "case.yaml:2: policy.endpoints: must list at least one URL when policy.flavour is vllm"},
      {"no_endpoint_sglang", "policy:\n  flavour: sglang\n  endpoints: []\n  tokenizer: t\n",
       "case.yaml:3: policy.endpoints: must list at least one URL when policy.flavour is sglang"},
      {"bad_learner_device", "learner:\n  device: gpu0\n",
       "case.yaml:2: learner.device: must be cpu, cuda or cuda:N, got 'gpu0'"},
      {"world_size_zero", "learner:\n  world_size: 0\n",
       "case.yaml:2: learner.world_size: must be >= 1, got 0"},
      {"world_size_needs_torch", "learner:\n  world_size: 2\n",
       "case.yaml:2: learner.world_size: must be 1 unless learner.kind is torch (only the torch "
       "learner trains data-parallel), got 2"},
      {"devices_wrong_length",
       "learner:\n  kind: torch\n  model_path: m\n  world_size: 2\n  devices: [cpu, cpu, cpu]\n",
       "case.yaml:5: learner.devices: must list one device per rank, learner.world_size = 2 "
       "entries, got 3"},
      {"devices_rank_zero_off_learner_device",
       "learner:\n  kind: torch\n  model_path: m\n  world_size: 2\n  devices: [cuda:0, cuda:1]\n",
       "case.yaml:5: learner.devices: must start with learner.device (cpu): rank 0 trains there, "
       "got cuda:0"},
      {"devices_bad_entry",
       "learner:\n  kind: torch\n  model_path: m\n  world_size: 2\n  devices: [cpu, gpu1]\n",
       "case.yaml:5: learner.devices: [1] must be cpu, cuda or cuda:N, got 'gpu1'"},
      {"bad_init_preset", "learner:\n  init_preset: huge\n",
       "case.yaml:2: learner.init_preset: must be tiny, small or empty (the model must exist), got "
       "'huge'"},
      {"weight_sync_unknown", "policy:\n  weight_sync: rsync\n",
       "case.yaml:2: policy.weight_sync: expected one of auto, disk, in_memory, nccl, ipc, got "
       "'rsync'"},
      {"weight_sync_misspelt", "policy:\n  weight_sync: in-memory\n",
       "case.yaml:2: policy.weight_sync: expected one of auto, disk, in_memory, nccl, ipc, got "
       "'in-memory'; did you mean 'in_memory'?"},
      {"weight_sync_null", "policy:\n  weight_sync:\n",
       "case.yaml:2: policy.weight_sync: expected one of auto, disk, in_memory, nccl, ipc, got "
       "nothing (null)"},
      // Deltas are folders: auto's in-memory choice for the embedded server has none to send.
      {"weight_sync_delta_auto_embedded",
       "policy:\n  flavour: embedded\n  model: m\n  weight_sync_delta: bfloat16\n"
       "learner:\n  kind: torch\n  model_path: m\n",
       "case.yaml:4: policy.weight_sync_delta: applies to policy.weight_sync disk (delta folders a "
       "server loads) and nccl (changed tensors broadcast), got in_memory (auto's choice for the "
       "embedded server)"},
      {"weight_sync_delta_old_empty_embedded",
       "policy:\n  flavour: embedded\n  model: m\n  weight_sync: \"\"\n  weight_sync_delta: "
       "bfloat16\nlearner:\n  kind: torch\n  model_path: m\n",
       "case.yaml:5: policy.weight_sync_delta: applies to policy.weight_sync disk (delta folders a "
       "server loads) and nccl (changed tensors broadcast), got in_memory (auto's choice for the "
       "embedded server)"},
      {"weight_sync_delta_in_memory",
       "policy:\n  flavour: embedded\n  model: m\n  weight_sync: in_memory\n"
       "  weight_sync_delta: float32\nlearner:\n  kind: torch\n  model_path: m\n",
       "case.yaml:5: policy.weight_sync_delta: applies to policy.weight_sync disk (delta folders a "
       "server loads) and nccl (changed tensors broadcast), got in_memory"},
      // In-flight weight updates need a sync that can pause: the plans that load a folder.
      {"inflight_updates_record_learner",
       "policy:\n  flavour: embedded\n  inflight_updates: true\n",
       "case.yaml:3: policy.inflight_updates: needs learner.kind torch (only its weights are "
       "synced to the servers)"},
      {"inflight_updates_transfer_engine",
       "policy:\n  flavour: vllm\n  inflight_updates: true\n  weight_sync: nccl\nlearner:\n"
       "  kind: torch\n  model_path: m\n",
       "case.yaml:3: policy.inflight_updates: needs policy.weight_sync disk or in_memory (the "
       "plans that load a folder and can pause around it), got nccl"},
      {"inflight_updates_bad", "policy:\n  inflight_updates: maybe\n",
       "case.yaml:2: policy.inflight_updates:"},
      {"weight_sync_ipc_needs_torch", "policy:\n  weight_sync: ipc\n",
       "case.yaml:2: policy.weight_sync: ipc needs learner.kind torch"},
      {"weight_sync_ipc_needs_vllm",
       "policy:\n  flavour: sglang\n  weight_sync: ipc\n  tokenizer: t\nlearner:\n  kind: torch\n"
       "  model_path: m\n"
       "  device: cuda\n",
       "case.yaml:3: policy.weight_sync: ipc needs policy.flavour vllm"},
      {"weight_sync_ipc_needs_cuda",
       "policy:\n  weight_sync: ipc\nlearner:\n  kind: torch\n  model_path: m\n",
       "case.yaml:2: policy.weight_sync: ipc needs learner.device cuda (the weights are shared in "
       "GPU memory), got cpu"},
      {"weight_sync_ipc_one_endpoint",
       "policy:\n  weight_sync: ipc\n  endpoints: [http://127.0.0.1:1, http://127.0.0.1:2]\n"
       "learner:\n  kind: torch\n  model_path: m\n  device: cuda\n",
       "case.yaml:2: policy.weight_sync: ipc drives exactly one server (on the learner's host), "
       "got "
       "2 endpoints"},
      {"weight_sync_ipc_same_host",
       "policy:\n  weight_sync: ipc\n  endpoints: [http://gpu-host:8000]\n"
       "learner:\n  kind: torch\n  model_path: m\n  device: cuda:1\n",
       "case.yaml:2: policy.weight_sync: ipc needs the server on this host: its endpoint must be a "
       "loopback address (127.0.0.1, localhost, [::1]), got http://gpu-host:8000"},
      {"weight_sync_nccl_needs_torch", "policy:\n  weight_sync: nccl\n",
       "case.yaml:2: policy.weight_sync: nccl needs learner.kind torch"},
      {"weight_sync_nccl_needs_vllm",
       "policy:\n  flavour: sglang\n  weight_sync: nccl\n  tokenizer: t\nlearner:\n  kind: torch\n"
       "  model_path: m\n",
       "case.yaml:3: policy.weight_sync: nccl needs policy.flavour vllm"},
      {"weight_sync_nccl_one_endpoint",
       "policy:\n  weight_sync: nccl\n  endpoints: [http://a:1, http://b:1]\nlearner:\n  kind: "
       "torch\n  model_path: m\n",
       "case.yaml:2: policy.weight_sync: nccl drives exactly one server (one broadcast group per "
       "run), got 2 endpoints"},
      {"weight_sync_in_memory_needs_embedded", "policy:\n  weight_sync: in_memory\n",
       "case.yaml:2: policy.weight_sync: in_memory needs policy.flavour embedded with a "
       "policy.model"},
      {"stream_not_a_boolean", "policy:\n  stream: yes\n",
       "case.yaml:2: policy.stream: expected true or false, got 'yes'"},
      {"torch_without_model", "learner:\n  kind: torch\n",
       "case.yaml:2: learner.model_path: is required when learner.kind is torch"},
      {"mini_batches_above_rollouts", "learner:\n  mini_batches: 1000\n",
       "case.yaml:2: learner.mini_batches: must be <= data.batch_size * rollout.group_size (256 "
       "rollouts per "
       "step), got 1000"},
      {"barrier_with_staleness", "schedule:\n  mode: barrier\n  max_staleness: 1\n",
       "case.yaml:3: schedule.max_staleness: must be 0 when schedule.mode is barrier"},
      {"partial_with_barrier", "schedule:\n  mode: barrier\n  partial:\n    over_provision: 2\n",
       "case.yaml:4: schedule.partial.over_provision: must be 0 when schedule.mode is barrier"},
      {"partial_carry_above_over_provision",
       "schedule:\n  partial:\n    over_provision: 2\n    max_carry: 3\n",
       "case.yaml:4: schedule.partial.max_carry: must be <= schedule.partial.over_provision (2), "
       "got 3"},
      {"partial_carry_without_over_provision", "schedule:\n  partial:\n    max_carry: 1\n",
       "case.yaml:3: schedule.partial.max_carry: must be <= schedule.partial.over_provision (0), "
       "got 1"},
      {"partial_negative", "schedule:\n  partial:\n    over_provision: -1\n",
       "case.yaml:3: schedule.partial.over_provision:"},
      {"partial_with_retry",
       "gate:\n  retry:\n    buffer: 4\nschedule:\n  partial:\n    over_provision: 2\n",
       "schedule.partial.over_provision: must be 0 with gate.retry on"},
      {"validation_set_and_fraction",
       "data:\n  validation: val.jsonl\n  validation_fraction: 0.1\n",
       "case.yaml:3: data.validation_fraction: must be 0 when data.validation names a validation "
       "set"},
      {"simulation_tasks_below_batch", "simulation:\n  tasks: 8\n",
       "case.yaml:2: simulation.tasks: must be >= data.batch_size (32): a step samples that many "
       "distinct tasks, "
       "got 8"},

      // One mistake, one message: checks whose inputs already failed are skipped.
      {"failed_input_skips_checks",
       "rollout:\n  group_size: x\ngate:\n  unit: count\n  tau_min: 2\n  tau_max: 8\n",
       "case.yaml:2: rollout.group_size: expected an integer, got 'x'", 1},
      {"duplicate_skips_checks", "gate:\n  tau_min: 0.9\n  tau_min: 0.2\n  tau_max: 0.5\n",
       "case.yaml:3: gate.tau_min: duplicate key (first set at line 2)", 1},
  };
  return cases;
}

class config_error_test : public ::testing::TestWithParam<error_case> {};

TEST_P(config_error_test, ReportsFileLineKeyAndProblem) {
  const error_case& c = GetParam();
  const auto parsed = parse_config(c.yaml, "case.yaml");
  ASSERT_FALSE(parsed.ok()) << "accepted:\n" << c.yaml;
  EXPECT_THAT(parsed.err().message, HasSubstr(c.expected));
  EXPECT_EQ(line_count(parsed.err().message), c.problems) << parsed.err().message;
}

INSTANTIATE_TEST_SUITE_P(Table, config_error_test, ::testing::ValuesIn(error_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(ConfigErrors, CaseNamesAreUnique) {
  std::set<std::string> names;
  for (const auto& c : error_cases()) {
    EXPECT_TRUE(names.insert(c.name).second) << c.name;
  }
}

TEST(ConfigErrors, CollectsEveryProblemSortedByLine) {
  const std::string yaml =
      "rollout:\n"          // 1
      "  group_size: 1\n"   // 2
      "  max_turnz: 3\n"    // 3
      "gate:\n"             // 4
      "  tau_min: abc\n"    // 5
      "learner:\n"          // 6
      "  lr: -1\n"          // 7
      "policy:\n"           // 8
      "  endpoints: []\n";  // 9
  const auto parsed = parse_config(yaml, "configs/x.yaml");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(
      parsed.err().message,
      "configs/x.yaml:2: rollout.group_size: must be >= 2 (a group needs peers to compare with), "
      "got 1\n"
      "configs/x.yaml:3: rollout.max_turnz: unknown key; did you mean 'max_turns'?\n"
      "configs/x.yaml:5: gate.tau_min: expected a number, got 'abc'\n"
      "configs/x.yaml:7: learner.lr: must be > 0 (a zero rate trains nothing; use learner.kind: "
      "record), got -1\n"
      "configs/x.yaml:9: policy.endpoints: must list at least one URL when policy.flavour is vllm");
}

// ------------------------------------------------------------------------------------------------
// Values: YAML text -> the value of one key, as render_config writes it.

struct value_case {
  std::string yaml;
  std::string key;
  std::string expected;
};

std::ostream& operator<<(std::ostream& os, const value_case& c) {
  return os << c.key << " <- " << c.yaml;
}

class config_value_test : public ::testing::TestWithParam<value_case> {};

TEST_P(config_value_test, ParsesToValue) {
  const value_case& c = GetParam();
  const auto parsed = parse_config(c.yaml, "case.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.err().message;
  const auto value = config_value(*parsed, c.key);
  ASSERT_TRUE(value.has_value()) << c.key;
  EXPECT_EQ(*value, c.expected);
}

INSTANTIATE_TEST_SUITE_P(
    Table, config_value_test,
    ::testing::Values(
        value_case{"", "rollout.group_size", "8"},
        // policy.weight_sync: auto by default; "", as configs from before the enum spell it, is
        // auto too and is written back as auto.
        value_case{"", "policy.weight_sync", "auto"},
        value_case{"policy:\n  weight_sync: \"\"\n", "policy.weight_sync", "auto"},
        value_case{"policy:\n  weight_sync: ''\n", "policy.weight_sync", "auto"},
        value_case{"policy:\n  weight_sync: auto\n", "policy.weight_sync", "auto"},
        value_case{"policy:\n  weight_sync: disk\n", "policy.weight_sync", "disk"},
        value_case{"policy:\n  flavour: embedded\n  model: m\n  weight_sync: in_memory\n"
                   "learner:\n  kind: torch\n  model_path: m\n",
                   "policy.weight_sync", "in_memory"},
        value_case{"policy:\n  weight_sync: nccl\nlearner:\n  kind: torch\n  model_path: m\n",
                   "policy.weight_sync", "nccl"},
        value_case{"policy:\n  weight_sync: disk\n  weight_sync_delta: bfloat16\n"
                   "learner:\n  kind: torch\n  model_path: m\n",
                   "policy.weight_sync_delta", "\"bfloat16\""},
        // policy.weight_sync ipc: a torch learner on cuda, one server on a loopback address.
        value_case{"policy:\n  weight_sync: ipc\n  endpoints: [\"http://127.0.0.1:8000\"]\n"
                   "learner:\n  kind: torch\n  model_path: m\n  device: cuda\n",
                   "policy.weight_sync", "ipc"},
        value_case{"policy:\n  weight_sync: ipc\n  endpoints: [\"http://localhost:8000\"]\n"
                   "learner:\n  kind: torch\n  model_path: m\n  device: cuda:0\n",
                   "policy.weight_sync", "ipc"},
        value_case{"policy:\n  weight_sync: ipc\n  endpoints: [\"http://[::1]:8000\"]\n"
                   "learner:\n  kind: torch\n  model_path: m\n  device: cuda\n",
                   "policy.weight_sync", "ipc"},
        // SGLang with debug turns and a local template; SGLang without debug turns needs none.
        value_case{"policy:\n  flavour: sglang\n  tokenizer: models/policy\n", "policy.flavour",
                   "sglang"},
        value_case{"rollout:\n  max_turns: 1\ngate:\n  policy: none\npolicy:\n  flavour: sglang\n",
                   "policy.flavour", "sglang"},
        value_case{"# only a comment\n", "data.batch_size", "32"},
        value_case{"gate:\n", "gate.policy", "dcp"},
        value_case{"rollout:\n  group_size: 4\n", "rollout.group_size", "4"},
        value_case{"rollout:\n  group_size: +4\n", "rollout.group_size", "4"},
        value_case{"gate:\n  policy: dcp_adaptive\n", "gate.policy", "dcp_adaptive"},
        value_case{"gate: {policy: full, unit: count, tau_min: 2, tau_max: 8}\n", "gate.unit",
                   "count"},
        value_case{"gate:\n  unit: count\n  tau_min: 2\n  tau_max: 6\n", "gate.tau_min", "2.0"},
        value_case{"gate:\n  unit: count\n  tau_min: 0\n  tau_max: 8\n", "gate.tau_max", "8.0"},
        value_case{"learner:\n  lr: 3e-6\n", "learner.lr", "3.0e-06"},
        value_case{"learner:\n  lr: 0.000001\n", "learner.lr", "1.0e-06"},
        value_case{"learner:\n  betas: [0.8, 0.95]\n", "learner.betas", "[0.8, 0.95]"},
        value_case{"learner:\n  betas:\n    - 0.5\n    - 0.9\n", "learner.betas", "[0.5, 0.9]"},
        value_case{"learner:\n  loss_aggregation: token_mean\n", "learner.loss_aggregation",
                   "token_mean"},
        value_case{"learner:\n  kind: torch\n  model_path: models/x\n", "learner.model_path",
                   "\"models/x\""},
        value_case{"reward:\n  kind: rank_speed\n  speed_tie: 0.1\nverifier:\n  timing_reps: 20\n",
                   "reward.kind", "rank_speed"},
        value_case{"reward:\n  kind: rank_speed\n  speed_tie: 0.1\nverifier:\n  timing_reps: 20\n",
                   "reward.speed_tie", "0.1"},
        value_case{"reward:\n  kind: binary\n  speed_bonus:\n    weight: 0.2\n    clip: 1\n"
                   "verifier:\n  timing_reps: 20\n",
                   "reward.speed_bonus.clip", "1.0"},
        value_case{"reward:\n  kind: static\n  static_rewards: [1, 0.6, 0.3]\n",
                   "reward.static_rewards", "[1.0, 0.6, 0.3]"},
        value_case{"reward:\n  kind: static\n  static_rewards: [1]\nrollout:\n  max_turns: "
                   "1\ngate:\n  policy: none\n",
                   "reward.kind", "static"},
        value_case{"policy:\n  endpoints: [http://10.0.0.1:8000, 'https://[::1]:30000']\n",
                   "policy.endpoints", "[\"http://10.0.0.1:8000\", \"https://[::1]:30000\"]"},
        value_case{"policy:\n  endpoints: [http://gpu-node.local]\n", "policy.endpoints",
                   "[\"http://gpu-node.local\"]"},
        value_case{"policy:\n  flavour: embedded\n  endpoints: []\n", "policy.endpoints", "[]"},
        value_case{"rollout:\n  sampling:\n    stop: [\"</code>\", 'END']\n",
                   "rollout.sampling.stop", "[\"</code>\", \"END\"]"},
        value_case{"rollout:\n  sampling:\n    stop_token_ids: [151643, 151645]\n",
                   "rollout.sampling.stop_token_ids", "[151643, 151645]"},
        value_case{"rollout:\n  sampling:\n    top_p: &p 0.9\n  validation:\n    sampling:\n      "
                   "top_p: *p\n",
                   "rollout.validation.sampling.top_p", "0.9"},
        value_case{"rollout:\n  validation:\n    every: 0\n", "rollout.validation.every", "0"},
        value_case{"experiment:\n  seed: 9223372036854775807\n", "experiment.seed",
                   "9223372036854775807"},
        value_case{"experiment:\n  name: \"123\"\n", "experiment.name", "\"123\""},
        value_case{"experiment:\n  name: 42\n", "experiment.name", "\"42\""},
        value_case{"experiment:\n  log_level: debug\n", "experiment.log_level", "debug"},
        value_case{"data:\n  task_kinds: [cuda, cpp]\n", "data.task_kinds", "[\"cuda\", \"cpp\"]"},
        value_case{"verifier:\n  cache_max_bytes: 0\n", "verifier.cache_max_bytes", "0"},
        value_case{"verifier:\n  profile: all_compiled\n", "verifier.profile", "all_compiled"},
        value_case{"verifier:\n  profile: passing\n", "verifier.profile", "passing"},
        value_case{"verifier:\n  profile_max_kernels: 4\n", "verifier.profile_max_kernels", "4"},
        value_case{"verifier:\n  profile_tool: events\n", "verifier.profile_tool", "events"},
        value_case{"verifier:\n  profile_tool: ncu\n", "verifier.profile_tool", "ncu"},
        value_case{"verifier:\n  kernelbench_standby_depth: 2\n",
                   "verifier.kernelbench_standby_depth", "2"},
        value_case{"verifier:\n  kernelbench_scratch_bytes: 21474836480\n",
                   "verifier.kernelbench_scratch_bytes", "21474836480"},
        value_case{"verifier:\n  profile_timeout_s: 30\n", "verifier.profile_timeout_s", "30.0"},
        value_case{"verifier:\n  ncu: /opt/nsight/ncu\n", "verifier.ncu", "\"/opt/nsight/ncu\""},
        value_case{"verifier:\n  cuda_arch: sm_100a\n", "verifier.cuda_arch", "\"sm_100a\""},
        value_case{"verifier:\n  cuda_arch: compute_80\n", "verifier.cuda_arch", "\"compute_80\""},
        value_case{"verifier:\n  python: /opt/venv/bin/python3\n", "verifier.python",
                   "\"/opt/venv/bin/python3\""},
        value_case{"verifier:\n  nodes: [\"gpu1:4242\", \"[::1]:4242\"]\n", "verifier.nodes",
                   "[\"gpu1:4242\", \"[::1]:4242\"]"},
        value_case{"schedule:\n  max_staleness: 2\n", "schedule.max_staleness", "2"},
        value_case{"schedule:\n  max_staleness: 1\n  partial:\n    over_provision: 4\n    "
                   "max_carry: 2\n",
                   "schedule.partial.max_carry", "2"},
        value_case{"simulation:\n  tasks: 32\n", "simulation.tasks", "32"},
        value_case{"advantage:\n  kind: mean_only\n  gamma: 1\n", "advantage.gamma", "1.0"}));

TEST(ConfigDefaults, EmptyTextGivesThePapersSetting) {
  const auto parsed = parse_config("", "empty.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.err().message;
  const experiment_config& c = *parsed;
  EXPECT_TRUE(c == experiment_config{});
  EXPECT_EQ(c.data.batch_size, 32);
  EXPECT_EQ(c.rollout.group_size, 8);
  EXPECT_EQ(c.rollout.max_turns, 3);
  EXPECT_EQ(c.rollout.sampling.temperature, 1.0);
  EXPECT_EQ(c.rollout.sampling.top_k, -1);
  EXPECT_EQ(c.rollout.sampling.top_p, 0.95);
  EXPECT_EQ(c.rollout.validation.sampling.temperature, 0.7);
  EXPECT_EQ(c.rollout.validation.sampling.top_k, 20);
  EXPECT_EQ(c.rollout.validation.sampling.top_p, 0.95);
  EXPECT_EQ(c.learner.lr, 1e-6);
  EXPECT_EQ(c.learner.weight_decay, 0.1);
  EXPECT_EQ(c.learner.betas, (std::array<double, 2>{0.9, 0.999}));
  EXPECT_EQ(c.learner.loss.clip_low, 0.2);
  EXPECT_EQ(c.learner.loss.clip_high, 0.28);
  EXPECT_EQ(c.learner.loss.kl_coef, 0.0);
  EXPECT_EQ(c.learner.loss.aggregation, loss_aggregation::seq_mean_token_mean);
  EXPECT_EQ(c.learner.mini_batches, 1);
  EXPECT_EQ(c.gate.policy, gate_policy::dcp);
  EXPECT_EQ(c.reward.kind, reward_kind::rank);
  EXPECT_EQ(c.advantage.kind, advantage_kind::grpo);
  EXPECT_EQ(c.policy.endpoints, std::vector<std::string>{"http://127.0.0.1:8000"});
  EXPECT_EQ(c.verifier.cuda_arch, "sm_90a");
  EXPECT_EQ(c.verifier.profile, profile_mode::off);  // no profiler in the loop unless asked for
  EXPECT_EQ(c.verifier.profile_tool, profile_tool::automatic);
  EXPECT_EQ(c.schedule.max_staleness, 0);
  EXPECT_EQ(c.schedule.partial_over_provision, 0);  // partial rollouts off
  EXPECT_TRUE(validate_config(c).ok());
}

// Optimisation turns (issue 31) are off unless asked for, and read from gate.optimise.
TEST(ConfigDefaults, OptimisationTurnsOffByDefaultAndParsed) {
  const experiment_config base;
  EXPECT_EQ(base.gate.optimise.speedup, 0.0);
  EXPECT_EQ(base.gate.optimise.max_turns, 1);
  auto parsed = parse_config(
      "gate:\n  optimise:\n    speedup: 1.5\n    max_turns: 2\nverifier:\n  timing_reps: 5\n",
      "case.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.err().message;
  EXPECT_EQ(parsed->gate.optimise.speedup, 1.5);
  EXPECT_EQ(parsed->gate.optimise.max_turns, 2);
}

// Training on optimisation turns is off unless asked for, and accepted with a reward that pays
// for speed: rank_speed, or a speed bonus on a scalar reward.
TEST(ConfigDefaults, OptimisationTrainingOffByDefaultAndAcceptedWithASpeedReward) {
  EXPECT_FALSE(experiment_config{}.gate.optimise.train);
  for (const std::string reward : {"reward:\n  kind: rank_speed\n",
                                   "reward:\n  kind: binary\n  speed_bonus:\n    weight: 0.1\n"}) {
    SCOPED_TRACE(reward);
    auto parsed = parse_config("gate:\n  optimise:\n    speedup: 1.2\n    train: true\n" + reward +
                                   "verifier:\n  timing_reps: 5\n",
                               "case.yaml");
    ASSERT_TRUE(parsed.ok()) << parsed.err().message;
    EXPECT_TRUE(parsed->gate.optimise.train);
  }
}

// Buffered retry (issue 35) is off unless asked for, read from gate.retry and compared.
TEST(ConfigDefaults, RetryOffByDefaultParsedAndCompared) {
  const experiment_config base;
  EXPECT_EQ(base.gate.retry.buffer, 0U);
  EXPECT_FALSE(retry_enabled(base.gate.retry));
  auto parsed = parse_config(
      "gate:\n  retry:\n    buffer: 16\n    delay: 2\n    attempts: 3\n    extra_rollouts: 4\n"
      "    extra_turns: 1\n",
      "case.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.err().message;
  EXPECT_EQ(parsed->gate.retry.buffer, 16U);
  EXPECT_EQ(parsed->gate.retry.delay, 2);
  EXPECT_EQ(parsed->gate.retry.attempts, 3);
  EXPECT_EQ(parsed->gate.retry.extra_rollouts, 4);
  EXPECT_EQ(parsed->gate.retry.extra_turns, 1);
  EXPECT_TRUE(validate_config(*parsed).ok());
  experiment_config other = *parsed;
  other.gate.retry.extra_turns = 0;
  EXPECT_FALSE(other == *parsed);
}

TEST(ConfigDefaults, OffPolicyOffByDefaultParsedAndCompared) {
  const experiment_config base;
  EXPECT_EQ(base.learner.loss.offpolicy.mode, offpolicy_mode::off);
  EXPECT_EQ(base.learner.loss.offpolicy.max_staleness, -1);
  auto parsed = parse_config(
      "learner:\n  offpolicy:\n    mode: truncate_token\n    low: 0.25\n    high: 3\n"
      "    max_staleness: 2\n",
      "case.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.err().message;
  EXPECT_EQ(parsed->learner.loss.offpolicy.mode, offpolicy_mode::truncate_token);
  EXPECT_EQ(parsed->learner.loss.offpolicy.low, 0.25);
  EXPECT_EQ(parsed->learner.loss.offpolicy.high, 3.0);
  EXPECT_EQ(parsed->learner.loss.offpolicy.max_staleness, 2);
  EXPECT_TRUE(validate_config(*parsed).ok());
  const auto again = parse_config(render_config(*parsed), "again.yaml");
  ASSERT_TRUE(again.ok()) << again.err().message;
  EXPECT_TRUE(*again == *parsed);
  experiment_config other = *parsed;
  other.learner.loss.offpolicy.low = 0.5;
  EXPECT_FALSE(other == *parsed);
}

// reward.echo is read, validated and compared: two configs that differ only in it are not equal.
TEST(ConfigDefaults, PrimeEchoKindAndItsEcho) {
  const auto parsed = parse_config("reward:\n  kind: prime_echo\n  echo: 0.25\n", "case.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.err().message;
  EXPECT_EQ(parsed->reward.kind, reward_kind::prime_echo);
  EXPECT_EQ(parsed->reward.echo, 0.25);
  EXPECT_TRUE(validate_config(*parsed).ok());
  EXPECT_EQ(experiment_config{}.reward.echo, 0.5);
  experiment_config other = *parsed;
  other.reward.echo = 0.75;
  EXPECT_FALSE(other == *parsed);
}

TEST(ConfigDefaults, TypedFieldsOfAFullSection) {
  const auto parsed = parse_config(
      "gate:\n  policy: dcp_adaptive\n  unit: count\n  tau_min: 3\n  tau_max: 7\n  "
      "adaptive_window: 64\n"
      "  adaptive_min_groups: 16\n"
      "reward:\n  kind: static\n  static_rewards: [1.0, 0.4, 0.2]\n  failure_reward: -0.5\n"
      "policy:\n  flavour: sglang\n  endpoints: [http://a:30000, http://b:30000]\n  max_in_flight: "
      "16\n  tokenizer: models/policy\n",
      "case.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.err().message;
  EXPECT_EQ(parsed->gate.policy, gate_policy::dcp_adaptive);
  EXPECT_EQ(parsed->gate.unit, threshold_unit::count);
  EXPECT_EQ(parsed->gate.tau_min, 3.0);
  EXPECT_EQ(parsed->gate.tau_max, 7.0);
  EXPECT_EQ(parsed->gate.adaptive_window, 64U);
  EXPECT_EQ(parsed->gate.adaptive_min_groups, 16U);
  EXPECT_EQ(parsed->reward.kind, reward_kind::static_scalar);
  EXPECT_EQ(parsed->reward.static_rewards, (std::vector<double>{1.0, 0.4, 0.2}));
  EXPECT_EQ(parsed->reward.failure_reward, -0.5);
  EXPECT_EQ(parsed->policy.flavour, server_flavour::sglang);
  EXPECT_EQ(parsed->policy.endpoints,
            (std::vector<std::string>{"http://a:30000", "http://b:30000"}));
  EXPECT_EQ(parsed->policy.max_in_flight, 16);
}

// ------------------------------------------------------------------------------------------------
// Rendering and the key reference.

experiment_config customised() {
  experiment_config c;
  c.experiment.name = "odd-name_1.0";
  c.experiment.seed = 123456789012345ULL;
  c.experiment.run_dir = "runs/with \"quotes\" and: colons # and hashes";
  c.experiment.log_level = log_verbosity::trace;
  c.data.train = "data/train.jsonl";
  c.data.validation_fraction = 0.1;
  c.data.task_kinds = {"cuda", "cpp"};
  c.rollout.group_size = 16;
  c.rollout.max_turns = 4;
  c.rollout.sampling.temperature =
      0.1 + 0.2;  // not exactly 0.3: the shortest exact form must survive
  c.rollout.sampling.seed = 99;
  c.rollout.sampling.stop = {"\n\n", "```", "'single'", "tab\there", "ünïcode"};
  c.rollout.sampling.stop_token_ids = {0, 151645};
  c.rollout.validation.n = 4;
  c.gate.policy = gate_policy::dcp_adaptive;
  c.gate.unit = threshold_unit::count;
  c.gate.tau_min = 4;
  c.gate.tau_max = 15;
  c.gate.adaptive_low_quantile = 1.0 / 3.0;
  c.reward.kind = reward_kind::static_scalar;
  c.reward.static_rewards = {1.0, 0.5, 0.25, 0.125};
  c.reward.failure_reward = -1e-300;
  c.advantage.kind = advantage_kind::mean_only;
  c.advantage.epsilon = 1e-12;
  c.learner.kind = learner_kind::torch;
  c.learner.model_path = "models/policy";
  c.learner.lr = 2.5e-7;
  c.learner.betas = {0.85, 0.98};
  c.learner.loss.aggregation = loss_aggregation::seq_mean_token_sum;
  c.policy.flavour = server_flavour::sglang;
  c.policy.tokenizer = "models/policy";
  c.policy.endpoints = {"http://a:30000", "https://b.example"};
  c.policy.request_timeout_s = 1e9;
  c.verifier.cache_max_bytes = std::int64_t{1} << 50;
  c.verifier.nodes = {"gpu1:4242"};
  c.schedule.max_staleness = 1;
  c.simulation.tasks = 1000;
  return c;
}

TEST(ConfigRender, RoundTripsToAnEqualConfig) {
  for (const experiment_config& original : {experiment_config{}, customised()}) {
    ASSERT_TRUE(validate_config(original).ok()) << validate_config(original).err().message;
    const std::string text = render_config(original);
    const auto parsed = parse_config(text, "rendered.yaml");
    ASSERT_TRUE(parsed.ok()) << parsed.err().message << "\n" << text;
    EXPECT_TRUE(*parsed == original) << text;
    EXPECT_EQ(render_config(*parsed), text);
  }
}

TEST(ConfigRender, EqualityNoticesEverySection) {
  const experiment_config base;
  std::vector<experiment_config> changed(20, base);
  changed[0].experiment.steps = 1;
  changed[1].data.batch_size = 1;
  changed[2].rollout.validation.sampling.top_k = 1;
  changed[3].gate.adaptive_min_groups = 1;
  changed[4].reward.failure_reward = 1;
  changed[5].advantage.gamma = 1;
  changed[6].learner.betas[1] = 0.5;
  changed[7].policy.retries = 0;
  changed[8].verifier.nodes = {"a:1"};
  changed[9].schedule.mode = schedule_mode::barrier;
  changed[10].simulation.skill_gain = 0;
  changed[11].reward.speed_tie = 0.5;
  changed[12].reward.speed_bonus.weight = 0.5;
  changed[13].reward.speed_bonus.clip = 0.5;
  changed[14].gate.probe_fraction = 0.5;
  changed[15].gate.optimise.speedup = 1.2;
  changed[16].gate.optimise.max_turns = 2;
  changed[17].gate.optimise.train = true;
  changed[18].reward.structural.weights[3] = 0.5;
  changed[19].reward.structural.bound = 0.5;
  for (const auto& c : changed) {
    EXPECT_FALSE(c == base) << render_config(c);
  }
}

TEST(ConfigRender, NumbersAreYamlFloats) {
  const std::string text = render_config(experiment_config{});
  EXPECT_THAT(text, HasSubstr("\n    temperature: 1.0\n"));
  EXPECT_THAT(text, HasSubstr("\n  lr: 1.0e-06\n"));
  EXPECT_THAT(text, HasSubstr("\n  betas: [0.9, 0.999]\n"));
  EXPECT_THAT(text, HasSubstr("\n  group_size: 8\n"));
  EXPECT_THAT(text, HasSubstr("\n  cuda_arch: \"sm_90a\"\n"));
}

TEST(ConfigKeys, EveryRenderedKeyIsDocumentedAndViceVersa) {
  const auto docs = config_keys();
  const auto rendered = rendered_keys(render_config(experiment_config{}));
  std::set<std::string> documented;
  for (const auto& doc : docs) {
    EXPECT_TRUE(documented.insert(doc.key).second) << "documented twice: " << doc.key;
    EXPECT_FALSE(doc.type.empty()) << doc.key;
    EXPECT_FALSE(doc.meaning.empty()) << doc.key;
    EXPECT_EQ(doc.meaning.find('\n'), std::string::npos) << doc.key;
    ASSERT_TRUE(rendered.contains(doc.key)) << "documented but not rendered: " << doc.key;
    EXPECT_EQ(rendered.at(doc.key), doc.default_value) << doc.key;
  }
  for (const auto& [key, value] : rendered) {
    EXPECT_TRUE(documented.contains(key)) << "rendered but not documented: " << key;
  }
  EXPECT_EQ(rendered.size(), docs.size());
}

// "learner:\n  offpolicy:\n    mode: VALUE\n" for key learner.offpolicy.mode.
std::string yaml_setting(const std::string& dotted_key, const std::string& value) {
  std::string out;
  std::string indent;
  std::stringstream parts(dotted_key);
  std::vector<std::string> names;
  for (std::string part; std::getline(parts, part, '.');) {
    names.push_back(part);
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    out += indent + names[i] + ":" + (i + 1 == names.size() ? " " + value + "\n" : "\n");
    indent += "  ";
  }
  return out;
}

// An enum key documents, accepts and lists exactly the names of its enum's table (common/enums):
// every value is read (a cross-key check may still refuse the combination, but never the name)
// and written back by name, and an unknown name is refused with the whole table.
template <class E>
void expect_key_takes_its_table(const std::string& key, std::set<std::string>& checked) {
  SCOPED_TRACE(key);
  checked.insert(key);
  const std::string names = enum_names::valid_names<E>();
  const auto docs = config_keys();
  const auto doc =
      std::find_if(docs.begin(), docs.end(), [&](const auto& d) { return d.key == key; });
  ASSERT_NE(doc, docs.end());
  EXPECT_EQ(doc->type, "one of: " + names);
  for (const E value : enum_names::values<E>()) {
    const auto parsed = parse_config(yaml_setting(key, to_string(value)), "case.yaml");
    if (parsed) {
      EXPECT_EQ(config_value(*parsed, key), to_string(value));
    } else {
      EXPECT_THAT(parsed.err().message, Not(HasSubstr(key + ": expected one of")));
    }
  }
  const auto bad = parse_config(yaml_setting(key, "no_such_value"), "case.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.err().message,
              HasSubstr(key + ": expected one of " + names + ", got 'no_such_value'"));
}

TEST(ConfigKeys, EveryEnumKeyTakesItsNameTable) {
  std::set<std::string> checked;
  expect_key_takes_its_table<log_verbosity>("experiment.log_level", checked);
  expect_key_takes_its_table<gate_policy>("gate.policy", checked);
  expect_key_takes_its_table<threshold_unit>("gate.unit", checked);
  expect_key_takes_its_table<reward_kind>("reward.kind", checked);
  expect_key_takes_its_table<advantage_kind>("advantage.kind", checked);
  expect_key_takes_its_table<learner_kind>("learner.kind", checked);
  expect_key_takes_its_table<loss_aggregation>("learner.loss_aggregation", checked);
  expect_key_takes_its_table<offpolicy_mode>("learner.offpolicy.mode", checked);
  expect_key_takes_its_table<server_flavour>("policy.flavour", checked);
  expect_key_takes_its_table<schedule_mode>("schedule.mode", checked);
  expect_key_takes_its_table<weight_sync_method>("policy.weight_sync", checked);
  expect_key_takes_its_table<profile_mode>("verifier.profile", checked);
  expect_key_takes_its_table<profile_tool>("verifier.profile_tool", checked);
  // A new enum key is listed here and checked like the others.
  for (const auto& doc : config_keys()) {
    if (doc.type.starts_with("one of: ")) {
      EXPECT_TRUE(checked.contains(doc.key)) << doc.key << ": an enum key this test does not check";
    }
  }
}

TEST(ConfigKeys, MarkdownHasOneRowPerKey) {
  const std::string table = config_reference_markdown();
  const auto docs = config_keys();
  EXPECT_EQ(line_count(table) - 1,
            docs.size() + 2);  // header, separator, rows; ends with a newline
  EXPECT_THAT(table, HasSubstr("| `gate.tau_min` | number | `0.5` | "));
  EXPECT_THAT(table,
              HasSubstr("| `gate.policy` | one of: none, full, dcp, dcp_adaptive | `dcp` | "));
  EXPECT_THAT(table, HasSubstr("| `reward.kind` | one of: rank, static, binary, rank_speed, "
                               "prime_echo | `rank` | "));
  EXPECT_THAT(table, HasSubstr("| `reward.echo` | number | `0.5` | no | "));
  EXPECT_THAT(table, HasSubstr("| `data.batch_size` | integer | `32` | "));
}

// Whether a resume may change a key is stated once, in the schema, and the reference shows it.
TEST(ConfigKeys, ReferenceShowsWhatAResumeMayChange) {
  const std::string table = config_reference_markdown();
  EXPECT_THAT(table, HasSubstr("| key | type | default | resume may change | meaning |\n"));
  EXPECT_THAT(table, HasSubstr("| `gate.tau_min` | number | `0.5` | no | "));
  EXPECT_THAT(table, HasSubstr("| `policy.retries` | integer | `3` | yes | "));
  std::size_t resumable = 0;
  for (const auto& doc : config_keys()) {
    EXPECT_EQ(doc.resumable, resume_may_change(doc.key)) << doc.key;
    resumable += doc.resumable ? 1 : 0;
  }
  EXPECT_GT(resumable, 0U);
  EXPECT_LT(resumable, config_keys().size());
}

// Only keys of the schema are resumable; a misspelt one under simulation. is no key at all.
TEST(ConfigResume, AKeyOutsideTheSchemaIsNotResumable) {
  EXPECT_TRUE(resume_may_change("simulation.tasks"));
  EXPECT_FALSE(resume_may_change("simulation.taks"));
  EXPECT_FALSE(resume_may_change("simulation"));
  EXPECT_FALSE(resume_may_change("policy"));
}

TEST(ConfigKeys, ValueOfAnUnknownKeyIsEmpty) {
  EXPECT_FALSE(config_value(experiment_config{}, "gate.tau_mn").has_value());
  EXPECT_FALSE(config_value(experiment_config{}, "gate").has_value());
}

// An enum key whose values say what they mean where they are declared (meaning_of in
// common/enums) lists every value with its meaning: a value added without its meaning, or left out
// of the line, fails here, and the key's line in the schema needs no edit.
template <class E>
void expect_every_value_explained(const std::string& key) {
  const auto docs = config_keys();
  const auto doc =
      std::find_if(docs.begin(), docs.end(), [&](const auto& d) { return d.key == key; });
  ASSERT_NE(doc, docs.end()) << key;
  for (const E v : enum_names::values<E>()) {
    const std::string name(name_of(v));
    EXPECT_FALSE(meaning_of(v).empty()) << key << ": " << name << " has no meaning_of";
    EXPECT_THAT(doc->meaning, HasSubstr(name + " (" + std::string(meaning_of(v)) + ")")) << key;
  }
}

TEST(ConfigKeys, EnumKeysExplainEveryValueFromItsHeader) {
  expect_every_value_explained<gate_policy>("gate.policy");
  expect_every_value_explained<server_flavour>("policy.flavour");
}

// The README's reference is generated by `leap config keys`; this fails when it has gone stale.
TEST(ConfigKeys, ReadmeReferenceIsCurrent) {
  std::ifstream in(source_dir() + "/orchestrator/README.md");
  ASSERT_TRUE(in) << "orchestrator/README.md is missing";
  std::stringstream text;
  text << in.rdbuf();
  const std::string readme = text.str();
  const std::string begin = "<!-- config-reference:begin (generated by `leap config keys`) -->\n";
  const std::string end = "<!-- config-reference:end -->";
  const std::size_t from = readme.find(begin);
  const std::size_t to = readme.find(end);
  ASSERT_NE(from, std::string::npos) << "no config reference in orchestrator/README.md";
  ASSERT_NE(to, std::string::npos);
  EXPECT_EQ(readme.substr(from + begin.size(), to - from - begin.size()),
            config_reference_markdown())
      << "regenerate the table in orchestrator/README.md with `leap config keys`";
}

TEST(ConfigValidate, ProgrammaticConfigHasNoLines) {
  experiment_config c;
  c.rollout.group_size = 1;
  c.gate.tau_min = 0.9;
  c.gate.tau_max = 0.1;
  const auto checked = validate_config(c);
  ASSERT_FALSE(checked.ok());
  EXPECT_EQ(checked.err().message,
            "rollout.group_size: must be >= 2 (a group needs peers to compare with), got 1\n"
            "gate.tau_min: must be <= gate.tau_max (0.1), got 0.9: no group could open");
}

// The rules across keys run in one order, which a config built in code shows whole (its problems
// have no line to sort by): each section's rules are written in that section's schema file, and
// the learner's and the policy's interleave.
TEST(ConfigValidate, RulesAcrossSectionsReportInTheirOrder) {
  experiment_config c;
  c.rollout.max_turns = 1;  // gate.policy dcp opens groups for debug turns
  c.reward.speed_bonus.weight = 1.0;
  c.policy.flavour = server_flavour::sglang;
  c.policy.endpoints.clear();
  c.learner.world_size = 2;
  c.policy.inflight_updates = true;
  c.learner.mini_batches = 100000;
  c.schedule.mode = schedule_mode::barrier;
  c.schedule.max_staleness = 2;
  c.data.validation = "held_out";
  c.data.validation_fraction = 0.5;
  c.simulation.tasks = 1;
  const auto checked = validate_config(c);
  ASSERT_FALSE(checked.ok());
  std::vector<std::string> keys;
  for (const auto& line : split_lines(checked.err().message)) {
    keys.push_back(line.substr(0, line.find(':')));
  }
  EXPECT_EQ(keys, (std::vector<std::string>{
                      "gate.policy", "reward.speed_bonus.weight", "policy.endpoints",
                      "learner.world_size", "policy.inflight_updates", "learner.mini_batches",
                      "schedule.max_staleness", "data.validation_fraction", "simulation.tasks"}))
      << checked.err().message;
}

// ------------------------------------------------------------------------------------------------
// Files.

class scratch_dir {
 public:
  scratch_dir() {
    path_ =
        fs::temp_directory_path() /
        ("leap_config_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~scratch_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// A run stored before policy.weight_sync was an enum holds `weight_sync: ""`: resumed with today's
// default (auto) it finds no difference, with another method it finds one, named by its names.
TEST(ConfigResume, AnOldEmptyWeightSyncIsAuto) {
  const auto stored = parse_config("policy:\n  weight_sync: \"\"\n", "stored.yaml");
  ASSERT_TRUE(stored.ok()) << stored.err().message;
  EXPECT_EQ(stored->policy.weight_sync, weight_sync_method::automatic);
  const auto now = parse_config(render_config(experiment_config{}), "now.yaml");
  ASSERT_TRUE(now.ok()) << now.err().message;
  EXPECT_THAT(render_config(*now), HasSubstr("  weight_sync: auto\n"));
  EXPECT_THAT(resume_conflicts(*stored, *now), ::testing::IsEmpty());

  experiment_config disk = *now;
  disk.policy.weight_sync = weight_sync_method::disk;
  const auto conflicts = resume_conflicts(*stored, disk);
  ASSERT_EQ(conflicts.size(), 1U);
  EXPECT_EQ(conflicts[0], "policy.weight_sync (stored auto, now disk)");
}

// auto is decided in one place: in memory only for an embedded server that shares the learner's
// process; a method that is set is kept, even where auto would choose otherwise.
TEST(ConfigWeightSync, AutoIsInMemoryOnlyForAnEmbeddedModel) {
  policy_section p;
  EXPECT_EQ(effective_weight_sync(p), weight_sync_method::disk);  // vllm
  p.flavour = server_flavour::sglang;
  EXPECT_EQ(effective_weight_sync(p), weight_sync_method::disk);
  p.flavour = server_flavour::embedded;
  EXPECT_EQ(effective_weight_sync(p), weight_sync_method::disk);  // the scripted backend
  p.model = "models/policy";
  EXPECT_EQ(effective_weight_sync(p), weight_sync_method::in_memory);
  p.weight_sync = weight_sync_method::disk;
  EXPECT_EQ(effective_weight_sync(p), weight_sync_method::disk);
  for (const weight_sync_method m : enum_names::values<weight_sync_method>()) {
    p.weight_sync = m;
    EXPECT_NE(effective_weight_sync(p), weight_sync_method::automatic) << to_string(m);
  }
}

TEST(ConfigResume, WhereAndHowFastMayChangeWhatItComputesMayNot) {
  experiment_config stored;
  stored.policy.flavour = server_flavour::vllm;
  stored.policy.endpoints = {"http://127.0.0.1:8000"};
  experiment_config moved = stored;
  moved.policy.endpoints = {"http://127.0.0.1:8001", "http://127.0.0.1:8002"};
  moved.policy.request_timeout_s = 1200;
  moved.policy.retries = 9;
  moved.policy.max_in_flight = 7;
  moved.verifier.compile_workers = 16;
  moved.experiment.log_level = log_verbosity::debug;
  moved.experiment.steps = stored.experiment.steps + 10;
  EXPECT_THAT(resume_conflicts(stored, moved), ::testing::IsEmpty());

  experiment_config changed = moved;
  changed.gate.tau_min = 0.25;
  changed.verifier.run_timeout_s = 5;  // decides verdicts: part of the experiment
  const auto conflicts = resume_conflicts(stored, changed);
  ASSERT_EQ(conflicts.size(), 2U);
  EXPECT_THAT(conflicts[0], HasSubstr("gate.tau_min (stored 0.5, now 0.25)"));
  EXPECT_THAT(conflicts[1], HasSubstr("verifier.run_timeout_s"));
  for (const auto& doc : config_keys()) {
    if (doc.key.rfind("gate.", 0) == 0 || doc.key.rfind("reward.", 0) == 0 ||
        doc.key.rfind("advantage.", 0) == 0 || doc.key.rfind("rollout.", 0) == 0 ||
        doc.key.rfind("data.", 0) == 0) {
      EXPECT_FALSE(resume_may_change(doc.key)) << doc.key;
    }
  }
}

TEST(ConfigKeyLine, FindsTheLineOfANestedKeyAndNothingElse) {
  const std::string yaml = "# a comment\nexperiment:\n  name: x\ndata:\n\n  train: t.jsonl\n";
  EXPECT_EQ(config_key_line(yaml, "data.train"), 6);
  EXPECT_EQ(config_key_line(yaml, "experiment"), 2);
  EXPECT_EQ(config_key_line(yaml, "data.validation"), std::nullopt);
  EXPECT_EQ(config_key_line(yaml, "experiment.name.deeper"), std::nullopt);
  EXPECT_EQ(config_key_line("gate: [unclosed\n", "gate"), std::nullopt);
  EXPECT_EQ(config_key_line("", "data.train"), std::nullopt);
}

TEST(ConfigLoad, ReadsAFile) {
  const scratch_dir dir;
  const std::string path = (dir.path() / "run.yaml").string();
  std::ofstream(path) << "rollout:\n  group_size: 4\n";
  const auto loaded = load_config(path);
  ASSERT_TRUE(loaded.ok()) << loaded.err().message;
  EXPECT_EQ(loaded->rollout.group_size, 4);
}

TEST(ConfigLoad, ErrorsNameThePath) {
  const scratch_dir dir;
  const std::string bad = (dir.path() / "bad.yaml").string();
  std::ofstream(bad) << "\n\ngate:\n  tau_min: abc\n";
  const std::string missing = (dir.path() / "missing.yaml").string();
  struct file_case {
    std::string path;
    std::string expected;
  };
  for (const auto& c :
       {file_case{missing, missing + ": cannot read config: No such file or directory"},
        file_case{dir.path().string(),
                  dir.path().string() + ": cannot read config: it is a directory"},
        file_case{bad, bad + ":4: gate.tau_min: expected a number, got 'abc'"}}) {
    const auto loaded = load_config(c.path);
    ASSERT_FALSE(loaded.ok()) << c.path;
    EXPECT_EQ(loaded.err().message, c.expected);
  }
}

std::vector<fs::path> shipped_configs() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(source_dir() + "/configs")) {
    if (entry.path().extension() == ".yaml") {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(ConfigFiles, EveryShippedConfigParsesAndSaysWhatItIs) {
  const auto files = shipped_configs();
  std::set<std::string> names;
  for (const auto& file : files) {
    names.insert(file.filename().string());
    const auto loaded = load_config(file.string());
    EXPECT_TRUE(loaded.ok()) << loaded.err().message;
    std::ifstream in(file);
    std::string first_line;
    std::getline(in, first_line);
    EXPECT_TRUE(first_line.starts_with("# "))
        << file << " must begin with a comment saying what it runs";
    if (loaded.ok()) {
      const auto again = parse_config(render_config(*loaded), file.string());
      ASSERT_TRUE(again.ok()) << again.err().message;
      EXPECT_TRUE(*again == *loaded) << file;
      EXPECT_EQ(loaded->experiment.name + ".yaml", file.filename().string())
          << "experiment.name names the file";
    }
  }
  for (const char* expected : {"quickstart.yaml", "leap_cuda.yaml", "grpo_single_turn.yaml",
                               "grpo_multi_turn.yaml", "dr_kernel_style.yaml", "binary_reward.yaml",
                               "dcp_adaptive.yaml", "leap_static_reward.yaml", "learn_digits.yaml",
                               "leap_speed.yaml", "leap_prime_echo.yaml", "leap_offpolicy.yaml"}) {
    EXPECT_TRUE(names.contains(expected)) << expected;
  }
}

struct shipped_value {
  std::string file;
  std::string key;
  std::string expected;
};

TEST(ConfigFiles, EachConfigRunsItsExperiment) {
  const std::vector<shipped_value> table = {
      {"quickstart.yaml", "policy.flavour", "embedded"},
      {"quickstart.yaml", "learner.kind", "record"},
      {"quickstart.yaml", "verifier.gpu_slots", "0"},
      {"quickstart_partial.yaml", "schedule.partial.over_provision", "2"},
      {"quickstart_partial.yaml", "schedule.partial.max_carry", "2"},
      {"leap_cuda.yaml", "gate.policy", "dcp"},
      {"leap_offpolicy.yaml", "learner.offpolicy.mode", "drop_sequence"},
      {"leap_offpolicy.yaml", "schedule.max_staleness", "2"},
      {"leap_static_reward.yaml", "gate.policy", "dcp"},
      {"leap_static_reward.yaml", "reward.kind", "static"},
      {"leap_cuda.yaml", "gate.tau_min", "0.5"},
      {"leap_cuda.yaml", "reward.kind", "rank"},
      {"leap_cuda.yaml", "rollout.max_turns", "3"},
      {"leap_cuda.yaml", "rollout.group_size", "8"},
      {"leap_cuda.yaml", "data.batch_size", "32"},
      {"leap_cuda.yaml", "learner.lr", "1.0e-06"},
      {"leap_cuda.yaml", "learner.weight_decay", "0.1"},
      {"leap_cuda.yaml", "learner.loss_aggregation", "seq_mean_token_mean"},
      {"leap_cuda.yaml", "rollout.sampling.temperature", "1.0"},
      {"leap_cuda.yaml", "rollout.sampling.top_k", "-1"},
      {"leap_cuda.yaml", "rollout.validation.sampling.temperature", "0.7"},
      {"leap_cuda.yaml", "rollout.validation.sampling.top_k", "20"},
      {"leap_cuda.yaml", "policy.flavour", "vllm"},
      {"leap_cuda.yaml", "policy.endpoints", "[\"http://127.0.0.1:8000\"]"},
      {"grpo_single_turn.yaml", "gate.policy", "none"},
      {"grpo_single_turn.yaml", "rollout.max_turns", "1"},
      {"grpo_multi_turn.yaml", "gate.policy", "full"},
      {"grpo_multi_turn.yaml", "reward.kind", "static"},
      {"grpo_multi_turn.yaml", "reward.static_rewards", "[1.0, 0.5, 0.25]"},
      {"dr_kernel_style.yaml", "gate.policy", "full"},
      {"dr_kernel_style.yaml", "reward.kind", "binary"},
      {"binary_reward.yaml", "gate.policy", "dcp"},
      {"binary_reward.yaml", "reward.kind", "binary"},
      {"dcp_adaptive.yaml", "gate.policy", "dcp_adaptive"},
      {"leap_prime_echo.yaml", "reward.kind", "prime_echo"},
      {"leap_prime_echo.yaml", "reward.echo", "0.5"},
      {"leap_prime_echo.yaml", "gate.policy", "dcp"},
      {"leap_speed.yaml", "reward.kind", "rank_speed"},
      {"leap_speed.yaml", "reward.speed_tie", "0.05"},
      {"leap_speed.yaml", "verifier.timing_reps", "20"},
      {"leap_structural.yaml", "reward.structural.coalescing", "0.02"},
      {"leap_structural.yaml", "reward.structural.bound", "0.05"},
      {"leap_structural.yaml", "verifier.profile", "passing"},
      {"leap_speed.yaml", "gate.policy", "dcp"},
      {"learn_digits.yaml", "learner.kind", "torch"},
      {"learn_digits.yaml", "learner.init_preset", "\"tiny\""},
      {"learn_digits.yaml", "policy.flavour", "embedded"},
      {"learn_digits.yaml", "data.train", "\"sandbox/toy/digit_sum.jsonl\""},
  };
  for (const auto& row : table) {
    const auto loaded = load_config(source_dir() + "/configs/" + row.file);
    ASSERT_TRUE(loaded.ok()) << loaded.err().message;
    EXPECT_EQ(config_value(*loaded, row.key), row.expected) << row.file << ": " << row.key;
  }
}

}  // namespace
}  // namespace leap

#include "orchestrator/detail/config_schema.hpp"

#include "orchestrator/detail/config_checks.hpp"
#include "orchestrator/detail/config_text.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

namespace leap::config_detail {
namespace {

// ---------------------------------------------------------------------------------------------
// Field builders: one per C++ type of member

// Accessors take a mutable config so that one lambda serves reading and writing; writers only read
// through it (see `view`).
// A member name cannot be parenthesised, hence the NOLINT.
// clang-format off
#define LEAP_FIELD(member) \
  ([](experiment_config& c) -> auto& { return c.member; })  // NOLINT(bugprone-macro-parentheses)
// clang-format on

template <class Access>
auto& view(const Access& access, const experiment_config& c) {
  return access(const_cast<experiment_config&>(c));  // NOLINT: read-only use of a shared accessor
}

template <class Access>
field_spec integer_field(std::string key, Access access, range r, std::string meaning) {
  using T = std::remove_reference_t<decltype(access(std::declval<experiment_config&>()))>;
  field_spec f{std::move(key), "integer", std::move(meaning), {}, {}, {}};
  f.read = [access](const YAML::Node& n, experiment_config& c, sink& s) {
    T value{};
    if (auto why = read_integer(n, value)) {
      return s.fail(*why);
    }
    access(c) = value;
    return true;
  };
  f.write = [access](const experiment_config& c) { return show(view(access, c)); };
  f.check = [access, r](const experiment_config& c) { return check_range(r, view(access, c)); };
  return f;
}

template <class Access>
field_spec bool_field(std::string key, Access access, std::string meaning) {
  field_spec f{std::move(key), "boolean", std::move(meaning), {}, {}, {}};
  f.read = [access](const YAML::Node& n, experiment_config& c, sink& s) {
    bool value = false;
    if (auto why = read_bool(n, value)) {
      return s.fail(*why);
    }
    access(c) = value;
    return true;
  };
  f.write = [access](const experiment_config& c) {
    return std::string(view(access, c) ? "true" : "false");
  };
  return f;
}

template <class Access>
field_spec real_field(std::string key, Access access, range r, std::string meaning) {
  field_spec f{std::move(key), "number", std::move(meaning), {}, {}, {}};
  f.read = [access](const YAML::Node& n, experiment_config& c, sink& s) {
    double value = 0.0;
    if (auto why = read_real(n, value)) {
      return s.fail(*why);
    }
    access(c) = value;
    return true;
  };
  f.write = [access](const experiment_config& c) { return format_real(view(access, c)); };
  if (r.lo || r.hi) {
    f.check = [access, r](const experiment_config& c) { return check_range(r, view(access, c)); };
  }
  return f;
}

template <class Access>
field_spec text_field(std::string key, Access access, text_check check, std::string meaning) {
  field_spec f{std::move(key), "string", std::move(meaning), {}, {}, {}};
  f.read = [access](const YAML::Node& n, experiment_config& c, sink& s) {
    std::string value;
    if (auto why = read_text(n, value)) {
      return s.fail(*why);
    }
    access(c) = std::move(value);
    return true;
  };
  f.write = [access](const experiment_config& c) { return quote(view(access, c)); };
  if (check) {
    f.check = [access, check = std::move(check)](const experiment_config& c) {
      return check(view(access, c));
    };
  }
  return f;
}

// An enum's key accepts exactly the names of its table (common/enums, enum_names.hpp), in
// declaration order: a value added to the enum is accepted, listed and documented here with no
// edit, and the config never spells a name of its own.
template <class Access, class Enum = std::remove_reference_t<
                            decltype(std::declval<Access>()(std::declval<experiment_config&>()))>>
field_spec choice_field(std::string key, Access access, std::string meaning) {
  field_spec f{
      std::move(key), "one of: " + enum_names::valid_names<Enum>(), std::move(meaning), {}, {}, {}};
  f.read = [access](const YAML::Node& n, experiment_config& c, sink& s) {
    const std::string expected = "expected one of " + enum_names::valid_names<Enum>();
    if (!n.IsScalar()) {
      return s.fail(expected + ", got " + describe(n));
    }
    if (auto value = enum_names::parse<Enum>(n.Scalar(), "")) {
      access(c) = *value;
      return true;
    }
    std::vector<std::string> names;
    for (const Enum v : enum_names::values<Enum>()) {
      names.emplace_back(name_of(v));
    }
    const auto guess = closest(n.Scalar(), names);
    return s.fail(expected + ", got " + describe(n) +
                  (guess ? "; did you mean '" + *guess + "'?" : ""));
  };
  f.write = [access](const experiment_config& c) { return to_string(view(access, c)); };
  return f;
}

// policy.weight_sync is an enum key, whose automatic value configs and stored runs from before the
// enum spell "" (the name table cannot hold an empty name): that still reads as auto, and is
// written back as auto, so a resumed old run finds no difference.
field_spec weight_sync_field(std::string meaning) {
  field_spec f =
      choice_field("policy.weight_sync", LEAP_FIELD(policy.weight_sync), std::move(meaning));
  f.read = [by_name = std::move(f.read)](const YAML::Node& n, experiment_config& c, sink& s) {
    if (n.IsScalar() && n.Scalar().empty()) {
      c.policy.weight_sync = weight_sync_method::automatic;
      return true;
    }
    return by_name(n, c, s);
  };
  return f;
}

// A list whose elements are read by `read_element`; element problems name the element's index and
// line.
template <class T, class ReadElement>
bool read_list(const YAML::Node& n, std::vector<T>& out, sink& s, const std::string& element_type,
               ReadElement read_element) {
  if (!n.IsSequence()) {
    return s.fail("expected a list of " + element_type + ", got " + describe(n) +
                  (n.IsScalar() ? " (write [" + n.Scalar() + "] for a list of one)" : ""));
  }
  std::vector<T> values;
  bool ok = true;
  std::size_t index = 0;
  for (const auto& element : n) {
    T value{};
    if (auto why = read_element(element, value)) {
      ok = s.fail(*why, line_of(element), "[" + std::to_string(index) + "]");
    }
    values.push_back(std::move(value));
    ++index;
  }
  if (ok) {
    out = std::move(values);
  }
  return ok;
}

template <class T>
std::string write_list(const std::vector<T>& values) {
  return "[" +
         join(values, ", ",
              [](const T& v) {
                if constexpr (std::is_same_v<T, std::string>) {
                  return quote(v);
                } else if constexpr (std::is_floating_point_v<T>) {
                  return format_real(v);
                } else {
                  return show(v);
                }
              }) +
         "]";
}

// Checks each element with `check`, and the list for repeats when `unique`.
template <class T, class Check>
std::optional<std::string> check_elements(const std::vector<T>& values, Check check, bool unique) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (auto why = check(values[i])) {
      return "[" + std::to_string(i) + "] " + *why;
    }
  }
  return unique ? check_unique(values) : std::nullopt;
}

template <class Access>
field_spec text_list_field(std::string key, Access access, text_check check, bool unique,
                           std::string meaning) {
  field_spec f{std::move(key), "list of strings", std::move(meaning), {}, {}, {}};
  f.read = [access](const YAML::Node& n, experiment_config& c, sink& s) {
    return read_list(n, access(c), s, "strings",
                     [](const YAML::Node& e, std::string& v) { return read_text(e, v); });
  };
  f.write = [access](const experiment_config& c) { return write_list(view(access, c)); };
  f.check = [access, check, unique](const experiment_config& c) {
    return check_elements(view(access, c), check, unique);
  };
  return f;
}

template <class Access>
field_spec integer_list_field(std::string key, Access access, range r, std::string meaning) {
  using T = typename std::remove_reference_t<decltype(access(
      std::declval<experiment_config&>()))>::value_type;
  field_spec f{std::move(key), "list of integers", std::move(meaning), {}, {}, {}};
  f.read = [access](const YAML::Node& n, experiment_config& c, sink& s) {
    return read_list(n, access(c), s, "integers",
                     [](const YAML::Node& e, T& v) { return read_integer(e, v); });
  };
  f.write = [access](const experiment_config& c) { return write_list(view(access, c)); };
  f.check = [access, r](const experiment_config& c) {
    return check_elements(
        view(access, c), [&](T v) { return check_range(r, v); }, true);
  };
  return f;
}

template <class Access>
field_spec real_list_field(std::string key, Access access, std::string meaning) {
  field_spec f{std::move(key), "list of numbers", std::move(meaning), {}, {}, {}};
  f.read = [access](const YAML::Node& n, experiment_config& c, sink& s) {
    return read_list(n, access(c), s, "numbers",
                     [](const YAML::Node& e, double& v) { return read_real(e, v); });
  };
  f.write = [access](const experiment_config& c) { return write_list(view(access, c)); };
  return f;
}

template <class Access>
field_spec real_pair_field(std::string key, Access access, const range& r, std::string meaning) {
  field_spec f{std::move(key), "list of 2 numbers", std::move(meaning), {}, {}, {}};
  f.read = [access](const YAML::Node& n, experiment_config& c, sink& s) {
    std::vector<double> values;
    if (!read_list(n, values, s, "2 numbers",
                   [](const YAML::Node& e, double& v) { return read_real(e, v); })) {
      return false;
    }
    if (values.size() != 2) {
      return s.fail("expected a list of 2 numbers, got " + std::to_string(values.size()));
    }
    access(c) = {values[0], values[1]};
    return true;
  };
  f.write = [access](const experiment_config& c) {
    const auto& pair = view(access, c);
    return write_list(std::vector<double>(pair.begin(), pair.end()));
  };
  f.check = [access, r](const experiment_config& c) {
    const auto& pair = view(access, c);
    return check_elements(
        std::vector<double>(pair.begin(), pair.end()), [&](double v) { return check_range(r, v); },
        false);
  };
  return f;
}

// ---------------------------------------------------------------------------------------------
// Checks of one key (shared ones are in config_checks)

std::optional<std::string> check_run_name(const std::string& name) {
  if (name.empty()) {
    return std::optional<std::string>{"must not be empty"};
  }
  const auto bad = std::find_if(name.begin(), name.end(), [](unsigned char c) {
    return !(std::isalnum(c) || c == '.' || c == '_' || c == '-');
  });
  if (bad != name.end()) {
    return "may hold only letters, digits, '.', '_' and '-' (it names files and store keys), got "
           "'" +
           name + "'";
  }
  return std::nullopt;
}

std::optional<std::string> check_torch_device(const std::string& device) {
  if (device == "cpu" || device == "cuda") {
    return std::nullopt;
  }
  if (device.rfind("cuda:", 0) == 0 && device.size() > 5 &&
      std::all_of(device.begin() + 5, device.end(),
                  [](unsigned char c) { return std::isdigit(c); })) {
    return std::nullopt;
  }
  return "must be cpu, cuda or cuda:N, got '" + device + "'";
}

std::optional<std::string> check_init_preset(const std::string& preset) {
  if (preset.empty() || preset == "tiny" || preset == "small") {
    return std::nullopt;
  }
  return "must be tiny, small or empty (the model must exist), got '" + preset + "'";
}

std::optional<std::string> check_python(const std::string& python) {
  if (python.empty()) {
    return "must name an interpreter (default: python3)";
  }
  if (python.find('/') != std::string::npos && python.front() != '/') {
    return "must be a name (python3) or an absolute path, not the relative path '" + python + "'";
  }
  return std::nullopt;
}

// An absolute path or nothing: the sandboxed run sees no PATH of the caller's to look a name up in.
std::optional<std::string> check_ncu(const std::string& ncu) {
  if (!ncu.empty() && ncu.front() != '/') {
    return "must be an absolute path or empty (the ncu beside nvcc), got '" + ncu + "'";
  }
  return std::nullopt;
}

std::optional<std::string> check_weight_sync_delta(const std::string& dtype) {
  if (dtype.empty() || dtype == "bfloat16" || dtype == "float16" || dtype == "float32" ||
      dtype == "float64") {
    return std::nullopt;
  }
  return "must be the servers' dtype (bfloat16, float16, float32, float64) or empty, got '" +
         dtype + "'";
}

std::optional<std::string> check_cuda_arch(const std::string& arch) {
  std::string_view digits;
  std::string_view view = arch;
  if (view.starts_with("sm_")) {
    digits = view.substr(3);
    if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) {
      digits.remove_suffix(1);
    }
  } else if (view.starts_with("compute_")) {
    digits = view.substr(8);
  }
  if (digits.size() < 2 || digits.size() > 3 || !is_digits(digits)) {
    return "expected an nvcc architecture such as sm_90a, sm_80 or compute_90, got '" + arch + "'";
  }
  return std::nullopt;
}

std::optional<std::string> check_top_k(int k) {
  if (k == -1 || k >= 1) {
    return std::nullopt;
  }
  return "must be -1 (disabled) or >= 1, got " + std::to_string(k);
}

// A key a resumed run may change (field_spec::resumable).
field_spec operational(field_spec f) {
  f.resumable = true;
  return f;
}

// ---------------------------------------------------------------------------------------------
// The keys: one entry each, in the reference's order. The entry is the only place that states a
// key's meaning, its range and whether a resume may change it (operational); its type follows from
// the builder, its default from the member's initializer in config.hpp.

// The sampling keys, for the training and the validation section alike.
template <class Section>
void add_sampling_fields(std::vector<field_spec>& fields, const std::string& prefix,
                         Section section, const std::string& purpose) {
  fields.push_back(real_field(
      prefix + ".temperature",
      [section](experiment_config & c) -> auto& { return section(c).temperature; }, at_least(0),
      "Softmax temperature of " + purpose + "; >= 0, 0 is greedy."));
  {
    field_spec f = integer_field(
        prefix + ".top_k", [section](experiment_config & c) -> auto& { return section(c).top_k; },
        anything(), "Keep the k most likely tokens of " + purpose + "; -1 disables, else >= 1.");
    f.check = [section](const experiment_config& c) { return check_top_k(view(section, c).top_k); };
    fields.push_back(std::move(f));
  }
  fields.push_back(real_field(
      prefix + ".top_p", [section](experiment_config & c) -> auto& { return section(c).top_p; },
      open_closed(0, 1), "Nucleus sampling mass of " + purpose + ", in (0, 1]."));
  fields.push_back(integer_field(
      prefix + ".max_tokens",
      [section](experiment_config & c) -> auto& { return section(c).max_tokens; }, at_least(1),
      "Most tokens generated per turn of " + purpose + "; >= 1."));
  fields.push_back(integer_field(
      prefix + ".seed", [section](experiment_config & c) -> auto& { return section(c).seed; },
      at_least(-1),
      "Per-request seed base of " + purpose +
          ": -1 sends none; s >= 0 gives request k the seed s + k (replayable on a "
          "deterministic server)."));
  fields.push_back(text_list_field(
      prefix + ".stop", [section](experiment_config & c) -> auto& { return section(c).stop; },
      not_empty, true, "Strings that end a generation of " + purpose + "."));
  fields.push_back(integer_list_field(
      prefix + ".stop_token_ids",
      [section](experiment_config & c) -> auto& { return section(c).stop_token_ids; }, at_least(0),
      "Token ids that end a generation of " + purpose +
          ", besides the tokenizer's end-of-sequence token."));
}

std::vector<field_spec> build_fields() {
  std::vector<field_spec> f;

  // experiment
  f.push_back(
      text_field("experiment.name", LEAP_FIELD(experiment.name), check_run_name,
                 "Names the run in logs, metrics and store keys; letters, digits, '.', '_', '-'."));
  f.push_back(
      integer_field("experiment.seed", LEAP_FIELD(experiment.seed), at_least(0),
                    "Seeds the orchestrator's random choices (task order, validation split, "
                    "simulation): same config and seed, same run."));
  f.push_back(text_field(
      "experiment.run_dir", LEAP_FIELD(experiment.run_dir), not_empty,
      "Folder for the run's store, logs, metrics and checkpoints; created when missing."));
  f.push_back(operational(
      integer_field("experiment.steps", LEAP_FIELD(experiment.steps), at_least(1),
                    "Training steps (one learner update each) before the run ends; >= 1.")));
  f.push_back(operational(choice_field(
      "experiment.log_level", LEAP_FIELD(experiment.log_level),
      "Least severe log line `leap run` writes to stderr: info (events: a step started, "
      "groups resumed, a verifier node lost), warn (signals, metrics files), error "
      "(lost writes), off; trace and debug print what info does today. --quiet "
      "raises it to warn.")));

  // data
  f.push_back(
      text_field("data.train", LEAP_FIELD(data.train), nullptr,
                 "Task suite to train on (file or folder); empty: none, which only `leap simulate` "
                 "accepts."));
  f.push_back(
      text_field("data.validation", LEAP_FIELD(data.validation), nullptr,
                 "Held-out task suite for validation; exclusive with data.validation_fraction."));
  f.push_back(
      real_field("data.validation_fraction", LEAP_FIELD(data.validation_fraction),
                 closed_open(0, 1, "1 would leave nothing to train on"),
                 "Fraction of the training tasks held out for validation when data.validation is "
                 "empty, in [0, 1); 0 and no data.validation: no validation."));
  f.push_back(text_list_field(
      "data.task_kinds", LEAP_FIELD(data.task_kinds), not_empty, true,
      "Task kinds to keep (the sandbox's names, e.g. cuda); empty keeps every kind."));
  f.push_back(integer_field("data.batch_size", LEAP_FIELD(data.batch_size), at_least(1),
                            "Tasks per training step; >= 1. The paper's batch is 32."));

  // rollout
  f.push_back(integer_field("rollout.group_size", LEAP_FIELD(rollout.group_size),
                            at_least(2, "a group needs peers to compare with"),
                            "Rollouts per task (G); >= 2. The paper samples 8."));
  f.push_back(
      integer_field("rollout.max_turns", LEAP_FIELD(rollout.max_turns), at_least(1),
                    "Most turns per rollout (M), the first included; >= 1. The paper uses 3."));
  add_sampling_fields(
      f, "rollout.sampling", [](experiment_config & c) -> auto& { return c.rollout.sampling; },
      "training rollouts");
  f.push_back(
      integer_field("rollout.validation.every", LEAP_FIELD(rollout.validation.every), at_least(0),
                    "Validate every this many training steps (and after the last); 0 disables."));
  f.push_back(integer_field("rollout.validation.n", LEAP_FIELD(rollout.validation.n), at_least(1),
                            "Samples per validation task; accuracy is averaged over them; >= 1."));
  add_sampling_fields(
      f, "rollout.validation.sampling",
      [](experiment_config & c) -> auto& { return c.rollout.validation.sampling; }, "validation");

  // gate
  f.push_back(choice_field(
      "gate.policy", LEAP_FIELD(gate.policy),
      "Which groups enter debug turns: none (single-turn GRPO), full (any failure), "
      "dcp (tau_min <= N_fail <= tau_max), dcp_adaptive (thresholds follow quantiles)."));
  f.push_back(choice_field(
      "gate.unit", LEAP_FIELD(gate.unit),
      "Whether gate.tau_min and gate.tau_max count failures or give them as a fraction "
      "of rollout.group_size."));
  f.push_back(
      real_field("gate.tau_min", LEAP_FIELD(gate.tau_min), anything(),
                 "Fewest failures for a group to open (fraction in [0, 1], or whole count <= "
                 "group_size); 0.5: the paper's best range, fail rate >= 50%."));
  f.push_back(
      real_field("gate.tau_max", LEAP_FIELD(gate.tau_max), anything(),
                 "Most failures for a group to open, >= gate.tau_min; same unit as gate.tau_min."));
  f.push_back(
      real_field("gate.adaptive_low_quantile", LEAP_FIELD(gate.adaptive_low_quantile), closed(0, 1),
                 "dcp_adaptive: tau_min follows this quantile of recent groups' failure fractions, "
                 "in [0, 1]."));
  f.push_back(real_field(
      "gate.adaptive_high_quantile", LEAP_FIELD(gate.adaptive_high_quantile), closed(0, 1),
      "dcp_adaptive: tau_max follows this quantile, in [adaptive_low_quantile, 1]."));
  f.push_back(
      integer_field("gate.adaptive_window", LEAP_FIELD(gate.adaptive_window), at_least(1),
                    "dcp_adaptive: the quantiles are over the last this many groups; >= 1."));
  f.push_back(
      integer_field("gate.adaptive_min_groups", LEAP_FIELD(gate.adaptive_min_groups), at_least(0),
                    "dcp_adaptive: static thresholds apply until this many groups were seen; <= "
                    "adaptive_window."));
  f.push_back(real_field(
      "gate.probe_fraction", LEAP_FIELD(gate.probe_fraction), closed(0, 1),
      "Fraction of the groups the gate closed that still run debug turns for measurement only "
      "(never trained on; replay reports their recovery beside the opened groups'), in [0, 1]."));
  f.push_back(real_field(
      "gate.optimise.speedup", LEAP_FIELD(gate.optimise.speedup), closed(0, 1000),
      "Optimisation turns: a training group whose first-turn passes are all timed and none has a "
      "speedup over the reference above this gets turns asking each pass for a faster, still "
      "correct version (measured; trained on only with gate.optimise.train); 0 disables, e.g. 1.2; "
      "needs "
      "verifier.timing_reps > 0."));
  f.push_back(integer_field(
      "gate.optimise.max_turns", LEAP_FIELD(gate.optimise.max_turns), at_least(1),
      "Optimisation turns: most per passing rollout, within rollout.max_turns; one follows "
      "another while the last passed without beating gate.optimise.speedup; >= 1."));
  f.push_back(bool_field(
      "gate.optimise.train", LEAP_FIELD(gate.optimise.train),
      "Train on optimisation turns: a first-turn pass is paid for the speed of its last passing "
      "turn (rank unchanged) and trains on its turns up to it, discounted per turn; a turn that "
      "broke the kernel trains alone with a failure's advantage. Needs gate.optimise.speedup > 0 "
      "and a reward that pays for speed (reward.kind rank_speed or reward.speed_bonus.weight > "
      "0)."));
  f.push_back(integer_field(
      "gate.retry.buffer", LEAP_FIELD(gate.retry.buffer), at_least(0),
      "Buffered retry: most all-failed training groups (no pass after their debug turns) waiting "
      "to be sampled again; the oldest is evicted (counted) when full; 0 disables."));
  f.push_back(integer_field(
      "gate.retry.delay", LEAP_FIELD(gate.retry.delay), at_least(1),
      "Buffered retry: a group that failed at step s is retried, in place of a fresh task, at step "
      "s + delay or later; >= 1."));
  f.push_back(integer_field("gate.retry.attempts", LEAP_FIELD(gate.retry.attempts), at_least(1),
                            "Buffered retry: most retries of one task before it is given up "
                            "(counted as exhausted); >= 1."));
  f.push_back(integer_field(
      "gate.retry.extra_rollouts", LEAP_FIELD(gate.retry.extra_rollouts), at_least(0),
      "Buffered retry: a retried group runs rollout.group_size plus this many rollouts; >= 0."));
  f.push_back(integer_field(
      "gate.retry.extra_turns", LEAP_FIELD(gate.retry.extra_turns), at_least(0),
      "Buffered retry: a retried group runs rollout.max_turns plus this many turns; >= 0."));

  // reward
  f.push_back(choice_field(
      "reward.kind", LEAP_FIELD(reward.kind),
      "rank: the paper's tournament of (pass turn, failure) ranks, in [-1, 1]; static: "
      "reward.static_rewards per turn; binary: 1 pass, 0 failure; rank_speed: rank's tournament, "
      "passes at the same turn also ranked by speedup (verifier.timing_reps must be > 0); "
      "prime_echo: first-turn-anchored, (1 - reward.echo) x the first-turn tournament + "
      "reward.echo x rank, in [-1, 1]."));
  f.push_back(
      real_list_field("reward.static_rewards", LEAP_FIELD(reward.static_rewards),
                      "static: reward of a pass at turn m is the m-th value; one value per turn "
                      "(rollout.max_turns)."));
  f.push_back(real_field("reward.failure_reward", LEAP_FIELD(reward.failure_reward), anything(),
                         "Reward of a rollout that never passed (static and binary)."));
  f.push_back(real_field(
      "reward.speed_tie", LEAP_FIELD(reward.speed_tie), closed(0, 10),
      "rank_speed: two passes at the same turn tie unless one's speedup exceeds the other's by "
      "more than this relative margin (used when the verdicts state no noise of their own), in "
      "[0, 10]; 0.05: within 5% is a tie."));
  f.push_back(real_field(
      "reward.echo", LEAP_FIELD(reward.echo), closed(0, 1),
      "prime_echo: weight of rank's tournament over final outcomes; 1 - echo goes to the "
      "first-turn tournament (a pass at turn 1 against everything else), in [0, 1]; 1 is rank, "
      "0 pays nothing for a debug-turn pass."));
  f.push_back(real_field(
      "reward.speed_bonus.weight", LEAP_FIELD(reward.speed_bonus.weight), closed(0, 10),
      "static and binary: a pass gains weight * clamp(ln(speedup), -clip, clip); an untimed pass "
      "gains min(0, the group's lowest bonus); failures none. 0 disables it; in [0, 10]."));
  f.push_back(real_field("reward.speed_bonus.clip", LEAP_FIELD(reward.speed_bonus.clip),
                         above(0, "a clip of 0 pays no bonus; use weight 0"),
                         "Bound of |ln(speedup)| in the speed bonus; > 0. 0.7: about 2x either "
                         "way."));
  f.push_back(real_field(
      "reward.structural.coalescing", LEAP_FIELD(reward.structural.weights[0]), closed(0, 10),
      "Structural term (needs verifier.profile): what a pass gains, times the share of its kernel "
      "time without uncoalesced global loads or stores; 0 disables it; in [0, 10]."));
  f.push_back(real_field(
      "reward.structural.bank_conflicts", LEAP_FIELD(reward.structural.weights[1]), closed(0, 10),
      "Structural term: what a pass gains, times the share of its kernel time without "
      "shared-memory bank conflicts; 0 disables it; in [0, 10]."));
  f.push_back(real_field(
      "reward.structural.occupancy", LEAP_FIELD(reward.structural.weights[2]), closed(0, 10),
      "Structural term: what a pass gains, times the share of its kernel time without low "
      "occupancy or register pressure; 0 disables it; in [0, 10]."));
  f.push_back(real_field(
      "reward.structural.parallelism", LEAP_FIELD(reward.structural.weights[3]), closed(0, 10),
      "Structural term: what a pass gains, times the share of its kernel time without a grid too "
      "small for the GPU or launch overhead dominating; 0 disables it; in [0, 10]."));
  f.push_back(real_field(
      "reward.structural.dram_traffic", LEAP_FIELD(reward.structural.weights[4]), closed(0, 10),
      "Structural term: what a pass gains, times the share of its kernel time without excess DRAM "
      "traffic; 0 disables it; in [0, 10]."));
  f.push_back(real_field(
      "reward.structural.bound", LEAP_FIELD(reward.structural.bound),
      above(0, "a bound of 0 pays nothing; set the weights to 0"),
      "Most one pass gains from the structural terms together; each is also kept below half the "
      "gap to the group's next higher reward, so it never reorders rollouts; > 0."));

  // advantage
  f.push_back(
      choice_field("advantage.kind", LEAP_FIELD(advantage.kind),
                   "grpo: (R - mean) / (std + epsilon); mean_only: R - mean (Dr.GRPO); none: R."));
  f.push_back(real_field("advantage.epsilon", LEAP_FIELD(advantage.epsilon),
                         above(0, "a group of equal rewards has std 0"),
                         "Added to the group's reward std before dividing (grpo); > 0."));
  f.push_back(
      real_field("advantage.gamma", LEAP_FIELD(advantage.gamma), open_closed(0, 1),
                 "Discount of earlier turns' tokens for a non-negative advantage, in (0, 1]; 1 "
                 "weighs every turn alike."));

  // learner
  f.push_back(choice_field(
      "learner.kind", LEAP_FIELD(learner.kind),
      "record: store scored batches, update nothing (dry runs, benchmarks); torch: the "
      "LibTorch learner."));
  f.push_back(
      text_field("learner.model_path", LEAP_FIELD(learner.model_path), nullptr,
                 "Folder of the initial policy weights (safetensors + config.json); required for "
                 "learner.kind torch."));
  f.push_back(real_field("learner.lr", LEAP_FIELD(learner.lr),
                         above(0, "a zero rate trains nothing; use learner.kind: record"),
                         "AdamW learning rate; > 0. The paper's 1e-6."));
  f.push_back(real_field("learner.weight_decay", LEAP_FIELD(learner.weight_decay), at_least(0),
                         "AdamW decoupled weight decay; >= 0. The paper's 0.1."));
  f.push_back(real_pair_field("learner.betas", LEAP_FIELD(learner.betas), closed_open(0, 1),
                              "AdamW [beta1, beta2], each in [0, 1)."));
  f.push_back(
      real_field("learner.clip_low", LEAP_FIELD(learner.loss.clip_low),
                 closed_open(0, 1, "the ratio's lower bound 1 - clip_low must stay positive"),
                 "Ratio clip below 1: the ratio is kept >= 1 - clip_low; in [0, 1)."));
  f.push_back(real_field(
      "learner.clip_high", LEAP_FIELD(learner.loss.clip_high), at_least(0),
      "Ratio clip above 1 (DAPO's clip-higher, 0.28): the ratio is kept <= 1 + clip_high."));
  f.push_back(real_field("learner.kl_coef", LEAP_FIELD(learner.loss.kl_coef), at_least(0),
                         "Weight of the KL penalty to the initial policy; 0 disables it."));
  f.push_back(
      choice_field("learner.loss_aggregation", LEAP_FIELD(learner.loss.aggregation),
                   "How token losses become the batch loss; seq_mean_token_mean is the paper's "
                   "sample-level loss (long rollouts do not dominate)."));
  f.push_back(choice_field(
      "learner.offpolicy.mode", LEAP_FIELD(learner.loss.offpolicy.mode),
      "Off-policy filter on the ratio r = exp(logp - behaviour_logp), computed in the training "
      "pass: drop_sequence drops sequences whose geometric-mean ratio is outside [low, high] (and "
      "out of the loss normaliser); truncate_token caps each token's importance weight at high "
      "(verl's "
      "truncated IS); mask_token masks tokens whose ratio is outside [low, high]; off: none."));
  f.push_back(
      real_field("learner.offpolicy.low", LEAP_FIELD(learner.loss.offpolicy.low), closed(0, 1),
                 "Lower end of the ratio band of drop_sequence and mask_token; in [0, 1]."));
  f.push_back(real_field(
      "learner.offpolicy.high", LEAP_FIELD(learner.loss.offpolicy.high), at_least(1),
      "Upper end of the ratio band, and truncate_token's cap on the importance weight; >= 1."));
  f.push_back(integer_field(
      "learner.offpolicy.max_staleness", LEAP_FIELD(learner.loss.offpolicy.max_staleness),
      at_least(-1),
      "Mask tokens sampled by weights more than this many versions behind the learner's (in every "
      "mode; each turn's weight version against the learner's); -1: no cap."));
  f.push_back(real_field("learner.grad_clip", LEAP_FIELD(learner.grad_clip), at_least(0),
                         "Global gradient-norm clip; 0 disables clipping."));
  f.push_back(integer_field("learner.warmup_steps", LEAP_FIELD(learner.warmup_steps), at_least(0),
                            "Steps of linear learning-rate warm-up from 0."));
  f.push_back(operational(integer_field(
      "learner.micro_batch_tokens", LEAP_FIELD(learner.micro_batch_tokens), at_least(1),
      "Tokens per forward/backward pass; gradients accumulate over micro-batches.")));
  f.push_back(integer_field(
      "learner.mini_batches", LEAP_FIELD(learner.mini_batches), at_least(1),
      "Optimiser steps per training step (the batch split in parts); 1 is on-policy."));
  f.push_back(text_field("learner.checkpoint_dir", LEAP_FIELD(learner.checkpoint_dir), nullptr,
                         "Folder for checkpoints; empty: <run_dir>/checkpoints."));
  f.push_back(operational(integer_field(
      "learner.checkpoint_every", LEAP_FIELD(learner.checkpoint_every), at_least(0),
      "Save a checkpoint every this many steps (and after the last); 0: only after the "
      "last.")));
  f.push_back(text_field("learner.device", LEAP_FIELD(learner.device), check_torch_device,
                         "Where the LibTorch learner runs (and the model of an embedded policy "
                         "server): cpu, cuda or cuda:N."));
  f.push_back(operational(integer_field(
      "learner.world_size", LEAP_FIELD(learner.world_size), at_least(1),
      "Data-parallel ranks of the torch learner; > 1: rank 0 trains in leap run's process, ranks "
      "1.. are leap-learner-rank processes beside the leap binary (gloo on cpu, NCCL on cuda). "
      "Every rank holds the model and its gradients; the AdamW state and float32 masters (12 "
      "bytes a parameter) are split across the ranks (12 / world_size each), so a model whose "
      "optimiser state overflows one device trains on several. A resume may change it: checkpoints "
      "load on any world size.")));
  f.push_back(operational(text_list_field(
      "learner.devices", LEAP_FIELD(learner.devices), check_torch_device, false,
      "The device of each data-parallel rank, rank 0's first (it must be learner.device): "
      "exactly learner.world_size entries, each cpu, cuda or cuda:N; empty: every rank on "
      "learner.device.")));
  f.push_back(text_field(
      "learner.init_preset", LEAP_FIELD(learner.init_preset), check_init_preset,
      "tiny or small: when learner.model_path holds no model, write a random model of that "
      "shape there first (seeded by experiment.seed), byte-level or with policy.tokenizer's "
      "vocabulary; empty: the model must exist."));

  // policy
  f.push_back(choice_field(
      "policy.flavour", LEAP_FIELD(policy.flavour),
      "Inference server protocol: vllm (/v1/completions, token ids), sglang (/generate), "
      "embedded (in-process; no endpoints)."));
  f.push_back(weight_sync_field(
      "How the torch learner's weights reach the servers: disk (a folder per step, loaded "
      "through the server's route: vLLM /collective_rpc reload_weights, SGLang "
      "/update_weights_from_disk), in_memory (embedded server only: copied in the process), nccl "
      "(vLLM's weight-transfer engine: one vllm server with --weight-transfer-config "
      "'{\"backend\": \"nccl\"}' receives a broadcast from the learner; gloo on cpu), ipc "
      "(one vllm server on the learner's GPU, on this host, with --weight-transfer-config "
      "'{\"backend\": \"ipc\"}': it copies the weights out of the learner's CUDA buffer); auto: "
      "in_memory for an embedded server with policy.model, else disk (\"\", as older configs "
      "write it, reads as auto)."));
  f.push_back(text_field(
      "policy.weight_sync_delta", LEAP_FIELD(policy.weight_sync_delta), check_weight_sync_delta,
      "With weight_sync disk or nccl and the torch learner: the dtype the servers hold their "
      "weights in (bfloat16, float16, float32, float64). Each step then also makes a delta from "
      "the previous step's weights in that dtype (the changed elements, a checksum per tensor): "
      "a folder beside the step's (disk) or tensors broadcast to the project's server (nccl), "
      "which the sync sends first; a server not on the previous version, or whose weights fail "
      "a checksum, refuses it and takes the full weights (sync.delta_fallbacks). Empty: full "
      "weights only."));
  f.push_back(operational(text_list_field(
      "policy.endpoints", LEAP_FIELD(policy.endpoints), check_url, true,
      "Base URLs http(s)://host[:port] of the servers, no path (the client adds the "
      "route); load-balanced, a conversation pinned to one. The default is "
      "vLLM's default port.")));
  f.push_back(text_field(
      "policy.model", LEAP_FIELD(policy.model), nullptr,
      "Model name sent with requests (vLLM's --served-model-name); empty: the endpoint's "
      "only model. For embedded: a model folder served by LibTorch in-process, with its own "
      "tokenizer.json and chat template when it has them, else byte-level; empty: the "
      "scripted backend."));
  f.push_back(
      text_field("policy.tokenizer", LEAP_FIELD(policy.tokenizer), nullptr,
                 "Folder with tokenizer.json and tokenizer_config.json (chat template), rendered "
                 "locally for every flavour (an embedded model then serves it); empty: the "
                 "endpoint tokenises (vLLM's /tokenize), or an embedded server its model folder's "
                 "tokenizer.json when there is one, else the byte-level template."));
  f.push_back(operational(
      integer_field("policy.max_in_flight", LEAP_FIELD(policy.max_in_flight), at_least(1),
                    "Most requests in flight per endpoint (back-pressure); >= 1.")));
  f.push_back(operational(
      real_field("policy.request_timeout_s", LEAP_FIELD(policy.request_timeout_s), above(0),
                 "Seconds a generation request may take before it is retried; > 0.")));
  f.push_back(operational(
      integer_field("policy.retries", LEAP_FIELD(policy.retries), at_least(0),
                    "Retries of a failed or timed-out request before the rollout fails.")));
  f.push_back(operational(
      bool_field("policy.stream", LEAP_FIELD(policy.stream),
                 "Ask for streamed responses (SSE): a cut stream resumes from the tokens "
                 "already received instead of generating them again.")));
  f.push_back(bool_field(
      "policy.inflight_updates", LEAP_FIELD(policy.inflight_updates),
      "With the torch learner and weight_sync disk or in_memory: a weight sync does not wait "
      "for the turns in flight; it pauses the servers in abort mode (SGLang's and the embedded "
      "server's /pause_generation, vLLM's /pause), loads the weights, resumes them, and the client "
      "resumes the aborted turns under the new weights. Each token keeps the version that "
      "sampled it (the turn's weight segments), for the learner's per-token importance weights "
      "and staleness cap. false: a sync waits until the server's turns are done."));

  // verifier
  f.push_back(
      operational(integer_field("verifier.compile_workers", LEAP_FIELD(verifier.compile_workers),
                                at_least(0), "Parallel compilations; 0: one per CPU core.")));
  f.push_back(operational(integer_field(
      "verifier.gpu_slots", LEAP_FIELD(verifier.gpu_slots), at_least(0),
      "GPUs candidates run on at this host (GPUs 0 .. gpu_slots-1); 0: none locally.")));
  f.push_back(operational(integer_field(
      "verifier.runs_per_gpu", LEAP_FIELD(verifier.runs_per_gpu), at_least(1),
      "Candidate runs sharing one GPU at once (correctness runs of small kernels); timed runs "
      "(verifier.timing_reps > 0) always take their GPU alone. A shared KernelBench run's torch "
      "allocations are capped at its share of the GPU's memory, and a shared run that fails for "
      "device memory is run again alone before its verdict stands (sandbox/README.md says what a "
      "hostile candidate can still do).")));
  f.push_back(real_field("verifier.compile_timeout_s", LEAP_FIELD(verifier.compile_timeout_s),
                         above(0), "Wall-clock limit of one compilation, seconds; > 0."));
  f.push_back(real_field("verifier.run_timeout_s", LEAP_FIELD(verifier.run_timeout_s), above(0),
                         "Wall-clock limit of one candidate run, seconds; > 0."));
  f.push_back(integer_field(
      "verifier.output_limit_bytes", LEAP_FIELD(verifier.output_limit_bytes), at_least(1),
      "Most bytes of a candidate's output kept; more is an output-flood verdict."));
  f.push_back(operational(
      text_field("verifier.cache_dir", LEAP_FIELD(verifier.cache_dir), nullptr,
                 "Folder of the content-addressed compile cache; empty: <run_dir>/cache.")));
  f.push_back(operational(integer_field(
      "verifier.cache_max_bytes", LEAP_FIELD(verifier.cache_max_bytes), at_least(0),
      "Size at which the compile cache evicts its oldest entries (10 GiB); 0 disables the "
      "cache.")));
  f.push_back(
      text_field("verifier.cuda_arch", LEAP_FIELD(verifier.cuda_arch), check_cuda_arch,
                 "nvcc -arch of CUDA candidates: sm_NN[a|f] or compute_NN; sm_90a is H100/H200."));
  f.push_back(operational(
      text_field("verifier.python", LEAP_FIELD(verifier.python), check_python,
                 "Interpreter of python and kernelbench tasks: a name found in /usr/local/bin,"
                 " /usr/bin or /bin (never the caller's PATH), or an absolute path (a virtualenv's "
                 "python whose torch sees the GPU).")));
  f.push_back(integer_field(
      "verifier.timing_reps", LEAP_FIELD(verifier.timing_reps), closed(0, 1000),
      "Timed repetitions of every passing candidate and its reference (the median of each gives "
      "the verdict's speedup, reference / candidate), in [0, 1000]; 0: no timing, no speedup."));
  f.push_back(integer_field(
      "verifier.feedback_max_chars", LEAP_FIELD(verifier.feedback_max_chars), at_least(1),
      "Characters of compiler/runtime feedback kept for a debug turn's prompt."));
  f.push_back(choice_field(
      "verifier.profile", LEAP_FIELD(verifier.profile),
      "Profile cuda candidates under Nsight Compute in the sandbox after their verdict, on the "
      "same GPU: off, passing (passing verdicts) or all_compiled (every candidate that compiled "
      "and ran). The longest kernels' bottleneck and guidance follow the verdict's feedback; a "
      "failure to profile is a note, never a different verdict. In a run the verdict goes on at "
      "once and the profile is made beside the run slots; only the rollout's next turn waits "
      "for it (leap verify waits for both)."));
  f.push_back(choice_field(
      "verifier.profile_tool", LEAP_FIELD(verifier.profile_tool),
      "With verifier.profile: what profiles. auto: Nsight Compute, and where it says GPU "
      "counters are not permitted (the note says what would permit them) the same candidate "
      "again and every later one from kernel events; ncu: Nsight Compute only; events: kernel "
      "activity records only (CUPTI, no counter permission needed): duration, launch "
      "configuration and theoretical occupancy, written from inside the candidate's process, so "
      "never paid as a structural reward."));
  f.push_back(integer_field(
      "verifier.profile_max_kernels", LEAP_FIELD(verifier.profile_max_kernels), at_least(1),
      "With verifier.profile: kernels (longest first) whose diagnosis a feedback carries."));
  f.push_back(real_field("verifier.profile_timeout_s", LEAP_FIELD(verifier.profile_timeout_s),
                         above(0),
                         "With verifier.profile: wall-clock limit of one profiling run under ncu, "
                         "seconds; > 0."));
  f.push_back(operational(real_field(
      "verifier.profile_wait_s", LEAP_FIELD(verifier.profile_wait_s), above(0),
      "With verifier.profile: longest a rollout's next turn waits for the last verdict's profile "
      "(queued behind others, or still under ncu) before it goes on with the verdict's own "
      "feedback, seconds; > 0.")));
  f.push_back(operational(integer_field(
      "verifier.kernelbench_standby_depth", LEAP_FIELD(verifier.kernelbench_standby_depth),
      at_least(1),
      "KernelBench task sets: how many runs ahead each run slot keeps a judge started (torch "
      "imported, CUDA started, each in a sandbox of its own and fed one candidate). 1: the next "
      "run's judge gets the current run's time to get ready; 2 covers a saturated slot whose "
      "runs are shorter than a judge's start, at twice the idle judges (host memory; on a GPU "
      "two CUDA contexts each).")));
  f.push_back(operational(
      text_field("verifier.ncu", LEAP_FIELD(verifier.ncu), check_ncu,
                 "Nsight Compute's ncu for verifier.profile: an absolute path; empty: the ncu "
                 "beside nvcc (the CUDA toolkit's bin/ncu).")));
  f.push_back(operational(
      text_list_field("verifier.nodes", LEAP_FIELD(verifier.nodes), check_node_address, true,
                      "Remote verifier nodes (`leap verifier-node`) as host:port.")));
  f.push_back(operational(integer_field(
      "verifier.local_jobs", LEAP_FIELD(verifier.local_jobs), at_least(0),
      "With verifier.nodes: jobs this host's verifier takes beside the nodes; 0: all to nodes. "
      "Ignored without nodes.")));
  f.push_back(operational(
      text_field("verifier.node_secret_file", LEAP_FIELD(verifier.node_secret_file), nullptr,
                 "File with the nodes' shared secret (--secret-file); empty: none.")));
  f.push_back(operational(
      real_field("verifier.node_timeout_s", LEAP_FIELD(verifier.node_timeout_s), above(0),
                 "Seconds without traffic after which a node counts as cut off.")));
  f.push_back(operational(
      real_field("verifier.node_retry_max_s", LEAP_FIELD(verifier.node_retry_max_s), above(0),
                 "Longest delay between attempts to reach a lost node, seconds.")));
  f.push_back(operational(
      text_field("verifier.tls.certificate", LEAP_FIELD(verifier.tls_certificate), nullptr,
                 "PEM certificate of this side for TLS to the nodes; empty: plain TCP.")));
  f.push_back(operational(text_field("verifier.tls.key", LEAP_FIELD(verifier.tls_key), nullptr,
                                     "PEM private key of verifier.tls.certificate.")));
  f.push_back(operational(
      text_field("verifier.tls.ca", LEAP_FIELD(verifier.tls_ca), nullptr,
                 "PEM CA file; set: the nodes' certificates are required and checked.")));

  // schedule
  f.push_back(choice_field(
      "schedule.mode", LEAP_FIELD(schedule.mode),
      "streaming: each stage starts when its input arrives; barrier: each stage waits for "
      "the whole batch (timing baseline)."));
  f.push_back(integer_field(
      "schedule.max_staleness", LEAP_FIELD(schedule.max_staleness), at_least(0),
      "Steps generation may run ahead of the learner; 0 is strictly on-policy; must be "
      "0 with schedule.mode barrier."));
  f.push_back(integer_field(
      "schedule.partial.over_provision", LEAP_FIELD(schedule.partial_over_provision), at_least(0),
      "Partial rollouts: groups a step keeps in flight beyond data.batch_size; it trains on the "
      "first data.batch_size to complete; 0: off. Streaming or bounded staleness only."));
  f.push_back(integer_field(
      "schedule.partial.max_carry", LEAP_FIELD(schedule.partial_max_carry), at_least(0),
      "Partial rollouts: most groups left over at a step's batch that go on into the next step "
      "(the rest are dropped); <= schedule.partial.over_provision."));

  // simulation
  f.push_back(
      operational(integer_field("simulation.tasks", LEAP_FIELD(simulation.tasks), at_least(1),
                                "`leap simulate`: synthetic tasks; >= data.batch_size.")));
  f.push_back(operational(real_field(
      "simulation.difficulty_alpha", LEAP_FIELD(simulation.difficulty_alpha), above(0),
      "`leap simulate`: first-turn pass probabilities ~ Beta(alpha, beta); alpha > 0.")));
  f.push_back(
      operational(real_field("simulation.difficulty_beta", LEAP_FIELD(simulation.difficulty_beta),
                             above(0), "`leap simulate`: beta of that Beta distribution; > 0.")));
  f.push_back(operational(
      real_field("simulation.debug_fix_probability", LEAP_FIELD(simulation.debug_fix_probability),
                 closed(0, 1),
                 "`leap simulate`: chance a failed rollout of an opened group passes at each debug "
                 "turn, in [0, 1].")));
  f.push_back(operational(real_field(
      "simulation.skill_gain", LEAP_FIELD(simulation.skill_gain), at_least(0),
      "`leap simulate`: step size of the synthetic policy (logit += skill_gain * advantage "
      "* (outcome - p)); 0 freezes it.")));
  f.push_back(operational(real_field(
      "simulation.speedup_median", LEAP_FIELD(simulation.speedup_median), above(0),
      "`leap simulate`, timed (verifier.timing_reps > 0): median over tasks of a passing "
      "candidate's true speedup over the reference at the start (log-normal); > 0.")));
  f.push_back(operational(real_field(
      "simulation.speedup_task_spread", LEAP_FIELD(simulation.speedup_task_spread), at_least(0),
      "`leap simulate`: standard deviation of ln(speedup) across tasks (drawn once per task); "
      ">= 0.")));
  f.push_back(operational(real_field(
      "simulation.speedup_spread", LEAP_FIELD(simulation.speedup_spread), at_least(0),
      "`leap simulate`: standard deviation of ln(speedup) among one task's passing candidates: "
      "the choice the policy learns to shift (0: speed cannot be learned); >= 0.")));
  f.push_back(operational(real_field(
      "simulation.speedup_noise", LEAP_FIELD(simulation.speedup_noise), closed(0, 10),
      "`leap simulate`: the measurement's relative noise (measured = true * exp(noise * N(0,1))), "
      "also stated with each speedup as rank_speed's tie margin; in [0, 10], e.g. 0.05.")));
  f.push_back(operational(real_field(
      "simulation.speedup_ceiling", LEAP_FIELD(simulation.speedup_ceiling), above(0),
      "`leap simulate`: no kernel's true speedup exceeds this (the hardware's limit), however "
      "skilled the policy; > 0, e.g. 10.")));
  f.push_back(operational(real_field(
      "simulation.optimise_improve_probability",
      LEAP_FIELD(simulation.optimise_improve_probability), closed(0, 1),
      "`leap simulate`: chance an optimisation turn (gate.optimise) makes the kernel faster by "
      "simulation.optimise_gain at the start (learned with gate.optimise.train); in [0, 1].")));
  f.push_back(operational(real_field(
      "simulation.optimise_break_probability", LEAP_FIELD(simulation.optimise_break_probability),
      closed(0, 1),
      "`leap simulate`: chance an optimisation turn breaks the kernel (fails) at the start; the "
      "rest passes at the same speed; improve + break <= 1.")));
  f.push_back(operational(real_field(
      "simulation.optimise_gain", LEAP_FIELD(simulation.optimise_gain), above(0),
      "`leap simulate`: factor on the true speedup of an optimisation turn that improves; > 0, "
      "e.g. 1.3.")));
  f.push_back(operational(real_field(
      "simulation.structural_clean", LEAP_FIELD(simulation.structural_clean), closed(0, 1),
      "`leap simulate`, profiled (verifier.profile not off): mean over tasks of the chance that a "
      "passing candidate's kernel is clean of a structural family at the start (per task and "
      "family ~ Beta with this mean); 1: always clean, 0: never; in [0, 1].")));
  f.push_back(operational(real_field(
      "simulation.structural_concentration", LEAP_FIELD(simulation.structural_concentration),
      above(0),
      "`leap simulate`: alpha + beta of that Beta (small: tasks differ widely; large: all near "
      "the mean); > 0, e.g. 2 (uniform at mean 0.5).")));
  f.push_back(operational(integer_field(
      "simulation.structural_kernels", LEAP_FIELD(simulation.structural_kernels), at_least(1),
      "`leap simulate`: kernels per profiled candidate, their time shares drawn uniformly (each "
      "clean of each family on its own); >= 1.")));
  f.push_back(operational(real_field(
      "simulation.structural_missing", LEAP_FIELD(simulation.structural_missing), closed(0, 1),
      "`leap simulate`: chance a pass has no profile in time (profiling failed, late, no kernel "
      "of its own), so it gains no structural term; in [0, 1].")));
  return f;
}

#undef LEAP_FIELD

// ---------------------------------------------------------------------------------------------
// Rules across keys

bool opens_debug_turns(gate_policy p) { return p != gate_policy::none; }

std::optional<std::string> check_threshold(const experiment_config& c, double tau) {
  if (c.gate.unit == threshold_unit::fraction) {
    if (tau < 0.0 || tau > 1.0) {
      return "must be a fraction in [0, 1] when gate.unit is fraction, got " + show(tau);
    }
    return std::nullopt;
  }
  if (tau != std::floor(tau)) {
    return "must be a whole number of failures when gate.unit is count, got " + show(tau) +
           " (or set gate.unit: fraction)";
  }
  if (tau < 0.0) {
    return "must be >= 0, got " + show(tau);
  }
  if (tau > c.rollout.group_size) {
    return "must be <= rollout.group_size (" + show(c.rollout.group_size) +
           ") when gate.unit is count, got " + show(tau);
  }
  return std::nullopt;
}

std::vector<cross_check> build_cross_checks() {
  std::vector<cross_check> checks;
  checks.push_back({{"gate.tau_min", "gate.unit", "rollout.group_size"},
                    [](const experiment_config& c) { return check_threshold(c, c.gate.tau_min); }});
  checks.push_back({{"gate.tau_max", "gate.unit", "rollout.group_size"},
                    [](const experiment_config& c) { return check_threshold(c, c.gate.tau_max); }});
  checks.push_back({{"gate.tau_min", "gate.tau_max"},
                    [](const experiment_config& c) -> std::optional<std::string> {
                      if (c.gate.tau_min > c.gate.tau_max) {
                        return "must be <= gate.tau_max (" + show(c.gate.tau_max) + "), got " +
                               show(c.gate.tau_min) + ": no group could open";
                      }
                      return std::nullopt;
                    }});
  checks.push_back({{"gate.adaptive_high_quantile", "gate.adaptive_low_quantile"},
                    [](const experiment_config& c) -> std::optional<std::string> {
                      if (c.gate.adaptive_high_quantile < c.gate.adaptive_low_quantile) {
                        return "must be >= gate.adaptive_low_quantile (" +
                               show(c.gate.adaptive_low_quantile) + "), got " +
                               show(c.gate.adaptive_high_quantile);
                      }
                      return std::nullopt;
                    }});
  checks.push_back(
      {{"gate.adaptive_min_groups", "gate.adaptive_window"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.gate.adaptive_min_groups > c.gate.adaptive_window) {
           return "must be <= gate.adaptive_window (" + show(c.gate.adaptive_window) + "), got " +
                  show(c.gate.adaptive_min_groups) +
                  ": the window never holds more groups, so the adaptive thresholds would never "
                  "apply";
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"gate.optimise.speedup", "verifier.timing_reps", "rollout.max_turns"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.gate.optimise.speedup <= 0) {
           return std::nullopt;
         }
         if (c.verifier.timing_reps == 0) {
           return "opens groups whose passes were all timed, but verifier.timing_reps is 0 and "
                  "no speedup is ever measured; set verifier.timing_reps (e.g. 20)";
         }
         if (c.rollout.max_turns < 2) {
           return "opens groups for optimisation turns, but rollout.max_turns is 1 and leaves "
                  "none; raise rollout.max_turns or set gate.optimise.speedup to 0";
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"gate.optimise.train", "gate.optimise.speedup", "reward.kind", "reward.speed_bonus.weight"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (!c.gate.optimise.train) {
           return std::nullopt;
         }
         if (c.gate.optimise.speedup <= 0) {
           return "trains on optimisation turns, but gate.optimise.speedup is 0 and opens none; "
                  "set gate.optimise.speedup (e.g. 1.2)";
         }
         // Without a reward for speed an optimisation turn can only keep or lower a first-turn
         // pass's reward: training on it would teach nothing about speed.
         if (!pays_for_speed(c.reward)) {
           return "trains on optimisation turns, but reward.kind " + to_string(c.reward.kind) +
                  " pays nothing for speed; use reward.kind rank_speed or a "
                  "reward.speed_bonus.weight > 0 (reward.kind static or binary)";
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"gate.policy", "rollout.max_turns"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (opens_debug_turns(c.gate.policy) && c.rollout.max_turns < 2) {
           return "'" + to_string(c.gate.policy) +
                  "' opens groups for debug turns, but rollout.max_turns is 1 and leaves none; "
                  "use gate.policy: none or raise rollout.max_turns";
         }
         return std::nullopt;
       }});
  checks.push_back({{"reward.static_rewards", "reward.kind", "rollout.max_turns"},
                    [](const experiment_config& c) -> std::optional<std::string> {
                      if (c.reward.kind == reward_kind::static_scalar &&
                          c.reward.static_rewards.size() !=
                              static_cast<std::size_t>(c.rollout.max_turns)) {
                        return "must hold one reward per turn, rollout.max_turns = " +
                               show(c.rollout.max_turns) + " values, got " +
                               show(c.reward.static_rewards.size());
                      }
                      return std::nullopt;
                    }});
  checks.push_back(
      {{"reward.speed_bonus.weight", "reward.kind"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.reward.speed_bonus.weight > 0 && c.reward.kind != reward_kind::static_scalar &&
             c.reward.kind != reward_kind::binary) {
           return "applies to the scalar rewards (reward.kind static or binary), not to '" +
                  to_string(c.reward.kind) +
                  "', whose rewards are ranks; use reward.kind rank_speed to rank by speed";
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"reward.speed_bonus.weight", "reward.speed_bonus.clip", "reward.static_rewards",
        "reward.failure_reward"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.reward.speed_bonus.weight <= 0 || (c.reward.kind != reward_kind::static_scalar &&
                                                  c.reward.kind != reward_kind::binary)) {
           return std::nullopt;
         }
         double least_pass = 1.0;
         if (c.reward.kind == reward_kind::static_scalar && !c.reward.static_rewards.empty()) {
           least_pass =
               *std::min_element(c.reward.static_rewards.begin(), c.reward.static_rewards.end());
         }
         const double most_penalty = c.reward.speed_bonus.weight * c.reward.speed_bonus.clip;
         if (least_pass - most_penalty <= c.reward.failure_reward) {
           return "weight * clip = " + show(most_penalty) +
                  " would let a slow pass earn no more than a failure (least pass reward " +
                  show(least_pass) + ", reward.failure_reward " + show(c.reward.failure_reward) +
                  "); lower the weight or the clip";
         }
         return std::nullopt;
       }});
  checks.push_back(
      // Named by the section: any of its weights may be the one set.
      {{"reward.structural", "reward.structural.coalescing", "reward.structural.bank_conflicts",
        "reward.structural.occupancy", "reward.structural.parallelism",
        "reward.structural.dram_traffic", "verifier.profile"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.reward.structural.enabled() && c.verifier.profile == profile_mode::off) {
           return "pays from the profiles of passing turns, but verifier.profile is off and none "
                  "is made; set verifier.profile: passing";
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"reward.kind", "verifier.timing_reps"},
       [](const experiment_config& c) -> std::optional<std::string> {
         const bool pays_speed =
             c.reward.kind == reward_kind::rank_speed ||
             (c.reward.speed_bonus.weight > 0 && (c.reward.kind == reward_kind::static_scalar ||
                                                  c.reward.kind == reward_kind::binary));
         if (pays_speed && c.verifier.timing_reps == 0) {
           return "pays for speed, but verifier.timing_reps is 0 and no speedup is ever measured; "
                  "set verifier.timing_reps (e.g. 20)";
         }
         return std::nullopt;
       }});
  checks.push_back({{"policy.endpoints", "policy.flavour"},
                    [](const experiment_config& c) -> std::optional<std::string> {
                      if (c.policy.flavour != server_flavour::embedded &&
                          c.policy.endpoints.empty()) {
                        return "must list at least one URL when policy.flavour is " +
                               to_string(c.policy.flavour);
                      }
                      return std::nullopt;
                    }});
  checks.push_back(
      {{"learner.model_path", "learner.kind"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.learner.kind == learner_kind::torch && c.learner.model_path.empty()) {
           return std::optional<std::string>{
               "is required when learner.kind is torch (the initial weights to train)"};
         }
         return std::nullopt;
       }});
  checks.push_back({{"learner.world_size", "learner.kind"},
                    [](const experiment_config& c) -> std::optional<std::string> {
                      if (c.learner.world_size > 1 && c.learner.kind != learner_kind::torch) {
                        return "must be 1 unless learner.kind is torch (only the torch learner "
                               "trains data-parallel), got " +
                               show(c.learner.world_size);
                      }
                      return std::nullopt;
                    }});
  checks.push_back({{"learner.devices", "learner.world_size", "learner.device"},
                    [](const experiment_config& c) -> std::optional<std::string> {
                      const auto& d = c.learner.devices;
                      if (d.empty()) {
                        return std::nullopt;
                      }
                      if (d.size() != static_cast<std::size_t>(c.learner.world_size)) {
                        return "must list one device per rank, learner.world_size = " +
                               show(c.learner.world_size) + " entries, got " + show(d.size());
                      }
                      if (d.front() != c.learner.device) {
                        return "must start with learner.device (" + c.learner.device +
                               "): rank 0 trains there, got " + d.front();
                      }
                      return std::nullopt;
                    }});
  checks.push_back(
      {{"policy.model", "learner.kind", "policy.flavour"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.learner.kind == learner_kind::torch &&
             c.policy.flavour == server_flavour::embedded && c.policy.model.empty()) {
           return std::optional<std::string>{
               "is required when learner.kind is torch and policy.flavour is embedded: the model "
               "folder the embedded server serves (normally learner.model_path)"};
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"policy.weight_sync", "policy.flavour", "policy.model", "learner.kind", "policy.endpoints"},
       [](const experiment_config& c) -> std::optional<std::string> {
         switch (c.policy.weight_sync) {
           case weight_sync_method::automatic:
           case weight_sync_method::disk:
           case weight_sync_method::ipc:  // its own rule below
             return std::nullopt;
           case weight_sync_method::in_memory:
             if (c.policy.flavour != server_flavour::embedded || c.policy.model.empty()) {
               return std::optional<std::string>{
                   "in_memory needs policy.flavour embedded with a policy.model (the server must "
                   "share the learner's process)"};
             }
             return std::nullopt;
           case weight_sync_method::nccl:
             // vLLM's weight-transfer routes; one broadcast group per run, with one server in it.
             if (c.policy.flavour != server_flavour::vllm) {
               return "nccl needs policy.flavour vllm (the weight-transfer routes of vllm serve "
                      "--weight-transfer-config and leap serve-policy), got " +
                      to_string(c.policy.flavour);
             }
             if (c.learner.kind != learner_kind::torch) {
               return std::optional<std::string>{
                   "nccl needs learner.kind torch (the learner broadcasts its weights)"};
             }
             if (c.policy.endpoints.size() != 1) {
               return "nccl drives exactly one server (one broadcast group per run), got " +
                      show(c.policy.endpoints.size()) + " endpoints";
             }
             return std::nullopt;
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"policy.inflight_updates", "policy.weight_sync", "policy.flavour", "policy.model",
        "learner.kind"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (!c.policy.inflight_updates) {
           return std::nullopt;
         }
         if (c.learner.kind != learner_kind::torch) {
           return std::optional<std::string>{
               "needs learner.kind torch (only its weights are synced to the servers)"};
         }
         // The disk plans pause in abort mode around the load (vLLM's /pause, SGLang's
         // /pause_generation, served by the project's servers too), which hands running requests
         // back aborted with their tokens; the transfer engines' plans drain the server instead.
         const weight_sync_method method = effective_weight_sync(c.policy);
         if (method != weight_sync_method::disk && method != weight_sync_method::in_memory) {
           return "needs policy.weight_sync disk or in_memory (the plans that load a folder and "
                  "can pause around it), got " +
                  to_string(method);
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"policy.weight_sync_delta", "policy.weight_sync", "policy.flavour", "policy.model",
        "learner.kind"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.policy.weight_sync_delta.empty()) {
           return std::nullopt;
         }
         if (c.learner.kind != learner_kind::torch) {
           return std::optional<std::string>{
               "needs learner.kind torch (the learner writes the deltas)"};
         }
         // Deltas are folders the servers load (disk) or changed tensors the learner broadcasts
         // (nccl); in_memory and ipc copy whole weights on one host, cheaper than comparing.
         const weight_sync_method method = effective_weight_sync(c.policy);
         if (method != weight_sync_method::disk && method != weight_sync_method::nccl) {
           return "applies to policy.weight_sync disk (delta folders a server loads) and nccl "
                  "(changed tensors broadcast), got " +
                  to_string(method) +
                  (c.policy.weight_sync == weight_sync_method::automatic
                       ? std::string(" (auto's choice for the embedded server)")
                       : std::string());
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"policy.weight_sync", "policy.flavour", "learner.kind", "learner.device",
        "policy.endpoints"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.policy.weight_sync != weight_sync_method::ipc) {
           return std::nullopt;
         }
         // CUDA IPC: the learner exports a device buffer that one server process on the same host
         // opens, through vLLM's weight-transfer routes.
         if (c.policy.flavour != server_flavour::vllm) {
           return "ipc needs policy.flavour vllm (the weight-transfer routes of leap serve-policy "
                  "--weight-transfer-config), got " +
                  to_string(c.policy.flavour);
         }
         if (c.learner.kind != learner_kind::torch) {
           return std::optional<std::string>{
               "ipc needs learner.kind torch (the learner exports its weights)"};
         }
         if (!c.learner.device.starts_with("cuda")) {
           return "ipc needs learner.device cuda (the weights are shared in GPU memory), got " +
                  c.learner.device;
         }
         if (c.policy.endpoints.size() != 1) {
           return "ipc drives exactly one server (on the learner's host), got " +
                  show(c.policy.endpoints.size()) + " endpoints";
         }
         if (!is_loopback_url(c.policy.endpoints.front())) {
           return "ipc needs the server on this host: its endpoint must be a loopback address "
                  "(127.0.0.1, localhost, [::1]), got " +
                  c.policy.endpoints.front();
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"policy.tokenizer"}, [](const experiment_config& c) -> std::optional<std::string> {
         // The embedded scripted backend (no policy.model) reads prompts as the
         // byte-level ChatML it answers in; a model serves any vocabulary.
         if (!c.policy.tokenizer.empty() && c.policy.flavour == server_flavour::embedded &&
             c.policy.model.empty()) {
           return std::optional<std::string>{
               "needs policy.model with policy.flavour embedded: the embedded "
               "scripted backend speaks the byte-level tokenizer only"};
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"policy.tokenizer", "policy.flavour", "rollout.max_turns"},
       [](const experiment_config& c) -> std::optional<std::string> {
         // A debug turn appends the feedback to the conversation as a token delta, learned from
         // renderings without the generation prompt; SGLang's /tokenize always adds it, so only
         // a local template can render them.
         if (c.policy.flavour == server_flavour::sglang && c.rollout.max_turns > 1 &&
             c.policy.tokenizer.empty()) {
           return "needed with policy.flavour sglang and rollout.max_turns > 1 (got " +
                  show(c.rollout.max_turns) +
                  "): debug turns render the feedback with the model's chat template here, "
                  "SGLang's /tokenize cannot; set policy.tokenizer to the served model's folder "
                  "(tokenizer.json and its chat template)";
         }
         return std::nullopt;
       }});
  checks.push_back({{"learner.mini_batches", "data.batch_size", "rollout.group_size"},
                    [](const experiment_config& c) -> std::optional<std::string> {
                      const std::int64_t rollouts =
                          static_cast<std::int64_t>(c.data.batch_size) * c.rollout.group_size;
                      if (c.learner.mini_batches > rollouts) {
                        return "must be <= data.batch_size * rollout.group_size (" +
                               show(rollouts) + " rollouts per step), got " +
                               show(c.learner.mini_batches);
                      }
                      return std::nullopt;
                    }});
  checks.push_back(
      {{"schedule.max_staleness", "schedule.mode"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.schedule.mode == schedule_mode::barrier && c.schedule.max_staleness != 0) {
           return "must be 0 when schedule.mode is barrier (steps run strictly one after "
                  "another), got " +
                  show(c.schedule.max_staleness);
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"schedule.partial.over_provision", "schedule.mode"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.schedule.mode == schedule_mode::barrier && c.schedule.partial_over_provision > 0) {
           return "must be 0 when schedule.mode is barrier (a barrier step waits for every group "
                  "it starts), got " +
                  show(c.schedule.partial_over_provision);
         }
         return std::nullopt;
       }});
  checks.push_back({{"schedule.partial.max_carry", "schedule.partial.over_provision"},
                    [](const experiment_config& c) -> std::optional<std::string> {
                      // A step's batch leaves at most over_provision groups behind: a larger bound
                      // means nothing.
                      if (c.schedule.partial_max_carry > c.schedule.partial_over_provision) {
                        return "must be <= schedule.partial.over_provision (" +
                               show(c.schedule.partial_over_provision) + "), got " +
                               show(c.schedule.partial_max_carry);
                      }
                      return std::nullopt;
                    }});
  checks.push_back(
      {{"schedule.partial.over_provision", "gate.retry.buffer"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.schedule.partial_over_provision > 0 && c.gate.retry.buffer > 0) {
           return "must be 0 with gate.retry on (a retried task is planned into one step's "
                  "batch; partial rollouts may train it in another), got " +
                  show(c.schedule.partial_over_provision);
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"data.validation_fraction", "data.validation"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (!c.data.validation.empty() && c.data.validation_fraction > 0.0) {
           return "must be 0 when data.validation names a validation set (use one or the "
                  "other), got " +
                  show(c.data.validation_fraction);
         }
         return std::nullopt;
       }});
  checks.push_back(
      {{"simulation.optimise_improve_probability", "simulation.optimise_break_probability"},
       [](const experiment_config& c) -> std::optional<std::string> {
         const double sum =
             c.simulation.optimise_improve_probability + c.simulation.optimise_break_probability;
         if (sum > 1.0 + 1e-9) {
           return "plus simulation.optimise_break_probability must be <= 1 (two "
                  "outcomes of one optimisation turn), got " +
                  show(c.simulation.optimise_improve_probability) + " + " +
                  show(c.simulation.optimise_break_probability);
         }
         return std::nullopt;
       }});
  checks.push_back({{"simulation.tasks", "data.batch_size"},
                    [](const experiment_config& c) -> std::optional<std::string> {
                      if (c.simulation.tasks < c.data.batch_size) {
                        return "must be >= data.batch_size (" + show(c.data.batch_size) +
                               "): a step samples that many distinct tasks, got " +
                               show(c.simulation.tasks);
                      }
                      return std::nullopt;
                    }});
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

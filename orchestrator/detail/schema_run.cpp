// The keys of the experiment, data and rollout sections: what the run is, what it trains on, how
// many rollouts and turns a task gets and how they are sampled.

#include "orchestrator/detail/schema_fields.hpp"
#include "orchestrator/detail/schema_sections.hpp"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>

namespace leap::config_detail {
namespace {

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

std::optional<std::string> check_top_k(int k) {
  if (k == -1 || k >= 1) {
    return std::nullopt;
  }
  return "must be -1 (disabled) or >= 1, got " + std::to_string(k);
}

// An accessor of one member of the sampling section that `section` reaches.
template <class Section, class Member>
auto member_of(Section section, Member sampling_section::*member) {
  return [ section, member ](experiment_config & c) -> auto& { return section(c).*member; };
}

// The sampling keys, for the training and the validation section alike.
template <class Section>
void add_sampling_fields(std::vector<field_spec>& fields, const std::string& prefix,
                         Section section, const std::string& purpose) {
  fields.push_back(real_field(prefix + ".temperature",
                              member_of(section, &sampling_section::temperature), at_least(0),
                              "Softmax temperature of " + purpose + "; >= 0, 0 is greedy."));
  {
    field_spec f =
        integer_field(prefix + ".top_k", member_of(section, &sampling_section::top_k), anything(),
                      "Keep the k most likely tokens of " + purpose + "; -1 disables, else >= 1.");
    f.check = [section](const experiment_config& c) { return check_top_k(view(section, c).top_k); };
    fields.push_back(std::move(f));
  }
  fields.push_back(real_field(prefix + ".top_p", member_of(section, &sampling_section::top_p),
                              open_closed(0, 1),
                              "Nucleus sampling mass of " + purpose + ", in (0, 1]."));
  fields.push_back(integer_field(prefix + ".max_tokens",
                                 member_of(section, &sampling_section::max_tokens), at_least(1),
                                 "Most tokens generated per turn of " + purpose + "; >= 1."));
  fields.push_back(
      integer_field(prefix + ".seed", member_of(section, &sampling_section::seed), at_least(-1),
                    "Per-request seed base of " + purpose +
                        ": -1 sends none; s >= 0 gives request k the seed s + k (replayable on a "
                        "deterministic server)."));
  fields.push_back(text_list_field(prefix + ".stop", member_of(section, &sampling_section::stop),
                                   not_empty, true,
                                   "Strings that end a generation of " + purpose + "."));
  fields.push_back(integer_list_field(prefix + ".stop_token_ids",
                                      member_of(section, &sampling_section::stop_token_ids),
                                      at_least(0),
                                      "Token ids that end a generation of " + purpose +
                                          ", besides the tokenizer's end-of-sequence token."));
}

}  // namespace

void add_run_fields(std::vector<field_spec>& f) {
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
}

void add_data_checks(std::vector<cross_check>& checks) {
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
}

}  // namespace leap::config_detail

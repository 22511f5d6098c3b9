// Internal to orchestrator/config: the schema's sections, one file each (schema_<section>.cpp):
// each appends its keys' entries (in the reference's order) and the rules across keys that it owns.
// config_schema.cpp concatenates them. Not a public header.
#pragma once

#include "orchestrator/detail/config_schema.hpp"

#include <vector>

namespace leap::config_detail {

// The keys, by section file.
void add_run_fields(std::vector<field_spec>& f);  // experiment, data, rollout
void add_gate_fields(std::vector<field_spec>& f);
void add_reward_fields(std::vector<field_spec>& f);  // reward, advantage
void add_learner_fields(std::vector<field_spec>& f);
void add_policy_fields(std::vector<field_spec>& f);
void add_verifier_fields(std::vector<field_spec>& f);
void add_schedule_fields(std::vector<field_spec>& f);
void add_simulation_fields(std::vector<field_spec>& f);

// The rules across keys. The learner's and the policy's come in two parts each, because the order
// of the rules is visible: a rule is skipped when one of its keys already failed, and problems on
// one line are reported in this order.
void add_gate_checks(std::vector<cross_check>& checks);
void add_reward_checks(std::vector<cross_check>& checks);
void add_policy_endpoint_checks(std::vector<cross_check>& checks);
void add_learner_checks(std::vector<cross_check>& checks);
void add_policy_checks(std::vector<cross_check>& checks);
void add_learner_batch_checks(std::vector<cross_check>& checks);
void add_schedule_checks(std::vector<cross_check>& checks);
void add_data_checks(std::vector<cross_check>& checks);
void add_simulation_checks(std::vector<cross_check>& checks);

}  // namespace leap::config_detail

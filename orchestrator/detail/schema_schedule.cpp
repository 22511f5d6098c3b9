// The keys of the schedule section (streaming or barrier steps, staleness, partial rollouts) and
// the rules between them and buffered retry.

#include "orchestrator/detail/schema_fields.hpp"
#include "orchestrator/detail/schema_sections.hpp"

#include <optional>
#include <string>

namespace leap::config_detail {
namespace {

// A barrier step runs alone and waits for every group it starts, so a key that lets steps overlap
// must be 0 there.
std::optional<std::string> zero_under_barrier(const experiment_config& c, int value,
                                              const std::string& why) {
  if (c.schedule.mode == schedule_mode::barrier && value != 0) {
    return "must be 0 when schedule.mode is barrier (" + why + "), got " + show(value);
  }
  return std::nullopt;
}

}  // namespace

void add_schedule_fields(std::vector<field_spec>& f) {
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
}

void add_schedule_checks(std::vector<cross_check>& checks) {
  checks.push_back({{"schedule.max_staleness", "schedule.mode"}, [](const experiment_config& c) {
                      return zero_under_barrier(c, c.schedule.max_staleness,
                                                "steps run strictly one after another");
                    }});
  checks.push_back(
      {{"schedule.partial.over_provision", "schedule.mode"}, [](const experiment_config& c) {
         return zero_under_barrier(c, c.schedule.partial_over_provision,
                                   "a barrier step waits for every group it starts");
       }});
  // A step's batch leaves at most over_provision groups behind: a larger bound means nothing.
  checks.push_back({{"schedule.partial.max_carry", "schedule.partial.over_provision"},
                    [](const experiment_config& c) {
                      return at_most_key(c.schedule.partial_max_carry,
                                         "schedule.partial.over_provision",
                                         c.schedule.partial_over_provision);
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
}

}  // namespace leap::config_detail

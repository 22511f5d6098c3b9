// The keys of the simulation section: `leap simulate`'s synthetic tasks and policy.

#include "orchestrator/detail/schema_fields.hpp"
#include "orchestrator/detail/schema_sections.hpp"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace leap::config_detail {

void add_simulation_fields(std::vector<field_spec>& f) {
  // Every key is operational: none changes what `leap run` computes.
  const auto add = [&f](field_spec spec) { f.push_back(operational(std::move(spec))); };
  add(integer_field("simulation.tasks", LEAP_FIELD(simulation.tasks), at_least(1),
                    "`leap simulate`: synthetic tasks; >= data.batch_size."));
  add(real_field("simulation.difficulty_alpha", LEAP_FIELD(simulation.difficulty_alpha), above(0),
                 "`leap simulate`: first-turn pass probabilities ~ Beta(alpha, beta); alpha > 0."));
  add(real_field("simulation.difficulty_beta", LEAP_FIELD(simulation.difficulty_beta), above(0),
                 "`leap simulate`: beta of that Beta distribution; > 0."));
  add(real_field("simulation.debug_fix_probability", LEAP_FIELD(simulation.debug_fix_probability),
                 closed(0, 1),
                 "`leap simulate`: chance a failed rollout of an opened group passes at each debug "
                 "turn, in [0, 1]."));
  add(real_field(
      "simulation.skill_gain", LEAP_FIELD(simulation.skill_gain), at_least(0),
      "`leap simulate`: step size of the synthetic policy (logit += skill_gain * advantage "
      "* (outcome - p)); 0 freezes it."));
  add(real_field(
      "simulation.speedup_median", LEAP_FIELD(simulation.speedup_median), above(0),
      "`leap simulate`, timed (verifier.timing_reps > 0): median over tasks of a passing "
      "candidate's true speedup over the reference at the start (log-normal); > 0."));
  add(real_field(
      "simulation.speedup_task_spread", LEAP_FIELD(simulation.speedup_task_spread), at_least(0),
      "`leap simulate`: standard deviation of ln(speedup) across tasks (drawn once per task); "
      ">= 0."));
  add(real_field(
      "simulation.speedup_spread", LEAP_FIELD(simulation.speedup_spread), at_least(0),
      "`leap simulate`: standard deviation of ln(speedup) among one task's passing candidates: "
      "the choice the policy learns to shift (0: speed cannot be learned); >= 0."));
  add(real_field(
      "simulation.speedup_noise", LEAP_FIELD(simulation.speedup_noise), closed(0, 10),
      "`leap simulate`: the measurement's relative noise (measured = true * exp(noise * N(0,1))), "
      "also stated with each speedup as rank_speed's tie margin; in [0, 10], e.g. 0.05."));
  add(real_field(
      "simulation.speedup_ceiling", LEAP_FIELD(simulation.speedup_ceiling), above(0),
      "`leap simulate`: no kernel's true speedup exceeds this (the hardware's limit), however "
      "skilled the policy; > 0, e.g. 10."));
  add(real_field(
      "simulation.optimise_improve_probability",
      LEAP_FIELD(simulation.optimise_improve_probability), closed(0, 1),
      "`leap simulate`: chance an optimisation turn (gate.optimise) makes the kernel faster by "
      "simulation.optimise_gain at the start (learned with gate.optimise.train); in [0, 1]."));
  add(real_field(
      "simulation.optimise_break_probability", LEAP_FIELD(simulation.optimise_break_probability),
      closed(0, 1),
      "`leap simulate`: chance an optimisation turn breaks the kernel (fails) at the start; the "
      "rest passes at the same speed; improve + break <= 1."));
  add(real_field(
      "simulation.optimise_gain", LEAP_FIELD(simulation.optimise_gain), above(0),
      "`leap simulate`: factor on the true speedup of an optimisation turn that improves; > 0, "
      "e.g. 1.3."));
  add(real_field(
      "simulation.structural_clean", LEAP_FIELD(simulation.structural_clean), closed(0, 1),
      "`leap simulate`, profiled (verifier.profile not off): mean over tasks of the chance that a "
      "passing candidate's kernel is clean of a structural family at the start (per task and "
      "family ~ Beta with this mean); 1: always clean, 0: never; in [0, 1]."));
  add(real_field(
      "simulation.structural_concentration", LEAP_FIELD(simulation.structural_concentration),
      above(0),
      "`leap simulate`: alpha + beta of that Beta (small: tasks differ widely; large: all near "
      "the mean); > 0, e.g. 2 (uniform at mean 0.5)."));
  add(integer_field(
      "simulation.structural_kernels", LEAP_FIELD(simulation.structural_kernels), at_least(1),
      "`leap simulate`: kernels per profiled candidate, their time shares drawn uniformly (each "
      "clean of each family on its own); >= 1."));
  add(real_field(
      "simulation.structural_missing", LEAP_FIELD(simulation.structural_missing), closed(0, 1),
      "`leap simulate`: chance a pass has no profile in time (profiling failed, late, no kernel "
      "of its own), so it gains no structural term; in [0, 1]."));
}

void add_simulation_checks(std::vector<cross_check>& checks) {
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
}

}  // namespace leap::config_detail

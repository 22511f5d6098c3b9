// What the actor tests of profiles share: a KernelBench problem the sandbox verifies on the CPU, a
// sandbox verifier that profiles its passes with a given (stand-in) ncu, a generator whose rollout
// 0 passes and the others fail, and a group parent that hands the gate's report to the test.
#pragma once

#include "actors/generator.hpp"
#include "actors/group.hpp"
#include "actors/messages.hpp"
#include "actors/verifier.hpp"
#include "sandbox/verifier.hpp"
#include "tests/sandbox/kernelbench_support.hpp"
#include "tests/sandbox/test_support.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <unordered_map>

namespace leap::actors::testing {

// Stand-in ncu scripts (sandbox::testing::stand_in_ncu) that write the H200 capture: at once
// unless the test made a `hold` file beside it, then once it writes `release`; or always only once
// it writes `release`.
inline constexpr const char* k_ncu_held_when_asked =
    "if [ -e \"$here/hold\" ]; then\n"
    "  while [ ! -e \"$here/release\" ]; do sleep 0.1; done\n"
    "fi\n"
    "cat \"$here/capture.csv\" > \"$log\"\n";
inline constexpr const char* k_ncu_held_until_released =
    "while [ ! -e \"$here/release\" ]; do sleep 0.1; done\n"
    "cat \"$here/capture.csv\" > \"$log\"\n";

// Writes the stand-in ncu's `release` file when the test ends, so that a failed assertion never
// leaves a verifier waiting on a held profile.
struct ncu_release_on_exit {
  std::filesystem::path file;
  ~ncu_release_on_exit() { std::ofstream(file) << "go\n"; }
};

// KernelBench's scale-add problem with the own-kernel check off (the CPU cannot make it).
inline std::shared_ptr<const sandbox::task> profiled_problem() {
  auto t = std::make_shared<sandbox::task>();
  t->id = "kernelbench/level1/1_ScaleAddPooled";
  t->kind = task_kind::kernelbench;
  t->reference = sandbox::testing::k_scale_add_problem;
  t->own_kernel = sandbox::own_kernel_policy::off;
  return t;
}

inline task_table profiled_problem_table() {
  auto table =
      std::make_shared<std::unordered_map<std::string, std::shared_ptr<const sandbox::task>>>();
  const auto problem = profiled_problem();
  (*table)[problem->id] = problem;
  return table;
}

// KernelBench on the CPU, one worker of each kind; with `ncu`, passing verdicts are profiled.
inline sandbox::verifier_config profiling_verifier_config(const std::string& ncu) {
  sandbox::verifier_config vc;
  vc.engine = sandbox::testing::test_engine_config();
  vc.engine.kernelbench_device = "cpu";
  vc.engine.trials = 2;
  vc.engine.kernelbench_pch = false;
  if (!ncu.empty()) {
    vc.engine.profile = profile_mode::passing;
    vc.engine.ncu = ncu;
    // Torch processes on a shared machine and a profiling run the test holds: bounds that only
    // end a hung test.
    vc.engine.profile_limits.wall = std::chrono::seconds(600);
    vc.engine.profile_limits.cpu_seconds = 600;
  }
  vc.compile_workers = 1;
  vc.run_slots = 1;
  vc.profile_workers = 1;
  return vc;
}

// Answers rollout 0 with a passing candidate and every other rollout with a failing one; `tag`
// makes the group's code its own (no verdict comes from the cache).
inline generation_actor rollout0_passes_generator(caf::actor_system& sys, const std::string& tag) {
  return sys.spawn([tag](generation_actor::pointer) -> generation_actor::behavior_type {
    return {[tag](generate_atom, generation_request& request) {
      const auto turn = leap::turn_of_request(request.request_id);
      generation_result r;
      r.text =
          sandbox::testing::scale_add_ops_candidate(tag, turn && turn->rollout == 0 ? "+" : "-");
      r.output_tokens = {1, 2, 3};
      r.output_logprobs = {-0.1F, -0.1F, -0.1F};
      return r;
    }};
  });
}

// Closes every group without debug turns and hands the gate's report (or its failure) to `to`.
inline group_parent_actor reporting_parent(caf::actor_system& sys, const caf::actor& to) {
  return sys.spawn([to](group_parent_actor::pointer) -> group_parent_actor::behavior_type {
    return {
        [](decide_atom, const group_key&, std::int32_t, std::int32_t) {
          return gate_ruling{gate_decision::closed_no_debug, {}};
        },
        [to](group_done_atom, group_report& report) {
          caf::anon_send(to, group_done_atom_v, std::move(report));
        },
        [to](group_failed_atom, const group_key& key, const std::string& why) {
          caf::anon_send(to, group_failed_atom_v, key, why);
        },
    };
  });
}

}  // namespace leap::actors::testing

// The words every part of LEAP shares: a task's group of rollouts, a rollout's turns, and the
// outcome that gating, rewards and metrics are computed from. Plain structs, no behaviour.
#pragma once

#include "common/enums/gate_decision.hpp"
#include "common/enums/verdict_category.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace leap {

// verdict_category (why a turn's candidate passed or failed) is the sandbox's own type, from the
// shared vocabulary (common/enums), so that the math and the store need not include the sandbox.

// The outcome of one rollout after all its turns: the 1-based turn at which it first passed, or 0
// when it never passed; and how many turns the model generated (T_i in the paper, at least 1).
struct rollout_outcome {
  int passed_at_turn = 0;
  int generated_turns = 1;

  [[nodiscard]] bool passed() const { return passed_at_turn > 0; }
};

// gate_decision (the DCP gate's decision for a group) is common/enums' too: the store and the
// experiment actor read it.

[[nodiscard]] inline bool is_open(gate_decision d) { return d == gate_decision::open; }

}  // namespace leap

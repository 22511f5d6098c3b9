#include "orchestrator/trajectory.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <set>
#include <type_traits>
#include <utility>

namespace leap {

namespace {

bool has_nul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

status check_id(std::string_view what, std::string_view id) {
  if (id.empty()) {
    return error{std::string(what) + " is empty"};
  }
  if (has_nul(id)) {
    return error{std::string(what) + " contains a NUL byte"};
  }
  return ok_status();
}

std::string group_name(const group_record& g) {
  return "group (run '" + g.run_id + "', step " + std::to_string(g.step) + ", " +
         to_string(g.split) + " group " + std::to_string(g.group_index) + ")";
}

}  // namespace

// ---- helpers
// -------------------------------------------------------------------------------------

result<flat_rollout> flatten(const rollout_record& rollout) {
  flat_rollout flat;
  std::size_t total = 0;
  for (const auto& t : rollout.turns) {
    total += t.input_tokens.size() + t.output_tokens.size();
  }
  flat.tokens.reserve(total);
  flat.mask.reserve(total);
  flat.token_turn.reserve(total);
  flat.behaviour_logprobs.reserve(total);
  for (std::size_t turn = 0; turn < rollout.turns.size(); ++turn) {
    const auto& t = rollout.turns[turn];
    if (t.output_logprobs.size() != t.output_tokens.size()) {
      return error{"rollout " + std::to_string(rollout.index) + " turn " + std::to_string(turn) +
                   ": " + std::to_string(t.output_tokens.size()) + " output tokens but " +
                   std::to_string(t.output_logprobs.size()) + " log-probs"};
    }
    flat.tokens.insert(flat.tokens.end(), t.input_tokens.begin(), t.input_tokens.end());
    flat.mask.insert(flat.mask.end(), t.input_tokens.size(), 0);
    flat.token_turn.insert(flat.token_turn.end(), t.input_tokens.size(), not_generated);
    flat.behaviour_logprobs.insert(flat.behaviour_logprobs.end(), t.input_tokens.size(), 0.0F);

    flat.tokens.insert(flat.tokens.end(), t.output_tokens.begin(), t.output_tokens.end());
    flat.mask.insert(flat.mask.end(), t.output_tokens.size(), 1);
    flat.token_turn.insert(flat.token_turn.end(), t.output_tokens.size(), static_cast<int>(turn));
    flat.behaviour_logprobs.insert(flat.behaviour_logprobs.end(), t.output_logprobs.begin(),
                                   t.output_logprobs.end());
  }
  return flat;
}

rollout_outcome outcome_from_turns(const rollout_record& rollout) {
  rollout_outcome outcome;
  outcome.generated_turns = std::max<int>(1, static_cast<int>(rollout.turns.size()));
  for (std::size_t i = 0; i < rollout.turns.size(); ++i) {
    if (rollout.turns[i].passed) {
      outcome.passed_at_turn = static_cast<int>(i) + 1;
      break;
    }
  }
  return outcome;
}

namespace {

pass_speed passing_turn_speed(const rollout_record& rollout, const rollout_outcome& outcome,
                              double turn_record::*speedup, double turn_record::*noise) {
  if (!outcome.passed()) {
    return {};
  }
  const auto turn = static_cast<std::size_t>(outcome.passed_at_turn - 1);
  if (turn >= rollout.turns.size() || !rollout.turns[turn].passed) {
    return {};
  }
  const double s = rollout.turns[turn].*speedup;
  if (!measured_speedup(s)) {
    return {};
  }
  const double n = rollout.turns[turn].*noise;
  return {s, n >= 0 && std::isfinite(n) ? std::optional<double>(n) : std::nullopt};
}

}  // namespace

pass_speed speed_of(const rollout_record& rollout, const rollout_outcome& outcome) {
  return passing_turn_speed(rollout, outcome, &turn_record::speedup, &turn_record::speedup_noise);
}

pass_speed compiled_speed_of(const rollout_record& rollout, const rollout_outcome& outcome) {
  return passing_turn_speed(rollout, outcome, &turn_record::compiled_speedup,
                            &turn_record::compiled_speedup_noise);
}

group_summary summarize(const group_record& group) {
  group_summary s;
  s.gate = group.gate;
  s.outcomes.reserve(group.rollouts.size());
  s.advantages.reserve(group.rollouts.size());
  for (const auto& r : group.rollouts) {
    s.outcomes.push_back(r.outcome);
    s.advantages.push_back(r.advantage);
  }
  return s;
}

group_summary probe_summary(const group_record& group) {
  group_summary s = summarize(group);
  s.gate = gate_decision::open;
  for (std::size_t i = 0; i < group.rollouts.size(); ++i) {
    s.outcomes[i] = outcome_from_turns(group.rollouts[i]);
  }
  return s;
}

std::vector<turn_weight_segment> weight_segments_of(const turn_record& turn) {
  if (turn.weight_segments.empty()) {
    return {{0, turn.weight_version}};
  }
  return turn.weight_segments;
}

std::vector<std::uint64_t> output_token_versions(const turn_record& turn) {
  const auto segments = weight_segments_of(turn);
  std::vector<std::uint64_t> out(turn.output_tokens.size(), segments.front().version);
  for (std::size_t i = 1; i < segments.size(); ++i) {
    const std::size_t end = i + 1 < segments.size() ? segments[i + 1].first : out.size();
    for (std::size_t k = segments[i].first; k < std::min(end, out.size()); ++k) {
      out[k] = segments[i].version;
    }
  }
  return out;
}

std::uint64_t oldest_weight_version(const turn_record& turn) {
  std::uint64_t oldest = turn.weight_version;
  for (const auto& s : turn.weight_segments) {
    oldest = std::min(oldest, s.version);
  }
  return oldest;
}

namespace {

// The segments' invariants (trajectory.hpp): none, or from 0 with the turn's weight_version and
// strictly increasing firsts inside the output tokens.
status check_segments(const turn_record& turn) {
  const auto& segments = turn.weight_segments;
  if (segments.empty()) {
    return ok_status();
  }
  if (segments.front().first != 0 || segments.front().version != turn.weight_version) {
    return error{"weight segments start at token " + std::to_string(segments.front().first) +
                 " with version " + std::to_string(segments.front().version) +
                 ", not at 0 with the turn's weight version " +
                 std::to_string(turn.weight_version)};
  }
  for (std::size_t i = 1; i < segments.size(); ++i) {
    if (segments[i].first <= segments[i - 1].first ||
        segments[i].first >= turn.output_tokens.size()) {
      return error{"weight segment " + std::to_string(i) + " starts at token " +
                   std::to_string(segments[i].first) + ", not after the previous segment and " +
                   "before the turn's " + std::to_string(turn.output_tokens.size()) +
                   " output tokens"};
    }
  }
  return ok_status();
}

}  // namespace

status validate(const group_record& group) {
  if (auto s = check_id("run id", group.run_id); !s) {
    return s.err().wrap(group_name(group));
  }
  if (auto s = check_id("task id", group.task_id); !s) {
    return s.err().wrap(group_name(group));
  }
  std::set<std::uint32_t> seen;
  for (const auto& r : group.rollouts) {
    if (!seen.insert(r.index).second) {
      return error{group_name(group) + ": rollout index " + std::to_string(r.index) +
                   " appears twice"};
    }
    for (std::size_t t = 0; t < r.turns.size(); ++t) {
      const auto& turn = r.turns[t];
      const std::string where =
          group_name(group) + ": rollout " + std::to_string(r.index) + " turn " + std::to_string(t);
      if (turn.output_logprobs.size() != turn.output_tokens.size()) {
        return error{where + ": " + std::to_string(turn.output_tokens.size()) +
                     " output tokens but " + std::to_string(turn.output_logprobs.size()) +
                     " log-probs"};
      }
      if (turn.passed != (turn.verdict == verdict_category::pass)) {
        return error{where + ": passed is " + (turn.passed ? "true" : "false") +
                     " but the verdict is " + to_string(turn.verdict)};
      }
      if (auto s = check_segments(turn); !s) {
        return s.err().wrap(where);
      }
    }
  }
  return ok_status();
}

status validate(const step_record& step) {
  const std::string where = "step " + std::to_string(step.step) + " of run '" + step.run_id + "'";
  if (auto s = check_id("run id", step.run_id); !s) {
    return s.err().wrap(where);
  }
  for (const auto& [name, value] : step.metrics) {
    if (auto s = check_id("metric name", name); !s) {
      return s.err().wrap(where);
    }
  }
  return ok_status();
}

status validate(const run_record& run) {
  if (auto s = check_id("run id", run.id); !s) {
    return s.err().wrap("run record");
  }
  return ok_status();
}

}  // namespace leap

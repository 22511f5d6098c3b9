// Trajectory records with every field set to something other than its default: shared by the
// orchestrator's record tests and the storage codec's.
#pragma once

#include "orchestrator/trajectory.hpp"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace leap::test {

inline turn_record make_turn(std::vector<token_id> in, std::vector<token_id> out, bool passed) {
  turn_record t;
  t.input_tokens = std::move(in);
  t.output_tokens = std::move(out);
  for (std::size_t i = 0; i < t.output_tokens.size(); ++i) {
    t.output_logprobs.push_back(-0.25F * static_cast<float>(i + 1));
  }
  t.passed = passed;
  t.verdict = passed ? verdict_category::pass : verdict_category::compile;
  return t;
}

// A group that exercises every field with a value other than its default.
inline group_record rich_group() {
  group_record g;
  g.run_id = "run-7";
  g.step = 0x0102030405060708ULL;
  g.split = split_kind::validation;
  g.group_index = 513;
  g.task_id = "kernelbench/level1/19_relu";
  g.max_turns = 3;
  g.gate = gate_decision::open;
  g.n_fail = 5;
  g.thresholds = {4, 8};
  g.probe = true;
  g.started_unix_ms = 1'700'000'000'123;
  g.gated_unix_ms = 1'700'000'004'000;
  g.finished_unix_ms = -1;  // any int64 round-trips
  for (std::uint32_t i = 0; i < 3; ++i) {
    rollout_record r;
    r.index = 2 - i;
    r.turns.push_back(make_turn({1, 2, 3}, {100, 200 + static_cast<token_id>(i)}, false));
    auto& t0 = r.turns.back();
    t0.text = "```cuda\n__global__ void k() {}\n```";
    t0.code_hash = "sha256:abc" + std::to_string(i);
    // The length comes from the literal: the NUL inside must survive the round trip, and a
    // hand-counted length read past the literal's end.
    static constexpr char feedback[] = "error: identifier \"x\" is undefined\n\0binary";
    t0.feedback = std::string(feedback, sizeof(feedback) - 1);
    t0.timings = {1234.5, 800.25, 0.0, 12.0, 3.5, 0.125};
    t0.weight_version = 41;
    t0.weight_segments = {{0, 41}, {1, 42 + i}};  // an update in flight after the first token
    t0.finish = finish_reason::length;
    t0.endpoint = "http://127.0.0.1:8000";
    if (i != 1) {
      r.turns.push_back(make_turn({7, -1, std::numeric_limits<token_id>::max()}, {5}, i == 0));
      r.turns.back().weight_version = std::numeric_limits<std::uint64_t>::max();
      r.turns.back().speedup = i == 0 ? 1.8125 : 0.0;  // a timed pass; an untimed failure
    }
    r.outcome = outcome_from_turns(r);
    r.rank = i == 0 ? 2 : 0;
    r.reward = i == 0 ? 1.0 : -0.5;
    r.advantage = i == 0 ? 1.4142135623730951 : -0.7071067811865476;
    r.truncated = true;
    g.rollouts.push_back(std::move(r));
  }
  return g;
}

inline step_record rich_step() {
  step_record s;
  s.run_id = "run-7";
  s.step = 12;
  s.weight_version = 13;
  s.started_unix_ms = 1'700'000'000'000;
  s.finished_unix_ms = 1'700'000'060'000;
  s.timings = {60000.0, 30000.5, 10000.25, 5000.0, 12000.0, 2999.25};
  s.counts = {32, 20, 3, 256, 100, 400, 410, 1'000'000'000'000ULL};
  s.metrics = {{"accuracy@1", 0.25}, {"accuracy@3", 0.5}, {"loss", -1e-300}};
  return s;
}

// ---- flatten -----------------------------------------------------------------------------------

}  // namespace leap::test

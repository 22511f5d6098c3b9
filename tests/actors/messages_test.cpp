// Every message type survives CAF's binary serializer unchanged (the form in which it would cross
// the network to a verifier node), and the type-ID block registers them all.
#include "actors/messages.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/make_message.hpp>
#include <caf/message.hpp>
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace leap::actors {
namespace {

// One system per test: a static one would be destroyed after CAF's own statics at exit.
struct test_system {
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  test_system() {
    register_message_types(config);
    system = std::make_unique<caf::actor_system>(config);
  }
};

template <class T>
T round_trip(const T& value) {
  test_system ts;
  auto& sys = *ts.system;
  std::vector<char> bytes;
  caf::binary_serializer sink{sys, bytes};
  T copy = value;
  const auto written = sink(copy);
  EXPECT_FALSE(written) << sys.render(written);
  EXPECT_FALSE(bytes.empty());
  T out{};
  caf::binary_deserializer source{sys, bytes};
  const auto read = source(out);
  EXPECT_FALSE(read) << sys.render(read);
  return out;
}

turn_record sample_turn(bool with_hash) {
  turn_record t;
  t.input_tokens = {1, 2, 3};
  t.output_tokens = {40, 41};
  t.output_logprobs = {-0.5f, -0.25f};
  t.text = "```cpp\nint main() {}\n```";
  if (with_hash) {
    t.code_hash = "ab12";
  }
  t.verdict = verdict_category::compile;
  t.passed = false;
  t.feedback = "error: expected ';'";
  t.timings = {10.0, 2.0, 3.0, 0.5, 0.25, 0.125};
  t.weight_version = 7;
  t.finish = finish_reason::length;
  t.endpoint = "http://127.0.0.1:8000";
  t.speedup = 1.375;
  return t;
}

group_record sample_group() {
  group_record g;
  g.run_id = "run-a";
  g.step = 12;
  g.split = split_kind::validation;
  g.group_index = 3;
  g.task_id = "cpp/doubling";
  g.max_turns = 3;
  g.gate = gate_decision::open;
  g.n_fail = 5;
  g.thresholds = {4, 8};
  g.probe = true;
  rollout_record r;
  r.index = 1;
  r.turns = {sample_turn(true), sample_turn(false)};
  r.outcome = {2, 2};
  r.rank = 2;
  r.reward = 0.25;
  r.advantage = -0.5;
  r.truncated = true;
  g.rollouts = {r, r};
  g.rollouts[1].index = 2;
  g.started_unix_ms = 1700000000000;
  g.gated_unix_ms = 1700000000100;
  g.finished_unix_ms = 1700000000200;
  g.weight_version = 6;
  return g;
}

TEST(MessagesTest, VocabularyRoundTrips) {
  EXPECT_EQ(round_trip(sample_turn(true)), sample_turn(true));
  EXPECT_EQ(round_trip(sample_turn(false)), sample_turn(false));
  EXPECT_FALSE(round_trip(sample_turn(false)).code_hash.has_value());
  EXPECT_EQ(round_trip(sample_group()), sample_group());
  EXPECT_EQ(round_trip(sample_group().rollouts[0]), sample_group().rollouts[0]);

  step_record s;
  s.run_id = "run-a";
  s.step = 4;
  s.weight_version = 5;
  s.started_unix_ms = 11;
  s.finished_unix_ms = 22;
  s.timings = {100, 40, 20, 10, 25, 5};
  s.counts = {8, 3, 1, 64, 20, 90, 88, 12345};
  s.metrics = {{"acc_at_1", 0.25}, {"activated_fraction", 0.375}};
  EXPECT_EQ(round_trip(s), s);

  run_record run{"run-a", "experiment:\n  name: a\n", 123, run_status::interrupted};
  EXPECT_EQ(round_trip(run), run);

  sampling_section sampling;
  sampling.temperature = 0.7;
  sampling.top_k = 20;
  sampling.top_p = 0.9;
  sampling.max_tokens = 512;
  sampling.seed = 42;
  sampling.stop = {"</s>", "```\n\n"};
  sampling.stop_token_ids = {2, 259};
  EXPECT_EQ(round_trip(sampling), sampling);
}

TEST(MessagesTest, ActorMessagesRoundTrip) {
  const group_key key{9, split_kind::validation, 4};
  EXPECT_EQ(round_trip(key), key);
  EXPECT_EQ(round_trip(chat_text{"user", "fix it"}), (chat_text{"user", "fix it"}));

  generation_request request;
  request.request_id = "run/1/train/2/3/1";
  request.history = {1, 2, 3, 4};
  request.append = {{"user", "feedback"}};
  request.sampling.temperature = 0.5;
  request.seed = 99;
  request.pinned_endpoint = 1;
  EXPECT_EQ(round_trip(request), request);

  generation_result generated;
  generated.input_tokens = {5, 6};
  generated.output_tokens = {7, 8, 9};
  generated.output_logprobs = {-1.0f, -2.0f, -3.0f};
  generated.text = "answer";
  generated.finish = finish_reason::error;
  generated.error = "unavailable: connection refused";
  generated.endpoint_index = 2;
  generated.endpoint = "http://h:1";
  generated.weight_version = 3;
  generated.generation_ms = 12.5;
  generated.queue_ms = 1.5;
  generated.finished_ms = 99.0;
  EXPECT_EQ(round_trip(generated), generated);

  const verification_request check{"run/1/train/2/3/1", "cuda/relu", "```cuda\n...\n```"};
  EXPECT_EQ(round_trip(check), check);

  verification_result verdict;
  verdict.verdict = verdict_category::timeout;
  verdict.feedback = "time limit";
  verdict.code_hash = "ff00";
  verdict.compile_ms = 1000;
  verdict.run_ms = 250;
  verdict.queue_ms = 3;
  verdict.cache_hit = true;
  verdict.speedup = 2.25;
  verdict.finished_ms = 4;
  verdict.infrastructure_error = "no nvcc";
  EXPECT_EQ(round_trip(verdict), verdict);
  verdict.code_hash.reset();
  EXPECT_EQ(round_trip(verdict), verdict);

  EXPECT_EQ(round_trip(ack{"disk full"}), ack{"disk full"});
  const gate_ruling ruling{gate_decision::closed_hopeless, {2, 6}};
  EXPECT_EQ(round_trip(ruling), ruling);
  const weight_update update{4, "/ckpt/step-4"};
  EXPECT_EQ(round_trip(update), update);

  learner_step_result learned;
  learned.step = 3;
  learned.weight_version = 4;
  learned.learner_ms = 1234.5;
  learned.sequences = 256;
  learned.weights_path = "/ckpt";
  learned.metrics = {{"loss", 0.5}};
  learned.error = "";
  EXPECT_EQ(round_trip(learned), learned);

  const activity busy{activity_kind::compile, 1.5, 2.5};
  EXPECT_EQ(round_trip(busy), busy);

  group_report report;
  report.key = key;
  report.task_id = "t";
  report.gate = gate_decision::closed_easy;
  report.n_fail = 1;
  report.probe = true;
  report.outcomes = {{1, 1}, {0, 1}};
  report.measured = {{1, 1}, {2, 2}};
  report.advantages = {1.0, -1.0};
  report.speedups = {1.5, 0.0};
  report.turns = 3;
  report.verifier_jobs = 3;
  report.generated_tokens = 77;
  report.activities = {busy};
  EXPECT_EQ(round_trip(report), report);

  loaded_groups loaded{{sample_group()}, "io error"};
  EXPECT_EQ(round_trip(loaded), loaded);

  loaded_carry carry;
  carry.found = true;
  carry.record.step = 4;
  carry.record.groups = {{3, 2, 17, "cpp/axpby", 3, false}, {4, 0, 5, "python/two_sum", 4, true}};
  carry.stored = {sample_group()};
  carry.turns = {{{sample_turn(true)}, {}}, {}};
  carry.error = "partly read";
  EXPECT_EQ(round_trip(carry), carry);
  EXPECT_EQ(round_trip(carry.record), carry.record);

  run_summary summary{run_status::failed, 3, 4, 32, 5, 17, "store: disk full"};
  EXPECT_EQ(round_trip(summary), summary);
  // A group without a measured version comes back without one.
  auto train = sample_group();
  train.weight_version.reset();
  EXPECT_EQ(round_trip(train), train);
}

TEST(MessagesTest, TypeIdBlockAssignsDistinctIdsAndRegisters) {
  const std::set<caf::type_id_t> ids = {
      caf::type_id<group_record>::value,
      caf::type_id<step_record>::value,
      caf::type_id<run_record>::value,
      caf::type_id<turn_record>::value,
      caf::type_id<rollout_record>::value,
      caf::type_id<sampling_section>::value,
      caf::type_id<group_key>::value,
      caf::type_id<chat_text>::value,
      caf::type_id<generation_request>::value,
      caf::type_id<generation_result>::value,
      caf::type_id<verification_request>::value,
      caf::type_id<verification_result>::value,
      caf::type_id<ack>::value,
      caf::type_id<gate_ruling>::value,
      caf::type_id<weight_update>::value,
      caf::type_id<learner_step_result>::value,
      caf::type_id<activity>::value,
      caf::type_id<group_report>::value,
      caf::type_id<loaded_groups>::value,
      caf::type_id<run_summary>::value,
  };
  EXPECT_EQ(ids.size(), 20u);
  EXPECT_GE(*ids.begin(), caf::first_custom_type_id);
  EXPECT_STREQ(caf::type_name<group_record>::value, "leap::group_record");

  // A message holding a registered type serialises as a whole, as it does between nodes.
  test_system ts;
  auto& sys = *ts.system;
  auto message = caf::make_message(put_group_atom_v, sample_group());
  std::vector<char> bytes;
  caf::binary_serializer sink{sys, bytes};
  ASSERT_FALSE(sink(message));
  caf::message back;
  caf::binary_deserializer source{sys, bytes};
  ASSERT_FALSE(source(back)) << "the type-ID block is not registered";
  ASSERT_TRUE((back.match_elements<put_group_atom, group_record>()));
  EXPECT_EQ(back.get_as<group_record>(1), sample_group());
}

TEST(MessagesTest, GroupKeyNamesTheGroupForLogs) {
  EXPECT_EQ(to_string(group_key{12, split_kind::train, 5}), "step 13 | train group 5");
  EXPECT_EQ(to_string(group_key{0, split_kind::validation, 0}), "step 1 | validation group 0");
}

}  // namespace
}  // namespace leap::actors

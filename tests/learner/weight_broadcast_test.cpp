// learner::broadcast_sender -> broadcast_receiver on one host, in the dtype the paper's models are
// served in. On a CPU build the group is gloo's (the server-side path of vLLM's nccl engine).
#include "learner/weight_broadcast.hpp"

#include "learner/policy.hpp"
#include "tests/learner/test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>

namespace leap::learner {
namespace {

using namespace std::chrono_literals;

TEST(WeightBroadcast, Bfloat16WeightsArriveUnchanged) {
  const auto backends = broadcast_backends();
  if (std::find(backends.begin(), backends.end(), "gloo") == backends.end()) {
    GTEST_SKIP() << "this build has no gloo process group";
  }
  const auto config = testing::tiny_qwen2();
  policy_options options;
  options.dtype = "bfloat16";
  auto learner = policy::create_random(config, 1, options);
  auto served = policy::create_random(config, 2, options);
  ASSERT_TRUE(learner.ok() && served.ok());
  const auto ids = testing::random_ids(20, config.vocab_size, 3);
  const auto expected = learner->token_logprobs({ids});
  const auto before = served->token_logprobs({ids});
  ASSERT_TRUE(expected.ok() && before.ok());
  ASSERT_NE((*expected)[0], (*before)[0]) << "two seeds gave the same model";

  auto sender = broadcast_sender::listen("127.0.0.1", 0, 2, 120s);
  ASSERT_TRUE(sender.ok()) << sender.err().message;
  broadcast_rendezvous rv;
  rv.master_port = (*sender)->port();
  auto joining =
      std::async(std::launch::async, [&] { return broadcast_receiver::join(rv, "cpu", 120s); });
  ASSERT_TRUE((*sender)->connect("cpu").ok());
  auto receiver = joining.get();
  ASSERT_TRUE(receiver.ok()) << receiver.err().message;
  const auto layout = broadcast_layout(*learner);
  ASSERT_FALSE(layout.empty());
  EXPECT_EQ(layout.front().dtype, "bfloat16");
  auto received =
      std::async(std::launch::async, [&] { return (*receiver)->receive(layout, *served); });
  const auto sent = (*sender)->send(*learner);
  ASSERT_TRUE(sent.ok()) << sent.err().message;
  const auto got = received.get();
  ASSERT_TRUE(got.ok()) << got.err().message;
  ASSERT_TRUE((*receiver)->commit(*served).ok());

  // The same bf16 weights through the same code path: the same log-probs.
  const auto after = served->token_logprobs({ids});
  ASSERT_TRUE(after.ok());
  for (std::size_t t = 0; t < ids.size(); ++t) {
    EXPECT_NEAR((*after)[0][t], (*expected)[0][t], 1e-6) << t;
  }
}

}  // namespace
}  // namespace leap::learner

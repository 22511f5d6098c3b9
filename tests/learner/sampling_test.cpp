#include "learner/policy.hpp"
#include "tests/learner/test_support.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

namespace leap::learner {
namespace {

using ::testing::HasSubstr;

// A random tiny model with larger weights than the default init, so that its distributions are far
// from uniform and greedy choices are not near-ties.
policy sharp_model(const model_config& config) {
  auto weights = testing::random_test_weights(config, 17);
  auto p = policy::create_random(config, 1);
  EXPECT_TRUE(p.ok());
  for (const auto& [name, t] : weights) {
    EXPECT_TRUE(p->set_parameter(name, t).ok()) << name;
  }
  return std::move(*p);
}

TEST(Sampling, GreedyWithKvCacheEqualsRecomputation) {
  for (const auto& config : {testing::tiny_qwen2(), testing::tiny_llama(), testing::tiny_qwen3()}) {
    SCOPED_TRACE(config.model_type);
    auto p = sharp_model(config);
    const auto prompt = testing::random_ids(6, config.vocab_size, 3);
    sampling_params params{.max_tokens = 20, .temperature = 0.0, .n = 2};
    auto cached = p.sample(prompt, params);
    ASSERT_TRUE(cached.ok()) << cached.err().message;
    params.use_kv_cache = false;
    auto recomputed = p.sample(prompt, params);
    ASSERT_TRUE(recomputed.ok()) << recomputed.err().message;
    ASSERT_EQ(cached->size(), 2U);
    for (std::size_t i = 0; i < cached->size(); ++i) {
      EXPECT_EQ((*cached)[i].token_ids, (*recomputed)[i].token_ids);
      ASSERT_EQ((*cached)[i].logprobs.size(), 20U);
      for (std::size_t t = 0; t < 20; ++t) {
        EXPECT_NEAR((*cached)[i].logprobs[t], (*recomputed)[i].logprobs[t], 1e-4);
      }
      EXPECT_EQ((*cached)[i].finish, finish_reason::length);
    }
    EXPECT_EQ((*cached)[0].token_ids, (*cached)[1].token_ids)
        << "greedy: every completion is the same";
  }
}

TEST(Sampling, ReportedLogprobsEqualTheScorersForTheSameIds) {
  const auto config = testing::tiny_qwen2();
  auto p = sharp_model(config);
  const auto prompt = testing::random_ids(5, config.vocab_size, 8);
  // Temperature and top-k change what is sampled, not what is reported: log pi at temperature 1.
  auto out = p.sample(
      prompt, {.max_tokens = 12, .temperature = 0.7, .top_p = 0.9, .top_k = 50, .n = 3, .seed = 4});
  ASSERT_TRUE(out.ok()) << out.err().message;
  for (const auto& c : *out) {
    auto full = prompt;
    full.insert(full.end(), c.token_ids.begin(), c.token_ids.end());
    auto scored = p.token_logprobs({full});
    ASSERT_TRUE(scored.ok());
    for (std::size_t t = 0; t < c.token_ids.size(); ++t) {
      EXPECT_NEAR(c.logprobs[t], (*scored)[0][prompt.size() + t], 1e-4) << t;
    }
  }
}

TEST(Sampling, SeedsMakeSamplingReproducible) {
  const auto config = testing::tiny_llama();
  auto p = sharp_model(config);
  const auto prompt = testing::random_ids(4, config.vocab_size, 2);
  sampling_params params{.max_tokens = 15, .temperature = 1.0, .n = 4, .seed = 123};
  auto a = p.sample(prompt, params);
  auto b = p.sample(prompt, params);
  params.seed = 124;
  auto c = p.sample(prompt, params);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  std::set<std::vector<std::int32_t>> distinct;
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ((*a)[i].token_ids, (*b)[i].token_ids);
    distinct.insert((*a)[i].token_ids);
  }
  EXPECT_GT(distinct.size(), 1U) << "the n completions differ";
  bool any_differs = false;
  for (std::size_t i = 0; i < 4; ++i) {
    any_differs = any_differs || (*a)[i].token_ids != (*c)[i].token_ids;
  }
  EXPECT_TRUE(any_differs) << "another seed, other samples";
}

TEST(Sampling, TopKOfOneIsGreedyAndTopPKeepsTheNucleus) {
  const auto config = testing::tiny_qwen2();
  auto p = sharp_model(config);
  const auto prompt = testing::random_ids(4, config.vocab_size, 6);
  auto greedy = p.sample(prompt, {.max_tokens = 10, .temperature = 0.0});
  auto top1 = p.sample(prompt, {.max_tokens = 10, .temperature = 1.5, .top_k = 1, .seed = 9});
  auto tiny_p = p.sample(prompt, {.max_tokens = 10, .temperature = 1.0, .top_p = 1e-6, .seed = 9});
  ASSERT_TRUE(greedy.ok() && top1.ok() && tiny_p.ok());
  EXPECT_EQ((*greedy)[0].token_ids, (*top1)[0].token_ids);
  EXPECT_EQ((*greedy)[0].token_ids, (*tiny_p)[0].token_ids)
      << "a tiny nucleus holds only the top token";
}

TEST(Sampling, TopKRestrictsTheChoice) {
  const auto config = testing::tiny_qwen2();
  auto p = sharp_model(config);
  const std::vector<std::int32_t> prompt = {1, 2, 3};
  auto logits = p.logits(prompt);
  ASSERT_TRUE(logits.ok());
  const auto n_vocab = static_cast<std::size_t>(config.vocab_size);
  std::vector<std::pair<float, std::int32_t>> last;
  for (std::size_t i = 0; i < n_vocab; ++i) {
    last.emplace_back((*logits)[2 * n_vocab + i], static_cast<std::int32_t>(i));
  }
  std::sort(last.rbegin(), last.rend());
  const std::set<std::int32_t> top3 = {last[0].second, last[1].second, last[2].second};
  auto out =
      p.sample(prompt, {.max_tokens = 1, .temperature = 5.0, .top_k = 3, .n = 64, .seed = 1});
  ASSERT_TRUE(out.ok());
  std::set<std::int32_t> seen;
  for (const auto& c : *out) {
    EXPECT_TRUE(top3.contains(c.token_ids[0])) << c.token_ids[0];
    seen.insert(c.token_ids[0]);
  }
  EXPECT_EQ(seen.size(), 3U) << "at temperature 5 all three get drawn in 64 tries";
}

TEST(Sampling, StopTokensEndACompletionAndAreKept) {
  const auto config = testing::tiny_qwen2();
  auto p = sharp_model(config);
  const auto prompt = testing::random_ids(4, config.vocab_size, 6);
  auto greedy = p.sample(prompt, {.max_tokens = 10, .temperature = 0.0});
  ASSERT_TRUE(greedy.ok());
  const auto& tokens = (*greedy)[0].token_ids;
  // Stop at the third greedy token (first occurrence).
  const auto stop = tokens[2];
  const auto first =
      static_cast<std::size_t>(std::find(tokens.begin(), tokens.end(), stop) - tokens.begin());
  auto stopped = p.sample(prompt, {.max_tokens = 10, .temperature = 0.0, .stop_token_ids = {stop}});
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ((*stopped)[0].finish, finish_reason::stop);
  EXPECT_EQ((*stopped)[0].token_ids,
            std::vector<std::int32_t>(tokens.begin(), tokens.begin() + first + 1));
  EXPECT_EQ((*stopped)[0].logprobs.size(), first + 1);

  // With n > 1 and sampling, each completion stops on its own; the others continue.
  auto mixed = p.sample(prompt, {.max_tokens = 30,
                                 .temperature = 1.0,
                                 .n = 8,
                                 .stop_token_ids = {stop, tokens[0]},
                                 .seed = 5});
  ASSERT_TRUE(mixed.ok());
  for (const auto& c : *mixed) {
    ASSERT_FALSE(c.token_ids.empty());
    ASSERT_EQ(c.token_ids.size(), c.logprobs.size());
    const bool ended_on_stop = c.token_ids.back() == stop || c.token_ids.back() == tokens[0];
    EXPECT_EQ(c.finish == finish_reason::stop, ended_on_stop);
    if (c.finish == finish_reason::length) {
      EXPECT_EQ(c.token_ids.size(), 30U);
    }
    for (std::size_t t = 0; t + 1 < c.token_ids.size(); ++t) {
      EXPECT_NE(c.token_ids[t], stop) << "nothing is generated after a stop token";
      EXPECT_NE(c.token_ids[t], tokens[0]);
    }
  }
}

TEST(Sampling, InvalidParamsAreErrors) {
  auto p = policy::create_random(testing::tiny_qwen2(), 1);
  ASSERT_TRUE(p.ok());
  struct test_case {
    sampling_params params;
    std::string expected;
  };
  const std::vector<test_case> cases = {
      {{.max_tokens = 0}, "'max_tokens' must be at least 1"},
      {{.temperature = -1}, "'temperature' must be >= 0"},
      {{.top_p = 0}, "'top_p' must be in (0, 1]"},
      {{.top_p = 1.5}, "'top_p' must be in (0, 1]"},
      {{.top_k = -2}, "'top_k' must be >= 0"},
      {{.n = 0}, "'n' must be at least 1"},
  };
  for (const auto& c : cases) {
    auto r = p->sample({1, 2}, c.params);
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.err().message, HasSubstr(c.expected));
  }
  EXPECT_THAT(p->sample({}, {}).err().message, HasSubstr("the prompt is empty"));
  EXPECT_THAT(p->sample({1, 999}, {}).err().message, HasSubstr("token id 999"));
}

}  // namespace
}  // namespace leap::learner

// What the weight-delta tests (disk and broadcast) share: a tiny random policy saved as the model
// both ends start from, a trainer on it, and one batch whose updates change its weights.
#pragma once

#include "actors/torch/torch_policy_backend.hpp"
#include "learner/policy.hpp"
#include "learner/trainer.hpp"
#include "tests/actors/test_support.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

namespace leap::actors::testing {

struct delta_learner {
  std::string initial;  // the model both ends start from (bf16 on disk)
  std::unique_ptr<learner::trainer> trainer;
  learner::update_batch batch;
};

inline delta_learner make_delta_learner(const temp_dir& dir) {
  delta_learner l;
  auto config = byte_model_preset("tiny");
  EXPECT_TRUE(config.ok());
  auto p = learner::policy::create_random(*config, 11);
  EXPECT_TRUE(p.ok());
  l.initial = (dir.path() / "initial").string();
  EXPECT_TRUE(p->save(l.initial, "bfloat16").ok());
  // Two sequences of 12 tokens, completion after 4, advantages +1 / -1.
  for (int i = 0; i < 2; ++i) {
    learner::sequence s;
    for (int t = 0; t < 12; ++t) {
      s.token_ids.push_back(40 + ((t * 7 + i * 3) % 50));
    }
    auto logp = p->token_logprobs({s.token_ids});
    EXPECT_TRUE(logp.ok());
    s.behaviour_logprobs = (*logp)[0];
    s.loss_mask.assign(12, 0);
    for (int t = 4; t < 12; ++t) {
      s.loss_mask[t] = 1;
    }
    s.advantages.assign(12, i == 0 ? 1.0F : -1.0F);
    l.batch.sequences.push_back(std::move(s));
  }
  learner::trainer_options options;
  options.optimizer.lr = 1e-5;
  auto t = learner::trainer::create(std::move(*p), options);
  EXPECT_TRUE(t.ok()) << t.err().message;
  l.trainer = std::make_unique<learner::trainer>(std::move(*t));
  return l;
}

}  // namespace leap::actors::testing

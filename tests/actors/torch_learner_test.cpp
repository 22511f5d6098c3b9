// The LibTorch pieces behind `leap run` and `leap serve-policy --model`, without actors: the torch
// learner backend (a step changes the weights, metrics are finite, checkpoints resume) and the
// policy-server backend (log-probs are the model's own, a weight reload changes the answers).
#include "actors/torch_learner.hpp"
#include "actors/torch_policy_backend.hpp"
#include "learner/policy.hpp"
#include "learner/safetensors.hpp"
#include "policy/tokenizer.hpp"
#include "tests/actors/test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

namespace leap::actors {
namespace {

using testing::temp_dir;

// A random tiny byte-level model written to `dir`, as `leap init-model --preset tiny` writes it.
void write_tiny_model(const std::filesystem::path& dir, std::uint64_t seed) {
  auto config = byte_model_preset("tiny");
  ASSERT_TRUE(config.ok()) << config.err().message;
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(learner::write_safetensors_dir(dir.string(), learner::random_weights(*config, seed))
                  .ok());
  ASSERT_TRUE(learner::write_model_config(dir.string(), *config).ok());
}

std::vector<policy::token_id> chat_prompt(const std::string& text) {
  const std::vector<policy::chat_message> messages{{"user", text}};
  return policy::render_chat(messages);
}

// Two rollouts sampled from `model` for one prompt, scored +1 and -1: what the scorer hands over.
std::vector<training_sequence> sampled_batch(const learner::policy& model, std::uint64_t step) {
  const auto prompt = chat_prompt("write digits that sum to 7");
  learner::sampling_params params;
  params.max_tokens = 12;
  params.n = 2;
  params.seed = 5;
  auto completions = model.sample(prompt, params);
  EXPECT_TRUE(completions.ok());
  std::vector<training_sequence> batch;
  for (std::size_t i = 0; i < completions->size(); ++i) {
    const auto& c = (*completions)[i];
    training_sequence s;
    s.step = step;
    s.rollout = static_cast<std::uint32_t>(i);
    s.tokens = prompt;
    s.tokens.insert(s.tokens.end(), c.token_ids.begin(), c.token_ids.end());
    s.mask.assign(prompt.size(), 0);
    s.mask.resize(s.tokens.size(), 1);
    s.behaviour_logprobs.assign(prompt.size(), 0.0F);
    s.behaviour_logprobs.insert(s.behaviour_logprobs.end(), c.logprobs.begin(), c.logprobs.end());
    s.advantages.assign(prompt.size(), 0.0F);
    s.advantages.resize(s.tokens.size(), i == 0 ? 1.0F : -1.0F);
    batch.push_back(std::move(s));
  }
  return batch;
}

torch_learner_options learner_options(const temp_dir& dir) {
  torch_learner_options o;
  o.model_dir = (dir.path() / "model").string();
  o.checkpoint_dir = (dir.path() / "checkpoints").string();
  o.weights_dir = (dir.path() / "weights").string();
  learner_section section;
  section.lr = 1e-3;
  o.trainer = trainer_options_of(section);
  o.checkpoint_every = 1;
  o.total_steps = 3;
  return o;
}

TEST(TorchLearner, SequenceKeepsTheFourArrays) {
  training_sequence s;
  s.tokens = {1, 2, 3};
  s.mask = {0, 1, 1};
  s.behaviour_logprobs = {0.0F, -1.5F, -0.5F};
  s.advantages = {0.0F, 0.9F, 1.0F};
  const auto out = to_learner_sequence(s);
  EXPECT_EQ(out.token_ids, (std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_EQ(out.loss_mask, s.mask);
  EXPECT_EQ(out.behaviour_logprobs, s.behaviour_logprobs);
  EXPECT_EQ(out.advantages, s.advantages);
  EXPECT_TRUE(out.reference_logprobs.empty());
}

TEST(TorchLearner, TrainerOptionsFollowTheConfig) {
  learner_section l;
  l.lr = 2e-5;
  l.betas = {0.8, 0.95};
  l.weight_decay = 0.05;
  l.grad_clip = 0.5;
  l.warmup_steps = 3;
  l.clip_low = 0.1;
  l.clip_high = 0.3;
  l.kl_coef = 0.01;
  l.loss_aggregation = loss_aggregation_kind::token_mean;
  l.micro_batch_tokens = 512;
  l.mini_batches = 2;
  const auto o = trainer_options_of(l);
  EXPECT_EQ(o.optimizer.lr, 2e-5);
  EXPECT_EQ(o.optimizer.beta1, 0.8);
  EXPECT_EQ(o.optimizer.beta2, 0.95);
  EXPECT_EQ(o.optimizer.weight_decay, 0.05);
  EXPECT_EQ(o.optimizer.max_grad_norm, 0.5);
  EXPECT_EQ(o.optimizer.warmup_steps, 3);
  EXPECT_EQ(o.loss.clip_low, 0.1);
  EXPECT_EQ(o.loss.clip_high, 0.3);
  EXPECT_EQ(o.loss.kl_coef, 0.01);
  EXPECT_EQ(o.loss.aggregation, learner::loss_aggregation::token_mean);
  EXPECT_EQ(o.batching.micro_batch_tokens, 512);
  EXPECT_EQ(o.batching.mini_batches, 2);
}

TEST(TorchLearner, AStepChangesTheWeightsAndResumes) {
  temp_dir dir;
  write_tiny_model(dir.path() / "model", 11);
  auto initial = learner::policy::load((dir.path() / "model").string());
  ASSERT_TRUE(initial.ok()) << initial.err().message;

  auto created = torch_learner::create(learner_options(dir));
  ASSERT_TRUE(created.ok()) << created.err().message;
  auto& backend = **created;
  EXPECT_EQ(backend.current_weights(), (dir.path() / "model").string());

  auto step = backend.train(0, sampled_batch(*initial, 0));
  ASSERT_TRUE(step.ok()) << step.err().message;
  EXPECT_EQ(step->weight_version, 1U);
  ASSERT_FALSE(step->weights_path.empty());
  EXPECT_EQ(step->weights_path, backend.current_weights());
  for (const char* key : {"loss", "pg_loss", "kl", "clip_fraction", "entropy", "grad_norm",
                          "tokens_per_second", "trained_tokens"}) {
    ASSERT_TRUE(step->metrics.count(key)) << key;
    EXPECT_TRUE(std::isfinite(step->metrics.at(key))) << key;
  }
  EXPECT_GT(step->metrics.at("grad_norm"), 0.0);
  EXPECT_GT(step->metrics.at("entropy"), 0.0);
  EXPECT_GT(step->metrics.at("trained_tokens"), 0.0);

  // The folder it hands to the servers is a loadable model whose weights differ from the start.
  auto trained = learner::policy::load(step->weights_path);
  ASSERT_TRUE(trained.ok()) << trained.err().message;
  auto before = initial->parameter("model.layers.0.self_attn.q_proj.weight");
  auto after = trained->parameter("model.layers.0.self_attn.q_proj.weight");
  ASSERT_TRUE(before.ok() && after.ok());
  EXPECT_NE(learner::to_doubles(*before), learner::to_doubles(*after));

  // A step without trained tokens changes nothing but still counts.
  auto empty = backend.train(1, {});
  ASSERT_TRUE(empty.ok()) << empty.err().message;
  EXPECT_EQ(empty->weight_version, 2U);
  EXPECT_EQ(empty->weights_path, step->weights_path);
  EXPECT_EQ(empty->metrics.at("skipped"), 1.0);

  // A new learner on the same folders resumes from the checkpoint.
  auto options = learner_options(dir);
  options.initial_version = 2;
  auto resumed = torch_learner::create(options);
  ASSERT_TRUE(resumed.ok()) << resumed.err().message;
  EXPECT_EQ((*resumed)->trainer_step(), 1);
  EXPECT_EQ((*resumed)->current_weights(), step->weights_path);
  auto next = (*resumed)->train(2, sampled_batch(*trained, 2));
  ASSERT_TRUE(next.ok()) << next.err().message;
  EXPECT_EQ(next->weight_version, 3U);
}

TEST(TorchLearner, StepsBetweenCheckpointsWriteWeightsOnly) {
  temp_dir dir;
  write_tiny_model(dir.path() / "model", 12);
  auto initial = learner::policy::load((dir.path() / "model").string());
  ASSERT_TRUE(initial.ok());
  auto options = learner_options(dir);
  options.checkpoint_every = 0;  // only after the last of total_steps = 3
  auto created = torch_learner::create(options);
  ASSERT_TRUE(created.ok()) << created.err().message;
  for (std::uint64_t s = 0; s < 3; ++s) {
    auto step = (*created)->train(s, sampled_batch(*initial, s));
    ASSERT_TRUE(step.ok()) << step.err().message;
    const bool last = s == 2;
    EXPECT_EQ(step->weights_path.find("/checkpoints/") != std::string::npos, last)
        << step->weights_path;
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(step->weights_path) / "config.json"));
  }
}

TEST(TorchPolicyBackend, ServesTheModelsOwnLogprobsAndReloads) {
  temp_dir dir;
  write_tiny_model(dir.path() / "a", 1);
  write_tiny_model(dir.path() / "b", 2);
  auto backend = make_torch_policy_backend((dir.path() / "a").string());
  ASSERT_TRUE(backend.ok()) << backend.err().message;
  auto model = learner::policy::load((dir.path() / "a").string());
  ASSERT_TRUE(model.ok());

  policy::backend_request request;
  request.prompt = chat_prompt("hello");
  request.sampling.max_tokens = 10;
  request.sampling.seed = 3;
  request.top_logprobs = 2;
  auto run = [&] {
    std::vector<policy::token_step> steps;
    policy::generation_control control;
    auto s = (*backend)->generate(request, control, [&](std::span<const policy::token_step> t) {
      steps.insert(steps.end(), t.begin(), t.end());
      return true;
    });
    EXPECT_TRUE(s.ok()) << s.err().message;
    return steps;
  };
  const auto first = run();
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(run().size(), first.size());  // same seed, same tokens

  std::vector<std::int32_t> ids(request.prompt.begin(), request.prompt.end());
  for (const auto& t : first) ids.push_back(t.id);
  auto scored = model->token_logprobs({ids});
  ASSERT_TRUE(scored.ok());
  for (std::size_t i = 0; i < first.size(); ++i) {
    EXPECT_NEAR(first[i].logprob, (*scored)[0][request.prompt.size() + i], 1e-4) << i;
    ASSERT_EQ(first[i].top.size(), 2U);
    EXPECT_GE(first[i].top[0].logprob, first[i].top[1].logprob);
    EXPECT_GE(first[i].top[0].logprob, first[i].logprob - 1e-5);
  }

  ASSERT_TRUE((*backend)->load_weights((dir.path() / "b").string(), 1).ok());
  const auto second = run();
  std::vector<double> a;
  std::vector<double> b;
  for (const auto& t : first) a.push_back(t.logprob);
  for (const auto& t : second) b.push_back(t.logprob);
  EXPECT_NE(a, b);

  auto missing = (*backend)->load_weights((dir.path() / "nope").string(), 2);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.err().message.find("nope"), std::string::npos) << missing.err().message;
}

TEST(TorchPolicyBackend, RefusesAVocabularyOtherThanTheBytes) {
  learner::model_config c;
  c.vocab_size = 32000;
  auto s = check_byte_vocabulary(c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.err().message.find("vocab_size is 32000"), std::string::npos) << s.err().message;
  c.vocab_size = 261;
  EXPECT_TRUE(check_byte_vocabulary(c).ok());
  EXPECT_FALSE(byte_model_preset("huge").ok());
}

}  // namespace
}  // namespace leap::actors

// The LibTorch pieces behind `leap run` and `leap serve-policy --model`, without actors: the torch
// learner backend (a step changes the weights, metrics are finite, checkpoints resume) and the
// policy-server backend (log-probs are the model's own, a weight reload changes the answers), and
// the weight sync between them through the project's server on loopback: vLLM's disk route, the
// embedded server's in-memory path, and a load that fails half-way.
#include "actors/torch/torch_learner.hpp"

#include "actors/torch/torch_policy_backend.hpp"
#include "learner/policy.hpp"
#include "learner/safetensors.hpp"
#include "policy/chat/chat.hpp"
#include "policy/client/client.hpp"
#include "policy/server/server.hpp"
#include "tests/actors/test_support.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
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
  ASSERT_TRUE(
      learner::write_safetensors_dir(dir.string(), learner::random_weights(*config, seed)).ok());
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
  EXPECT_TRUE(out.staleness.empty());
}

// Staleness per trained token: the learner's version minus the token's turn's; 0 where nothing is
// trained or the token's weights are not older.
TEST(TorchLearner, SequenceStalenessAgainstTheLearnersVersion) {
  training_sequence s;
  s.tokens = {1, 2, 3, 4, 5};
  s.mask = {0, 1, 1, 0, 1};
  s.behaviour_logprobs = {0.0F, -1.5F, -0.5F, 0.0F, -0.5F};
  s.advantages = {0.0F, 1.0F, 1.0F, 0.0F, 1.0F};
  s.token_weight_versions = {0, 3, 3, 0, 9};
  const auto out = to_learner_sequence(s, 7);
  EXPECT_EQ(out.staleness, (std::vector<std::int32_t>{0, 4, 4, 0, 0}));
  s.token_weight_versions.clear();  // a sequence made without versions: no cap applies
  EXPECT_TRUE(to_learner_sequence(s, 7).staleness.empty());
}

TEST(TorchLearner, TrainerOptionsFollowTheConfig) {
  learner_section l;
  l.lr = 2e-5;
  l.betas = {0.8, 0.95};
  l.weight_decay = 0.05;
  l.grad_clip = 0.5;
  l.warmup_steps = 3;
  l.loss = {.clip_low = 0.1,
            .clip_high = 0.3,
            .kl_coef = 0.01,
            .aggregation = loss_aggregation::token_mean,
            .offpolicy = {
                .mode = offpolicy_mode::mask_token, .low = 0.4, .high = 3.0, .max_staleness = 2}};
  l.micro_batch_tokens = 512;
  l.mini_batches = 2;
  const auto o = trainer_options_of(l);
  EXPECT_EQ(o.optimizer.lr, 2e-5);
  EXPECT_EQ(o.optimizer.beta1, 0.8);
  EXPECT_EQ(o.optimizer.beta2, 0.95);
  EXPECT_EQ(o.optimizer.weight_decay, 0.05);
  EXPECT_EQ(o.optimizer.max_grad_norm, 0.5);
  EXPECT_EQ(o.optimizer.warmup_steps, 3);
  EXPECT_TRUE(o.loss == l.loss) << "the loss options are handed over whole";
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
                          "tokens_per_second", "trained_tokens", "offpolicy_dropped_sequences",
                          "offpolicy_masked_tokens", "ratio_p5", "ratio_p50", "ratio_p95"}) {
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
  for (const auto& t : first) {
    ids.push_back(t.id);
  }
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
  a.reserve(first.size());
  b.reserve(second.size());
  for (const auto& t : first) {
    a.push_back(t.logprob);
  }
  for (const auto& t : second) {
    b.push_back(t.logprob);
  }
  EXPECT_NE(a, b);

  auto missing = (*backend)->load_weights((dir.path() / "nope").string(), 2);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.err().message.find("nope"), std::string::npos) << missing.err().message;
}

// The embedded server's backend serves a Qwen3-architecture model (q/k norms, head_dim unlike
// hidden / heads) with the model's own log-probs; the qwen3 presets of `leap init-model` have the
// published shapes with the byte vocabulary.
TEST(TorchPolicyBackend, ServesAQwen3Model) {
  auto preset = byte_model_preset("qwen3-0.6b");
  ASSERT_TRUE(preset.ok()) << preset.err().message;
  EXPECT_EQ(preset->model_type, "qwen3");
  EXPECT_TRUE(preset->qk_norm);
  EXPECT_EQ(preset->head_dim, 128);
  EXPECT_EQ(preset->num_hidden_layers, 28);
  EXPECT_EQ(preset->vocab_size, 261);
  EXPECT_TRUE(check_byte_vocabulary(*preset).ok());
  EXPECT_FALSE(byte_model_preset("qwen3-0.7b").ok());

  auto config = byte_model_preset("tiny");
  ASSERT_TRUE(config.ok());
  config->model_type = "qwen3";
  config->qkv_bias = false;
  config->qk_norm = true;
  config->head_dim = 24;  // hidden 64 / 4 heads = 16
  temp_dir dir;
  const auto model_dir = (dir.path() / "q3").string();
  std::filesystem::create_directories(model_dir);
  auto weights = learner::random_weights(*config, 4);
  // q/k norms away from 1 (random_weights draws them as 1), so that they take part. That the
  // learner computes Qwen3 right is shown in tests/learner; here the server serves that model.
  for (auto& [name, t] : weights) {
    if (name.ends_with("q_norm.weight") || name.ends_with("k_norm.weight")) {
      std::vector<double> v(static_cast<std::size_t>(t.shape[0]));
      for (std::size_t i = 0; i < v.size(); ++i) {
        v[i] = 0.5 + 0.1 * static_cast<double>(i % 7);
      }
      t = learner::make_float_tensor(learner::dtype::f32, t.shape, v);
    }
  }
  ASSERT_TRUE(learner::write_safetensors_dir(model_dir, weights).ok());
  ASSERT_TRUE(learner::write_model_config(model_dir, *config).ok());
  auto backend = make_torch_policy_backend(model_dir);
  ASSERT_TRUE(backend.ok()) << backend.err().message;
  auto model = learner::policy::load(model_dir);
  ASSERT_TRUE(model.ok()) << model.err().message;
  EXPECT_EQ(model->config().model_type, "qwen3");

  policy::backend_request request;
  request.prompt = chat_prompt("hello");
  request.sampling.max_tokens = 8;
  request.sampling.seed = 3;
  std::vector<policy::token_step> steps;
  policy::generation_control control;
  auto s = (*backend)->generate(request, control, [&](std::span<const policy::token_step> t) {
    steps.insert(steps.end(), t.begin(), t.end());
    return true;
  });
  ASSERT_TRUE(s.ok()) << s.err().message;
  ASSERT_FALSE(steps.empty());
  std::vector<std::int32_t> ids(request.prompt.begin(), request.prompt.end());
  for (const auto& t : steps) {
    ids.push_back(t.id);
  }
  auto scored = model->token_logprobs({ids});
  ASSERT_TRUE(scored.ok());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    EXPECT_NEAR(steps[i].logprob, (*scored)[0][request.prompt.size() + i], 1e-4) << i;
  }
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

// ---- weight sync through the project's server -----------------------------------------------

using namespace std::chrono_literals;

struct served_model {
  std::shared_ptr<policy::policy_backend> backend;
  std::unique_ptr<policy::policy_server> server;
  std::unique_ptr<policy::policy_client> client;
};

served_model serve(const std::string& model_dir, wire_flavour flavour,
                   const torch_backend_options& options = {}) {
  served_model s;
  auto backend = make_torch_policy_backend(model_dir, options);
  EXPECT_TRUE(backend.ok()) << backend.err().message;
  if (!backend.ok()) {
    return s;
  }
  s.backend = *backend;
  policy::server_config sc;
  sc.host = "127.0.0.1";
  sc.port = 0;
  sc.threads = 8;
  sc.model_path = model_dir;
  auto server = policy::policy_server::start(sc, s.backend);
  EXPECT_TRUE(server.ok()) << server.err().message;
  if (!server.ok()) {
    return s;
  }
  s.server = std::move(*server);
  policy::client_config cc;
  cc.flavour = flavour;
  cc.endpoints.push_back({s.server->base_url(), 4});
  // Sampling a tiny model takes milliseconds, but a loaded 2-core machine may stall for seconds.
  cc.request_timeout = 60s;
  cc.health.timeout = 10s;
  cc.seed = 1;
  auto client = policy::policy_client::create(cc);
  EXPECT_TRUE(client.ok()) << client.err().message;
  if (client.ok()) {
    s.client = std::move(*client);
  }
  return s;
}

status sync_now(policy::policy_client& client, const policy::weight_sync_plan& plan,
                policy::weight_sync_request request) {
  std::promise<status> done;
  auto future = done.get_future();
  client.sync_weights(0, plan, std::move(request),
                      [&done](status s) { done.set_value(std::move(s)); });
  if (future.wait_for(120s) != std::future_status::ready) {
    return error{"the sync did not finish"};
  }
  return future.get();
}

// One greedy turn: the ids and log-probs the server sampled.
policy::generated_turn greedy_turn(policy::policy_client& client,
                                   const std::vector<policy::token_id>& prompt) {
  policy::turn_request r;
  r.prompt = prompt;
  r.sampling.temperature = 0.0;
  r.sampling.max_tokens = 8;
  std::promise<policy::turn_result> done;
  auto future = done.get_future();
  EXPECT_EQ(client.submit(r, [&done](policy::turn_result t) { done.set_value(std::move(t)); }),
            policy::submit_status::accepted);
  if (future.wait_for(120s) != std::future_status::ready) {
    ADD_FAILURE() << "the turn did not finish";
    return {};
  }
  auto t = future.get();
  EXPECT_EQ(t.status, policy::turn_status::ok) << t.message;
  if (t.choices.empty()) {
    return {};
  }
  return t.choices.front();
}

// The log-probs `model` gives the turn's ids after `prompt`.
std::vector<float> scored_by(const learner::policy& model,
                             const std::vector<policy::token_id>& prompt,
                             const policy::generated_turn& turn) {
  std::vector<std::int32_t> ids(prompt.begin(), prompt.end());
  ids.insert(ids.end(), turn.ids.begin(), turn.ids.end());
  auto scored = model.token_logprobs({ids});
  EXPECT_TRUE(scored.ok()) << scored.err().message;
  if (!scored.ok()) {
    return {};
  }
  return {(*scored)[0].begin() + static_cast<std::ptrdiff_t>(prompt.size()), (*scored)[0].end()};
}

// Largest |a - b| over the turn.
double max_gap(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double gap = 0.0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    gap = std::max(gap, static_cast<double>(std::abs(a[i] - b[i])));
  }
  return gap;
}

std::vector<std::string> entries(const std::filesystem::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) {
    out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(TorchWeightSync, VllmDiskPlanMakesTheServerServeTheLearnersStep) {
  temp_dir dir;
  write_tiny_model(dir.path() / "model", 21);
  auto initial = learner::policy::load((dir.path() / "model").string());
  ASSERT_TRUE(initial.ok()) << initial.err().message;
  auto options = learner_options(dir);
  options.checkpoint_every = 0;
  options.total_steps = 0;  // no checkpoint: the step writes the weights alone
  auto learner = torch_learner::create(options);
  ASSERT_TRUE(learner.ok()) << learner.err().message;
  auto served = serve((dir.path() / "model").string(), wire_flavour::vllm);
  ASSERT_TRUE(served.client);

  const auto prompt = chat_prompt("print 7");
  const auto before = greedy_turn(*served.client, prompt);
  ASSERT_FALSE(before.ids.empty());
  EXPECT_LT(max_gap(before.logprobs, scored_by(*initial, prompt, before)), 1e-4);

  auto step = (*learner)->train(0, sampled_batch(*initial, 0));
  ASSERT_TRUE(step.ok()) << step.err().message;
  ASSERT_NE(step->weights_path.find("/weights/"), std::string::npos) << step->weights_path;
  ASSERT_TRUE(sync_now(*served.client, policy::vllm_disk_plan(),
                       {std::to_string(step->weight_version), step->weights_path, ""}));
  EXPECT_EQ(served.server->weight_version(), 1);  // vLLM's reload counts one version up
  EXPECT_EQ(served.client->endpoints()[0].weight_version, "1");

  // The server now samples from the step's weights, not the initial ones.
  auto trained = learner::policy::load(step->weights_path);
  ASSERT_TRUE(trained.ok()) << trained.err().message;
  const auto after = greedy_turn(*served.client, prompt);
  ASSERT_FALSE(after.ids.empty());
  EXPECT_EQ(after.weight_version.value_or(""), "1");
  EXPECT_LT(max_gap(after.logprobs, scored_by(*trained, prompt, after)), 1e-4);
  EXPECT_GT(max_gap(after.logprobs, scored_by(*initial, prompt, after)), 1e-3);
}

TEST(TorchWeightSync, EmbeddedServerTakesTheStepInMemoryWithoutAFile) {
  temp_dir dir;
  write_tiny_model(dir.path() / "model", 22);
  auto initial = learner::policy::load((dir.path() / "model").string());
  ASSERT_TRUE(initial.ok()) << initial.err().message;
  auto options = learner_options(dir);
  options.checkpoint_every = 0;
  options.total_steps = 0;
  options.in_memory = true;
  auto created = torch_learner::create(options);
  ASSERT_TRUE(created.ok()) << created.err().message;
  std::shared_ptr<torch_learner> learner = std::move(*created);

  torch_backend_options backend_options;
  backend_options.source = [learner](learner::policy& target, std::int64_t version) {
    return learner->copy_weights_to(target, version);
  };
  auto served = serve((dir.path() / "model").string(), wire_flavour::sglang, backend_options);
  ASSERT_TRUE(served.client);
  const auto files_before = entries(dir.path());

  const auto prompt = chat_prompt("print 7");
  auto step = learner->train(0, sampled_batch(*initial, 0));
  ASSERT_TRUE(step.ok()) << step.err().message;
  EXPECT_EQ(step->weights_path, std::string(in_memory_weights));
  // The same route as a disk sync, with the in-memory path; the server records the version.
  ASSERT_TRUE(sync_now(*served.client, policy::sglang_disk_plan(),
                       {std::to_string(step->weight_version), step->weights_path, ""}));
  EXPECT_EQ(served.server->weight_version(), 1);

  // No file was written or removed anywhere for the step and the sync.
  EXPECT_EQ(entries(dir.path()), files_before);

  // The server samples the learner's weights: a copy taken the same way scores its turn.
  auto expected = learner::policy::load((dir.path() / "model").string());
  ASSERT_TRUE(expected.ok());
  ASSERT_TRUE(learner->copy_weights_to(*expected, 1).ok());
  const auto after = greedy_turn(*served.client, prompt);
  ASSERT_FALSE(after.ids.empty());
  EXPECT_LT(max_gap(after.logprobs, scored_by(*expected, prompt, after)), 1e-4);
  EXPECT_GT(max_gap(after.logprobs, scored_by(*initial, prompt, after)), 1e-3);

  // A version the learner never made is refused; the server keeps what it has.
  auto ahead = sync_now(*served.client, policy::sglang_disk_plan(),
                        {"9", std::string(in_memory_weights), ""});
  ASSERT_FALSE(ahead);
  EXPECT_NE(ahead.err().message.find("the learner holds 1"), std::string::npos)
      << ahead.err().message;
  EXPECT_EQ(served.server->weight_version(), 1);
}

TEST(TorchWeightSync, AFolderThatFailsHalfWayLeavesTheOldWeightsAndTheServerOut) {
  temp_dir dir;
  write_tiny_model(dir.path() / "model", 23);
  write_tiny_model(dir.path() / "next", 24);
  auto initial = learner::policy::load((dir.path() / "model").string());
  ASSERT_TRUE(initial.ok());
  // A step folder cut short while written: the last tensors of the file are missing.
  const auto file = dir.path() / "next" / "model.safetensors";
  std::filesystem::resize_file(file, std::filesystem::file_size(file) * 3 / 4);

  auto served = serve((dir.path() / "model").string(), wire_flavour::vllm);
  ASSERT_TRUE(served.client);
  auto s =
      sync_now(*served.client, policy::vllm_disk_plan(), {"1", (dir.path() / "next").string(), ""});
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().message.find("/collective_rpc"), std::string::npos) << s.err().message;
  EXPECT_FALSE(served.client->endpoints()[0].admitting);
  EXPECT_EQ(served.server->weight_version(), 0);

  // Nothing of the cut folder reached the model: another client still samples the old weights.
  policy::client_config cc;
  cc.flavour = wire_flavour::vllm;
  cc.endpoints.push_back({served.server->base_url(), 1});
  cc.request_timeout = 60s;
  auto probe = policy::policy_client::create(cc);
  ASSERT_TRUE(probe.ok()) << probe.err().message;
  const auto prompt = chat_prompt("print 7");
  const auto turn = greedy_turn(**probe, prompt);
  ASSERT_FALSE(turn.ids.empty());
  EXPECT_LT(max_gap(turn.logprobs, scored_by(*initial, prompt, turn)), 1e-4);
}

}  // namespace
}  // namespace leap::actors

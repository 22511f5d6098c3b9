// The keys of the learner section (the optimiser, the loss, checkpoints, where and on how many
// ranks it trains) and the rules between them.

#include "orchestrator/detail/schema_fields.hpp"
#include "orchestrator/detail/schema_sections.hpp"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace leap::config_detail {
namespace {

std::optional<std::string> check_torch_device(const std::string& device) {
  if (device == "cpu" || device == "cuda") {
    return std::nullopt;
  }
  if (device.rfind("cuda:", 0) == 0 && device.size() > 5 &&
      std::all_of(device.begin() + 5, device.end(),
                  [](unsigned char c) { return std::isdigit(c); })) {
    return std::nullopt;
  }
  return "must be cpu, cuda or cuda:N, got '" + device + "'";
}

std::optional<std::string> check_init_preset(const std::string& preset) {
  if (preset.empty() || preset == "tiny" || preset == "small") {
    return std::nullopt;
  }
  return "must be tiny, small or empty (the model must exist), got '" + preset + "'";
}

}  // namespace

void add_learner_fields(std::vector<field_spec>& f) {
  f.push_back(choice_field(
      "learner.kind", LEAP_FIELD(learner.kind),
      "record: store scored batches, update nothing (dry runs, benchmarks); torch: the "
      "LibTorch learner."));
  f.push_back(
      text_field("learner.model_path", LEAP_FIELD(learner.model_path), nullptr,
                 "Folder of the initial policy weights (safetensors + config.json); required for "
                 "learner.kind torch."));
  f.push_back(real_field("learner.lr", LEAP_FIELD(learner.lr),
                         above(0, "a zero rate trains nothing; use learner.kind: record"),
                         "AdamW learning rate; > 0. The paper's 1e-6."));
  f.push_back(real_field("learner.weight_decay", LEAP_FIELD(learner.weight_decay), at_least(0),
                         "AdamW decoupled weight decay; >= 0. The paper's 0.1."));
  f.push_back(real_pair_field("learner.betas", LEAP_FIELD(learner.betas), closed_open(0, 1),
                              "AdamW [beta1, beta2], each in [0, 1)."));
  f.push_back(
      real_field("learner.clip_low", LEAP_FIELD(learner.loss.clip_low),
                 closed_open(0, 1, "the ratio's lower bound 1 - clip_low must stay positive"),
                 "Ratio clip below 1: the ratio is kept >= 1 - clip_low; in [0, 1)."));
  f.push_back(real_field(
      "learner.clip_high", LEAP_FIELD(learner.loss.clip_high), at_least(0),
      "Ratio clip above 1 (DAPO's clip-higher, 0.28): the ratio is kept <= 1 + clip_high."));
  f.push_back(real_field("learner.kl_coef", LEAP_FIELD(learner.loss.kl_coef), at_least(0),
                         "Weight of the KL penalty to the initial policy; 0 disables it."));
  f.push_back(
      choice_field("learner.loss_aggregation", LEAP_FIELD(learner.loss.aggregation),
                   "How token losses become the batch loss; seq_mean_token_mean is the paper's "
                   "sample-level loss (long rollouts do not dominate)."));
  f.push_back(choice_field(
      "learner.offpolicy.mode", LEAP_FIELD(learner.loss.offpolicy.mode),
      "Off-policy filter on the ratio r = exp(logp - behaviour_logp), computed in the training "
      "pass: drop_sequence drops sequences whose geometric-mean ratio is outside [low, high] (and "
      "out of the loss normaliser); truncate_token caps each token's importance weight at high "
      "(verl's "
      "truncated IS); mask_token masks tokens whose ratio is outside [low, high]; off: none."));
  f.push_back(
      real_field("learner.offpolicy.low", LEAP_FIELD(learner.loss.offpolicy.low), closed(0, 1),
                 "Lower end of the ratio band of drop_sequence and mask_token; in [0, 1]."));
  f.push_back(real_field(
      "learner.offpolicy.high", LEAP_FIELD(learner.loss.offpolicy.high), at_least(1),
      "Upper end of the ratio band, and truncate_token's cap on the importance weight; >= 1."));
  f.push_back(integer_field(
      "learner.offpolicy.max_staleness", LEAP_FIELD(learner.loss.offpolicy.max_staleness),
      at_least(-1),
      "Mask tokens sampled by weights more than this many versions behind the learner's (in every "
      "mode; each turn's weight version against the learner's); -1: no cap."));
  f.push_back(real_field("learner.grad_clip", LEAP_FIELD(learner.grad_clip), at_least(0),
                         "Global gradient-norm clip; 0 disables clipping."));
  f.push_back(integer_field("learner.warmup_steps", LEAP_FIELD(learner.warmup_steps), at_least(0),
                            "Steps of linear learning-rate warm-up from 0."));
  f.push_back(operational(integer_field(
      "learner.micro_batch_tokens", LEAP_FIELD(learner.micro_batch_tokens), at_least(1),
      "Tokens per forward/backward pass; gradients accumulate over micro-batches.")));
  f.push_back(integer_field(
      "learner.mini_batches", LEAP_FIELD(learner.mini_batches), at_least(1),
      "Optimiser steps per training step (the batch split in parts); 1 is on-policy."));
  f.push_back(text_field("learner.checkpoint_dir", LEAP_FIELD(learner.checkpoint_dir), nullptr,
                         "Folder for checkpoints; empty: <run_dir>/checkpoints."));
  f.push_back(operational(integer_field(
      "learner.checkpoint_every", LEAP_FIELD(learner.checkpoint_every), at_least(0),
      "Save a checkpoint every this many steps (and after the last); 0: only after the "
      "last.")));
  f.push_back(text_field("learner.device", LEAP_FIELD(learner.device), check_torch_device,
                         "Where the LibTorch learner runs (and the model of an embedded policy "
                         "server): cpu, cuda or cuda:N."));
  f.push_back(operational(integer_field(
      "learner.world_size", LEAP_FIELD(learner.world_size), at_least(1),
      "Data-parallel ranks of the torch learner; > 1: rank 0 trains in leap run's process, ranks "
      "1.. are leap-learner-rank processes beside the leap binary (gloo on cpu, NCCL on cuda). "
      "Every rank holds the model and its gradients; the AdamW state and float32 masters (12 "
      "bytes a parameter) are split across the ranks (12 / world_size each), so a model whose "
      "optimiser state overflows one device trains on several. A resume may change it: checkpoints "
      "load on any world size.")));
  f.push_back(operational(text_list_field(
      "learner.devices", LEAP_FIELD(learner.devices), check_torch_device, false,
      "The device of each data-parallel rank, rank 0's first (it must be learner.device): "
      "exactly learner.world_size entries, each cpu, cuda or cuda:N; empty: every rank on "
      "learner.device.")));
  f.push_back(text_field(
      "learner.init_preset", LEAP_FIELD(learner.init_preset), check_init_preset,
      "tiny or small: when learner.model_path holds no model, write a random model of that "
      "shape there first (seeded by experiment.seed), byte-level or with policy.tokenizer's "
      "vocabulary; empty: the model must exist."));
}

void add_learner_checks(std::vector<cross_check>& checks) {
  checks.push_back(
      {{"learner.model_path", "learner.kind"},
       [](const experiment_config& c) -> std::optional<std::string> {
         if (c.learner.kind == learner_kind::torch && c.learner.model_path.empty()) {
           return std::optional<std::string>{
               "is required when learner.kind is torch (the initial weights to train)"};
         }
         return std::nullopt;
       }});
  checks.push_back({{"learner.world_size", "learner.kind"},
                    [](const experiment_config& c) -> std::optional<std::string> {
                      if (c.learner.world_size > 1 && c.learner.kind != learner_kind::torch) {
                        return "must be 1 unless learner.kind is torch (only the torch learner "
                               "trains data-parallel), got " +
                               show(c.learner.world_size);
                      }
                      return std::nullopt;
                    }});
  checks.push_back({{"learner.devices", "learner.world_size", "learner.device"},
                    [](const experiment_config& c) -> std::optional<std::string> {
                      const auto& d = c.learner.devices;
                      if (d.empty()) {
                        return std::nullopt;
                      }
                      if (d.size() != static_cast<std::size_t>(c.learner.world_size)) {
                        return "must list one device per rank, learner.world_size = " +
                               show(c.learner.world_size) + " entries, got " + show(d.size());
                      }
                      if (d.front() != c.learner.device) {
                        return "must start with learner.device (" + c.learner.device +
                               "): rank 0 trains there, got " + d.front();
                      }
                      return std::nullopt;
                    }});
}

void add_learner_batch_checks(std::vector<cross_check>& checks) {
  checks.push_back({{"learner.mini_batches", "data.batch_size", "rollout.group_size"},
                    [](const experiment_config& c) -> std::optional<std::string> {
                      const std::int64_t rollouts =
                          static_cast<std::int64_t>(c.data.batch_size) * c.rollout.group_size;
                      if (c.learner.mini_batches > rollouts) {
                        return "must be <= data.batch_size * rollout.group_size (" +
                               show(rollouts) + " rollouts per step), got " +
                               show(c.learner.mini_batches);
                      }
                      return std::nullopt;
                    }});
}

}  // namespace leap::config_detail

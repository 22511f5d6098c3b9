#include "actors/torch/torch_learner.hpp"

#include "actors/torch/torch_policy_backend.hpp"
#include "policy/client/client.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <system_error>
#include <utility>

namespace leap::actors {

learner::trainer_options trainer_options_of(const learner_section& l) {
  learner::trainer_options o;
  o.optimizer.lr = l.lr;
  o.optimizer.beta1 = l.betas[0];
  o.optimizer.beta2 = l.betas[1];
  o.optimizer.weight_decay = l.weight_decay;
  o.optimizer.max_grad_norm = l.grad_clip;
  o.optimizer.warmup_steps = l.warmup_steps;
  o.loss = l.loss;
  o.batching.micro_batch_tokens = l.micro_batch_tokens;
  o.batching.mini_batches = l.mini_batches;
  o.policy.device = l.device;
  return o;
}

learner::sequence to_learner_sequence(const training_sequence& s) {
  learner::sequence out;
  out.token_ids.assign(s.tokens.begin(), s.tokens.end());
  out.loss_mask = s.mask;
  out.behaviour_logprobs = s.behaviour_logprobs;
  out.advantages = s.advantages;
  return out;
}

learner::sequence to_learner_sequence(const training_sequence& s, std::uint64_t learner_version) {
  auto out = to_learner_sequence(s);
  if (s.token_weight_versions.size() == s.tokens.size()) {
    out.staleness.reserve(s.tokens.size());
    for (std::size_t t = 0; t < s.tokens.size(); ++t) {
      const auto v = s.token_weight_versions[t];
      const auto behind = s.mask[t] != 0 && v < learner_version ? learner_version - v : 0;
      out.staleness.push_back(static_cast<std::int32_t>(
          std::min<std::uint64_t>(behind, std::numeric_limits<std::int32_t>::max())));
    }
  }
  return out;
}

namespace {

std::string step_folder(const std::string& dir, std::uint64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08llu", static_cast<unsigned long long>(step));
  return (std::filesystem::path(dir) / name).string();
}

}  // namespace

result<std::unique_ptr<torch_learner>> torch_learner::create(torch_learner_options options) {
  std::error_code ec;
  for (auto* dir : {&options.checkpoint_dir, &options.weights_dir, &options.delta_dir}) {
    if (dir->empty() && dir == &options.delta_dir) {
      continue;
    }
    std::filesystem::create_directories(*dir, ec);
    if (ec) {
      return error{*dir + ": cannot create: " + ec.message()};
    }
    // Absolute: the folders are handed to servers that may run in another working directory.
    *dir = std::filesystem::absolute(*dir, ec).lexically_normal().string();
  }
  options.trainer.checkpoint.dir = options.checkpoint_dir;
  options.trainer.checkpoint.resume = true;
  // 0 = only after the last step, which train() saves itself.
  options.trainer.checkpoint.every = options.checkpoint_every > 0
                                         ? options.checkpoint_every
                                         : std::numeric_limits<std::int64_t>::max();
  auto trainer = learner::trainer::create(options.model_dir, options.trainer);
  if (!trainer) {
    return trainer.err().wrap("learner.kind torch: " + options.model_dir);
  }
  // The weights it starts from: the resumed checkpoint's, else the initial model's.
  std::string weights = options.model_dir;
  auto latest = learner::latest_checkpoint(options.checkpoint_dir);
  if (!latest) {
    return latest.err();
  }
  if (!latest->empty()) {
    weights = *latest;
  }
  // Weights-only folders of later steps carry no optimiser state, so the trainer cannot resume
  // from them: the servers must serve the checkpoint's weights to stay on-policy.
  if (!options.delta_dtype.empty() && options.in_memory != options.delta_dir.empty()) {
    return error{
        "policy.weight_sync_delta: deltas need a folder for the deltas beside the step folders, "
        "or none with the weights in memory (the broadcast path)"};
  }
  auto made = std::unique_ptr<torch_learner>(
      new torch_learner(std::move(options), std::move(*trainer), std::move(weights)));
  if (!made->options_.delta_dtype.empty()) {
    // The servers start on the weights the learner starts from, at the initial version.
    made->delta_ = std::make_unique<learner::weight_delta_sender>(made->options_.delta_dtype);
    if (auto reset = made->delta_->reset(made->trainer_->current_policy(),
                                         static_cast<std::int64_t>(made->version_));
        !reset) {
      return reset.err().wrap("policy.weight_sync_delta");
    }
  }
  return made;
}

status torch_learner::write_delta(std::uint64_t version, std::map<std::string, double>& metrics) {
  if (!delta_) {
    return ok_status();
  }
  if (options_.delta_refusals) {
    const auto seen = options_.delta_refusals->load();
    metrics["sync.delta_fallbacks"] = static_cast<double>(seen - refusals_seen_);
    refusals_seen_ = seen;
  }
  learner::weight_delta_stats stats;
  if (options_.in_memory) {
    auto prepared =
        delta_->prepare_delta(trainer_->current_policy(), static_cast<std::int64_t>(version));
    if (!prepared) {
      return prepared.err().wrap("policy.weight_sync_delta");
    }
    stats = prepared->stats;
    std::lock_guard held(prepared_mutex_);
    prepared_[static_cast<std::int64_t>(version)] = std::move(*prepared);
    while (prepared_.size() > 2) {  // the newest and the one a sync may still be sending
      prepared_.erase(prepared_.begin());
    }
  } else {
    const auto dir = policy::weight_delta_folder(options_.delta_dir, version);
    auto written =
        delta_->write_delta(trainer_->current_policy(), static_cast<std::int64_t>(version), dir);
    if (!written) {
      return written.err().wrap("policy.weight_sync_delta: " + dir);
    }
    stats = *written;
  }
  // The base moves at once: the next delta is against this version, which every server that took
  // this one (or the full weights after refusing it) holds.
  if (auto committed = delta_->commit(); !committed) {
    return committed;
  }
  metrics["sync.bytes"] = static_cast<double>(stats.bytes);
  metrics["sync.full_bytes"] = static_cast<double>(stats.full_bytes);
  metrics["sync.changed_tensors"] = static_cast<double>(stats.changed_tensors);
  metrics["sync.changed_fraction"] =
      stats.total_elements > 0
          ? static_cast<double>(stats.changed_elements) / static_cast<double>(stats.total_elements)
          : 0.0;
  if (options_.in_memory) {
    return ok_status();
  }
  // Keep the newest two: the one just written and the one a server may still be loading.
  std::error_code ec;
  std::vector<std::string> folders;
  for (const auto& e : std::filesystem::directory_iterator(options_.delta_dir, ec)) {
    folders.push_back(e.path().string());
  }
  std::sort(folders.begin(), folders.end());
  for (std::size_t i = 0; i + 2 < folders.size(); ++i) {
    std::filesystem::remove_all(folders[i], ec);
  }
  return ok_status();
}

status torch_learner::copy_weights_to(learner::policy& target, std::int64_t version) {
  std::lock_guard lock(mutex_);
  if (version > static_cast<std::int64_t>(version_)) {
    return error{"the sync asked for weight version " + std::to_string(version) +
                 ", the learner holds " + std::to_string(version_)};
  }
  return target.copy_weights_from(trainer_->current_policy());
}

status torch_learner::with_weights(std::int64_t version,
                                   const std::function<status(const learner::policy&)>& work) {
  std::lock_guard lock(mutex_);
  if (version > static_cast<std::int64_t>(version_)) {
    return error{"the sync asked for weight version " + std::to_string(version) +
                 ", the learner holds " + std::to_string(version_)};
  }
  return work(trainer_->current_policy());
}

std::optional<learner::prepared_weight_delta> torch_learner::prepared_delta(
    std::int64_t version) const {
  std::lock_guard lock(prepared_mutex_);
  const auto it = prepared_.find(version);
  if (it == prepared_.end()) {
    return std::nullopt;
  }
  return it->second;
}

torch_learner::torch_learner(torch_learner_options options, learner::trainer trainer,
                             std::string weights)
    : options_(std::move(options)),
      trainer_(std::make_unique<learner::trainer>(std::move(trainer))),
      current_weights_(std::move(weights)),
      version_(options_.initial_version) {}

torch_learner::~torch_learner() = default;

std::int64_t torch_learner::trainer_step() const { return trainer_->step(); }

result<backend_step> torch_learner::train(std::uint64_t step,
                                          std::vector<training_sequence> batch) {
  std::lock_guard lock(mutex_);
  // What a step hands the servers when the weights do not travel through step folders.
  const std::string shared_path = options_.in_memory ? std::string(in_memory_weights) : "";
  learner::update_batch update;
  update.sequences.reserve(batch.size());
  bool any_trained = false;
  for (const auto& s : batch) {
    update.sequences.push_back(to_learner_sequence(s, version_));
    for (auto m : s.mask) {
      any_trained = any_trained || m != 0;
    }
  }
  backend_step out;
  out.metrics["sequences"] = static_cast<double>(batch.size());
  if (!any_trained) {
    // Nothing to learn from: the weights stay; the version still counts the step.
    out.metrics["skipped"] = 1;
    if (auto written = write_delta(version_ + 1, out.metrics); !written) {
      return written.err();
    }
    out.weight_version = ++version_;
    out.weights_path = shared_path.empty() ? current_weights_ : shared_path;
    return out;
  }
  const auto start = std::chrono::steady_clock::now();
  auto report = trainer_->update(update);
  if (!report) {
    return report.err();
  }
  std::string weights = report->checkpoint_dir;
  if (weights.empty() && options_.total_steps > 0 && step + 1 >= options_.total_steps) {
    auto saved = trainer_->save_checkpoint();
    if (!saved) {
      return saved.err();
    }
    weights = *saved;
  }
  if (weights.empty() && !shared_path.empty()) {
    // No checkpoint this step, and the servers take the weights another way.
    weights = current_weights_;
  } else if (weights.empty()) {
    // No checkpoint this step: the weights alone, for the servers to reload.
    weights = step_folder(options_.weights_dir, static_cast<std::uint64_t>(report->step));
    // Not synced: the servers reload it from the page cache at once, and a resumed run starts
    // from a (synced) checkpoint, never from these folders; a sync would cost about 0.8 s per GiB
    // of weights, every step.
    if (auto saved = trainer_->current_policy().save(weights, "", std::int64_t{5} << 30,
                                                     durability::unsynced);
        !saved) {
      return saved.err();
    }
    // Keep the newest two: the one just written and the one the servers may still be loading.
    std::error_code ec;
    std::vector<std::string> folders;
    for (const auto& e : std::filesystem::directory_iterator(options_.weights_dir, ec)) {
      folders.push_back(e.path().string());
    }
    std::sort(folders.begin(), folders.end());
    for (std::size_t i = 0; i + 2 < folders.size(); ++i) {
      std::filesystem::remove_all(folders[i], ec);
    }
  }
  const auto& m = report->summary;
  out.metrics["loss"] = m.loss;
  out.metrics["pg_loss"] = m.pg_loss;
  out.metrics["kl"] = m.kl;
  out.metrics["behaviour_kl"] = m.behaviour_kl;
  out.metrics["clip_fraction"] = m.clip_fraction;
  out.metrics["offpolicy_dropped_sequences"] = static_cast<double>(m.dropped_sequences);
  out.metrics["offpolicy_masked_tokens"] = static_cast<double>(m.masked_tokens);
  out.metrics["ratio_p5"] = m.ratio_p5;
  out.metrics["ratio_p50"] = m.ratio_p50;
  out.metrics["ratio_p95"] = m.ratio_p95;
  out.metrics["entropy"] = m.entropy;
  out.metrics["grad_norm"] = m.grad_norm;
  out.metrics["lr"] = m.lr;
  out.metrics["tokens"] = static_cast<double>(m.tokens);
  out.metrics["trained_tokens"] = static_cast<double>(m.trained_tokens);
  out.metrics["tokens_per_second"] = m.tokens_per_second;
  out.metrics["update_seconds"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.metrics["optimizer_step"] = static_cast<double>(m.optimizer_step);
  if (auto written = write_delta(version_ + 1, out.metrics); !written) {
    return written.err();
  }
  current_weights_ = weights;
  if (shared_path.empty()) {
    out.weights_path = std::move(weights);
  } else {
    out.weights_path = shared_path;
  }
  out.weight_version = ++version_;
  return out;
}

}  // namespace leap::actors

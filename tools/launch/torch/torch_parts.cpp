#include "tools/launch/torch/torch_parts.hpp"

#include "actors/torch/torch_learner.hpp"
#include "actors/torch/torch_policy_backend.hpp"
#include "actors/torch/torch_weight_transfer.hpp"
#include "learner/model_config.hpp"
#include "learner/rank_workers.hpp"
#include "tools/launch/launch.hpp"

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace leap::launch {
namespace {

namespace fs = std::filesystem;

// Whether the torch learner keeps no folder per step, the servers taking its weights from memory:
// the embedded server in this process (in_memory), the broadcast (nccl), the shared GPU buffer
// (ipc). disk keeps the folders, also for the embedded server (e.g. to time the disk path against
// the in-memory one).
bool weight_sync_in_memory(weight_sync_method method) {
  switch (method) {
    case weight_sync_method::automatic:  // resolved by effective_weight_sync before it gets here
    case weight_sync_method::disk:
      return false;
    case weight_sync_method::in_memory:
    case weight_sync_method::nccl:
    case weight_sync_method::ipc:
      return true;
  }
  return false;
}

// leap-learner-rank (learner.world_size > 1) is installed beside the leap binary.
std::string rank_worker_executable() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ((ec ? fs::path(".") : self.parent_path()) / "leap-learner-rank").string();
}

class libtorch_parts final : public torch_parts {
 public:
  status make_learner(const torch_learner_request& request) override;
  [[nodiscard]] bool has_learner() const override { return learner_ != nullptr; }
  result<served_model> serve_model(const std::string& model_dir, const std::string& device,
                                   std::shared_ptr<const policy::model_vocabulary> vocab) override;
  result<transfer_plans> open_transfer(const experiment_config& c,
                                       const std::string& endpoint) override;
  policy::sync_companion companion() override {
    return transfer_ ? transfer_->companion() : policy::sync_companion{};
  }
  void close_transfer() override { transfer_.reset(); }
  [[nodiscard]] std::string delta_dir() const override { return delta_dir_; }
  [[nodiscard]] std::function<std::string(std::uint64_t)> delta_info_source() const override {
    return transfer_ && delta_ ? transfer_->delta_info_source()
                               : std::function<std::string(std::uint64_t)>{};
  }
  std::shared_ptr<actors::learner_backend> take_learner() override { return std::move(learner_); }

 private:
  // learner.world_size > 1: ranks 1.. of the trainer. Before the learner, so that they go after
  // it: the trainer's end lets them exit, then whatever still runs is killed and reaped.
  std::optional<learner::rank_workers> rank_workers_;
  std::shared_ptr<actors::torch_learner> learner_;
  std::string delta_dir_;
  bool delta_ = false;  // policy.weight_sync_delta
  // The embedded server's backend copies the learner's weights through this, also once the
  // learner actor holds it (take_learner).
  std::weak_ptr<actors::torch_learner> weights_source_;
  std::unique_ptr<actors::torch_weight_transfer> transfer_;
};

status libtorch_parts::make_learner(const torch_learner_request& request) {
  const experiment_config& c = request.checked->config;
  std::error_code ec;
  if (!c.learner.init_preset.empty() &&
      !fs::exists(fs::path(c.learner.model_path) / "config.json", ec)) {
    // With policy.tokenizer the model gets that vocabulary and its files.
    const std::string with_tokenizer =
        c.policy.tokenizer.empty() ? "" : request.checked->renderer_dir;
    auto written = actors::write_random_model(c.learner.init_preset, c.learner.model_path,
                                              static_cast<std::uint64_t>(c.experiment.seed),
                                              "float32", with_tokenizer);
    if (!written) {
      return written.err().wrap("learner.init_preset");
    }
    if (request.on_model_written) {
      request.on_model_written(
          {c.learner.init_preset, c.learner.model_path, with_tokenizer, written->parameters});
    }
  }
  actors::torch_learner_options lo;
  lo.model_dir = c.learner.model_path;
  lo.checkpoint_dir = c.learner.checkpoint_dir.empty() ? (request.run_dir / "checkpoints").string()
                                                       : c.learner.checkpoint_dir;
  lo.weights_dir = (request.run_dir / "weights").string();
  const bool in_memory = weight_sync_in_memory(effective_weight_sync(c.policy));
  if (!c.policy.weight_sync_delta.empty()) {
    lo.delta_dtype = c.policy.weight_sync_delta;
    // nccl broadcasts the delta from memory; disk writes a folder per step beside the weights.
    lo.delta_dir = in_memory ? "" : (request.run_dir / "weight-deltas").string();
    lo.delta_refusals = request.delta_refusals;
    delta_ = true;
  }
  lo.trainer = actors::trainer_options_of(c.learner);
  if (c.learner.world_size > 1) {
    learner::rank_workers_options ro;
    ro.executable = rank_worker_executable();
    ro.devices = c.learner.devices.empty()
                     ? std::vector<std::string>(static_cast<std::size_t>(c.learner.world_size),
                                                c.learner.device)
                     : c.learner.devices;
    ro.timeout_seconds = lo.trainer.distributed.timeout_seconds;
    lo.trainer.distributed.world_size = c.learner.world_size;
    // Spawned by the trainer once its store listens (on the port the kernel gave it), from this
    // thread, which outlives them; a rank that exits at start fails the forming at once.
    learner::start_ranks_when_listening(lo.trainer.distributed, ro, rank_workers_);
  }
  lo.checkpoint_every = c.learner.checkpoint_every;
  lo.total_steps = static_cast<std::uint64_t>(c.experiment.steps);
  lo.initial_version = request.weight_version;
  lo.in_memory = in_memory;
  auto created = actors::torch_learner::create(std::move(lo));
  if (!created) {
    return created.err();
  }
  learner_ = std::move(*created);
  weights_source_ = learner_;
  delta_dir_ = learner_->delta_dir();
  return ok_status();
}

result<served_model> libtorch_parts::serve_model(
    const std::string& model_dir, const std::string& device,
    std::shared_ptr<const policy::model_vocabulary> vocab) {
  const std::string weights = learner_ ? learner_->current_weights() : model_dir;
  auto model_config = learner::read_model_config(weights);
  if (!model_config) {
    return model_config.err();
  }
  actors::torch_backend_options backend_options;
  backend_options.device = device;
  backend_options.vocab = std::move(vocab);
  if (learner_) {
    // Weak: the learner actor owns the learner and may be gone while the server still stands.
    backend_options.source = [owner = weights_source_](learner::policy& target,
                                                       std::int64_t version) -> status {
      auto held = owner.lock();
      if (!held) {
        return error{"the learner has stopped"};
      }
      return held->copy_weights_to(target, version);
    };
  }
  auto made = actors::make_torch_policy_backend(weights, backend_options);
  if (!made) {
    return made.err();
  }
  served_model out;
  out.backend = std::move(*made);
  out.max_position_embeddings = model_config->max_position_embeddings;
  out.vocab_size = model_config->vocab_size;
  return out;
}

result<transfer_plans> libtorch_parts::open_transfer(const experiment_config& c,
                                                     const std::string& endpoint) {
  const bool ipc = c.policy.weight_sync == weight_sync_method::ipc;  // else nccl
  const std::string what = "policy.weight_sync " + to_string(c.policy.weight_sync);
  if (ipc) {
    // The learner's exported CUDA buffer, which the server copies out of at each /update_weights.
    auto opened = actors::torch_weight_transfer::open_ipc(learner_);
    if (!opened) {
      return opened.err();
    }
    transfer_ = std::move(*opened);
  } else {
    // For the rendezvous and for each tensor's broadcast: the server joins as soon as its
    // /init_weight_transfer_engine arrives, and the largest tensor of a 7B model is 1 GB. A run
    // that fails while the learner waits for a server that will not join ends after it.
    constexpr std::chrono::milliseconds transfer_timeout{120'000};
    auto opened =
        actors::torch_weight_transfer::open(learner_, endpoint, c.learner.device, transfer_timeout);
    if (!opened) {
      return opened.err();
    }
    transfer_ = std::move(*opened);
  }
  auto info = transfer_->update_info();
  if (!info) {
    transfer_.reset();
    return info.err().wrap(what);
  }
  transfer_plans out;
  if (ipc) {
    out.first_plan = policy::vllm_transfer_ipc_plan(*info);
    out.step_plan = out.first_plan;
  } else {
    out.first_plan = policy::vllm_transfer_nccl_plan(transfer_->init_info(), *info);
    // The first sync is full (the server's weights are not the learner's yet); later ones try the
    // delta with policy.weight_sync_delta.
    out.step_plan = policy::vllm_transfer_nccl_plan("", *info, delta_);
  }
  return out;
}

}  // namespace

void install_libtorch_parts() {
  install_torch_parts([] { return std::make_unique<libtorch_parts>(); });
}

}  // namespace leap::launch

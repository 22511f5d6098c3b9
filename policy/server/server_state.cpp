#include "policy/server/detail/server_state.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

namespace leap::policy {

server_state::server_state(std::int64_t weight_version, server_metrics& metrics)
    : metrics_(metrics), weight_version_(weight_version) {}

// ---- holders of the gate ----

pause_counts server_state::hold(pause_mode mode, bool user, bool sleep) {
  pause_counts counts;
  std::unique_lock lock(flights_mutex_);
  if (user) {
    user_paused_ = true;
  }
  if (sleep) {
    // Both sleep levels put weights and KV cache to sleep; the level only says whether the
    // weights are kept (offloaded) or discarded, which a scripted or CPU backend need not tell
    // apart.
    weights_asleep_ = true;
    kv_asleep_ = true;
  }
  gate_->pause(mode == pause_mode::in_place);
  if (mode == pause_mode::abort) {
    for (const auto& [control, running] : flights_) {
      if (running) {
        control->abort("generation paused");
        ++counts.aborted;
      }
    }
  }
  if (mode == pause_mode::wait) {
    // Drain: every running generation finishes. Bounded by shutdown, not by a clock: the caller's
    // own deadline decides how long it will wait for this reply.
    while (!gate_->stopping() &&
           std::any_of(flights_.begin(), flights_.end(), [](const auto& f) { return f.second; })) {
      flights_changed_.wait_for(lock, std::chrono::milliseconds(50));
    }
  }
  counts.running = static_cast<std::size_t>(
      std::count_if(flights_.begin(), flights_.end(), [](const auto& f) { return f.second; }));
  return counts;
}

void server_state::release_if_free() {
  if (!user_paused_ && !weights_asleep_ && !kv_asleep_) {
    gate_->resume();
  }
}

pause_counts server_state::pause(pause_mode mode) { return hold(mode, true, false); }

void server_state::resume() {
  std::lock_guard lock(flights_mutex_);
  user_paused_ = false;
  release_if_free();
}

pause_counts server_state::sleep(pause_mode mode) { return hold(mode, false, true); }

void server_state::wake(bool weights, bool kv_cache) {
  std::lock_guard lock(flights_mutex_);
  if (weights) {
    weights_asleep_ = false;
  }
  if (kv_cache) {
    kv_asleep_ = false;
  }
  release_if_free();
}

bool server_state::sleeping() const {
  std::lock_guard lock(flights_mutex_);
  return weights_asleep_ || kv_asleep_;
}

bool server_state::weights_asleep() const {
  std::lock_guard lock(flights_mutex_);
  return weights_asleep_;
}

void server_state::stop() {
  gate_->stop();
  std::lock_guard lock(flights_mutex_);
  flights_changed_.notify_all();
}

// ---- flights ----

server_state::flight::flight(server_state& state, std::shared_ptr<generation_control> control)
    : state_(state), control_(std::move(control)) {
  std::lock_guard lock(state_.flights_mutex_);
  state_.flights_[control_.get()] = false;
  state_.metrics_.waiting.fetch_add(1);
}

server_state::flight::~flight() {
  std::lock_guard lock(state_.flights_mutex_);
  state_.flights_.erase(control_.get());
  (running_ ? state_.metrics_.running : state_.metrics_.waiting).fetch_sub(1);
  state_.flights_changed_.notify_all();
}

bool server_state::flight::admit() {
  while (true) {
    {
      std::lock_guard lock(state_.flights_mutex_);
      if (state_.gate_->stopping()) {
        return false;
      }
      if (!state_.gate_->paused()) {
        state_.flights_[control_.get()] = true;
        running_ = true;
        state_.metrics_.waiting.fetch_sub(1);
        state_.metrics_.running.fetch_add(1);
        return true;
      }
    }
    if (!state_.gate_->wait_while_paused(nullptr)) {
      return false;
    }
  }
}

// ---- adapters ----

bool server_state::has_adapter(const std::string& name) const {
  std::lock_guard lock(adapters_mutex_);
  return adapters_.count(name) != 0;
}

std::map<std::string, std::string> server_state::adapters() const {
  std::lock_guard lock(adapters_mutex_);
  return adapters_;
}

std::variant<std::int64_t, http_error> server_state::load_adapter(
    const std::string& name, const std::string& path, bool replace,
    const std::function<status(std::int64_t version)>& load) {
  std::lock_guard load_lock(adapter_load_mutex_);
  if (!replace && has_adapter(name)) {
    return http_error{400,
                      "The lora adapter '" + name +
                          "' has already been loaded. (Use load_inplace: true to replace it.)"};
  }
  const std::int64_t version = weight_version() + 1;
  if (auto loaded = load(version); !loaded) {
    return http_error{400, "loading LoRA adapter '" + name + "' from " + path +
                               " failed: " + loaded.err().message};
  }
  {
    std::lock_guard lock(adapters_mutex_);
    adapters_[name] = path;
  }
  set_weight_version(version);
  return version;
}

bool server_state::unload_adapter(const std::string& name) {
  std::lock_guard lock(adapters_mutex_);
  return adapters_.erase(name) != 0;
}

// ---- the weight-transfer session ----

void server_state::end_transfer(policy_backend& backend, bool disk) {
  if (transfer_active_ && !disk) {
    backend.discard_weights();
  }
  transfer_active_ = false;
  staged_path_.reset();
  staged_tensors_ = false;
}

std::optional<http_error> server_state::init_transfer(policy_backend& backend,
                                                      transfer_backend engine,
                                                      const nlohmann::json& init_info) {
  const bool disk = !stages_tensors(engine);
  std::lock_guard lock(transfer_mutex_);
  if (disk && init_info.is_object() && !init_info.empty()) {
    // A trainer that expects a rendezvous (nccl's master_address, ...) would wait for a peer that
    // never comes: say so now.
    return http_error{400,
                      "this server's weight-transfer backend is disk, whose init_info is empty; "
                      "got " +
                          dump_json(init_info) +
                          " (start it with --weight-transfer-config '{\"backend\": \"nccl\"}' for "
                          "a broadcast)"};
  }
  if (!disk) {
    end_transfer(backend, disk);
    if (auto ok = backend.init_weight_transfer(engine, init_info); !ok) {
      transfer_initialized_ = false;
      return http_error{
          500, "init_weight_transfer_engine (" + to_string(engine) + "): " + ok.err().message};
    }
  }
  transfer_initialized_ = true;
  return std::nullopt;
}

std::optional<http_error> server_state::start_transfer(policy_backend& backend,
                                                       transfer_backend engine) {
  const bool disk = !stages_tensors(engine);
  std::lock_guard lock(transfer_mutex_);
  if (!disk && !transfer_initialized_) {
    return http_error{400, "the " + to_string(engine) +
                               " weight-transfer engine is not initialized: POST "
                               "/init_weight_transfer_engine first"};
  }
  end_transfer(backend, disk);
  transfer_active_ = true;
  return std::nullopt;
}

std::optional<http_error> server_state::update_transfer(policy_backend& backend,
                                                        transfer_backend engine,
                                                        const nlohmann::json& update_info) {
  const bool disk = !stages_tensors(engine);
  std::lock_guard lock(transfer_mutex_);
  if (!transfer_active_) {
    return http_error{400, "start_weight_update must be called before update_weights"};
  }
  if (disk) {
    auto info = parse_disk_update_info(update_info);
    if (!info) {
      end_transfer(backend, disk);
      return http_error{400, info.err().message};
    }
    if (staged_path_) {
      end_transfer(backend, disk);
      return http_error{400, "the disk backend accepts exactly one checkpoint per update session"};
    }
    staged_path_ = info->path;
    return std::nullopt;
  }
  if (update_info.is_object() && update_info.contains("base_version")) {
    return update_delta(backend, engine, update_info);
  }
  if (auto received = backend.receive_weights(update_info); !received) {
    end_transfer(backend, disk);
    return http_error{500, "update_weights (" + to_string(engine) + "): " + received.err().message +
                               "; the update is abandoned, the served weights are unchanged"};
  }
  staged_tensors_ = true;
  return std::nullopt;
}

std::optional<http_error> server_state::update_delta(policy_backend& backend,
                                                     transfer_backend engine,
                                                     const nlohmann::json& update_info) {
  // A refused delta keeps the session open: the trainer sends the same /update_weights again with
  // the full weights. The delta is received even when its base is not served, so that the
  // trainer's broadcasts are answered and the group stays in step for the full update.
  const nlohmann::json& base = update_info["base_version"];
  const std::int64_t served = weight_version();
  const bool on_base = base.is_number_integer() && base.get<std::int64_t>() == served;
  const status received = backend.receive_weights(update_info);
  if (!on_base) {
    backend.discard_weights();
    staged_tensors_ = false;
    metrics_.deltas_refused.fetch_add(1, std::memory_order_relaxed);
    return http_error{409, "update_weights (" + to_string(engine) +
                               "): the weight delta applies to weight version " + dump_json(base) +
                               ", this server holds version " + std::to_string(served) +
                               "; the weights are unchanged: send the full weights"};
  }
  if (!received) {
    backend.discard_weights();
    staged_tensors_ = false;
    metrics_.deltas_refused.fetch_add(1, std::memory_order_relaxed);
    return http_error{500, "update_weights (" + to_string(engine) + "): " + received.err().message +
                               "; the delta is refused, the served weights are unchanged"};
  }
  staged_tensors_ = true;
  metrics_.deltas_staged.fetch_add(1, std::memory_order_relaxed);
  return std::nullopt;
}

std::variant<std::int64_t, http_error> server_state::finish_transfer(
    policy_backend& backend, transfer_backend engine, std::optional<std::int64_t> version) {
  const bool disk = !stages_tensors(engine);
  std::lock_guard lock(transfer_mutex_);
  if (!transfer_active_) {
    return http_error{400, "no weight update is active: POST /start_weight_update first"};
  }
  if (!staged_path_ && !staged_tensors_) {
    end_transfer(backend, disk);
    return http_error{400, "no weights were received during this update session"};
  }
  const std::int64_t next = version.value_or(weight_version() + 1);
  if (disk) {
    if (auto stale = check_delta_base(*staged_path_, weight_version())) {
      end_transfer(backend, disk);
      return std::move(*stale);
    }
  }
  const status loaded =
      disk ? backend.load_weights(*staged_path_, next) : backend.commit_weights(next);
  staged_tensors_ = false;  // committed or refused: nothing left to discard
  end_transfer(backend, disk);
  if (!loaded) {
    return http_error{500, "finish_weight_update: " + loaded.err().message};
  }
  set_weight_version(next);
  return next;
}

// ---- folder loads ----

std::optional<http_error> server_state::check_delta_base(const std::string& path,
                                                         std::int64_t served) {
  // learner/weight_delta.hpp's manifest name (the policy library does not link the learner).
  const std::filesystem::path manifest_path = std::filesystem::path(path) / "weight_delta.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(manifest_path, ec)) {
    return std::nullopt;
  }
  std::ifstream in(manifest_path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json manifest = nlohmann::json::parse(text.str(), nullptr, false);
  if (!in || manifest.is_discarded() || !manifest.is_object() ||
      !manifest.contains("base_version") || !manifest["base_version"].is_number_integer()) {
    return http_error{400, "the weight delta's manifest " + manifest_path.string() +
                               " cannot be read or names no integer base_version"};
  }
  const auto base = manifest["base_version"].get<std::int64_t>();
  if (base != served) {
    return http_error{409, "the weight delta at " + path + " applies to weight version " +
                               std::to_string(base) + ", this server holds version " +
                               std::to_string(served) +
                               "; the weights are unchanged: send the full weights"};
  }
  return std::nullopt;
}

std::variant<std::int64_t, http_error> server_state::load_folder(
    policy_backend& backend, const std::string& path, std::optional<std::int64_t> version,
    int failure_status) {
  std::lock_guard lock(folder_load_mutex_);
  if (auto stale = check_delta_base(path, weight_version())) {
    return std::move(*stale);
  }
  const std::int64_t next = version.value_or(weight_version() + 1);
  if (auto loaded = backend.load_weights(path, next); !loaded) {
    return http_error{failure_status, loaded.err().message};
  }
  set_weight_version(next);
  return next;
}

bool server_state::transfer_active() const {
  std::lock_guard lock(transfer_mutex_);
  return transfer_active_;
}

}  // namespace leap::policy

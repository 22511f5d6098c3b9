#include "policy/server/server.hpp"

namespace leap::policy {

void generation_gate::pause(bool freeze_running) {
  std::lock_guard lock(mutex_);
  paused_ = true;
  frozen_ = freeze_running;
  changed_.notify_all();
}

void generation_gate::resume() {
  std::lock_guard lock(mutex_);
  paused_ = false;
  frozen_ = false;
  changed_.notify_all();
}

void generation_gate::stop() {
  std::lock_guard lock(mutex_);
  stopping_ = true;
  changed_.notify_all();
}

bool generation_gate::paused() const {
  std::lock_guard lock(mutex_);
  return paused_;
}

bool generation_gate::stopping() const {
  std::lock_guard lock(mutex_);
  return stopping_;
}

bool generation_gate::wait_while_paused(const std::function<bool()>& give_up) {
  std::unique_lock lock(mutex_);
  // give_up is polled as well as woken for: it may watch state this gate does not own.
  while (paused_ && !stopping_ && !(give_up && give_up())) {
    changed_.wait_for(lock, std::chrono::milliseconds(50));
  }
  return !stopping_ && !(give_up && give_up());
}

generation_control::generation_control() : gate_(std::make_shared<generation_gate>()) {}

generation_control::generation_control(std::shared_ptr<generation_gate> gate)
    : gate_(std::move(gate)) {}

void generation_control::abort(std::string message) {
  std::lock_guard lock(gate_->mutex_);
  if (!aborted_) {
    aborted_ = true;
    abort_message_ = std::move(message);
  }
  gate_->changed_.notify_all();
}

bool generation_control::aborted() const {
  std::lock_guard lock(gate_->mutex_);
  return aborted_;
}

std::string generation_control::abort_message() const {
  std::lock_guard lock(gate_->mutex_);
  return abort_message_;
}

bool generation_control::should_stop() const {
  std::lock_guard lock(gate_->mutex_);
  return aborted_ || gate_->stopping_;
}

bool generation_control::sleep_until(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(gate_->mutex_);
  gate_->changed_.wait_until(lock, deadline, [&] { return aborted_ || gate_->stopping_; });
  return !(aborted_ || gate_->stopping_);
}

bool generation_control::checkpoint() {
  std::unique_lock lock(gate_->mutex_);
  gate_->changed_.wait(lock, [&] { return !gate_->frozen_ || aborted_ || gate_->stopping_; });
  return !(aborted_ || gate_->stopping_);
}

}  // namespace leap::policy

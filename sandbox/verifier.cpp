#include "sandbox/verifier.hpp"

#include <algorithm>

namespace leap::sandbox {

bool verifier::job_queue::push(job j, bool wait) {
  std::unique_lock lock(mutex_);
  if (wait) {
    not_full_.wait(lock, [&] { return closed_ || jobs_.size() < capacity_; });
  } else if (jobs_.size() >= capacity_) {
    return false;
  }
  if (closed_) return false;
  jobs_.push_back(std::move(j));
  not_empty_.notify_one();
  return true;
}

bool verifier::job_queue::pop(job* out) {
  std::unique_lock lock(mutex_);
  not_empty_.wait(lock, [&] { return closed_ || !jobs_.empty(); });
  if (jobs_.empty()) return false;
  *out = std::move(jobs_.front());
  jobs_.pop_front();
  not_full_.notify_one();
  return true;
}

void verifier::job_queue::close() {
  std::lock_guard lock(mutex_);
  closed_ = true;
  not_full_.notify_all();
  not_empty_.notify_all();
}

result<std::unique_ptr<verifier>> verifier::create(verifier_config config) {
  if (config.queue_capacity == 0) return error{"verifier_config.queue_capacity must be at least 1"};
  auto e = engine::create(config.engine);
  if (!e) return e.err();
  return std::unique_ptr<verifier>(new verifier(std::move(config), std::move(e.value())));
}

verifier::verifier(verifier_config config, std::unique_ptr<engine> e)
    : config_(std::move(config)),
      engine_(std::move(e)),
      compile_queue_(config_.queue_capacity),
      run_queue_(config_.queue_capacity) {
  const int cores = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  const int compilers = config_.compile_workers > 0 ? config_.compile_workers : cores;
  int slots = config_.run_slots;
  if (slots <= 0) slots = config_.gpus.empty() ? cores : static_cast<int>(config_.gpus.size());
  for (int i = 0; i < compilers; ++i) compile_threads_.emplace_back([this] { compile_loop(); });
  for (int i = 0; i < slots; ++i) run_threads_.emplace_back([this, i] { run_loop(i); });
}

verifier::~verifier() {
  compile_queue_.close();
  for (auto& t : compile_threads_) t.join();
  // Compile workers are gone, so nothing more enters the run queue.
  run_queue_.close();
  for (auto& t : run_threads_) t.join();
}

void verifier::compile_loop() {
  job j;
  while (compile_queue_.pop(&j)) {
    --compile_queued_;
    ++compiling_;
    auto prepared = engine_->compile(*j.t, j.answer);
    --compiling_;
    if (!prepared) {
      j.done(prepared.err());
      continue;
    }
    if (prepared->final_verdict) {
      j.done(*prepared->final_verdict);
      continue;
    }
    j.prepared = std::move(prepared.value());
    j.answer.clear();
    // Blocks while the run slots are behind: back-pressure reaches submit() through this queue.
    auto done = j.done;
    ++run_queued_;
    if (!run_queue_.push(std::move(j), true)) {
      --run_queued_;
      done(error{"verifier is shutting down"});
    }
  }
}

void verifier::run_loop(int slot) {
  const int gpu = config_.gpus.empty() ? -1 : config_.gpus[static_cast<std::size_t>(slot) % config_.gpus.size()];
  job j;
  while (run_queue_.pop(&j)) {
    --run_queued_;
    ++running_;
    auto v = engine_->run(*j.t, j.prepared, gpu);
    --running_;
    j.done(std::move(v));
  }
}

void verifier::submit(std::shared_ptr<const task> t, std::string answer, callback done) {
  job j{std::move(t), std::move(answer), done, {}};
  ++compile_queued_;
  if (!compile_queue_.push(std::move(j), true)) {
    --compile_queued_;
    done(error{"verifier is shutting down"});
  }
}

verifier_load verifier::load() const {
  return {compile_queued_.load(), compiling_.load(), run_queued_.load(), running_.load()};
}

std::future<result<verdict>> verifier::submit(std::shared_ptr<const task> t, std::string answer) {
  auto promise = std::make_shared<std::promise<result<verdict>>>();
  auto future = promise->get_future();
  submit(std::move(t), std::move(answer), [promise](result<verdict> v) { promise->set_value(std::move(v)); });
  return future;
}

result<std::future<result<verdict>>> verifier::try_submit(std::shared_ptr<const task> t, std::string answer) {
  auto promise = std::make_shared<std::promise<result<verdict>>>();
  auto future = promise->get_future();
  job j{std::move(t), std::move(answer), [promise](result<verdict> v) { promise->set_value(std::move(v)); }, {}};
  ++compile_queued_;
  if (!compile_queue_.push(std::move(j), false)) {
    --compile_queued_;
    return error{"busy"};
  }
  return future;
}

}  // namespace leap::sandbox

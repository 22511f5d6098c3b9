#include "sandbox/verifier.hpp"

#include "sandbox/feedback.hpp"
#include "sandbox/kinds.hpp"

#include <algorithm>
#include <set>
#include <string>

namespace leap::sandbox {

std::optional<std::string> rerun_alone_reason(int sharing, const result<verdict>& outcome) {
  if (sharing <= 1) {
    return std::nullopt;
  }
  const std::string shared =
      "its first run shared the GPU with " + std::to_string(sharing - 1) + " other run(s) and ";
  if (outcome) {
    if (!outcome->device_memory_failure) {
      return std::nullopt;
    }
    return shared + "failed for device memory" +
           (outcome->device_memory_share_bytes > 0
                ? " (its share: " + std::to_string(outcome->device_memory_share_bytes >> 20) +
                      " MiB)"
                : std::string{});
  }
  // Only the slot's own errors: a broken task or a missing compiler says nothing of a neighbour.
  if (!infrastructure_slot(outcome.err()) || !says_device_memory_exhausted(outcome.err().message)) {
    return std::nullopt;
  }
  return shared + "device memory ran out before the candidate ran (" +
         outcome.err().message.substr(0, 300) + ")";
}

result<verdict> note_rerun_alone(result<verdict> alone, const std::string& reason,
                                 std::size_t feedback_budget) {
  if (!alone) {
    return error{alone.err().message + " (in a second run alone on the GPU: " + reason + ")"};
  }
  alone->rerun_note = "run again alone on the GPU: " + reason;
  alone->feedback =
      trim_to_budget(alone->feedback + "\n(This verdict is from a second run, alone " +
                         "on the GPU: " + reason + ".)",
                     feedback_budget);
  return alone;
}

bool verifier::job_queue::push(job j, bool wait) {
  std::unique_lock lock(mutex_);
  if (wait) {
    not_full_.wait(lock, [&] { return closed_ || jobs_.size() < capacity_; });
  } else if (jobs_.size() >= capacity_) {
    return false;
  }
  if (closed_) {
    return false;
  }
  jobs_.push_back(std::move(j));
  not_empty_.notify_one();
  return true;
}

bool verifier::job_queue::pop(job* out) {
  std::unique_lock lock(mutex_);
  not_empty_.wait(lock, [&] { return closed_ || !jobs_.empty(); });
  if (jobs_.empty()) {
    return false;
  }
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
  if (config.queue_capacity == 0) {
    return error{"verifier_config.queue_capacity must be at least 1"};
  }
  if (config.run_attempts < 1) {
    return error{"verifier_config.run_attempts must be at least 1"};
  }
  if (config.profile_queue_capacity == 0) {
    return error{"verifier_config.profile_queue_capacity must be at least 1"};
  }
  if (config.profile_workers < 0) {
    return error{"verifier_config.profile_workers must not be negative"};
  }
  auto e = engine::create(config.engine);
  if (!e) {
    return e.err();
  }
  return std::unique_ptr<verifier>(new verifier(std::move(config), std::move(e.value())));
}

verifier::verifier(verifier_config config, std::unique_ptr<engine> e)
    : config_(std::move(config)),
      engine_(std::move(e)),
      compile_queue_(config_.queue_capacity),
      run_queue_(config_.queue_capacity),
      profile_queue_(config_.profile_queue_capacity) {
  const int cores = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  const int compilers = config_.compile_workers > 0 ? config_.compile_workers : cores;
  int slots = config_.run_slots;
  if (slots <= 0) {
    slots = config_.gpus.empty() ? cores : static_cast<int>(config_.gpus.size());
  }
  gpu_turns_[-1];
  for (int g : config_.gpus) {
    gpu_turns_[g];
  }
  if (!config_.gpus.empty()) {
    for (int i = 0; i < slots; ++i) {
      ++slots_per_gpu_[config_.gpus[static_cast<std::size_t>(i) % config_.gpus.size()]];
    }
  }
  for (int i = 0; i < compilers; ++i) {
    compile_threads_.emplace_back([this] { compile_loop(); });
  }
  for (int i = 0; i < slots; ++i) {
    run_threads_.emplace_back([this, i] { run_loop(i); });
  }
  // Only an engine that profiles needs the pool; its threads would otherwise only wait.
  if (config_.engine.profile != profile_mode::off) {
    int profilers = config_.profile_workers;
    if (profilers == 0) {
      profilers = std::max(1, static_cast<int>(config_.gpus.size()));
    }
    for (int i = 0; i < profilers; ++i) {
      profile_threads_.emplace_back([this] { profile_loop(); });
    }
  }
}

verifier::~verifier() {
  compile_queue_.close();
  for (auto& t : compile_threads_) {
    t.join();
  }
  // Compile workers are gone, so nothing more enters the run queue.
  {
    std::lock_guard lock(slots_mutex_);
    stopping_ = true;
  }
  slots_changed_.notify_all();
  run_queue_.close();
  for (auto& t : run_threads_) {
    t.join();
  }
  // Run slots are gone, so nothing more enters the profiling queue; its jobs are finished.
  profile_queue_.close();
  for (auto& t : profile_threads_) {
    t.join();
  }
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
    j.compiled_at = std::chrono::steady_clock::now();
    // Blocks while the run slots are behind: back-pressure reaches submit() through this queue.
    auto done = j.done;
    ++run_queued_;
    if (!run_queue_.push(std::move(j), true)) {
      --run_queued_;
      done(error{"verifier is shutting down"});
    }
  }
}

bool verifier::in_rotation(int gpu, std::chrono::steady_clock::time_point now) const {
  const auto it = benched_.find(gpu);
  return it == benched_.end() || it->second <= now;
}

void verifier::bench(int gpu) {
  if (gpu < 0) {
    return;  // a slot without a GPU has nothing to take out of rotation
  }
  std::lock_guard lock(slots_mutex_);
  benched_[gpu] = std::chrono::steady_clock::now() + config_.slot_cooldown;
}

void verifier::restore(int gpu) {
  {
    std::lock_guard lock(slots_mutex_);
    benched_.erase(gpu);
  }
  slots_changed_.notify_all();
}

void verifier::run_loop(int slot) {
  const int gpu = config_.gpus.empty()
                      ? -1
                      : config_.gpus[static_cast<std::size_t>(slot) % config_.gpus.size()];
  job j;
  for (;;) {
    {
      // Out of rotation: leave the jobs to slots in rotation while there are any.
      std::unique_lock lock(slots_mutex_);
      for (;;) {
        const auto now = std::chrono::steady_clock::now();
        if (stopping_ || in_rotation(gpu, now)) {
          break;
        }
        const bool others = std::any_of(config_.gpus.begin(), config_.gpus.end(),
                                        [&](int g) { return g != gpu && in_rotation(g, now); });
        if (!others) {
          break;
        }
        slots_changed_.wait_until(lock, benched_[gpu]);
      }
    }
    if (!run_queue_.pop(&j)) {
      break;
    }
    const auto waited = std::chrono::steady_clock::now() - j.compiled_at;
    --run_queued_;
    ++running_;
    int used = gpu;
    auto v = run_with_retries(j, slot, gpu, &used);
    --running_;
    if (v) {
      v->run_queue_ms = std::chrono::duration<double, std::milli>(waited).count();
    }
    const bool to_profile =
        j.profiled && v && profile_selects(config_.engine.profile, j.t->kind, *v);
    if (!to_profile) {
      j.done(std::move(v));
      continue;
    }
    // The verdict first: `profiled` must not run before `done` has.
    j.done(*v);
    queue_profile(std::move(j), *v, used);
  }
}

std::shared_mutex& verifier::gpu_turn(int gpu) {
  auto turn = gpu_turns_.find(gpu);
  return (turn != gpu_turns_.end() ? turn : gpu_turns_.find(-1))->second;
}

void verifier::queue_profile(job j, const verdict& v, int gpu) {
  auto profiled = j.profiled;
  j.judged = v;
  j.gpu = gpu;
  ++profile_queued_;
  if (profile_queue_.push(std::move(j), false)) {
    return;
  }
  --profile_queued_;
  verdict unprofiled = v;
  unprofiled.profile = profile_summary{};
  unprofiled.profile->note = "not profiled: the profiling queue was full (" +
                             std::to_string(config_.profile_queue_capacity) + " waiting)";
  profiled(std::move(unprofiled));
}

void verifier::profile_loop() {
  job j;
  while (profile_queue_.pop(&j)) {
    --profile_queued_;
    ++profiling_;
    {
      // As an untimed run: ncu's replays never overlap a timed run on this GPU.
      std::shared_lock share(gpu_turn(j.gpu));
      engine_->profile_candidate(*j.t, j.prepared, j.judged, j.gpu);
    }
    --profiling_;
    j.profiled(std::move(j.judged));
  }
}

result<verdict> verifier::run_with_retries(const job& j, int slot, int gpu, int* used) {
  const task_kind kind = j.t->kind;
  const auto& gpus = config_.gpus;
  // A GPU in rotation that has not been tried for this job, starting after this slot's.
  auto untried = [&](const std::set<int>& tried) -> std::optional<int> {
    std::lock_guard lock(slots_mutex_);
    const auto now = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      const int g = gpus[(static_cast<std::size_t>(slot) + i) % gpus.size()];
      if (!tried.count(g) && in_rotation(g, now)) {
        return g;
      }
    }
    return std::nullopt;
  };
  int current = gpu;
  if (!gpus.empty()) {
    if (auto healthy = untried({}); healthy) {
      current = *healthy;
    }
  }
  std::set<int> tried;
  std::vector<std::string> failures;
  const bool gpu_kind = traits_of(kind).gpu;
  // A timed run of a GPU kind measures the GPU's time: no other run may share it meanwhile.
  const bool alone = config_.engine.timing_reps > 0 && gpu_kind;
  // With a profiling pool, the run only judges: the profile is made after the verdict is out.
  auto run_on = [&](int g) -> result<verdict> {
    std::shared_mutex& m = gpu_turn(g);
    auto once = [&](int sharing) {
      return j.profiled ? engine_->judge(*j.t, j.prepared, g, sharing)
                        : engine_->run(*j.t, j.prepared, g, sharing);
    };
    if (alone) {
      std::unique_lock hold(m);
      return once(1);
    }
    const auto runs = slots_per_gpu_.find(g);
    const int sharing = gpu_kind && runs != slots_per_gpu_.end() ? runs->second : 1;
    result<verdict> first = error{"not run"};
    {
      std::shared_lock share(m);
      first = once(sharing);
    }
    // A neighbour may have taken the memory it lacked: alone, only its own use counts. A candidate
    // that fakes the failure gains one run alone, no more.
    const auto why = rerun_alone_reason(sharing, first);
    if (!why) {
      return first;
    }
    std::unique_lock hold(m);
    return note_rerun_alone(once(1), *why, config_.engine.feedback.char_budget);
  };
  for (int attempt = 1; attempt <= config_.run_attempts; ++attempt) {
    *used = current;
    auto v = run_on(current);
    if (v) {
      return v;
    }
    const auto failed_slot = infrastructure_slot(v.err());
    if (!failed_slot) {
      return v;  // not a slot's failure: nothing another slot would change
    }
    failures.push_back(v.err().message);
    tried.insert(current);
    bench(current);
    if (attempt == config_.run_attempts) {
      break;
    }
    if (auto next = untried(tried)) {
      current = *next;
      continue;
    }
    // No other GPU in rotation: the first one tried whose probe passes again, if any.
    std::optional<int> again;
    for (int g : tried) {
      if (engine_->probe_slot(kind, g)) {
        restore(g);
        again = g;
        break;
      }
    }
    if (!again) {
      break;
    }
    current = *again;
  }
  std::string slots;
  for (int g : tried) {
    slots +=
        (slots.empty() ? "" : ", ") + (g >= 0 ? "GPU " + std::to_string(g) : std::string("no GPU"));
  }
  std::string text = "infrastructure failure persisted over " + std::to_string(failures.size()) +
                     " attempt(s) of " + j.t->id + " (slots tried: " + slots + ")";
  for (const auto& f : failures) {
    text += "\n  " + f;
  }
  return error{text};
}

void verifier::submit(std::shared_ptr<const task> t, std::string answer, const callback& done) {
  submit(std::move(t), std::move(answer), done, callback{});
}

void verifier::submit(std::shared_ptr<const task> t, std::string answer, const callback& judged,
                      const callback& profiled) {
  job j;
  j.t = std::move(t);
  j.answer = std::move(answer);
  j.done = judged;
  j.profiled = profiled;
  ++compile_queued_;
  if (!compile_queue_.push(std::move(j), true)) {
    --compile_queued_;
    judged(error{"verifier is shutting down"});
  }
}

verifier_load verifier::load() const {
  return {compile_queued_.load(), compiling_.load(),      run_queued_.load(),
          running_.load(),        profile_queued_.load(), profiling_.load()};
}

std::future<result<verdict>> verifier::submit(std::shared_ptr<const task> t, std::string answer) {
  auto promise = std::make_shared<std::promise<result<verdict>>>();
  auto future = promise->get_future();
  submit(std::move(t), std::move(answer),
         [promise](result<verdict> v) { promise->set_value(std::move(v)); });
  return future;
}

result<std::future<result<verdict>>> verifier::try_submit(std::shared_ptr<const task> t,
                                                          std::string answer) {
  auto promise = std::make_shared<std::promise<result<verdict>>>();
  auto future = promise->get_future();
  job j;
  j.t = std::move(t);
  j.answer = std::move(answer);
  j.done = [promise](result<verdict> v) { promise->set_value(std::move(v)); };
  ++compile_queued_;
  if (!compile_queue_.push(std::move(j), false)) {
    --compile_queued_;
    return error{"busy"};
  }
  return future;
}

}  // namespace leap::sandbox

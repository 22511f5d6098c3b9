// The public face of the module: submit(task, answer) -> verdict, with compilation on a CPU worker
// pool and runs on separate run slots (one per GPU for cuda work), bounded queues in between; and,
// for callers that take the verdict before its profile, a profiling pool behind the run slots.
#pragma once

#include "common/result.hpp"
#include "sandbox/engine.hpp"
#include "sandbox/task.hpp"
#include "sandbox/verdict.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

namespace leap::sandbox {

struct verifier_config {
  engine_config engine;
  int compile_workers = 0;  // Default: 0 = std::thread::hardware_concurrency()
  int run_slots = 0;  // Default: 0 = hardware_concurrency (CPU kinds), or gpus.size() when set
  // The CUDA device of each run slot: slot i runs with CUDA_VISIBLE_DEVICES=gpus[i % gpus.size()],
  // so run_slots above gpus.size() puts several runs on one GPU. Runs of the GPU kinds (cuda,
  // kernelbench) that are timed (engine.timing_reps > 0) take their GPU alone: a timed run waits
  // for the GPU's other runs to end, and they wait for it. An untimed run on a GPU of several
  // slots shares it: the engine is told how many share it (engine::run's `sharing`: KernelBench's
  // torch allocations are capped at their share), and a shared run that fails for device memory
  // is run once more alone on its GPU before its outcome stands (rerun_alone_reason). Empty: cuda
  // runs get no CUDA_VISIBLE_DEVICES (the driver's default device) and no share. Default: empty
  std::vector<int> gpus;
  // Bound of the compile queue and of the run queue each. Default: 64
  std::size_t queue_capacity = 64;
  // Tries of one run that ends in an infrastructure error (engine.hpp: infrastructure_error): the
  // run moves to another slot's GPU that is in rotation (else the same one once its probe passes);
  // after this many, or when no slot's probe passes, the error reaches the caller naming every slot
  // tried. Default: 3
  int run_attempts = 3;
  // How long a GPU whose probe failed stays out of rotation: its slot takes no jobs meanwhile
  // (while another slot is in rotation) and retries go elsewhere. Default: 60 s
  std::chrono::milliseconds slot_cooldown{60'000};
  // The profiling pool of the two-callback submit(): its workers (0: one per GPU in `gpus`, or one
  // when there are none) and the bound of its queue. A profile that finds the queue full is not
  // made (its verdict says so): the run slots never wait for profiling. Defaults: 0, 64
  int profile_workers = 0;
  std::size_t profile_queue_capacity = 64;
};

// What the verifier holds at one moment (for live metrics); each count is read separately, so the
// four may be off by a job that is moving between stages.
struct verifier_load {
  std::size_t compile_queued = 0;  // accepted, waiting for a compile worker
  std::size_t compiling = 0;
  std::size_t run_queued = 0;  // compiled, waiting for a run slot
  std::size_t running = 0;
  std::size_t profile_queued = 0;  // judged, waiting for a profiling worker
  std::size_t profiling = 0;
};

// Why a run that shared its GPU with `sharing` - 1 other runs is made again, alone on the GPU,
// before its outcome stands: the outcome says it failed for device memory (a verdict the engine
// marked device_memory_failure, or a slot's error that says memory ran out, such as a KernelBench
// judge or the GPU keeper that could not allocate the task's buffers), which may have been a
// neighbour's doing. nullopt when the outcome stands: the run had its GPU alone (sharing <= 1), or
// it failed otherwise. Once: the verifier never asks again about the run made alone. Pure function.
std::optional<std::string> rerun_alone_reason(int sharing, const result<verdict>& outcome);

// The outcome of the run made again alone, saying why (`reason`, from rerun_alone_reason): a
// verdict gets it as its rerun_note and at the end of its feedback (within `feedback_budget`
// characters); an error keeps its message (and its slot's tag) with the reason after it. Pure
// function.
result<verdict> note_rerun_alone(result<verdict> alone, const std::string& reason,
                                 std::size_t feedback_budget);

class verifier {
 public:
  using callback = std::function<void(result<verdict>)>;

  static result<std::unique_ptr<verifier>> create(verifier_config config);
  // Finishes every job already accepted, then stops the workers.
  ~verifier();
  verifier(const verifier&) = delete;
  verifier& operator=(const verifier&) = delete;

  // Queues a verification. Back-pressure: BLOCKS while the compile queue is full. `done` runs once,
  // on a worker thread, with the verdict or an infrastructure error (no compiler, broken task,
  // no GPU, a slot whose failure persisted over verifier_config::run_attempts); it must not block
  // for long. Thread-safe.
  void submit(std::shared_ptr<const task> t, std::string answer, const callback& done);
  // Two callbacks: `judged` runs with the verdict as soon as the run has judged it, before any
  // profiling, so nothing that waits for verdicts (the gate) waits for a profile. When the
  // verdict is one profile_selects(config.engine.profile, t->kind, verdict) chooses, `profiled`
  // runs once afterwards, from the profiling pool, with the same verdict completed by
  // engine::profile_candidate (its profile, or a note saying why there is none; the diagnosis
  // appended to its feedback); otherwise, and after an error, it never runs. A profile holds its
  // GPU as an untimed run does: a timed run never shares the GPU with ncu. Both callbacks run on
  // worker threads and must not block for long. Back-pressure as above. Thread-safe.
  void submit(std::shared_ptr<const task> t, std::string answer, const callback& judged,
              const callback& profiled);
  // The same with a future.
  std::future<result<verdict>> submit(std::shared_ptr<const task> t, std::string answer);
  // Never blocks: an error whose message is "busy" when the compile queue is full. Thread-safe.
  result<std::future<result<verdict>>> try_submit(std::shared_ptr<const task> t,
                                                  std::string answer);

  [[nodiscard]] engine& verification_engine() { return *engine_; }
  [[nodiscard]] int compile_workers() const { return static_cast<int>(compile_threads_.size()); }
  [[nodiscard]] int run_slots() const { return static_cast<int>(run_threads_.size()); }
  // Jobs per stage now. Thread-safe, lock-free.
  [[nodiscard]] verifier_load load() const;

 private:
  struct job {
    std::shared_ptr<const task> t;
    std::string answer;
    callback done;
    prepared_candidate prepared;
    std::chrono::steady_clock::time_point compiled_at;  // when it started waiting for a run slot
    callback profiled;  // empty: `done` gets the verdict with its profile (engine::run)
    // A profiling job: the verdict to complete and the GPU that judged it.
    verdict judged;
    int gpu = -1;
  };
  class job_queue {
   public:
    explicit job_queue(std::size_t capacity) : capacity_(capacity) {}
    bool push(job j, bool wait);  // false: full (when !wait) or closed
    bool pop(job* out);           // false: closed and empty
    void close();

   private:
    std::mutex mutex_;
    std::condition_variable not_full_, not_empty_;
    std::deque<job> jobs_;
    std::size_t capacity_;
    bool closed_ = false;
  };

  explicit verifier(verifier_config config, std::unique_ptr<engine> e);
  void compile_loop();
  void run_loop(int slot);
  void profile_loop();
  // Sets *used to the GPU of the last attempt.
  result<verdict> run_with_retries(const job& j, int slot, int gpu, int* used);
  // Hands a judged verdict to the profiling pool, or to `profiled` at once with a note when the
  // pool's queue is full.
  void queue_profile(job j, const verdict& v, int gpu);
  std::shared_mutex& gpu_turn(int gpu);
  bool in_rotation(int gpu, std::chrono::steady_clock::time_point now) const;  // slots_mutex_ held
  void bench(int gpu);
  void restore(int gpu);

  verifier_config config_;
  std::unique_ptr<engine> engine_;
  job_queue compile_queue_;
  job_queue run_queue_;
  job_queue profile_queue_;
  // Stage counts for load(); a job is counted in one stage at a time.
  std::atomic<std::size_t> compile_queued_{0}, compiling_{0}, run_queued_{0}, running_{0};
  std::atomic<std::size_t> profile_queued_{0}, profiling_{0};
  // GPUs out of rotation (a failed probe) until the time given.
  mutable std::mutex slots_mutex_;
  std::condition_variable slots_changed_;
  std::map<int, std::chrono::steady_clock::time_point> benched_;
  // Per GPU: its runs share it, a timed one holds it alone (gpu_turn). Made at construction for
  // every GPU a run may go to (gpus, and -1), never changed after.
  std::map<int, std::shared_mutex> gpu_turns_;
  // Per GPU of `gpus`: how many run slots it has (the runs that may share it at once).
  std::map<int, int> slots_per_gpu_;
  bool stopping_ = false;
  std::vector<std::thread> compile_threads_;
  std::vector<std::thread> run_threads_;
  std::vector<std::thread> profile_threads_;
};

}  // namespace leap::sandbox

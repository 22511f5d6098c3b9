#include "sandbox/verifier.hpp"

#include "sandbox/compile_cache.hpp"
#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

namespace leap::sandbox {
namespace {

namespace fs = std::filesystem;
using testing::fenced;

fs::path private_dir(const std::string& name) {
  auto p =
      default_scratch_root().parent_path() / ("leap-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

// The cache of the cuda tests below (the vector-add candidate judged with the GPU probe replaced
// or on a GPU). Under ctest these tests, a process each, share one folder and run in turn
// (tests/CMakeLists.txt): the candidate, its harness, reference and judge are built by the first
// of them, not by each; none asserts a build, and a cache hit is the same program. Alone, each
// builds in a folder of its own, removed after it (vt_remove_private_cache).
fs::path vt_cuda_cache(const std::string& name) {
  auto shared = testing::ctest_shared_cache("verifier-cuda");
  return shared.empty() ? private_dir(name) : shared;
}

void vt_remove_private_cache(const fs::path& dir) {
  if (dir != testing::ctest_shared_cache("verifier-cuda")) {
    fs::remove_all(dir);
  }
}

TEST(CompileCacheTest, ConcurrentIdenticalKeysBuildOnce) {
  const auto dir = private_dir("cache-dedup");
  auto cache = compile_cache::open(dir, 1 << 20);
  ASSERT_TRUE(cache.ok()) << cache.err().message;
  std::atomic<int> builds{0};
  std::mutex m;
  std::condition_variable cv;
  bool release = false;
  auto build = [&]() -> result<build_output> {
    ++builds;
    std::unique_lock lock(m);
    // Hold the build until every caller has arrived, so they all find it in flight.
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return release; });
    return build_output{true, "artifact", "", false};
  };
  std::vector<std::thread> threads;
  threads.reserve(4);
  std::vector<cache_lookup> results(4);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      auto r = (*cache)->get_or_build("abcdef", build);
      ASSERT_TRUE(r.ok());
      results[i] = r.value();
    });
  }
  // Released only once the one build is running and the three others wait on it, so that each of
  // them is served by that build (shared), not by the disk entry it leaves.
  const bool all_arrived = testing::wait_until([&] { return (*cache)->waiting() == 3; });
  {
    std::lock_guard lock(m);
    release = true;
  }
  cv.notify_all();
  for (auto& t : threads) {
    t.join();
  }
  ASSERT_TRUE(all_arrived) << (*cache)->waiting() << " callers waited on the build";
  EXPECT_EQ((*cache)->waiting(), 0U);
  EXPECT_EQ(builds.load(), 1);
  EXPECT_EQ((*cache)->builds(), 1U);
  int shared = 0;
  for (const auto& r : results) {
    EXPECT_EQ(r.output.artifact, "artifact");
    shared += r.shared ? 1 : 0;
  }
  EXPECT_EQ(shared, 3);
  // Later lookups are disk hits, also from a freshly opened cache.
  auto reopened = compile_cache::open(dir, 1 << 20);
  ASSERT_TRUE(reopened.ok());
  auto hit = (*reopened)->get_or_build("abcdef", build);
  ASSERT_TRUE(hit.ok());
  EXPECT_TRUE(hit->hit);
  EXPECT_EQ(builds.load(), 1);
  fs::remove_all(dir);
}

// find_folder takes a folder only once it is in place: not before its build, not during it.
TEST(CompileCacheTest, AFolderIsFoundOnlyOnceInPlace) {
  const auto dir = private_dir("cache-find-folder");
  auto cache = compile_cache::open(dir, 1 << 20);
  ASSERT_TRUE(cache.ok()) << cache.err().message;
  EXPECT_FALSE((*cache)->find_folder("f01d").has_value());
  std::mutex m;
  std::condition_variable cv;
  bool started = false;
  bool release = false;
  std::thread builder([&] {
    auto r =
        (*cache)->get_or_build_folder("f01d", [&](const fs::path& aside) -> result<build_output> {
          std::ofstream(aside / "made") << "x";
          std::unique_lock lock(m);
          started = true;
          cv.notify_all();
          cv.wait_for(lock, std::chrono::seconds(10), [&] { return release; });
          return build_output{true, "", "", false};
        });
    EXPECT_TRUE(r.ok() && r->ok);
  });
  {
    std::unique_lock lock(m);
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return started; });
  }
  EXPECT_FALSE((*cache)->find_folder("f01d").has_value()) << "found while being built";
  {
    std::lock_guard lock(m);
    release = true;
  }
  cv.notify_all();
  builder.join();
  auto found = (*cache)->find_folder("f01d");
  ASSERT_TRUE(found.has_value());
  EXPECT_TRUE(found->ok);
  EXPECT_TRUE(fs::exists(found->path / "made"));
  EXPECT_EQ((*cache)->folder_builds(), 1U);
  EXPECT_FALSE((*cache)->find_folder("f02d").has_value());
}

TEST(CompileCacheTest, EvictsLeastRecentlyUsedBeyondTheBound) {
  const auto dir = private_dir("cache-evict");
  auto cache = compile_cache::open(dir, 2500);
  ASSERT_TRUE(cache.ok());
  auto make = [](char c) {
    return [c]() -> result<build_output> {
      return build_output{true, std::string(1000, c), "", false};
    };
  };
  ASSERT_TRUE((*cache)->get_or_build("aa01", make('a')).ok());
  ASSERT_TRUE((*cache)->get_or_build("bb02", make('b')).ok());
  ASSERT_TRUE((*cache)->get_or_build("aa01", make('a'))->hit);  // a is now the most recent
  ASSERT_TRUE((*cache)->get_or_build("cc03", make('c')).ok());  // evicts b
  EXPECT_LE((*cache)->bytes_on_disk(), 2500U);
  EXPECT_EQ((*cache)->entries(), 2U);
  EXPECT_TRUE((*cache)->get_or_build("aa01", make('a'))->hit);
  EXPECT_FALSE((*cache)->get_or_build("bb02", make('b'))->hit);
  fs::remove_all(dir);
}

TEST(CompileCacheTest, FailuresAreCachedButBuildErrorsAreNot) {
  const auto dir = private_dir("cache-fail");
  auto cache = compile_cache::open(dir, 1 << 20);
  ASSERT_TRUE(cache.ok());
  int calls = 0;
  auto failing = [&]() -> result<build_output> {
    ++calls;
    return build_output{false, "", "solution.cpp:1:1: error: x", false};
  };
  ASSERT_TRUE((*cache)->get_or_build("ff01", failing).ok());
  auto again = (*cache)->get_or_build("ff01", failing);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->hit);
  EXPECT_FALSE(again->output.ok);
  EXPECT_EQ(again->output.log, "solution.cpp:1:1: error: x");
  auto broken = [&]() -> result<build_output> {
    ++calls;
    return error{"no compiler"};
  };
  EXPECT_FALSE((*cache)->get_or_build("ee02", broken).ok());
  EXPECT_FALSE((*cache)->get_or_build("ee02", broken).ok());
  EXPECT_EQ(calls, 3);
  fs::remove_all(dir);
}

// Every entry's state is one of the names this cache writes (ok, fail, timeout, refused): a state
// it never wrote is a miss and the candidate is built again, never taken for a cached failure.
TEST(CompileCacheTest, AnEntryStateTheCacheNeverWroteIsBuiltAgain) {
  const auto dir = private_dir("cache-state");
  auto cache = compile_cache::open(dir, 1 << 20);
  ASSERT_TRUE(cache.ok());
  int calls = 0;
  auto built = [&]() -> result<build_output> {
    ++calls;
    return build_output{true, "ELF", "", false};
  };
  ASSERT_TRUE((*cache)->get_or_build("cd01", built).ok());
  fs::path entry;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().extension() == ".entry") {
      entry = e.path();
    }
  }
  ASSERT_FALSE(entry.empty());
  std::string bytes;
  {
    std::ifstream in(entry, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const auto at = bytes.find(" ok 3\n");
  ASSERT_NE(at, std::string::npos) << bytes;
  bytes.replace(at, 4, " oz ");
  std::ofstream(entry, std::ios::binary | std::ios::trunc) << bytes;
  auto reopened = compile_cache::open(dir, 1 << 20);
  ASSERT_TRUE(reopened.ok());
  auto again = (*reopened)->get_or_build("cd01", built);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->hit);
  EXPECT_TRUE(again->output.ok);
  EXPECT_EQ(calls, 2);
  fs::remove_all(dir);
}

// A refusal's category is stored by its name ("forbidden\n" before the feedback): entries written
// before the category became an enum still load, and a name this cache never wrote is a miss.
TEST(CompileCacheTest, RefusalsKeepTheirCategoryOnDisk) {
  const auto dir = private_dir("cache-refusal");
  auto cache = compile_cache::open(dir, 1 << 20);
  ASSERT_TRUE(cache.ok());
  int calls = 0;
  auto refused = [&]() -> result<build_output> {
    ++calls;
    build_output out;
    out.refusal_category = verdict_category::forbidden;
    out.refusal = "uses cublasSgemm";
    return out;
  };
  ASSERT_TRUE((*cache)->get_or_build("ab01", refused).ok());
  fs::path entry;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().extension() == ".entry") {
      entry = e.path();
    }
  }
  ASSERT_FALSE(entry.empty());
  std::ifstream in(entry, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  EXPECT_NE(bytes.find(" refused 26\nforbidden\nuses cublasSgemm"), std::string::npos) << bytes;
  auto reopened = compile_cache::open(dir, 1 << 20);
  ASSERT_TRUE(reopened.ok());
  auto hit = (*reopened)->get_or_build("ab01", refused);
  ASSERT_TRUE(hit.ok());
  EXPECT_TRUE(hit->hit);
  EXPECT_EQ(hit->output.refusal_category, verdict_category::forbidden);
  EXPECT_EQ(hit->output.refusal, "uses cublasSgemm");
  EXPECT_EQ(calls, 1);
  // The same entry under another category name this cache does not know: built again.
  {
    std::string edited = bytes;
    edited.replace(edited.find("forbidden"), 9, "forbiddex");
    std::ofstream(entry, std::ios::binary | std::ios::trunc) << edited;
  }
  auto fresh = compile_cache::open(dir, 1 << 20);
  ASSERT_TRUE(fresh.ok());
  auto rebuilt = (*fresh)->get_or_build("ab01", refused);
  ASSERT_TRUE(rebuilt.ok());
  EXPECT_FALSE(rebuilt->hit);
  EXPECT_EQ(rebuilt->output.refusal_category, verdict_category::forbidden);
  EXPECT_EQ(calls, 2);
  fs::remove_all(dir);
}

TEST(VerifierTest, ManyCandidatesConcurrentlyWithDeduplication) {
  verifier_config config;
  config.engine = testing::test_engine_config();
  config.compile_workers = 2;
  config.run_slots = 2;
  config.queue_capacity = 4;
  auto v = verifier::create(config);
  ASSERT_TRUE(v.ok()) << v.err().message;
  auto t = std::make_shared<const task>(testing::doubling_task(256));
  const std::string good = fenced("cpp",
                                  "void solve(const float* x, float* y, int n) { for (int i = 0; i "
                                  "< n; ++i) y[i] = x[i] * 2.0f; }\n");
  const std::string bad = fenced(
      "cpp",
      "void solve(const float* x, float* y, int n) { for (int i = 0; i < n; ++i) y[i] = x[i]; }\n");
  const auto builds_before = (*v)->verification_engine().cache().builds();
  std::vector<std::future<result<verdict>>> futures;
  futures.reserve(12);
  for (int i = 0; i < 12; ++i) {
    futures.push_back((*v)->submit(t, i % 2 ? bad : good));
  }
  int passed = 0, failed = 0;
  for (auto& f : futures) {
    ASSERT_EQ(f.wait_for(std::chrono::seconds(120)), std::future_status::ready);
    auto r = f.get();
    ASSERT_TRUE(r.ok()) << r.err().message;
    (r->passed ? passed : failed)++;
    if (!r->passed && r->category != verdict_category::wrong_answer) {
      ADD_FAILURE() << r->feedback << "\n" << r->diagnostics;
    }
  }
  EXPECT_EQ(passed, 6);
  EXPECT_EQ(failed, 6);
  // Two distinct candidates (plus at most the task's harness object, judge and reference):
  // compiled once each.
  EXPECT_LE((*v)->verification_engine().cache().builds() - builds_before, 5U);
}

TEST(VerifierTest, TrySubmitSaysBusyWhenTheQueueIsFull) {
  verifier_config config;
  config.engine = testing::test_engine_config();
  config.compile_workers = 1;
  config.run_slots = 1;
  config.queue_capacity = 1;
  auto v = verifier::create(config);
  ASSERT_TRUE(v.ok()) << v.err().message;
  auto t = std::make_shared<const task>(testing::python_add_task());
  const std::string slow =
      fenced("python", "import time\ntime.sleep(1)\ndef add(a, b):\n    return a + b\n");
  std::vector<std::future<result<verdict>>> accepted;
  bool saw_busy = false;
  for (int i = 0; i < 8 && !saw_busy; ++i) {
    auto r = (*v)->try_submit(t, slow);
    if (r.ok()) {
      accepted.push_back(std::move(r.value()));
    } else {
      EXPECT_EQ(r.err().message, "busy");
      saw_busy = true;
    }
  }
  EXPECT_TRUE(saw_busy);
  for (auto& f : accepted) {
    ASSERT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready);
    auto r = f.get();
    ASSERT_TRUE(r.ok()) << r.err().message;
    EXPECT_TRUE(r->passed) << r->feedback;
  }
}

// The wait for a run slot is reported apart from compilation: with one slot (one GPU shared by
// every cuda run) that wait, not nvcc, is what a step's compile stage used to be blamed for.
TEST(VerifierTest, ReportsTheWaitForARunSlot) {
  verifier_config config;
  config.engine = testing::test_engine_config();
  config.compile_workers = 2;
  config.run_slots = 1;
  auto v = verifier::create(config);
  ASSERT_TRUE(v.ok()) << v.err().message;
  auto t = std::make_shared<const task>(testing::python_add_task());
  const std::string slow =
      fenced("python", "import time\ntime.sleep(3)\ndef add(a, b):\n    return a + b\n");
  const std::string quick = fenced("python", "def add(a, b):\n    return a + b\n");
  auto first = (*v)->submit(t, slow);
  // The slot is taken: the next job, once compiled, waits for the first run to end.
  ASSERT_TRUE(testing::wait_until([&] { return (*v)->load().running == 1; }));
  auto second = (*v)->submit(t, quick);
  auto a = first.get();
  auto b = second.get();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(a->passed && b->passed) << a->feedback << b->feedback;
  EXPECT_GE(a->run_ms, 3000);
  EXPECT_GT(b->run_queue_ms, 0);
  EXPECT_GT(b->run_queue_ms, a->run_queue_ms) << "the second job waited for the first's run";
}

const std::string k_cuda_good =
    fenced("cuda",
           "__global__ void add(const float* a, const float* b, float* c, int n) {\n"
           "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "  if (i < n) c[i] = a[i] + b[i];\n"
           "}\n"
           "void solve(const float* a, const float* b, float* c, int n) { add<<<(n + 255) / 256, "
           "256>>>(a, b, c, n); }\n");

bool nvcc_found(const engine_config& c, std::string* why) {
  if (std::system((c.nvcc + " --version >/dev/null 2>&1").c_str()) != 0) {
    *why = "nvcc not found at '" + c.nvcc + "'";
    return false;
  }
  return true;
}

// Records the GPUs probed; GPU `broken` fails. The seam for machines without a GPU: the runs are
// real (the harness, the driver's refusal), only the probe's answer is chosen. The real probe runs
// in EngineTest.CudaRunWithoutAUsableGpuIsAnInfrastructureErrorOfTheSlot and the GPU test below.
struct probe_log {
  std::mutex mutex;
  std::vector<int> gpus;
  std::set<int> broken;
  status probe(int gpu) {
    std::lock_guard lock(mutex);
    gpus.push_back(gpu);
    if (broken.count(gpu) || broken.count(-2)) {
      return error{"test probe: GPU " + std::to_string(gpu) + " is broken"};
    }
    return ok_status();
  }
};

TEST(VerifierTest, InfrastructureFailureMovesToAnotherSlot) {
  verifier_config config;
  config.engine = testing::test_engine_config();
  config.engine.cache_dir = vt_cuda_cache("retry-cache");
  std::string why;
  if (!nvcc_found(config.engine, &why)) {
    GTEST_SKIP() << why;
  }
  // Without a GPU no slot's keeper starts: every slot fails (PersistentInfrastructureFailure...).
  if (!testing::gpu_present(&why)) {
    GTEST_SKIP() << why;
  }
  auto log = std::make_shared<probe_log>();
  log->broken = {7};
  config.engine.probe_override = [log](task_kind, int gpu) { return log->probe(gpu); };
  config.gpus = {7, 0};
  config.run_slots = 1;  // slot 0 is GPU 7: the job starts there
  config.compile_workers = 1;
  auto v = verifier::create(config);
  ASSERT_TRUE(v.ok()) << v.err().message;
  auto r =
      (*v)->submit(std::make_shared<const task>(testing::cuda_vector_add_task(4099)), k_cuda_good)
          .get();
  // Judged on GPU 0 after GPU 7 (no such device) failed as a slot.
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_TRUE(r->passed) << r->feedback;
  std::lock_guard lock(log->mutex);
  ASSERT_FALSE(log->gpus.empty());
  EXPECT_EQ(log->gpus.front(), 7);
  vt_remove_private_cache(config.engine.cache_dir);
}

// Two run slots on one GPU: untimed runs share it, a timed run holds it alone. Seen from inside
// the runs: without a GPU a cuda run's keeper cannot start and the run ends in the engine's probe
// of its slot (replaced here), which counts the runs inside it at once and waits a while for the
// other to come in.
TEST(VerifierTest, TimedGpuRunsTakeTheirGpuAloneUntimedOnesShareIt) {
  verifier_config base;
  base.engine = testing::test_engine_config();
  std::string why;
  if (!nvcc_found(base.engine, &why)) {
    GTEST_SKIP() << why;
  }
  if (testing::gpu_present(&why)) {
    GTEST_SKIP() << "a GPU is present: its runs pass without asking the probe";
  }
  struct inside_count {
    std::mutex m;
    std::condition_variable cv;
    int now = 0;
    int most = 0;
  };
  // One cache for both: the candidate, its task's harness and judge are built once.
  base.engine.cache_dir = vt_cuda_cache("turns-cache");
  for (const int reps : {0, 3}) {
    SCOPED_TRACE("timing_reps " + std::to_string(reps));
    verifier_config config = base;
    config.engine.timing_reps = reps;
    auto inside = std::make_shared<inside_count>();
    // Shared, the other run is free to come in, and does; alone, it would have come in within the
    // wait if the GPU let it.
    const auto wait = reps == 0 ? std::chrono::seconds(120) : std::chrono::seconds(5);
    config.engine.probe_override = [inside, wait](task_kind, int) -> status {
      std::unique_lock lock(inside->m);
      inside->most = std::max(inside->most, ++inside->now);
      inside->cv.notify_all();
      inside->cv.wait_for(lock, wait, [&] { return inside->most >= 2; });
      --inside->now;
      return ok_status();
    };
    config.gpus = {0};
    config.run_slots = 2;
    config.compile_workers = 2;
    // One attempt: a retry would ask the probe again from outside the GPU's lock.
    config.run_attempts = 1;
    auto v = verifier::create(config);
    ASSERT_TRUE(v.ok()) << v.err().message;
    const auto t = std::make_shared<const task>(testing::cuda_vector_add_task(4099));
    auto first = (*v)->submit(t, k_cuda_good);
    auto second = (*v)->submit(t, k_cuda_good);
    for (auto* f : {&first, &second}) {
      // No GPU here: the slot's keeper cannot start, so every attempt is the slot's failure, and
      // each attempt asks the probe, inside the GPU's lock.
      auto r = f->get();
      ASSERT_FALSE(r.ok());
      EXPECT_NE(r.err().message.find("GPU keeper"), std::string::npos) << r.err().message;
    }
    std::lock_guard lock(inside->m);
    EXPECT_EQ(inside->most, reps == 0 ? 2 : 1);
  }
  vt_remove_private_cache(base.engine.cache_dir);
}

TEST(VerifierMemoryTest, DeviceMemoryIsToldFromOtherFailures) {
  for (const char* text :
       {"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "RuntimeError: CUDA error: out of memory", "cudaErrorMemoryAllocation",
        "the slot's GPU keeper failed during the run (CUDA_ERROR_OUT_OF_MEMORY while mapping)",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "CUDNN_STATUS_ALLOC_FAILED"}) {
    EXPECT_TRUE(says_device_memory_exhausted(text)) << text;
  }
  for (const char* text :
       {"cudaErrorIllegalAddress", "memory limit exceeded", "CUBLAS_STATUS_EXECUTION_FAILED",
        "the slot's GPU keeper could not start", ""}) {
    EXPECT_FALSE(says_device_memory_exhausted(text)) << text;
  }
}

TEST(VerifierMemoryTest, OnlyASharedRunThatFailedForDeviceMemoryIsRunAgainAlone) {
  verdict oom;
  oom.category = verdict_category::runtime;
  oom.device_memory_failure = true;
  oom.device_memory_share_bytes = 3ULL << 30;
  verdict wrong;
  wrong.category = verdict_category::wrong_answer;
  verdict pass;
  pass.passed = true;
  pass.category = verdict_category::pass;
  const result<verdict> keeper_oom = infrastructure_error(
      0, "the slot's GPU keeper failed during the run (CUDA_ERROR_OUT_OF_MEMORY while mapping)");
  const result<verdict> judge_oom = infrastructure_error(
      0,
      "kb: the KernelBench judge failed on GPU 0 before the candidate ran: preparing the "
      "trials' buffers on cuda: RuntimeError: CUDA error: out of memory");
  const result<verdict> keeper_gone = infrastructure_error(0, "the slot's GPU keeper ended");
  // Not the slot's: a task's own error that mentions memory says nothing of a neighbour.
  const result<verdict> task_error = error{"kb: the reference ran out of memory"};
  struct vm_case {
    const char* name;
    int sharing;
    result<verdict> outcome;
    bool again;
  };
  const std::vector<vm_case> cases{
      {"oom shared", 2, oom, true},
      {"oom alone", 1, oom, false},
      {"wrong shared", 4, wrong, false},
      {"pass shared", 2, pass, false},
      {"keeper oom", 2, keeper_oom, true},
      {"judge oom", 3, judge_oom, true},
      {"keeper oom alone", 1, keeper_oom, false},
      {"keeper gone", 2, keeper_gone, false},
      {"task error", 2, task_error, false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const auto why = rerun_alone_reason(c.sharing, c.outcome);
    EXPECT_EQ(why.has_value(), c.again) << why.value_or("");
    if (why) {
      EXPECT_NE(why->find(std::to_string(c.sharing - 1) + " other run"), std::string::npos) << *why;
    }
  }
  EXPECT_NE(rerun_alone_reason(2, oom)->find("its share: 3072 MiB"), std::string::npos);
  EXPECT_NE(rerun_alone_reason(2, judge_oom)->find("CUDA error: out of memory"), std::string::npos);
}

TEST(VerifierMemoryTest, TheRunMadeAgainAloneSaysWhy) {
  verdict failed;
  failed.category = verdict_category::runtime;
  failed.feedback = "Runtime error: CUDA out of memory.";
  auto noted = note_rerun_alone(failed, "its first run shared the GPU", 4000);
  ASSERT_TRUE(noted.ok());
  EXPECT_NE(noted->rerun_note.find("alone"), std::string::npos) << noted->rerun_note;
  EXPECT_NE(noted->feedback.find("Runtime error: CUDA out of memory."), std::string::npos);
  EXPECT_NE(noted->feedback.find("second run, alone on the GPU: its first run shared the GPU"),
            std::string::npos)
      << noted->feedback;
  EXPECT_LE(note_rerun_alone(failed, std::string(500, 'x'), 100)->feedback.size(), 100U);
  // An error keeps its slot's tag: the verifier's retries still see the slot's failure.
  auto slot = note_rerun_alone(infrastructure_error(3, "keeper: CUDA_ERROR_OUT_OF_MEMORY"),
                               "its first run shared the GPU", 4000);
  ASSERT_FALSE(slot.ok());
  EXPECT_EQ(infrastructure_slot(slot.err()), 3);
  EXPECT_NE(slot.err().message.find("second run alone on the GPU: its first run shared"),
            std::string::npos)
      << slot.err().message;
}

// Two run slots on one GPU, untimed: a run that fails for device memory while sharing the GPU is
// made again alone. Seen as in the test above, from the engine's probe (replaced): without a GPU
// the slot's keeper cannot start and the run asks the probe, whose answer is chosen here. An
// answer that says device memory ran out brings each run back once, alone (no other run comes in
// while it waits); any other answer stands.
TEST(VerifierTest, SharedGpuRunThatRanOutOfDeviceMemoryRunsAgainAlone) {
  verifier_config base;
  base.engine = testing::test_engine_config();
  std::string why;
  if (!nvcc_found(base.engine, &why)) {
    GTEST_SKIP() << why;
  }
  if (testing::gpu_present(&why)) {
    GTEST_SKIP() << "a GPU is present: its runs pass without asking the probe";
  }
  struct probe_calls {
    std::mutex m;
    std::condition_variable cv;
    int calls = 0;
    int now = 0;
    int most_shared = 0;  // runs inside the probe at once, in the first two calls
    int most_later = 0;   // and in every later call
  };
  base.engine.cache_dir = vt_cuda_cache("memory-cache");
  for (const bool memory : {true, false}) {
    SCOPED_TRACE(memory ? "out of memory" : "another failure");
    verifier_config config = base;
    auto calls = std::make_shared<probe_calls>();
    const std::string answer =
        memory ? "stand-in probe: CUDA error: out of memory" : "stand-in probe: no device";
    config.engine.probe_override = [calls, answer](task_kind, int) -> status {
      std::unique_lock lock(calls->m);
      const bool first_two = ++calls->calls <= 2;
      ++calls->now;
      int& most = first_two ? calls->most_shared : calls->most_later;
      most = std::max(most, calls->now);
      calls->cv.notify_all();
      // The two shared runs meet here; a later run would be joined by the other within the wait
      // if the GPU let it in.
      calls->cv.wait_for(lock, first_two ? std::chrono::seconds(120) : std::chrono::seconds(5),
                         [&] { return first_two ? calls->most_shared >= 2 : calls->now >= 2; });
      most = std::max(most, calls->now);
      --calls->now;
      return error{answer};
    };
    config.gpus = {0};
    config.run_slots = 2;
    config.compile_workers = 2;
    config.run_attempts = 1;  // a retry would ask the probe again from outside the GPU's lock
    auto v = verifier::create(config);
    ASSERT_TRUE(v.ok()) << v.err().message;
    const auto t = std::make_shared<const task>(testing::cuda_vector_add_task(4099));
    auto first = (*v)->submit(t, k_cuda_good);
    auto second = (*v)->submit(t, k_cuda_good);
    for (auto* f : {&first, &second}) {
      auto r = f->get();
      ASSERT_FALSE(r.ok());
      EXPECT_NE(r.err().message.find(answer), std::string::npos) << r.err().message;
      EXPECT_EQ(r.err().message.find("second run alone on the GPU") != std::string::npos, memory)
          << r.err().message;
    }
    std::lock_guard lock(calls->m);
    EXPECT_EQ(calls->most_shared, 2);
    EXPECT_EQ(calls->calls, memory ? 4 : 2);
    EXPECT_LE(calls->most_later, 1);
  }
  vt_remove_private_cache(base.engine.cache_dir);
}

TEST(VerifierTest, PersistentInfrastructureFailureEndsTheRunNamingTheSlots) {
  verifier_config config;
  config.engine = testing::test_engine_config();
  config.engine.cache_dir = vt_cuda_cache("persist-cache");
  std::string why;
  if (!nvcc_found(config.engine, &why)) {
    GTEST_SKIP() << why;
  }
  auto log = std::make_shared<probe_log>();
  log->broken = {-2};  // every GPU
  config.engine.probe_override = [log](task_kind, int gpu) { return log->probe(gpu); };
  config.gpus = {7, 5};  // no machine here has these
  config.run_slots = 2;
  config.compile_workers = 1;
  config.run_attempts = 3;
  auto v = verifier::create(config);
  ASSERT_TRUE(v.ok()) << v.err().message;
  auto r =
      (*v)->submit(std::make_shared<const task>(testing::cuda_vector_add_task(4099)), k_cuda_good)
          .get();
  ASSERT_FALSE(r.ok()) << to_string(r->category) << ": " << r->feedback;
  EXPECT_NE(r.err().message.find("persisted"), std::string::npos) << r.err().message;
  EXPECT_NE(r.err().message.find("GPU 7"), std::string::npos) << r.err().message;
  EXPECT_NE(r.err().message.find("GPU 5"), std::string::npos) << r.err().message;
  vt_remove_private_cache(config.engine.cache_dir);
}

// The real probe on a GPU machine: a slot whose device does not exist (CUDA_VISIBLE_DEVICES=7 on a
// machine with fewer GPUs) fails its probe; the run moves to GPU 0 and passes.
TEST(VerifierTest, MissingDeviceIsRetriedOnTheRealGpu) {
  std::string why;
  if (!testing::gpu_present(&why)) {
    GTEST_SKIP() << why;
  }
  verifier_config config;
  config.engine = testing::test_engine_config();
  config.engine.cache_dir = vt_cuda_cache("gpu-retry-cache");
  if (!nvcc_found(config.engine, &why)) {
    GTEST_SKIP() << why;
  }
  config.gpus = {7, 0};
  config.run_slots = 1;
  config.compile_workers = 1;
  auto v = verifier::create(config);
  ASSERT_TRUE(v.ok()) << v.err().message;
  auto r =
      (*v)->submit(std::make_shared<const task>(testing::cuda_vector_add_task(4099)), k_cuda_good)
          .get();
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_TRUE(r->passed) << r->feedback << "\n" << r->diagnostics;
  EXPECT_FALSE((*v)->verification_engine().probe_slot(task_kind::cuda, 7).ok());
  vt_remove_private_cache(config.engine.cache_dir);
}

}  // namespace
}  // namespace leap::sandbox

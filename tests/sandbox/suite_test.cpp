// The project's task suite (sandbox/suite) through the real verifier: every cpp and python
// solution passes and every wrong candidate fails (with the category its label names); every cuda
// solution compiles with nvcc and cuda compile_error candidates get a compile verdict. On a
// machine with a GPU, cuda solutions and wrong candidates also run.
#include "sandbox/verifier.hpp"
#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <thread>

namespace leap::sandbox {
namespace {

namespace fs = std::filesystem;

const std::vector<task>& suite() {
  static const std::vector<task> tasks = [] {
    const fs::path root = fs::path(LEAP_SOURCE_DIR) / "sandbox" / "suite";
    if (!fs::exists(root)) {
      return std::vector<task>{};
    }
    auto loaded = load_suite(root);
    if (!loaded) {
      ADD_FAILURE() << loaded.err().message;
      return std::vector<task>{};
    }
    return loaded.value();
  }();
  return tasks;
}

// nvcc takes seconds per candidate: by default every cuda solution and the first five compile_error
// candidates are compiled; LEAP_SANDBOX_FULL_SUITE=1 compiles every compile_error candidate too.
bool full_suite() {
  const char* v = std::getenv("LEAP_SANDBOX_FULL_SUITE");
  return v != nullptr && std::string(v) == "1";
}

std::string fence_for(task_kind kind) {
  switch (kind) {
    case task_kind::cuda:
      return "cuda";
    case task_kind::cpp:
      return "cpp";
    default:
      return "python";
  }
}

// What a wrong candidate's label promises about its verdict. Empty: any failure at run time.
std::set<verdict_category> expected_for_label(const std::string& label) {
  for (const char* build_failure :
       {"compile_error", "syntax_error", "wrong_signature", "link_error"}) {
    if (label.rfind(build_failure, 0) == 0) {
      return {verdict_category::compile};
    }
  }
  if (label.rfind("timeout", 0) == 0) {
    return {verdict_category::timeout};
  }
  if (label.rfind("forbidden", 0) == 0) {
    return {verdict_category::forbidden};
  }
  return {verdict_category::runtime, verdict_category::timeout, verdict_category::wrong_answer};
}

struct job {
  std::string name;
  std::shared_ptr<const task> t;
  std::string code;
  std::set<verdict_category> expected;
};

void run_jobs(const std::vector<job>& jobs, int gpu_slots) {
  verifier_config config;
  config.engine = testing::test_engine_config();
  if (gpu_slots > 0) {
    // A cuda run starts a CUDA context first.
    config.engine.run_limits.wall = std::chrono::seconds(10);
    config.engine.run_limits.cpu_seconds = 8;
  } else {
    // The cpp candidates' runs (python has its own limits): the solutions took at most 0.3 s of
    // wall time each beside other tests (load 8 on 2 cores), so 4 s of wall time and 2 of CPU
    // leave them ample room, and the three timeout candidates, which spin until a limit stops
    // them, cost 2 CPU-s each instead of 8.
    config.engine.run_limits.wall = std::chrono::seconds(4);
    config.engine.run_limits.cpu_seconds = 2;
  }
  const int cores = static_cast<int>(std::max(2U, std::thread::hardware_concurrency()));
  config.compile_workers = cores;
  config.run_slots = gpu_slots > 0 ? gpu_slots : cores;
  if (gpu_slots > 0) {
    config.gpus = {0};
  }
  config.queue_capacity = 16;
  auto v = verifier::create(config);
  ASSERT_TRUE(v.ok()) << v.err().message;
  std::vector<std::future<result<verdict>>> futures;
  // Submitting blocks when the queue is full; a thread keeps feeding while results are checked.
  std::thread feeder([&] {
    for (const auto& j : jobs) {
      futures.push_back((*v)->submit(j.t, "```" + fence_for(j.t->kind) + "\n" + j.code + "```\n"));
    }
  });
  feeder.join();
  int failures = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    SCOPED_TRACE(jobs[i].name);
    ASSERT_EQ(futures[i].wait_for(std::chrono::seconds(300)), std::future_status::ready);
    auto r = futures[i].get();
    ASSERT_TRUE(r.ok()) << r.err().message;
    if (jobs[i].expected.count(r->category) == 0) {
      ++failures;
      ADD_FAILURE() << jobs[i].name << ": got " << to_string(r->category) << "\n"
                    << r->feedback << "\n"
                    << r->diagnostics;
    }
  }
  std::printf("%zu suite candidates verified, %d unexpected verdicts\n", jobs.size(), failures);
}

TEST(SuiteTest, CppAndPythonSolutionsPassAndWrongCandidatesFail) {
  std::vector<job> jobs;
  for (const auto& t : suite()) {
    if (t.kind != task_kind::cpp && t.kind != task_kind::python) {
      continue;
    }
    auto shared = std::make_shared<const task>(t);
    ASSERT_FALSE(t.solution.empty()) << t.id << " has no solution";
    jobs.push_back({t.id + " solution", shared, t.solution, {verdict_category::pass}});
    for (const auto& w : t.wrong) {
      jobs.push_back({t.id + " wrong/" + w.label, shared, w.code, expected_for_label(w.label)});
    }
  }
  if (jobs.empty()) {
    GTEST_SKIP() << "the suite has no cpp or python tasks yet";
  }
  run_jobs(jobs, 0);
}

TEST(SuiteTest, EveryPythonTaskHasHiddenTests) {
  // Feedback quotes tests.py; without hidden tests a debug turn could pass by hard-coding what it
  // quoted (tests/sandbox/adversarial/python/hardcodes_revealed_asserts.py).
  int python = 0;
  for (const auto& t : suite()) {
    if (t.kind != task_kind::python) {
      continue;
    }
    ++python;
    int hidden = 0;
    for (std::size_t at = t.hidden_tests.find("\ndef test_"); at != std::string::npos;
         at = t.hidden_tests.find("\ndef test_", at + 1)) {
      ++hidden;
    }
    EXPECT_GE(hidden, 2) << t.id << ": hidden_tests.py needs at least two test_* functions";
  }
  EXPECT_GT(python, 0);
}

TEST(SuiteTest, CudaSolutionsCompileAndCompileErrorsAreCaught) {
  std::vector<job> jobs;
  int compile_errors = 0;
  for (const auto& t : suite()) {
    if (t.kind != task_kind::cuda) {
      continue;
    }
    auto shared = std::make_shared<const task>(t);
    jobs.push_back({t.id + " solution", shared, t.solution, {}});
    for (const auto& w : t.wrong) {
      if (w.label.rfind("compile_error", 0) == 0 && (full_suite() || compile_errors++ < 5)) {
        jobs.push_back({t.id + " wrong/" + w.label, shared, w.code, {verdict_category::compile}});
      }
    }
  }
  if (jobs.empty()) {
    GTEST_SKIP() << "the suite has no cuda tasks yet";
  }
  // The compile stage alone (no GPU needed): one worker per core over all jobs.
  std::atomic<std::size_t> next{0};
  std::vector<std::string> problems(jobs.size());
  auto worker = [&] {
    for (std::size_t i = next++; i < jobs.size(); i = next++) {
      const auto& j = jobs[i];
      auto p = testing::shared_engine().compile(*j.t, "```cuda\n" + j.code + "```\n",
                                                /*with_reference=*/false);
      if (!p) {
        problems[i] = p.err().message;
      } else if (j.expected.empty() && p->final_verdict) {
        problems[i] = "does not compile: " + p->final_verdict->feedback;
      } else if (!j.expected.empty() &&
                 (!p->final_verdict || j.expected.count(p->final_verdict->category) == 0)) {
        problems[i] =
            "expected a compile verdict, got " +
            std::string(p->final_verdict ? to_string(p->final_verdict->category) : "a binary");
      } else if (!j.expected.empty() &&
                 p->final_verdict->feedback.find("solution.cu") == std::string::npos &&
                 p->final_verdict->feedback.find("Linking failed") == std::string::npos) {
        problems[i] =
            "compile feedback does not point into solution.cu: " + p->final_verdict->feedback;
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < std::max(2U, std::thread::hardware_concurrency()); ++i) {
    threads.emplace_back(worker);
  }
  for (auto& t : threads) {
    t.join();
  }
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_TRUE(problems[i].empty()) << jobs[i].name << ": " << problems[i];
  }
  std::printf("%zu cuda suite candidates compiled\n", jobs.size());
}

TEST(SuiteTest, CudaSolutionsPassAndWrongCandidatesFailOnTheGpu) {
  std::string why;
  if (!testing::gpu_present(&why)) {
    std::printf("skipping GPU-side suite run: %s\n", why.c_str());
    GTEST_SKIP() << why;
  }
  std::vector<job> jobs;
  for (const auto& t : suite()) {
    if (t.kind != task_kind::cuda) {
      continue;
    }
    auto shared = std::make_shared<const task>(t);
    jobs.push_back({t.id + " solution", shared, t.solution, {verdict_category::pass}});
    for (const auto& w : t.wrong) {
      jobs.push_back({t.id + " wrong/" + w.label, shared, w.code, expected_for_label(w.label)});
    }
  }
  if (jobs.empty()) {
    GTEST_SKIP() << "the suite has no cuda tasks yet";
  }
  run_jobs(jobs, 1);
}

}  // namespace
}  // namespace leap::sandbox

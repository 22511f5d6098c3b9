// KernelBench judges started ahead of their jobs (engine_config::kernelbench_standby): after each
// run the slot starts the next run's judge and runner, which import torch and wait; the next
// candidate is sent to them. Needs python3 with torch (a CPU build will do).
#include "sandbox/engine.hpp"
#include "tests/sandbox/kernelbench_support.hpp"
#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <map>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace leap::sandbox {
namespace {

task kbs_problem() {
  task t;
  t.id = "kernelbench/level1/1_ScaleAdd";
  t.kind = task_kind::kernelbench;
  t.reference = testing::k_scale_add_problem;
  t.own_kernel = own_kernel_policy::off;  // these candidates use PyTorch's ops
  return t;
}

engine_config kbs_config(bool standby, int depth = 1) {
  engine_config config = testing::test_engine_config();
  config.kernelbench_device = "cpu";
  config.trials = 1;
  config.kernelbench_standby = standby;
  config.kernelbench_standby_depth = depth;
  return config;
}

// Host pids of the standby judges of this test process's engines: their command line, and this
// process among their ancestors (ctest runs other tests' engines beside this one, and every
// KernelBench judge is started with --standby, so theirs must be neither killed nor counted here).
std::vector<pid_t> kbs_waiting_judges() {
  const std::vector<testing::process_entry> all = testing::live_processes();
  std::map<pid_t, pid_t> parent_of;
  for (const auto& p : all) {
    parent_of[p.pid] = p.parent;
  }
  const auto ours = [&](pid_t pid) {
    for (int depth = 0; depth < 64 && pid > 1; ++depth) {
      const auto up = parent_of.find(pid);
      if (up == parent_of.end()) {
        return false;
      }
      pid = up->second;
      if (pid == ::getpid()) {
        return true;
      }
    }
    return false;
  };
  std::vector<pid_t> found;
  for (const auto& p : all) {
    if (p.cmdline.find(std::string_view("judge.py\0--standby\0cpu", 22)) != std::string::npos &&
        ours(p.pid)) {
      found.push_back(p.pid);
    }
  }
  return found;
}

bool kbs_torch(std::string* why) {
  return testing::python_has_module(testing::test_engine_config().python, "torch", why);
}

// The standby judges of this test process once at least `n` are up (10 s at most).
std::vector<pid_t> kbs_judges_up(std::size_t n) {
  std::vector<pid_t> waiting;
  for (int i = 0; i < 200 && waiting.size() < n; ++i) {
    waiting = kbs_waiting_judges();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return waiting;
}

// compile() then run(): what the verifier's pools do, with no judge readied beside the build
// (verify() readies one: KernelBenchStandbyTest.AOneShotVerifyReadiesItsSlotBesideTheBuild).
result<verdict> kbs_compile_and_run(engine& e, const std::string& answer) {
  auto prepared = e.compile(kbs_problem(), answer);
  if (!prepared) {
    return prepared.err();
  }
  return e.run(kbs_problem(), *prepared, -1);
}

// A one-shot verify() starts the run's judge beside the build, with no standby configured: its
// run is fed to that judge. Without the readying the job's judge would start at the run.
TEST(KernelBenchStandbyTest, AOneShotVerifyReadiesItsSlotBesideTheBuild) {
  std::string why;
  if (!kbs_torch(&why)) {
    GTEST_SKIP() << why;
  }
  auto e = engine::create(kbs_config(false));
  ASSERT_TRUE(e.ok()) << e.err().message;
  auto v = (*e)->verify(kbs_problem(), testing::scale_add_ops_candidate("one-shot"));
  ASSERT_TRUE(v.ok()) << v.err().message;
  EXPECT_TRUE(v->passed) << v->feedback << "\n" << v->diagnostics;
  EXPECT_NE(v->diagnostics.find("judge started ahead of its job"), std::string::npos)
      << v->diagnostics;
  // Nothing waits after it: the one judge readied was the run's.
  EXPECT_TRUE(kbs_waiting_judges().empty());
  e->reset();
  EXPECT_TRUE(kbs_waiting_judges().empty());
}

// Two runs ahead: the first run starts two judges beside its own, and a run fed to one of them
// starts one more, so the slot always has two waiting (one would be there at depth 1).
TEST(KernelBenchStandbyTest, TwoRunsAheadKeepTwoJudgesWaiting) {
  std::string why;
  if (!kbs_torch(&why)) {
    GTEST_SKIP() << why;
  }
  auto e = engine::create(kbs_config(true, 2));
  ASSERT_TRUE(e.ok()) << e.err().message;
  auto first = (*e)->verify(kbs_problem(), testing::scale_add_ops_candidate("ahead-1"));
  ASSERT_TRUE(first.ok()) << first.err().message;
  EXPECT_TRUE(first->passed) << first->feedback << "\n" << first->diagnostics;
  EXPECT_GE(kbs_judges_up(2).size(), 2U);

  auto second = (*e)->verify(kbs_problem(), testing::scale_add_ops_candidate("ahead-2"));
  ASSERT_TRUE(second.ok()) << second.err().message;
  EXPECT_TRUE(second->passed) << second->feedback << "\n" << second->diagnostics;
  EXPECT_NE(second->diagnostics.find("judge started ahead of its job"), std::string::npos)
      << second->diagnostics;
  EXPECT_GE(kbs_judges_up(2).size(), 2U);

  e->reset();
  EXPECT_TRUE(kbs_waiting_judges().empty());
}

// The first run starts its judge on demand and, as it starts, the next one. A judge that died
// while it waited (killed from outside) is not fed: that candidate gets a judge started for it.
// Later runs are fed to the judge their predecessor started, and are judged as by a fresh one (a
// wrong answer fails, a right one passes). The engine's end ends the judge still waiting.
TEST(KernelBenchStandbyTest, LaterRunsAreFedToTheJudgeStartedAhead) {
  std::string why;
  if (!kbs_torch(&why)) {
    GTEST_SKIP() << why;
  }
  auto e = engine::create(kbs_config(true));
  ASSERT_TRUE(e.ok()) << e.err().message;
  auto first = kbs_compile_and_run(**e, testing::scale_add_ops_candidate("standby-1"));
  ASSERT_TRUE(first.ok()) << first.err().message;
  EXPECT_TRUE(first->passed) << first->feedback << "\n" << first->diagnostics;
  EXPECT_EQ(first->diagnostics.find("judge started ahead"), std::string::npos)
      << first->diagnostics;

  const std::vector<pid_t> waiting = kbs_judges_up(1);
  ASSERT_FALSE(waiting.empty()) << "no judge was started ahead";
  for (pid_t pid : waiting) {
    ::kill(pid, SIGKILL);
  }
  auto replaced = kbs_compile_and_run(**e, testing::scale_add_ops_candidate("standby-2"));
  ASSERT_TRUE(replaced.ok()) << replaced.err().message;
  EXPECT_TRUE(replaced->passed) << replaced->feedback << "\n" << replaced->diagnostics;
  EXPECT_EQ(replaced->diagnostics.find("judge started ahead of its job"), std::string::npos)
      << replaced->diagnostics;
  EXPECT_NE(replaced->diagnostics.find("ended before it took the job (killed by SIGKILL"),
            std::string::npos)
      << replaced->diagnostics;

  auto wrong = (*e)->verify(kbs_problem(), testing::scale_add_ops_candidate("standby-3", "-"));
  ASSERT_TRUE(wrong.ok()) << wrong.err().message;
  EXPECT_FALSE(wrong->passed);
  EXPECT_EQ(std::string(to_string(wrong->category)), "wrong_answer") << wrong->feedback;
  EXPECT_NE(wrong->diagnostics.find("judge started ahead of its job"), std::string::npos)
      << wrong->diagnostics;
  ASSERT_FALSE(wrong->run_phases_ms.empty()) << wrong->diagnostics;
  EXPECT_EQ(wrong->run_phases_ms.front().first, "job_received");

  auto right = (*e)->verify(kbs_problem(), testing::scale_add_ops_candidate("standby-4"));
  ASSERT_TRUE(right.ok()) << right.err().message;
  EXPECT_TRUE(right->passed) << right->feedback << "\n" << right->diagnostics;
  EXPECT_NE(right->diagnostics.find("judge started ahead of its job"), std::string::npos)
      << right->diagnostics;

  EXPECT_FALSE(kbs_judges_up(1).empty());
  e->reset();
  EXPECT_TRUE(kbs_waiting_judges().empty());
}

}  // namespace
}  // namespace leap::sandbox

// The verifier's profiling pool (sandbox/verifier.hpp, submit with two callbacks): on the CPU with
// python3 and torch, KernelBench candidates judged in the real sandbox while a stand-in ncu holds
// their profiling run until the test lets it go. Their verdicts arrive while it is held (nothing
// waiting for verdicts waits for a profile); a profile that finds the pool's queue full is a note
// at once; a verdict profile_selects does not choose is never profiled; the one-callback submit
// still gives the verdict with its profile.
#include "sandbox/verifier.hpp"
#include "tests/sandbox/kernelbench_support.hpp"
#include "tests/sandbox/profile_stand_in.hpp"
#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>

namespace leap::sandbox {
namespace {

using testing::stand_in_ncu;

bool holds_text(const std::string& text, std::string_view needle) {
  return text.find(needle) != std::string::npos;
}

std::shared_ptr<const task> scale_add() {
  auto t = std::make_shared<task>();
  t->id = "kernelbench/level1/1_ScaleAddPooled";
  t->kind = task_kind::kernelbench;
  t->reference = testing::k_scale_add_problem;
  t->own_kernel = own_kernel_policy::off;
  return t;
}

std::string candidate(const std::string& tag, const std::string& op = "+") {
  return testing::scale_add_ops_candidate(tag, op);
}

verifier_config pooled_config(const std::string& ncu) {
  verifier_config c;
  c.engine = testing::test_engine_config();
  c.engine.kernelbench_device = "cpu";
  c.engine.trials = 2;
  c.engine.kernelbench_pch = false;
  c.engine.profile = profile_mode::passing;
  c.engine.ncu = ncu;
  // Torch processes on a shared machine, and a profiling run the test holds: a bound that only
  // ends a hung test, not a measurement.
  c.engine.profile_limits.wall = std::chrono::seconds(600);
  c.engine.profile_limits.cpu_seconds = 600;
  c.compile_workers = 1;
  c.run_slots = 1;
  c.profile_workers = 1;
  c.profile_queue_capacity = 1;
  return c;
}

// A verdict the callback delivers, with how many times it ran.
struct delivery {
  std::promise<result<verdict>> promise;
  std::future<result<verdict>> future = promise.get_future();
  std::atomic<int> calls{0};
  verifier::callback callback() {
    return [this](result<verdict> v) {
      if (calls.fetch_add(1) == 0) {
        promise.set_value(std::move(v));
      }
    };
  }
};

constexpr auto k_patience = std::chrono::minutes(5);

// NOLINTNEXTLINE(readability-identifier-naming): gtest names the test suite after the fixture.
class VerifierProfilePoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!testing::python_has_module(testing::test_engine_config().python, "torch", &why)) {
      GTEST_SKIP() << why;
    }
  }
};

TEST_F(VerifierProfilePoolTest, VerdictsArriveWhileTheirProfilesAreHeldAndAFullQueueIsANote) {
  // The stand-in ncu waits for the test's release file, then writes the H200 capture.
  stand_in_ncu ncu(
      "while [ ! -e \"$here/release\" ]; do sleep 0.1; done\n"
      "cat \"$here/capture.csv\" > \"$log\"\n");
  if (!ncu.why_not().empty()) {
    GTEST_SKIP() << "no stand-in ncu: " << ncu.why_not();
  }
  const auto release = std::filesystem::path(ncu.path()).parent_path() / "release";
  // Declared before the pool, which may still call them while it stops.
  delivery judged1, profiled1, judged2, profiled2, judged3, profiled3, judged4, profiled4;
  auto created = verifier::create(pooled_config(ncu.path()));
  ASSERT_TRUE(created.ok()) << created.err().message;
  verifier& pool = **created;
  // Let ncu go before the pool stops, whatever the test's end: a failed assertion must not leave
  // the pool waiting for a profile that never ends.
  struct release_on_exit {
    std::filesystem::path file;
    ~release_on_exit() { std::ofstream(file) << "go\n"; }
  } guard{release};
  const auto t = scale_add();

  // The first: judged, then its profile held by ncu in the pool's one worker.
  pool.submit(t, candidate("first"), judged1.callback(), profiled1.callback());
  ASSERT_EQ(judged1.future.wait_for(k_patience), std::future_status::ready);
  auto v1 = judged1.future.get();
  ASSERT_TRUE(v1.ok()) << v1.err().message;
  ASSERT_TRUE(v1->passed) << v1->feedback << "\n" << v1->diagnostics;
  EXPECT_FALSE(v1->profile.has_value());
  EXPECT_FALSE(holds_text(v1->feedback, "Profile of")) << v1->feedback;
  ASSERT_TRUE(testing::wait_until([&] { return pool.load().profiling == 1; }, k_patience));

  // The second waits in the queue (capacity 1); the third finds it full: a note, at once.
  pool.submit(t, candidate("second"), judged2.callback(), profiled2.callback());
  ASSERT_EQ(judged2.future.wait_for(k_patience), std::future_status::ready);
  ASSERT_TRUE(judged2.future.get()->passed);
  // The verdict is delivered before its profile is queued: wait for the queue, not the verdict.
  ASSERT_TRUE(testing::wait_until([&] { return pool.load().profile_queued == 1; }, k_patience));
  pool.submit(t, candidate("third"), judged3.callback(), profiled3.callback());
  ASSERT_EQ(judged3.future.wait_for(k_patience), std::future_status::ready);
  ASSERT_TRUE(judged3.future.get()->passed);
  ASSERT_EQ(profiled3.future.wait_for(k_patience), std::future_status::ready);
  auto p3 = profiled3.future.get();
  ASSERT_TRUE(p3.ok()) << p3.err().message;
  ASSERT_TRUE(p3->profile.has_value());
  EXPECT_TRUE(p3->profile->kernels.empty());
  EXPECT_EQ(p3->profile->note, "not profiled: the profiling queue was full (1 waiting)");
  EXPECT_TRUE(p3->passed);

  // A failing verdict is not one `passing` profiles: its second callback never runs.
  pool.submit(t, candidate("fourth", "-"), judged4.callback(), profiled4.callback());
  ASSERT_EQ(judged4.future.wait_for(k_patience), std::future_status::ready);
  auto v4 = judged4.future.get();
  ASSERT_TRUE(v4.ok()) << v4.err().message;
  EXPECT_FALSE(v4->passed);

  // Every verdict is out and ncu is still held: the first two profiles have not arrived.
  EXPECT_EQ(profiled1.future.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  EXPECT_EQ(profiled2.future.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  std::ofstream(release) << "go\n";
  for (delivery* d : {&profiled1, &profiled2}) {
    ASSERT_EQ(d->future.wait_for(k_patience), std::future_status::ready);
    auto p = d->future.get();
    ASSERT_TRUE(p.ok()) << p.err().message;
    ASSERT_TRUE(p->profile.has_value());
    EXPECT_EQ(p->profile->note, "") << p->profile->note;
    EXPECT_FALSE(p->profile->kernels.empty());
    // The verdict's own text first, then the diagnosis.
    EXPECT_EQ(p->feedback.rfind(v1->feedback + "\n\nProfile of `", 0), 0U) << p->feedback;
    EXPECT_TRUE(p->passed);
  }
  created->reset();  // finishes every accepted job, profiles included
  EXPECT_EQ(profiled4.calls.load(), 0);
  EXPECT_EQ(profiled1.calls.load(), 1);
  EXPECT_EQ(profiled3.calls.load(), 1);
}

TEST_F(VerifierProfilePoolTest, TheOneCallbackSubmitGivesTheVerdictWithItsProfile) {
  stand_in_ncu ncu("cat \"$here/capture.csv\" > \"$log\"\n");
  if (!ncu.why_not().empty()) {
    GTEST_SKIP() << "no stand-in ncu: " << ncu.why_not();
  }
  auto created = verifier::create(pooled_config(ncu.path()));
  ASSERT_TRUE(created.ok()) << created.err().message;
  auto future = (*created)->submit(scale_add(), candidate("one callback"));
  ASSERT_EQ(future.wait_for(k_patience), std::future_status::ready);
  auto v = future.get();
  ASSERT_TRUE(v.ok()) << v.err().message;
  ASSERT_TRUE(v->passed) << v->feedback << "\n" << v->diagnostics;
  ASSERT_TRUE(v->profile.has_value());
  EXPECT_FALSE(v->profile->kernels.empty()) << v->profile->note;
  EXPECT_TRUE(holds_text(v->feedback, "\n\nProfile of `")) << v->feedback;
  EXPECT_EQ((*created)->load().profiling, 0U);
}

}  // namespace
}  // namespace leap::sandbox

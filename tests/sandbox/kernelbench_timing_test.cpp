// KernelBench baselines kept in the compile cache (issue 31): other engines on the same cache
// compare against the first one's measurement instead of timing the reference again; a damaged
// entry is measured again; the timing repetitions are part of the key. CPU runs with python3's
// torch (Debian's python3-torch), skipped with the reason when it is missing.
#include "sandbox/engine.hpp"
#include "tests/sandbox/kernelbench_support.hpp"
#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

namespace leap::sandbox {
namespace {

using testing::fenced;

task kbt_scale_add_task() {
  task t;
  t.id = "kernelbench/level1/1_ScaleAdd";
  t.kind = task_kind::kernelbench;
  t.reference = testing::k_scale_add_problem;
  t.own_kernel = own_kernel_policy::off;
  return t;
}

const std::string kbt_candidate =
    "import torch\nclass ModelNew(torch.nn.Module):\n    def __init__(self, s):\n"
    "        super().__init__()\n        self.s = s\n    def forward(self, a, b):\n"
    "        return a * self.s + b\n";

// Flips one byte inside every cached baseline's record; returns how many entries it damaged.
int kbt_damage_baselines(const std::filesystem::path& folder) {
  return testing::damage_cache_entries(
      folder, "LKBBASE1 ",
      // Past the magic, the digest and the newline: inside the record's JSON.
      [](const std::string&, std::size_t at) -> std::optional<std::size_t> {
        return at + 9 + 64 + 1 + 3;
      },
      [](char c) { return static_cast<char>(c ^ 0x5a); });
}

TEST(KernelBenchBaselineCacheTest, KeptOnDiskPerRepetitionsAndMeasuredAgainWhenDamaged) {
  std::string why;
  if (!testing::python_has_module(testing::test_engine_config().python, "torch", &why)) {
    GTEST_SKIP() << why;
  }
  const testing::temp_folder scratch("leap-kbbase-");
  ASSERT_FALSE(scratch.path().empty());
  const std::string& folder = scratch.path();
  // The CPU: no clocks to read, so no measurement is throttled (which would not be kept).
  engine_config config = testing::test_engine_config();
  config.kernelbench_device = "cpu";
  config.cache_dir = folder;
  config.trials = 1;
  config.timing_reps = 5;

  auto first = engine::create(config);
  ASSERT_TRUE(first.ok()) << first.err().message;
  auto measured = (*first)->verify(kbt_scale_add_task(), fenced("python", kbt_candidate));
  ASSERT_TRUE(measured.ok()) << measured.err().message;
  EXPECT_TRUE(measured->passed) << measured->feedback;
  ASSERT_TRUE(measured->reference_time.has_value()) << measured->feedback;
  // Eager, and the compiled baseline (a time, or the note that this torch has none).
  EXPECT_EQ((*first)->kernelbench_baseline_runs(), 2u);

  // Another engine on the same cache (another process, node or a resumed run): both baselines
  // are read back, none timed again, and its verdict compares against the same measurement.
  auto second = engine::create(config);
  ASSERT_TRUE(second.ok()) << second.err().message;
  auto reused = (*second)->verify(kbt_scale_add_task(), fenced("python", kbt_candidate));
  ASSERT_TRUE(reused.ok()) << reused.err().message;
  EXPECT_TRUE(reused->passed) << reused->feedback;
  EXPECT_EQ((*second)->kernelbench_baseline_runs(), 0u);
  EXPECT_EQ((*second)->kernelbench_reference_runs(), 0u);
  ASSERT_TRUE(reused->reference_time.has_value()) << reused->feedback;
  EXPECT_EQ(reused->reference_time->median_ms, measured->reference_time->median_ms);
  EXPECT_EQ(reused->reference_time->q1_ms, measured->reference_time->q1_ms);
  EXPECT_EQ(reused->reference_time->q3_ms, measured->reference_time->q3_ms);
  EXPECT_EQ(reused->reference_time->reps, 5);
  EXPECT_EQ(reused->timing_note, measured->timing_note);
  EXPECT_EQ(reused->compiled_reference_time.has_value(),
            measured->compiled_reference_time.has_value());
  if (reused->compiled_reference_time && measured->compiled_reference_time) {
    EXPECT_EQ(reused->compiled_reference_time->median_ms,
              measured->compiled_reference_time->median_ms);
  }

  // Other timing repetitions: another protocol, another entry (eager only here, to keep it short).
  config.kernelbench_compiled_baseline = false;
  config.timing_reps = 6;
  auto more_reps = engine::create(config);
  ASSERT_TRUE(more_reps.ok()) << more_reps.err().message;
  auto six = (*more_reps)->verify(kbt_scale_add_task(), fenced("python", kbt_candidate));
  ASSERT_TRUE(six.ok()) << six.err().message;
  EXPECT_TRUE(six->passed) << six->feedback;
  EXPECT_EQ((*more_reps)->kernelbench_baseline_runs(), 1u);
  ASSERT_TRUE(six->reference_time.has_value()) << six->feedback;
  EXPECT_EQ(six->reference_time->reps, 6);

  // A damaged entry is not trusted: the reference is timed again and the candidate still passes.
  EXPECT_EQ(kbt_damage_baselines(folder), 3) << "eager and compiled at 5 repetitions, eager at 6";
  config.timing_reps = 5;
  auto later = engine::create(config);
  ASSERT_TRUE(later.ok()) << later.err().message;
  auto again = (*later)->verify(kbt_scale_add_task(), fenced("python", kbt_candidate));
  ASSERT_TRUE(again.ok()) << again.err().message;
  EXPECT_TRUE(again->passed) << again->feedback;
  EXPECT_EQ((*later)->kernelbench_baseline_runs(), 1u);
  ASSERT_TRUE(again->reference_time.has_value()) << again->feedback;
  EXPECT_EQ(again->reference_time->reps, 5);
}

}  // namespace
}  // namespace leap::sandbox

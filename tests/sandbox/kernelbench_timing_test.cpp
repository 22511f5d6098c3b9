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

// A candidate that notices inputs it has seen before and then sleeps for a second: a timed call
// on a timing set it met earlier is slow, one on inputs never seen is fast.
const std::string kbt_slow_on_repeats =
    "import time\nimport torch\nclass ModelNew(torch.nn.Module):\n"
    "    def __init__(self, s):\n        super().__init__()\n        self.s = s\n"
    "        self.seen = set()\n"
    "    def forward(self, a, b):\n"
    "        key = (float(a.sum()), float(b.sum()), float(a[0, 0]), float(b[-1, -1]))\n"
    "        if key in self.seen:\n            time.sleep(1.0)\n"
    "        self.seen.add(key)\n        return a * self.s + b\n";

// An engine on the CPU with a scratch cache of its own: 3 warm-up and 9 timed calls, of which the
// judge checks 8, each on a timing set of its own (the reference draws 8), and gives the other 4
// inputs of their own.
// NOLINTNEXTLINE(readability-identifier-naming): gtest names the test suite after the fixture.
class KernelBenchFreshInputsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!testing::python_has_module(testing::test_engine_config().python, "torch", &why)) {
      GTEST_SKIP() << why;
    }
    ASSERT_FALSE(scratch_.path().empty());
  }

  // The scale-add problem named `id`, with its text `from` replaced by `to`.
  static task scale_add_with(const std::string& id, const std::string& from,
                             const std::string& to) {
    task t = kbt_scale_add_task();
    t.id = id;
    t.reference = std::string(testing::k_scale_add_problem);
    t.reference.replace(t.reference.find(from), from.size(), to);
    return t;
  }

  result<verdict> verify(const task& t, const std::string& candidate) {
    engine_config config = testing::test_engine_config();
    config.kernelbench_device = "cpu";
    config.trials = 1;
    config.timing_reps = 9;
    config.kernelbench_compiled_baseline = false;
    config.cache_dir = scratch_.path();
    auto e = engine::create(config);
    if (!e) {
      return e.err();
    }
    return (*e)->verify(t, fenced("python", candidate));
  }

 private:
  testing::temp_folder scratch_{"leap-kbfresh-"};
};

// A cache keyed by the inputs' content: no timed call meets inputs an earlier call had. The
// unchecked ones get inputs drawn in the judge for that call, and each checked one a timing set of
// its own. Before the fresh inputs, every timed call took one of four timing sets (at least 8 of
// these 12 calls met a set again: the median was a second's sleep); before a set per check, the
// fifth check met a set again (at least one of the 9 repetitions slept: a first repeat tells a
// candidate that every new input after it is unchecked).
TEST_F(KernelBenchFreshInputsTest, NoTimedCallMeetsInputsSeenBefore) {
  auto v = verify(kbt_scale_add_task(), kbt_slow_on_repeats);
  ASSERT_TRUE(v.ok()) << v.err().message;
  EXPECT_TRUE(v->passed) << v->feedback;
  ASSERT_TRUE(v->candidate_time.has_value()) << v->feedback;
  EXPECT_EQ(v->candidate_time->reps, 9);
  // None sleeps: a call that met inputs seen before takes at least the second it sleeps, on any
  // machine; the slowest of these is a 32x16 add, however loaded the machine.
  EXPECT_LT(v->candidate_time->max_ms, 1000.0) << "a timed call met inputs seen before";
  EXPECT_EQ(v->timing_note.find("reused a timing set"), std::string::npos) << v->timing_note;
}

// A candidate that answers wrong when the time since its previous call returned is long: it takes
// the judge's draw of fresh inputs (here get_inputs() sleeps 0.3 s) as the mark of an unchecked
// call. Every timed call's inputs are drawn, a checked call's dropped, so every timed call looks
// unchecked, the checked ones are answered wrong and the verdict fails on any machine (the sleep
// is a lower bound of each gap). When only the unchecked calls drew, the gap said which calls were
// checked: this candidate passed, its unchecked calls answered with zeros.
TEST_F(KernelBenchFreshInputsTest, TheTimeBetweenCallsDoesNotSayWhichAreChecked) {
  const task t = scale_add_with("kernelbench/level1/1_ScaleAddSlowDraw", "def get_inputs():\n",
                                "def get_inputs():\n    __import__('time').sleep(0.3)\n");
  const std::string by_gap =
      "import time\nimport torch\nclass ModelNew(torch.nn.Module):\n"
      "    def __init__(self, s):\n        super().__init__()\n        self.s = s\n"
      "        self.last = None\n"
      "    def forward(self, a, b):\n"
      "        drawn = self.last is not None and time.monotonic() - self.last >= 0.25\n"
      "        out = torch.zeros_like(a) if drawn else a * self.s + b\n"
      "        self.last = time.monotonic()\n        return out\n";
  auto v = verify(t, by_gap);
  ASSERT_TRUE(v.ok()) << v.err().message;
  EXPECT_FALSE(v->passed) << "a candidate that cheats when the judge drew inputs passed";
  EXPECT_EQ(v->category, verdict_category::wrong_answer) << v->feedback;
  EXPECT_NE(v->feedback.find("a timed repetition after the trials"), std::string::npos)
      << v->feedback;
}

// A problem whose get_inputs() draws its shape: the judge's fresh inputs do not fit the timing
// set's buffers, so those calls take the set's inputs, and the verdict says how many and why.
TEST_F(KernelBenchFreshInputsTest, InputsOfAnotherShapeFallBackToTheTimingSetsAndSaySo) {
  const task t = scale_add_with("kernelbench/level1/1_ScaleAddDrawnShape",
                                "[torch.randn(32, 16), torch.randn(32, 16)]",
                                "[torch.randn(n, 16), torch.randn(n, 16)] if (n := "
                                "int(torch.randint(1, 1 << 10, (1,)))) else []");
  auto v = verify(t, kbt_candidate);
  ASSERT_TRUE(v.ok()) << v.err().message;
  EXPECT_TRUE(v->passed) << v->feedback;
  EXPECT_NE(
      v->timing_note.find("of 4 unchecked timed calls reused a timing set's inputs (get_inputs "
                          "gives other shapes"),
      std::string::npos)
      << v->timing_note;
}

}  // namespace
}  // namespace leap::sandbox

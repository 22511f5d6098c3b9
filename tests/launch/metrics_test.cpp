// The live metrics writer on a real small filesystem (a tmpfs in a private mount namespace; the
// test skips without root): a full disk is reported once to the run, which ends (issue 29: a full
// disk under the run folder ends `leap run` whatever write meets it first); other failures only
// warn.
#include "tools/launch/metrics.hpp"

#include "tests/storage/small_disk.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace leap::launch {
namespace {

template <class Condition>
bool wait_until(Condition condition) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

std::filesystem::path scratch_root(const std::string& name) {
  auto root = std::filesystem::temp_directory_path() /
              ("leap-metrics-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  return root;
}

TEST(RunMetrics, AFullDiskIsReportedOnceToTheRun) {
  const auto root = scratch_root("full");
  {
    test::small_disk disk(root, 1U << 20U);
    if (!disk.skip_reason().empty()) {
      GTEST_SKIP() << disk.skip_reason();
    }
    const auto run_dir = disk / "run";
    std::filesystem::create_directories(run_dir);
    std::mutex mutex;
    std::vector<std::string> reported;
    run_metrics_options options;
    options.interval_s = 0;  // only when asked
    options.on_full_disk = [&](const error& e) {
      std::lock_guard lock(mutex);
      reported.push_back(e.message);
    };
    run_metrics metrics(run_dir, options, nullptr, nullptr);
    metrics.request_write();
    ASSERT_TRUE(wait_until([&] { return metrics.writes() >= 1; }));
    EXPECT_TRUE(metrics.last_status().ok()) << metrics.last_status().err().message;

    disk.fill();
    for (std::uint64_t want = 2; want <= 4; ++want) {
      metrics.request_write();
      ASSERT_TRUE(wait_until([&] { return metrics.writes() >= want; }));
    }
    ASSERT_FALSE(metrics.last_status().ok());
    std::lock_guard lock(mutex);
    ASSERT_EQ(reported.size(), 1U);
    EXPECT_NE(reported[0].find((run_dir / "metrics.prom").string()), std::string::npos)
        << reported[0];
    EXPECT_NE(reported[0].find("No space left on device"), std::string::npos) << reported[0];
    EXPECT_NE(reported[0].find("free of 1 MiB on its filesystem"), std::string::npos)
        << reported[0];
  }
  std::filesystem::remove_all(root);
}

// A failure that is not a full disk (the folder is gone) is warned about, not reported: a run
// does not end for it.
TEST(RunMetrics, AnotherFailureIsNotReportedAsAFullDisk) {
  const auto root = scratch_root("gone");
  std::atomic<int> reported{0};
  run_metrics_options options;
  options.interval_s = 0;
  options.on_full_disk = [&](const error&) { ++reported; };
  run_metrics metrics(root / "missing", options, nullptr, nullptr);
  metrics.request_write();
  ASSERT_TRUE(wait_until([&] { return metrics.writes() >= 1; }));
  EXPECT_FALSE(metrics.last_status().ok());
  EXPECT_EQ(reported.load(), 0);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace leap::launch

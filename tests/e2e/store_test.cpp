// The run folder's store through the real `leap` binary: a damaged store (CURRENT deleted) is
// refused by every `leap run` and recovered into a copy by `leap repair-store`; a store that lost
// its write-ahead log is refused until the loss is accepted, and replay warns; a finished run
// says so on a rerun; exports leave no temporary files behind, killed or failed, and replay says
// why it cannot write its CSV files; a second SIGTERM
// ends `leap run` at once, with status 130, even while a verifier run is in flight.
#include "e2e_support.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <signal.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
using leap::e2e::leap_process;
using leap::e2e::leap_shell;
using leap::e2e::quoted;
using leap::e2e::run_leap;

class store_dir : public leap::e2e::scratch_dir {
 public:
  store_dir() : scratch_dir("store", {"python/two_sum", "python/flatten"}) {}

  [[nodiscard]] fs::path run_dir() const { return root_ / "run"; }
  [[nodiscard]] fs::path store() const { return root_ / "run" / "trajectories"; }

  std::string write_config(const std::string& extra_verifier = "",
                           const std::string& suite = "suite") const {
    std::ostringstream yaml;
    yaml << "experiment:\n  name: e2e\n  seed: 5\n  run_dir: " << run_dir().string()
         << "\n  steps: 1\n"
         << "data:\n  train: " << (root_ / suite).string() << "\n  batch_size: 1\n"
         << "rollout:\n  group_size: 2\n  max_turns: 2\n  validation:\n    every: 0\n"
         << "learner:\n  kind: record\n"
         << "policy:\n  flavour: embedded\n  max_in_flight: 4\n"
         << "verifier:\n  compile_workers: 1\n  gpu_slots: 0\n"
         << extra_verifier;
    const fs::path path = root_ / "config.yaml";
    std::ofstream(path) << yaml.str();
    return path.string();
  }
};

// Every file of a folder with its bytes.
std::map<std::string, std::string> contents(const fs::path& folder) {
  std::map<std::string, std::string> out;
  for (const auto& entry : fs::directory_iterator(folder)) {
    out[entry.path().filename().string()] = leap::e2e::read_file(entry.path());
  }
  return out;
}

std::vector<std::string> names_starting(const fs::path& folder, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(folder)) {
    const auto name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) {
      out.push_back(name);
    }
  }
  return out;
}

// The id of a process that has exited (and been reaped): what a killed writer leaves behind.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::_exit(0);
  }
  ::waitpid(pid, nullptr, 0);
  return pid;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(LeapStoreE2E, ADamagedStoreIsRefusedKeptAndRecoveredIntoACopy) {
  store_dir dir;
  const auto config = dir.write_config();
  const auto first = run_leap({"run", config}, std::chrono::seconds(300));
  ASSERT_EQ(first.exit_code, 0) << first.output;

  // A finished run says so on a rerun instead of "resuming ... at step 2/1".
  const auto again = run_leap({"run", config}, std::chrono::seconds(120));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(has(again.output, "run 'e2e': all 1 steps are stored already")) << again.output;
  EXPECT_FALSE(has(again.output, "at step 2/1")) << again.output;

  fs::remove(dir.store() / "CURRENT");
  const auto before = contents(dir.store());
  for (int attempt = 0; attempt < 2; ++attempt) {
    const auto refused = run_leap({"run", config}, std::chrono::seconds(120));
    EXPECT_EQ(refused.exit_code, 1) << refused.output;
    EXPECT_TRUE(has(refused.output, "no CURRENT file")) << refused.output;
    EXPECT_TRUE(has(refused.output, "leap repair-store " + dir.store().string() + " COPY"))
        << refused.output;
  }
  // The old code wrote a new MANIFEST and CURRENT here, and the next run deleted the old files.
  EXPECT_EQ(contents(dir.store()), before);

  const fs::path copy = dir.root() / "repaired";
  const auto repaired =
      run_leap({"repair-store", dir.store().string(), copy.string()}, std::chrono::seconds(120));
  ASSERT_EQ(repaired.exit_code, 0) << repaired.output;
  EXPECT_TRUE(has(repaired.output, "1 runs, 1 step records, 1 groups")) << repaired.output;
  EXPECT_EQ(contents(dir.store()), before);
  fs::rename(dir.store(), dir.root() / "damaged");
  fs::rename(copy, dir.store());
  const auto resumed = run_leap({"run", config}, std::chrono::seconds(120));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(has(resumed.output, "all 1 steps are stored already")) << resumed.output;
}

TEST(LeapStoreE2E, LostAcknowledgedWritesAreRefusedUntilAcceptedAndReplayWarns) {
  store_dir dir;
  const auto config = dir.write_config();
  ASSERT_EQ(run_leap({"run", config}, std::chrono::seconds(300)).exit_code, 0);
  // A rerun's open flushes the log into table files; its own writes (the run record, twice) are
  // then only in the new write-ahead log.
  ASSERT_EQ(run_leap({"run", config}, std::chrono::seconds(120)).exit_code, 0);
  int logs = 0;
  for (const auto& entry : fs::directory_iterator(dir.store())) {
    if (entry.path().extension() == ".log") {
      fs::remove(entry.path());
      ++logs;
    }
  }
  ASSERT_GT(logs, 0);

  const auto replay = leap_shell("replay " + quoted(dir.run_dir().string()), 120);
  EXPECT_EQ(replay.exit_code, 0) << replay.text;
  EXPECT_TRUE(has(replay.text, "WARNING")) << replay.text;
  EXPECT_TRUE(has(replay.text, "it lost 2 record writes it had acknowledged")) << replay.text;
  EXPECT_TRUE(has(replay.text, "run 'e2e' (")) << replay.text;

  const auto refused = run_leap({"run", config}, std::chrono::seconds(120));
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_TRUE(has(refused.output, "record writes it had acknowledged")) << refused.output;
  EXPECT_TRUE(has(refused.output, "--accept-lost-writes")) << refused.output;

  const auto accepted =
      run_leap({"run", config, "--accept-lost-writes"}, std::chrono::seconds(300));
  EXPECT_EQ(accepted.exit_code, 0) << accepted.output;
  EXPECT_TRUE(has(accepted.output, "going on with what it holds")) << accepted.output;
  // Reported once: the store as it was accepted is the new mark.
  const auto after = run_leap({"run", config}, std::chrono::seconds(120));
  EXPECT_EQ(after.exit_code, 0) << after.output;
}

TEST(LeapStoreE2E, ExportAndReplayFailCleanlyAndSayWhy) {
  store_dir dir;
  const auto config = dir.write_config();
  ASSERT_EQ(run_leap({"run", config}, std::chrono::seconds(300)).exit_code, 0);
  const fs::path out_dir = dir.root() / "out";
  fs::create_directories(out_dir);

  // A killed export's temporary (its process is gone) is removed by the next export.
  const fs::path out = out_dir / "groups.jsonl";
  // (common/durable_file's temporaries: TARGET.tmp.PID.N.)
  const auto stale = out.string() + ".tmp." + std::to_string(dead_pid()) + ".0";
  std::ofstream(stale) << "half an export";
  const auto exported = leap_shell("export " + quoted(dir.run_dir().string()) +
                                   " --format jsonl --out " + quoted(out.string()));
  ASSERT_EQ(exported.exit_code, 0) << exported.text;
  EXPECT_TRUE(fs::exists(out));
  EXPECT_EQ(names_starting(out_dir, "groups.jsonl.tmp."), std::vector<std::string>{});

  // A full disk (a file size limit here; SIGXFSZ ignored so that the write fails with EFBIG
  // instead of killing the process): the export fails, naming why, and leaves nothing behind.
  const fs::path full = out_dir / "full.jsonl";
  const auto failed = leap::e2e::shell(
      "bash -c " +
          quoted("trap \"\" XFSZ; ulimit -f 1; exec " + std::string(LEAP_BINARY) + " export " +
                 dir.run_dir().string() + " --format jsonl --out " + full.string()),
      120);
  EXPECT_EQ(failed.exit_code, 1) << failed.text;
  EXPECT_TRUE(has(failed.text, "File too large")) << failed.text;
  EXPECT_FALSE(fs::exists(full));
  EXPECT_EQ(names_starting(out_dir, "full.jsonl"), std::vector<std::string>{});

  // `leap replay` of a run folder it may not write to: the tables, then why the CSV files were
  // not written and how to write them elsewhere. As root the check runs as nobody (the folders
  // are root's 0755); otherwise the run folder is made read-only.
  const bool root = ::geteuid() == 0;
  const std::string as_reader = root ? "setpriv --reuid=65534 --regid=65534 --clear-groups " : "";
  if (!root) {
    fs::permissions(dir.run_dir(), fs::perms::owner_write, fs::perm_options::remove);
  }
  const auto replay = leap::e2e::shell(
      as_reader + quoted(LEAP_BINARY) + " replay " + quoted(dir.run_dir().string()), 120);
  EXPECT_EQ(replay.exit_code, 1) << replay.text;
  EXPECT_TRUE(has(replay.text, "run 'e2e' (finished)")) << replay.text;
  EXPECT_TRUE(has(replay.text, "Permission denied")) << replay.text;
  EXPECT_TRUE(has(replay.text, "--out DIR writes the CSV files elsewhere")) << replay.text;
  const fs::path csv = dir.root() / "csv";
  fs::create_directories(csv);
  fs::permissions(csv, fs::perms::all);
  const auto elsewhere =
      leap::e2e::shell(as_reader + quoted(LEAP_BINARY) + " replay " +
                           quoted(dir.run_dir().string()) + " --out " + quoted(csv.string()),
                       120);
  EXPECT_EQ(elsewhere.exit_code, 0) << elsewhere.text;
  EXPECT_TRUE(fs::exists(csv / "steps.csv"));
  if (!root) {
    fs::permissions(dir.run_dir(), fs::perms::owner_write, fs::perm_options::add);
  }
}

TEST(LeapStoreE2E, ASecondSigtermExitsAtOnceWhileAVerifierRunIsInFlight) {
  store_dir dir;
  // One task whose every candidate runs for 300 s (the run limit is longer): a run in flight that
  // the verifier's teardown would wait for.
  const fs::path task = dir.root() / "slow" / "python" / "slow";
  fs::create_directories(task);
  std::ofstream(task / "task.json")
      << R"({"id": "python/slow", "kind": "python", "difficulty": 1, "prompt": "Write f()."})";
  std::ofstream(task / "solution.py")
      << "import time\ntime.sleep(300)\n\n\ndef f():\n    return 1\n";
  std::ofstream(task / "tests.py")
      << "from solution import f\n\n\ndef test_f():\n    assert f() == 1\n";
  // The scripted policy answers with the solution or a known wrong answer: both sleep.
  fs::create_directories(task / "wrong");
  std::ofstream(task / "wrong" / "off_by_one.py")
      << "import time\ntime.sleep(300)\n\n\ndef f():\n    return 2\n";
  const auto config = dir.write_config("  run_timeout_s: 600\n", "slow");

  leap_process run({"run", config, "--metrics-interval", "0.2"});
  // Wait until the verifier runs a candidate (the live metrics say so).
  const auto metrics = dir.run_dir() / "metrics.prom";
  const std::regex busy(R"(leap_workers_busy\{stage="run"\} [1-9])");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  bool running = false;
  while (!running && std::chrono::steady_clock::now() < deadline) {
    running = std::regex_search(leap::e2e::read_file(metrics), busy);
    if (!running) {
      run.drain(200);
    }
  }
  ASSERT_TRUE(running) << run.output() << leap::e2e::read_file(metrics);

  run.signal(SIGTERM);
  // The run has ended and the command waits for the verifier's work in flight.
  ASSERT_TRUE(run.read_until(
      [](const std::string& out) {
        return out.find("waiting for the compiles and runs in flight") != std::string::npos;
      },
      std::chrono::seconds(120)))
      << run.output();
  const auto second = std::chrono::steady_clock::now();
  run.signal(SIGTERM);
  // Gone long before the 300 s run could end.
  const auto code = run.wait(std::chrono::seconds(60));
  ASSERT_TRUE(code.has_value()) << "still running after the second SIGTERM:\n" << run.output();
  EXPECT_LT(std::chrono::steady_clock::now() - second, std::chrono::seconds(60));
  // 130 (interrupted, as the README says), not 128 + SIGTERM.
  EXPECT_EQ(*code, 130) << run.output();
  EXPECT_TRUE(has(run.output(), "SIGTERM again: exiting now")) << run.output();
}

}  // namespace

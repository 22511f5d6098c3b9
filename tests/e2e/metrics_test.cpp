// `leap run`'s live metrics end to end: a real short run (embedded scripted policy, real sandbox,
// real RocksDB) leaves RUN_DIR/metrics.prom and metrics.json whose numbers add up against the
// store (exported with `leap export`): the compile histogram counts every verified turn, the token
// counter every stored output token, the turn and group counters the stored turns and groups.
// `leap replay` prints the step records' telemetry table. Every wait is bounded.
#include "e2e_support.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <poll.h>
#include <regex>
#include <signal.h>
#include <sstream>
#include <string>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

// A child `leap` process whose output goes to a file (no pipe to fill up).
class leap_child {
 public:
  leap_child(const std::vector<std::string>& args, const fs::path& log) : log_(log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<std::string> copy = args;
      std::string binary = LEAP_BINARY;
      std::vector<char*> argv{binary.data()};
      for (auto& a : copy) {
        argv.push_back(a.data());
      }
      argv.push_back(nullptr);
      ::execv(binary.c_str(), argv.data());
      ::_exit(127);
    }
  }
  ~leap_child() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  leap_child(const leap_child&) = delete;
  leap_child& operator=(const leap_child&) = delete;

  // The exit code, or nullopt when the deadline passed (the destructor then kills the child).
  // Awaits the exit itself: a pidfd turns readable when the child ends.
  std::optional<int> wait(std::chrono::seconds timeout) {
    if (exited_) {
      return code_;
    }
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    if (pidfd < 0) {
      ADD_FAILURE() << "pidfd_open: " << std::strerror(errno);
      return std::nullopt;
    }
    const auto deadline = clock_type::now() + timeout;
    bool ended = false;
    while (!ended) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - clock_type::now()).count();
      if (left <= 0) {
        break;
      }
      pollfd p{pidfd, POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(left));
      if (ready > 0) {
        ended = true;
      } else if (ready < 0 && errno != EINTR) {
        ADD_FAILURE() << "poll: " << std::strerror(errno);
        break;
      }
    }
    ::close(pidfd);
    if (!ended) {
      return std::nullopt;
    }
    int status = 0;
    ::waitpid(pid_, &status, 0);
    exited_ = true;
    code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return code_;
  }
  [[nodiscard]] std::string output() const {
    std::ifstream in(log_);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

 private:
  fs::path log_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int code_ = -1;
};

// Sample lines of a Prometheus text file: "name{labels}" -> value.
std::map<std::string, double> parse_prom(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') {
      continue;
    }
    const auto space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

class metrics_e2e : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("leap-e2e-metrics-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    leap::e2e::copy_suite_tasks(
        root_, {"cpp/axpby", "cpp/prefix_sum_int", "python/flatten", "python/two_sum"});
    std::ofstream(root_ / "config.yaml")
        << "experiment:\n  name: metrics\n  seed: 3\n  run_dir: " << (root_ / "run").string()
        << "\n  steps: 2\n"
        << "data:\n  train: " << (root_ / "suite").string()
        << "\n  validation_fraction: 0.25\n  batch_size: 2\n"
        << "rollout:\n  group_size: 4\n  max_turns: 2\n  validation:\n    every: 1\n    n: 2\n"
        << "gate:\n  policy: full\n"
        << "learner:\n  kind: record\n"
        << "policy:\n  flavour: embedded\n  max_in_flight: 4\n"
        << "verifier:\n  compile_workers: 2\n  gpu_slots: 0\n";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  fs::path root_;
};

TEST_F(metrics_e2e, MetricsFilesAddUpAgainstTheStore) {
  const fs::path run_dir = root_ / "run";
  {
    leap_child run({"run", (root_ / "config.yaml").string(), "--metrics-interval", "0.2"},
                   root_ / "run.log");
    const auto code = run.wait(std::chrono::seconds(400));
    ASSERT_TRUE(code.has_value()) << run.output();
    ASSERT_EQ(*code, 0) << run.output();
  }
  const auto prom = parse_prom(leap::e2e::read_file(run_dir / "metrics.prom"));
  ASSERT_FALSE(prom.empty());
  // No temporary file is left behind.
  for (const auto& e : fs::directory_iterator(run_dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }

  // The store, as `leap export` writes it.
  leap_child exported(
      {"export", run_dir.string(), "--format", "jsonl", "--out", (root_ / "groups.jsonl").string()},
      root_ / "export.log");
  const auto export_code = exported.wait(std::chrono::seconds(60));
  ASSERT_TRUE(export_code.has_value());
  ASSERT_EQ(*export_code, 0) << exported.output();
  double turns_first = 0, turns_debug = 0, passed_first = 0, passed_debug = 0, verified = 0;
  double tokens = 0, compile_ms = 0, run_ms = 0, train_groups = 0, activated = 0, all_groups = 0;
  std::ifstream jsonl(root_ / "groups.jsonl");
  for (std::string line; std::getline(jsonl, line);) {
    const auto g = nlohmann::json::parse(line);
    ++all_groups;
    if (g.at("split") == "train") {
      ++train_groups;
      activated += g.at("gate") == "open" ? 1 : 0;
    }
    for (const auto& r : g.at("rollouts")) {
      int index = 0;
      for (const auto& t : r.at("turns")) {
        const bool first = index++ == 0;
        (first ? turns_first : turns_debug) += 1;
        if (t.at("passed").get<bool>()) {
          (first ? passed_first : passed_debug) += 1;
        }
        tokens += static_cast<double>(t.at("output_tokens").size());
        if (t.at("finish_reason") != "error" && !t.at("text").get<std::string>().empty()) {
          ++verified;
          compile_ms += t.at("timings").at("compile_ms").get<double>();
          run_ms += t.at("timings").at("run_ms").get<double>();
        }
      }
    }
  }
  ASSERT_GT(turns_first, 0);
  EXPECT_EQ(prom.at("leap_compile_seconds_count"), verified);
  EXPECT_EQ(prom.at("leap_run_seconds_count"), verified);
  EXPECT_EQ(prom.at("leap_compile_seconds_bucket{le=\"+Inf\"}"), verified);
  EXPECT_NEAR(prom.at("leap_compile_seconds_sum"), compile_ms / 1000.0, 1e-6);
  EXPECT_NEAR(prom.at("leap_run_seconds_sum"), run_ms / 1000.0, 1e-6);
  EXPECT_EQ(prom.at("leap_generated_tokens_total"), tokens);
  EXPECT_EQ(prom.at("leap_turns_total{turn=\"first\"}"), turns_first);
  EXPECT_EQ(prom.at("leap_turns_total{turn=\"debug\"}"), turns_debug);
  EXPECT_EQ(prom.at("leap_turns_passed_total{turn=\"first\"}"), passed_first);
  EXPECT_EQ(prom.at("leap_turns_passed_total{turn=\"debug\"}"), passed_debug);
  EXPECT_EQ(prom.at("leap_generation_seconds_count"), turns_first + turns_debug);
  EXPECT_EQ(prom.at("leap_groups_total"), train_groups);
  EXPECT_EQ(prom.at("leap_groups_activated_total"), activated);
  EXPECT_EQ(prom.at("leap_steps_completed_total"), 2);
  EXPECT_EQ(prom.at("leap_weight_version"), 2);
  // Every store put was answered, nothing is in flight after the run.
  EXPECT_EQ(prom.at("leap_queue_depth{stage=\"store\"}"), 0);
  EXPECT_EQ(prom.at("leap_queue_depth{stage=\"learner\"}"), 0);
  EXPECT_EQ(prom.at("leap_groups_in_flight"), 0);
  // Every group, training and validation, was put once.
  EXPECT_EQ(prom.at("leap_queue_wait_seconds_count{stage=\"store\"}"), all_groups);
  EXPECT_EQ(prom.at("leap_learner_step_seconds_count"), 2);
  // On-policy (max_staleness 0): every trained sequence was sampled from the weights it updated.
  EXPECT_GT(prom.at("leap_staleness_versions_count"), 0);
  EXPECT_EQ(prom.at("leap_staleness_versions_bucket{le=\"0\"}"),
            prom.at("leap_staleness_versions_count"));

  // The JSON file holds the same numbers.
  const auto json = nlohmann::json::parse(leap::e2e::read_file(run_dir / "metrics.json"));
  bool found = false;
  for (const auto& m : json.at("metrics")) {
    if (m.at("name") != "leap_compile_seconds") {
      continue;
    }
    found = true;
    EXPECT_EQ(m.at("type"), "histogram");
    EXPECT_EQ(m.at("series").at(0).at("count").get<double>(), verified);
  }
  EXPECT_TRUE(found);

  // Replay shows the stored telemetry of each step and writes it as CSV.
  leap_child replay({"replay", run_dir.string()}, root_ / "replay.log");
  const auto replay_code = replay.wait(std::chrono::seconds(60));
  ASSERT_TRUE(replay_code.has_value());
  ASSERT_EQ(*replay_code, 0) << replay.output();
  EXPECT_NE(replay.output().find("live metrics at each step's end"), std::string::npos)
      << replay.output();
  std::ifstream csv(run_dir / "replay" / "telemetry.csv");
  std::string header;
  ASSERT_TRUE(std::getline(csv, header));
  EXPECT_NE(header.find("telemetry.compile_seconds.p50"), std::string::npos);
  int rows = 0;
  for (std::string line; std::getline(csv, line);) {
    ++rows;
  }
  EXPECT_EQ(rows, 2);
}

TEST_F(metrics_e2e, IntervalOptionIsChecked) {
  leap_child run({"run", (root_ / "config.yaml").string(), "--metrics-interval", "-1"},
                 root_ / "bad.log");
  const auto code = run.wait(std::chrono::seconds(60));
  ASSERT_TRUE(code.has_value());
  EXPECT_NE(*code, 0);
  EXPECT_NE(run.output().find("--metrics-interval"), std::string::npos) << run.output();
}

}  // namespace

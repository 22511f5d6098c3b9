#include "sandbox/process.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

namespace leap::sandbox {
namespace {

std::vector<std::pair<std::string, std::string>> base_env() {
  return {{"PATH", "/usr/local/bin:/usr/bin:/bin"}, {"LANG", "C.UTF-8"}};
}

struct shell_run {
  scratch_dir dir;
  run_result result;
};

shell_run run_shell(const std::string& script, resource_limits limits = {}) {
  auto dir = scratch_dir::create(default_scratch_root(), "process-test-");
  EXPECT_TRUE(dir.ok()) << dir.err().message;
  run_request request;
  request.argv = {"/bin/sh", "-c", script};
  request.working_dir = dir->path();
  request.env = base_env();
  request.limits = limits;
  auto r = run_isolated(request);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.err().message);
  return {std::move(dir.value()), r.ok() ? r.value() : run_result{}};
}

void expect_nothing_left(const run_result& r) {
  EXPECT_TRUE(processes_in_session(r.session_id).empty()) << "session " << r.session_id << " survived";
  if (::geteuid() == 0) {
    EXPECT_TRUE(processes_with_uid_in({r.run_uid, 1}).empty()) << "uid " << r.run_uid << " survived";
  }
}

TEST(ProcessTest, CapturesStdoutStderrAndExitCode) {
  auto run = run_shell("echo out; echo err >&2; exit 3");
  EXPECT_TRUE(run.result.exited);
  EXPECT_EQ(run.result.exit_code, 3);
  EXPECT_EQ(run.result.stdout_text, "out\n");
  EXPECT_EQ(run.result.stderr_text, "err\n");
  EXPECT_FALSE(run.result.timed_out);
  expect_nothing_left(run.result);
}

TEST(ProcessTest, ReportsTheSignalThatEndedIt) {
  auto run = run_shell("kill -SEGV $$");
  EXPECT_FALSE(run.result.exited);
  EXPECT_EQ(run.result.signal, SIGSEGV);
  EXPECT_EQ(signal_name(run.result.signal), "SIGSEGV");
}

TEST(ProcessTest, WallClockLimitKillsTheWholeGroup) {
  resource_limits limits;
  limits.wall = std::chrono::milliseconds(300);
  auto run = run_shell("sleep 100 & sleep 100 & sleep 100", limits);
  EXPECT_TRUE(run.result.timed_out);
  EXPECT_FALSE(run.result.exited);
  EXPECT_LT(run.result.wall, std::chrono::seconds(3));
  expect_nothing_left(run.result);
}

TEST(ProcessTest, ChildThatLeavesTheSessionDoesNotSurvive) {
  // setsid puts the child outside the run's process group and session.
  auto run = run_shell("setsid sleep 100 >/dev/null 2>&1 & echo started");
  EXPECT_TRUE(run.result.exited);
  EXPECT_EQ(run.result.stdout_text, "started\n");
  expect_nothing_left(run.result);
}

TEST(ProcessTest, OutputFloodIsCappedAndDoesNotBlock) {
  resource_limits limits;
  limits.output_cap_bytes = 1000;
  auto run = run_shell("head -c 5000000 /dev/zero | tr '\\0' a; echo LAST LINE; echo done >&2", limits);
  EXPECT_TRUE(run.result.exited);
  EXPECT_TRUE(run.result.stdout_truncated);
  EXPECT_EQ(run.result.stdout_bytes, 5000010U);
  EXPECT_EQ(run.result.stdout_text.substr(0, 750), std::string(750, 'a'));
  EXPECT_NE(run.result.stdout_text.find("[... 4999010 bytes not kept ...]"), std::string::npos);
  EXPECT_TRUE(run.result.stdout_text.ends_with("aaaaLAST LINE\n")) << run.result.stdout_text.substr(750);
  EXPECT_EQ(run.result.stderr_text, "done\n");
}

TEST(ProcessTest, EnvironmentIsScrubbed) {
  ::setenv("LEAP_PROCESS_TEST_SECRET", "hunter2", 1);
  auto run = run_shell("env; cat /proc/1/environ 2>/dev/null; cat /proc/$PPID/environ 2>/dev/null");
  ::unsetenv("LEAP_PROCESS_TEST_SECRET");
  EXPECT_EQ(run.result.stdout_text.find("hunter2"), std::string::npos) << run.result.stdout_text;
  EXPECT_NE(run.result.stdout_text.find("PATH=/usr/local/bin"), std::string::npos);
  EXPECT_NE(run.result.stdout_text.find("HOME="), std::string::npos);
}

TEST(ProcessTest, StdinIsDelivered) {
  auto dir = scratch_dir::create(default_scratch_root(), "process-test-");
  ASSERT_TRUE(dir.ok());
  run_request request;
  request.argv = {"cat"};
  request.working_dir = dir->path();
  request.env = base_env();
  request.stdin_data = "hello";
  auto r = run_isolated(request);
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->stdout_text, "hello");
}

TEST(ProcessTest, MissingExecutableIsAnError) {
  auto dir = scratch_dir::create(default_scratch_root(), "process-test-");
  ASSERT_TRUE(dir.ok());
  run_request request;
  request.argv = {"no-such-program-leap"};
  request.working_dir = dir->path();
  request.env = base_env();
  auto r = run_isolated(request);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.err().message.find("no-such-program-leap"), std::string::npos);
}

TEST(ProcessTest, AsRootTheRunIsNamespacedAndUnprivileged) {
  if (::geteuid() != 0) GTEST_SKIP() << "not root: the fallback applies (see README)";
  auto run = run_shell("id -u; cat /proc/self/status | grep NoNewPrivs; ls /proc | grep -c '^[0-9]'");
  std::printf("isolation: %s\n", run.result.isolation.c_str());
  EXPECT_NE(run.result.isolation.find("net"), std::string::npos) << run.result.isolation;
  EXPECT_NE(run.result.stdout_text.find(std::to_string(run.result.run_uid)), std::string::npos);
  EXPECT_NE(run.result.stdout_text.find("NoNewPrivs:\t1"), std::string::npos);
}

TEST(ProcessTest, ScratchDirIsRemovedWithEverythingInIt) {
  std::filesystem::path path;
  {
    auto run = run_shell("mkdir -p a/b && echo x > a/b/c && chmod 000 a && ln -s / root_link");
    path = run.dir.path();
    EXPECT_TRUE(std::filesystem::exists(path / "root_link"));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::exists("/bin/sh"));
}

TEST(ProcessTest, WritesToTmpStayPrivate) {
  if (::geteuid() != 0) GTEST_SKIP() << "not root: no private /tmp";
  const std::string name = "leap-process-test-" + std::to_string(::getpid());
  auto run = run_shell("echo x > /tmp/" + name + " && echo wrote");
  EXPECT_EQ(run.result.stdout_text, "wrote\n");
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path("/tmp") / name));
}

TEST(ProcessTest, NoDescriptorOfTheOrchestratorReachesTheCommand) {
  // Opened without O_CLOEXEC on purpose: the sandbox must not rely on the caller's flags.
  const int leaked = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(leaked, 3);
  auto run = run_shell("ls /proc/self/fd");
  ::close(leaked);
  std::istringstream fds(run.result.stdout_text);
  std::vector<int> open_fds;
  for (std::string line; std::getline(fds, line);) open_fds.push_back(std::stoi(line));
  // stdio, plus the descriptor `ls` itself opened to read the directory.
  ASSERT_EQ(open_fds.size(), 4u) << run.result.stdout_text;
  EXPECT_EQ(open_fds[0], 0);
  EXPECT_EQ(open_fds[1], 1);
  EXPECT_EQ(open_fds[2], 2);
}

TEST(ProcessTest, ExecutablesWrittenWhileOtherRunsStartAreNeverBusy) {
  // The verifier writes each candidate binary and runs it at once, while other workers start their
  // runs: a write descriptor copied into a concurrent run must never make an exec fail (ETXTBSY).
  std::ifstream in("/bin/true", std::ios::binary);
  const std::string binary((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(binary.empty());
  constexpr int k_threads = 4;
  constexpr int k_runs = 40;
  std::atomic<int> failures{0};
  std::mutex first_error_mutex;
  std::string first_error;
  std::vector<std::thread> workers;
  for (int t = 0; t < k_threads; ++t) {
    workers.emplace_back([&] {
      for (int i = 0; i < k_runs; ++i) {
        auto dir = scratch_dir::create(default_scratch_root(), "process-test-");
        if (!dir.ok()) {
          ++failures;
          continue;
        }
        auto written = write_file(dir->path() / "cand", binary);
        ::chmod((dir->path() / "cand").c_str(), 0755);
        run_request request;
        request.argv = {"./cand"};
        request.working_dir = dir->path();
        request.env = base_env();
        auto r = written.ok() ? run_isolated(request) : result<run_result>(written.err());
        if (!r.ok() || !r->exited || r->exit_code != 0) {
          ++failures;
          std::lock_guard lock(first_error_mutex);
          if (first_error.empty()) first_error = r.ok() ? r->stderr_text : r.err().message;
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(failures.load(), 0) << "first: " << first_error;
}

}  // namespace
}  // namespace leap::sandbox

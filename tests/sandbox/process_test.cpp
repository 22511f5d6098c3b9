#include "sandbox/process.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <filesystem>

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

}  // namespace
}  // namespace leap::sandbox

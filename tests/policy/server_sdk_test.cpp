// Compatibility proven by a client nobody here wrote: the official OpenAI SDK for Node drives a
// server started in this test (tests/policy/sdk/sdk_check.mjs). Skips, saying why, when node or
// the SDK's node_modules are missing; install them with `npm ci --prefix tests/policy/sdk`.
#include "tests/policy/server_test_support.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace leap::policy {
namespace {

using namespace leap::policy::testing;

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) {
    return {};
  }
  std::string entries = path;
  std::size_t start = 0;
  while (start <= entries.size()) {
    const std::size_t end = entries.find(':', start);
    const std::string dir =
        entries.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const std::filesystem::path candidate = std::filesystem::path(dir.empty() ? "." : dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0) {
      return candidate.string();
    }
    if (end == std::string::npos) {
      break;
    }
    start = end + 1;
  }
  return {};
}

struct run_result {
  int exit_code = -1;
  bool timed_out = false;
  std::string output;
};

// Runs a program with stdout and stderr captured, killing it after `limit`.
run_result run_program(const std::vector<std::string>& argv, std::chrono::seconds limit) {
  run_result result;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    result.output = "pipe failed";
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  std::vector<char*> args;
  args.reserve(argv.size());
  for (const auto& a : argv) {
    args.push_back(const_cast<char*>(a.c_str()));
  }
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    result.output = "cannot start " + argv[0];
    return result;
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  char buffer[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
      continue;
    }
    const ssize_t n = ::read(fds[0], buffer, sizeof(buffer));
    if (n <= 0) {
      break;
    }
    result.output.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

TEST(OpenAiSdk, DrivesTheServer) {
  const std::filesystem::path sdk_dir = std::filesystem::path(LEAP_SOURCE_DIR) / "tests/policy/sdk";
  const std::string node = find_on_path("node");
  if (node.empty()) {
    GTEST_SKIP() << "node is not on PATH; install Node.js to run the OpenAI SDK check";
  }
  if (!std::filesystem::exists(sdk_dir / "node_modules/openai/package.json")) {
    GTEST_SKIP() << "the OpenAI SDK is not installed; run `npm ci --prefix tests/policy/sdk` "
                    "from the repository root";
  }
  auto server = start_server();
  ASSERT_TRUE(server);
  const run_result run = run_program({node, (sdk_dir / "sdk_check.mjs").string(),
                                      server->base_url() + "/v1", "leap-test", vector_add_prompt},
                                     std::chrono::seconds(90));
  EXPECT_FALSE(run.timed_out) << run.output;
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("sdk check passed"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace leap::policy

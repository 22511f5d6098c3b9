// The engine's side of a GPU slot's keeper (sandbox/gpu_keeper.cpp): started as a real process
// with exactly the environment given, a session socket per run, its death seen. On any machine the
// keeper is a Python stand-in speaking the control protocol (harness.hpp, keeper_source); on a GPU
// machine the real keeper serves real runs, is shared by them and is started again after it died.
#include "sandbox/engine_parts.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <set>
#include <string>
#include <sys/socket.h>
#include <unistd.h>

namespace leap::sandbox {
namespace {
namespace fs = std::filesystem;

const char* k_python = "/usr/bin/python3";

// A stand-in keeper: says `start` on the control socket (descriptor 3), then answers each
// session's messages with "echo:" + the message, and exits when the control socket closes.
std::string stand_in(const std::string& start) {
  return std::string("#!") + k_python + "\n" +
         "import os, socket, sys, threading\n"
         "control = socket.socket(fileno=3)\n"
         "if os.environ.get('LEAP_KEEPER_TEST') != 'yes': sys.exit(1)\n"
         "assert 'HOME' not in os.environ\n"
         "control.send(" +
         start +
         ")\n"
         "def serve(s):\n"
         "    while True:\n"
         "        m = s.recv(100)\n"
         "        if not m: return\n"
         "        s.send(b'echo:' + m)\n"
         "while True:\n"
         "    msg, fds, flags, addr = socket.recv_fds(control, 1, 1)\n"
         "    if not msg: sys.exit(0)\n"
         "    threading.Thread(target=serve, args=(socket.socket(fileno=fds[0]),), "
         "daemon=True).start()\n";
}

const std::vector<std::pair<std::string, std::string>> k_env{{"PATH", "/usr/bin:/bin"},
                                                             {"LEAP_KEEPER_TEST", "yes"}};

bool python_present(std::string* why) {
  if (::access(k_python, X_OK) == 0) {
    return true;
  }
  *why = std::string(k_python) + " is not there";
  return false;
}

// The pids of this process's live children whose command line names a program below `root` (a
// stand-in's interpreter gets the script's path).
std::set<pid_t> children_below(const fs::path& root) {
  std::set<pid_t> out;
  for (const auto& p : testing::live_processes()) {
    if (p.parent == ::getpid() && p.state != 'Z' &&
        p.cmdline.find(root.string()) != std::string::npos) {
      out.insert(p.pid);
    }
  }
  return out;
}

TEST(GpuKeeperTest, StartsWithItsEnvironmentServesSessionsAndIsSeenToDie) {
  std::string why;
  if (!python_present(&why)) {
    GTEST_SKIP() << why;
  }
  const fs::path root = testing::test_cache_dir() / "keeper-scratch";
  auto keeper = detail::gpu_keeper::start(root, stand_in("b'K'"), k_env, std::chrono::seconds(20));
  ASSERT_TRUE(keeper.ok()) << keeper.err().message;
  const auto pids = children_below(root);
  ASSERT_EQ(pids.size(), 1U);
  // Two sessions at once, each its own socket.
  auto first = (*keeper)->session();
  auto second = (*keeper)->session();
  ASSERT_TRUE(first.ok()) << first.err().message;
  ASSERT_TRUE(second.ok()) << second.err().message;
  for (auto [fd, text] : {std::pair{*first, std::string("one")}, {*second, std::string("two")}}) {
    ASSERT_EQ(::send(fd, text.data(), text.size(), 0), static_cast<ssize_t>(text.size()));
    char answer[64] = {};
    ASSERT_GT(::recv(fd, answer, sizeof answer, 0), 0);
    EXPECT_EQ(std::string(answer), "echo:" + text);
    ::close(fd);
  }
  EXPECT_TRUE((*keeper)->alive());
  ::kill(*pids.begin(), SIGKILL);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((*keeper)->alive() && std::chrono::steady_clock::now() < deadline) {
    ::usleep(10000);
  }
  EXPECT_FALSE((*keeper)->alive());
  EXPECT_FALSE((*keeper)->session().ok());
}

TEST(GpuKeeperTest, AKeeperThatCannotStartSaysWhy) {
  std::string why;
  if (!python_present(&why)) {
    GTEST_SKIP() << why;
  }
  const fs::path root = testing::test_cache_dir() / "keeper-scratch";
  auto refused = detail::gpu_keeper::start(root, stand_in("b'Eno device here'"), k_env,
                                           std::chrono::seconds(20));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.err().message.find("could not start: no device here"), std::string::npos)
      << refused.err().message;
  // One that exits before it answers (here: its environment lacks what it asserts).
  auto exited = detail::gpu_keeper::start(root, stand_in("b'K'"), {{"PATH", "/usr/bin:/bin"}},
                                          std::chrono::seconds(20));
  ASSERT_FALSE(exited.ok());
  EXPECT_NE(exited.err().message.find("ended before it started"), std::string::npos)
      << exited.err().message;
  // One that never answers is given up on, and killed: no child is left behind.
  auto hung = detail::gpu_keeper::start(root, std::string("#!/bin/sh\nexec sleep 600\n"), k_env,
                                        std::chrono::milliseconds(500));
  ASSERT_FALSE(hung.ok());
  EXPECT_NE(hung.err().message.find("did not start CUDA within"), std::string::npos)
      << hung.err().message;
  EXPECT_TRUE(children_below(root).empty());
}

// The real keeper on a GPU machine: every cuda run of a slot uses the one keeper, and a keeper
// that died is started again for the next run.
TEST(GpuKeeperTest, OneKeeperServesTheSlotsRunsAndIsStartedAgainAfterItDied) {
  std::string why;
  if (!testing::gpu_present(&why)) {
    GTEST_SKIP() << why;
  }
  engine_config config = testing::test_engine_config();
  config.scratch_root = testing::test_cache_dir() / "keeper-runs";
  auto e = engine::create(config);
  ASSERT_TRUE(e.ok()) << e.err().message;
  auto verify = [&] {
    auto v = (*e)->verify(testing::cuda_vector_add_task(),
                          testing::fenced("cuda", testing::k_cuda_vector_add), 0);
    ASSERT_TRUE(v.ok()) << v.err().message;
    EXPECT_TRUE(v->passed) << v->feedback;
  };
  verify();
  const auto first = children_below(config.scratch_root);
  ASSERT_EQ(first.size(), 1U);
  verify();
  EXPECT_EQ(children_below(config.scratch_root), first);
  ::kill(*first.begin(), SIGKILL);
  ::usleep(100000);
  verify();
  const auto again = children_below(config.scratch_root);
  ASSERT_EQ(again.size(), 1U);
  EXPECT_NE(*again.begin(), *first.begin());
}

}  // namespace
}  // namespace leap::sandbox

#include "sandbox/process.hpp"

#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <future>
#include <grp.h>
#include <iterator>
#include <mutex>
#include <signal.h>
#include <sstream>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
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

shell_run run_shell(const std::string& script, resource_limits limits = {},
                    bool read_child_memory = false) {
  auto dir = scratch_dir::create(default_scratch_root(), "process-test-");
  EXPECT_TRUE(dir.ok()) << dir.err().message;
  run_request request;
  request.argv = {"/bin/sh", "-c", script};
  request.working_dir = dir->path();
  request.env = base_env();
  request.limits = limits;
  request.read_child_memory = read_child_memory;
  auto r = run_isolated(request);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.err().message);
  return {std::move(dir.value()), r.ok() ? r.value() : run_result{}};
}

void expect_nothing_left(const run_result& r) {
  EXPECT_TRUE(processes_in_session(r.session_id).empty())
      << "session " << r.session_id << " survived";
  if (::geteuid() == 0) {
    EXPECT_TRUE(processes_with_uid_in({r.run_uid, 1}).empty())
        << "uid " << r.run_uid << " survived";
  }
}

// A read-only path under a folder the sandbox replaces with the run's own (here the scratch /tmp)
// could never be seen by the command: refused with the path and the folder, before anything runs,
// where it used to be dropped silently and fail later as "not found". A missing one is skipped.
TEST(SandboxPathsTest, AReadOnlyPathUnderAFolderTheSandboxReplacesIsRefused) {
  auto dir = scratch_dir::create(default_scratch_root(), "process-test-");
  ASSERT_TRUE(dir.ok()) << dir.err().message;
  auto hidden = scratch_dir::create("/tmp", "leap-hidden-readonly-");
  ASSERT_TRUE(hidden.ok()) << hidden.err().message;
  run_request request;
  request.argv = {"/bin/sh", "-c", "echo ran"};
  request.working_dir = dir->path();
  request.env = base_env();
  request.readonly_paths = {hidden->path()};
  auto refused = run_isolated(request);
  ASSERT_FALSE(refused.ok()) << refused->stdout_text;
  EXPECT_NE(refused.err().message.find(hidden->path().string()), std::string::npos)
      << refused.err().message;
  EXPECT_NE(refused.err().message.find("lies under /tmp"), std::string::npos)
      << refused.err().message;

  request.readonly_paths = {"/nonexistent-leap-readonly-path"};
  auto ran = run_isolated(request);
  ASSERT_TRUE(ran.ok()) << ran.err().message;
  EXPECT_EQ(ran->stdout_text, "ran\n");
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
  auto run =
      run_shell("head -c 5000000 /dev/zero | tr '\\0' a; echo LAST LINE; echo done >&2", limits);
  EXPECT_TRUE(run.result.exited);
  EXPECT_TRUE(run.result.stdout_truncated);
  EXPECT_EQ(run.result.stdout_bytes, 5000010U);
  EXPECT_EQ(run.result.stdout_text.substr(0, 750), std::string(750, 'a'));
  EXPECT_NE(run.result.stdout_text.find("[... 4999010 bytes not kept ...]"), std::string::npos);
  EXPECT_TRUE(run.result.stdout_text.ends_with("aaaaLAST LINE\n"))
      << run.result.stdout_text.substr(750);
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
  if (::geteuid() != 0) {
    GTEST_SKIP() << "not root: the fallback applies (see README)";
  }
  auto run =
      run_shell("id -u; cat /proc/self/status | grep NoNewPrivs; ls /proc | grep -c '^[0-9]'");
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
    EXPECT_TRUE(std::filesystem::exists(path / "a"));
    // As root the files come back from the private scratch, symlinks never; in the fallback the
    // command wrote into the directory itself.
    EXPECT_EQ(std::filesystem::is_symlink(path / "root_link"), ::geteuid() != 0);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::exists("/bin/sh"));
}

TEST(ProcessTest, WritesToTmpStayPrivate) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "not root: no private /tmp";
  }
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
  for (std::string line; std::getline(fds, line);) {
    open_fds.push_back(std::stoi(line));
  }
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
  workers.reserve(k_threads);
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
          if (first_error.empty()) {
            first_error = r.ok() ? r->stderr_text : r.err().message;
          }
        }
      }
    });
  }
  for (auto& w : workers) {
    w.join();
  }
  EXPECT_EQ(failures.load(), 0) << "first: " << first_error;
}

// --- The isolation layer as root: a cgroup for the whole tree, a fresh root, a private scratch.
// ---

// Skips unless the run had a cgroup (root, and a writable v1 or v2 hierarchy).
#define REQUIRE_CGROUP(run)                                                   \
  do {                                                                        \
    if (::geteuid() != 0) GTEST_SKIP() << "not root: no cgroup (see README)"; \
    if ((run).result.isolation.find("cgroup v") == std::string::npos)         \
      GTEST_SKIP() << (run).result.isolation;                                 \
  } while (0)

#define REQUIRE_ROOT()                                                                   \
  do {                                                                                   \
    if (::geteuid() != 0) GTEST_SKIP() << "not root: the fallback applies (see README)"; \
  } while (0)

// A python3 tree: `children` forked processes each hold `mib` MiB (written, so resident) until all
// of them have it, then all exit; prints "all N allocated" when that point is reached.
std::string memory_tree_script(int children, int mib) {
  return "python3 -c '\n"
         "import os\n"
         "n, size = " +
         std::to_string(children) + ", " + std::to_string(mib) +
         " << 20\n"
         "ready_r, ready_w = os.pipe()\n"
         "go_r, go_w = os.pipe()\n"
         "for i in range(n):\n"
         "    if os.fork() == 0:\n"
         "        os.close(go_w)\n"
         "        block = b\"\\x01\" * size\n"
         "        os.write(ready_w, b\"r\")\n"
         "        os.read(go_r, 1)\n"
         "        os._exit(0)\n"
         "got = 0\n"
         "while got < n:\n"
         "    got += len(os.read(ready_r, n))\n"
         "print(\"all\", n, \"allocated\", flush=True)\n"
         "os.close(go_w)\n"
         "for i in range(n):\n"
         "    os.wait()\n"
         "'";
}

TEST(ProcessTest, IsolationNamesEveryLayer) {
  REQUIRE_ROOT();
  auto run = run_shell("true");
  EXPECT_NE(run.result.isolation.find("pivot_root"), std::string::npos) << run.result.isolation;
  EXPECT_NE(run.result.isolation.find("seccomp"), std::string::npos) << run.result.isolation;
  EXPECT_TRUE(run.result.isolation.find("cgroup v") != std::string::npos ||
              run.result.isolation.find("no cgroup: ") != std::string::npos)
      << run.result.isolation;
}

// A process reading its child's memory (a KernelBench judge copying its runner's outputs): refused
// by the sandbox unless the run allows it, and then only process_vm_readv, never the write.
TEST(ProcessTest, ReadingAChildsMemoryIsTheRunsToAllow) {
  const std::string script =
      "python3 -c '\n"
      "import ctypes, os\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "buf = ctypes.create_string_buffer(b\"child bytes\", 16)\n"
      "r, w = os.pipe()\n"
      "pid = os.fork()\n"
      "if pid == 0:\n"
      "    os.close(w)\n"
      "    os.read(r, 1)\n"
      "    os._exit(0)\n"
      "got = ctypes.create_string_buffer(16)\n"
      "local = (ctypes.c_size_t * 2)(ctypes.addressof(got), 16)\n"
      "remote = (ctypes.c_size_t * 2)(ctypes.addressof(buf), 16)\n"
      "for name in (\"process_vm_readv\", \"process_vm_writev\"):\n"
      "    n = getattr(libc, name)(pid, local, 1, remote, 1, 0)\n"
      "    print(name, got.value.decode() if n == 16 else os.strerror(ctypes.get_errno()))\n"
      "os.close(w)\n"
      "os.wait()\n"
      "'";
  auto refused = run_shell(script);
  ASSERT_TRUE(refused.result.exited) << refused.result.stderr_text;
  EXPECT_NE(refused.result.stdout_text.find("process_vm_readv Operation not permitted"),
            std::string::npos)
      << refused.result.stdout_text;
  std::string why;
  if (!testing::parents_read_children(&why)) {
    GTEST_SKIP() << why;
  }
  auto allowed = run_shell(script, {}, true);
  ASSERT_TRUE(allowed.result.exited) << allowed.result.stderr_text;
  EXPECT_NE(allowed.result.stdout_text.find("process_vm_readv child bytes"), std::string::npos)
      << allowed.result.stdout_text << allowed.result.isolation;
  EXPECT_NE(allowed.result.stdout_text.find("process_vm_writev Operation not permitted"),
            std::string::npos)
      << allowed.result.stdout_text;
}

TEST(ProcessTest, MemoryLimitStopsTheWholeTree) {
  resource_limits limits;
  limits.memory_bytes = 256ULL << 20;
  limits.wall = std::chrono::seconds(60);
  // One child of 64 MiB fits: the run completes normally.
  auto alone = run_shell(memory_tree_script(1, 64), limits);
  REQUIRE_CGROUP(alone);
  EXPECT_TRUE(alone.result.exited) << alone.result.stderr_text;
  EXPECT_EQ(alone.result.exit_code, 0) << alone.result.stderr_text;
  EXPECT_EQ(alone.result.stdout_text, "all 1 allocated\n");
  EXPECT_FALSE(alone.result.memory_exceeded);
  // 16 of them (1 GiB together, each far below its 4 GiB address-space rlimit) do not: the tree as
  // a whole is stopped before they all hold their block, and the run says why.
  auto tree = run_shell(memory_tree_script(16, 64), limits);
  EXPECT_TRUE(tree.result.memory_exceeded) << tree.result.stderr_text;
  EXPECT_FALSE(tree.result.exited);
  EXPECT_FALSE(tree.result.timed_out);
  EXPECT_EQ(tree.result.stdout_text.find("allocated"), std::string::npos)
      << tree.result.stdout_text;
  expect_nothing_left(tree.result);
}

TEST(ProcessTest, ProcessesBeyondTheLimitCannotStart) {
  resource_limits limits;
  limits.processes = 10;
  auto run = run_shell(
      "python3 -c '\n"
      "import os\n"
      "r, w = os.pipe()\n"
      "started = 0\n"
      "for i in range(40):\n"
      "    try:\n"
      "        if os.fork() == 0:\n"
      "            os.close(w)\n"
      "            os.read(r, 1)\n"
      "            os._exit(0)\n"
      "        started += 1\n"
      "    except OSError:\n"
      "        pass\n"
      "print(\"started\", started, flush=True)\n"
      "'",
      limits);
  ASSERT_TRUE(run.result.exited) << run.result.stderr_text;
  ASSERT_EQ(run.result.stdout_text.rfind("started ", 0), 0U) << run.result.stdout_text;
  const int started = std::stoi(run.result.stdout_text.substr(8));
  EXPECT_GE(started, 1);
  EXPECT_LT(started, 10) << "the python process itself counts";
  expect_nothing_left(run.result);
}

TEST(ProcessTest, TreeCpuTimeIsBounded) {
  resource_limits limits;
  limits.cpu_seconds = 1;
  limits.wall = std::chrono::seconds(60);
  // Four busy children: each alone stays within the per-process RLIMIT_CPU for a while, together
  // they pass one CPU second quickly; the shell waits for them forever.
  auto run =
      run_shell("for i in 1 2 3 4; do (while :; do :; done) & done; wait; echo finished", limits);
  REQUIRE_CGROUP(run);
  EXPECT_TRUE(run.result.cpu_exceeded) << run.result.isolation;
  EXPECT_FALSE(run.result.exited);
  EXPECT_EQ(run.result.signal, SIGXCPU);
  EXPECT_FALSE(run.result.timed_out);
  EXPECT_EQ(run.result.stdout_text, "");
  // Killed when the tree reached its second, not after each child used its own.
  EXPECT_LT(run.result.cpu, std::chrono::seconds(3)) << run.result.cpu.count() << " us";
  expect_nothing_left(run.result);
}

TEST(ProcessTest, ScratchIsSizeLimitedAndStaysOffTheHostDisk) {
  REQUIRE_ROOT();
  resource_limits limits;
  limits.scratch_bytes = 8ULL << 20;
  auto run = run_shell(
      "head -c 33554432 /dev/zero > big; echo big=$?; rm -f big;"
      "i=0; while [ $i -lt 100000 ] && true 2>/dev/null > f$i; do i=$((i+1)); done; echo files=$i; "
      "rm -f f*;"
      "head -c 33554432 /dev/zero > /tmp/big2; ls -l /tmp/big2 | cut -d' ' -f5",
      limits);
  EXPECT_NE(run.result.stdout_text.find("big=1"), std::string::npos) << run.result.stdout_text;
  EXPECT_NE(run.result.stderr_text.find("No space left on device"), std::string::npos)
      << run.result.stderr_text;
  // A bounded number of files (one inode per 16 KiB of scratch, at least 1024), not 100000.
  const auto files_at = run.result.stdout_text.find("files=");
  ASSERT_NE(files_at, std::string::npos) << run.result.stdout_text;
  EXPECT_LE(std::stoi(run.result.stdout_text.substr(files_at + 6)), 1024) << run.result.stdout_text;
  // What came back to the host is the part that fit, no more.
  std::uintmax_t bytes = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(run.dir.path())) {
    if (e.is_regular_file()) {
      bytes += e.file_size();
    }
  }
  EXPECT_LE(bytes, limits.scratch_bytes);
  EXPECT_GT(bytes, 0U);
}

// What a folder holds on the host disk, counted as the copy-back's budget counts it: each regular
// file its apparent size or its allocated blocks, whichever is larger, every other entry 4 KiB.
struct host_usage {
  std::uint64_t bytes = 0;
  std::uint64_t entries = 0;
};
host_usage usage_of(const std::filesystem::path& dir) {
  host_usage u;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) != 0) {
      continue;
    }
    ++u.entries;
    u.bytes +=
        S_ISREG(st.st_mode) ? std::max<std::uint64_t>(st.st_size, st.st_blocks * 512ULL) : 4096;
  }
  return u;
}

// 30 sparse files of 63 MiB hold no tmpfs page, so the scratch's size never stops them.
constexpr const char* k_sparse_script =
    "i=0; while [ $i -lt 30 ]; do truncate -s 63M sparse$i || exit 1; i=$((i+1)); done;"
    "python3 -c 'import os; fd = os.open(\"py_sparse\", os.O_CREAT | os.O_WRONLY); "
    "os.ftruncate(fd, 63 << 20)'; echo made";

TEST(ProcessTest, SparseFilesReachTheHostOnlyWithinTheBudget) {
  REQUIRE_ROOT();
  resource_limits limits;
  limits.scratch_bytes = 8ULL << 20;
  auto run = run_shell(k_sparse_script, limits);
  EXPECT_EQ(run.result.stdout_text, "made\n") << run.result.stderr_text;
  const host_usage u = usage_of(run.dir.path());
  EXPECT_LE(u.bytes, limits.scratch_bytes) << u.entries << " entries";
  // Nothing came back, and the run says what it left: 31 files at their full apparent size.
  EXPECT_EQ(u.entries, 0U);
  EXPECT_TRUE(run.result.scratch_exceeded);
  EXPECT_EQ(run.result.scratch_left_bytes, 31 * (63ULL << 20));
  EXPECT_EQ(run.result.scratch_left_entries, 31U);
  EXPECT_TRUE(run.result.exited);  // the command itself ended normally
  expect_nothing_left(run.result);
}

TEST(ProcessTest, HardLinksCountOncePerName) {
  REQUIRE_ROOT();
  resource_limits limits;
  limits.scratch_bytes = 8ULL << 20;
  // 3 MiB of pages in the scratch, 12 MiB once every name is copied back as its own file.
  auto run =
      run_shell("head -c 3145728 /dev/zero > f && ln f g && ln f h && ln f i && echo made", limits);
  EXPECT_EQ(run.result.stdout_text, "made\n") << run.result.stderr_text;
  EXPECT_LE(usage_of(run.dir.path()).bytes, limits.scratch_bytes);
  EXPECT_TRUE(run.result.scratch_exceeded);
  EXPECT_EQ(run.result.scratch_left_bytes, 4 * (3ULL << 20));
  // Two names of 3 MiB fit.
  auto fits = run_shell("head -c 3145728 /dev/zero > f && ln f g", limits);
  EXPECT_FALSE(fits.result.scratch_exceeded);
  EXPECT_EQ(std::filesystem::file_size(fits.dir.path() / "g"), 3U << 20);
}

TEST(ProcessTest, FolderTreesCountTowardTheBudget) {
  REQUIRE_ROOT();
  resource_limits limits;
  limits.scratch_bytes = 2ULL << 20;  // and 1024 inodes: folders cost the scratch no page
  limits.wall = std::chrono::seconds(60);
  auto run = run_shell("seq -f d%g 1000 | xargs mkdir && echo made", limits);
  EXPECT_EQ(run.result.stdout_text, "made\n") << run.result.stderr_text;
  EXPECT_LE(usage_of(run.dir.path()).bytes, limits.scratch_bytes);
  EXPECT_TRUE(run.result.scratch_exceeded);
  EXPECT_EQ(run.result.scratch_left_entries, 1000U);
  EXPECT_EQ(run.result.scratch_left_bytes, 1000U * 4096);
}

TEST(ProcessTest, FilesWithinTheBudgetComeBackWhole) {
  REQUIRE_ROOT();
  resource_limits limits;
  limits.scratch_bytes = 8ULL << 20;
  auto run = run_shell(
      "fallocate -l 2M allocated && head -c 2097152 /dev/urandom > dense && truncate -s 1M sparse "
      "&& mkdir -p a/b && echo x > a/b/c && echo made",
      limits);
  EXPECT_EQ(run.result.stdout_text, "made\n") << run.result.stderr_text;
  const auto& dir = run.dir.path();
  EXPECT_EQ(std::filesystem::file_size(dir / "allocated"), 2U << 20);
  EXPECT_EQ(std::filesystem::file_size(dir / "dense"), 2U << 20);
  EXPECT_EQ(std::filesystem::file_size(dir / "sparse"), 1U << 20);
  EXPECT_TRUE(std::filesystem::is_regular_file(dir / "a" / "b" / "c"));
  EXPECT_LE(usage_of(dir).bytes, limits.scratch_bytes);
  EXPECT_FALSE(run.result.scratch_exceeded);
  // 2 + 2 + 1 MiB, two folders and a file of 2 bytes (one page).
  EXPECT_EQ(run.result.scratch_left_bytes, (5ULL << 20) + 3ULL * 4096);
  EXPECT_EQ(run.result.scratch_left_entries, 6U);
}

// Runs `script` in the fallback (not root: no scratch tmpfs, the command writes into the host
// folder itself), from a child process of this root test that drops to `nobody`. Returns the
// run's isolation, stdout and "exceeded N"/"within N" (N: scratch_left_bytes), or the error.
std::string fallback_run(const std::filesystem::path& dir, const std::string& script,
                         std::uint64_t scratch_bytes) {
  EXPECT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  int report[2];
  EXPECT_EQ(::pipe(report), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(report[0]);
    if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
        ::setresuid(65534, 65534, 65534) != 0) {
      ::_exit(2);
    }
    run_request request;
    request.argv = {"/bin/sh", "-c", script};
    request.working_dir = dir;
    request.env = base_env();
    request.limits.scratch_bytes = scratch_bytes;
    request.limits.wall = std::chrono::seconds(60);
    auto r = run_isolated(request);
    std::string line = r.ok() ? r->isolation + "\n" + r->stdout_text +
                                    (r->scratch_exceeded ? "exceeded " : "within ") +
                                    std::to_string(r->scratch_left_bytes)
                              : r.err().message;
    [[maybe_unused]] auto n = ::write(report[1], line.data(), line.size());
    ::_exit(r.ok() ? 0 : 3);
  }
  ::close(report[1]);
  std::string said;
  char buffer[4096];
  for (ssize_t n; (n = ::read(report[0], buffer, sizeof buffer)) > 0;) {
    said.append(buffer, n);
  }
  ::close(report[0]);
  int status = 0;
  EXPECT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << said;
  EXPECT_NE(said.find("fallback"), std::string::npos) << said;
  return said;
}

// Over the budget, the fallback empties the folder after the run.
TEST(ProcessTest, FallbackRunOverTheBudgetLeavesNothing) {
  REQUIRE_ROOT();
  auto dir = scratch_dir::create(default_scratch_root(), "process-test-");
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(write_file(dir->path() / "input.txt", "the caller's\n").ok());
  const std::string said = fallback_run(dir->path(), k_sparse_script, 8ULL << 20);
  EXPECT_NE(said.find("made"), std::string::npos) << said;
  EXPECT_LE(usage_of(dir->path()).bytes, 8ULL << 20) << said;
  // Emptied, the caller's input with the rest (the run failed anyway).
  EXPECT_EQ(usage_of(dir->path()).entries, 0U) << said;
  EXPECT_NE(said.find("exceeded " + std::to_string(31 * (63ULL << 20) + 4096)), std::string::npos)
      << said;
  // More files than the entry limit (1024 for 8 MiB), each empty, are over it too.
  auto many = scratch_dir::create(default_scratch_root(), "process-test-");
  ASSERT_TRUE(many.ok());
  const std::string files =
      fallback_run(many->path(), "seq -f f%g 1100 | xargs touch && echo made", 8ULL << 20);
  EXPECT_NE(files.find("made\nexceeded"), std::string::npos) << files;
  EXPECT_EQ(usage_of(many->path()).entries, 0U) << files;
}

// Within the budget the fallback keeps the folder as the copy back would: files down to the 8th
// level of folders, no folder below it (however deep, and locked with mode 000).
TEST(ProcessTest, FallbackKeepsWhatTheCopyBackWould) {
  REQUIRE_ROOT();
  auto dir = scratch_dir::create(default_scratch_root(), "process-test-");
  ASSERT_TRUE(dir.ok());
  std::string deep = "l1/l2/l3/l4/l5/l6/l7/l8";
  std::string deeper = deep;
  for (int level = 9; level <= 300; ++level) {
    deeper += "/l" + std::to_string(level);
  }
  const std::string said =
      fallback_run(dir->path(),
                   "mkdir -p " + deeper + " && echo x > " + deeper + "/far && echo y > " + deep +
                       "/kept && chmod 000 " + deep + "/l9 && echo z > top && echo made",
                   8ULL << 20);
  EXPECT_NE(said.find("made\nwithin"), std::string::npos) << said;
  const auto& root = dir->path();
  EXPECT_TRUE(std::filesystem::is_regular_file(root / "top")) << said;
  EXPECT_TRUE(std::filesystem::is_regular_file(root / deep / "kept")) << said;
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(root / deep / "l9")))
      << said;
  EXPECT_EQ(usage_of(root).entries, 10U) << said;  // l1..l8, kept, top
}

TEST(ProcessTest, FilesAreCopiedInAndRegularFilesBack) {
  REQUIRE_ROOT();
  auto dir = scratch_dir::create(default_scratch_root(), "process-test-");
  ASSERT_TRUE(dir.ok());
  std::filesystem::create_directories(dir->path() / "sub");
  ASSERT_TRUE(write_file(dir->path() / "in.txt", "input\n").ok());
  ASSERT_TRUE(write_file(dir->path() / "sub" / "deep.txt", "deep\n").ok());
  run_request request;
  request.argv = {
      "/bin/sh", "-c",
      "cat in.txt sub/deep.txt; pwd; echo out > out.txt; mkdir -p d/e && echo f > d/e/f;"
      "ln -s /etc/passwd link; mkfifo fifo"};
  request.working_dir = dir->path();
  request.env = base_env();
  auto r = run_isolated(request);
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->stdout_text, "input\ndeep\n/tmp\n") << r->stderr_text;
  auto out = read_untrusted_file(dir->path() / "out.txt", 100);
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_EQ(*out, "out\n");
  EXPECT_TRUE(std::filesystem::is_regular_file(dir->path() / "d" / "e" / "f"));
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(dir->path() / "link")));
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(dir->path() / "fifo")));
}

TEST(ProcessTest, WritableSharedFoldersArePrivateToEachRun) {
  REQUIRE_ROOT();
  const std::string name = "leap-left-" + std::to_string(::getpid());
  auto first = run_shell("for d in /run/lock /dev/shm /var/tmp /tmp; do echo secret > $d/" + name +
                         " && echo wrote $d; done");
  EXPECT_EQ(first.result.stdout_text,
            "wrote /run/lock\nwrote /dev/shm\nwrote /var/tmp\nwrote /tmp\n")
      << first.result.stderr_text;
  auto second = run_shell("cat /run/lock/" + name + " /dev/shm/" + name + " /var/tmp/" + name +
                          " /tmp/" + name + " 2>/dev/null; echo end");
  EXPECT_EQ(second.result.stdout_text, "end\n");
  for (const char* d : {"/run/lock", "/dev/shm", "/var/tmp", "/tmp"}) {
    EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(d) / name)) << d;
  }
}

TEST(ProcessTest, NoUserNamespaceInside) {
  REQUIRE_ROOT();
  auto run = run_shell(
      "unshare -U true; echo user=$?; unshare -U -r -n true; echo net=$?;"
      "python3 -c 'import threading; t = threading.Thread(target=print, args=(\"threads work\",)); "
      "t.start(); t.join()'");
  EXPECT_NE(run.result.stdout_text.find("user=1"), std::string::npos) << run.result.stdout_text;
  EXPECT_NE(run.result.stdout_text.find("net=1"), std::string::npos) << run.result.stdout_text;
  EXPECT_NE(run.result.stderr_text.find("Operation not permitted"), std::string::npos)
      << run.result.stderr_text;
  // clone3 is refused with ENOSYS, so glibc's threads fall back to clone.
  EXPECT_NE(run.result.stdout_text.find("threads work"), std::string::npos)
      << run.result.stderr_text;
}

TEST(ProcessTest, ProcShowsNothingOfTheOrchestrator) {
  REQUIRE_ROOT();
  auto run = run_shell(
      "cat /proc/1/cmdline; echo rc=$?; cat /proc/1/environ; ls /proc | grep -E '^[0-9]+$' | "
      "while read p; do cat /proc/$p/cmdline; echo; done");
  EXPECT_NE(run.result.stdout_text.find("rc=1"), std::string::npos) << run.result.stdout_text;
  EXPECT_EQ(run.result.stdout_text.find("sandbox_tests"), std::string::npos)
      << run.result.stdout_text;
  EXPECT_EQ(run.result.stdout_text.find("gtest"), std::string::npos) << run.result.stdout_text;
}

TEST(ProcessTest, HostFoldersAreInvisible) {
  REQUIRE_ROOT();
  const char* home = std::getenv("HOME");
  std::string script = "for p in " + std::string(LEAP_SOURCE_DIR) + " " +
                       default_scratch_root().string() + " " + (home && *home ? home : "/root") +
                       " /work /root /home /srv /mnt /opt; do test -e $p && echo visible $p; done;"
                       " ls /";
  auto run = run_shell(script);
  EXPECT_EQ(run.result.stdout_text.find("visible"), std::string::npos) << run.result.stdout_text;
  EXPECT_NE(run.result.stdout_text.find("usr\n"), std::string::npos) << run.result.stdout_text;
  // System folders are read-only.
  auto write = run_shell("touch /usr/leap-x /etc/leap-x 2>&1; echo done");
  EXPECT_EQ(write.result.stdout_text.find("done"), write.result.stdout_text.size() - 5)
      << write.result.stdout_text;
  EXPECT_FALSE(std::filesystem::exists("/usr/leap-x"));
}

// A command started ahead of its job (run_request::start_gate_fd): it waits on descriptor 3 for
// one byte, and the test opens the gate and sends it.
struct gated_shell {
  scratch_dir dir;
  int job = -1;
  int gate = -1;
  std::future<result<run_result>> run;
};

gated_shell start_gated_shell(const std::string& script, resource_limits limits) {
  auto dir = scratch_dir::create(default_scratch_root(), "process-test-");
  EXPECT_TRUE(dir.ok()) << dir.err().message;
  int job[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, job), 0);
  int gate[2];
  EXPECT_EQ(::pipe2(gate, O_CLOEXEC), 0);
  run_request request;
  request.argv = {"/bin/sh", "-c", script};
  request.working_dir = dir->path();
  request.env = base_env();
  request.limits = limits;
  request.pass_fd = job[1];
  request.start_gate_fd = gate[0];
  gated_shell g{std::move(dir.value()), job[0], gate[1], {}};
  g.run = std::async(std::launch::async, [request] { return run_isolated(request); });
  return g;
}

void feed_gated_shell(gated_shell& g) {
  ::close(g.gate);
  EXPECT_EQ(::write(g.job, "x", 1), 1);
  ::close(g.job);
}

// Waiting for its job twice as long as its wall-clock limit, it is not killed: the limit starts at
// the gate, and the run's wall time counts from there. (The limit leaves a loaded machine seconds
// for the read and the echo after the gate.)
TEST(ProcessStartGateTest, TheWallClockStartsWhenTheGateOpens) {
  resource_limits limits;
  limits.wall = std::chrono::seconds(2);
  auto g = start_gated_shell("head -c 1 <&3 >/dev/null; echo fed", limits);
  const auto begun = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(4));
  feed_gated_shell(g);
  auto r = g.run.get();
  const auto total = std::chrono::steady_clock::now() - begun;
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_FALSE(r->timed_out);
  EXPECT_TRUE(r->exited);
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->stdout_text, "fed\n");
  EXPECT_LT(r->wall, total - std::chrono::milliseconds(3900));
  expect_nothing_left(*r);
}

// From the gate on, the limit holds whole.
TEST(ProcessStartGateTest, AfterTheGateTheWallClockLimitHolds) {
  resource_limits limits;
  limits.wall = std::chrono::seconds(1);
  auto g = start_gated_shell("head -c 1 <&3 >/dev/null; echo fed; sleep 60", limits);
  feed_gated_shell(g);
  auto r = g.run.get();
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->stdout_text, "fed\n");
  EXPECT_GE(r->wall, std::chrono::seconds(1));
  expect_nothing_left(*r);
}

}  // namespace
}  // namespace leap::sandbox

// Hostile candidates for the CPU kinds: each must get the right verdict within its limits and
// leave no process and no file behind. All candidates of a kind run concurrently through the
// verifier's pools, so the file stays within seconds.
#include "sandbox/verifier.hpp"
#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <chrono>
#include <filesystem>
#include <functional>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace leap::sandbox {
namespace {

namespace fs = std::filesystem;
using testing::fenced;

constexpr const char* k_secret = "hunter2-leap-secret";

struct hostile_case {
  std::string name;
  std::string code;
  verdict_category expected;
  std::string feedback_contains;  // may be empty
  std::shared_ptr<const task> t;  // null: the file's default task
};

// A loopback listener the candidates try to reach; it must never see a connection.
class listener {
 public:
  listener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~listener() { ::close(fd_); }
  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] bool was_contacted() const {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// NOLINTNEXTLINE(readability-identifier-naming): gtest names the test suite after the fixture.
class HostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    scratch_root_ = default_scratch_root() / ("hostile-" + std::to_string(::getpid()));
    fs::remove_all(scratch_root_);
    forbidden_dir_ = default_scratch_root().parent_path() /
                     ("leap-hostile-target-" + std::to_string(::getpid()));
    fs::create_directories(forbidden_dir_);
    ::chmod(forbidden_dir_.c_str(), 0755);
    tmp_escape_ = "/tmp/leap-hostile-escape-" + std::to_string(::getpid());
    ::setenv("LEAP_HOSTILE_SECRET", k_secret, 1);
  }
  void TearDown() override {
    ::unsetenv("LEAP_HOSTILE_SECRET");
    std::error_code ec;
    fs::remove_all(forbidden_dir_, ec);
    fs::remove_all(scratch_root_, ec);
    fs::remove(tmp_escape_, ec);
  }

  // Runs every case concurrently and checks verdicts, timing, leftovers.
  void run_cases(const std::shared_ptr<const task>& default_task,
                 const std::vector<hostile_case>& cases, const std::string& lang) {
    verifier_config config;
    config.engine = testing::test_engine_config();
    config.engine.scratch_root = scratch_root_;
    config.compile_workers = 2;
    config.run_slots = static_cast<int>(cases.size());  // the runs mostly wait: all at once
    config.queue_capacity = cases.size();
    auto v = verifier::create(config);
    ASSERT_TRUE(v.ok()) << v.err().message;
    const auto started = std::chrono::steady_clock::now();
    std::vector<std::future<result<verdict>>> futures;
    futures.reserve(cases.size());
    for (const auto& c : cases) {
      futures.push_back((*v)->submit(c.t ? c.t : default_task, fenced(lang, c.code)));
    }
    for (std::size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(cases[i].name);
      ASSERT_EQ(futures[i].wait_for(std::chrono::seconds(90)), std::future_status::ready)
          << "verdict never came";
      auto verdict = futures[i].get();
      ASSERT_TRUE(verdict.ok()) << verdict.err().message;
      EXPECT_EQ(std::string(to_string(verdict->category)), to_string(cases[i].expected))
          << verdict->feedback << "\n--- diagnostics\n"
          << verdict->diagnostics;
      if (!cases[i].feedback_contains.empty()) {
        EXPECT_NE(verdict->feedback.find(cases[i].feedback_contains), std::string::npos)
            << verdict->feedback;
      }
      EXPECT_EQ(verdict->feedback.find(k_secret), std::string::npos);
      EXPECT_LT(verdict->run_ms, 8000.0) << "over its limit";
    }
    v->reset();
    const double total_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf("%zu hostile %s candidates verified in %.1f s\n", cases.size(), lang.c_str(),
                total_s);

    // Nothing left: no process of any sandbox uid (waiting a little for runs of other test
    // processes that may share the host), no scratch directory, no escaped file.
    std::vector<pid_t> left;
    testing::wait_until(
        [&] {
          left = processes_with_uid_in(sandbox_uids());
          return left.empty();
        },
        std::chrono::seconds(10));
    EXPECT_TRUE(left.empty()) << left.size() << " sandbox processes survived, first pid "
                              << left.front();
    std::size_t entries = 0;
    for (const auto& e : fs::directory_iterator(scratch_root_)) {
      ADD_FAILURE() << "left in the scratch root: " << e.path().filename();
      ++entries;
    }
    EXPECT_EQ(entries, 0U);
    EXPECT_FALSE(fs::exists(forbidden_dir_ / "escaped.txt"));
    EXPECT_FALSE(fs::exists(tmp_escape_));
    EXPECT_FALSE(net_.was_contacted()) << "a candidate reached the loopback listener";
  }

  fs::path scratch_root_;
  fs::path forbidden_dir_;
  std::string tmp_escape_;
  listener net_;
};

// C headers only unless a case needs more: every candidate is compiled, and C++ headers cost
// seconds.
std::string cpp_solve(const std::string& before,
                      const std::string& body = "for (int i = 0; i < n; ++i) y[i] = 2 * x[i];",
                      const std::string& extra_includes = "") {
  return "#include <unistd.h>\n#include <signal.h>\n#include <stdio.h>\n#include "
         "<stdlib.h>\n#include <string.h>\n" +
         extra_includes + "\nvoid solve(const float* x, float* y, int n) {\n" + before + "\n  " +
         body + "\n}\n";
}

TEST_F(HostileTest, CppCandidates) {
  auto doubling = std::make_shared<const task>(testing::doubling_task(1024));
  auto tiny = std::make_shared<task>(testing::doubling_task(1024));
  tiny->id = "cpp/tiny_scale";
  tiny->reference =
      "void reference(const float* x, float* y, int n) { for (int i = 0; i < n; ++i) y[i] = 1e-7f "
      "* x[i]; }\n";
  const std::string port = std::to_string(net_.port());
  const std::string leak_check =
      "  char path[64]; snprintf(path, sizeof path, \"/proc/%d/environ\", (int)getppid());\n"
      "  const char* files[] = {\"/proc/self/environ\", \"/proc/1/environ\", path};\n"
      "  int leaked = getenv(\"LEAP_HOSTILE_SECRET\") != NULL;\n"
      "  for (const char* p : files) {\n"
      "    FILE* f = fopen(p, \"rb\"); if (!f) continue;\n"
      "    static char buf[1 << 16]; size_t got = fread(buf, 1, sizeof buf - 1, f); fclose(f);\n"
      "    for (size_t i = 0; i + 7 <= got; ++i) if (memcmp(buf + i, \"hunter2\", 7) == 0) leaked "
      "= 1;\n"
      "  }\n"
      "  if (leaked) { for (int i = 0; i < n; ++i) y[i] = 0; return; }";
  const std::vector<hostile_case> cases{
      {"fork_bomb", cpp_solve("  for (;;) fork();"), verdict_category::timeout, "Time limit",
       nullptr},
      {"infinite_loop", cpp_solve("  volatile unsigned k = 0; for (;;) ++k;"),
       verdict_category::timeout, "Time limit", nullptr},
      {"sleep_forever", cpp_solve("  sleep(100000);"), verdict_category::timeout, "wall-clock",
       nullptr},
      {"huge_allocation",
       cpp_solve("  std::vector<char> v(64ULL << 30, 1); y[0] = v[12345];", "",
                 "#include <vector>\n"),
       verdict_category::runtime, "SIGABRT", nullptr},
      {"output_flood",
       cpp_solve("  static char buf[65536]; memset(buf, 'A', sizeof buf); for (;;) fwrite(buf, 1, "
                 "sizeof buf, stdout);"),
       verdict_category::timeout, "", nullptr},
      {"flood_then_correct",
       cpp_solve("  static char buf[65536]; memset(buf, 'B', sizeof buf); for (int i = 0; i < 300; "
                 "++i) fwrite(buf, 1, sizeof buf, stderr);"),
       verdict_category::pass, "", nullptr},
      {"write_outside_scratch",
       cpp_solve("  FILE* f = fopen(\"" + (forbidden_dir_ / "escaped.txt").string() +
                 "\", \"w\"); if (f) { fputs(\"x\", f); fclose(f); }\n"
                 "  FILE* g = fopen(\"" +
                 tmp_escape_ + "\", \"w\"); if (g) { fputs(\"x\", g); fclose(g); }"),
       verdict_category::pass, "", nullptr},
      {"read_environment", cpp_solve(leak_check), verdict_category::pass, "", nullptr},
      {"network",
       cpp_solve("  int s = socket(AF_INET, SOCK_STREAM, 0); sockaddr_in a{}; a.sin_family = "
                 "AF_INET; a.sin_port = htons(" +
                     port +
                     "); a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);\n"
                     "  if (connect(s, (sockaddr*)&a, sizeof a) == 0) { for (int i = 0; i < n; "
                     "++i) y[i] = 0; return; }",
                 "for (int i = 0; i < n; ++i) y[i] = 2 * x[i];",
                 "#include <sys/socket.h>\n#include <netinet/in.h>\n#include <arpa/inet.h>\n"),
       verdict_category::pass, "", nullptr},
      {"child_outlives",
       cpp_solve("  if (fork() == 0) { setsid(); if (fork() == 0) { sleep(100000); } _exit(0); }"),
       verdict_category::pass, "", nullptr},
      // Its parent is the judge, which shares its uid; the judge's filter lets the program signal
      // only itself, so every kill fails and the (correct) solve() passes, judged as usual.
      {"kill_parent", cpp_solve("  kill(getppid(), SIGKILL); kill(1, SIGKILL); kill(-1, SIGKILL);"),
       verdict_category::pass, "", nullptr},
      {"exit_early", cpp_solve("  exit(0);"), verdict_category::runtime,
       "before the harness finished", nullptr},
      {"forge_harness_output",
       cpp_solve(
           "  FILE* f = fopen(\"out.bin\", \"wb\"); fputs(\"LEAPDUMP\", f); fclose(f); _exit(0);"),
       verdict_category::runtime, "", nullptr},
      {"call_reference",
       "void reference(const float* x, float* y, int n);\nvoid solve(const float* x, float* y, int "
       "n) { reference(x, y, n); }\n",
       verdict_category::compile, "undefined reference to `reference", nullptr},
      {"include_reference",
       "#include \"reference.cpp\"\nvoid solve(const float* x, float* y, int n) { reference(x, y, "
       "n); }\n",
       verdict_category::forbidden, "#include", nullptr},
      {"write_into_inputs",
       cpp_solve("  float* w = const_cast<float*>(x); for (int i = 0; i < n; ++i) w[i] = 0;",
                 "for (int i = 0; i < n; ++i) y[i] = 0;"),
       verdict_category::wrong_answer, "wrote into its input 'x'", nullptr},
      {"cache_across_trials",
       cpp_solve("  static float cache[1024]; static int cached = 0;\n  if (cached) { for (int i = "
                 "0; i < n; ++i) y[i] = cache[i]; return; }",
                 "for (int i = 0; i < n; ++i) y[i] = cache[i] = 2 * x[i]; cached = 1;"),
       verdict_category::wrong_answer, "trial 2 of 3", nullptr},
      {"zeros_on_near_zero_reference", cpp_solve("", "for (int i = 0; i < n; ++i) y[i] = 0;"),
       verdict_category::wrong_answer, "relative L2", tiny},
  };
  run_cases(doubling, cases, "cpp");
}

TEST_F(HostileTest, PythonCandidates) {
  auto add = std::make_shared<const task>(testing::python_add_task());
  const std::string good = "\ndef add(a, b):\n    return a + b\n";
  const std::string port = std::to_string(net_.port());
  const std::vector<hostile_case> cases{
      {"fork_bomb",
       "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n" +
           good,
       verdict_category::timeout, "Time limit", nullptr},
      {"infinite_loop", "def add(a, b):\n    while True:\n        pass\n",
       verdict_category::timeout, "Time limit", nullptr},
      {"sleep_forever", "import time\ntime.sleep(100000)\n" + good, verdict_category::timeout,
       "wall-clock", nullptr},
      {"huge_allocation", "def add(a, b):\n    x = bytearray(64 * 2**30)\n    return a + b\n",
       verdict_category::runtime, "MemoryError", nullptr},
      {"output_flood", "import sys\nwhile True:\n    sys.stdout.write('A' * 65536)\n" + good,
       verdict_category::timeout, "", nullptr},
      {"write_outside_scratch",
       "for p in ['" + (forbidden_dir_ / "escaped.txt").string() + "', '" + tmp_escape_ +
           "']:\n    try:\n        open(p, 'w').write('x')\n    except OSError:\n        pass\n" +
           good,
       verdict_category::pass, "", nullptr},
      {"read_environment",
       "import os\nleak = 'hunter2' in str(os.environ)\nfor p in ['/proc/1/environ', "
       "'/proc/%d/environ' % os.getppid()]:\n"
       "    try:\n        leak = leak or b'hunter2' in open(p, 'rb').read()\n    except OSError:\n "
       "       pass\n"
       "def add(a, b):\n    return 0 if leak else a + b\n",
       verdict_category::pass, "", nullptr},
      {"network",
       "import socket\nreached = False\ntry:\n    socket.create_connection(('127.0.0.1', " + port +
           "), timeout=1)\n    reached = True\nexcept OSError:\n    pass\ndef add(a, b):\n    "
           "return 0 if reached else a + b\n",
       verdict_category::pass, "", nullptr},
      {"child_outlives",
       "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(100000)\n    "
       "os._exit(0)\n" +
           good,
       verdict_category::pass, "", nullptr},
      {"kill_parent",
       "import os, signal\nfor pid in (os.getppid(), 1, -1):\n    try:\n        os.kill(pid, "
       "signal.SIGKILL)\n"
       "    except OSError:\n        pass\n" +
           good,
       verdict_category::pass, "", nullptr},
      {"exit_at_import", "import sys\nsys.exit(0)\n", verdict_category::runtime, "SystemExit",
       nullptr},
      {"hard_exit_at_import", "import os\nos._exit(0)\n", verdict_category::runtime,
       "before the tests finished", nullptr},
      // The judge's result is written in the judge's own folder, which the candidate cannot reach.
      {"forge_result",
       "import os, json\nopen('.leap_result', 'w').write(json.dumps({'status': 'passed', 'total': "
       "2, 'nonce': 'guess'}))\nos._exit(0)\n",
       verdict_category::runtime, "before the tests finished", nullptr},
  };
  run_cases(add, cases, "python");
}

}  // namespace
}  // namespace leap::sandbox

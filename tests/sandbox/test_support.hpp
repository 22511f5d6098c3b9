// Shared fixtures of the sandbox tests: small tasks built in code, one engine per test binary.
#pragma once

#include "sandbox/engine.hpp"
#include "sandbox/process.hpp"
#include "sandbox/task.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <unistd.h>
#include <vector>

namespace leap::sandbox::testing {

// y[i] = 2 * x[i] for n floats.
inline task doubling_task(int n = 1024) {
  task t;
  t.id = "cpp/doubling";
  t.kind = task_kind::cpp;
  t.args = {{"x", value_type::f32, arg_role::input, "n", -1.0, 1.0, 0},
            {"y", value_type::f32, arg_role::output, "n", -1.0, 1.0, 0},
            {"n", value_type::i32, arg_role::scalar, "", 0, 0, static_cast<double>(n)}};
  t.reference =
      "void reference(const float* x, float* y, int n) { for (int i = 0; i < n; ++i) y[i] = 2.0f * "
      "x[i]; }\n";
  return t;
}

inline task python_add_task() {
  task t;
  t.id = "python/add";
  t.kind = task_kind::python;
  t.tests =
      "from solution import add\n"
      "\n"
      "def test_small():\n"
      "    assert add(1, 2) == 3\n"
      "\n"
      "def test_negative():\n"
      "    assert add(-5, 2) == -3, 'negative numbers'\n";
  return t;
}

// c = a + b for n floats on the GPU (the default cuda forbidden list).
inline task cuda_vector_add_task(int n = 10007) {
  task t;
  t.id = "cuda/test_vector_add";
  t.kind = task_kind::cuda;
  t.args = {{"a", value_type::f32, arg_role::input, "n", -1.0, 1.0, 0},
            {"b", value_type::f32, arg_role::input, "n", -1.0, 1.0, 0},
            {"c", value_type::f32, arg_role::output, "n", 0, 0, 0},
            {"n", value_type::i32, arg_role::scalar, "", 0, 0, static_cast<double>(n)}};
  t.reference =
      "void reference(const float* a, const float* b, float* c, int n) { for (int i = 0; i < n; "
      "++i) c[i] = a[i] + b[i]; }\n";
  t.forbidden = default_forbidden(task_kind::cuda);
  return t;
}

// A correct solve() for cuda_vector_add_task.
inline const std::string k_cuda_vector_add =
    "__global__ void add(const float* a, const float* b, float* c, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) c[i] = a[i] + b[i];\n"
    "}\n"
    "void solve(const float* a, const float* b, float* c, int n) {\n"
    "  add<<<(n + 255) / 256, 256>>>(a, b, c, n);\n"
    "}\n";

// A fresh folder under the system's temporary folder (`prefix` then six random characters),
// removed with everything in it when this goes; path() is empty when it could not be made.
class temp_folder {
 public:
  explicit temp_folder(const std::string& prefix)
      : path_((std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string()) {
    if (::mkdtemp(path_.data()) == nullptr) {
      path_.clear();
    }
  }
  temp_folder(const temp_folder&) = delete;
  temp_folder& operator=(const temp_folder&) = delete;
  ~temp_folder() {
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Damages the cache entries under `folder` that hold `magic`: for each, `where(bytes, magic_at)`
// names the offset of one byte to change (none: the entry is left as it is and not counted), and
// `changed(old)` gives its new value. Returns how many entries it changed, so that a caller whose
// format moved sees its count fail instead of testing an undamaged cache.
inline int damage_cache_entries(
    const std::filesystem::path& folder, std::string_view magic,
    const std::function<std::optional<std::size_t>(const std::string&, std::size_t)>& where,
    const std::function<char(char)>& changed) {
  int damaged = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(folder)) {
    if (!entry.is_regular_file()) {
      continue;
    }
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::size_t at = bytes.find(magic);
    if (at == std::string::npos) {
      continue;
    }
    const std::optional<std::size_t> offset = where(bytes, at);
    if (!offset || *offset >= bytes.size()) {
      continue;
    }
    f.seekp(static_cast<std::streamoff>(*offset));
    f.put(changed(bytes[*offset]));
    ++damaged;
  }
  return damaged;
}

// One process as /proc shows it to this one (host pids).
struct process_entry {
  pid_t pid = 0;
  char state = 0;  // 'Z': a zombie
  pid_t parent = 0;
  std::string cmdline;  // the arguments, each followed by a NUL
};

// Every process /proc lists now; one that ends while it is read is left out.
inline std::vector<process_entry> live_processes() {
  std::vector<process_entry> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    // The command name may hold spaces and parentheses: the fields after it follow the last ')'.
    const auto close = line.rfind(')');
    if (close == std::string::npos) {
      continue;
    }
    process_entry p;
    p.pid = static_cast<pid_t>(std::stol(name));
    std::istringstream rest(line.substr(close + 1));
    rest >> p.state >> p.parent;
    std::ifstream cmdline(entry.path() / "cmdline", std::ios::binary);
    p.cmdline.assign(std::istreambuf_iterator<char>(cmdline), std::istreambuf_iterator<char>());
    out.push_back(std::move(p));
  }
  return out;
}

inline std::string fenced(const std::string& lang, const std::string& code) {
  return "Here is my solution:\n```" + lang + "\n" + code + "```\n";
}

// A cache directory private to this test process, removed at exit.
inline const std::filesystem::path& test_cache_dir() {
  static const std::filesystem::path dir = [] {
    auto p = default_scratch_root().parent_path() /
             ("leap-sandbox-test-cache-" + std::to_string(::getpid()));
    std::filesystem::remove_all(p);
    return p;
  }();
  static const struct cleanup {
    ~cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } at_exit;
  return dir;
}

// The compile cache folder that the tests' processes of one ctest run share, or empty (a test run
// alone, outside ctest). tests/CMakeLists.txt sets LEAP_SANDBOX_CORPUS_CACHE for the tests it
// lists (the adversarial corpus, the KernelBench and engine profiling tests) and a fixture empties
// the folder before the first of them and removes it after the last. A cache entry is
// content-addressed and renamed into place whole, so a shared entry is the very build a private
// cache would have made: sharing only saves builds, and a test that finds nothing there builds
// what it needs. An engine reads the folder's entries when it is created: what another process
// stores later is not seen.
inline std::filesystem::path ctest_shared_cache(const std::string& subfolder) {
  const char* dir = std::getenv("LEAP_SANDBOX_CORPUS_CACHE");
  return dir != nullptr && *dir != '\0' ? std::filesystem::path(dir) / subfolder
                                        : std::filesystem::path();
}

inline engine_config test_engine_config() {
  engine_config c;
  c.cache_dir = test_cache_dir();
  c.cache_max_bytes = 512ULL << 20;
  c.run_limits.wall = std::chrono::seconds(4);
  c.run_limits.cpu_seconds = 3;
  c.run_limits.address_space_bytes = 1ULL << 30;
  c.run_limits.processes = 32;
  // Small enough that the adversarial tree-memory candidate's children (80 MiB each) cannot all
  // fit.
  c.run_limits.memory_bytes = 1ULL << 30;
  c.python_limits.wall = std::chrono::seconds(6);
  c.python_limits.cpu_seconds = 4;
  c.python_limits.processes = 32;
  // Where python3 with torch is not on the sandbox's PATH (a venv on the GPU machine), point here.
  if (const char* python = std::getenv("LEAP_SANDBOX_TEST_PYTHON"); python && *python) {
    c.python = python;
  }
  return c;
}

inline engine& shared_engine() {
  static std::unique_ptr<engine> e = [] {
    auto created = engine::create(test_engine_config());
    if (!created) {
      ADD_FAILURE() << created.err().message;
      std::abort();
    }
    return std::move(created.value());
  }();
  return *e;
}

// Awaits `condition` (polled, for state that has nothing to wait on: a pipeline's counters, other
// processes): true once it holds, false when `timeout` passed first. The sandbox tests' one sleep
// that waits: the pause between polls, 1 ms growing to 50 ms so a slow condition costs little CPU.
// The deadline is generous because a loaded machine only makes the condition later, never false.
template <class Condition>
bool wait_until(Condition condition, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::chrono::milliseconds pause(1);
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return false;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  return true;
}

// True when a CUDA GPU is present; `why` says what is missing otherwise.
inline bool gpu_present(std::string* why) {
  if (!std::filesystem::exists("/dev/nvidia0")) {
    *why = "no GPU: /dev/nvidia0 does not exist";
    return false;
  }
  if (std::system("nvidia-smi -L >/dev/null 2>&1") != 0) {
    *why = "no GPU: nvidia-smi fails";
    return false;
  }
  return true;
}

// True when the host's ptrace rules let a process read the memory of a child it started (Yama's
// ptrace_scope 0 or 1, or no Yama); `why` says otherwise. Where they do not, the KernelBench judge
// leaves the outputs' copy to the runner, and says so.
inline bool parents_read_children(std::string* why) {
  std::ifstream scope("/proc/sys/kernel/yama/ptrace_scope");
  int level = 0;
  if (scope >> level && level >= 2) {
    *why = "Yama's ptrace_scope is " + std::to_string(level) +
           ": a process may not read its child's memory on this host";
    return false;
  }
  return true;
}

}  // namespace leap::sandbox::testing

// The adversarial suite: candidates that try to be paid without solving their task, each with the
// verdict it must get. One file per candidate under tests/sandbox/adversarial/<kind>/, its header
// (comment lines at the top, `//` or `#`) naming what the runner needs:
//
//   task: cpp/prefix_sum_int           a suite id, or a file under tests/sandbox/adversarial/ (a
//                                      KernelBench problem .py, a task directory)
//   expect: wrong_answer | runtime     the verdict categories it may get (any of them)
//   class: atexit rewrites the dump    what it tries, for docs/threat-model.md
//   feedback: text                     optional: a substring the feedback must hold
//   gpu: true                          optional: needs a CUDA GPU (skipped without one)
//   max_speedup: 20                    optional: a timing attack on a correct solution: it is
//                                      verified with timing on and may pass (`expect: pass`),
//                                      but never with a speedup above this bound (the faked one
//                                      is orders of magnitude above it)
//
// Every candidate must be judged (an infrastructure error fails the test: a candidate must never
// be able to stop a run), get one of its expected categories, and never have secrets of the host
// in its feedback.
#include "sandbox/engine.hpp"
#include "sandbox/task.hpp"
#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace leap::sandbox {
namespace {

namespace fs = std::filesystem;
using testing::fenced;

const fs::path& corpus_root() {
  // LEAP_ADVERSARIAL_CORPUS points an older build at a newer corpus (to show that it pays them).
  static const fs::path root = [] {
    const char* other = std::getenv("LEAP_ADVERSARIAL_CORPUS");
    return other && *other ? fs::path(other)
                           : fs::path(LEAP_SOURCE_DIR) / "tests" / "sandbox" / "adversarial";
  }();
  return root;
}

struct adversarial_case {
  fs::path file;
  std::string kind;  // the folder: cpp, cuda, python, kernelbench
  std::string task_spec;
  std::set<std::string> expected;
  std::string attack_class;
  std::string feedback_contains;
  bool gpu = false;
  double max_speedup = 0;  // > 0: a timing attack, verified with timing on
  std::string code;  // the whole file, header included: the candidate as the model would write it
};

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  const auto e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? std::string{} : s.substr(b, e - b + 1);
}

// Reads the header; an unreadable or incomplete header is a test failure naming the file.
adversarial_case read_case(const fs::path& file) {
  adversarial_case c;
  c.file = file;
  c.kind = file.parent_path().filename().string();
  std::ifstream in(file);
  std::stringstream all;
  all << in.rdbuf();
  c.code = all.str();
  std::istringstream lines(c.code);
  std::string line;
  while (std::getline(lines, line)) {
    const std::string t = trim(line);
    std::string body;
    if (t.rfind("//", 0) == 0) {
      body = trim(t.substr(2));
    } else if (t.rfind('#', 0) == 0 && t.rfind("#include", 0) != 0 && t.rfind("#define", 0) != 0) {
      body = trim(t.substr(1));
    } else if (t.empty()) {
      continue;
    } else {
      break;
    }
    const auto colon = body.find(':');
    if (colon == std::string::npos) {
      continue;
    }
    const std::string key = trim(body.substr(0, colon));
    const std::string value = trim(body.substr(colon + 1));
    if (key == "task") {
      c.task_spec = value;
    } else if (key == "expect") {
      std::istringstream alternatives(value);
      std::string one;
      while (std::getline(alternatives, one, '|')) {
        c.expected.insert(trim(one));
      }
    } else if (key == "class") {
      c.attack_class = value;
    } else if (key == "feedback") {
      c.feedback_contains = value;
    } else if (key == "max_speedup") {
      c.max_speedup = std::stod(value);
    } else if (key == "gpu") {
      c.gpu = value == "true" || value == "yes";
    }
  }
  return c;
}

std::vector<adversarial_case> corpus() {
  std::vector<adversarial_case> cases;
  std::error_code ec;
  for (const auto& kind_dir : fs::directory_iterator(corpus_root(), ec)) {
    if (!kind_dir.is_directory()) {
      continue;
    }
    const std::string kind = kind_dir.path().filename().string();
    if (kind != "cpp" && kind != "cuda" && kind != "python" && kind != "kernelbench") {
      continue;
    }
    for (const auto& f : fs::directory_iterator(kind_dir.path())) {
      if (f.is_regular_file() && f.path().filename().string()[0] != '.') {
        cases.push_back(read_case(f.path()));
      }
    }
  }
  std::sort(cases.begin(), cases.end(),
            [](const auto& a, const auto& b) { return a.file < b.file; });
  return cases;
}

task load_task(const adversarial_case& c) {
  const fs::path local = corpus_root() / c.task_spec;
  auto t = resolve_task(fs::exists(local) ? local.string() : c.task_spec,
                        fs::path(LEAP_SOURCE_DIR) / "sandbox" / "suite");
  if (!t) {
    ADD_FAILURE() << c.file << ": task '" << c.task_spec << "': " << t.err().message;
    return {};
  }
  return *t;
}

std::string fence_language(const std::string& kind) {
  if (kind == "cuda") {
    return "cuda";
  }
  if (kind == "cpp") {
    return "cpp";
  }
  return "python";
}

// The folder of the compile cache that the corpus's processes share, or empty. Under ctest every
// case is a process of its own, and most attack one of a few tasks (26 cpp/prefix_sum_int): with a
// private cache each built that task's harness, reference and judge again. tests/CMakeLists.txt
// sets LEAP_SANDBOX_CORPUS_CACHE to a folder that a fixture empties before the first case of a
// ctest run and removes after the last, so nothing outlives the run that built it. Each
// candidate's own build is still made (its source is its own), and the cache is content-addressed:
// a shared entry is the very build a private cache would have made. On the 2-core machine the 46
// cpp and cuda cases, a process each, took 66 CPU-s with private caches and 45 with the shared one
// (KernelBench references are kept in memory only: those cases gain nothing).
fs::path corpus_shared_cache() {
  const char* dir = std::getenv("LEAP_SANDBOX_CORPUS_CACHE");
  return dir != nullptr && *dir != '\0' ? fs::path(dir) : fs::path();
}

// The engine of the corpus: the shared tests' configuration, with the corpus's cache when set.
engine& corpus_engine() {
  static std::unique_ptr<engine> e = [] {
    engine_config config = testing::test_engine_config();
    if (const auto shared = corpus_shared_cache(); !shared.empty()) {
      config.cache_dir = shared;
    }
    auto created = engine::create(std::move(config));
    if (!created) {
      ADD_FAILURE() << created.err().message;
      std::abort();
    }
    return std::move(created.value());
  }();
  return *e;
}

// The engine of the timing attacks: the corpus's configuration with timed repetitions.
engine& timing_engine() {
  static std::unique_ptr<engine> e = [] {
    engine_config config = testing::test_engine_config();
    const auto shared = corpus_shared_cache();
    config.cache_dir = (shared.empty() ? testing::test_cache_dir() : shared) / "timed-adversarial";
    // 20: 23 timed calls, 8 of them checked: an attack that answers from a memo keyed by its
    // guess of the timing set (memo_by_call_order) is right by luck about 1 in 10^4 runs.
    config.timing_reps = 20;
    auto created = engine::create(std::move(config));
    if (!created) {
      ADD_FAILURE() << created.err().message;
      std::abort();
    }
    return std::move(created.value());
  }();
  return *e;
}

// Texts that only the host or the task holds: a feedback quoting one of them leaked it.
std::vector<std::string> host_secrets() {
  return {"root:x:0:0", "LEAP_SOURCE_DIR", LEAP_SOURCE_DIR};
}

TEST(Adversarial, CorpusIsWellFormed) {
  const auto cases = corpus();
  ASSERT_FALSE(cases.empty()) << "no candidates under " << corpus_root();
  std::map<std::string, int> per_kind;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file.string());
    EXPECT_FALSE(c.task_spec.empty()) << "no 'task:' line";
    EXPECT_FALSE(c.expected.empty()) << "no 'expect:' line";
    EXPECT_FALSE(c.attack_class.empty()) << "no 'class:' line";
    if (c.max_speedup <= 0) {
      EXPECT_EQ(c.expected.count("pass"), 0U)
          << "an adversarial candidate must not pass (a timing attack on a correct solution names "
             "its max_speedup)";
    }
    for (const auto& e : c.expected) {
      static const std::set<std::string> known{"format",  "compile",      "forbidden", "runtime",
                                               "timeout", "wrong_answer", "pass"};
      EXPECT_EQ(known.count(e), 1U) << "unknown category '" << e << "'";
    }
    ++per_kind[c.kind];
  }
}

// Test listings name the file, not the struct's bytes.
// NOLINTNEXTLINE(readability-identifier-naming): the name gtest looks up to print a parameter.
void PrintTo(const adversarial_case& c, std::ostream* os) {
  *os << c.kind << "/" << c.file.filename().string();
}

// NOLINTNEXTLINE(readability-identifier-naming): gtest names the test suite after the fixture.
class AdversarialCase : public ::testing::TestWithParam<adversarial_case> {};

TEST_P(AdversarialCase, IsNotPaid) {
  const adversarial_case& c = GetParam();
  std::string why;
  if (c.gpu && !testing::gpu_present(&why)) {
    GTEST_SKIP() << why;
  }
  const task t = load_task(c);
  if (t.id.empty()) {
    return;
  }
  engine& judge = c.max_speedup > 0 ? timing_engine() : corpus_engine();
  auto v = judge.verify(t, fenced(fence_language(c.kind), c.code), c.gpu ? 0 : -1);
  ASSERT_TRUE(v.ok())
      << "the candidate caused an infrastructure error (it must only ever fail its own turn): "
      << v.err().message;
  const std::string got = to_string(v->category);
  std::string expected;
  for (const auto& e : c.expected) {
    expected += (expected.empty() ? "" : " | ") + e;
  }
  EXPECT_EQ(c.expected.count(got), 1U)
      << c.attack_class << ": got " << got << ", expected " << expected << "\n"
      << v->feedback << "\n--- diagnostics\n"
      << v->diagnostics;
  if (c.max_speedup > 0 && v->passed) {
    ASSERT_TRUE(v->speedup.has_value()) << "a timed pass without a speedup";
    EXPECT_LE(*v->speedup, c.max_speedup) << c.attack_class << ": the faked speedup was paid\n"
                                          << v->diagnostics;
  }
  if (!c.feedback_contains.empty()) {
    EXPECT_NE(v->feedback.find(c.feedback_contains), std::string::npos) << v->feedback;
  }
  for (const auto& secret : host_secrets()) {
    EXPECT_EQ(v->feedback.find(secret), std::string::npos)
        << "the feedback quotes '" << secret << "'";
  }
}

std::string case_name(const ::testing::TestParamInfo<adversarial_case>& info) {
  std::string name = info.param.kind + "_" + info.param.file.stem().string();
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) {
      ch = '_';
    }
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Corpus, AdversarialCase, ::testing::ValuesIn(corpus()), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(AdversarialCase);

}  // namespace
}  // namespace leap::sandbox

// KernelBench extension builds (issue 30): torch's headers precompiled once per toolchain and flags
// and used by every build in the compile pool; a damaged header is built around; the same source's
// recording reused instead of a second recorder run. Real g++, python3 and torch (Debian's CPU
// build); skipped with the reason where torch is missing.
#include "sandbox/engine.hpp"
#include "tests/sandbox/kernelbench_support.hpp"
#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace leap::sandbox::kbpch_test {
namespace {

namespace fs = std::filesystem;
using testing::fenced;

bool torch_available(const engine_config& config, std::string* why) {
  return testing::python_has_module(config.python, "torch", why);
}

task problem_task() {
  task t;
  t.id = "kernelbench/level1/1_ScaleAdd";
  t.kind = task_kind::kernelbench;
  t.reference = testing::k_scale_add_problem;
  t.own_kernel = own_kernel_policy::off;
  return t;
}

// A load_inline candidate whose C++ differs by `tag` (its own extension and cache key).
std::string candidate(const std::string& tag) {
  return "import torch\nfrom torch.utils.cpp_extension import load_inline\n"
         "ext = load_inline(name='leap_pch_" +
         tag +
         "', cpp_sources=\"\"\"torch::Tensor scale_add(torch::Tensor a, torch::Tensor b, double s)"
         " { return a * s + b; } // " +
         tag + " " + std::to_string(::getpid()) +
         "\"\"\", functions=['scale_add'], extra_cflags=['-O1'])\n"
         "class ModelNew(torch.nn.Module):\n    def __init__(self, s):\n"
         "        super().__init__()\n        self.s = s\n"
         "    def forward(self, a, b):\n        return ext.scale_add(a, b, self.s)\n";
}

std::vector<fs::path> pch_folders(const fs::path& cache) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(cache / "folders", ec)) {
    if (f.path().filename().string().find(".tmp") == std::string::npos) {
      out.push_back(f.path());
    }
  }
  return out;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// One test (the header costs a minute to build): two concurrent builds make one header and both
// use it; the same source verified again runs no recorder, still builds an extension the cache no
// longer holds, and uses the header without building it again; a damaged header is refused by g++
// and the build is made without it (last: a dropped header would be built again).
TEST(KernelBenchPchTest, TorchHeadersPrecompiledOnceUsedByEveryBuildAndBuiltAround) {
  engine_config config = testing::test_engine_config();
  std::string why;
  if (!torch_available(config, &why)) {
    GTEST_SKIP() << why;
  }
  // Outside /tmp: the sandbox binds the header's folder read-only only from there. Beside the
  // test binary, or under HOME when the build itself lies under /tmp (a clone there, as CI's may).
  const fs::path cache = testing::cache_outside_tmp("kbpch-test-cache-");
  if (cache.empty()) {
    GTEST_SKIP() << "neither the test binary's folder nor HOME lies outside /tmp, where the "
                    "sandbox could show a precompiled header";
  }
  fs::remove_all(cache);
  struct cleanup {
    fs::path dir;
    ~cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } at_exit{cache};
  config.cache_dir = cache;
  config.cache_max_bytes = 64ULL << 20;  // the header's folder is not counted against this
  config.kernelbench_device = "cpu";
  config.trials = 1;
  auto e = engine::create(config);
  ASSERT_TRUE(e.ok()) << e.err().message;

  result<verdict> first = error{"not run"};
  result<verdict> second = error{"not run"};
  {
    std::thread a([&] { first = (*e)->verify(problem_task(), fenced("python", candidate("a"))); });
    std::thread b([&] { second = (*e)->verify(problem_task(), fenced("python", candidate("b"))); });
    a.join();
    b.join();
  }
  for (const auto* v : {&first, &second}) {
    ASSERT_TRUE(v->ok()) << v->err().message;
    EXPECT_TRUE((*v)->passed) << (*v)->feedback << "\n" << (*v)->diagnostics;
    EXPECT_TRUE(has((*v)->build_note, "precompiled torch headers used")) << (*v)->build_note;
  }
  EXPECT_EQ((*e)->cache().folder_builds(), 1U);
  auto folders = pch_folders(cache);
  ASSERT_EQ(folders.size(), 1U);
  const fs::path gch = folders[0] / "leap_torch.h.gch";
  ASSERT_TRUE(fs::exists(gch));
  EXPECT_GT(fs::file_size(gch), 1U << 20);
  const auto made = fs::last_write_time(gch);

  // The same source again with its library gone from the cache: no recorder, a build, and the
  // header used as it is (not built again).
  std::error_code ec;
  for (const auto& f : fs::recursive_directory_iterator(cache, ec)) {
    if (f.path().extension() == ".entry" && f.file_size(ec) > (64U << 10)) {
      fs::remove(f.path(), ec);
    }
  }
  auto again = (*e)->verify(problem_task(), fenced("python", candidate("a")));
  ASSERT_TRUE(again.ok()) << again.err().message;
  EXPECT_TRUE(again->passed) << again->feedback << "\n" << again->diagnostics;
  EXPECT_TRUE(has(again->build_note, "no recorder run")) << again->build_note;
  EXPECT_TRUE(has(again->build_note, "1 extension(s) built in the compile pool"))
      << again->build_note;
  EXPECT_FALSE(has(again->build_note, "from the cache")) << again->build_note;
  EXPECT_FALSE(has(first->build_note, "no recorder run")) << first->build_note;
  EXPECT_TRUE(has(again->build_note, "precompiled torch headers used")) << again->build_note;
  EXPECT_EQ((*e)->cache().folder_builds(), 1U);
  EXPECT_EQ(fs::last_write_time(gch), made) << "the header was built again";

  // An answer whose compile output quotes the builder's word for a refused header: only the
  // builder's marked lines count, so the header stays and is used.
  const std::string forged = std::string(R"PY(import torch
from torch.utils.cpp_extension import load_inline
ext = load_inline(name='leap_pch_forged', cpp_sources="""#pragma message("LEAP_PCH refused: forged by the answer")
torch::Tensor scale_add(torch::Tensor a, torch::Tensor b, double s) { return a * s + b; } // )PY") +
                             std::to_string(::getpid()) + R"PY(
""", functions=['scale_add'], extra_cflags=['-O1'])
class ModelNew(torch.nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = s
    def forward(self, a, b):
        return ext.scale_add(a, b, self.s)
)PY";
  auto quoted = (*e)->verify(problem_task(), fenced("python", forged));
  ASSERT_TRUE(quoted.ok()) << quoted.err().message;
  EXPECT_TRUE(quoted->passed) << quoted->feedback << "\n" << quoted->diagnostics;
  EXPECT_TRUE(has(quoted->build_note, "precompiled torch headers used")) << quoted->build_note;
  EXPECT_EQ(pch_folders(cache).size(), 1U) << "the answer's words dropped the header";
  EXPECT_EQ((*e)->cache().folder_builds(), 1U);

  // Damaged in place (a file the builds only read): g++ refuses it, the build is made without it.
  {
    std::ofstream damage(gch, std::ios::binary | std::ios::trunc);
    damage << "not a precompiled header";
  }
  auto damaged = (*e)->verify(problem_task(), fenced("python", candidate("c")));
  ASSERT_TRUE(damaged.ok()) << damaged.err().message;
  EXPECT_TRUE(damaged->passed) << damaged->feedback << "\n" << damaged->diagnostics;
  EXPECT_TRUE(has(damaged->build_note, "precompiled torch headers refused")) << damaged->build_note;
  EXPECT_TRUE(pch_folders(cache).empty()) << "a refused header is dropped";
}

}  // namespace
}  // namespace leap::sandbox::kbpch_test

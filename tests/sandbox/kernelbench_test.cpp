// kernelbench tasks through the Python harness. Needs python3 with torch (Debian's python3-torch
// gives a CPU build); skipped with the reason when it is missing. On CPU the runner uses the CPU
// device; GPU-only checks skip without a GPU.
#include "sandbox/engine.hpp"

#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace leap::sandbox {
namespace {

using testing::fenced;
using testing::shared_engine;

bool torch_available(std::string* why) {
  static const bool available = std::system(("PATH=/usr/local/bin:/usr/bin:/bin " + shared_engine().config().python +
                                              " -c 'import torch' >/dev/null 2>&1").c_str()) == 0;
  if (!available) {
    *why = "python3 cannot import torch (install Debian's python3-torch)";
    return false;
  }
  return true;
}

const char* k_problem =
    "import torch\n"
    "import torch.nn as nn\n"
    "\n"
    "class Model(nn.Module):\n"
    "    def __init__(self, scale):\n"
    "        super().__init__()\n"
    "        self.scale = scale\n"
    "\n"
    "    def forward(self, a, b):\n"
    "        return a * self.scale + b\n"
    "\n"
    "def get_inputs():\n"
    "    return [torch.randn(32, 16), torch.randn(32, 16)]\n"
    "\n"
    "def get_init_inputs():\n"
    "    return [3.0]\n";

task problem_task() {
  task t;
  t.id = "kernelbench/level1/1_ScaleAdd";
  t.kind = task_kind::kernelbench;
  t.reference = k_problem;
  return t;
}

struct kb_case {
  std::string name;
  std::string code;
  verdict_category expected;
  std::string feedback_contains;
};

TEST(KernelBenchTest, VerdictsOnTheAvailableDevice) {
  std::string why;
  if (!torch_available(&why)) {
    std::printf("skipping: %s\n", why.c_str());
    GTEST_SKIP() << why;
  }
  const std::string head = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def __init__(self, scale):\n"
                           "        super().__init__()\n        self.scale = scale\n\n";
  const std::vector<kb_case> cases{
      {"correct", head + "    def forward(self, a, b):\n        return torch.addcmul(b, a, torch.tensor(self.scale))\n",
       verdict_category::pass, "Correct on all 3 trials"},
      {"wrong_formula", head + "    def forward(self, a, b):\n        return a * self.scale - b\n", verdict_category::wrong_answer,
       "elements differ"},
      {"wrong_shape", head + "    def forward(self, a, b):\n        return (a * self.scale + b).sum(0)\n",
       verdict_category::wrong_answer, "has shape [16], expected [32, 16]"},
      {"global_cache_across_trials",
       "import torch\nimport torch.nn as nn\nCACHE = []\nclass ModelNew(nn.Module):\n    def __init__(self, scale):\n"
       "        super().__init__()\n        self.scale = scale\n    def forward(self, a, b):\n        if not CACHE:\n"
       "            CACHE.append(a * self.scale + b)\n        return CACHE[0]\n",
       verdict_category::wrong_answer, "trial 2"},
      {"raises", head + "    def forward(self, a, b):\n        raise RuntimeError('kernel launch failed')\n",
       verdict_category::runtime, "RuntimeError: kernel launch failed"},
      {"syntax", "class ModelNew(\n", verdict_category::compile, "Syntax error"},
  };
  // Two at a time: each run imports torch, which takes seconds.
  std::vector<result<verdict>> verdicts(cases.size(), error{"not run"});
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < cases.size(); i = next++) {
      verdicts[i] = shared_engine().verify(problem_task(), fenced("python", cases[i].code));
    }
  };
  std::thread a(worker), b(worker);
  a.join();
  b.join();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    SCOPED_TRACE(c.name);
    const auto& v = verdicts[i];
    ASSERT_TRUE(v.ok()) << v.err().message;
    EXPECT_EQ(std::string(to_string(v->category)), to_string(c.expected)) << v->feedback << "\n" << v->diagnostics;
    if (!c.feedback_contains.empty()) EXPECT_NE(v->feedback.find(c.feedback_contains), std::string::npos) << v->feedback;
  }
}

TEST(KernelBenchTest, GpuRunWhenAGpuIsPresent) {
  std::string why;
  if (!testing::gpu_present(&why) || !torch_available(&why)) {
    std::printf("skipping GPU-side KernelBench test: %s\n", why.c_str());
    GTEST_SKIP() << why;
  }
  engine_config config = testing::test_engine_config();
  config.kernelbench_device = "cuda";
  auto e = engine::create(config);
  ASSERT_TRUE(e.ok()) << e.err().message;
  auto v = (*e)->verify(problem_task(),
                        fenced("python", "import torch\nclass ModelNew(torch.nn.Module):\n    def __init__(self, s):\n"
                                         "        super().__init__()\n        self.s = s\n    def forward(self, a, b):\n"
                                         "        return a * self.s + b\n"),
                        0);
  ASSERT_TRUE(v.ok()) << v.err().message;
  EXPECT_TRUE(v->passed) << v->feedback;
  EXPECT_NE(v->feedback.find("(cuda)"), std::string::npos) << v->feedback;
}

}  // namespace
}  // namespace leap::sandbox

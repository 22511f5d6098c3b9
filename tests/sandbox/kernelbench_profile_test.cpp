// Profiling a KernelBench candidate (sandbox/engine_profile.cpp): on the CPU with python3 and
// torch, a real candidate's run made again under a stand-in ncu in the real sandbox (the same judge
// and runner, the extension built in the compile pool beside them): the command names the
// candidate's own kernels (its load_inline sources' __global__ functions and its @triton.jit
// functions) and follows child processes, the judge is asked for one untimed trial, the runner
// imports the prebuilt extension; a candidate without kernels of its own gets the note; a failing
// ncu leaves the verdict as it was. On a GPU with ncu (the lead's H200): a load_inline kernel (and
// a Triton kernel, where triton imports) profiled and diagnosed; on a GPU, the load_inline kernel
// profiled from kernel events (the fall-back without counters).
#include "sandbox/engine.hpp"
#include "sandbox/profile_events.hpp"
#include "tests/sandbox/kernelbench_support.hpp"
#include "tests/sandbox/profile_stand_in.hpp"
#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace leap::sandbox {
namespace {

namespace fs = std::filesystem;
using testing::fenced;
using testing::stand_in_ncu;

bool has_text(const std::string& text, std::string_view needle) {
  return text.find(needle) != std::string::npos;
}

// Whether the engine's python has `module` (found, not imported: testing::python_has_module).
bool python_has_module(const std::string& module, std::string* why) {
  return testing::python_has_module(testing::test_engine_config().python, module, why);
}

task scale_add_task(std::optional<own_kernel_policy> own_kernel) {
  task t;
  t.id = "kernelbench/level1/1_ScaleAddProfiled";
  t.kind = task_kind::kernelbench;
  t.reference = testing::k_scale_add_problem;
  t.own_kernel = own_kernel;
  return t;
}

// A candidate whose ModelNew calls a C++ load_inline extension (built in the compile pool; no nvcc
// needed) and whose source also holds the kernels it would run on a GPU: a __global__ function in
// a CUDA source string and a Triton kernel (defined only where triton imports).
const std::string k_candidate_with_kernels = R"PY(import torch
from torch.utils.cpp_extension import load_inline

cuda_source = r'''
__global__ void scale_add_kernel(const float* a, const float* b, float* out, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * s + b[i];
}
'''

try:
    import triton
    import triton.language as tl

    @triton.jit
    def scale_add_triton(a_ptr, b_ptr, out_ptr, s, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + i, tl.load(a_ptr + i, mask=i < n) * s + tl.load(b_ptr + i, mask=i < n),
                 mask=i < n)
except ImportError:
    triton = None

ext = load_inline(name='leap_kb_profile',
                  cpp_sources="""torch::Tensor scale_add(torch::Tensor a, torch::Tensor b, double s) {
  return a * s + b;
}""", functions=['scale_add'], extra_cflags=['-O1'])


class ModelNew(torch.nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = s

    def forward(self, a, b):
        return ext.scale_add(a, b, self.s)
)PY";

// PyTorch's ops only: no kernel of its own.
const std::string k_candidate_without_kernels =
    "import torch\nclass ModelNew(torch.nn.Module):\n    def __init__(self, s):\n"
    "        super().__init__()\n        self.s = s\n    def forward(self, a, b):\n"
    "        return a * self.s + b\n";

engine_config cpu_config(const std::string& ncu, profile_mode mode) {
  engine_config c = testing::test_engine_config();
  c.kernelbench_device = "cpu";
  c.trials = 2;  // the profiling run asks for one
  c.kernelbench_pch = false;
  // Under ctest both profiling tests' candidates build the same extension: once per ctest run
  // (they run in turn, tests/CMakeLists.txt). Neither asserts a first build: a library from the
  // cache has the same build note and files.
  if (auto shared = testing::ctest_shared_cache("kernelbench-profile"); !shared.empty()) {
    c.cache_dir = std::move(shared);
  }
  c.profile = mode;
  c.ncu = ncu;
  // Two torch processes on a shared machine; a lower bound of what they need, not a measurement.
  c.profile_limits.wall = std::chrono::seconds(300);
  c.profile_limits.cpu_seconds = 600;
  return c;
}

// NOLINTNEXTLINE(readability-identifier-naming): gtest names the test suite after the fixture.
class KernelBenchProfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!python_has_module("torch", &why)) {
      GTEST_SKIP() << why;
    }
  }
};

// The whole path: verify() with verifier.profile passing runs the candidate, then its profiling
// run, whose stand-in ncu checks what it was asked, runs the target as ncu would (the judge, which
// starts the runner) and only then writes the capture.
TEST_F(KernelBenchProfileTest, TheProfilingRunNamesTheOwnKernelsAndRunsTheJudgeOnce) {
  stand_in_ncu ncu(
      R"SH(fail() { { echo "==ERROR== $1"; tail -c 1500 target.err 2>/dev/null; } > "$log"; exit 1; }
case "$*" in
  *' --target-processes all '*) ;;
  *) fail "not following child processes: $*" ;;
esac
case "$*" in
  *' --kernel-name regex:^(scale_add_kernel|scale_add_triton)$ '*) ;;
  *) fail "not the candidate's kernels: $*" ;;
esac
while [ $# -gt 0 ] && [ "$1" != -- ]; do shift; done
shift
case "$*" in
  *' -I -B judge.py') ;;
  *) fail "not the KernelBench judge: $*" ;;
esac
read -r hello
case "$hello" in
  *'"own_kernel":"off"'*'"timing_reps":0,"trials":1}') ;;
  *) fail "not one untimed trial without the own-kernel check: $hello" ;;
esac
printf '%s\n' "$hello" | "$@" > record 2> target.err || fail "the judge failed"
grep -a -q '"status": "ok"' record || fail "the judge's record is not ok: $(head -c 400 record | tr -c '[:print:]' .)"
grep -a -q '"own": \[{"trial": 0, ' record || fail "not exactly one trial: $(head -c 400 record | tr -c '[:print:]' .)"
grep -a -q '"built_here": \[\]' record || fail "the runner built an extension itself: $(head -c 400 record | tr -c '[:print:]' .)"
cat "$here/capture.csv" > "$log"
)SH");
  if (!ncu.why_not().empty()) {
    GTEST_SKIP() << "no stand-in ncu: " << ncu.why_not();
  }
  auto e = engine::create(cpu_config(ncu.path(), profile_mode::passing));
  ASSERT_TRUE(e.ok()) << e.err().message;
  auto v = (*e)->verify(scale_add_task(own_kernel_policy::off),
                        fenced("python", k_candidate_with_kernels));
  ASSERT_TRUE(v.ok()) << v.err().message;
  ASSERT_TRUE(v->passed) << v->feedback << "\n" << v->diagnostics;
  EXPECT_TRUE(has_text(v->build_note, "1 extension(s) built in the compile pool")) << v->build_note;
  ASSERT_TRUE(v->profile.has_value());
  EXPECT_EQ(v->profile->note, "") << v->profile->note;
  EXPECT_GT(v->profile->seconds, 0);
  // The capture's kernels (the stand-in's, not the candidate's) reach the verdict and its feedback.
  EXPECT_FALSE(v->profile->kernels.empty());
  EXPECT_TRUE(has_text(v->feedback, "\n\nProfile of `")) << v->feedback;
  EXPECT_LE(v->feedback.size(), (*e)->config().feedback.char_budget);
}

TEST_F(KernelBenchProfileTest, ACandidateWithoutKernelsOfItsOwnGetsTheNote) {
  stand_in_ncu ncu("echo '==ERROR== ncu ran for a candidate without kernels' > \"$log\"\nexit 1\n");
  if (!ncu.why_not().empty()) {
    GTEST_SKIP() << "no stand-in ncu: " << ncu.why_not();
  }
  auto e = engine::create(cpu_config(ncu.path(), profile_mode::passing));
  ASSERT_TRUE(e.ok()) << e.err().message;
  const task t = scale_add_task(own_kernel_policy::off);
  auto p = (*e)->compile(t, fenced("python", k_candidate_without_kernels));
  ASSERT_TRUE(p.ok()) << p.err().message;
  verdict v;
  v.passed = true;
  v.category = verdict_category::pass;
  v.feedback = "Correct on all 2 trials (cpu).";
  const verdict before = v;
  (*e)->profile_candidate(t, *p, v, -1);
  EXPECT_EQ(v.passed, before.passed);
  EXPECT_EQ(v.category, before.category);
  EXPECT_EQ(v.feedback, before.feedback);
  ASSERT_TRUE(v.profile.has_value());
  EXPECT_TRUE(v.profile->kernels.empty());
  EXPECT_EQ(v.profile->note,
            "not profiled: the candidate has no kernel of its own: its source defines no "
            "__global__ function (load_inline) and no @triton.jit function");
}

// run() with a failing ncu: the verdict is the one profiling off gives, with a note that says why.
TEST_F(KernelBenchProfileTest, AFailingNcuLeavesTheVerdictAsItWas) {
  stand_in_ncu ncu(
      "echo '==PROF== Connected to process 7' > \"$log\"\n"
      "echo '==ERROR== Failed to profile \"scale_add_kernel\" in process 7' >> \"$log\"\n"
      "echo 'the target said goodbye' >&2\n"
      "exit 1\n");
  if (!ncu.why_not().empty()) {
    GTEST_SKIP() << "no stand-in ncu: " << ncu.why_not();
  }
  const task t = scale_add_task(own_kernel_policy::off);
  const std::string answer = fenced("python", k_candidate_with_kernels);
  auto off = engine::create(cpu_config(ncu.path(), profile_mode::off));
  ASSERT_TRUE(off.ok()) << off.err().message;
  auto before = (*off)->verify(t, answer);
  ASSERT_TRUE(before.ok()) << before.err().message;
  // Created after the first verdict, so that its cache, read from the folder at creation, holds the
  // extension that verdict built: built twice, it took 111 s of the ctest run instead of 80.
  auto on = engine::create(cpu_config(ncu.path(), profile_mode::all_compiled));
  ASSERT_TRUE(on.ok()) << on.err().message;
  auto v = (*on)->verify(t, answer);
  ASSERT_TRUE(v.ok()) << v.err().message;
  EXPECT_TRUE(before->passed) << before->feedback << "\n" << before->diagnostics;
  EXPECT_FALSE(before->profile.has_value());
  EXPECT_EQ(v->passed, before->passed);
  EXPECT_EQ(v->category, before->category);
  EXPECT_EQ(v->feedback, before->feedback);
  EXPECT_EQ(v->speedup, before->speedup);
  ASSERT_TRUE(v->profile.has_value());
  EXPECT_TRUE(v->profile->kernels.empty());
  const std::string& note = v->profile->note;
  EXPECT_EQ(note.rfind("not profiled: failed: ", 0), 0U) << note;
  EXPECT_TRUE(has_text(note, "Failed to profile \"scale_add_kernel\"")) << note;
  EXPECT_TRUE(has_text(note, "ncu exited with 1")) << note;
  EXPECT_TRUE(has_text(note, "the target said goodbye")) << note;
}

// The events fall-back's run (profile_tool events) on the CPU, where no driver loads the events
// library: the candidate writes, from inside the runner during its trial, what the library would
// write there on a GPU (a device, its own kernel and one of PyTorch's), where the library would:
// "$LEAP_KERNEL_EVENTS.<pid>.jsonl", relative to its working folder, and only when
// CUDA_INJECTION64_PATH names a file it can see. So the engine's side is checked: the variables
// reach the runner through the judge, the file lands in the folder the engine reads although the
// judge SIGKILLs the runner after the trial, and only the candidate's own kernel is kept, with its
// launch and occupancy in the feedback. (The library's folder is bound read-only for the run; the
// stand-in's, under /usr here or beside the test binary, may be visible without that.)
TEST_F(KernelBenchProfileTest, TheRunnersEventsReachTheProfile) {
  stand_in_ncu unused_ncu("exit 1\n");  // only its folder: one the sandbox's uids may read
  if (!unused_ncu.why_not().empty()) {
    GTEST_SKIP() << "no stand-in folder: " << unused_ncu.why_not();
  }
  const fs::path library = fs::path(unused_ncu.path()).parent_path() / "libleap_kernel_events.so";
  std::ofstream(library) << "a stand-in: no CUDA driver loads it on the CPU\n";
  fs::permissions(library, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                               fs::perms::others_read);
  const std::string candidate = R"PY(import os
import torch

unused = '__global__ void scale_add_kernel(const float* a, const float* b, float* out, float s, int n) {}'

_EVENTS = (
    '{"kind":"device","id":0,"name":"NVIDIA H200","cc":[9,0],"sm_count":132,'
    '"max_threads_per_block":1024,"max_warps_per_sm":64,"max_blocks_per_sm":32,'
    '"registers_per_sm":65536,"registers_per_block":65536,"shared_per_sm":233472,'
    '"shared_per_block":49152}\n'
    '{"kind":"kernel","name":"_Z16scale_add_kernelPKfS0_Pffi","device":0,"start":1000,'
    '"end":41000,"grid":[2,1,1],"block":[256,1,1],"registers":16,"static_shared":0,'
    '"dynamic_shared":0,"shared_executed":0}\n'
    '{"kind":"kernel","name":"_ZN2at6native29vectorized_elementwise_kernelILi4EEEviT_","device":0,'
    '"start":50000,"end":90000,"grid":[4,1,1],"block":[128,1,1],"registers":20,'
    '"static_shared":0,"dynamic_shared":0,"shared_executed":0}\n')


class ModelNew(torch.nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = s

    def forward(self, a, b):
        base = os.environ.get("LEAP_KERNEL_EVENTS")
        if base and os.path.isfile(os.environ.get("CUDA_INJECTION64_PATH", "")):
            with open("%s.%d.jsonl" % (base, os.getpid()), "a") as f:
                f.write(_EVENTS)
        return a * self.s + b
)PY";
  engine_config c = cpu_config("/nonexistent/ncu", profile_mode::passing);
  c.profiler = profile_tool::events;
  c.kernel_events_library = library.string();
  auto e = engine::create(c);
  ASSERT_TRUE(e.ok()) << e.err().message;
  auto v = (*e)->verify(scale_add_task(own_kernel_policy::off), fenced("python", candidate));
  ASSERT_TRUE(v.ok()) << v.err().message;
  ASSERT_TRUE(v->passed) << v->feedback << "\n" << v->diagnostics;
  ASSERT_TRUE(v->profile.has_value());
  EXPECT_EQ(v->profile->source, "events");
  EXPECT_EQ(v->profile->note, k_events_profile_note);
  ASSERT_EQ(v->profile->kernels.size(), 1U) << v->profile->note << "\n" << v->feedback;
  const auto& k = v->profile->kernels[0];
  EXPECT_EQ(k.name, "scale_add_kernel");
  EXPECT_GT(k.duration_ns, 0);
  EXPECT_TRUE(has_text(v->feedback,
                       "Profile of `scale_add_kernel` (40.0 us, grid (2, 1, 1) x "
                       "(256, 1, 1))"))
      << v->feedback;
  EXPECT_TRUE(has_text(v->feedback, "no hardware counters; theoretical occupancy ")) << v->feedback;
  EXPECT_FALSE(has_text(v->feedback, "vectorized_elementwise_kernel")) << v->feedback;
}

// The GPU tests' task: the scale-add over 16M floats, its candidate's own kernel required.
task large_scale_add_task() {
  task t = scale_add_task(std::nullopt);  // own kernel required on the GPU
  const std::string small = "torch.randn(32, 16), torch.randn(32, 16)";
  t.reference.replace(t.reference.find(small), small.size(),
                      "torch.randn(1 << 24), torch.randn(1 << 24)");
  return t;
}

constexpr const char* k_model_new_head =
    "class ModelNew(torch.nn.Module):\n    def __init__(self, s):\n        super().__init__()\n"
    "        self.s = s\n    def forward(self, a, b):\n";

// The GPU tests' load_inline candidate: scale_add_kernel in blocks of 256.
std::string load_inline_candidate() {
  return "import torch\nfrom torch.utils.cpp_extension import load_inline\n" +
         testing::scale_add_cuda_extension("leap_kb_profile_gpu") + k_model_new_head +
         "        return ext.scale_add(a.contiguous(), b.contiguous(), self.s)\n";
}

// On a GPU with ncu beside nvcc (the lead's H200): a KernelBench candidate's load_inline kernel
// over 16M floats, verified with verifier.profile passing, is profiled in the sandbox and found
// memory-bound (a scale-add reads 8 and writes 4 bytes per 2 FLOPs); where triton imports, a
// Triton kernel of the same work is profiled under its function's name.
TEST(KernelBenchProfileGpuTest, ALoadInlineKernelIsProfiledAndDiagnosed) {
  std::string why;
  if (!testing::gpu_present(&why) || !python_has_module("torch", &why)) {
    GTEST_SKIP() << why;
  }
  engine_config c = testing::test_engine_config();
  const fs::path ncu = fs::path(c.nvcc).parent_path() / "ncu";
  if (!fs::exists(ncu)) {
    GTEST_SKIP() << "no ncu beside nvcc at " << ncu;
  }
  c.kernelbench_device = "cuda";
  c.trials = 1;
  c.profile = profile_mode::passing;
  c.profile_limits.wall = std::chrono::seconds(400);
  c.profile_limits.cpu_seconds = 800;
  auto e = engine::create(c);
  ASSERT_TRUE(e.ok()) << e.err().message;
  const task t = large_scale_add_task();
  const std::string cuda = load_inline_candidate();
  const std::string triton =
      R"PY(import torch
import triton
import triton.language as tl


@triton.jit
def scale_add_triton(a_ptr, b_ptr, out_ptr, s, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(out_ptr + i, tl.load(a_ptr + i, mask=m) * s + tl.load(b_ptr + i, mask=m), mask=m)


)PY" + std::string(k_model_new_head) +
      "        out = torch.empty_like(a)\n        n = a.numel()\n"
      "        scale_add_triton[(triton.cdiv(n, 1024),)](a, b, out, self.s, n, "
      "BLOCK=1024)\n        return out\n";
  struct gpu_case {
    std::string kernel;
    std::string code;
  };
  std::vector<gpu_case> cases{{"scale_add_kernel", cuda}};
  if (testing::python_imports(c.python, "triton", &why)) {
    cases.push_back({"scale_add_triton", triton});
  } else {
    std::printf("no Triton case: %s\n", why.c_str());
  }
  for (const auto& k : cases) {
    SCOPED_TRACE(k.kernel);
    auto v = (*e)->verify(t, fenced("python", k.code), 0);
    ASSERT_TRUE(v.ok()) << v.err().message;
    ASSERT_TRUE(v->passed) << v->feedback << "\n" << v->diagnostics;
    ASSERT_TRUE(v->profile.has_value());
    if (has_text(v->profile->note, "counters_not_permitted")) {
      GTEST_SKIP() << v->profile->note;
    }
    ASSERT_EQ(v->profile->note, "");
    const auto& kernels = v->profile->kernels;
    const auto found = std::find_if(kernels.begin(), kernels.end(),
                                    [&](const kernel_summary& s) { return s.name == k.kernel; });
    ASSERT_NE(found, kernels.end()) << v->feedback;
    // Only the candidate's own kernels: none of PyTorch's or the judge's.
    EXPECT_EQ(kernels.size(), 1U) << v->feedback;
    EXPECT_EQ(found->bottleneck, "memory-bound") << v->feedback;
    EXPECT_TRUE(has_text(v->feedback, "Profile of `" + k.kernel + "`")) << v->feedback;
    std::printf("%s profiled in %.1f s:\n%s\n", k.kernel.c_str(), v->profile->seconds,
                v->feedback.c_str());
  }
}

// The fall-back without counters (profile_tool events) on a KernelBench candidate: the events
// library injected by the driver into the judge and its runner, which the judge SIGKILLs after the
// last trial (the runner's records are on disk by then: written when its synchronisation after
// the trial returned). The candidate's own load_inline kernel, not PyTorch's copies, with its
// duration, launch configuration (16M floats in blocks of 256) and theoretical occupancy in the
// feedback, from source "events".
TEST(KernelBenchProfileGpuTest, EventsFallbackNamesTheLoadInlineKernel) {
  std::string why;
  if (!testing::gpu_present(&why) || !python_has_module("torch", &why)) {
    GTEST_SKIP() << why;
  }
  engine_config c = testing::test_engine_config();
  c.kernelbench_device = "cuda";
  c.trials = 1;
  c.profile = profile_mode::passing;
  c.profiler = profile_tool::events;
  c.profile_limits.wall = std::chrono::seconds(400);
  c.profile_limits.cpu_seconds = 800;
  auto e = engine::create(c);
  ASSERT_TRUE(e.ok()) << e.err().message;
  auto v = (*e)->verify(large_scale_add_task(), fenced("python", load_inline_candidate()), 0);
  ASSERT_TRUE(v.ok()) << v.err().message;
  ASSERT_TRUE(v->passed) << v->feedback << "\n" << v->diagnostics;
  ASSERT_TRUE(v->profile.has_value());
  EXPECT_EQ(v->profile->source, "events");
  if (has_text(v->profile->note, "this build has no events library")) {
    GTEST_SKIP() << v->profile->note;
  }
  ASSERT_EQ(v->profile->note, k_events_profile_note) << v->feedback;
  // Only the candidate's own kernel: none of PyTorch's or the judge's.
  ASSERT_EQ(v->profile->kernels.size(), 1U) << v->feedback;
  const auto& k = v->profile->kernels[0];
  EXPECT_EQ(k.name, "scale_add_kernel");
  EXPECT_GT(k.duration_ns, 0);
  // No counters: no class but launch-bound or unknown.
  EXPECT_TRUE(k.bottleneck == "unknown" || k.bottleneck == "launch-bound") << k.bottleneck;
  EXPECT_TRUE(has_text(v->feedback, "Profile of `scale_add_kernel`")) << v->feedback;
  EXPECT_TRUE(has_text(v->feedback, "grid (65536, 1, 1) x (256, 1, 1)")) << v->feedback;
  EXPECT_TRUE(has_text(v->feedback, "no hardware counters; theoretical occupancy ")) << v->feedback;
  std::printf("scale_add_kernel profiled from events in %.1f s:\n%s\n", v->profile->seconds,
              v->feedback.c_str());
}

}  // namespace
}  // namespace leap::sandbox

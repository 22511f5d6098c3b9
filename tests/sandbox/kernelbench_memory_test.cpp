// KernelBench runs that share a GPU (verifier_config: several run slots on one GPU, untimed): each
// runner's torch allocations are capped at its share of the GPU's memory, and a shared run that
// fails for device memory is made again alone before its verdict stands (issue 30); the last test
// does the same for the cuda kind. The first test needs python3 with torch (a CPU build will do);
// the others need a GPU and are skipped without one
// (`SANDBOX_FILTER='KernelBenchMemory*:CudaMemoryGpuTest.*' tools/gpu/check.sh sandbox`).
#include "sandbox/verifier.hpp"
#include "tests/sandbox/kernelbench_support.hpp"
#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

namespace leap::sandbox {
namespace {

using testing::fenced;

task kbm_problem() {
  task t;
  t.id = "kernelbench/level1/1_ScaleAdd";
  t.kind = task_kind::kernelbench;
  t.reference = testing::k_scale_add_problem;
  t.own_kernel = own_kernel_policy::off;  // these candidates use PyTorch's ops
  return t;
}

// A ModelNew of the scale-add problem whose forward runs `body` first (python, 8 spaces in).
std::string kbm_candidate(const std::string& body) {
  return fenced("python",
                "import ctypes\nimport time\nimport torch\n"
                "class ModelNew(torch.nn.Module):\n"
                "    def __init__(self, s):\n"
                "        super().__init__()\n"
                "        self.s = s\n"
                "    def forward(self, a, b):\n" +
                    body + "        return a * self.s + b\n");
}

// Two run slots on GPU 0, untimed: runs share the GPU.
result<std::unique_ptr<verifier>> kbm_shared_verifier(int slots = 2) {
  verifier_config config;
  config.engine = testing::test_engine_config();
  config.gpus = {0};
  config.run_slots = slots;
  config.compile_workers = 2;
  config.run_attempts = 1;
  return verifier::create(config);
}

bool kbm_torch(std::string* why) {
  return testing::python_has_module(testing::test_engine_config().python, "torch", why);
}

// Runs on the CPU too (the candidate's device is whatever the slot has): what the runner reports
// as its out-of-memory error is read as a failure for device memory, so the shared run is made
// again alone; any other error is the verdict at once.
TEST(KernelBenchMemoryTest, OutOfMemoryInASharedRunIsRunAgainAlone) {
  std::string why;
  if (!kbm_torch(&why)) {
    GTEST_SKIP() << why;
  }
  auto v = kbm_shared_verifier();
  ASSERT_TRUE(v.ok()) << v.err().message;
  const auto t = std::make_shared<const task>(kbm_problem());
  auto oom = (*v)->submit(t, kbm_candidate("        raise RuntimeError('CUDA out of memory. "
                                           "Tried to allocate 2.00 GiB (a stand-in)')\n"));
  auto other = (*v)->submit(t, kbm_candidate("        raise ValueError('not memory')\n"));
  auto r = oom.get();
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_FALSE(r->passed);
  EXPECT_TRUE(r->device_memory_failure) << r->feedback;
  EXPECT_NE(r->rerun_note.find("1 other run(s) and failed for device memory"), std::string::npos)
      << r->rerun_note;
  EXPECT_NE(r->feedback.find("second run, alone on the GPU"), std::string::npos) << r->feedback;
  auto o = other.get();
  ASSERT_TRUE(o.ok()) << o.err().message;
  EXPECT_FALSE(o->passed);
  EXPECT_FALSE(o->device_memory_failure) << o->feedback;
  EXPECT_TRUE(o->rerun_note.empty()) << o->rerun_note;
}

bool kbm_gpu(std::string* why) {
  if (!testing::gpu_present(why) || !kbm_torch(why)) {
    std::printf("skipping GPU-side KernelBench memory test: %s\n", why->c_str());
    return false;
  }
  return true;
}

// GPU 0's memory in use and in all (MiB), from nvidia-smi; nullopt when it cannot say.
std::optional<std::pair<double, double>> kbm_gpu_memory() {
  FILE* p = ::popen(
      "nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits -i 0", "r");
  if (p == nullptr) {
    return std::nullopt;
  }
  double used = 0;
  double total = 0;
  const int got = std::fscanf(p, "%lf, %lf", &used, &total);
  ::pclose(p);
  if (got != 2 || total <= 0) {
    return std::nullopt;
  }
  return std::pair{used, total};
}

// GPU 0's memory once at least 90% of it is in use, or the last reading after 240 s.
std::optional<std::pair<double, double>> kbm_wait_until_gpu_full() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  std::optional<std::pair<double, double>> memory;
  while (std::chrono::steady_clock::now() < deadline) {
    memory = kbm_gpu_memory();
    if (memory && memory->first >= 0.9 * memory->second) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return memory;
}

// The hog takes nearly all free device memory with the driver's own cuMemAlloc (no cap of torch's
// holds it), keeps it `hold_s` seconds, then asks torch for 1 GiB: out of memory, shared or alone.
// The neighbour, a correct candidate that needs 256 MiB of device memory, is submitted once the GPU
// is seen full: its shared run finds no memory (its judge's or its own) and it is run again alone,
// after the hog's run, and passes. The hold only has to outlast the neighbour's start (seconds);
// if it did not, the neighbour would pass without a re-run, and the test would say so.
TEST(KernelBenchMemoryGpuTest, HogFailsAloneItsNeighbourPasses) {
  std::string why;
  if (!kbm_gpu(&why)) {
    GTEST_SKIP() << why;
  }
  auto v = kbm_shared_verifier();
  ASSERT_TRUE(v.ok()) << v.err().message;
  const auto t = std::make_shared<const task>(kbm_problem());
  const std::string hog = kbm_candidate(
      "        torch.zeros(1, device=a.device)\n"  // this thread's context is current
      "        cuda = ctypes.CDLL('libcuda.so.1')\n"
      "        held, chunk = [], 1 << 30\n"
      "        while chunk >= (16 << 20):\n"
      "            p = ctypes.c_uint64()\n"
      "            if cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(chunk)) == 0:\n"
      "                held.append(p)\n"
      "            else:\n"
      "                chunk //= 2\n"
      "        time.sleep(45)\n"
      "        torch.empty(1 << 30, dtype=torch.uint8, device=a.device)\n");
  const std::string neighbour = kbm_candidate(
      "        scratch = torch.ones(64 << 20, device=a.device)\n"
      "        del scratch\n");
  auto hog_verdict = (*v)->submit(t, hog);
  const auto memory = kbm_wait_until_gpu_full();
  ASSERT_TRUE(memory && memory->first >= 0.9 * memory->second)
      << "the hog never held the GPU's memory"
      << (memory ? ": " + std::to_string(memory->first) + " of " + std::to_string(memory->second) +
                       " MiB in use"
                 : std::string(": nvidia-smi says nothing"));
  auto neighbour_verdict = (*v)->submit(t, neighbour);

  auto n = neighbour_verdict.get();
  ASSERT_TRUE(n.ok()) << n.err().message;
  EXPECT_TRUE(n->passed) << n->feedback << "\n" << n->diagnostics;
  EXPECT_NE(n->rerun_note.find("run again alone"), std::string::npos)
      << "the neighbour's shared run did not fail for device memory: " << n->feedback;
  auto h = hog_verdict.get();
  ASSERT_TRUE(h.ok()) << h.err().message;
  EXPECT_FALSE(h->passed);
  EXPECT_TRUE(h->device_memory_failure) << h->feedback << "\n" << h->diagnostics;
  EXPECT_NE(h->feedback.find("out of memory"), std::string::npos) << h->feedback;
  EXPECT_NE(h->rerun_note.find("failed for device memory"), std::string::npos) << h->rerun_note;
}

// torch's allocations beyond the run's share fail in a shared run, with the share in the verdict;
// alone, the same candidate has the GPU's memory and passes. Its shared run's failure brings it
// back alone, so its verdict is a pass that says why it was run again.
TEST(KernelBenchMemoryGpuTest, TorchBeyondItsShareFailsSharedAndPassesAlone) {
  std::string why;
  if (!kbm_gpu(&why)) {
    GTEST_SKIP() << why;
  }
  const auto t = std::make_shared<const task>(kbm_problem());
  // 60% of the GPU: more than a half share, less than the whole.
  const std::string big = kbm_candidate(
      "        total = torch.cuda.get_device_properties(a.device).total_memory\n"
      "        big = torch.empty(int(total * 0.6), dtype=torch.uint8, device=a.device)\n"
      "        del big\n");
  {
    auto shared = kbm_shared_verifier();
    ASSERT_TRUE(shared.ok()) << shared.err().message;
    auto r = (*shared)->submit(t, big).get();
    ASSERT_TRUE(r.ok()) << r.err().message;
    EXPECT_TRUE(r->passed) << r->feedback << "\n" << r->diagnostics;
    EXPECT_NE(r->rerun_note.find("failed for device memory (its share: "), std::string::npos)
        << "no cap in the shared run: " << r->rerun_note;
  }
  auto alone = kbm_shared_verifier(1);
  ASSERT_TRUE(alone.ok()) << alone.err().message;
  auto r = (*alone)->submit(t, big).get();
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_TRUE(r->passed) << r->feedback;
  EXPECT_TRUE(r->rerun_note.empty()) << r->rerun_note;
  EXPECT_EQ(r->device_memory_share_bytes, 0U);
}

// Runs sharing a GPU beside judges started ahead of later jobs: each run's share leaves out the
// waiting judges' CUDA contexts (two processes each) and its judge's buffers beside the configured
// reserve, and the contexts really fit in what was left out for them: once the runs are over and
// only the waiting judges hold the GPU, the memory they take is at most their part of the reserve.
TEST(KernelBenchMemoryGpuTest, SharesLeaveRoomForTheJudgesWaiting) {
  std::string why;
  if (!kbm_gpu(&why)) {
    GTEST_SKIP() << why;
  }
  const auto before = kbm_gpu_memory();
  ASSERT_TRUE(before) << "nvidia-smi says nothing of GPU 0's memory";
  verifier_config config;
  config.engine = testing::test_engine_config();
  config.engine.kernelbench_standby = true;
  config.engine.kernelbench_standby_depth = 2;
  config.gpus = {0};
  config.run_slots = 2;
  config.compile_workers = 2;
  config.run_attempts = 1;
  const std::uint64_t context = config.engine.gpu_context_bytes;
  const std::uint64_t reserve = config.engine.gpu_memory_reserve_bytes;
  auto v = verifier::create(config);
  ASSERT_TRUE(v.ok()) << v.err().message;
  const auto t = std::make_shared<const task>(kbm_problem());
  auto first = (*v)->submit(t, kbm_candidate(""));
  auto second = (*v)->submit(t, kbm_candidate("        pass\n"));
  const std::uint64_t waiting = 4;  // depth 2 for each of the 2 runs sharing the GPU
  const double total_mib = before->second;
  for (auto* f : {&first, &second}) {
    auto r = f->get();
    ASSERT_TRUE(r.ok()) << r.err().message;
    EXPECT_TRUE(r->passed) << r->feedback << "\n" << r->diagnostics;
    ASSERT_GT(r->device_memory_share_bytes, 0U) << "the run was not capped: " << r->diagnostics;
    const double bound_mib = (total_mib - static_cast<double>(reserve >> 20) -
                              static_cast<double>(waiting * 2 * (context >> 20))) /
                             2.0;
    EXPECT_LE(static_cast<double>(r->device_memory_share_bytes >> 20), bound_mib)
        << "the share leaves no room for the " << waiting << " judges waiting";
  }
  // The waiting judges import torch and start CUDA after the runs began: the GPU's memory in use
  // settles once all have (read until it stops growing, 2 minutes at most).
  std::optional<std::pair<double, double>> now;
  double last = -1;
  for (int i = 0; i < 120; ++i) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    now = kbm_gpu_memory();
    if (now && i >= 10 && now->first == last) {
      break;
    }
    last = now ? now->first : -1;
  }
  ASSERT_TRUE(now) << "nvidia-smi says nothing of GPU 0's memory";
  const double taken_mib = now->first - before->first;
  std::printf("%llu judges waiting took %.0f MiB of GPU 0 (%.0f MiB a process)\n",
              static_cast<unsigned long long>(waiting), taken_mib, taken_mib / (2.0 * waiting));
  EXPECT_GT(taken_mib, 0.0) << "no judge was waiting on the GPU";
  EXPECT_LE(taken_mib, static_cast<double>(waiting * 2 * (context >> 20)))
      << "engine_config::gpu_context_bytes is less than a waiting judge's process takes";
}

// The same for the cuda kind, where nothing caps a candidate's own cudaMalloc: the hog takes nearly
// all free device memory, holds it while a kernel spins (15 to 40 s, by the SM clock), then fails
// a last cudaMalloc (cudaErrorMemoryAllocation, which the harness reports); the neighbour, the
// plain vector add, is submitted once the GPU is seen full and passes after a run alone.
TEST(CudaMemoryGpuTest, HogFailsAloneItsNeighbourPasses) {
  std::string why;
  if (!testing::gpu_present(&why)) {
    GTEST_SKIP() << why;
  }
  verifier_config config;
  config.engine = testing::test_engine_config();
  config.engine.cuda_run_limits.wall = std::chrono::seconds(180);
  config.engine.cuda_run_limits.cpu_seconds = 180;  // cudaDeviceSynchronize spins on a core
  config.gpus = {0};
  config.run_slots = 2;
  config.compile_workers = 2;
  config.run_attempts = 1;
  auto v = verifier::create(config);
  ASSERT_TRUE(v.ok()) << v.err().message;
  const auto t = std::make_shared<const task>(testing::cuda_vector_add_task(4099));
  const std::string hog =
      fenced("cuda",
             "__global__ void add(const float* a, const float* b, float* c, int n) {\n"
             "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "  if (i < n) c[i] = a[i] + b[i];\n"
             "}\n"
             "__global__ void spin(long long cycles) {\n"
             "  long long start = clock64();\n"
             "  while (clock64() - start < cycles) {}\n"
             "}\n"
             "void solve(const float* a, const float* b, float* c, int n) {\n"
             "  static bool held = false;\n"
             "  if (!held) {\n"
             "    held = true;\n"
             "    void* p = nullptr;\n"
             "    for (size_t chunk = 1ull << 30; chunk >= (16ull << 20);) {\n"
             "      if (cudaMalloc(&p, chunk) != cudaSuccess) chunk /= 2;\n"
             "    }\n"
             "    spin<<<1, 1>>>(30000000000LL);\n"
             "    cudaDeviceSynchronize();\n"
             "    cudaMalloc(&p, 1ull << 30);\n"
             "  }\n"
             "  add<<<(n + 255) / 256, 256>>>(a, b, c, n);\n"
             "}\n");
  auto hog_verdict = (*v)->submit(t, hog);
  const auto memory = kbm_wait_until_gpu_full();
  ASSERT_TRUE(memory && memory->first >= 0.9 * memory->second)
      << "the hog never held the GPU's memory";
  auto neighbour_verdict = (*v)->submit(t, fenced("cuda", testing::k_cuda_vector_add));
  auto n = neighbour_verdict.get();
  ASSERT_TRUE(n.ok()) << n.err().message;
  EXPECT_TRUE(n->passed) << n->feedback << "\n" << n->diagnostics;
  EXPECT_NE(n->rerun_note.find("run again alone"), std::string::npos)
      << "the neighbour's shared run did not fail for device memory: " << n->feedback;
  auto h = hog_verdict.get();
  ASSERT_TRUE(h.ok()) << h.err().message;
  EXPECT_FALSE(h->passed);
  EXPECT_TRUE(h->device_memory_failure) << h->feedback << "\n" << h->diagnostics;
  EXPECT_NE(h->feedback.find("cudaErrorMemoryAllocation"), std::string::npos) << h->feedback;
  EXPECT_NE(h->rerun_note.find("failed for device memory"), std::string::npos) << h->rerun_note;
}

}  // namespace
}  // namespace leap::sandbox

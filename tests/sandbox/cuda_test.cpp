// cuda tasks: compile-side with the real nvcc on every machine; GPU-side only where a GPU is
// present (skipped with the reason otherwise; run them on the GPU machine).
#include "sandbox/engine.hpp"
#include "tests/sandbox/test_support.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace leap::sandbox {
namespace {

using testing::fenced;
using testing::shared_engine;

bool nvcc_available(std::string* why) {
  const std::string nvcc = shared_engine().config().nvcc;
  if (std::system((nvcc + " --version >/dev/null 2>&1").c_str()) != 0) {
    *why = "nvcc not found at '" + nvcc + "'";
    return false;
  }
  return true;
}

TEST(CudaCompileTest, CorrectKernelCompilesForTheConfiguredArch) {
  std::string why;
  if (!nvcc_available(&why)) {
    GTEST_SKIP() << why;
  }
  auto p = shared_engine().compile(testing::cuda_vector_add_task(),
                                   fenced("cuda", testing::k_cuda_vector_add));
  ASSERT_TRUE(p.ok()) << p.err().message;
  EXPECT_FALSE(p->final_verdict.has_value()) << p->final_verdict->feedback;
  EXPECT_GT(p->binary.size(), 1000U);
  ASSERT_NE(p->expected, nullptr);
  EXPECT_EQ(p->expected->trials.size(), 3U);
}

TEST(CudaCompileTest, CompileErrorPointsAtTheCandidatesOwnLine) {
  std::string why;
  if (!nvcc_available(&why)) {
    GTEST_SKIP() << why;
  }
  const std::string code =
      "#include <cuda_runtime.h>\n"
      "\n"
      "__global__ void add(const float* a, const float* b, float* c, int n) {\n"
      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i < n) c[i] = a[i] + b[j];\n"
      "}\n"
      "void solve(const float* a, const float* b, float* c, int n) { add<<<(n + 255) / 256, "
      "256>>>(a, b, c, n); }\n";
  auto p = shared_engine().compile(testing::cuda_vector_add_task(), fenced("cuda", code));
  ASSERT_TRUE(p.ok()) << p.err().message;
  ASSERT_TRUE(p->final_verdict.has_value());
  const auto& v = *p->final_verdict;
  EXPECT_EQ(v.category, verdict_category::compile);
  EXPECT_NE(v.feedback.find("solution.cu(5): error: identifier \"j\" is undefined"),
            std::string::npos)
      << v.feedback;
  EXPECT_EQ(v.feedback.find("harness"), std::string::npos) << v.feedback;
  EXPECT_EQ(v.feedback.find("/tmp"), std::string::npos) << v.feedback;
}

TEST(CudaCompileTest, WrongSignatureIsALinkErrorWithTheRequiredSignature) {
  std::string why;
  if (!nvcc_available(&why)) {
    GTEST_SKIP() << why;
  }
  std::string code = testing::k_cuda_vector_add;
  code.replace(code.find("void solve(const float* a"), 25, "void solve(float* a");
  auto p = shared_engine().compile(testing::cuda_vector_add_task(), fenced("cuda", code));
  ASSERT_TRUE(p.ok()) << p.err().message;
  ASSERT_TRUE(p->final_verdict.has_value());
  EXPECT_EQ(p->final_verdict->category, verdict_category::compile);
  EXPECT_NE(p->final_verdict->feedback.find(
                "void solve(const float* a, const float* b, float* c, int n)"),
            std::string::npos)
      << p->final_verdict->feedback;
}

// As on machines whose nvcc on PATH is a wrapper script in another bin/ folder (Debian's
// /usr/bin/nvcc is one): nvcc takes its headers from its real folder
// (<toolkit>/bin/../targets/...), which the include check must accept as the toolkit's although the
// configured path says nothing of it.
TEST(CudaCompileTest, NvccBehindAWrapperInAnotherFolderFindsTheToolkitsHeaders) {
  std::string why;
  if (!nvcc_available(&why)) {
    GTEST_SKIP() << why;
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path real_nvcc = fs::canonical(shared_engine().config().nvcc, ec);
  if (ec) {
    GTEST_SKIP() << "nvcc is '" << shared_engine().config().nvcc << "', not a path to wrap";
  }
  // The wrapper lives in the build tree: the sandbox replaces /tmp with its own, so a wrapper there
  // would not be visible to the compiler.
  const fs::path root = fs::current_path() / ("leap-nvcc-wrapper-" + std::to_string(::getpid()));
  for (const char* replaced : {"/tmp/", "/var/tmp/", "/run/", "/dev/"}) {
    if (root.string().rfind(replaced, 0) == 0) {
      GTEST_SKIP() << "the build tree is under " << replaced;
    }
  }
  fs::create_directories(root / "bin");
  const fs::path wrapper = root / "bin" / "nvcc";
  {
    std::ofstream out(wrapper);
    out << "#!/bin/sh\nexec '" << real_nvcc.string() << "' \"$@\"\n";
  }
  fs::permissions(wrapper, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                               fs::perms::others_read | fs::perms::others_exec);
  engine_config config = testing::test_engine_config();
  config.nvcc = wrapper.string();
  config.cache_dir = root / "cache";
  auto wrapped = engine::create(config);
  ASSERT_TRUE(wrapped.ok()) << wrapped.err().message;
  auto p = (*wrapped)->compile(testing::cuda_vector_add_task(),
                               fenced("cuda", testing::k_cuda_vector_add));
  fs::remove_all(root, ec);
  ASSERT_TRUE(p.ok()) << p.err().message;
  EXPECT_FALSE(p->final_verdict.has_value()) << p->final_verdict->feedback;
  EXPECT_GT(p->binary.size(), 1000U);
}

TEST(CudaCompileTest, LibraryCallsAreForbiddenBeforeCompiling) {
  const std::string code =
      "#include <cublas_v2.h>\nvoid solve(const float* a, const float* b, float* c, int n) {}\n";
  auto p = shared_engine().compile(testing::cuda_vector_add_task(), fenced("cuda", code));
  ASSERT_TRUE(p.ok()) << p.err().message;
  ASSERT_TRUE(p->final_verdict.has_value());
  EXPECT_EQ(p->final_verdict->category, verdict_category::forbidden);
  EXPECT_NE(p->final_verdict->feedback.find("Line 1"), std::string::npos)
      << p->final_verdict->feedback;
}

// NOLINTNEXTLINE(readability-identifier-naming): gtest names the test suite after the fixture.
class CudaGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!testing::gpu_present(&why) || !nvcc_available(&why)) {
      std::printf("skipping GPU-side test: %s\n", why.c_str());
      GTEST_SKIP() << why;
    }
  }
  result<verdict> verify(const std::string& code) {
    return shared_engine().verify(testing::cuda_vector_add_task(), fenced("cuda", code), 0);
  }
};

TEST_F(CudaGpuTest, CorrectKernelPasses) {
  auto v = verify(testing::k_cuda_vector_add);
  ASSERT_TRUE(v.ok()) << v.err().message;
  EXPECT_TRUE(v->passed) << v->feedback << v->diagnostics;
}

TEST_F(CudaGpuTest, IllegalMemoryAccessIsARuntimeErrorByName) {
  std::string code = testing::k_cuda_vector_add;
  // A write through a null pointer that the compiler cannot see is null (a literal null store is
  // undefined behaviour that nvcc deletes, leaving a wrong answer). A far out-of-bounds index gave
  // cudaErrorInvalidAddressSpace on an H200; the error is reported by whatever name the driver
  // gives.
  code.replace(code.find("if (i < n) c[i]"), 15,
               "float* volatile sink = nullptr; if (i < n) sink[i]");
  auto v = verify(code);
  ASSERT_TRUE(v.ok()) << v.err().message;
  EXPECT_EQ(v->category, verdict_category::runtime) << v->feedback;
  EXPECT_NE(v->feedback.find("CUDA error cudaError"), std::string::npos) << v->feedback;
  EXPECT_NE(v->feedback.find("cudaErrorIllegalAddress"), std::string::npos) << v->feedback;
}

TEST_F(CudaGpuTest, DeviceAssertIsARuntimeErrorByName) {
  std::string code = "#include <cassert>\n" + testing::k_cuda_vector_add;
  code.replace(code.find("if (i < n) c[i]"), 15, "assert(i < 0); if (i < n) c[i]");
  auto v = verify(code);
  ASSERT_TRUE(v.ok()) << v.err().message;
  EXPECT_EQ(v->category, verdict_category::runtime) << v->feedback;
  EXPECT_NE(v->feedback.find("cudaErrorAssert"), std::string::npos) << v->feedback;
}

TEST_F(CudaGpuTest, MissingBoundsCheckIsWrongOrRuntime) {
  std::string code = testing::k_cuda_vector_add;
  code.replace(code.find("(n + 255) / 256"), 15, "n / 256");
  auto v = verify(code);
  ASSERT_TRUE(v.ok()) << v.err().message;
  EXPECT_EQ(v->category, verdict_category::wrong_answer) << v->feedback;
  EXPECT_NE(v->feedback.find("output 'c'"), std::string::npos) << v->feedback;
}

TEST_F(CudaGpuTest, WritingIntoADeviceInputIsCaught) {
  std::string code = testing::k_cuda_vector_add;
  code.replace(code.find("if (i < n) c[i] = a[i] + b[i];"), 30,
               "if (i < n) { c[i] = a[i] + b[i]; const_cast<float*>(a)[i] = 0; }");
  auto v = verify(code);
  ASSERT_TRUE(v.ok()) << v.err().message;
  EXPECT_EQ(v->category, verdict_category::wrong_answer) << v->feedback;
  EXPECT_NE(v->feedback.find("input 'a'"), std::string::npos) << v->feedback;
}

}  // namespace
}  // namespace leap::sandbox

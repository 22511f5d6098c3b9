// `leap verify --profile`: one KernelBench candidate verified on the CPU by the real sandbox, its
// passing verdict profiled by a stand-in ncu (it writes the H200 capture of tests/sandbox/profile
// as the real one writes its log), the profile printed beside the verdict and its diagnosis in the
// feedback; a profile mode that does not exist is refused with the valid ones. Skips where the
// sandbox's python has no torch.
#include "e2e_support.hpp"
#include "tests/sandbox/kernelbench_support.hpp"
#include "tests/sandbox/profile_stand_in.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;
namespace kb = leap::sandbox::testing;

std::string verify_python() {
  const char* python = std::getenv("LEAP_SANDBOX_TEST_PYTHON");
  return python != nullptr && *python != '\0' ? python : "python3";
}

// A folder with the scale-add problem and a passing candidate of PyTorch's ops whose source names
// a __global__ function (what the profiler's kernel filter reads).
struct verify_files {
  leap::e2e::scratch_dir dir{"verify-profile", {}};
  fs::path problem = dir.root() / "scale_add.py";
  fs::path candidate = dir.root() / "candidate.md";
  verify_files() {
    std::ofstream(problem) << kb::k_scale_add_problem;
    std::ofstream(candidate) << kb::scale_add_ops_candidate("leap verify --profile");
  }
};

TEST(LeapVerifyProfile, APassingKernelBenchVerdictIsPrintedWithItsProfile) {
  std::string why;
  if (!kb::python_has_module(verify_python(), "torch", &why)) {
    GTEST_SKIP() << why;
  }
  const kb::stand_in_ncu ncu("cat \"$here/capture.csv\" > \"$log\"\n");
  if (!ncu.why_not().empty()) {
    GTEST_SKIP() << "no stand-in ncu: " << ncu.why_not();
  }
  const verify_files files;
  const auto cache = kb::cache_outside_tmp("leap-e2e-verify-profile");
  ASSERT_FALSE(cache.empty()) << "no cache folder the sandbox can reach";
  const auto out = leap::e2e::run_leap(
      {"verify", "--task", files.problem.string(), "--candidate", files.candidate.string(),
       "--python", verify_python(), "--trials", "2", "--cache-dir", cache.string(), "--profile",
       "passing", "--ncu", ncu.path(), "--json"},
      std::chrono::minutes(10));
  ASSERT_EQ(out.exit_code, 0) << out.output;
  const auto line = out.output.substr(out.output.find('{'));
  const auto j = nlohmann::json::parse(line.substr(0, line.find('\n')));
  ASSERT_TRUE(j.at("passed").get<bool>()) << j.dump(2);
  ASSERT_TRUE(j.contains("profile")) << j.dump(2);
  const auto& profile = j.at("profile");
  EXPECT_EQ(profile.at("source"), "ncu");
  EXPECT_EQ(profile.at("note"), "") << profile.dump(2);
  EXPECT_GT(profile.at("seconds").get<double>(), 0.0);
  ASSERT_FALSE(profile.at("kernels").empty()) << profile.dump(2);
  // The feedback's diagnosis leads with the longest kernel.
  const auto& kernels = profile.at("kernels");
  const auto& kernel =
      *std::max_element(kernels.begin(), kernels.end(), [](const auto& a, const auto& b) {
        return a.at("duration_ns").template get<double>() <
               b.at("duration_ns").template get<double>();
      });
  EXPECT_FALSE(kernel.at("name").get<std::string>().empty());
  EXPECT_FALSE(kernel.at("bottleneck").get<std::string>().empty());
  EXPECT_GT(kernel.at("duration_ns").get<double>(), 0.0);
  const auto feedback = j.at("feedback").get<std::string>();
  // The diagnosis after the verdict's own text.
  EXPECT_EQ(feedback.find("\n\nProfile of `"), feedback.find("\n\n")) << feedback;
  EXPECT_NE(feedback.find("Profile of `" + kernel.at("name").get<std::string>() + "`"),
            std::string::npos)
      << feedback;

  // The same without --profile: no profile, and the feedback is the verdict's alone.
  const auto plain = leap::e2e::run_leap(
      {"verify", "--task", files.problem.string(), "--candidate", files.candidate.string(),
       "--python", verify_python(), "--trials", "2", "--cache-dir", cache.string(), "--json"},
      std::chrono::minutes(10));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const auto plain_line = plain.output.substr(plain.output.find('{'));
  const auto pj = nlohmann::json::parse(plain_line.substr(0, plain_line.find('\n')));
  EXPECT_FALSE(pj.contains("profile")) << pj.dump(2);
  EXPECT_EQ(pj.at("feedback").get<std::string>().find("Profile of"), std::string::npos);
  std::error_code ec;
  fs::remove_all(cache, ec);
}

TEST(LeapVerifyProfile, AnUnknownProfileModeIsRefusedWithTheValidOnes) {
  const verify_files files;
  const auto out = leap::e2e::run_leap({"verify", "--task", files.problem.string(), "--candidate",
                                        files.candidate.string(), "--profile", "sometimes"},
                                       std::chrono::seconds(60));
  EXPECT_EQ(out.exit_code, 1) << out.output;
  EXPECT_NE(out.output.find("--profile"), std::string::npos) << out.output;
  EXPECT_NE(out.output.find("sometimes"), std::string::npos) << out.output;
  EXPECT_NE(out.output.find("all_compiled"), std::string::npos) << out.output;
}

}  // namespace

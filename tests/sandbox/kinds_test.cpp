// The per-kind table: each row is its kind's, and what one row says the rest of the sandbox does
// (extraction accepts the kind's own fence, a bare source wrapped as `leap verify` wraps it is
// found again, comments and #include follow the kind's language, the loaders ask for the kind's
// required source).
#include "sandbox/kinds.hpp"

#include "sandbox/extract.hpp"
#include "sandbox/forbidden.hpp"
#include "sandbox/task.hpp"

#include <gtest/gtest.h>

#include <string>

namespace leap::sandbox {
namespace {

struct row {
  task_kind kind;
  pipeline judged_by;
  toolchain compiler;
  bool gpu;
  required_source needs;
  std::string extension;
  std::string fence;
};

// What each kind is, written out once more so that a row edited by mistake fails here.
const std::vector<row> expected_rows = {
    {task_kind::cuda, pipeline::native, toolchain::nvcc, true, required_source::args_and_reference,
     ".cu", "cuda"},
    {task_kind::cpp, pipeline::native, toolchain::cxx, false, required_source::args_and_reference,
     ".cpp", "cpp"},
    {task_kind::python, pipeline::python_tests, toolchain::python3, false, required_source::tests,
     ".py", "python"},
    {task_kind::kernelbench, pipeline::kernelbench, toolchain::python3, true,
     required_source::problem, ".py", "python"},
    {task_kind::digits, pipeline::text, toolchain::none, false, required_source::target, ".txt",
     "digits"},
};

TEST(KindsTest, EveryKindHasItsOwnRow) {
  ASSERT_EQ(expected_rows.size(), enum_names::count<task_kind>());
  for (const auto& r : expected_rows) {
    SCOPED_TRACE(to_string(r.kind));
    const kind_traits& k = traits_of(r.kind);
    EXPECT_EQ(k.kind, r.kind);
    EXPECT_EQ(k.judged_by, r.judged_by);
    EXPECT_EQ(k.compiler, r.compiler);
    EXPECT_EQ(k.gpu, r.gpu);
    EXPECT_EQ(k.needs, r.needs);
    EXPECT_EQ(k.extension, r.extension);
    EXPECT_EQ(std::string(candidate_extension(r.kind)), r.extension);
    EXPECT_EQ(k.fence, r.fence);
  }
  EXPECT_EQ(default_forbidden(task_kind::cuda),
            (std::vector<std::string>{"cublas", "cudnn", "cutlass", "thrust", "cub::", "torch"}));
  EXPECT_TRUE(default_forbidden(task_kind::cpp).empty());
}

// A bare source wrapped in the kind's fence (what `leap verify` and the scripted policy write) is
// the block extraction picks, over a block of another language after it.
TEST(KindsTest, TheKindsFenceIsTheBlockExtractionPicks) {
  for (std::size_t i = 0; i < enum_names::count<task_kind>(); ++i) {
    const auto kind = static_cast<task_kind>(i);
    SCOPED_TRACE(to_string(kind));
    const std::string fence(traits_of(kind).fence);
    const std::string answer = "```" + fence + "\nmine\n```\nand\n```rust\nnot mine\n```\n";
    auto code = extract_code(answer, kind);
    if (traits_of(kind).fence_languages.empty()) {
      // Any block is the kind's: the last one.
      ASSERT_TRUE(code.ok()) << code.err().message;
      EXPECT_EQ(code->code, "not mine\n");
      continue;
    }
    ASSERT_TRUE(code.ok()) << code.err().message;
    EXPECT_EQ(code->code, "mine\n");
    EXPECT_EQ(code->fence_language, fence);
    // Only another language: the message names the kind's fence.
    auto other = extract_code("```rust\nfn x() {}\n```\n", kind);
    ASSERT_FALSE(other.ok());
    EXPECT_NE(other.err().message.find("this task needs a ```" + fence + " block"),
              std::string::npos)
        << other.err().message;
  }
}

// '#' is a comment in python-like kinds and a directive in C-like ones.
TEST(KindsTest, CommentsAndIncludesFollowTheKindsLanguage) {
  const std::string code = "# include \"reference.cpp\"\nx = 1  # cublas in a comment\n";
  for (const auto kind :
       {task_kind::cuda, task_kind::cpp, task_kind::python, task_kind::kernelbench}) {
    SCOPED_TRACE(to_string(kind));
    const auto hit = find_forbidden(code, kind, {"cublas"});
    if (traits_of(kind).hash_comments) {
      EXPECT_FALSE(hit.has_value()) << hit->reason;
    } else {
      ASSERT_TRUE(hit.has_value());
      EXPECT_EQ(hit->item, "#include");
    }
  }
}

// The loaders ask each kind for its own required source, naming it.
TEST(KindsTest, ValidationAsksForTheKindsRequiredSource) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"id": "cuda/x", "kind": "cuda"})", "'args' is required for a cuda task"},
      {R"({"id": "cpp/x", "kind": "cpp"})", "'args' is required for a cpp task"},
      {R"({"id": "python/x", "kind": "python"})", "tests.py (or 'tests') is required"},
      {R"({"id": "kernelbench/x", "kind": "kernelbench"})", "the problem source is empty"},
      {R"({"id": "digits/x", "kind": "digits"})",
       "'target' (integer) is required for a digits task"},
  };
  for (const auto& [json, message] : cases) {
    SCOPED_TRACE(json);
    auto t = parse_task_json(json, "t.json");
    const std::string error = t ? validate_task(*t).err().message : t.err().message;
    EXPECT_NE(error.find(message), std::string::npos) << error;
  }
  auto digits = parse_task_json(R"({"id": "digits/x", "kind": "digits", "target": 3})", "t.json");
  ASSERT_TRUE(digits.ok());
  EXPECT_TRUE(validate_task(*digits).ok());
}

}  // namespace
}  // namespace leap::sandbox

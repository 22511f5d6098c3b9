// The digits toy family: the judge's table, the task format, and the shipped dataset (every task's
// solution passes, every labelled wrong answer fails) through the real engine.
#include "sandbox/digits.hpp"

#include "sandbox/engine.hpp"
#include "sandbox/task.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace leap::sandbox {
namespace {

struct digits_case {
  int target;
  const char* answer;
  verdict_category category;
  const char* feedback;  // exact
};

TEST(DigitSumJudge, JudgesEveryShapeOfAnswer) {
  const digits_case cases[] = {
      {7, "7", verdict_category::pass, ""},
      {7, "34", verdict_category::pass, ""},
      {7, "3 4", verdict_category::pass, ""},
      {7, "I think 3 and 4.", verdict_category::pass, ""},  // other characters do not count
      {12, "```\n93\n```", verdict_category::pass, ""},
      {12, "Sum 5:\n```digits\n93\n```", verdict_category::pass, ""},  // the block, not the prose
      {12, "```\n93", verdict_category::pass, ""},                     // cut off inside the block
      {7, "8", verdict_category::wrong_answer,
       "Your digits sum to 8, not 7. Use smaller digits or fewer of them."},
      {12, "12", verdict_category::wrong_answer,
       "Your digits sum to 3, not 12. Use larger digits or more of them."},
      {7, "", verdict_category::format, "Your answer has no digits. Write digits whose sum is 7."},
      {7, "seven", verdict_category::format,
       "Your answer has no digits. Write digits whose sum is 7."},
      {0, "0", verdict_category::pass, ""},
      {0, "none", verdict_category::format,
       "Your answer has no digits. Write digits whose sum is 0."},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string("target ") + std::to_string(c.target) + ", answer '" + c.answer + "'");
    const auto v = judge_digit_sum(c.target, c.answer);
    EXPECT_EQ(v.category, c.category);
    EXPECT_EQ(v.passed, c.category == verdict_category::pass);
    EXPECT_EQ(v.feedback, c.feedback);
  }
}

TEST(DigitSumTask, ParsesTargetAndWritesThePromptWhenNoneIsGiven) {
  auto t = parse_task_json(R"({"id": "digits/x", "kind": "digits", "target": 11})", "t.json");
  ASSERT_TRUE(t.ok()) << t.err().message;
  EXPECT_EQ(t->kind, task_kind::digits);
  EXPECT_EQ(t->target, 11);
  EXPECT_EQ(t->prompt, "Write digits whose sum is 11.");
  EXPECT_TRUE(validate_task(*t).ok());

  auto missing = parse_task_json(R"({"id": "digits/x", "kind": "digits"})", "t.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.err().message, "t.json: 'target' (integer) is required for a digits task");
  auto negative =
      parse_task_json(R"({"id": "digits/x", "kind": "digits", "target": -1})", "t.json");
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.err().message, "t.json: 'target' must be >= 0");
}

TEST(DigitSumTask, TheShippedDatasetsAnswersGetTheirVerdictsFromTheEngine) {
  const std::filesystem::path file =
      std::filesystem::path(LEAP_SOURCE_DIR) / "sandbox/toy/digit_sum.jsonl";
  auto tasks = load_jsonl(file);
  ASSERT_TRUE(tasks.ok()) << tasks.err().message;
  ASSERT_EQ(tasks->size(), 9u);
  auto created = engine::create(testing::test_engine_config());
  ASSERT_TRUE(created.ok()) << created.err().message;
  auto& e = **created;
  for (const auto& t : *tasks) {
    SCOPED_TRACE(t.id);
    EXPECT_EQ(t.kind, task_kind::digits);
    auto good = e.verify(t, t.solution);
    ASSERT_TRUE(good.ok()) << good.err().message;
    EXPECT_TRUE(good->passed) << good->feedback;
    ASSERT_EQ(t.wrong.size(), 3u);
    for (const auto& w : t.wrong) {
      auto bad = e.verify(t, w.code);
      ASSERT_TRUE(bad.ok()) << bad.err().message;
      EXPECT_FALSE(bad->passed) << w.label;
      EXPECT_EQ(bad->category,
                w.label == "no_digits" ? verdict_category::format : verdict_category::wrong_answer)
          << w.label;
    }
  }
}

}  // namespace
}  // namespace leap::sandbox

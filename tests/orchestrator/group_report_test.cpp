// orchestrator/group_report: a group key's text and log ids, and a turn's request id read back
// into the ids of its log lines.
#include "orchestrator/group_report.hpp"

#include <gtest/gtest.h>

#include <string>

namespace leap {
namespace {

TEST(GroupKeyTest, TextAndLogIdsShowTheStepOneBased) {
  const group_key key{12, split_kind::validation, 5};
  EXPECT_EQ(to_string(key), "step 13 | validation group 5");
  const auto ids = log_ids(key, 2);
  EXPECT_EQ(ids.run, "");
  EXPECT_EQ(ids.step, 13);
  EXPECT_EQ(ids.group, 5);
  EXPECT_EQ(ids.rollout, 2);
  EXPECT_EQ(log_ids(key).rollout, -1);
}

TEST(TurnRequestIdTest, ReadsBackIntoTheTurnsLogIds) {
  const auto id = turn_request_id("quick/start", {3, split_kind::train, 7}, 4, 2);
  EXPECT_EQ(id, "quick/start/3/train/7/4/2");
  const auto ids = log_ids_of_request(id);
  EXPECT_EQ(ids.run, "quick/start");  // a run id with '/' stays whole: fields come from the right
  EXPECT_EQ(ids.step, 4);
  EXPECT_EQ(ids.group, 7);
  EXPECT_EQ(ids.rollout, 4);
}

TEST(TurnRequestIdTest, AnythingElseHasNoIds) {
  const char* const cases[] = {
      "",                  // empty
      "r/0",               // a client's own id
      "r/0/train/1/2",     // a field short
      "r/x/train/1/2/0",   // step not a number
      "r/0/test/1/2/0",    // not a split
      "r/0/train/-1/2/0",  // negative group
      "r/0/train/1/2/0 ",  // trailing text
      "r/0/train/1/2/",    // empty turn
  };
  for (const char* id : cases) {
    const auto ids = log_ids_of_request(id);
    EXPECT_EQ(ids.run, "") << id;
    EXPECT_EQ(ids.step, -1) << id;
    EXPECT_EQ(ids.group, -1) << id;
    EXPECT_EQ(ids.rollout, -1) << id;
  }
}

}  // namespace
}  // namespace leap

// common/log: the line format (time, component, level, ids as fields) and the level filter, read
// back from the real stderr (fd 2 pointed at a file for the test's duration).
#include "common/log.hpp"

#include "tests/common/captured_stderr.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>
#include <string>

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using leap::testing::captured_stderr;

TEST(LogFields, EachIdThatIsSetInOrder) {
  EXPECT_EQ(leap::log::fields({}), "");
  EXPECT_EQ(leap::log::fields({"quickstart"}), "run quickstart | ");
  EXPECT_EQ(leap::log::fields({"r", 3, 5, 2}), "run r | step 3 | group 5 | rollout 2 | ");
  EXPECT_EQ(leap::log::fields({"", -1, 0, -1}), "group 0 | ");
}

TEST(LogWrite, ALineHasTimeComponentLevelIdsAndText) {
  leap::log::setup("leap test", leap::log_verbosity::info);
  captured_stderr err;
  leap::log::info("started", {"r1", 3, 5, 2});
  const std::string text = err.text();
  const std::regex line(
      R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z leap test \| info \| run r1 \| step 3 \| group 5 \| rollout 2 \| started\n$)");
  EXPECT_TRUE(std::regex_match(text, line)) << text;
}

TEST(LogWrite, TheLevelFiltersLessSevereLines) {
  leap::log::setup("leap test", leap::log_verbosity::warn);
  EXPECT_EQ(leap::log::current_level(), leap::log_verbosity::warn);
  captured_stderr err;
  leap::log::debug("a debug line");
  leap::log::info("an info line");
  leap::log::warn("a warning");
  leap::log::error("an error");
  leap::log::set_level(leap::log_verbosity::off);
  leap::log::error("nothing at off");
  leap::log::set_level(leap::log_verbosity::debug);
  leap::log::debug("debug again");
  const std::string text = err.text();
  EXPECT_THAT(text, Not(HasSubstr("a debug line")));
  EXPECT_THAT(text, Not(HasSubstr("an info line")));
  EXPECT_THAT(text, HasSubstr(" | warning | a warning\n"));
  EXPECT_THAT(text, HasSubstr(" | error | an error\n"));
  EXPECT_THAT(text, Not(HasSubstr("nothing at off")));
  EXPECT_THAT(text, HasSubstr(" | debug | debug again\n"));
}

}  // namespace

// actors/log_sink: an actor's line reaches the program's log (common/log.hpp, spdlog on stderr)
// with its ids as fields, the run's id filled in where the line has none. Read back from the real
// stderr (fd 2 pointed at a file for the test's duration).
#include "actors/log_sink.hpp"

#include "orchestrator/group_report.hpp"
#include "tests/common/captured_stderr.hpp"

#include <gtest/gtest.h>

#include <regex>
#include <string>

namespace leap::actors {
namespace {

using leap::testing::captured_stderr;

TEST(LogSink, ALineOfATurnCarriesRunStepGroupAndRolloutAsFields) {
  log::setup("leap test", log::level::info);
  captured_stderr err;
  const auto sink = program_log(log::ids{"run-a"});
  // A verifier's line about one turn: its ids come from the turn's request id.
  emit(sink, log::level::warn, "job 7 failed",
       log_ids_of_request(turn_request_id("run-a", {4, split_kind::train, 12}, 3, 0)));
  // A driver's line about a group, and one about the whole process.
  emit(sink, log::level::info, "resumed", log_ids({0, split_kind::validation, 2}));
  emit(sink, log::level::info, "stopping");
  const std::string text = err.text();
  const std::string time = R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)";
  const std::regex lines(
      "^" + time +
      R"( leap test \| warning \| run run-a \| step 5 \| group 12 \| rollout 3 \| job 7 failed\n)" +
      time + R"( leap test \| info \| run run-a \| step 1 \| group 2 \| resumed\n)" + time +
      R"( leap test \| info \| run run-a \| stopping\n$)");
  EXPECT_TRUE(std::regex_match(text, lines)) << text;
}

TEST(LogSink, ANullSinkDropsTheLine) {
  int calls = 0;
  emit(log_sink{}, log::level::error, "nobody listens");
  emit([&](const log_line&) { ++calls; }, log::level::error, "one listener");
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace leap::actors

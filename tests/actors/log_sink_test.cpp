// actors/log_sink: an actor's line reaches the program's log (common/log.hpp, spdlog on stderr)
// with its ids as fields, the run's id filled in where the line has none. Read back from the real
// stderr (fd 2 pointed at a file for the test's duration).
#include "actors/log_sink.hpp"

#include "orchestrator/group_report.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <unistd.h>

namespace leap::actors {
namespace {

namespace fs = std::filesystem;

// Points fd 2 at a file while alive; text() is what was written to it.
class captured_stderr {
 public:
  captured_stderr()
      : path_(fs::temp_directory_path() /
              ("leap_log_sink_test_" + std::to_string(::getpid()) + ".txt")) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    std::FILE* f = std::fopen(path_.c_str(), "w");
    ::dup2(::fileno(f), 2);
    std::fclose(f);
  }
  ~captured_stderr() {
    restore();
    std::error_code ec;
    fs::remove(path_, ec);
  }
  captured_stderr(const captured_stderr&) = delete;
  captured_stderr& operator=(const captured_stderr&) = delete;

  std::string text() {
    restore();
    std::ifstream in(path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  void restore() {
    if (saved_ < 0) {
      return;
    }
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }

  fs::path path_;
  int saved_ = -1;
};

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

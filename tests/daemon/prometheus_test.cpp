// Prometheus text of the daemon: label injection, the merge of several experiments' metrics files
// (on a fixture shaped like leap run's RUN_DIR/metrics.prom), and the daemon's own metrics.
#include "tools/daemon/prometheus.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace leap::daemon {
namespace {

std::string fixture() {
  std::ifstream in(std::string(LEAP_SOURCE_DIR) + "/tests/daemon/fixtures/metrics.prom");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(Prometheus, AddLabelToOneSample) {
  struct row {
    std::string line;
    std::optional<std::string> expected;
  };
  const std::vector<row> rows = {
      {"m 1", R"(m{experiment="e1"} 1)"},
      {"m{} 1", R"(m{experiment="e1"} 1)"},
      {R"(m{a="b"} 2.5 1700)", R"(m{experiment="e1",a="b"} 2.5 1700)"},
      {R"(m{a="b",} 2)", R"(m{experiment="e1",a="b"} 2)"},
      {R"(m{a="x\"}y",b="2"} 3)", R"(m{experiment="e1",a="x\"}y",b="2"} 3)"},
      {"m_total 1e+06", R"(m_total{experiment="e1"} 1e+06)"},
      {"m", std::nullopt},
      {"m{a=\"b\"}", std::nullopt},
      {"m{a=\"b\" 1", std::nullopt},
      {"not a sample", std::nullopt},
      {"m +Inf", R"(m{experiment="e1"} +Inf)"},
      {" 1", std::nullopt},
  };
  for (const auto& r : rows) {
    EXPECT_EQ(add_label(r.line, "experiment", "e1"), r.expected) << r.line;
  }
}

TEST(Prometheus, MergesExperimentsUnderOneHeaderPerFamily) {
  const auto text = fixture();
  ASSERT_FALSE(text.empty());
  const auto out = merge_experiment_metrics({{"e1", text}, {"e2", text}});
  const std::string expected =
      "# HELP leap_step Training steps completed.\n"
      "# TYPE leap_step gauge\n"
      "leap_step{experiment=\"e1\"} 3\n"
      "leap_step{experiment=\"e2\"} 3\n"
      "# HELP leap_groups_total Groups finished, by gate decision.\n"
      "# TYPE leap_groups_total counter\n"
      "leap_groups_total{experiment=\"e1\",decision=\"open\"} 4\n"
      "leap_groups_total{experiment=\"e1\",decision=\"closed_easy\",note=\"a \\\"quoted\\\" } "
      "brace\"} 7\n"
      "leap_groups_total{experiment=\"e2\",decision=\"open\"} 4\n"
      "leap_groups_total{experiment=\"e2\",decision=\"closed_easy\",note=\"a \\\"quoted\\\" } "
      "brace\"} 7\n"
      "# HELP leap_step_seconds Wall time of a step.\n"
      "# TYPE leap_step_seconds summary\n"
      "leap_step_seconds_sum{experiment=\"e1\"} 1.25 1700000000000\n"
      "leap_step_seconds_count{experiment=\"e1\"} 3\n"
      "leap_step_seconds_sum{experiment=\"e2\"} 1.25 1700000000000\n"
      "leap_step_seconds_count{experiment=\"e2\"} 3\n"
      "leap_untyped_thing{experiment=\"e1\"} 1\n"
      "leap_untyped_thing{experiment=\"e2\"} 1\n";
  EXPECT_EQ(out, expected);
}

TEST(Prometheus, NothingToMergeGivesNothing) {
  EXPECT_EQ(merge_experiment_metrics({}), "");
  EXPECT_EQ(merge_experiment_metrics({{"e1", ""}, {"e2", "# HELP x y\n"}}), "");
}

TEST(Prometheus, DaemonMetricsCountFromTheRecords) {
  auto rec = [](std::uint64_t seq, experiment_state s, int pid, std::int64_t submitted,
                std::int64_t first_start, int starts) {
    experiment_record r;
    r.seq = seq;
    r.id = id_of(seq);
    r.state = s;
    r.pid = pid;
    r.submitted_unix_ms = submitted;
    r.first_started_unix_ms = first_start;
    r.starts = starts;
    return r;
  };
  const std::vector<experiment_record> records = {
      rec(1, experiment_state::succeeded, 0, 1000, 3000, 1),
      rec(2, experiment_state::running, 42, 2000, 6000, 3),
      rec(3, experiment_state::queued, 0, 4000, 0, 0),
      rec(4, experiment_state::cancelled, 0, 5000, 0, 0),
  };
  daemon_settings settings;
  settings.max_concurrent = 2;
  const auto out = daemon_metrics(records, settings, 10000, 4000);
  for (const char* line : {
           "leap_daemon_experiments{state=\"queued\"} 1\n",
           "leap_daemon_experiments{state=\"running\"} 1\n",
           "leap_daemon_experiments{state=\"succeeded\"} 1\n",
           "leap_daemon_experiments{state=\"failed\"} 0\n",
           "leap_daemon_experiments{state=\"cancelled\"} 1\n",
           "leap_daemon_queue_length 1\n",
           "leap_daemon_running 1\n",
           "leap_daemon_max_concurrent 2\n",
           "leap_daemon_queue_wait_seconds_sum 6\n",  // (3000-1000) + (6000-2000) ms
           "leap_daemon_queue_wait_seconds_count 2\n",
           "leap_daemon_oldest_queued_seconds 6\n",
           "leap_daemon_child_restarts_total 2\n",
           "leap_daemon_uptime_seconds 6\n",
           "# TYPE leap_daemon_queue_wait_seconds summary\n",
       }) {
    EXPECT_NE(out.find(line), std::string::npos) << line << "\nin\n" << out;
  }
}

}  // namespace
}  // namespace leap::daemon

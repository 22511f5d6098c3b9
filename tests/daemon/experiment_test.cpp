// The experiment state machine and the scheduler, as tables of cases.
#include "tools/daemon/experiment.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace leap::daemon {
namespace {

experiment_record make(std::uint64_t seq, experiment_state state, int pid = 0) {
  experiment_record r;
  r.seq = seq;
  r.id = id_of(seq);
  r.name = "x";
  r.state = state;
  r.pid = pid;
  r.submitted_unix_ms = 1000;
  return r;
}

TEST(ExperimentState, NamesRoundTrip) {
  for (auto s : {experiment_state::queued, experiment_state::running, experiment_state::succeeded,
                 experiment_state::failed, experiment_state::cancelled}) {
    EXPECT_EQ(parse_experiment_state(to_string(s)), s);
  }
  EXPECT_FALSE(parse_experiment_state("done"));
}

TEST(ExperimentState, IdsAreCheckedBeforeTheyBecomePaths) {
  EXPECT_EQ(id_of(7), "e7");
  for (const char* good : {"e1", "e42", "e123456789"}) {
    EXPECT_TRUE(is_valid_id(good)) << good;
  }
  for (const char* bad : {"", "e", "1", "e1a", "../e1", "e/1", "E1", "e-1"}) {
    EXPECT_FALSE(is_valid_id(bad)) << bad;
  }
}

TEST(ExperimentState, RecordJsonRoundTrips) {
  auto r = make(3, experiment_state::running, 4242);
  r.config_source = "configs/a.yaml";
  r.cwd = "/work";
  r.run_dir = "/work/runs/a";
  r.first_started_unix_ms = 2000;
  r.started_unix_ms = 3000;
  r.starts = 2;
  r.cancel_requested = true;
  r.cancel_deadline_unix_ms = 9000;
  r.exit_code = 130;
  r.message = "m";
  auto back = record_from_json(to_json(r));
  ASSERT_TRUE(back) << back.err().message;
  EXPECT_EQ(*back, r);
  r.exit_code.reset();
  EXPECT_EQ(*record_from_json(to_json(r)), r);
}

TEST(ExperimentState, RecordJsonErrorsNameTheField) {
  auto j = to_json(make(1, experiment_state::queued));
  struct row {
    std::string field;
    nlohmann::json value;
    std::string expected;
  };
  const std::vector<row> rows = {
      {"state", "done", "state: unknown state 'done'"},
      {"seq", "one", "seq:"},
      {"id", "../x", "id: '../x' is not an experiment id"},
      {"pid", nlohmann::json(), "pid:"},
  };
  for (const auto& r : rows) {
    auto bad = j;
    bad[r.field] = r.value;
    auto parsed = record_from_json(bad);
    ASSERT_FALSE(parsed) << r.field;
    EXPECT_NE(parsed.err().message.find(r.expected), std::string::npos) << parsed.err().message;
  }
  auto missing = j;
  missing.erase("run_dir");
  ASSERT_FALSE(record_from_json(missing));
  EXPECT_EQ(record_from_json(missing).err().message.rfind("run_dir:", 0), 0u);
}

TEST(ExperimentState, StartMovesQueuedAndChildlessRunning) {
  auto started = on_started(make(1, experiment_state::queued), 100, 5000);
  ASSERT_TRUE(started);
  EXPECT_EQ(started->state, experiment_state::running);
  EXPECT_EQ(started->pid, 100);
  EXPECT_EQ(started->starts, 1);
  EXPECT_EQ(started->first_started_unix_ms, 5000);
  // A restart after a daemon stop keeps the first start (the queue wait) and counts the start.
  started->pid = 0;
  auto again = on_started(*started, 200, 9000);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->starts, 2);
  EXPECT_EQ(again->first_started_unix_ms, 5000);
  EXPECT_EQ(again->started_unix_ms, 9000);
  EXPECT_NE(again->message.find("resumed"), std::string::npos);
  // Nothing else starts.
  EXPECT_FALSE(on_started(*again, 300, 9500));
  for (auto s :
       {experiment_state::succeeded, experiment_state::failed, experiment_state::cancelled}) {
    EXPECT_FALSE(on_started(make(1, s), 1, 1)) << to_string(s);
  }
}

TEST(ExperimentState, ExitDecidesTheFinalState) {
  struct row {
    const char* what;
    bool cancel_requested;
    bool stopping;
    child_exit how;
    experiment_state expected;
    const char* message_part;
  };
  const std::vector<row> rows = {
      {"finished", false, false, {false, 0}, experiment_state::succeeded, ""},
      {"error", false, false, {false, 1}, experiment_state::failed, "status 1: leap run: error: x"},
      {"crash", false, false, {true, 11}, experiment_state::failed, "signal 11"},
      {"external SIGTERM", false, false, {false, 130}, experiment_state::failed, "status 130"},
      {"cancel, clean stop", true, false, {false, 130}, experiment_state::cancelled, "cancelled"},
      {"cancel, SIGKILL", true, false, {true, 9}, experiment_state::cancelled, "SIGKILL"},
      {"cancel too late",
       true,
       false,
       {false, 0},
       experiment_state::succeeded,
       "before the cancel"},
      {"daemon stop, clean", false, true, {false, 130}, experiment_state::running, "resumes"},
      {"daemon stop, SIGKILL", false, true, {true, 9}, experiment_state::running, "resumes"},
      {"daemon stop, finished", false, true, {false, 0}, experiment_state::succeeded, ""},
      {"daemon stop, error", false, true, {false, 1}, experiment_state::failed, "status 1"},
      {"daemon stop during cancel", true, true, {false, 130}, experiment_state::cancelled, ""},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.what);
    auto rec = make(1, experiment_state::running, 77);
    rec.cancel_requested = r.cancel_requested;
    auto out = on_exited(rec, r.how, r.stopping, "step 1\nleap run: error: x\n\n", 7000);
    EXPECT_EQ(out.state, r.expected);
    EXPECT_EQ(out.pid, 0);
    EXPECT_EQ(out.exit_code, r.how.signaled ? 128 + r.how.code : r.how.code);
    EXPECT_NE(out.message.find(r.message_part), std::string::npos) << out.message;
    EXPECT_EQ(out.finished_unix_ms, r.expected == experiment_state::running ? 0 : 7000);
  }
}

TEST(ExperimentState, CancelIsImmediateWithoutAChild) {
  auto queued = on_cancel(make(1, experiment_state::queued), 100, 30000);
  ASSERT_TRUE(queued);
  EXPECT_EQ(queued->state, experiment_state::cancelled);
  auto childless = on_cancel(make(1, experiment_state::running, 0), 100, 30000);
  ASSERT_TRUE(childless);
  EXPECT_EQ(childless->state, experiment_state::cancelled);

  auto running = on_cancel(make(1, experiment_state::running, 55), 100, 30000);
  ASSERT_TRUE(running);
  EXPECT_EQ(running->state, experiment_state::running);
  EXPECT_TRUE(running->cancel_requested);
  EXPECT_EQ(running->cancel_deadline_unix_ms, 30100);
  auto twice = on_cancel(*running, 200, 30000);
  ASSERT_FALSE(twice);
  EXPECT_NE(twice.err().message.find("already being cancelled"), std::string::npos);
  for (auto s :
       {experiment_state::succeeded, experiment_state::failed, experiment_state::cancelled}) {
    auto done = on_cancel(make(1, s), 1, 1);
    ASSERT_FALSE(done);
    EXPECT_EQ(done.err().message, "e1 is already " + to_string(s));
  }
}

TEST(Scheduler, FillsFreeSlotsResumedFirstThenBySubmission) {
  using s = experiment_state;
  struct row {
    const char* what;
    std::vector<experiment_record> records;
    int limit;
    bool stopping;
    std::vector<std::string> expected;
  };
  const std::vector<row> rows = {
      {"empty", {}, 2, false, {}},
      {"fifo",
       {make(3, s::queued), make(1, s::queued), make(2, s::queued)},
       2,
       false,
       {"e1", "e2"}},
      {"full", {make(1, s::running, 10), make(2, s::queued)}, 1, false, {}},
      {"one free",
       {make(1, s::running, 10), make(2, s::queued), make(3, s::queued)},
       2,
       false,
       {"e2"}},
      {"resume before queue", {make(1, s::queued), make(5, s::running, 0)}, 1, false, {"e5"}},
      {"limit lowered stops nothing",
       {make(1, s::running, 10), make(2, s::running, 11), make(3, s::queued)},
       1,
       false,
       {}},
      {"finished free their slot",
       {make(1, s::succeeded), make(2, s::failed), make(3, s::cancelled), make(4, s::queued)},
       1,
       false,
       {"e4"}},
      {"stopping", {make(1, s::queued)}, 4, true, {}},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.what);
    EXPECT_EQ(to_start(r.records, r.limit, r.stopping), r.expected);
  }
}

TEST(TailLines, KeepsTheLastLines) {
  struct row {
    std::string text;
    std::size_t n;
    std::string expected;
  };
  const std::vector<row> rows = {
      {"", 3, ""},
      {"a\nb\nc\n", 2, "b\nc\n"},
      {"a\nb\nc", 2, "b\nc"},
      {"a\nb\n", 5, "a\nb\n"},
      {"a\nb\n", 0, ""},
      {"only", 1, "only"},
  };
  for (const auto& r : rows) {
    EXPECT_EQ(tail_lines(r.text, r.n), r.expected) << r.text;
  }
}

}  // namespace
}  // namespace leap::daemon

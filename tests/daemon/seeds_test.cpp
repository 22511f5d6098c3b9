// Seeds through the daemon (issue 35): the `seeds` query parameter of a submission, each seed's
// state through the experiment's state machine, and the records a restarted daemon reads back.
#include "tools/daemon/api.hpp"
#include "tools/daemon/experiment.hpp"
#include "tools/daemon/prometheus.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace leap::daemon {
namespace {

std::vector<seed_state> states_of(const experiment_record& r) {
  std::vector<seed_state> out;
  for (const auto& s : r.seeds) {
    out.push_back(s.state);
  }
  return out;
}

// A queued experiment of seeds 1, 2 and 3, as the API makes it.
experiment_record seeded(const std::string& seeds = "1-3") {
  auto request = parse_submit("experiment:\n  name: s\n  run_dir: runs/s\n", "s.yaml", "/work",
                              std::optional<std::string>(seeds));
  EXPECT_TRUE(request) << request.err().message;
  auto r = make_submission(*request, 1, "/home/experiments/e1", 10);
  EXPECT_TRUE(r) << r.err().message;
  return *r;
}

constexpr child_exit exit_0{false, 0};
constexpr child_exit exit_1{false, 1};
constexpr child_exit exit_130{false, 130};

TEST(DaemonSeeds, TheSeedsParameterTakesTheCommandsSyntax) {
  const std::string yaml = "experiment:\n  steps: 1\n";
  for (const auto& [given, expected] :
       std::vector<std::pair<std::string, std::vector<std::uint64_t>>>{
           {"1,2,3", {1, 2, 3}}, {"1-3", {1, 2, 3}}, {"1-3,7", {1, 2, 3, 7}}, {"0", {0}}}) {
    auto r = parse_submit(yaml, "a.yaml", "", given);
    ASSERT_TRUE(r) << given << ": " << r.err().message;
    EXPECT_EQ(r->seeds, expected) << given;
    EXPECT_EQ(r->seeds_spec, given);
  }
  // Absent: one plain run; present but empty or wrong: refused, naming the parameter.
  auto plain = parse_submit(yaml, "a.yaml", "");
  ASSERT_TRUE(plain);
  EXPECT_TRUE(plain->seeds.empty());
  for (const char* bad : {"", "1,,2", "x", "3-1", "1,1", "1-5000", "-1", "1-"}) {
    auto r = parse_submit(yaml, "a.yaml", "", std::string(bad));
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.err().message.rfind("seeds", 0), 0u) << r.err().message;
    EXPECT_NE(r.err().message.find("the seeds query parameter"), std::string::npos)
        << r.err().message;
    EXPECT_EQ(r.err().message.find("--seeds"), std::string::npos) << r.err().message;
  }
}

TEST(DaemonSeeds, ASubmissionQueuesEverySeedAndTheJsonNamesTheirFolders) {
  const auto r = seeded("2-3");
  EXPECT_EQ(r.seeds_spec, "2-3");
  EXPECT_EQ(states_of(r), (std::vector{seed_state::queued, seed_state::queued}));
  const auto j = to_json(r);
  ASSERT_EQ(j["seeds"].size(), 2u);
  EXPECT_EQ(j["seeds"][0]["seed"], 2);
  EXPECT_EQ(j["seeds"][0]["state"], "queued");
  EXPECT_EQ(j["seeds"][1]["run_dir"], "/work/runs/s/seed-3");
  EXPECT_EQ(j["seeds_spec"], "2-3");
  // A plain run has no seeds in its JSON, and a state file without them reads as a plain run
  // (state files a daemon before seeds wrote).
  auto plain = r;
  plain.seeds.clear();
  plain.seeds_spec.clear();
  EXPECT_FALSE(to_json(plain).contains("seeds"));
  EXPECT_EQ(*record_from_json(to_json(plain)), plain);
}

TEST(DaemonSeeds, RecordsWithSeedsRoundTripAndBadSeedStatesAreNamed) {
  auto r = seeded();
  r = *on_started(r, 77, 20);
  r = on_exited(r, exit_1, false, "leap run: error: [seed 1] boom\nseeds of 's': 1 failed\n", 30);
  auto back = record_from_json(to_json(r));
  ASSERT_TRUE(back) << back.err().message;
  EXPECT_EQ(*back, r);
  auto j = to_json(r);
  j["seeds"][1]["state"] = "finished";
  auto bad = record_from_json(j);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.err().message.find("seeds: seed 2: unknown state 'finished'"), std::string::npos)
      << bad.err().message;
}

TEST(DaemonSeeds, SeedsRunOneAfterTheOtherInTheExperimentsSlot) {
  auto r = seeded();
  EXPECT_EQ(current_seed(r), 1u);
  r = *on_started(r, 100, 20);
  EXPECT_EQ(states_of(r),
            (std::vector{seed_state::running, seed_state::queued, seed_state::queued}));
  EXPECT_NE(r.message.find("seed 1 (1 of 3)"), std::string::npos) << r.message;

  // Seed 1 ends: the experiment stays running without a child, and the scheduler starts it
  // before a queued experiment submitted earlier would start.
  r = on_exited(r, exit_0, false, "", 30);
  EXPECT_EQ(r.state, experiment_state::running);
  EXPECT_EQ(r.pid, 0);
  EXPECT_EQ(states_of(r), (std::vector{seed_state::done, seed_state::queued, seed_state::queued}));
  EXPECT_EQ(current_seed(r), 2u);
  auto earlier = seeded();
  earlier.id = "e0";
  earlier.seq = 0;
  EXPECT_EQ(to_start({earlier, r}, 1, false), std::vector<std::string>{"e1"});

  // Seed 2 fails: recorded with its error line, and seed 3 still runs.
  r = *on_started(r, 101, 40);
  EXPECT_EQ(current_seed(r), 2u);
  r = on_exited(r, exit_1, false,
                "leap run: error: [seed 2] learner: loss is NaN\n"
                "seeds of 's': 0 finished, 0 finished before, 1 failed: seed 2 (exit 1)\n",
                50);
  EXPECT_EQ(r.state, experiment_state::running);
  EXPECT_EQ(r.seeds[1].state, seed_state::failed);
  EXPECT_EQ(r.seeds[1].exit_code, 1);
  EXPECT_EQ(r.seeds[1].message,
            "leap run exited with status 1: leap run: error: [seed 2] learner: loss is NaN");
  r = *on_started(r, 102, 60);
  r = on_exited(r, exit_0, false, "", 70);
  // Every seed ended: the experiment fails, naming the failed seed.
  EXPECT_EQ(r.state, experiment_state::failed);
  EXPECT_EQ(r.finished_unix_ms, 70);
  EXPECT_EQ(states_of(r), (std::vector{seed_state::done, seed_state::failed, seed_state::done}));
  EXPECT_NE(r.message.find("seeds failed: 2 (exit 1)"), std::string::npos) << r.message;
  EXPECT_FALSE(current_seed(r));
  EXPECT_EQ(r.starts, 3);
}

TEST(DaemonSeeds, AllSeedsDoneSucceeds) {
  auto r = seeded("4-5");
  for (int i = 0; i < 2; ++i) {
    r = *on_started(r, 100 + i, 20);
    r = on_exited(r, exit_0, false, "", 30);
  }
  EXPECT_EQ(r.state, experiment_state::succeeded);
  EXPECT_EQ(r.message, "");
  EXPECT_EQ(states_of(r), (std::vector{seed_state::done, seed_state::done}));
}

TEST(DaemonSeeds, TheDaemonsStopKeepsTheSeedRunningAndARestartResumesOnlyIt) {
  auto r = seeded();
  r = *on_started(r, 100, 20);
  r = on_exited(r, exit_0, false, "", 30);
  r = *on_started(r, 101, 40);
  r = on_exited(r, exit_130, true, "", 50);
  EXPECT_EQ(r.state, experiment_state::running);
  EXPECT_EQ(states_of(r), (std::vector{seed_state::done, seed_state::running, seed_state::queued}));
  // What the next daemon reads from the state file resumes seed 2, not seed 1.
  auto restarted = *record_from_json(to_json(r));
  EXPECT_EQ(to_start({restarted}, 1, false), std::vector<std::string>{"e1"});
  EXPECT_EQ(current_seed(restarted), 2u);
  restarted = *on_started(restarted, 200, 60);
  EXPECT_EQ(restarted.seeds[1].starts, 2);
  EXPECT_EQ(restarted.seeds[0].starts, 1);
  EXPECT_NE(restarted.message.find("seed 2 (2 of 3) resumed"), std::string::npos)
      << restarted.message;
  // Seed 2's second start is the one restart /metrics counts, not seed 3's first.
  restarted = on_exited(restarted, exit_0, false, "", 70);
  restarted = *on_started(restarted, 201, 80);
  const auto text = daemon_metrics({restarted}, daemon_settings{}, 90, 0);
  EXPECT_NE(text.find("leap_daemon_child_restarts_total 1\n"), std::string::npos) << text;
}

TEST(DaemonSeeds, CancelCancelsTheRunningSeedAndTheRest) {
  auto r = seeded();
  r = *on_started(r, 100, 20);
  r = on_exited(r, exit_0, false, "", 30);
  r = *on_started(r, 101, 40);
  r = *on_cancel(r, 50, 1000);
  EXPECT_TRUE(r.cancel_requested);
  EXPECT_EQ(r.seeds[1].state, seed_state::running);  // until its child ends
  r = on_exited(r, exit_130, false, "", 60);
  EXPECT_EQ(r.state, experiment_state::cancelled);
  EXPECT_EQ(states_of(r),
            (std::vector{seed_state::done, seed_state::cancelled, seed_state::cancelled}));
  EXPECT_TRUE(to_start({r}, 1, false).empty());

  // Without a child (queued, or between seeds): every open seed at once.
  auto queued = *on_cancel(seeded(), 10, 1000);
  EXPECT_EQ(queued.state, experiment_state::cancelled);
  EXPECT_EQ(states_of(queued),
            (std::vector{seed_state::cancelled, seed_state::cancelled, seed_state::cancelled}));
  auto between = seeded();
  between = *on_started(between, 100, 20);
  between = on_exited(between, exit_0, false, "", 30);
  between = *on_cancel(between, 40, 1000);
  EXPECT_EQ(between.state, experiment_state::cancelled);
  EXPECT_EQ(states_of(between),
            (std::vector{seed_state::done, seed_state::cancelled, seed_state::cancelled}));
}

}  // namespace
}  // namespace leap::daemon

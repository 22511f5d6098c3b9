// The verifier dispatcher's bookkeeping (actors/dispatch_table.hpp) without actors: assignment by
// free slots, FIFO waiting, re-sending a lost target's jobs, and counting each verdict once.
// Each case is a script of operations with the expected answer of each.
#include "actors/dispatch_table.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace leap::actors {
namespace {

using kind = dispatch_table::verdict_kind;
using pairs = std::vector<dispatch_table::assignment>;

enum class verb { up, down, jobs, assign, complete, fail, capacity };

struct op {
  verb v;
  std::uint64_t a = 0;                // target, job count, or job
  std::uint64_t b = 0;                // capacity or target
  pairs assigned;                     // assign
  std::vector<std::uint64_t> resent;  // down
  kind verdict = kind::accepted;      // complete
  bool requeued = false;              // fail
};

op up(std::size_t t, std::size_t capacity) { return {verb::up, t, capacity}; }
op down(std::size_t t, std::vector<std::uint64_t> resent) {
  op o{verb::down, t};
  o.resent = std::move(resent);
  return o;
}
op jobs(std::uint64_t n) { return {verb::jobs, n}; }
op assign(pairs expected) {
  op o{verb::assign};
  o.assigned = std::move(expected);
  return o;
}
op complete(std::uint64_t job, std::size_t t, kind k) {
  op o{verb::complete, job, t};
  o.verdict = k;
  return o;
}
op fail(std::uint64_t job, std::size_t t, bool requeued) {
  op o{verb::fail, job, t};
  o.requeued = requeued;
  return o;
}
op capacity(std::size_t t, std::size_t c) { return {verb::capacity, t, c}; }

struct script_case {
  const char* name;
  std::size_t targets;
  std::vector<op> ops;
  dispatch_table::totals expected;  // jobs, judged, resent, duplicates
  std::size_t queued_at_end = 0;
};

TEST(DispatchTable, ScriptsGiveTheExpectedAnswers) {
  const script_case cases[] = {
      {"the most free slots first, ties to the lowest index",
       2,
       {up(0, 2), up(1, 3), jobs(4), assign({{1, 1}, {2, 0}, {3, 1}, {4, 0}})},
       {4, 0, 0, 0}},
      {"jobs wait in FIFO order for a free slot",
       1,
       {up(0, 1), jobs(2), assign({{1, 0}}), assign({}), complete(1, 0, kind::accepted),
        assign({{2, 0}})},
       {2, 1, 0, 0}},
      {"nothing is sent while every target is down",
       2,
       {jobs(2), assign({}), up(1, 1), assign({{1, 1}})},
       {2, 0, 0, 0},
       1},
      {"a lost target's jobs go first, to the others",
       2,
       {up(0, 2), up(1, 1), jobs(4), assign({{1, 0}, {2, 0}, {3, 1}}), down(0, {1, 2}), assign({}),
        complete(3, 1, kind::accepted), assign({{1, 1}}), complete(1, 1, kind::accepted),
        assign({{2, 1}})},
       {4, 2, 2, 0},
       1},
      {"a late verdict from a lost node after the re-sent copy counted is dropped",
       2,
       {up(0, 1), up(1, 1), jobs(1), assign({{1, 0}}), down(0, {1}), assign({{1, 1}}),
        complete(1, 1, kind::accepted), complete(1, 0, kind::duplicate)},
       {1, 1, 1, 1}},
      {"a late verdict that comes first counts; the re-sent copy's is dropped",
       2,
       {up(0, 1), up(1, 1), jobs(1), assign({{1, 0}}), down(0, {1}), assign({{1, 1}}),
        complete(1, 0, kind::accepted), complete(1, 1, kind::duplicate)},
       {1, 1, 1, 1}},
      {"a late verdict of a job still waiting takes it out of the queue",
       1,
       {up(0, 1), jobs(1), assign({{1, 0}}), down(0, {1}), complete(1, 0, kind::accepted), up(0, 1),
        assign({})},
       {1, 1, 1, 0}},
      {"an error reply puts the job back at the front",
       1,
       {up(0, 1), jobs(2), assign({{1, 0}}), fail(1, 0, true), assign({{1, 0}}),
        complete(1, 0, kind::accepted), assign({{2, 0}})},
       {2, 1, 1, 0}},
      {"an error after the target was declared lost changes nothing",
       2,
       {up(0, 1), up(1, 1), jobs(1), assign({{1, 0}}), down(0, {1}), assign({{1, 1}}),
        fail(1, 0, false), complete(1, 1, kind::accepted)},
       {1, 1, 1, 0}},
      {"a node that comes back is used again",
       1,
       {up(0, 1), jobs(2), assign({{1, 0}}), down(0, {1}), assign({}), up(0, 1), assign({{1, 0}}),
        complete(1, 0, kind::accepted), assign({{2, 0}})},
       {2, 1, 1, 0}},
      {"a larger reported capacity takes more jobs; a lost target reports none",
       2,
       {up(0, 1), jobs(3), assign({{1, 0}}), capacity(0, 3), assign({{2, 0}, {3, 0}}), down(1, {}),
        capacity(1, 5), jobs(1), assign({})},
       {4, 0, 0, 0},
       1},
      {"a verdict for an unknown job is dropped",
       1,
       {up(0, 1), complete(9, 0, kind::duplicate)},
       {0, 0, 0, 1}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    dispatch_table table;
    for (std::size_t t = 0; t < c.targets; ++t) {
      table.add_target("t" + std::to_string(t));
    }
    for (std::size_t i = 0; i < c.ops.size(); ++i) {
      SCOPED_TRACE("op " + std::to_string(i));
      const op& o = c.ops[i];
      switch (o.v) {
        case verb::up:
          table.set_up(o.a, o.b);
          break;
        case verb::down:
          EXPECT_EQ(table.set_down(o.a), o.resent);
          break;
        case verb::jobs:
          for (std::uint64_t j = 0; j < o.a; ++j) {
            table.add_job();
          }
          break;
        case verb::assign:
          EXPECT_EQ(table.assign(), o.assigned);
          break;
        case verb::complete:
          EXPECT_EQ(table.complete(o.a, o.b), o.verdict);
          break;
        case verb::fail:
          EXPECT_EQ(table.fail(o.a, o.b), o.requeued);
          break;
        case verb::capacity:
          table.set_capacity(o.a, o.b);
          break;
      }
    }
    const auto& got = table.counts();
    EXPECT_EQ(got.jobs, c.expected.jobs);
    EXPECT_EQ(got.judged, c.expected.judged);
    EXPECT_EQ(got.resent, c.expected.resent);
    EXPECT_EQ(got.duplicates, c.expected.duplicates);
    EXPECT_EQ(table.queued(), c.queued_at_end);
  }
}

TEST(DispatchTable, SlotsAreFreedByVerdictsErrorsAndLoss) {
  dispatch_table table;
  const auto a = table.add_target("a");
  table.set_up(a, 3);
  for (int i = 0; i < 3; ++i) {
    table.add_job();
  }
  ASSERT_EQ(table.assign().size(), 3u);
  EXPECT_EQ(table.target(a).in_flight, 3u);
  EXPECT_EQ(table.free_slots(), 0u);
  table.complete(1, a);
  table.fail(2, a);
  EXPECT_EQ(table.target(a).in_flight, 1u);
  table.set_down(a);
  EXPECT_EQ(table.target(a).in_flight, 0u);
  EXPECT_EQ(table.target(a).lost, 2u);
  EXPECT_EQ(table.open_jobs(), 2u);
  EXPECT_FALSE(table.any_up());
}

// Random ups, downs, errors and verdicts (late ones included) over three targets: however they
// interleave, every job is judged exactly once and nothing is left behind once all targets stay
// up and answer.
TEST(DispatchTable, EveryJobIsJudgedOnceUnderRandomFailures) {
  for (std::uint32_t seed = 1; seed <= 50; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    dispatch_table table;
    for (int t = 0; t < 3; ++t) {
      table.add_target("t" + std::to_string(t));
    }
    std::vector<dispatch_table::assignment> outstanding;  // sent, not answered (late ones too)
    std::map<std::uint64_t, int> delivered;
    auto pick = [&](std::size_t n) {
      return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
    };
    std::uint64_t added = 0;
    for (int step = 0; step < 400; ++step) {
      const auto roll = pick(10);
      if (roll < 3 && added < 60) {
        table.add_job();
        ++added;
      } else if (roll < 4) {
        const auto t = pick(3);
        if (table.target(t).up) {
          table.set_down(t);  // its outstanding answers may still arrive (late)
        } else {
          table.set_up(t, 1 + pick(3));
        }
      } else if (!outstanding.empty()) {
        const auto i = pick(outstanding.size());
        const auto a = outstanding[i];
        outstanding.erase(outstanding.begin() + static_cast<std::ptrdiff_t>(i));
        if (roll == 9) {
          table.fail(a.job, a.target);
        } else if (table.complete(a.job, a.target) == kind::accepted) {
          ++delivered[a.job];
        }
      }
      for (const auto& a : table.assign()) {
        outstanding.push_back(a);
      }
    }
    // Drain: everything up, every answer arrives.
    for (int t = 0; t < 3; ++t) {
      table.set_up(t, 2);
    }
    for (int round = 0; round < 1000 && (!outstanding.empty() || table.open_jobs() > 0); ++round) {
      for (const auto& a : table.assign()) {
        outstanding.push_back(a);
      }
      if (outstanding.empty()) {
        break;
      }
      const auto a = outstanding.front();
      outstanding.erase(outstanding.begin());
      if (table.complete(a.job, a.target) == kind::accepted) {
        ++delivered[a.job];
      }
    }
    EXPECT_EQ(table.open_jobs(), 0u);
    EXPECT_EQ(delivered.size(), added);
    for (const auto& [job, times] : delivered) {
      EXPECT_EQ(times, 1) << "job " << job;
    }
    EXPECT_EQ(table.counts().judged, added);
    for (int t = 0; t < 3; ++t) {
      EXPECT_EQ(table.target(t).in_flight, 0u);
    }
  }
}

}  // namespace
}  // namespace leap::actors

// The data-parallel trainer with real processes: rank 0 is this test's trainer, ranks 1..N-1 are
// leap-learner-rank processes, joined over gloo on loopback. Results are compared with one process
// on the same batch and seed.
#include "learner/rank_workers.hpp"
#include "learner/trainer.hpp"
#include "learner/weight_broadcast.hpp"
#include "tests/learner/test_support.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <sys/wait.h>

namespace leap::learner {
namespace {

using ::testing::HasSubstr;
using testing::scratch_dir;

bool has_gloo() {
  const auto b = broadcast_backends();
  return std::find(b.begin(), b.end(), "gloo") != b.end();
}

#define SKIP_WITHOUT_GLOO()                                                                \
  if (!has_gloo()) {                                                                       \
    GTEST_SKIP() << "this build has no c10d gloo (Debian: libgloo-dev): no data-parallel " \
                    "learner on cpu";                                                      \
  }

// Ranks 1..world_size-1 as leap-learner-rank processes (learner::rank_workers), on a free
// loopback port; killed and reaped at scope exit if they are still there.
class rank_processes {
 public:
  rank_processes(int world_size, double timeout_seconds)
      : master_(free_loopback_master().value()),
        workers_(rank_workers::spawn({LEAP_LEARNER_RANK, master_, world_size, {}, timeout_seconds})
                     .value()) {}
  [[nodiscard]] const std::string& master() const { return master_; }
  // Kills rank `r` and waits until it is gone.
  void kill_rank(int r) { workers_.kill(r); }
  // Freezes rank `r` (its sockets stay open); the destructor kills it.
  void stop_rank(int r) const { workers_.signal(r, SIGSTOP); }
  // Waits for every rank to exit; true when all exited with status 0.
  bool all_exit_cleanly() {
    auto s = workers_.wait();
    EXPECT_TRUE(s.ok()) << s.err().message;
    return s.ok();
  }

 private:
  std::string master_;
  rank_workers workers_;
};

// Sequences of 8 to 18 tokens (a 3-token prompt), a little off-policy, advantages of both signs.
update_batch make_batch(const policy& p, std::size_t count, std::uint64_t seed) {
  return testing::scored_batch(
      p, {.count = count,
          .seed = seed,
          .prompt = 3,
          .min_length = 8,
          .length_step = 5,
          .length_period = 11,
          .behaviour_shift = 0.05F,
          .advantage = [](std::size_t i) { return static_cast<float>(i % 3) - 0.8F; }});
}

trainer_options base_options(const std::string& dtype) {
  trainer_options o;
  o.policy.dtype = dtype;
  o.optimizer.lr = 2e-3;
  o.optimizer.weight_decay = 0.1;
  o.optimizer.max_grad_norm = 0.5;
  // Several micro-batches per mini-batch (the longest sequence is 18 tokens), two mini-batches.
  o.batching.micro_batch_tokens = 40;
  o.batching.mini_batches = 2;
  o.loss.kl_coef = 0.05;              // the frozen reference: each rank's copy of the initial model
  o.distributed.bucket_bytes = 8192;  // many buckets for a tiny model
  o.distributed.timeout_seconds = 120;
  return o;
}

// Share of the elements of every parameter that differ by more than `rel` relative (plus a floor):
// a few elements whose gradient nearly cancels may land differently after a reordered sum.
double share_differing(const policy& a, const policy& b, double rel) {
  std::size_t n = 0;
  std::size_t off = 0;
  for (const auto& name : a.parameter_names()) {
    const tensor_map ta{{name, *a.parameter(name)}};
    const tensor_map tb{{name, *b.parameter(name)}};
    const auto va = testing::values(ta, name);
    const auto vb = testing::values(tb, name);
    for (std::size_t i = 0; i < va.size(); ++i) {
      ++n;
      if (std::abs(va[i] - vb[i]) > rel * std::max(std::abs(va[i]), std::abs(vb[i])) + 1e-6) {
        ++off;
      }
    }
  }
  return static_cast<double>(off) / static_cast<double>(n);
}

double max_logprob_difference(const policy& a, const policy& b, const update_batch& batch) {
  std::vector<std::vector<std::int32_t>> ids;
  for (const auto& s : batch.sequences) {
    ids.push_back(s.token_ids);
  }
  const auto la = a.token_logprobs(ids).value();
  const auto lb = b.token_logprobs(ids).value();
  double worst = 0;
  for (std::size_t i = 0; i < la.size(); ++i) {
    for (std::size_t t = 0; t < la[i].size(); ++t) {
      worst = std::max(worst, static_cast<double>(std::abs(la[i][t] - lb[i][t])));
    }
  }
  return worst;
}

TEST(DataParallel, TwoAndThreeRanksMatchOneProcess) {
  SKIP_WITHOUT_GLOO();
  for (const std::string dtype : {"float32", "bfloat16"}) {
    SCOPED_TRACE(dtype);
    const auto config = testing::tiny_qwen2();
    auto fresh = [&] { return policy::create_random(config, 7, {.dtype = dtype}).value(); };
    const auto b1 = make_batch(fresh(), 7, 100);
    const auto b2 = make_batch(fresh(), 7, 200);
    const auto options = base_options(dtype);

    auto single = trainer::create(fresh(), options);
    ASSERT_TRUE(single.ok()) << single.err().message;
    ASSERT_TRUE(single->update(b1).ok());
    auto single2 = single->update(b2);
    ASSERT_TRUE(single2.ok()) << single2.err().message;
    ASSERT_EQ(single2->optimizer_steps.size(), 2U);

    for (const int world : {2, 3}) {
      SCOPED_TRACE("world_size " + std::to_string(world));
      rank_processes ranks(world, options.distributed.timeout_seconds);
      auto o = options;
      o.distributed.world_size = world;
      o.distributed.master = ranks.master();
      {
        auto dp = trainer::create(fresh(), o);
        ASSERT_TRUE(dp.ok()) << dp.err().message;
        auto r1 = dp->update(b1);
        ASSERT_TRUE(r1.ok()) << r1.err().message;
        auto r2 = dp->update(b2);
        ASSERT_TRUE(r2.ok()) << r2.err().message;
        ASSERT_EQ(r2->optimizer_steps.size(), 2U);
        // Reductions started inside the backward pass (the hooks), not all after it.
        EXPECT_GT(r2->buckets_overlapped, 0);
        const double tol = dtype == "float32" ? 1e-5 : 2e-2;
        for (std::size_t k = 0; k < 2; ++k) {
          const auto& a = single2->optimizer_steps[k];
          const auto& b = r2->optimizer_steps[k];
          EXPECT_NEAR(a.loss, b.loss, tol * (1 + std::abs(a.loss)));
          EXPECT_NEAR(a.grad_norm, b.grad_norm, tol * a.grad_norm);
          EXPECT_NEAR(a.kl, b.kl, tol * (1e-3 + a.kl));
          EXPECT_NEAR(a.entropy, b.entropy, tol * a.entropy);
          EXPECT_EQ(a.tokens, b.tokens);
          EXPECT_EQ(a.trained_tokens, b.trained_tokens);
          EXPECT_EQ(a.sequences, b.sequences);
          EXPECT_EQ(b.optimizer_step, a.optimizer_step);
        }
        EXPECT_GT(r2->summary.kl, 0.0);
        // The updated weights: float32 to rounding; bfloat16 within an ulp or two (the masters
        // are summed in another order, then rounded).
        // bfloat16: elements whose gradient nearly cancels (biases near 0) land elsewhere more
        // often; a missing all-gather would leave about half of them stale.
        const double rel = dtype == "float32" ? 1e-4 : 1.6e-2;
        EXPECT_LT(share_differing(single->current_policy(), dp->current_policy(), rel),
                  dtype == "float32" ? 1e-3 : 2e-2);
        EXPECT_LT(max_logprob_difference(single->current_policy(), dp->current_policy(), b2),
                  dtype == "float32" ? 1e-4 : 5e-2);
      }
      EXPECT_TRUE(ranks.all_exit_cleanly()) << "the ranks end when rank 0's trainer goes away";
    }
  }
}

// Two ranks write the checkpoints of steps 1 and 2; one rank and three ranks each resume from them
// and run step 3, which must match step 3 of one uninterrupted process.
TEST(DataParallel, CheckpointsResumeOnAnotherWorldSize) {
  SKIP_WITHOUT_GLOO();
  scratch_dir dir;
  const auto config = testing::tiny_qwen2();
  const std::string dtype = "bfloat16";
  auto fresh = [&] { return policy::create_random(config, 11, {.dtype = dtype}).value(); };
  const auto b1 = make_batch(fresh(), 6, 300);
  const auto b2 = make_batch(fresh(), 6, 400);
  const auto b3 = make_batch(fresh(), 6, 500);
  auto options = base_options(dtype);

  auto straight = trainer::create(fresh(), options);
  ASSERT_TRUE(straight.ok()) << straight.err().message;
  ASSERT_TRUE(straight->update(b1).ok());
  ASSERT_TRUE(straight->update(b2).ok());
  auto straight3 = straight->update(b3);
  ASSERT_TRUE(straight3.ok()) << straight3.err().message;

  options.checkpoint.dir = dir.sub("two");
  {
    rank_processes ranks(2, options.distributed.timeout_seconds);
    auto o = options;
    o.distributed.world_size = 2;
    o.distributed.master = ranks.master();
    auto dp = trainer::create(fresh(), o);
    ASSERT_TRUE(dp.ok()) << dp.err().message;
    ASSERT_TRUE(dp->update(b1).ok());
    auto r2 = dp->update(b2);
    ASSERT_TRUE(r2.ok()) << r2.err().message;
    EXPECT_EQ(r2->checkpoint_dir, dir.sub("two/step-00000002"));
  }
  // The same format as one process writes: whole optimiser tensors under their names.
  auto opt = read_safetensors(dir.sub("two/step-00000002/optimizer.safetensors"));
  ASSERT_TRUE(opt.ok()) << opt.err().message;
  EXPECT_EQ(opt->count("master/model.norm.weight"), 1U);
  EXPECT_EQ(opt->at("exp_avg/model.embed_tokens.weight").shape,
            (std::vector<std::int64_t>{config.vocab_size, config.hidden_size}));

  for (const int world : {1, 3}) {
    SCOPED_TRACE("resumed on world_size " + std::to_string(world));
    const auto copy = dir.sub("resume-" + std::to_string(world));
    std::filesystem::copy(dir.sub("two"), copy, std::filesystem::copy_options::recursive);
    auto o = options;
    o.checkpoint.dir = copy;
    std::unique_ptr<rank_processes> ranks;
    if (world > 1) {
      ranks = std::make_unique<rank_processes>(world, options.distributed.timeout_seconds);
      o.distributed.world_size = world;
      o.distributed.master = ranks->master();
    }
    auto resumed = trainer::create(fresh(), o);
    ASSERT_TRUE(resumed.ok()) << resumed.err().message;
    EXPECT_EQ(resumed->step(), 2);
    EXPECT_EQ(resumed->optimizer_step(), 4);
    auto r3 = resumed->update(b3);
    ASSERT_TRUE(r3.ok()) << r3.err().message;
    EXPECT_NEAR(r3->summary.loss, straight3->summary.loss,
                2e-2 * (1 + std::abs(straight3->summary.loss)));
    EXPECT_NEAR(r3->summary.grad_norm, straight3->summary.grad_norm,
                2e-2 * straight3->summary.grad_norm);
    EXPECT_LT(share_differing(straight->current_policy(), resumed->current_policy(), 1.6e-2), 1e-3);
  }
}

TEST(DataParallel, AKilledRankFailsRankZerosUpdateWithANamedError) {
  SKIP_WITHOUT_GLOO();
  const auto config = testing::tiny_qwen2();
  auto p = policy::create_random(config, 3).value();
  const auto batch = make_batch(p, 4, 600);
  rank_processes ranks(2, 60);
  auto o = base_options("float32");
  o.distributed.world_size = 2;
  o.distributed.master = ranks.master();
  o.distributed.timeout_seconds = 60;
  auto dp = trainer::create(std::move(p), o);
  ASSERT_TRUE(dp.ok()) << dp.err().message;
  ASSERT_TRUE(dp->update(batch).ok());
  ranks.kill_rank(1);
  auto r = dp->update(batch);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.err().message, HasSubstr("data-parallel"));
  EXPECT_THAT(r.err().message, HasSubstr("(rank 0 of 2)"));
  // The group stays failed: the next call says so at once instead of waiting.
  auto again = dp->update(batch);
  ASSERT_FALSE(again.ok());
  EXPECT_THAT(again.err().message, HasSubstr("failed earlier"));
}

// A rank that stops answering (SIGSTOP) without closing its connections: rank 0's next collective
// ends at the timeout with a named error instead of waiting forever.
TEST(DataParallel, AHungRankFailsRankZerosUpdateAtTheTimeout) {
  SKIP_WITHOUT_GLOO();
  const auto config = testing::tiny_qwen2();
  auto p = policy::create_random(config, 3).value();
  const auto batch = make_batch(p, 4, 700);
  constexpr double timeout = 20;
  rank_processes ranks(2, timeout);
  auto o = base_options("float32");
  o.distributed.world_size = 2;
  o.distributed.master = ranks.master();
  o.distributed.timeout_seconds = timeout;
  auto dp = trainer::create(std::move(p), o);
  ASSERT_TRUE(dp.ok()) << dp.err().message;
  ranks.stop_rank(1);
  const auto start = std::chrono::steady_clock::now();
  auto r = dp->update(batch);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.err().message, HasSubstr("data-parallel"));
  EXPECT_THAT(r.err().message, HasSubstr("(rank 0 of 2)"));
  EXPECT_GE(waited, timeout * 0.9) << "a stopped rank is only noticed by the timeout";
}

TEST(DataParallel, BadOptionsAreRefused) {
  auto p = [] { return policy::create_random(testing::tiny_qwen2(), 1).value(); };
  auto create_with = [&](const distributed_options& d) {
    trainer_options o;
    o.distributed = d;
    return trainer::create(p(), o);
  };
  auto r = create_with({.rank = 0, .world_size = 0});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.err().message, HasSubstr("world_size"));
  r = create_with({.rank = 2, .world_size = 2, .master = "127.0.0.1:1234"});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.err().message, HasSubstr("'rank' 2 is not in [0, 2)"));
  r = create_with({.rank = 1, .world_size = 2, .master = "127.0.0.1:1234"});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.err().message, HasSubstr("run_rank_worker"));
  for (const std::string bad : {"", "localhost", "localhost:0", "host:99999", ":80", "h:x"}) {
    r = create_with({.rank = 0, .world_size = 2, .master = bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.err().message, HasSubstr("'master'")) << bad;
  }
  auto w = run_rank_worker({.rank = 0, .world_size = 2, .master = "127.0.0.1:1234"}, "cpu");
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.err().message, HasSubstr("rank' 0 is the trainer"));
  w = run_rank_worker({.rank = 3, .world_size = 2, .master = "127.0.0.1:1234"}, "cpu");
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.err().message, HasSubstr("is not in [0, 2)"));
}

}  // namespace
}  // namespace leap::learner

namespace leap::learner {
namespace {

// The spawner itself: a rank that exits non-zero is named with its exit status.
TEST(RankWorkers, ARankThatExitsNonZeroIsNamedWithItsRankAndStatus) {
  // No "host:port": leap-learner-rank refuses the options and exits 1.
  auto workers = rank_workers::spawn({LEAP_LEARNER_RANK, "no-port-here", 2, {}, 5});
  ASSERT_TRUE(workers.ok()) << workers.err().message;
  auto s = workers->wait();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.err().message, HasSubstr("rank 1"));
  EXPECT_THAT(s.err().message, HasSubstr("exited with status 1"));
}

TEST(RankWorkers, AMissingExecutableIsNamed) {
  const scratch_dir dir;
  const auto missing = dir.sub("leap-learner-rank");
  auto workers = rank_workers::spawn({missing, "127.0.0.1:1", 2, {}, 5});
  ASSERT_FALSE(workers.ok());
  EXPECT_THAT(workers.err().message, HasSubstr(missing));
}

TEST(RankWorkers, DevicesMustListEveryRank) {
  auto workers = rank_workers::spawn({LEAP_LEARNER_RANK, "127.0.0.1:1", 2, {"cpu"}, 5});
  ASSERT_FALSE(workers.ok());
  EXPECT_THAT(workers.err().message, HasSubstr("1 devices for world_size 2"));
}

// Ranks waiting for a rank 0 that never comes are killed and reaped when their owner goes.
TEST(RankWorkers, DestroyingKillsAndReapsTheRanksStillRunning) {
  SKIP_WITHOUT_GLOO();
  std::vector<pid_t> pids;
  {
    auto workers =
        rank_workers::spawn({LEAP_LEARNER_RANK, free_loopback_master().value(), 3, {}, 300});
    ASSERT_TRUE(workers.ok()) << workers.err().message;
    pids = {workers->pid(1), workers->pid(2)};
    EXPECT_GT(pids[0], 0);
    EXPECT_GT(pids[1], 0);
  }
  for (const pid_t p : pids) {
    // Reaped: the pid is no child of ours any more (waitpid says ECHILD, not "still running").
    EXPECT_EQ(::waitpid(p, nullptr, WNOHANG), -1);
    EXPECT_EQ(errno, ECHILD);
  }
}

TEST(RankWorkers, StopKillsRunningRanksWithoutAnError) {
  SKIP_WITHOUT_GLOO();
  auto workers =
      rank_workers::spawn({LEAP_LEARNER_RANK, free_loopback_master().value(), 2, {}, 300});
  ASSERT_TRUE(workers.ok()) << workers.err().message;
  auto s = workers->stop();
  EXPECT_TRUE(s.ok()) << s.err().message;
  EXPECT_EQ(workers->pid(1), 0);
}

}  // namespace
}  // namespace leap::learner

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
#include <arpa/inet.h>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <optional>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;  // NOLINT(readability-redundant-declaration): posix_spawn's environment

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

// A loopback port bound by this test, by default not listening: a TCPStore client connecting
// there is refused and retries until its timeout (a rank waiting for a rank 0 that never comes),
// and no other process can take the port meanwhile. Listening, it accepts connections (into the
// backlog) that nothing ever answers.
class held_port {
 public:
  enum class mode { bound, listening };
  explicit held_port(mode m = mode::bound) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    auto* generic = reinterpret_cast<sockaddr*>(&addr);  // NOLINT(*-reinterpret-cast): socket API
    EXPECT_EQ(::bind(fd_, generic, sizeof addr), 0) << std::strerror(errno);
    EXPECT_EQ(::getsockname(fd_, generic, &len), 0) << std::strerror(errno);
    port_ = ntohs(addr.sin_port);
    if (m == mode::listening) {
      EXPECT_EQ(::listen(fd_, 8), 0) << std::strerror(errno);
    }
  }
  ~held_port() { ::close(fd_); }
  held_port(const held_port&) = delete;
  held_port& operator=(const held_port&) = delete;
  [[nodiscard]] std::string master() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_;
  int port_ = 0;
};

// Whether something accepts TCP connections at "host:port" right now.
bool accepts_connections(const std::string& master) {
  const auto colon = master.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(std::stoi(master.substr(colon + 1))));
  if (::inet_pton(AF_INET, master.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    return false;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  auto* generic = reinterpret_cast<sockaddr*>(&addr);  // NOLINT(*-reinterpret-cast): socket API
  const bool ok = ::connect(fd, generic, sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// Gone: no such process, or a zombie nobody reaped yet (a container's init may not reap).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) {
    return errno == ESRCH;
  }
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto paren = line.rfind(')');
  return paren == std::string::npos || (paren + 2 < line.size() && line[paren + 2] == 'Z');
}

// Whether process `pid` has a socket open (a rank opens none before connecting to the store).
bool has_socket(pid_t pid) {
  std::error_code ec;
  for (const auto& fd :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    std::error_code link_ec;
    const auto target = std::filesystem::read_symlink(fd.path(), link_ec).string();
    if (target.rfind("socket:", 0) == 0) {
      return true;
    }
  }
  return false;
}

// Polls `done` until it holds or `limit` passes; true when it held.
template <class F>
bool eventually(F done, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// Ranks 1..world_size-1 as leap-learner-rank processes (learner::rank_workers), spawned by rank 0's
// trainer once its store listens (attach); killed and reaped at scope exit if they are still there.
class rank_processes {
 public:
  rank_processes(int world_size, double timeout_seconds)
      : world_size_(world_size), timeout_seconds_(timeout_seconds) {}
  // Makes rank 0's trainer (created with `d`) spawn the ranks.
  void attach(distributed_options& d) {
    d.world_size = world_size_;
    start_ranks_when_listening(d, {LEAP_LEARNER_RANK, "", world_size_, {}, timeout_seconds_},
                               workers_);
  }
  // Kills rank `r` and waits until it is gone.
  void kill_rank(int r) { workers().kill(r); }
  // Freezes rank `r` (its sockets stay open); the destructor kills it.
  void stop_rank(int r) { workers().signal(r, SIGSTOP); }
  // Waits for every rank to exit; true when all exited with status 0.
  bool all_exit_cleanly() {
    auto s = workers().wait();
    EXPECT_TRUE(s.ok()) << s.err().message;
    return s.ok();
  }

 private:
  rank_workers& workers() {
    EXPECT_TRUE(workers_.has_value()) << "the trainer never spawned the ranks";
    if (!workers_) {
      throw std::runtime_error("no ranks");
    }
    return *workers_;
  }
  int world_size_;
  double timeout_seconds_;
  std::optional<rank_workers> workers_;
};

// Sequences of 8 to 18 tokens (a 3-token prompt), a little off-policy, advantages of both signs.
update_batch parallel_batch(const policy& p, std::size_t count, std::uint64_t seed) {
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
    const auto b1 = parallel_batch(fresh(), 7, 100);
    const auto b2 = parallel_batch(fresh(), 7, 200);
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
      ranks.attach(o.distributed);
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

// The off-policy filter on two ranks: which sequences drop and which tokens mask depends on the
// sequence's own rank, while the normaliser after a drop and the ratio quantiles need every rank's
// sequences (the ranks' sums are reduced), so one process's figures must come out.
TEST(DataParallel, OffPolicyFilterMatchesOneProcess) {
  SKIP_WITHOUT_GLOO();
  const auto config = testing::tiny_qwen2();
  auto fresh = [&] { return policy::create_random(config, 7, {.dtype = "float32"}).value(); };
  auto batch = parallel_batch(fresh(), 7, 300);
  for (const std::size_t i : {1U, 4U}) {  // ratio e^1.5 on every token: outside [0.5, 2]
    for (auto& l : batch.sequences[i].behaviour_logprobs) {
      l -= 1.5F;
    }
  }
  batch.sequences[2].staleness.assign(batch.sequences[2].token_ids.size(), 5);
  auto options = base_options("float32");
  options.loss.offpolicy = {
      .mode = offpolicy_mode::drop_sequence, .low = 0.5, .high = 2.0, .max_staleness = 1};
  auto single = trainer::create(fresh(), options);
  ASSERT_TRUE(single.ok()) << single.err().message;
  auto one = single->update(batch);
  ASSERT_TRUE(one.ok()) << one.err().message;
  EXPECT_EQ(one->summary.dropped_sequences, 2);
  EXPECT_GT(one->summary.masked_tokens, 0);
  EXPECT_GT(one->summary.ratio_p95, 2.0);
  rank_processes ranks(2, options.distributed.timeout_seconds);
  auto o = options;
  ranks.attach(o.distributed);
  {
    auto dp = trainer::create(fresh(), o);
    ASSERT_TRUE(dp.ok()) << dp.err().message;
    auto two = dp->update(batch);
    ASSERT_TRUE(two.ok()) << two.err().message;
    ASSERT_EQ(two->optimizer_steps.size(), one->optimizer_steps.size());
    for (std::size_t k = 0; k < one->optimizer_steps.size(); ++k) {
      const auto& a = one->optimizer_steps[k];
      const auto& b = two->optimizer_steps[k];
      EXPECT_NEAR(a.loss, b.loss, 1e-5 * (1 + std::abs(a.loss)));
      EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-5 * a.grad_norm);
      EXPECT_EQ(a.dropped_sequences, b.dropped_sequences);
      EXPECT_EQ(a.masked_tokens, b.masked_tokens);
      EXPECT_NEAR(a.ratio_p5, b.ratio_p5, 1e-5);
      EXPECT_NEAR(a.ratio_p50, b.ratio_p50, 1e-5);
      EXPECT_NEAR(a.ratio_p95, b.ratio_p95, 1e-4);
    }
    EXPECT_LT(max_logprob_difference(single->current_policy(), dp->current_policy(), batch), 1e-4);
  }
  EXPECT_TRUE(ranks.all_exit_cleanly());
}

// Two ranks write the checkpoints of steps 1 and 2; one rank and three ranks each resume from them
// and run step 3, which must match step 3 of one uninterrupted process.
TEST(DataParallel, CheckpointsResumeOnAnotherWorldSize) {
  SKIP_WITHOUT_GLOO();
  scratch_dir dir;
  const auto config = testing::tiny_qwen2();
  const std::string dtype = "bfloat16";
  auto fresh = [&] { return policy::create_random(config, 11, {.dtype = dtype}).value(); };
  const auto b1 = parallel_batch(fresh(), 6, 300);
  const auto b2 = parallel_batch(fresh(), 6, 400);
  const auto b3 = parallel_batch(fresh(), 6, 500);
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
    ranks.attach(o.distributed);
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
      ranks->attach(o.distributed);
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
  const auto batch = parallel_batch(p, 4, 600);
  rank_processes ranks(2, 60);
  auto o = base_options("float32");
  ranks.attach(o.distributed);
  o.distributed.timeout_seconds = 60;
  auto dp = trainer::create(std::move(p), o);
  ASSERT_TRUE(dp.ok()) << dp.err().message;
  ASSERT_TRUE(dp->update(batch).ok());
  // Gloo writes to a dead peer's socket without MSG_NOSIGNAL: unless the group's process ignores
  // SIGPIPE, the update below ends the process (as it once did in CI) instead of failing.
  struct sigaction pipe_action {};
  ASSERT_EQ(::sigaction(SIGPIPE, nullptr, &pipe_action), 0);
  EXPECT_EQ(pipe_action.sa_handler, SIG_IGN);
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
  const auto batch = parallel_batch(p, 4, 700);
  constexpr double timeout = 20;
  rank_processes ranks(2, timeout);
  auto o = base_options("float32");
  ranks.attach(o.distributed);
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

// Rank 0's store binds a port the kernel picks (master port 0), and only then are the other ranks
// spawned, with that bound port: nothing can take the port between its choice and its use.
TEST(DataParallel, RanksAreSpawnedWithThePortRankZerosStoreBound) {
  SKIP_WITHOUT_GLOO();
  auto p = policy::create_random(testing::tiny_qwen2(), 3).value();
  const auto batch = parallel_batch(p, 4, 800);
  rank_processes ranks(2, 120);
  auto o = base_options("float32");
  ranks.attach(o.distributed);
  EXPECT_EQ(o.distributed.master, "127.0.0.1:0");
  std::string bound;
  bool listening = false;
  auto spawn = o.distributed.on_listening;
  o.distributed.on_listening = [&](const std::string& master) {
    bound = master;
    listening = accepts_connections(master);
    return spawn(master);
  };
  {
    auto dp = trainer::create(std::move(p), o);
    ASSERT_TRUE(dp.ok()) << dp.err().message;
    EXPECT_NE(bound, "127.0.0.1:0");
    EXPECT_THAT(bound, ::testing::StartsWith("127.0.0.1:"));
    EXPECT_TRUE(listening) << "the ranks are spawned before the store listens at " << bound;
    auto r = dp->update(batch);
    ASSERT_TRUE(r.ok()) << r.err().message;
  }
  EXPECT_TRUE(ranks.all_exit_cleanly());
}

// A rank that exits before joining (here: a device it cannot parse) fails rank 0's forming within
// moments, naming the rank and its exit status, instead of after the group timeout.
TEST(DataParallel, ARankThatExitsAtStartFailsTheFormingAtOnce) {
  SKIP_WITHOUT_GLOO();
  constexpr double timeout = 600;
  auto o = base_options("float32");
  o.distributed.world_size = 2;
  o.distributed.timeout_seconds = timeout;
  std::optional<rank_workers> workers;
  start_ranks_when_listening(
      o.distributed, {LEAP_LEARNER_RANK, "", 2, {"cpu", "no-such-device"}, timeout}, workers);
  const auto start = std::chrono::steady_clock::now();
  auto dp = trainer::create(policy::create_random(testing::tiny_qwen2(), 3).value(), o);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(dp.ok());
  EXPECT_THAT(dp.err().message, HasSubstr("forming the data-parallel group of 2 ranks"));
  EXPECT_THAT(dp.err().message,
              HasSubstr("data-parallel rank 1 (leap-learner-rank) exited with status 1"));
  // Wide: the rank's own start (loading LibTorch) on a loaded machine, never the timeout.
  EXPECT_LT(waited, timeout / 2);
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
  for (const std::string bad : {"", "localhost", "host:99999", ":80", "h:x", "h:-1"}) {
    r = create_with({.rank = 0, .world_size = 2, .master = bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.err().message, HasSubstr("'master'")) << bad;
  }
  // Port 0 is rank 0's (its store binds a free port); the others need the bound one.
  auto w = run_rank_worker({.rank = 1, .world_size = 2, .master = "127.0.0.1:0"}, "cpu");
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.err().message, HasSubstr("a port in [1, 65535]"));
  w = run_rank_worker({.rank = 0, .world_size = 2, .master = "127.0.0.1:1234"}, "cpu");
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
    const held_port port;
    auto workers = rank_workers::spawn({LEAP_LEARNER_RANK, port.master(), 3, {}, 300});
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

// What `leap run` does on SIGTERM: stop() leaves no rank running.
TEST(RankWorkers, StopKillsRunningRanksWithoutAnError) {
  SKIP_WITHOUT_GLOO();
  const held_port port;
  auto workers = rank_workers::spawn({LEAP_LEARNER_RANK, port.master(), 3, {}, 300});
  ASSERT_TRUE(workers.ok()) << workers.err().message;
  const std::vector<pid_t> pids = {workers->pid(1), workers->pid(2)};
  EXPECT_TRUE(workers->check_running().ok());
  auto s = workers->stop();
  EXPECT_TRUE(s.ok()) << s.err().message;
  EXPECT_EQ(workers->pid(1), 0);
  EXPECT_EQ(workers->pid(2), 0);
  for (const pid_t p : pids) {
    EXPECT_TRUE(process_gone(p)) << "rank pid " << p;
  }
}

// A descriptor the owner opened without close-on-exec does not reach the ranks.
TEST(RankWorkers, RanksInheritNoDescriptorButTheStandardThree) {
  SKIP_WITHOUT_GLOO();
  std::array<int, 2> ends{};
  ASSERT_EQ(::pipe(ends.data()), 0);  // no O_CLOEXEC on purpose
  struct stat info {};
  ASSERT_EQ(::fstat(ends[0], &info), 0);
  const std::string our_pipe = "pipe:[" + std::to_string(info.st_ino) + "]";
  const held_port port;
  auto workers = rank_workers::spawn({LEAP_LEARNER_RANK, port.master(), 2, {}, 300});
  ASSERT_TRUE(workers.ok()) << workers.err().message;
  // posix_spawn returns after the exec: the rank's table is what it inherited (and what it
  // opened since, none of it our pipe).
  const auto fds = std::filesystem::path("/proc") / std::to_string(workers->pid(1)) / "fd";
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(fds)) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(entry.path(), ec);
    EXPECT_NE(target.string(), our_pipe) << entry.path();
    ++seen;
  }
  EXPECT_GE(seen, 3);
  ::close(ends[0]);
  ::close(ends[1]);
  EXPECT_TRUE(workers->stop().ok());
}

// A process that owns ranks is SIGKILLed (it cannot stop them itself): the ranks die with it
// (leap-learner-rank's PR_SET_PDEATHSIG). The owner is this test binary again, running only
// RankWorkersOwner.SpawnsRanksAndWaits, which writes its ranks' pids to a file.
constexpr const char* owner_env = "LEAP_TEST_RANK_OWNER_PIDS";
constexpr const char* owner_master_env = "LEAP_TEST_RANK_OWNER_MASTER";

TEST(RankWorkersOwner, SpawnsRanksAndWaits) {
  const char* out = std::getenv(owner_env);
  if (out == nullptr) {
    GTEST_SKIP() << "only run by RankWorkers.RanksDieWithTheProcessThatSpawnedThem";
  }
  // The parent's store, which listens but never answers: a rank with a socket open has passed its
  // PR_SET_PDEATHSIG (before that, a parent's death is caught by --parent instead) and then waits
  // for an answer, whatever happens to this process.
  const char* master_env = std::getenv(owner_master_env);
  ASSERT_NE(master_env, nullptr);
  const std::string master = master_env;
  auto workers = rank_workers::spawn({LEAP_LEARNER_RANK, master, 3, {}, 300});
  ASSERT_TRUE(workers.ok()) << workers.err().message;
  // Connected (the kernel completes the connection from the backlog, unaccepted).
  ASSERT_TRUE(eventually([&] { return has_socket(workers->pid(1)) && has_socket(workers->pid(2)); },
                         std::chrono::seconds(120)));
  {
    std::ofstream f(std::string(out) + ".tmp");
    f << workers->pid(1) << " " << workers->pid(2) << "\n";
  }
  std::filesystem::rename(std::string(out) + ".tmp", out);
  while (true) {
    ::pause();  // until SIGKILLed
  }
}

TEST(RankWorkers, RanksDieWithTheProcessThatSpawnedThem) {
  SKIP_WITHOUT_GLOO();
  const scratch_dir dir;
  const std::string pids_file = dir.sub("pids");
  std::string self(4096, '\0');
  const auto n = ::readlink("/proc/self/exe", self.data(), self.size());
  ASSERT_GT(n, 0);
  self.resize(static_cast<std::size_t>(n));
  std::vector<std::string> args = {self, "--gtest_filter=RankWorkersOwner.SpawnsRanksAndWaits"};
  // Listening here, not in the owner: the ranks' connections outlive the owner, so only
  // PR_SET_PDEATHSIG ends them.
  const held_port listener(held_port::mode::listening);
  const std::string master = listener.master();
  std::vector<std::string> env = {std::string(owner_env) + "=" + pids_file,
                                  std::string(owner_master_env) + "=" + master};
  for (char** e = environ; *e != nullptr; ++e) {
    env.emplace_back(*e);
  }
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) {
    argv.push_back(a.data());
  }
  argv.push_back(nullptr);
  std::vector<char*> envp;
  envp.reserve(env.size() + 1);
  for (auto& e : env) {
    envp.push_back(e.data());
  }
  envp.push_back(nullptr);
  pid_t owner = 0;
  ASSERT_EQ(::posix_spawn(&owner, self.c_str(), nullptr, nullptr, argv.data(), envp.data()), 0);
  const bool written =
      eventually([&] { return std::filesystem::exists(pids_file); }, std::chrono::seconds(120));
  pid_t rank1 = 0;
  pid_t rank2 = 0;
  std::ifstream(pids_file) >> rank1 >> rank2;
  ::kill(owner, SIGKILL);
  int st = 0;
  ASSERT_EQ(::waitpid(owner, &st, 0), owner);
  ASSERT_TRUE(written) << "the owner process never wrote its ranks' pids";
  ASSERT_GT(rank1, 0);
  ASSERT_GT(rank2, 0);
  EXPECT_TRUE(eventually([&] { return process_gone(rank1) && process_gone(rank2); },
                         std::chrono::seconds(60)))
      << "ranks " << rank1 << " and " << rank2 << " outlived the process that spawned them";
  for (const pid_t p : {rank1, rank2}) {
    ::kill(p, SIGKILL);  // left over only when the expectation failed
  }
}

}  // namespace
}  // namespace leap::learner

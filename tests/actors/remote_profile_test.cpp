// Profiles made on a verifier node reach the orchestrator as a local pool's do: a real node on
// loopback (the real sandbox verifier, KernelBench on the CPU, a stand-in ncu the test can hold)
// behind the guarded middleman, and a dispatcher in a second actor system that hands each profile
// to its local pool's inbox. The turn after a verdict pulls the node's diagnosis, the gate's
// structural term counts it, the store keeps it; a node lost while a profile is due ends the turn's
// wait at once, and a node without profiles makes nothing wait.
#include "actors/group.hpp"
#include "actors/messages.hpp"
#include "actors/node_guard.hpp"
#include "actors/node_protocol.hpp"
#include "actors/remote_verifier.hpp"
#include "actors/scorer.hpp"
#include "actors/store.hpp"
#include "actors/verifier.hpp"
#include "actors/verifier_node.hpp"
#include "orchestrator/reward.hpp"
#include "sandbox/verifier.hpp"
#include "storage/trajectory_store.hpp"
#include "tests/actors/profile_support.hpp"
#include "tests/actors/test_support.hpp"
#include "tests/sandbox/kernelbench_support.hpp"
#include "tests/sandbox/profile_stand_in.hpp"
#include "tests/sandbox/test_support.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace leap::actors {
namespace {

using rp_clock = std::chrono::steady_clock;

// A verifier node on 127.0.0.1 (port 0) as `leap verifier-node` builds it; `profiles`: it sends
// its pool's profiles (verifier.profile in its config).
struct rp_node {
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  caf::io::middleman_actor middleman;
  verifier_actor pool;
  verifier_node_actor node;
  std::uint16_t port = 0;
  bool stopped = false;

  rp_node(sandbox::verifier& verifier, bool profiles,
          const task_table& tasks = testing::profiled_problem_table()) {
    register_message_types(config);
    configure_node_transport(config, {});
    system = std::make_unique<caf::actor_system>(config);
    pool = spawn_verifier_pool(*system, verifier, tasks);
    verifier_node_config nc;
    nc.name = "rp-node";
    nc.slots = 2;
    nc.admitted = std::make_shared<admitted_nodes>();
    if (profiles) {
      nc.profiles = profiles_of(pool);
      nc.profile_summaries = profile_summaries_of(pool);
    }
    guard_settings gs;
    gs.admitted = nc.admitted;
    middleman = spawn_guarded_middleman(*system, gs);
    node = spawn_verifier_node(*system, pool, nc);
    caf::scoped_actor self{*system};
    self->request(middleman, std::chrono::seconds(30), caf::publish_atom_v, std::uint16_t{0},
                  caf::actor_cast<caf::strong_actor_ptr>(node), system->message_types(node),
                  std::string("127.0.0.1"), true)
        .receive([&](std::uint16_t p) { port = p; },
                 [&](caf::error& e) { ADD_FAILURE() << system->render(e); });
  }
  ~rp_node() { stop(); }
  rp_node(const rp_node&) = delete;
  rp_node& operator=(const rp_node&) = delete;

  // The node goes away as a killed one does for its orchestrator: its actor is gone.
  void stop() {
    if (stopped) {
      return;
    }
    stopped = true;
    caf::scoped_actor self{*system};
    self->send_exit(node, caf::exit_reason::user_shutdown);
    self->send_exit(pool, caf::exit_reason::user_shutdown);
    self->send_exit(middleman, caf::exit_reason::kill);
    self->wait_for(node, pool, middleman);
  }
};

// The orchestrator's side: a store, a local pool (no jobs: only its shelves and the store take
// the nodes' profiles) and the dispatcher to one node.
struct rp_orchestrator {
  std::mutex mu;
  std::vector<std::string> logs;
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  decltype(testing::open_store({})) trajectories;
  store_actor store;
  verifier_actor pool;
  verifier_actor dispatcher;

  rp_orchestrator(std::uint16_t port, sandbox::verifier& local,
                  const std::filesystem::path& store_dir, bool take_profiles,
                  const task_table& tasks = testing::profiled_problem_table()) {
    register_message_types(config);
    configure_node_transport(config, {});
    system = std::make_unique<caf::actor_system>(config);
    trajectories = testing::open_store(store_dir);
    store = spawn_store(*system, trajectories);
    verifier_pool_config pc;
    pc.profile_store = store;
    pool = spawn_verifier_pool(*system, local, tasks, pc);
    dispatcher_settings ds;
    ds.nodes = {"127.0.0.1:" + std::to_string(port)};
    ds.log = [this](const log_line& line) {
      std::lock_guard<std::mutex> lock(mu);
      logs.push_back(line.text);
    };
    if (take_profiles) {
      ds.profiles = profile_inbox_of(pool);
    }
    dispatcher = spawn_verifier_dispatcher(*system, pool, ds);
  }
  ~rp_orchestrator() {
    caf::scoped_actor self{*system};
    for (const auto& a : {caf::actor_cast<caf::actor>(dispatcher),
                          caf::actor_cast<caf::actor>(pool), caf::actor_cast<caf::actor>(store)}) {
      self->send_exit(a, caf::exit_reason::user_shutdown);
      self->wait_for(a);
    }
  }
  rp_orchestrator(const rp_orchestrator&) = delete;
  rp_orchestrator& operator=(const rp_orchestrator&) = delete;

  verification_result verify(const std::string& request_id, const std::string& op) {
    return verify_answer(request_id, testing::profiled_problem()->id,
                         sandbox::testing::scale_add_ops_candidate(request_id, op));
  }

  verification_result verify_answer(const std::string& request_id, const std::string& task_id,
                                    const std::string& answer,
                                    std::chrono::minutes patience = std::chrono::minutes(5)) {
    verification_result out;
    caf::scoped_actor self{*system};
    self->request(dispatcher, patience, verify_atom_v,
                  verification_request{request_id, task_id, answer})
        .receive([&](verification_result& r) { out = std::move(r); },
                 [&](caf::error& e) { out.infrastructure_error = system->render(e); });
    return out;
  }

  // What the debug turn after `request_id` pulls (group_services::profiles), waiting at most
  // `wait`; "timed out" when the wait ran out.
  std::string pull(const std::string& request_id, std::chrono::milliseconds wait) {
    std::string out = "unanswered";
    caf::scoped_actor self{*system};
    self->request(profiles_of(pool), wait, profile_atom_v, request_id)
        .receive([&](std::string& text) { out = std::move(text); },
                 [&](caf::error& e) {
                   out = e == caf::sec::request_timeout ? "timed out" : system->render(e);
                 });
    return out;
  }

  // The run's stored profiles once there are `count` of them, or when `wait` ran out: the pool
  // hands a profile to the store actor as it answers the pull, so the write may land just after.
  auto stored_profiles(std::size_t count, std::chrono::seconds wait) {
    const auto deadline = rp_clock::now() + wait;
    auto stored = trajectories->profiles("run");
    while (stored.ok() && stored->size() < count && rp_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      stored = trajectories->profiles("run");
    }
    return stored;
  }

  std::size_t lines_with(const std::string& needle) {
    std::lock_guard<std::mutex> lock(mu);
    std::size_t n = 0;
    for (const auto& l : logs) {
      n += l.find(needle) != std::string::npos ? 1 : 0;
    }
    return n;
  }
};

double rp_seconds_since(rp_clock::time_point start) {
  return std::chrono::duration<double>(rp_clock::now() - start).count();
}

bool rp_torch(std::string* why) {
  return sandbox::testing::python_has_module(sandbox::testing::test_engine_config().python, "torch",
                                             why);
}

TEST(RemoteProfileTest, ANodesProfileReachesTheNextTurnTheGatesTermAndTheStore) {
  std::string why;
  if (!rp_torch(&why)) {
    GTEST_SKIP() << why;
  }
  // The stand-in ncu writes the H200 capture at once, unless the test holds it (a `hold` file).
  sandbox::testing::stand_in_ncu ncu(testing::k_ncu_held_when_asked);
  if (!ncu.why_not().empty()) {
    GTEST_SKIP() << "no stand-in ncu: " << ncu.why_not();
  }
  const auto folder = std::filesystem::path(ncu.path()).parent_path();
  const testing::ncu_release_on_exit guard{folder / "release"};
  auto node_verifier = sandbox::verifier::create(testing::profiling_verifier_config(ncu.path()));
  ASSERT_TRUE(node_verifier.ok()) << node_verifier.err().message;
  auto local_verifier = sandbox::verifier::create(testing::profiling_verifier_config(""));
  ASSERT_TRUE(local_verifier.ok()) << local_verifier.err().message;
  rp_node node(**node_verifier, /*profiles=*/true);
  ASSERT_NE(node.port, 0);
  testing::temp_dir dir;
  rp_orchestrator orch(node.port, **local_verifier, dir.path(), /*take_profiles=*/true);
  ASSERT_TRUE(orch.trajectories);
  auto& sys = *orch.system;
  const auto patience = std::chrono::minutes(5);

  // The next turn: the verdict comes while ncu holds the profile; the pull waits for it.
  std::ofstream(folder / "hold") << "hold\n";
  const auto passed = orch.verify("run/0/train/7/0/0", "+");
  ASSERT_EQ(passed.infrastructure_error, "");
  ASSERT_TRUE(passed.passed) << passed.feedback;
  EXPECT_EQ(passed.feedback.find("Profile of"), std::string::npos) << passed.feedback;
  EXPECT_EQ(orch.lines_with(": connected, 2 slots, profiles"), 1U);
  std::string pulled;
  std::thread puller([&] { pulled = orch.pull("run/0/train/7/0/0", patience); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::filesystem::remove(folder / "hold");
  std::ofstream(folder / "release") << "go\n";
  puller.join();
  EXPECT_EQ(pulled.rfind(passed.feedback + "\n\nProfile of `", 0), 0U) << pulled;
  EXPECT_NE(pulled.find("Profile of `copy_strided`"), std::string::npos) << pulled;

  // The gate's structural term: a group whose pass was profiled on the node.
  reward_config reward;
  reward.kind = reward_kind::binary;
  reward.structural.weights = {0.02, 0.02, 0.02, 0.02, 0.02};
  reward.structural.bound = 1.0;
  advantage_config advantage;
  advantage.kind = advantage_kind::none;
  caf::scoped_actor self{sys};
  group_services services;
  services.generator = testing::rollout0_passes_generator(sys, "remote structural");
  services.verifier = orch.dispatcher;
  services.profiles = profiles_of(orch.pool);
  services.profile_summaries = profile_summaries_of(orch.pool);
  services.profile_wait = std::chrono::duration_cast<std::chrono::milliseconds>(patience);
  services.scorer = spawn_scorer(sys, reward, advantage);
  services.store = orch.store;
  services.parent = testing::reporting_parent(sys, caf::actor_cast<caf::actor>(self));
  group_settings settings;
  settings.run_id = "run";
  settings.key = {0, split_kind::train, 0};
  settings.task = {testing::profiled_problem()->id, "prompt"};
  settings.group_size = 2;
  settings.max_turns = 1;
  settings.local_gate = gate_config{};
  settings.train = false;
  auto gate = spawn_group(sys, settings, services);
  bool done = false;
  self->receive([&](group_done_atom, const group_report&) { done = true; },
                [&](group_failed_atom, const group_key&, const std::string& message) {
                  ADD_FAILURE() << message;
                },
                caf::after(patience) >> [&] { ADD_FAILURE() << "no report"; });
  ASSERT_TRUE(done);
  auto group = orch.trajectories->get_group({"run", 0, split_kind::train, 0});
  ASSERT_TRUE(group.ok()) << group.err().message;
  ASSERT_TRUE(group->has_value());
  const auto& rollouts = (*group)->rollouts;
  ASSERT_EQ(rollouts.size(), 2U);
  ASSERT_TRUE(rollouts[0].outcome.passed());

  // The store holds both passes' profiles (the pulled one's and the group's), made on the node.
  auto stored = orch.stored_profiles(2, std::chrono::seconds(60));
  ASSERT_TRUE(stored.ok()) << stored.err().message;
  ASSERT_EQ(stored->size(), 2U);
  const turn_profile_record* of_group = nullptr;
  for (const auto& p : *stored) {
    EXPECT_FALSE(p.kernels.empty()) << p.note;
    if (p.turn == turn_ref{"run", 0, split_kind::train, 0, 0, 0}) {
      of_group = &p;
    }
  }
  ASSERT_NE(of_group, nullptr);
  const double term = structural_score(reward.structural, of_group->kernels);
  EXPECT_GT(term, 0.0);
  EXPECT_NEAR(rollouts[0].reward, 1.0 + term, 1e-9);
  EXPECT_NEAR(rollouts[1].reward, 0.0, 1e-9);
  // A failure is not profiled under `passing`: its "none" came right behind its verdict.
  const auto start = rp_clock::now();
  EXPECT_EQ(orch.pull("run/0/train/0/1/0", patience), "");
  EXPECT_LT(rp_seconds_since(start), 30.0);
}

// A node lost while its profile is due: the turn waiting for it goes on at once with the
// verdict's own feedback, long before its wait runs out; nothing is stored for it. A node
// without profiles makes no turn wait.
TEST(RemoteProfileTest, ANodeLostWhileAProfileIsDueEndsTheWaitAtOnce) {
  std::string why;
  if (!rp_torch(&why)) {
    GTEST_SKIP() << why;
  }
  sandbox::testing::stand_in_ncu ncu(testing::k_ncu_held_until_released);
  if (!ncu.why_not().empty()) {
    GTEST_SKIP() << "no stand-in ncu: " << ncu.why_not();
  }
  const auto folder = std::filesystem::path(ncu.path()).parent_path();
  const testing::ncu_release_on_exit guard{folder / "release"};
  auto node_verifier = sandbox::verifier::create(testing::profiling_verifier_config(ncu.path()));
  ASSERT_TRUE(node_verifier.ok()) << node_verifier.err().message;
  auto local_verifier = sandbox::verifier::create(testing::profiling_verifier_config(""));
  ASSERT_TRUE(local_verifier.ok()) << local_verifier.err().message;
  testing::temp_dir dir;
  const auto wait = std::chrono::seconds(90);  // far beyond the bound asserted below
  {
    rp_node node(**node_verifier, /*profiles=*/true);
    ASSERT_NE(node.port, 0);
    rp_orchestrator orch(node.port, **local_verifier, dir.path() / "lost", true);
    const auto passed = orch.verify("run/0/train/3/0/0", "+");
    ASSERT_EQ(passed.infrastructure_error, "");
    ASSERT_TRUE(passed.passed) << passed.feedback;
    std::string pulled = "unanswered";
    std::thread puller([&] { pulled = orch.pull("run/0/train/3/0/0", wait); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const auto lost_at = rp_clock::now();
    node.stop();  // ncu still holds the profile
    puller.join();
    const double waited = rp_seconds_since(lost_at);
    EXPECT_EQ(pulled, "");
    EXPECT_LT(waited, 30.0);
    std::printf("the turn went on %.3f s after its node was lost\n", waited);
    std::ofstream(folder / "release") << "go\n";
    auto stored = orch.trajectories->profiles("run");
    ASSERT_TRUE(stored.ok()) << stored.err().message;
    EXPECT_TRUE(stored->empty());
  }
  {
    // verifier.profile off on the node: it agrees to send none, and the turn is answered at once.
    rp_node node(**local_verifier, /*profiles=*/false);
    ASSERT_NE(node.port, 0);
    rp_orchestrator orch(node.port, **local_verifier, dir.path() / "none", true);
    const auto passed = orch.verify("run/0/train/4/0/0", "+");
    ASSERT_TRUE(passed.passed) << passed.feedback << passed.infrastructure_error;
    EXPECT_EQ(orch.lines_with(", profiles"), 0U);
    EXPECT_EQ(orch.pull("run/0/train/4/0/0", std::chrono::seconds(30)), "");
  }
}

// On a GPU with ncu beside nvcc: the same path with nothing stood in. The node verifies a
// KernelBench candidate whose load_inline kernel runs on the GPU, profiles it under the real Nsight
// Compute in its sandbox, and the orchestrator's next turn and store get that profile.
TEST(RemoteProfileGpuTest, ANodesNcuProfileOfALoadInlineKernelReachesTheOrchestrator) {
  std::string why;
  if (!sandbox::testing::gpu_present(&why) || !rp_torch(&why)) {
    GTEST_SKIP() << why;
  }
  auto node_config = testing::profiling_verifier_config("");
  const auto ncu = std::filesystem::path(node_config.engine.nvcc).parent_path() / "ncu";
  if (!std::filesystem::exists(ncu)) {
    GTEST_SKIP() << "no ncu beside nvcc at " << ncu;
  }
  node_config = testing::profiling_verifier_config(ncu.string());
  node_config.engine.kernelbench_device = "cuda";
  node_config.engine.trials = 1;
  node_config.gpus = {0};
  // The extension's build and ncu's replays of a 16M-element kernel: bounds that only end a hang.
  node_config.engine.compile_limits.wall = std::chrono::seconds(600);
  auto node_verifier = sandbox::verifier::create(node_config);
  ASSERT_TRUE(node_verifier.ok()) << node_verifier.err().message;
  auto local_verifier = sandbox::verifier::create(testing::profiling_verifier_config(""));
  ASSERT_TRUE(local_verifier.ok()) << local_verifier.err().message;

  // The scale-add over 16M floats, its candidate's own kernel required.
  auto problem = std::make_shared<sandbox::task>(*testing::profiled_problem());
  problem->id = "kernelbench/level1/2_ScaleAddOnTheGpu";
  problem->own_kernel = sandbox::own_kernel_policy::require;
  const std::string small = "torch.randn(32, 16), torch.randn(32, 16)";
  problem->reference.replace(problem->reference.find(small), small.size(),
                             "torch.randn(1 << 24), torch.randn(1 << 24)");
  auto tasks =
      std::make_shared<std::unordered_map<std::string, std::shared_ptr<const sandbox::task>>>();
  (*tasks)[problem->id] = problem;
  const std::string answer =
      "```python\nimport torch\nfrom torch.utils.cpp_extension import load_inline\n" +
      sandbox::testing::scale_add_cuda_extension("leap_remote_profile_gpu") +
      "class ModelNew(torch.nn.Module):\n    def __init__(self, s):\n        super().__init__()\n"
      "        self.s = s\n    def forward(self, a, b):\n"
      "        return ext.scale_add(a.contiguous(), b.contiguous(), self.s)\n```\n";

  rp_node node(**node_verifier, /*profiles=*/true, tasks);
  ASSERT_NE(node.port, 0);
  testing::temp_dir dir;
  rp_orchestrator orch(node.port, **local_verifier, dir.path(), /*take_profiles=*/true, tasks);
  ASSERT_TRUE(orch.trajectories);
  const auto patience = std::chrono::minutes(10);
  const auto passed =
      orch.verify_answer("run/0/train/5/0/0", problem->id, answer, std::chrono::minutes(10));
  ASSERT_EQ(passed.infrastructure_error, "");
  ASSERT_TRUE(passed.passed) << passed.feedback;
  const std::string pulled = orch.pull("run/0/train/5/0/0", patience);
  if (pulled.find("counters_not_permitted") != std::string::npos ||
      pulled.find("not permitted") != std::string::npos) {
    GTEST_SKIP() << "GPU counters are not permitted here: " << pulled;
  }
  EXPECT_EQ(pulled.rfind(passed.feedback + "\n\nProfile of `scale_add_kernel`", 0), 0U) << pulled;
  auto stored = orch.stored_profiles(1, std::chrono::seconds(60));
  ASSERT_TRUE(stored.ok()) << stored.err().message;
  ASSERT_EQ(stored->size(), 1U);
  const auto& profile = stored->front();
  EXPECT_EQ(profile.turn, (turn_ref{"run", 0, split_kind::train, 5, 0, 0}));
  EXPECT_EQ(profile.source, "ncu") << profile.note;
  ASSERT_EQ(profile.kernels.size(), 1U) << profile.note;
  EXPECT_EQ(profile.kernels[0].name, "scale_add_kernel");
  EXPECT_EQ(profile.kernels[0].bottleneck, "memory-bound");
  EXPECT_GT(profile.kernels[0].duration_ns, 0);
  std::printf("the node's profile, pulled by the next turn:\n%s\n", pulled.c_str());
}

}  // namespace
}  // namespace leap::actors

// Per-turn resume and the chaos drill, end to end: the real `leap run` against a separate `leap
// serve-policy` (scripted backend) on loopback, killed with SIGKILL again and again.
//
// - KilledMoreOftenThanAGroupTakes: each process is killed as soon as it has stored two more
//   finished turns (a group takes at least four), four times in a row; the run still finishes,
//   every turn stored before a kill is in the final groups unchanged (token ids, log-probs,
//   verdict) and was never asked of the server again (a recording proxy in front of the server
//   logs every generation request's X-Request-Id).
// - Chaos.*: the server injects every fault kind at random while the run is killed at random
//   moments and restarted until it finishes; the store then holds exactly what an undisturbed run
//   of the same seed holds. Labelled by its suite name so that it can be left out
//   (--gtest_filter=-Chaos.*, ctest -E Chaos).
#include "e2e_support.hpp"
#include "storage/trajectory_store.hpp"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <regex>
#include <set>
#include <signal.h>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using leap::e2e::clock_type;
using leap::e2e::leap_process;
using leap::e2e::run_leap;
using namespace std::chrono_literals;

const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");

// A scratch folder with four tasks of the suite: two cpp and two python ones (g++ makes a group
// take seconds), or four python ones (quick to verify).
class resume_dir : public leap::e2e::scratch_dir {
 public:
  explicit resume_dir(const std::string& name, bool python_only = false)
      : scratch_dir(name, {"python/flatten", "python/two_sum"}) {
    if (python_only) {
      leap::e2e::copy_suite_tasks(root_, {"python/balanced_brackets", "python/binary_search_left"});
    } else {
      leap::e2e::copy_suite_tasks(root_, {"cpp/axpby", "cpp/prefix_sum_int"});
    }
  }

  // Seeded sampling, so that every turn's answer is a function of the turn alone.
  std::string write_config(const std::string& url, int steps, const std::string& extra = "") const {
    std::ostringstream yaml;
    yaml << "experiment:\n  name: resume\n  seed: 5\n  run_dir: " << (root_ / "run").string()
         << "\n  steps: " << steps << "\n"
         << "data:\n  train: " << (root_ / "suite").string()
         << "\n  validation_fraction: 0.25\n  batch_size: 2\n"
         << "rollout:\n  group_size: 4\n  max_turns: 2\n  sampling:\n    seed: 100\n"
         << "  validation:\n    every: 2\n    n: 2\n    sampling:\n      seed: 900\n"
         << "gate:\n  policy: dcp\n  unit: fraction\n  tau_min: 0.25\n  tau_max: 1.0\n"
         << "learner:\n  kind: record\n"
         << "policy:\n  flavour: vllm\n  model: e2e\n  endpoints: [\"" << url << "\"]\n"
         << "  max_in_flight: 8\n"
         // The wall limit well above the CPU limit (10 s): a looping answer is stopped by its CPU
         // time, whose feedback is the same on an idle machine and a loaded one; by the wall
         // clock, only where the load kept it from 10 s of CPU in 30 s (two runs compared
         // token for token would then differ).
         << extra << "verifier:\n  compile_workers: 1\n  gpu_slots: 0\n  run_timeout_s: 120\n";
    const fs::path path = root_ / "config.yaml";
    std::ofstream(path) << yaml.str();
    return path.string();
  }
  [[nodiscard]] fs::path store() const { return root_ / "run" / "trajectories"; }
};

// `leap serve-policy` with the scripted backend on a free port; `extra` adds flags.
struct policy_server {
  std::unique_ptr<leap_process> process;
  int port = 0;

  policy_server(const fs::path& suite, std::vector<std::string> extra) {
    std::vector<std::string> args = {
        "serve-policy", "--backend", "scripted",     "--suite", suite.string(),      "--port", "0",
        "--seed",       "7",         "--model-name", "e2e",     "--latency-ttft-ms", "100"};
    args.insert(args.end(), extra.begin(), extra.end());
    process = std::make_unique<leap_process>(args, "", leap::e2e::stop_with::sigterm);
    if (auto m = process->wait_for(listening, 60s)) {
      port = std::stoi((*m)[1]);
    }
  }
};

// A loopback proxy in front of the policy server that records the X-Request-Id of every
// generation request it forwards ("<run>/<step>/<split>/<group>/<rollout>/<turn>.<attempt>").
class recording_proxy {
 public:
  explicit recording_proxy(int backend) : backend_(backend) {
    auto forward = [this](const httplib::Request& req, httplib::Response& res) {
      if (req.method == "POST" && req.path.find("/v1/") == 0) {
        std::lock_guard lock(mutex_);
        ids_.push_back(req.get_header_value("X-Request-Id"));
      }
      httplib::Client client("127.0.0.1", backend_);
      client.set_read_timeout(120);
      httplib::Headers headers;
      for (const auto& [name, value] : req.headers) {
        if (name == "X-Request-Id" || name == "Authorization") {
          headers.emplace(name, value);
        }
      }
      auto reply = req.method == "POST" ? client.Post(req.path, headers, req.body,
                                                      req.get_header_value("Content-Type"))
                                        : client.Get(req.path, headers);
      if (!reply) {
        res.status = 502;
        return;
      }
      res.status = reply->status;
      res.set_content(reply->body, reply->get_header_value("Content-Type"));
    };
    server_.Get(".*", forward);
    server_.Post(".*", forward);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~recording_proxy() {
    server_.stop();
    thread_.join();
  }
  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] std::vector<std::string> ids() {
    std::lock_guard lock(mutex_);
    return ids_;
  }

 private:
  int backend_;
  int port_ = -1;
  httplib::Server server_;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<std::string> ids_;
};

// Read-only, beside a live writer: its acknowledged-writes mark may run ahead of the log this
// open reads, which is no loss.
std::unique_ptr<leap::trajectory_store> read_store(const fs::path& path) {
  auto store = leap::trajectory_store::open(path, {.read_only = true, .accept_lost_writes = true});
  return store ? std::move(*store) : nullptr;
}

// The request id of a stored turn, as the orchestrator names it.
std::string turn_id(const leap::group_ref& g, std::uint32_t rollout, std::uint32_t turn) {
  return g.run_id + "/" + std::to_string(g.step) + "/" + leap::to_string(g.split) + "/" +
         std::to_string(g.group_index) + "/" + std::to_string(rollout) + "/" + std::to_string(turn);
}

std::map<std::string, leap::turn_record> partial_turns(const fs::path& store_path) {
  std::map<std::string, leap::turn_record> out;
  auto store = read_store(store_path);
  if (!store) {
    return out;
  }
  auto turns = store->partial_turns("resume");
  if (!turns) {
    return out;
  }
  for (auto& t : *turns) {
    out[turn_id(t.group, t.rollout, t.turn)] = std::move(t.record);
  }
  return out;
}

// Finished turns the store holds: in progress plus those of stored groups.
std::size_t stored_turns(const fs::path& store_path) {
  auto store = read_store(store_path);
  if (!store) {
    return 0;
  }
  std::size_t n = 0;
  if (auto turns = store->partial_turns("resume")) {
    n += turns->size();
  }
  leap::group_query q;
  q.run_id = "resume";
  q.decode.tokens = false;
  (void)store->for_each_group(q, [&](leap::group_record&& g) -> leap::status {
    for (const auto& r : g.rollouts) {
      n += r.turns.size();
    }
    return leap::ok_status();
  });
  return n;
}

std::vector<leap::group_record> stored_groups(const fs::path& store_path) {
  auto store = read_store(store_path);
  if (!store) {
    return {};
  }
  leap::group_query q;
  q.run_id = "resume";
  auto groups = store->groups(q);
  return groups ? *groups : std::vector<leap::group_record>{};
}

bool finished(const std::string& output) {
  return output.find("run 'resume' finished") != std::string::npos;
}

TEST(PerTurnResumeE2E, KilledMoreOftenThanAGroupTakesTheRunStillFinishes) {
  resume_dir dir("turns");
  policy_server server(dir.root() / "suite", {"--tokens-per-s", "3000"});
  ASSERT_GT(server.port, 0) << server.process->output();
  recording_proxy proxy(server.port);
  const auto config = dir.write_config("http://127.0.0.1:" + std::to_string(proxy.port()), 2);

  struct kill_record {
    std::size_t requests_before_restart = 0;  // proxy log length when the next process started
    std::map<std::string, leap::turn_record> turns;  // in progress at the kill
  };
  std::vector<kill_record> kills;
  for (int k = 0; k < 4; ++k) {
    const std::size_t at_start = stored_turns(dir.store());
    leap_process run({"run", config});
    // Two more finished turns stored by this process, then SIGKILL.
    const auto deadline = clock_type::now() + 120s;
    bool progressed = false;
    while (clock_type::now() < deadline && !finished(run.output())) {
      if (stored_turns(dir.store()) >= at_start + 2) {
        progressed = true;
        break;
      }
      run.drain(50);
    }
    ASSERT_FALSE(finished(run.output())) << "the run ended before kill " << k + 1;
    ASSERT_TRUE(progressed) << run.output();
    run.kill9();
    kill_record record;
    record.turns = partial_turns(dir.store());
    record.requests_before_restart = proxy.ids().size();
    kills.push_back(std::move(record));
  }
  const auto last = run_leap({"run", config}, 300s);
  ASSERT_EQ(last.exit_code, 0) << last.output;
  ASSERT_TRUE(finished(last.output)) << last.output;
  std::smatch reused;
  ASSERT_TRUE(std::regex_search(last.output, reused,
                                std::regex(R"((\d+) finished turns of unfinished groups)")))
      << last.output;

  // Every turn in progress at a kill is in the final groups as it was stored.
  std::map<std::string, leap::turn_record> final_turns;
  for (const auto& g : stored_groups(dir.store())) {
    const auto ref = leap::ref_of(g);
    for (const auto& r : g.rollouts) {
      for (std::uint32_t t = 0; t < r.turns.size(); ++t) {
        final_turns[turn_id(ref, r.index, t)] = r.turns[t];
      }
    }
  }
  std::size_t checked = 0;
  const auto requests = proxy.ids();
  for (std::size_t k = 0; k < kills.size(); ++k) {
    for (const auto& [id, turn] : kills[k].turns) {
      SCOPED_TRACE("kill " + std::to_string(k + 1) + ", turn " + id);
      auto found = final_turns.find(id);
      ASSERT_NE(found, final_turns.end());
      EXPECT_EQ(found->second.output_tokens, turn.output_tokens);
      EXPECT_EQ(found->second.output_logprobs, turn.output_logprobs);
      EXPECT_EQ(found->second.input_tokens, turn.input_tokens);
      EXPECT_EQ(found->second.verdict, turn.verdict);
      EXPECT_EQ(found->second.weight_version, turn.weight_version);
      // Never asked of the server again after the kill.
      for (std::size_t i = kills[k].requests_before_restart; i < requests.size(); ++i) {
        EXPECT_NE(requests[i].substr(0, requests[i].rfind('.')), id) << "request " << i;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 0u) << "no kill met a group half-way";
  EXPECT_GE(std::stoul(reused[1]), kills.back().turns.size());
  // Nothing stored twice, nothing left in progress.
  EXPECT_TRUE(partial_turns(dir.store()).empty());
  const auto groups = stored_groups(dir.store());
  std::set<std::tuple<std::uint64_t, int, std::uint32_t>> keys;
  for (const auto& g : groups) {
    keys.insert({g.step, static_cast<int>(g.split), g.group_index});
  }
  EXPECT_EQ(keys.size(), groups.size());
  EXPECT_EQ(groups.size(), 2u * 2u + 1u);  // 2 steps x 2 groups, one validation group
}

// Runs `leap run` to its end, killing it with SIGKILL after the given delays first (a process that
// ends before its kill is not killed; one that fails, as when the faulty server exhausted a turn's
// retries, is restarted like a killed one). Returns the number of processes started.
int run_with_kills(const std::string& config, const std::vector<std::chrono::seconds>& kills,
                   std::string* last_output) {
  int processes = 0;
  for (std::size_t k = 0; k < kills.size() + 6; ++k) {
    leap_process run({"run", config});
    ++processes;
    if (k < kills.size()) {
      const auto code = run.wait(kills[k]);
      if (!code) {
        run.kill9();
        continue;
      }
      if (finished(run.output())) {
        *last_output = run.output();
        return processes;
      }
      continue;
    }
    const auto code = run.wait(240s);
    *last_output = run.output();
    if (code && *code == 0 && finished(run.output())) {
      return processes;
    }
  }
  return processes;
}

using group_map = std::map<std::tuple<std::uint64_t, int, std::uint32_t>, leap::group_record>;

group_map by_key(const std::vector<leap::group_record>& groups) {
  group_map out;
  for (const auto& g : groups) {
    out[{g.step, static_cast<int>(g.split), g.group_index}] = g;
  }
  return out;
}

// The orchestrator's own files of the record learner: one JSON line per training sequence.
std::multiset<std::string> batch_lines(const fs::path& run_dir) {
  std::multiset<std::string> out;
  for (const auto& entry : fs::directory_iterator(run_dir / "batches")) {
    std::istringstream in(leap::e2e::read_file(entry.path()));
    for (std::string line; std::getline(in, line);) {
      out.insert(line);
    }
  }
  return out;
}

// A server that injects every fault kind at random, and kills at random moments: the store ends
// as an undisturbed run of the same seed leaves it.
TEST(Chaos, FaultsAndKillsLeaveTheStoreAnUndisturbedRunLeaves) {
  resume_dir calm("calm", true);
  resume_dir chaos("chaos", true);
  const std::string client = "  request_timeout_s: 1.5\n  retries: 12\n";
  std::string calm_output;
  {
    policy_server server(calm.root() / "suite", {"--tokens-per-s", "4000"});
    ASSERT_GT(server.port, 0) << server.process->output();
    const auto config =
        calm.write_config("http://127.0.0.1:" + std::to_string(server.port), 2, client);
    const auto run = run_leap({"run", config}, 240s);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    calm_output = run.output;
  }
  std::string chaos_output;
  int processes = 0;
  std::string faults_text;
  {
    policy_server server(
        chaos.root() / "suite",
        {"--tokens-per-s", "4000", "--faults",
         "drop=0.05,5xx=0.05,stall=0.03,malformed=0.05,truncate=0.05,abort=0.05,stall_ms=3000,"
         "seed=11"});
    ASSERT_GT(server.port, 0) << server.process->output();
    const auto config =
        chaos.write_config("http://127.0.0.1:" + std::to_string(server.port), 2, client);
    // Kill delays drawn from a fixed seed: random moments, the same in every run of the test.
    std::mt19937 random(20261201);
    std::uniform_int_distribution<int> delay_s(3, 8);
    std::vector<std::chrono::seconds> kills;
    kills.reserve(2);
    for (int k = 0; k < 2; ++k) {
      kills.emplace_back(delay_s(random));
    }
    processes = run_with_kills(config, kills, &chaos_output);
    ASSERT_TRUE(finished(chaos_output)) << chaos_output;
    httplib::Client http("127.0.0.1", server.port);
    http.set_read_timeout(10);
    if (auto metrics = http.Get("/metrics")) {
      faults_text = metrics->body;
    }
  }
  // Every fault kind was injected.
  for (const char* kind : {"drop", "5xx", "stall", "malformed", "truncate", "abort"}) {
    const std::regex injected("leap_policy_faults_injected_total\\{kind=\"" + std::string(kind) +
                              "\"\\} ([1-9]\\d*)");
    EXPECT_TRUE(std::regex_search(faults_text, injected)) << kind << "\n" << faults_text;
  }
  EXPECT_GE(processes, 2) << chaos_output;
  std::printf("chaos: %d processes of `leap run`, faults injected:\n", processes);
  std::istringstream lines(faults_text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("leap_policy_faults_injected_total{", 0) == 0) {
      std::printf("  %s\n", line.c_str());
    }
  }

  const auto calm_groups = by_key(stored_groups(calm.store()));
  const auto chaos_groups = by_key(stored_groups(chaos.store()));
  ASSERT_EQ(calm_groups.size(), 5u);
  ASSERT_EQ(chaos_groups.size(), calm_groups.size());
  for (const auto& [key, want] : calm_groups) {
    SCOPED_TRACE("step " + std::to_string(std::get<0>(key)) + " split " +
                 std::to_string(std::get<1>(key)) + " group " + std::to_string(std::get<2>(key)));
    auto found = chaos_groups.find(key);
    ASSERT_NE(found, chaos_groups.end());
    const auto& got = found->second;
    EXPECT_EQ(got.task_id, want.task_id);
    EXPECT_EQ(got.gate, want.gate);
    EXPECT_EQ(got.n_fail, want.n_fail);
    EXPECT_EQ(got.weight_version, want.weight_version);
    ASSERT_EQ(got.rollouts.size(), want.rollouts.size());
    for (std::size_t r = 0; r < want.rollouts.size(); ++r) {
      const auto& a = got.rollouts[r];
      const auto& b = want.rollouts[r];
      EXPECT_EQ(a.outcome.passed_at_turn, b.outcome.passed_at_turn) << r;
      EXPECT_EQ(a.rank, b.rank) << r;
      EXPECT_NEAR(a.reward, b.reward, 1e-9) << r;
      EXPECT_NEAR(a.advantage, b.advantage, 1e-9) << r;
      ASSERT_EQ(a.turns.size(), b.turns.size()) << r;
      for (std::size_t t = 0; t < b.turns.size(); ++t) {
        // No infrastructure failure stored as a turn: every turn is the model's answer.
        EXPECT_NE(a.turns[t].finish, leap::finish_reason::error) << r << "/" << t;
        EXPECT_EQ(a.turns[t].output_tokens, b.turns[t].output_tokens) << r << "/" << t;
        EXPECT_EQ(a.turns[t].verdict, b.turns[t].verdict) << r << "/" << t;
        EXPECT_EQ(a.turns[t].weight_version, b.turns[t].weight_version) << r << "/" << t;
      }
    }
  }
  // The same steps, and the learner trained on the same sequences.
  auto calm_store = read_store(calm.store());
  auto chaos_store = read_store(chaos.store());
  ASSERT_TRUE(calm_store && chaos_store);
  auto calm_steps = calm_store->steps("resume");
  auto chaos_steps = chaos_store->steps("resume");
  ASSERT_TRUE(calm_steps.ok() && chaos_steps.ok());
  ASSERT_EQ(chaos_steps->size(), calm_steps->size());
  for (std::size_t s = 0; s < calm_steps->size(); ++s) {
    EXPECT_EQ((*chaos_steps)[s].weight_version, (*calm_steps)[s].weight_version);
    EXPECT_EQ((*chaos_steps)[s].counts.groups, (*calm_steps)[s].counts.groups);
    EXPECT_EQ((*chaos_steps)[s].counts.rollouts, (*calm_steps)[s].counts.rollouts);
    EXPECT_EQ((*chaos_steps)[s].counts.passed_rollouts, (*calm_steps)[s].counts.passed_rollouts);
  }
  EXPECT_EQ(batch_lines(chaos.root() / "run"), batch_lines(calm.root() / "run"));
  EXPECT_TRUE(partial_turns(chaos.store()).empty());
}

}  // namespace
